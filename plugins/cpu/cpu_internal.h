/* plugins/cpu/cpu_internal.h — what the CPU kernels share with each other (not with plugin.c).
 *
 * Every op kernel has the signature cpu_op_fn: it is called on every thread of the pool with
 * the same node; it takes its share of rows from (ith, nth) and must write every element of the
 * node it owns. Kernels never allocate: plan_create sizes the per-thread and shared scratch. */
#ifndef PYGGML_CPU_INTERNAL_H
#define PYGGML_CPU_INTERNAL_H

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include "pyggml/tensor.h"
#include "pyggml/plugin.h" /* pyg_status codes only */
#include "type_funcs.h"
#include "threadpool.h"

#define CPU_ALIGN 64

/* Per-call state handed to a kernel. */
typedef struct cpu_ctx {
    int ith, nth;           /* this thread, thread count */
    int reference;          /* 1: scalar reference kernels only */
    int simd;               /* 1: AVX2+FMA+F16C usable (0 when reference) */
    int isa;                /* QUANT_ISA_* level of the quantized mul_mat kernels */
    char *wdata;            /* per-thread scratch, wsize bytes, 64-aligned */
    size_t wsize;
    char *shared;           /* scratch shared by all threads of this node, 64-aligned */
    size_t shared_size;
    cpu_barrier *barrier;   /* for kernels with phases (mul_mat converts src1 first) */
    volatile int *error;    /* first pyg_status a kernel reported (bad data: index out of range) */
    volatile int *error_node; /* graph index of the node that reported it */
    int node_index;         /* graph index of the node being computed */
    int64_t *counter;       /* work counter of this node, 0 when the node starts (atomic) */
    const void *repack;     /* MUL_MAT: src0 repacked for the kernels (repack.c), or NULL */
} cpu_ctx;

/* Next chunk of a node's dynamically shared work: threads that run ahead (or were not preempted)
 * take more chunks, so a busy machine or uneven tasks (causal attention) do not stall the barrier. */
static inline int64_t cpu_next_chunk(cpu_ctx *ctx) {
    return __atomic_fetch_add(ctx->counter, 1, __ATOMIC_RELAXED);
}

