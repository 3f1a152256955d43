/* plugins/cpu/vec.c — scalar vector kernels: the reference path, and the fallback on CPUs
 * without AVX2. Sums accumulate in f64: the reference is meant to be the accurate one. */
#include <math.h>
#include "cpu_internal.h"

static float s_dot_f32(int64_t n, const float *x, const float *y) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    return (float)s;
}
static float s_dot_f16_f32(int64_t n, const uint16_t *x, const float *y) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)cpu_f16_to_f32(x[i]) * y[i];
    return (float)s;
}
static float s_dot_bf16_f32(int64_t n, const uint16_t *x, const float *y) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)cpu_bf16_to_f32(x[i]) * y[i];
    return (float)s;
}
static void s_add(int64_t n, float *z, const float *x, const float *y) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] + y[i];
}
static void s_mul(int64_t n, float *z, const float *x, const float *y) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] * y[i];
}
static void s_scale(int64_t n, float *z, const float *x, float s, float b) {
    for (int64_t i = 0; i < n; i++) z[i] = x[i] * s + b;
}
static inline float silu1(float x) { return x / (1.0f + expf(-x)); }
static void s_silu(int64_t n, float *z, const float *x) {
    for (int64_t i = 0; i < n; i++) z[i] = silu1(x[i]);
}
static void s_gelu(int64_t n, float *z, const float *x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        z[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}
static void s_swiglu(int64_t n, float *z, const float *a, const float *b) {
    for (int64_t i = 0; i < n; i++) z[i] = silu1(a[i]) * b[i];
}
static float s_sum_sq(int64_t n, const float *x) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return (float)s;
}
static float s_max(int64_t n, const float *x) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}
static float s_exp_sum(int64_t n, float *z, const float *x, float m) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        z[i] = expf(x[i] - m);
        s += z[i];
    }
    return (float)s;
}
static void s_axpy(int64_t n, float *y, float a, const float *x) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static void s_axpy_f16(int64_t n, float *y, float a, const uint16_t *x) {
    for (int64_t i = 0; i < n; i++) y[i] += a * cpu_f16_to_f32(x[i]);
}
static void s_rot(int64_t n, float *z0, float *z1, const float *x0, const float *x1, const float *c, const float *s) {
    for (int64_t i = 0; i < n; i++) {
        const float a = x0[i], b = x1[i];
        z0[i] = a * c[i] - b * s[i];
        z1[i] = a * s[i] + b * c[i];
    }
}
static void s_rot_pairs(int64_t n, float *z, const float *x, const float *ce, const float *se) {
    for (int64_t i = 0; i + 1 < n; i += 2) {
        const float a = x[i], b = x[i + 1];
        z[i] = a * ce[i] + b * se[i];
        z[i + 1] = b * ce[i + 1] + a * se[i + 1];
    }
}
static void s_dots(int64_t n, float *out, const float *x, const float *const *rows, int64_t m) {
    for (int64_t j = 0; j < m; j++) out[j] = s_dot_f32(n, x, rows[j]);
}
static void s_wsum(int64_t n, float *y, const float *p, const float *const *rows, int64_t m) {
    for (int64_t j = 0; j < m; j++)
        if (p[j] != 0.0f) s_axpy(n, y, p[j], rows[j]);
}
static void s_dots2(int64_t n, float *o0, float *o1, const float *x0, const float *x1, const float *const *rows,
                    int64_t m) {
    s_dots(n, o0, x0, rows, m);
    s_dots(n, o1, x1, rows, m);
}
static void s_wsum2(int64_t n, float *y0, float *y1, const float *p0, const float *p1, const float *const *rows,
                    int64_t m) {
    s_wsum(n, y0, p0, rows, m);
    s_wsum(n, y1, p1, rows, m);
}
static void s_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = cpu_f16_to_f32(x[i]);
}
static void s_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = cpu_f32_to_f16(x[i]);
}

const cpu_vec_ops cpu_vec_scalar = {
    /* .dot_f32 = */ s_dot_f32,
    /* .dot_f16_f32 = */ s_dot_f16_f32,
    /* .dot_bf16_f32 = */ s_dot_bf16_f32,
    /* .add = */ s_add,
    /* .mul = */ s_mul,
    /* .scale = */ s_scale,
    /* .silu = */ s_silu,
    /* .gelu = */ s_gelu,
    /* .swiglu = */ s_swiglu,
    /* .sum_sq = */ s_sum_sq,
    /* .max = */ s_max,
    /* .exp_sum = */ s_exp_sum,
    /* .axpy = */ s_axpy,
    /* .axpy_f16 = */ s_axpy_f16,
    /* .rot = */ s_rot,
    /* .rot_pairs = */ s_rot_pairs,
    /* .dots = */ s_dots,
    /* .wsum = */ s_wsum,
    /* .dots2 = */ s_dots2,
    /* .wsum2 = */ s_wsum2,
    /* .f16_to_f32 = */ s_f16_to_f32,
    /* .f32_to_f16 = */ s_f32_to_f16,
};
