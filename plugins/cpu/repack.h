/* plugins/cpu/repack.h — the process-wide cache of repacked weights (repack.c). */
#ifndef PYGGML_CPU_REPACK_H
#define PYGGML_CPU_REPACK_H

#include "pyggml/tensor.h"

typedef struct cpu_repack cpu_repack;

/* 1 when MUL_MAT `node` at kernel level `isa` (QUANT_ISA_*) reads its weight from a repacked copy. */
int cpu_repack_eligible(const pyg_tensor *node, int isa);
/* A counted reference to the cache entry of weight `w` (created empty); NULL when out of memory. */
cpu_repack *cpu_repack_acquire(const pyg_tensor *w);
/* The repacked data, filled (or refilled when w's sampled contents changed) now; NULL when out of
 * memory. Call with no compute running on the entry (the plan's compute, before the kernels). */
const void *cpu_repack_get(cpu_repack *r, const pyg_tensor *w);
void cpu_repack_release(cpu_repack *r); /* NULL is a no-op */

#endif