/* Report bad data found while computing (the first report wins; computing goes on). */
static inline void cpu_set_error(cpu_ctx *ctx, int code) {
    int zero = 0;
    if (__atomic_compare_exchange_n(ctx->error, &zero, code, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        *ctx->error_node = ctx->node_index;
}

typedef void (*cpu_op_fn)(const pyg_tensor *node, cpu_ctx *ctx);

/* ---- f16 / bf16 scalar conversions (IEEE round-to-nearest-even, numpy-identical) ---- */
static inline uint16_t cpu_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {                  /* inf or NaN */
        if (x == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        uint32_t r = 0x7c00u + ((x & 0x7fffffu) >> 13);
        if (r == 0x7c00u) r++;
        return (uint16_t)(sign | r | 0x200u);
    }
    if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to inf */
    if (x < 0x38800000u) {                   /* f16 subnormal or zero: units of 2^-24 */
        float a;
        memcpy(&a, &x, 4);
        float t = a * 16777216.0f + 8388608.0f; /* exact scale, then RNE to an integer */
        uint32_t u;
        memcpy(&u, &t, 4);
        return (uint16_t)(sign | (u - 0x4b000000u));
    }
    uint32_t r = x + 0xfffu + ((x >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float cpu_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f);
        memcpy(&x, &f, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static inline uint16_t cpu_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float cpu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- tensor addressing ---- */
static inline char *cpu_row_ptr(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (char *)t->data + i1 * (int64_t)t->nb[1] + i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

/* Share [0, n) among nth threads: [*lo, *hi) for thread ith. */
static inline void cpu_split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    int64_t per = (n + nth - 1) / nth;
    *lo = per * ith < n ? per * ith : n;
    *hi = *lo + per < n ? *lo + per : n;
}

/* Plain element types whose values the row helpers can read/write one by one. */
static inline int cpu_is_float_type(int32_t t) {
    return t == PYG_TYPE_F32 || t == PYG_TYPE_F16 || t == PYG_TYPE_BF16;
}

/* Read row (i1,i2,i3) of t as n = ne0 floats. Returns a pointer straight into t when the row is
 * contiguous f32, else converts into buf (ne0 floats). Works for strided plain rows and for
 * block types whose rows are contiguous. */
const float *cpu_load_row(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3, float *buf);
/* Write ne0 floats into row (i1,i2,i3) of t (any strides for plain types, any type with from_f32
 * for contiguous rows). */
void cpu_store_row(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3, const float *src);
/* Pointer to row (i1,i2,i3) when it is contiguous f32, else NULL (write into a buffer and store). */
static inline float *cpu_row_f32_direct(const pyg_tensor *t, int64_t i1, int64_t i2, int64_t i3) {
    return (t->type == PYG_TYPE_F32 && t->nb[0] == 4) ? (float *)cpu_row_ptr(t, i1, i2, i3) : NULL;
}

/* ---- vector kernels: scalar versions in vec.c, AVX2 versions in vec_avx2.c ---- */
typedef struct cpu_vec_ops {
    float (*dot_f32)(int64_t n, const float *x, const float *y);
    float (*dot_f16_f32)(int64_t n, const uint16_t *x, const float *y);
    float (*dot_bf16_f32)(int64_t n, const uint16_t *x, const float *y);
    void (*add)(int64_t n, float *z, const float *x, const float *y);
    void (*mul)(int64_t n, float *z, const float *x, const float *y);
    void (*scale)(int64_t n, float *z, const float *x, float s, float b);
    void (*silu)(int64_t n, float *z, const float *x);
    void (*gelu)(int64_t n, float *z, const float *x);
    void (*swiglu)(int64_t n, float *z, const float *a, const float *b);
    float (*sum_sq)(int64_t n, const float *x);                      /* sum x^2 */
    float (*max)(int64_t n, const float *x);
    float (*exp_sum)(int64_t n, float *z, const float *x, float m); /* z = exp(x-m), returns sum */
    void (*axpy)(int64_t n, float *y, float a, const float *x);      /* y += a x */
    void (*axpy_f16)(int64_t n, float *y, float a, const uint16_t *x);
    /* rotations: z0 = x0 c - x1 s, z1 = x0 s + x1 c (neox halves; in place allowed) */
    void (*rot)(int64_t n, float *z0, float *z1, const float *x0, const float *x1, const float *c, const float *s);
    /* adjacent pairs: z = x ce + swap_pairs(x) se, with ce = (c, c), se = (-s, s) per pair */
    void (*rot_pairs)(int64_t n, float *z, const float *x, const float *ce, const float *se);
    /* out[j] = dot(x, rows[j]) for j < m (attention scores) */
    void (*dots)(int64_t n, float *out, const float *x, const float *const *rows, int64_t m);
    /* y += sum_j p[j] * rows[j] over m rows of n floats (attention's P.V, y kept in registers) */
    void (*wsum)(int64_t n, float *y, const float *p, const float *const *rows, int64_t m);
    /* dots and wsum for two query rows at once (each row's sums in the same order as the one-row
     * forms, so a row's result does not depend on its pairing): each K or V row is loaded once */
    void (*dots2)(int64_t n, float *out0, float *out1, const float *x0, const float *x1, const float *const *rows,
                  int64_t m);
    void (*wsum2)(int64_t n, float *y0, float *y1, const float *p0, const float *p1, const float *const *rows,
                  int64_t m);
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
} cpu_vec_ops;

extern const cpu_vec_ops cpu_vec_scalar;
extern const cpu_vec_ops cpu_vec_avx2;   /* valid only when cpu_have_avx2() */
int cpu_have_avx2(void);
static inline const cpu_vec_ops *cpu_vec(const cpu_ctx *ctx) {
    return ctx->simd ? &cpu_vec_avx2 : &cpu_vec_scalar;
}

/* Rows of f32 (or of a vec_dot_type) addressed as base + i1*s1 + i2*s2 + i3*s3. */
typedef struct cpu_rows {
    const char *base;
    size_t s1, s2, s3;
} cpu_rows;

/* f32 GEMM on packed panels (gemm_avx2.c) for MUL_MAT: dst[n][m] = sum_k B[n][k] A[m][k] with
 * A = src0 rows (any type with to_f32, rows contiguous) and B = f32 activation rows `b`.
 * Splits M across the threads of ctx. */
void cpu_gemm_f32_avx2(const pyg_tensor *node, cpu_ctx *ctx, const cpu_type_funcs *tf0, const cpu_rows *b);
size_t cpu_gemm_wsize(void); /* per-thread scratch bytes */

/* ---- op kernels ---- */
void cpu_op_cpy(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_binary(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_unary(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_swiglu(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_norm(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_soft_max(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_rope(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_argmax(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_mul_mat(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_get_rows(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_set_rows(const pyg_tensor *node, cpu_ctx *ctx);
void cpu_op_flash_attn(const pyg_tensor *node, cpu_ctx *ctx);

/* ALiBi slope of head h of n_head (1 when max_bias <= 0). */
float cpu_alibi_slope(float max_bias, int64_t h, int64_t n_head);

/* Scratch sizes of the ops that need more than a few rows. */
size_t cpu_mul_mat_shared_size(const pyg_tensor *node, int simd, int reference);
size_t cpu_mul_mat_thread_size(const pyg_tensor *node, int simd, int reference);
size_t cpu_flash_attn_thread_size(const pyg_tensor *node);

#endif
