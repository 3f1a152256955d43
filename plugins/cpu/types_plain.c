/* plugins/cpu/types_plain.c — row conversions and dot products of f32, f16, bf16, and the type
 * dispatcher. Activation rows stay f32 for every plain weight type (vec_dot_type = F32): the
 * dot products convert the weight on the fly, which is both exact and bandwidth-bound anyway. */
#include "cpu_internal.h"

static void f32_to_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f32_from_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}
static void f16_to_f32(const void *src, float *dst, int64_t n) {
    (cpu_have_avx2() ? &cpu_vec_avx2 : &cpu_vec_scalar)->f16_to_f32(src, dst, n);
}
static void f16_from_f32(const float *src, void *dst, int64_t n) {
    (cpu_have_avx2() ? &cpu_vec_avx2 : &cpu_vec_scalar)->f32_to_f16(src, dst, n);
}
static void bf16_to_f32(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = cpu_bf16_to_f32(s[i]);
}
static void bf16_from_f32(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = cpu_f32_to_bf16(src[i]);
}

static void dot_f32(int64_t n, float *s, const void *x, const void *y) {
    *s = (cpu_have_avx2() ? &cpu_vec_avx2 : &cpu_vec_scalar)->dot_f32(n, x, y);
}
static void dot_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    *s = cpu_vec_scalar.dot_f32(n, x, y);
}
static void dot_f16(int64_t n, float *s, const void *x, const void *y) {
    *s = (cpu_have_avx2() ? &cpu_vec_avx2 : &cpu_vec_scalar)->dot_f16_f32(n, x, y);
}
static void dot_f16_ref(int64_t n, float *s, const void *x, const void *y) {
    *s = cpu_vec_scalar.dot_f16_f32(n, x, y);
}
static void dot_bf16(int64_t n, float *s, const void *x, const void *y) {
    *s = (cpu_have_avx2() ? &cpu_vec_avx2 : &cpu_vec_scalar)->dot_bf16_f32(n, x, y);
}
static void dot_bf16_ref(int64_t n, float *s, const void *x, const void *y) {
    *s = cpu_vec_scalar.dot_bf16_f32(n, x, y);
}

static const cpu_type_funcs funcs_f32 = {
    /* .to_f32 = */ f32_to_f32,
    /* .from_f32 = */ f32_from_f32,
    /* .vec_dot_type = */ PYG_TYPE_F32,
    /* .vec_dot = */ dot_f32,
    /* .vec_dot_ref = */ dot_f32_ref,
};
static const cpu_type_funcs funcs_f16 = {
    /* .to_f32 = */ f16_to_f32,
    /* .from_f32 = */ f16_from_f32,
    /* .vec_dot_type = */ PYG_TYPE_F32,
    /* .vec_dot = */ dot_f16,
    /* .vec_dot_ref = */ dot_f16_ref,
};
static const cpu_type_funcs funcs_bf16 = {
    /* .to_f32 = */ bf16_to_f32,
    /* .from_f32 = */ bf16_from_f32,
    /* .vec_dot_type = */ PYG_TYPE_F32,
    /* .vec_dot = */ dot_bf16,
    /* .vec_dot_ref = */ dot_bf16_ref,
};

const cpu_type_funcs *cpu_type_funcs_get(int32_t type) {
    switch (type) {
    case PYG_TYPE_F32: return &funcs_f32;
    case PYG_TYPE_F16: return &funcs_f16;
    case PYG_TYPE_BF16: return &funcs_bf16;
    default: break;
    }
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    if (!tr || !tr->is_quantized) return NULL;
    const cpu_type_funcs *q = cpu_quant_funcs_get(type);
    /* a quantized type is usable only when it can at least be read */
    return (q && q->to_f32) ? q : NULL;
}
