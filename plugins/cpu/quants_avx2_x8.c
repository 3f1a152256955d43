/* plugins/cpu/quants_avx2_x8.c — AVX2 tiles over weight rows interleaved by 8 (repack.c builds the
 * panels): q4_0, q8_0 and q4_K dot products of 8 rows at once against q8 activation blocks.
 * Like quants_avx2.c: compiled for the baseline target, called only after quant_cpu_has_avx2(). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off") /* the quantizers here must round exactly like quants_ref.c */
#endif
#include <math.h>
#include <float.h>
#include <string.h>
#include "quants_avx2.h"

#ifdef QUANT_HAVE_X86

/* ------------------------------------------------------------------ q4_0, 8 rows interleaved */
/* Eight weight rows are repacked (per GEMM call, or once per weight into a cache, repack.c) so
 * that one 256-bit vector holds four consecutive nibble bytes of each of the 8 rows: 32-bit lane l
 * = row l. A broadcast 4-byte group of an activation block then meets the same 4 positions of all
 * 8 rows at once, and the int32 lanes are the 8 rows' dot products: no horizontal sums, one scale
 * vector per block (the 8 rows' d) and 8 outputs stored contiguously. Layout per block
 * (QUANT_Q4_0X8_BLOCK bytes): the 8 rows' f16 d, then vectors j = 0..3 whose lane l is bytes
 * 4j..4j+3 of row l's nibbles (low nibbles: elements 4j.., high nibbles: elements 16+4j..). */

/* Eight rows' 16-byte pieces a[0..7] -> four 32-byte vectors at out, out + 32, .. : vector j's
 * 32-bit lane l is dword j of row l (the 8-row interleave of the q4_0 and q4_K repacks). */
static AVX2 inline void transpose_8x4_dwords(const __m128i a[8], char *out) {
    __m128i o[2][4];
    for (int half = 0; half < 2; half++) {
        const __m128i *q = a + 4 * half;
        const __m128i t0 = _mm_unpacklo_epi32(q[0], q[1]), t1 = _mm_unpackhi_epi32(q[0], q[1]);
        const __m128i t2 = _mm_unpacklo_epi32(q[2], q[3]), t3 = _mm_unpackhi_epi32(q[2], q[3]);
        o[half][0] = _mm_unpacklo_epi64(t0, t2);
        o[half][1] = _mm_unpackhi_epi64(t0, t2);
        o[half][2] = _mm_unpacklo_epi64(t1, t3);
        o[half][3] = _mm_unpackhi_epi64(t1, t3);
    }
    for (int j = 0; j < 4; j++) _mm256_storeu_si256((__m256i *)(out + 32 * j), _mm256_set_m128i(o[1][j], o[0][j]));
}

AVX2 void quant_q4_0_repack8_avx2(const void *vx, size_t row_stride, int64_t nb, void *vdst) {
    const char *base = vx;
    char *dst = vdst;
    for (int64_t b = 0; b < nb; b++, dst += QUANT_Q4_0X8_BLOCK) {
        const blk_q4_0 *r[8];
        for (int l = 0; l < 8; l++) r[l] = (const blk_q4_0 *)(base + (size_t)l * row_stride) + b;
        for (int l = 0; l < 8; l++) memcpy(dst + 2 * l, &r[l]->d, 2);
        __m128i a[8];
        for (int l = 0; l < 8; l++) a[l] = _mm_loadu_si128((const __m128i *)r[l]->qs);
        transpose_8x4_dwords(a, dst + 16);
    }
}

#define Q4X8_BCAST(p) ({ int32_t v_; memcpy(&v_, (p), 4); _mm256_set1_epi32(v_); })

/* NC activation rows (compile-time 1 or 4) against 8 interleaved rows over nb blocks */
__attribute__((always_inline)) AVX2 static inline void q4_0x8_tile(int64_t nb, const char *pa, const char *const *yc,
                                                                  const float *const *dy, const int32_t *const *s8,
                                                                  __m256 *acc, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0xf), ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q4_0X8_BLOCK) {
        __m256i p[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256() };
        const size_t yo = (size_t)b * sizeof(blk_q8_0);
        for (int j = 0; j < 4; j++) {
            const __m256i t = _mm256_loadu_si256((const __m256i *)(pa + 16 + 32 * j));
            const __m256i lo = _mm256_and_si256(t, m4), hi = _mm256_and_si256(_mm256_srli_epi16(t, 4), m4);
            for (int c = 0; c < NC; c++)
                p[c] = _mm256_add_epi16(p[c], _mm256_add_epi16(_mm256_maddubs_epi16(lo, Q4X8_BCAST(yc[c] + yo + 4 * j)),
                                                               _mm256_maddubs_epi16(hi, Q4X8_BCAST(yc[c] + yo + 16 + 4 * j))));
        }
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        for (int c = 0; c < NC; c++) {
            const __m256i q = _mm256_sub_epi32(_mm256_madd_epi16(p[c], ones), _mm256_set1_epi32(s8[c][b]));
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(dy[c][b])), _mm256_cvtepi32_ps(q), acc[c]);
        }
    }
}
#undef Q4X8_BCAST

