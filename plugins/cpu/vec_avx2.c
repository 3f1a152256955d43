/* plugins/cpu/vec_avx2.c — AVX2+FMA+F16C vector kernels. The whole file is compiled for those
 * extensions; nothing here may run before cpu_have_avx2() said yes (run-time dispatch keeps the
 * library loadable on any x86-64). Other architectures get the scalar table under this name. */
#include <math.h>
#include "cpu_internal.h"

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

int cpu_have_avx2(void) {
    static int have = -1;
    if (have < 0) {
        __builtin_cpu_init();
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    }
    return have;
}

static inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

static inline __m256 load_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256 load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* exp(x), relative error ~2 ulp; exact 0 below -87.3, clamps above 88.7 */
static inline __m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500E-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n in two halves so that n = 128 (x near the top) does not overflow the exponent */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
    return _mm256_andnot_ps(under, p);
}

static inline __m256 silu8(__m256 x) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static float v_dot_f32(int64_t n, const float *x, const float *y) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

static float v_dot_f16_f32(int64_t n, const uint16_t *x, const float *y) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_f16(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += cpu_f16_to_f32(x[i]) * y[i];
    return s;
}

static float v_dot_bf16_f32(int64_t n, const uint16_t *x, const float *y) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(load_bf16(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_bf16(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_bf16(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += cpu_bf16_to_f32(x[i]) * y[i];
    return s;
}

static void v_add(int64_t n, float *z, const float *x, const float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(z + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) z[i] = x[i] + y[i];
}
static void v_mul(int64_t n, float *z, const float *x, const float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(z + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) z[i] = x[i] * y[i];
}
static void v_scale(int64_t n, float *z, const float *x, float s, float b) {
    __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(z + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), vs, vb));
    for (; i < n; i++) z[i] = x[i] * s + b;
}

/* tails go through a zero-padded 8-lane buffer so every element uses the same formula */
#define TAIL8(n, i, body)                                           \
    if (i < n) {                                                    \
        float tz[8] = { 0 }, tx[8] = { 0 }, ty[8] = { 0 };          \
        int64_t r = n - i;                                          \
        (void)ty;                                                   \
        body                                                        \
    }

static void v_silu(int64_t n, float *z, const float *x) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(z + i, silu8(_mm256_loadu_ps(x + i)));
    TAIL8(n, i, {
        memcpy(tx, x + i, (size_t)r * 4);
        _mm256_storeu_ps(tz, silu8(_mm256_loadu_ps(tx)));
        memcpy(z + i, tz, (size_t)r * 4);
    })
}

static inline __m256 gelu8(__m256 x) {
    const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f);
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 y = _mm256_mul_ps(c, _mm256_fmadd_ps(k, x3, x));
    /* 0.5 (1 + tanh y) = 1 - 1/(exp(2y)+1) = sigmoid(2y) */
    __m256 e = exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), y));
    __m256 sig = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_mul_ps(x, sig);
}

static void v_gelu(int64_t n, float *z, const float *x) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(z + i, gelu8(_mm256_loadu_ps(x + i)));
    TAIL8(n, i, {
        memcpy(tx, x + i, (size_t)r * 4);
        _mm256_storeu_ps(tz, gelu8(_mm256_loadu_ps(tx)));
        memcpy(z + i, tz, (size_t)r * 4);
    })
}

static void v_swiglu(int64_t n, float *z, const float *a, const float *b) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(z + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(a + i)), _mm256_loadu_ps(b + i)));
    TAIL8(n, i, {
        memcpy(tx, a + i, (size_t)r * 4);
        memcpy(ty, b + i, (size_t)r * 4);
        _mm256_storeu_ps(tz, _mm256_mul_ps(silu8(_mm256_loadu_ps(tx)), _mm256_loadu_ps(ty)));
        memcpy(z + i, tz, (size_t)r * 4);
    })
}

