/* plugins/cpu/quants_avx512.c — AVX-512 dot products of quantized weight rows against q8_0 / q8_K
 * activation rows (q4_0, q8_0, q4_K, q6_K).
 *
 * The file is compiled for the baseline target; every function here carries a target attribute
 * and is called only after quant_cpu_has_avx512() said yes (quants.c), so the library still loads
 * and runs on AVX2-only CPUs. Each kernel exists twice, generated from one macro body:
 *   _avx512bw    AVX-512 F/BW/VL/DQ: vpmaddubsw + vpmaddwd on 512-bit vectors
 *   _avx512vnni  the same plus AVX512-VNNI: vpdpbusd (u8 x s8 -> i32) and vpdpwssd (i16 x i16 -> i32)
 * Integer products are exact (no saturation for these value ranges, see quants_avx2.c); only the
 * float accumulation order differs from the scalar kernels.
 */
#include "quants.h"

#ifdef QUANT_HAVE_X86
#include <immintrin.h>

#define T512 "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"
#define ATTR_BW __attribute__((target(T512)))
#define ATTR_VNNI __attribute__((target(T512 ",avx512vnni")))

ATTR_BW static inline float f16_512(uint16_t h) { return _cvtsh_ss(h); }

/* two 32-byte rows as one 512-bit vector (a in the low half) */
ATTR_BW static inline __m512i load_2x256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* lanes 0..7 = a, lanes 8..15 = b */
ATTR_BW static inline __m512 scale_2x8(float a, float b) {
    return _mm512_mask_blend_ps((__mmask16)0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* 16-bit lanes of 128-bit lane L (L < 4) all equal to v[L] */
ATTR_BW static inline __m512i idx16_per_lane(int v0, int v1, int v2, int v3) {
    const long long k = 0x0001000100010001LL;
    return _mm512_set_epi64(v3 * k, v3 * k, v2 * k, v2 * k, v1 * k, v1 * k, v0 * k, v0 * k);
}

/* 16-bit lanes 0..15 all a, lanes 16..31 all b */
ATTR_BW static inline __m512i idx16_halves(int a, int b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)a)), _mm256_set1_epi16((short)b), 1);
}

ATTR_BW static inline int32_t hsum_epi32_256(__m256i v) {
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4e));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xb1));
    return _mm_cvtsi128_si32(r);
}

/* The 8 six-bit scales (16-bit lanes 0..7) and mins (lanes 8..15) of a q4_K block. */
ATTR_BW static inline __m256i k4_scales_mins_512(const uint8_t *s12) {
    uint32_t w[4];
    quant_k4_scales_mins_words(s12, w);
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0]));
}

/* int32 accumulation steps: acc + sum over 4-byte groups of u8 * s8, and acc + sum over 16-bit
 * pairs of a * b */
#define DOTUS_BW(acc, u, s) _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (s)), _mm512_set1_epi16(1)))
#define DOTUS_VNNI(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#define DOTWS_BW(acc, a, b) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (b)))
#define DOTWS_VNNI(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))

/* ------------------------------------------------------------------ q8_0 x q8_0 */
/* two blocks per 512-bit vector; signed x signed through |x| and y with x's sign */
#define DEF_Q8_0(SFX, ATTR, DOTUS)                                                                  \
    ATTR void quant_vec_dot_q8_0_q8_0_##SFX(int64_t n, float *s, const void *vx, const void *vy) {  \
        const blk_q8_0 *x = vx;                                                                     \
        const blk_q8_0 *y = vy;                                                                     \
        const int64_t nb = n / QK_32;                                                               \
        const __m512i zero = _mm512_setzero_si512();                                                \
        __m512 acc = _mm512_setzero_ps();                                                           \
        int64_t b = 0;                                                                              \
        for (; b + 1 < nb; b += 2) {                                                                \
            const __m512i qx = load_2x256(x[b].qs, x[b + 1].qs);                                    \
            const __m512i qy = load_2x256(y[b].qs, y[b + 1].qs);                                    \
            const __m512i sy = _mm512_mask_sub_epi8(qy, _mm512_movepi8_mask(qx), zero, qy);         \
            const __m512i p = DOTUS(zero, _mm512_abs_epi8(qx), sy);                                 \
            const __m512 sc = scale_2x8(f16_512(x[b].d) * f16_512(y[b].d),                          \
                                        f16_512(x[b + 1].d) * f16_512(y[b + 1].d));                 \
            acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(p), acc);                                  \
        }                                                                                           \
        float tail = 0.0f;                                                                          \
        if (b < nb) quant_vec_dot_q8_0_q8_0_avx2(QK_32, &tail, &x[b], &y[b]);                       \
        *s = _mm512_reduce_add_ps(acc) + tail;                                                      \
    }