AVX2 void quant_q4_0x8_gemv_avx2(int64_t nb, const void *panel, const void *y, const float *dy, const int32_t *s8,
                                 float *dst) {
    const char *yc[1] = { (const char *)y + 2 };
    __m256 acc[1] = { _mm256_setzero_ps() };
    q4_0x8_tile(nb, panel, yc, &dy, &s8, acc, 1);
    _mm256_storeu_ps(dst, acc[0]);
}

AVX2 void quant_q4_0x8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, const float *const *dy,
                                  const int32_t *const *s8, float *const *dst, int nc) {
    const char *yc[4];
    const float *d4[4];
    const int32_t *s4[4];
    for (int c = 0; c < 4; c++) { /* columns past nc repeat column 0 (computed, not stored) */
        yc[c] = (const char *)y[c < nc ? c : 0] + 2;
        d4[c] = dy[c < nc ? c : 0];
        s4[c] = s8[c < nc ? c : 0];
    }
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    q4_0x8_tile(nb, panel, yc, d4, s4, acc, 4);
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

/* ------------------------------------------------------------------ q8_0, 8 rows interleaved
 * Per block (QUANT_Q8_0X8_BLOCK bytes): the 8 rows' scales as floats (32 B), then 8 vectors:
 * vector g, 32-bit lane l = quants 4g..4g+3 of row l. One 4-byte group of an activation block,
 * broadcast, meets the same group of all 8 rows in one maddubs. */
AVX2 void quant_q8_0_repack8_avx2(const void *x, size_t row_stride, int64_t nb, void *dst) {
    for (int64_t b = 0; b < nb; b++) {
        char *out = (char *)dst + (size_t)b * QUANT_Q8_0X8_BLOCK;
        float *d = (float *)out;
        int8_t *q = (int8_t *)(out + 32);
        for (int r = 0; r < 8; r++) {
            const blk_q8_0 *blk = (const blk_q8_0 *)((const char *)x + (size_t)r * row_stride) + b;
            d[r] = f16(blk->d);
            for (int g = 0; g < 8; g++) memcpy(q + (g * 8 + r) * 4, blk->qs + 4 * g, 4);
        }
    }
}

/* dst[c][0..7] = the 8 panel rows . activation row c (q8_0 blocks), c < nc <= 4 */
AVX2 void quant_q8_0x8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc) {
    const blk_q8_0 *yr[4];
    for (int c = 0; c < 4; c++) yr[c] = (const blk_q8_0 *)y[c < nc ? c : 0]; /* past nc: column 0, not stored */
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t b = 0; b < nb; b++) {
        const char *blk = (const char *)panel + (size_t)b * QUANT_Q8_0X8_BLOCK;
        const __m256 dw = _mm256_loadu_ps((const float *)blk);
        __m256i sum[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                           _mm256_setzero_si256() };
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(blk + 32 + 32 * g));
            const __m256i aw = _mm256_sign_epi8(w, w); /* |w| as unsigned bytes (quants are >= -127) */
            for (int c = 0; c < 4; c++) {
                int32_t g4;
                memcpy(&g4, yr[c][b].qs + 4 * g, 4);
                const __m256i yv = _mm256_sign_epi8(_mm256_set1_epi32(g4), w); /* y with w's sign */
                sum[c] = _mm256_add_epi32(sum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(aw, yv), ones));
            }
        }
        for (int c = 0; c < 4; c++)
            acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(f16(yr[c][b].d))), _mm256_cvtepi32_ps(sum[c]),
                                     acc[c]);
    }
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

/* per block of a q8_0 row: the scale as a float and 8 * (sum of the 32 quants) */
AVX2 void quant_q8_0_block_sums_avx2(const void *vy, int64_t nb, float *dy, int32_t *s8) {
    const blk_q8_0 *y = vy;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        __m128i r = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0x4e));
        r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 0xb1));
        s8[b] = 8 * _mm_cvtsi128_si32(r);
        dy[b] = f16(y[b].d);
    }
}
#endif /* QUANT_HAVE_X86 */

