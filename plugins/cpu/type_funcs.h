/* plugins/cpu/type_funcs.h — per-type row conversions and dot products used by the CPU ops.
 *
 * Internal to the CPU plugin (hidden visibility). plain types (f32, f16, bf16) are implemented
 * in types_plain.c, quantized types in quants*.c; cpu_type_funcs_get() dispatches between them. */
#ifndef PYGGML_CPU_TYPE_FUNCS_H
#define PYGGML_CPU_TYPE_FUNCS_H

#include <stdint.h>
#include "pyggml/types.h"

typedef struct cpu_type_funcs {
    /* n elements (multiple of the type's block size) of this type -> f32 (required) */
    void (*to_f32)(const void *src, float *dst, int64_t n);
    /* f32 -> this type, ggml's rounding (NULL: the type cannot be produced) */
    void (*from_f32)(const float *src, void *dst, int64_t n);
    /* type an f32 activation row is converted to (with vec_dot_type's from_f32) before vec_dot */
    int32_t vec_dot_type;
    /* *s = dot(x, y) over n elements; x is a row of this type, y a row of vec_dot_type */
    void (*vec_dot)(int64_t n, float *s, const void *x, const void *y);
    /* the same, scalar code only (the reference path); may equal vec_dot */
    void (*vec_dot_ref)(int64_t n, float *s, const void *x, const void *y);
} cpu_type_funcs;

/* NULL for types the CPU plugin cannot handle. Thread-safe, no allocation. */
const cpu_type_funcs *cpu_type_funcs_get(int32_t type);

/* Quantized types only (quants.c); NULL for anything else. */
const cpu_type_funcs *cpu_quant_funcs_get(int32_t type);

#endif