static float v_sum_sq(int64_t n, const float *x) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 u = _mm256_loadu_ps(x + i), v = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_fmadd_ps(u, u, a0);
        a1 = _mm256_fmadd_ps(v, v, a1);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 u = _mm256_loadu_ps(x + i);
        a0 = _mm256_fmadd_ps(u, u, a0);
    }
    float s = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += x[i] * x[i];
    return s;
}

static float v_max(int64_t n, const float *x) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

static float v_exp_sum(int64_t n, float *z, const float *x, float m) {
    __m256 vm = _mm256_set1_ps(m), acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(z + i, e);
        acc = _mm256_add_ps(acc, e);
    }
    float s = hsum(acc);
    TAIL8(n, i, {
        for (int j = 0; j < 8; j++) tx[j] = j < r ? x[i + j] - m : -INFINITY;
        _mm256_storeu_ps(tz, exp8(_mm256_loadu_ps(tx)));
        for (int j = 0; j < r; j++) {
            z[i + j] = tz[j];
            s += tz[j];
        }
    })
    return s;
}

static void v_axpy(int64_t n, float *y, float a, const float *x) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
static void v_axpy_f16(int64_t n, float *y, float a, const uint16_t *x) {
    __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_f16(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * cpu_f16_to_f32(x[i]);
}
static void v_rot(int64_t n, float *z0, float *z1, const float *x0, const float *x1, const float *c, const float *s) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 a = _mm256_loadu_ps(x0 + i), b = _mm256_loadu_ps(x1 + i);
        const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        _mm256_storeu_ps(z0 + i, _mm256_fmsub_ps(a, cv, _mm256_mul_ps(b, sv)));
        _mm256_storeu_ps(z1 + i, _mm256_fmadd_ps(a, sv, _mm256_mul_ps(b, cv)));
    }
    for (; i < n; i++) {
        const float a = x0[i], b = x1[i];
        z0[i] = a * c[i] - b * s[i];
        z1[i] = a * s[i] + b * c[i];
    }
}
static void v_rot_pairs(int64_t n, float *z, const float *x, const float *ce, const float *se) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 sw = _mm256_permute_ps(v, 0xB1); /* (x1, x0, x3, x2, ...) */
        _mm256_storeu_ps(z + i, _mm256_fmadd_ps(v, _mm256_loadu_ps(ce + i), _mm256_mul_ps(sw, _mm256_loadu_ps(se + i))));
    }
    for (; i + 1 < n; i += 2) {
        const float a = x[i], b = x[i + 1];
        z[i] = a * ce[i] + b * se[i];
        z[i + 1] = b * ce[i + 1] + a * se[i + 1];
    }
}
static void v_dots(int64_t n, float *out, const float *x, const float *const *rows, int64_t m) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {
        const float *r0 = rows[j], *r1 = rows[j + 1], *r2 = rows[j + 2], *r3 = rows[j + 3];
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 xv = _mm256_loadu_ps(x + i);
            a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r0 + i), a0);
            a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r1 + i), a1);
            a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r2 + i), a2);
            a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(r3 + i), a3);
        }
        /* four horizontal sums at once */
        __m256 h01 = _mm256_hadd_ps(a0, a1), h23 = _mm256_hadd_ps(a2, a3);
        __m256 h = _mm256_hadd_ps(h01, h23);
        __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        float t[4];
        _mm_storeu_ps(t, s4);
        for (; i < n; i++) {
            t[0] += x[i] * r0[i];
            t[1] += x[i] * r1[i];
            t[2] += x[i] * r2[i];
            t[3] += x[i] * r3[i];
        }
        out[j] = t[0], out[j + 1] = t[1], out[j + 2] = t[2], out[j + 3] = t[3];
    }
    for (; j < m; j++) out[j] = v_dot_f32(n, x, rows[j]);
}
static void v_wsum(int64_t n, float *y, const float *p, const float *const *rows, int64_t m) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(y + i), a1 = _mm256_loadu_ps(y + i + 8);
        __m256 a2 = _mm256_loadu_ps(y + i + 16), a3 = _mm256_loadu_ps(y + i + 24);
        for (int64_t j = 0; j < m; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            const float *r = rows[j] + i;
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 24), a3);
        }
        _mm256_storeu_ps(y + i, a0);
        _mm256_storeu_ps(y + i + 8, a1);
        _mm256_storeu_ps(y + i + 16, a2);
        _mm256_storeu_ps(y + i + 24, a3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(y + i);
        for (int64_t j = 0; j < m; j++) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(rows[j] + i), a0);
        _mm256_storeu_ps(y + i, a0);
    }
    for (; i < n; i++) {
        float a = y[i];
        for (int64_t j = 0; j < m; j++) a += p[j] * rows[j][i];
        y[i] = a;
    }
}
/* four horizontal sums (the order v_dots uses) */
static inline __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}
static void v_dots2(int64_t n, float *o0, float *o1, const float *x0, const float *x1, const float *const *rows,
                    int64_t m) {
    int64_t j = 0;
    for (; j + 4 <= m; j += 4) {
        const float *r0 = rows[j], *r1 = rows[j + 1], *r2 = rows[j + 2], *r3 = rows[j + 3];
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) {
            const __m256 k0 = _mm256_loadu_ps(r0 + i), k1 = _mm256_loadu_ps(r1 + i);
            const __m256 k2 = _mm256_loadu_ps(r2 + i), k3 = _mm256_loadu_ps(r3 + i);
            const __m256 xa = _mm256_loadu_ps(x0 + i), xb = _mm256_loadu_ps(x1 + i);
            a0 = _mm256_fmadd_ps(xa, k0, a0);
            a1 = _mm256_fmadd_ps(xa, k1, a1);
            a2 = _mm256_fmadd_ps(xa, k2, a2);
            a3 = _mm256_fmadd_ps(xa, k3, a3);
            b0 = _mm256_fmadd_ps(xb, k0, b0);
            b1 = _mm256_fmadd_ps(xb, k1, b1);
            b2 = _mm256_fmadd_ps(xb, k2, b2);
            b3 = _mm256_fmadd_ps(xb, k3, b3);
        }
        float t[4], u[4];
        _mm_storeu_ps(t, hsum4(a0, a1, a2, a3));
        _mm_storeu_ps(u, hsum4(b0, b1, b2, b3));
        for (; i < n; i++) {
            t[0] += x0[i] * r0[i], t[1] += x0[i] * r1[i], t[2] += x0[i] * r2[i], t[3] += x0[i] * r3[i];
            u[0] += x1[i] * r0[i], u[1] += x1[i] * r1[i], u[2] += x1[i] * r2[i], u[3] += x1[i] * r3[i];
        }
        for (int k = 0; k < 4; k++) o0[j + k] = t[k], o1[j + k] = u[k];
    }
    for (; j < m; j++) {
        o0[j] = v_dot_f32(n, x0, rows[j]);
        o1[j] = v_dot_f32(n, x1, rows[j]);
    }
}
static void v_wsum2(int64_t n, float *y0, float *y1, const float *p0, const float *p1, const float *const *rows,
                    int64_t m) {
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 a0 = _mm256_loadu_ps(y0 + i), a1 = _mm256_loadu_ps(y0 + i + 8);
        __m256 a2 = _mm256_loadu_ps(y0 + i + 16), a3 = _mm256_loadu_ps(y0 + i + 24);
        __m256 b0 = _mm256_loadu_ps(y1 + i), b1 = _mm256_loadu_ps(y1 + i + 8);
        __m256 b2 = _mm256_loadu_ps(y1 + i + 16), b3 = _mm256_loadu_ps(y1 + i + 24);
        for (int64_t j = 0; j < m; j++) {
            const __m256 pa = _mm256_set1_ps(p0[j]), pb = _mm256_set1_ps(p1[j]);
            const float *r = rows[j] + i;
            const __m256 v0 = _mm256_loadu_ps(r), v1 = _mm256_loadu_ps(r + 8);
            const __m256 v2 = _mm256_loadu_ps(r + 16), v3 = _mm256_loadu_ps(r + 24);
            a0 = _mm256_fmadd_ps(pa, v0, a0);
            a1 = _mm256_fmadd_ps(pa, v1, a1);
            a2 = _mm256_fmadd_ps(pa, v2, a2);
            a3 = _mm256_fmadd_ps(pa, v3, a3);
            b0 = _mm256_fmadd_ps(pb, v0, b0);
            b1 = _mm256_fmadd_ps(pb, v1, b1);
            b2 = _mm256_fmadd_ps(pb, v2, b2);
            b3 = _mm256_fmadd_ps(pb, v3, b3);
        }
        _mm256_storeu_ps(y0 + i, a0);
        _mm256_storeu_ps(y0 + i + 8, a1);
        _mm256_storeu_ps(y0 + i + 16, a2);
        _mm256_storeu_ps(y0 + i + 24, a3);
        _mm256_storeu_ps(y1 + i, b0);
        _mm256_storeu_ps(y1 + i + 8, b1);
        _mm256_storeu_ps(y1 + i + 16, b2);
        _mm256_storeu_ps(y1 + i + 24, b3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a0 = _mm256_loadu_ps(y0 + i), b0 = _mm256_loadu_ps(y1 + i);
        for (int64_t j = 0; j < m; j++) {
            const __m256 v = _mm256_loadu_ps(rows[j] + i);
            a0 = _mm256_fmadd_ps(_mm256_set1_ps(p0[j]), v, a0);
            b0 = _mm256_fmadd_ps(_mm256_set1_ps(p1[j]), v, b0);
        }
        _mm256_storeu_ps(y0 + i, a0);
        _mm256_storeu_ps(y1 + i, b0);
    }
    for (; i < n; i++) {
        float a = y0[i], b = y1[i];
        for (int64_t j = 0; j < m; j++) a += p0[j] * rows[j][i], b += p1[j] * rows[j][i];
        y0[i] = a;
        y1[i] = b;
    }
}
static void v_f16_to_f32(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16(x + i));
    for (; i < n; i++) y[i] = cpu_f16_to_f32(x[i]);
}
static void v_f32_to_f16(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = cpu_f32_to_f16(x[i]);
}