/* ------------------------------------------------------------------ q4_K, 8 rows interleaved */
/* As q4_0x8: 32-bit lane l = row l. Layout per super-block (QUANT_Q4_KX8_BLOCK bytes):
 *   16 B  the 8 rows' f16 d          16 B  the 8 rows' f16 dmin
 *   64 B  scales: byte 8j + l = six-bit scale j of row l (j < 8)
 *   64 B  mins as pairs: byte 16p + 2l + k = min 2p+k of row l (p < 4, k < 2)
 *   1024 B vectors i = 0..31: lane l = bytes 4i..4i+3 of row l's qs (chunk c = i / 8: low nibbles
 *          are elements 64c + 4(i%8).., sub-block 2c; high nibbles 64c + 32 + 4(i%8).., 2c+1) */
#ifdef QUANT_HAVE_X86
static void k4_unpack_scales(const uint8_t *q, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (q[j + 8] & 0xf) | ((q[j] >> 6) << 4);
        mn[j + 4] = (q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4);
    }
}

AVX2 void quant_q4_K_repack8_avx2(const void *vx, size_t row_stride, int64_t nb, void *vdst) {
    const char *base = vx;
    char *dst = vdst;
    for (int64_t b = 0; b < nb; b++, dst += QUANT_Q4_KX8_BLOCK) {
        const blk_q4_K *r[8];
        for (int l = 0; l < 8; l++) r[l] = (const blk_q4_K *)(base + (size_t)l * row_stride) + b;
        for (int l = 0; l < 8; l++) {
            memcpy(dst + 2 * l, &r[l]->d, 2);
            memcpy(dst + 16 + 2 * l, &r[l]->dmin, 2);
            uint8_t sc[8], mn[8];
            k4_unpack_scales(r[l]->scales, sc, mn);
            for (int j = 0; j < 8; j++) {
                dst[32 + 8 * j + l] = (char)sc[j];
                dst[96 + 16 * (j / 2) + 2 * l + (j % 2)] = (char)mn[j];
            }
        }
        for (int c = 0; c < 8; c++) { /* 16-byte pieces: 4 dwords of each row, transposed */
            __m128i a[8];
            for (int l = 0; l < 8; l++) a[l] = _mm_loadu_si128((const __m128i *)(r[l]->qs + 16 * c));
            transpose_8x4_dwords(a, dst + 160 + 128 * c);
        }
    }
}

/* 8 unsigned bytes (one per row) as 16-bit lanes 2l and 2l+1 = byte l */
AVX2 static inline __m256i dup8_epi16(const char *p) {
    const __m128i v = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)p));
    return _mm256_set_m128i(_mm_unpackhi_epi16(v, v), _mm_unpacklo_epi16(v, v));
}

#define QKX8_BCAST(p) ({ int32_t v_; memcpy(&v_, (p), 4); _mm256_set1_epi32(v_); })

__attribute__((always_inline)) AVX2 static inline void q4_Kx8_tile(int64_t nb, const char *pa, const blk_q8_K *const *yc,
                                                                  __m256 *acc, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0xf);
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q4_KX8_BLOCK) {
        __m256i isum[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256() };
        const char *qs = pa + 160;
        for (int c = 0; c < 4; c++) {
            for (int h = 0; h < 2; h++) { /* h = 0: low nibbles (sub-block 2c), 1: high (2c+1) */
                __m256i p[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256() };
                for (int g = 0; g < 8; g++) {
                    const __m256i t = _mm256_loadu_si256((const __m256i *)(qs + 32 * (8 * c + g)));
                    const __m256i u = h ? _mm256_and_si256(_mm256_srli_epi16(t, 4), m4) : _mm256_and_si256(t, m4);
                    for (int k = 0; k < NC; k++)
                        p[k] = _mm256_add_epi16(p[k], _mm256_maddubs_epi16(u, QKX8_BCAST(yc[k][b].qs + 64 * c + 32 * h + 4 * g)));
                }
                const __m256i sc = dup8_epi16(pa + 32 + 8 * (2 * c + h));
                for (int k = 0; k < NC; k++) isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p[k], sc));
            }
        }
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        const __m256 m8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pa + 16)));
        for (int k = 0; k < NC; k++) acc[k] = q4_Kx8_block_acc(acc[k], pa, d8, m8, isum[k], &yc[k][b]);
    }
}
#undef QKX8_BCAST

AVX2 void quant_q4_Kx8_gemv_avx2(int64_t nb, const void *panel, const void *y, float *dst) {
    const blk_q8_K *yc[1] = { y };
    __m256 acc[1] = { _mm256_setzero_ps() };
    q4_Kx8_tile(nb, panel, yc, acc, 1);
    _mm256_storeu_ps(dst, acc[0]);
}

AVX2 void quant_q4_Kx8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc) {
    const blk_q8_K *yc[4];
    for (int c = 0; c < 4; c++) yc[c] = y[c < nc ? c : 0];
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    q4_Kx8_tile(nb, panel, yc, acc, 4);
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}
#endif /* QUANT_HAVE_X86 */
