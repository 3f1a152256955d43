/* tests/quants/quants_capi.c — a tiny exported C API over the CPU plugin's quantized-type
 * kernels (plugins/cpu/quants*.c), compiled by tests/test_quants.py into a test library and
 * called with ctypes. Each entry checks the type and the size first (the checks the plugin's
 * callers make) and returns -1 when they fail, 0 on success. */
#include "quants.h"
#ifdef QUANT_HAVE_X86
#include <immintrin.h>
#endif

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
EXPORT void tq_force_scalar(int on) { quant_cpu_force_scalar(on); }

/* f32 -> f16 -> f32 through the kernels' own conversion helpers */
EXPORT void tq_f32_to_f16(const float *src, uint16_t *dst, long long n) {
    for (long long i = 0; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

EXPORT void tq_f16_to_f32(const uint16_t *src, float *dst, long long n) {
    for (long long i = 0; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

/* out[m*ny + k] = dot(row m of W, activation row k) for m < M, k < ny: a single-threaded
 * mat-vec (ny = 1) or mat-mat over the multi-row kernel in chunks of QUANT_MULTI_MAX
 * (which = 2), else vec_dot / vec_dot_ref (which = 0 / 1) per pair; for bench/quant_dot.py */
EXPORT int tq_mat_mul(int type, int which, long long K, long long M, float *out, const void *W,
                      const void *y, long long y_stride, int ny) {
    const cpu_type_funcs *f = checked(type, K);
    if (!f) return -1;
    const size_t row = pyg_type_row_size(type, K);
    quant_vec_dot_multi_fn multi = cpu_quant_vec_dot_multi_get(type);
    for (long long m = 0; m < M; m++) {
        const void *w = (const char *)W + (size_t)m * row;
        if (which == 2) {
            for (int k = 0; k < ny; k += QUANT_MULTI_MAX) {
                int c = ny - k < QUANT_MULTI_MAX ? ny - k : QUANT_MULTI_MAX;
                multi(K, out + m * ny + k, w, (const char *)y + (size_t)k * (size_t)y_stride, (size_t)y_stride, c);
            }
        } else {
            for (int k = 0; k < ny; k++)
                (which ? f->vec_dot_ref : f->vec_dot)(K, out + m * ny + k, w,
                                                      (const char *)y + (size_t)k * (size_t)y_stride);
        }
    }
    return 0;
}

/* bytes/s ceiling for bench/quant_dot.py: stream-read n bytes (n % 128 == 0) with AVX2 loads */
__attribute__((target("avx2"))) EXPORT long long tq_read_stream(const void *p, long long n) {
#ifdef QUANT_HAVE_X86
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    const __m256i *v = p;
    for (long long i = 0; i < n / 32; i += 4) {
        a0 = _mm256_xor_si256(a0, _mm256_loadu_si256(v + i));
        a1 = _mm256_xor_si256(a1, _mm256_loadu_si256(v + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_loadu_si256(v + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_loadu_si256(v + i + 3));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return _mm256_extract_epi64(a0, 0) ^ _mm256_extract_epi64(a0, 3);
#else
    return 0;
#endif
}

/* the same single-threaded mat-vec over a function with ggml's vec_dot signature
 * (n, s, bs, x, bx, y, by, nrc), for bench/quant_dot.py --peer */
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y,
                                size_t by, int nrc);
EXPORT void tq_mat_vec_ggml(void *fn, long long K, long long M, long long row_bytes, float *out,
                            const void *W, const void *y) {
    ggml_vec_dot_fn f = (ggml_vec_dot_fn)fn;
    for (long long m = 0; m < M; m++) f((int)K, out + m, 0, (const char *)W + m * row_bytes, 0, y, 0, 1);
}