/* ------------------------------------------------------------------ q4_0 x q8_0 */
/* two blocks per vector: each block's 16 nibble bytes in two 128-bit lanes, the upper one shifted
 * right by 4; (u - 8) . y = u . y - 8 . y */
#define DEF_Q4_0(SFX, ATTR, DOTUS)                                                                  \
    ATTR void quant_vec_dot_q4_0_q8_0_##SFX(int64_t n, float *s, const void *vx, const void *vy) {  \
        const blk_q4_0 *x = vx;                                                                     \
        const blk_q8_0 *y = vy;                                                                     \
        const int64_t nb = n / QK_32;                                                               \
        const __m512i zero = _mm512_setzero_si512(), m4 = _mm512_set1_epi8(0xf);                    \
        const __m512i k8 = _mm512_set1_epi8(8), sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);     \
        __m512 acc = _mm512_setzero_ps();                                                           \
        int64_t b = 0;                                                                              \
        for (; b + 1 < nb; b += 2) {                                                                \
            const __m256i q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b].qs));     \
            const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x[b + 1].qs)); \
            const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);                \
            const __m512i u = _mm512_and_si512(_mm512_srlv_epi64(q, sh), m4);                       \
            const __m512i qy = load_2x256(y[b].qs, y[b + 1].qs);                                    \
            const __m512i p = _mm512_sub_epi32(DOTUS(zero, u, qy), DOTUS(zero, k8, qy));            \
            const __m512 sc = scale_2x8(f16_512(x[b].d) * f16_512(y[b].d),                          \
                                        f16_512(x[b + 1].d) * f16_512(y[b + 1].d));                 \
            acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(p), acc);                                  \
        }                                                                                           \
        float tail = 0.0f;                                                                          \
        if (b < nb) quant_vec_dot_q4_0_q8_0_avx2(QK_32, &tail, &x[b], &y[b]);                       \
        *s = _mm512_reduce_add_ps(acc) + tail;                                                      \
    }

/* ------------------------------------------------------------------ q4_K x q8_K */
/* 64 bytes of nibbles per vector: qs[64k .. 64k+63] holds, in its low nibbles, sub-blocks 4k
 * (bytes 0..31) and 4k+2 (bytes 32..63), in its high nibbles sub-blocks 4k+1 and 4k+3. The
 * matching activations are two 32-byte pieces; the scales go in per 256-bit half as 16-bit lanes. */
#define DEF_Q4_K(SFX, ATTR, DOTWS)                                                                  \
    ATTR void quant_vec_dot_q4_K_q8_K_##SFX(int64_t n, float *s, const void *vx, const void *vy) {  \
        const blk_q4_K *x = vx;                                                                     \
        const blk_q8_K *y = vy;                                                                     \
        const __m512i m4 = _mm512_set1_epi8(0xf);                                                   \
        const __m512i i_lo0 = idx16_halves(0, 2), i_hi0 = idx16_halves(1, 3);                      \
        const __m512i i_lo1 = idx16_halves(4, 6), i_hi1 = idx16_halves(5, 7);                      \
        float acc = 0.0f;                                                                           \
        for (int64_t b = 0; b < n / QK_SUPER; b++) {                                                \
            const __m256i sm = k4_scales_mins_512(x[b].scales);                                     \
            const __m512i sm5 = _mm512_castsi256_si512(sm);                                         \
            const int8_t *q8 = y[b].qs;                                                             \
            __m512i sum = _mm512_setzero_si512();                                                   \
            for (int k = 0; k < 2; k++) {                                                           \
                const __m512i q = _mm512_loadu_si512((const void *)(x[b].qs + 64 * k));             \
                const __m512i lo = _mm512_and_si512(q, m4);                                         \
                const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);                   \
                const __m512i ylo = load_2x256(q8 + 128 * k, q8 + 128 * k + 64);                    \
                const __m512i yhi = load_2x256(q8 + 128 * k + 32, q8 + 128 * k + 96);               \
                const __m512i scl = _mm512_permutexvar_epi16(k ? i_lo1 : i_lo0, sm5);               \
                const __m512i sch = _mm512_permutexvar_epi16(k ? i_hi1 : i_hi0, sm5);               \
                sum = DOTWS(sum, _mm512_maddubs_epi16(lo, ylo), scl);                               \
                sum = DOTWS(sum, _mm512_maddubs_epi16(hi, yhi), sch);                               \
            }                                                                                       \
            /* mins: sum_j m_j * (sum of the 32 activations of sub-block j) */                      \
            const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)y[b].bsums),         \
                                              _mm_loadu_si128((const __m128i *)(y[b].bsums + 8)));  \
            const __m128i mt = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), bs);                 \
            const __m128i m2 = _mm_add_epi32(mt, _mm_shuffle_epi32(mt, 0x4e));                      \
            const int32_t mins = _mm_cvtsi128_si32(_mm_add_epi32(m2, _mm_shuffle_epi32(m2, 0xb1))); \
            const int32_t isum = _mm512_reduce_add_epi32(sum);                                      \
            acc += y[b].d * (f16_512(x[b].d) * (float)isum - f16_512(x[b].dmin) * (float)mins);     \
        }                                                                                           \
        *s = acc;                                                                                   \
    }