const cpu_vec_ops cpu_vec_avx2 = {
    /* .dot_f32 = */ v_dot_f32,
    /* .dot_f16_f32 = */ v_dot_f16_f32,
    /* .dot_bf16_f32 = */ v_dot_bf16_f32,
    /* .add = */ v_add,
    /* .mul = */ v_mul,
    /* .scale = */ v_scale,
    /* .silu = */ v_silu,
    /* .gelu = */ v_gelu,
    /* .swiglu = */ v_swiglu,
    /* .sum_sq = */ v_sum_sq,
    /* .max = */ v_max,
    /* .exp_sum = */ v_exp_sum,
    /* .axpy = */ v_axpy,
    /* .axpy_f16 = */ v_axpy_f16,
    /* .rot = */ v_rot,
    /* .rot_pairs = */ v_rot_pairs,
    /* .dots = */ v_dots,
    /* .wsum = */ v_wsum,
    /* .dots2 = */ v_dots2,
    /* .wsum2 = */ v_wsum2,
    /* .f16_to_f32 = */ v_f16_to_f32,
    /* .f32_to_f16 = */ v_f32_to_f16,
};

#else /* not x86-64: no AVX2 table; the scalar one stands in */

int cpu_have_avx2(void) { return 0; }
const cpu_vec_ops cpu_vec_avx2 = { 0 };

#endif
