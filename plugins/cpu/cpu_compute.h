/* plugins/cpu/cpu_compute.h — the CPU kernels as a library inside the plugin.
 *
 * plugin.c wraps these in the ABI. tests/plugins/testdev (a GPU-like test plugin) compiles the
 * same sources so that its results are bitwise identical to the CPU plugin's. Nothing here is
 * exported from the shared library (hidden visibility). Tensors are read through node->data. */
#ifndef PYGGML_CPU_COMPUTE_H
#define PYGGML_CPU_COMPUTE_H

#include <stddef.h>
#include "pyggml/tensor.h"

typedef struct cpu_plan cpu_plan;

typedef struct cpu_options {
    int n_threads;  /* >= 1 */
    int kernels;    /* CPU_KERNELS_*: 0 auto, 1 plain scalar reference kernels only, 2 / 3 the
                       quantized mul_mat kernels at most at the AVX2 / AVX-512 level (avx2 forces
                       the AVX2 path on an AVX-512 CPU) */
    int no_repack;  /* 1: no repacked copies of q4_0/q4_K weights (device option repack=0) */
} cpu_options;

#define CPU_KERNELS_AUTO 0
#define CPU_KERNELS_REFERENCE 1
#define CPU_KERNELS_AVX2 2
#define CPU_KERNELS_AVX512 3
/* Highest level this CPU runs: CPU_KERNELS_AVX512, CPU_KERNELS_AVX2, or CPU_KERNELS_REFERENCE
 * (neither: scalar kernels only). */
int cpu_kernels_available(void);

/* 1 when the CPU kernels compute this node (op, types, shapes, strides). */
int cpu_supports_op(const pyg_tensor *node);

/* Derive a plan (scratch sizes, kernel choice). Returns 0 on success; otherwise a pyg_status code
 * with a message in err[errlen]. The graph must outlive the plan. */
int cpu_plan_create(const pyg_graph *graph, const cpu_options *opt, cpu_plan **out,
                    char *err, size_t errlen);
/* Run every non-view node in order on the persistent thread pool. 0 or a pyg_status code. */
int cpu_plan_compute(cpu_plan *plan, char *err, size_t errlen);
void cpu_plan_destroy(cpu_plan *plan); /* NULL is a no-op */
/* New options for later computes (thread count, kernels); resizes the scratch. 0 or a code. */
int cpu_plan_set_options(cpu_plan *plan, const cpu_options *opt, char *err, size_t errlen);
/* Number of online CPUs (>= 1): the default thread count. */
int cpu_default_threads(void);

#endif
