/* tests/quants/quants_capi.c — a tiny exported C API over the CPU plugin's quantized-type
 * kernels (plugins/cpu/quants*.c), compiled by tests/test_quants.py into a test library and
 * called with ctypes. Each entry checks the type and the size first (the checks the plugin's
 * callers make) and returns -1 when they fail, 0 on success. */
#include "quants.h"

#define EXPORT __attribute__((visibility("default")))

static const cpu_type_funcs *checked(int type, long long n) {
    const pyg_type_traits *t = pyg_type_get_traits(type);
    const cpu_type_funcs *f = cpu_quant_funcs_get(type);
    if (!t || !f || n <= 0 || n % t->block_size != 0) return NULL;
    return f;
}

EXPORT int tq_to_f32(int type, const void *src, float *dst, long long n) {
    const cpu_type_funcs *f = checked(type, n);
    if (!f) return -1;
    f->to_f32(src, dst, n);
    return 0;
}

EXPORT int tq_from_f32(int type, const float *src, void *dst, long long n) {
    const cpu_type_funcs *f = checked(type, n);
    if (!f || !f->from_f32) return -1;
    f->from_f32(src, dst, n);
    return 0;
}

EXPORT int tq_vec_dot_type(int type) {
    const cpu_type_funcs *f = cpu_quant_funcs_get(type);
    return f ? f->vec_dot_type : -1;
}

/* which: 0 = vec_dot (the dispatched kernel), 1 = vec_dot_ref, 2 = multi-row kernel */
EXPORT int tq_vec_dot(int type, int which, long long n, float *s, const void *x, const void *y,
                      long long y_stride, int ny) {
    const cpu_type_funcs *f = checked(type, n);
    if (!f) return -1;
    if (which == 2) {
        quant_vec_dot_multi_fn m = cpu_quant_vec_dot_multi_get(type);
        if (!m || ny < 1 || ny > QUANT_MULTI_MAX) return -1;
        m(n, s, x, y, (size_t)y_stride, ny);
        return 0;
    }
    for (int k = 0; k < ny; k++) {
        const void *yk = (const char *)y + (size_t)k * (size_t)y_stride;
        (which ? f->vec_dot_ref : f->vec_dot)(n, s + k, x, yk);
    }
    return 0;
}

EXPORT int tq_has_avx2(void) { return quant_cpu_has_avx2(); }

/* f32 -> f16 -> f32 through the kernels' own conversion helpers */
EXPORT void tq_f32_to_f16(const float *src, uint16_t *dst, long long n) {
    for (long long i = 0; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

EXPORT void tq_f16_to_f32(const uint16_t *src, float *dst, long long n) {
    for (long long i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}