/* ------------------------------------------------------------------ q6_K x q8_K */
/* per half h (128 elements): ql[64h .. 64h+63] as one vector gives elements 0..63 of the half in
 * its low nibbles and 64..127 in its high nibbles; the 2-bit high parts come from qh[32h ..],
 * repeated in both 256-bit halves and shifted per half. 16-element scales go per 128-bit lane. */
#define DEF_Q6_K(SFX, ATTR, DOTWS)                                                                  \
    ATTR void quant_vec_dot_q6_K_q8_K_##SFX(int64_t n, float *s, const void *vx, const void *vy) {  \
        const blk_q6_K *x = vx;                                                                     \
        const blk_q8_K *y = vy;                                                                     \
        const __m512i m4 = _mm512_set1_epi8(0xf), m30 = _mm512_set1_epi8(0x30);                     \
        const __m512i sl_a = idx16_halves(4, 2), sr_b = idx16_halves(0, 2);                         \
        float acc = 0.0f;                                                                           \
        for (int64_t b = 0; b < n / QK_SUPER; b++) {                                                \
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales)); \
            const __m512i sc5 = _mm512_castsi256_si512(sc16);                                       \
            const int8_t *q8 = y[b].qs;                                                             \
            __m512i sum = _mm512_setzero_si512();                                                   \
            for (int h = 0; h < 2; h++) {                                                           \
                const __m512i l = _mm512_loadu_si512((const void *)(x[b].ql + 64 * h));             \
                const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * h))); \
                const __m512i za = _mm512_or_si512(_mm512_and_si512(l, m4),                         \
                                                   _mm512_and_si512(_mm512_sllv_epi16(qh, sl_a), m30)); \
                const __m512i zb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),   \
                                                   _mm512_and_si512(_mm512_srlv_epi16(qh, sr_b), m30)); \
                const int g = 8 * h; /* first scale of this half */                                 \
                const __m512i sca = _mm512_permutexvar_epi16(idx16_per_lane(g, g + 1, g + 2, g + 3), sc5); \
                const __m512i scb = _mm512_permutexvar_epi16(idx16_per_lane(g + 4, g + 5, g + 6, g + 7), sc5); \
                sum = DOTWS(sum, _mm512_maddubs_epi16(za, _mm512_loadu_si512((const void *)(q8 + 128 * h))), sca); \
                sum = DOTWS(sum, _mm512_maddubs_epi16(zb, _mm512_loadu_si512((const void *)(q8 + 128 * h + 64))), scb); \
            }                                                                                       \
            /* the -32 offset: 32 * sum_j sc_j * (sum of the 16 activations of group j) */          \
            const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)y[b].bsums)); \
            const int32_t isum = _mm512_reduce_add_epi32(sum) - 32 * hsum_epi32_256(corr);          \
            acc += y[b].d * f16_512(x[b].d) * (float)isum;                                          \
        }                                                                                           \
        *s = acc;                                                                                   \
    }

DEF_Q8_0(avx512bw, ATTR_BW, DOTUS_BW)
DEF_Q8_0(avx512vnni, ATTR_VNNI, DOTUS_VNNI)
DEF_Q4_0(avx512bw, ATTR_BW, DOTUS_BW)
DEF_Q4_0(avx512vnni, ATTR_VNNI, DOTUS_VNNI)
DEF_Q4_K(avx512bw, ATTR_BW, DOTWS_BW)
DEF_Q4_K(avx512vnni, ATTR_VNNI, DOTWS_VNNI)
DEF_Q6_K(avx512bw, ATTR_BW, DOTWS_BW)
DEF_Q6_K(avx512vnni, ATTR_VNNI, DOTWS_VNNI)

#endif /* QUANT_HAVE_X86 */
