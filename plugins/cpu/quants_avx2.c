/* plugins/cpu/quants_avx2.c — AVX2 + FMA + F16C dot products of quantized weight rows against
 * q8_0 / q8_K activation rows.
 *
 * Compiled for the baseline target; each function carries a target attribute and is called only
 * after quant_cpu_has_avx2() said yes (quants.c). Integer products are exact (maddubs cannot
 * saturate for these value ranges: |q4| <= 15, |q6| <= 63, |q8| <= 127 with at most one of the two
 * factors at 128); only the float accumulation order differs from the scalar kernels.
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off") /* the quantizers here must round exactly like quants_ref.c */
#endif
#include <math.h>
#include <float.h>
#include <string.h>
#include "quants.h"

#include "quants_avx2.h"

#ifdef QUANT_HAVE_X86


/* ------------------------------------------------------------------ q4_0 x q8_0 */

AVX2 void quant_vec_dot_multi_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy,
                                             size_t y_stride, int ny) {
    const blk_q4_0 *x = vx;
    const int64_t nb = n / QK_32;
    __m256 acc[QUANT_MULTI_MAX];
    for (int k = 0; k < ny; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i qx = q4_0_unpack(x[b].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const float dx = f16(x[b].d);
        for (int k = 0; k < ny; k++) {
            const blk_q8_0 *y = (const blk_q8_0 *)((const char *)vy + (size_t)k * y_stride) + b;
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx)),
                                                _mm256_set1_epi16(1));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16(y->d)), _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    for (int k = 0; k < ny; k++) s[k] = hsum_ps(acc[k]);
}

/* the 32 nibbles of a q4_0 block as unsigned bytes 0..15, element order: the 16 bytes in both
 * 128-bit lanes (a load-port broadcast), the high lane shifted right by 4, then masked */
AVX2 static inline __m256i q4_0_nibbles(const uint8_t *qs) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0xf));
}

/* 8 int32 partial sums of (u - 8) . y, given m8 = maddubs(8, y) (shared across weight rows) */
AVX2 static inline __m256i q4_0_dot(__m256i u, __m256i y, __m256i m8) {
    return _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, y), m8), _mm256_set1_epi16(1));
}

AVX2 void quant_vec_dot_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_0 *x = vx;
    const blk_q8_0 *y = vy;
    const int64_t nb = n / QK_32;
    const __m256i k8 = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)y[b + 1].qs);
        const __m256i p0 = q4_0_dot(q4_0_nibbles(x[b].qs), y0, _mm256_maddubs_epi16(k8, y0));
        const __m256i p1 = q4_0_dot(q4_0_nibbles(x[b + 1].qs), y1, _mm256_maddubs_epi16(k8, y1));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b + 1].d) * f16(y[b + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i p0 = q4_0_dot(q4_0_nibbles(x[b].qs), y0, _mm256_maddubs_epi16(k8, y0));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* four weight rows against one activation row: the activation block, its maddubs(8, y) and its
 * scale are loaded/computed once for the four rows (mat-vec in decode) */
AVX2 void quant_vec_dot_rows4_q4_0_q8_0_avx2(int64_t n, float *s, const void *vx, size_t bx, const void *vy) {
    const blk_q8_0 *y = vy;
    const int64_t nb = n / QK_32;
    const blk_q4_0 *x0 = vx, *x1 = (const blk_q4_0 *)((const char *)vx + bx);
    const blk_q4_0 *x2 = (const blk_q4_0 *)((const char *)vx + 2 * bx), *x3 = (const blk_q4_0 *)((const char *)vx + 3 * bx);
    const __m256i k8 = _mm256_set1_epi8(8);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t b = 0; b < nb; b++) {
        const __m256i yy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i m8 = _mm256_maddubs_epi16(k8, yy);
        const float dy = f16(y[b].d);
        a0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x0[b].d) * dy), _mm256_cvtepi32_ps(q4_0_dot(q4_0_nibbles(x0[b].qs), yy, m8)), a0);
        a1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x1[b].d) * dy), _mm256_cvtepi32_ps(q4_0_dot(q4_0_nibbles(x1[b].qs), yy, m8)), a1);
        a2 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x2[b].d) * dy), _mm256_cvtepi32_ps(q4_0_dot(q4_0_nibbles(x2[b].qs), yy, m8)), a2);
        a3 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x3[b].d) * dy), _mm256_cvtepi32_ps(q4_0_dot(q4_0_nibbles(x3[b].qs), yy, m8)), a3);
    }
    s[0] = hsum_ps(a0);
    s[1] = hsum_ps(a1);
    s[2] = hsum_ps(a2);
    s[3] = hsum_ps(a3);
}

/* ------------------------------------------------------------------ q8_0 x q8_0 */

AVX2 void quant_vec_dot_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q8_0 *x = vx;
    const blk_q8_0 *y = vy;
    const int64_t nb = n / QK_32;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        const __m256i p1 = dot_i8(_mm256_loadu_si256((const __m256i *)x[b + 1].qs), _mm256_loadu_si256((const __m256i *)y[b + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b + 1].d) * f16(y[b + 1].d)), _mm256_cvtepi32_ps(p1), acc1);
    }
    for (; b < nb; b++) {
        const __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p0), acc0);
    }
    *s = hsum_ps(_mm256_add_ps(acc0, acc1));
}

AVX2 void quant_vec_dot_multi_q8_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy,
                                             size_t y_stride, int ny) {
    const blk_q8_0 *x = vx;
    const int64_t nb = n / QK_32;
    __m256 acc[QUANT_MULTI_MAX];
    for (int k = 0; k < ny; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const float dx = f16(x[b].d);
        for (int k = 0; k < ny; k++) {
            const blk_q8_0 *y = (const blk_q8_0 *)((const char *)vy + (size_t)k * y_stride) + b;
            const __m256i qy = _mm256_loadu_si256((const __m256i *)y->qs);
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx)),
                                                _mm256_set1_epi16(1));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * f16(y->d)), _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    for (int k = 0; k < ny; k++) s[k] = hsum_ps(acc[k]);
}

/* ------------------------------------------------------------------ q4_K x q8_K */

/* The 8 six-bit scales (16-bit lanes 0..7) and mins (lanes 8..15) of a q4_K/q5_K block. */
AVX2 static inline __m256i k4_scales_mins(const uint8_t *s12) {
    uint32_t w[4];
    quant_k4_scales_mins_words(s12, w);
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0]));
}

/* min_j * (sum of the 32 activations of sub-block j), as 4 int32 partial sums */
AVX2 static inline __m128i k4_min_term(__m256i scales_mins, const int16_t *bsums) {
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)bsums),
                                      _mm_loadu_si128((const __m128i *)(bsums + 8)));
    return _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), bs);
}

AVX2 static inline float hsum_ps128(__m128 r) {
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* integer part of one q4_K block against one q8_K block: sum_j sc_j * sum(q * q8) */
AVX2 static inline __m256i q4_K_block_dot(const __m256i lo[4], const __m256i hi[4], const __m256i scl[4],
                                          const __m256i sch[4], const int8_t *q8) {
    __m256i sum = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * c));
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)(q8 + 64 * c + 32));
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[c], y0), scl[c]);
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[c], y1), sch[c]);
        sum = _mm256_add_epi32(sum, _mm256_add_epi32(p0, p1));
    }
    return sum;
}

AVX2 static inline void k4_scale_pairs(__m256i scales_mins, __m256i scl[4], __m256i sch[4]) {
    /* the 8 scales in both 128-bit halves; scale j is bytes 2j, 2j+1 */
    const __m256i s16 = _mm256_permute2x128_si256(scales_mins, scales_mins, 0x00);
    for (int c = 0; c < 4; c++) {
        scl[c] = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * c)));
        sch[c] = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * c)));
    }
}

AVX2 static inline __m256i q4_K_load(const blk_q4_K *x, __m256i lo[4], __m256i hi[4], __m256i scl[4],
                                     __m256i sch[4]) {
    const __m256i sm = k4_scales_mins(x->scales);
    k4_scale_pairs(sm, scl, sch);
    const __m256i m4 = _mm256_set1_epi8(0xf);
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        lo[c] = _mm256_and_si256(q, m4);
        hi[c] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    return sm;
}

AVX2 void quant_vec_dot_q4_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_K *x = vx;
    const blk_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i lo[4], hi[4], scl[4], sch[4];
        const __m256i sm = q4_K_load(&x[b], lo, hi, scl, sch);
        const __m256i si = q4_K_block_dot(lo, hi, scl, sch, y[b].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(si), acc);
        accm = _mm_fmadd_ps(_mm_set1_ps(y[b].d * f16(x[b].dmin)), _mm_cvtepi32_ps(k4_min_term(sm, y[b].bsums)), accm);
    }
    *s = hsum_ps(acc) - hsum_ps128(accm);
}

AVX2 void quant_vec_dot_multi_q4_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy,
                                             size_t y_stride, int ny) {
    const blk_q4_K *x = vx;
    __m256 acc[QUANT_MULTI_MAX];
    __m128 accm[QUANT_MULTI_MAX];
    for (int k = 0; k < ny; k++) {
        acc[k] = _mm256_setzero_ps();
        accm[k] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i lo[4], hi[4], scl[4], sch[4];
        const __m256i sm = q4_K_load(&x[b], lo, hi, scl, sch);
        const float d = f16(x[b].d), dmin = f16(x[b].dmin);
        for (int k = 0; k < ny; k++) {
            const blk_q8_K *y = (const blk_q8_K *)((const char *)vy + (size_t)k * y_stride) + b;
            const __m256i si = q4_K_block_dot(lo, hi, scl, sch, y->qs);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(si), acc[k]);
            accm[k] = _mm_fmadd_ps(_mm_set1_ps(y->d * dmin), _mm_cvtepi32_ps(k4_min_term(sm, y->bsums)), accm[k]);
        }
    }
    for (int k = 0; k < ny; k++) s[k] = hsum_ps(acc[k]) - hsum_ps128(accm[k]);
}

/* ------------------------------------------------------------------ q5_K x q8_K */

/* q4_K's loader plus the fifth bits: chunk c's low/high 32 values get qh bits 2c / 2c+1 */
AVX2 static inline __m256i q5_K_load(const blk_q5_K *x, __m256i lo[4], __m256i hi[4], __m256i scl[4],
                                     __m256i sch[4]) {
    const __m256i sm = k4_scales_mins(x->scales);
    k4_scale_pairs(sm, scl, sch);
    const __m256i m4 = _mm256_set1_epi8(0xf), b4 = _mm256_set1_epi8(0x10);
    __m256i h = _mm256_loadu_si256((const __m256i *)x->qh);
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        /* bit 2c of each qh byte moved to bit 4 (h is shifted right by 2 per chunk) */
        lo[c] = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), b4));
        hi[c] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                _mm256_and_si256(_mm256_slli_epi16(h, 3), b4));
        h = _mm256_srli_epi16(h, 2);
    }
    return sm;
}

AVX2 void quant_vec_dot_q5_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_K *x = vx;
    const blk_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i lo[4], hi[4], scl[4], sch[4];
        const __m256i sm = q5_K_load(&x[b], lo, hi, scl, sch);
        const __m256i si = q4_K_block_dot(lo, hi, scl, sch, y[b].qs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(si), acc);
        accm = _mm_fmadd_ps(_mm_set1_ps(y[b].d * f16(x[b].dmin)), _mm_cvtepi32_ps(k4_min_term(sm, y[b].bsums)), accm);
    }
    *s = hsum_ps(acc) - hsum_ps128(accm);
}

AVX2 void quant_vec_dot_multi_q5_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy,
                                             size_t y_stride, int ny) {
    const blk_q5_K *x = vx;
    __m256 acc[QUANT_MULTI_MAX];
    __m128 accm[QUANT_MULTI_MAX];
    for (int k = 0; k < ny; k++) {
        acc[k] = _mm256_setzero_ps();
        accm[k] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i lo[4], hi[4], scl[4], sch[4];
        const __m256i sm = q5_K_load(&x[b], lo, hi, scl, sch);
        const float d = f16(x[b].d), dmin = f16(x[b].dmin);
        for (int k = 0; k < ny; k++) {
            const blk_q8_K *y = (const blk_q8_K *)((const char *)vy + (size_t)k * y_stride) + b;
            const __m256i si = q4_K_block_dot(lo, hi, scl, sch, y->qs);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(si), acc[k]);
            accm[k] = _mm_fmadd_ps(_mm_set1_ps(y->d * dmin), _mm_cvtepi32_ps(k4_min_term(sm, y->bsums)), accm[k]);
        }
    }
    for (int k = 0; k < ny; k++) s[k] = hsum_ps(acc[k]) - hsum_ps128(accm[k]);
}

/* ------------------------------------------------------------------ q6_K x q8_K */

/* The 256 six-bit values of a q6_K block as unsigned bytes 0..63, in element order (q[8]), and
 * the scale pairs: sc[g] holds scale 2g in its low 128-bit lane and 2g+1 in the high lane (16-bit). */
AVX2 static inline void q6_K_load(const blk_q6_K *x, __m256i q[8], __m256i sc[8]) {
    const __m256i m4 = _mm256_set1_epi8(0xf), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        q[4 * h + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
        q[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        q[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
        q[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
    }
    /* scales 0..7 and 8..15 as 16-bit lanes, each set in both 128-bit halves; group g of half h
     * takes scale 2g in the low half and 2g+1 in the high half (one byte shuffle each) */
    const __m128i s8 = _mm_loadu_si128((const __m128i *)x->scales);
    const __m256i s_lo = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
    const __m256i s_hi = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(s8, 8)));
    for (int g = 0; g < 4; g++) {
        const __m256i m = _mm256_set_m128i(_mm_set1_epi16((short)(0x0302 + 0x0404 * g)),
                                           _mm_set1_epi16((short)(0x0100 + 0x0404 * g)));
        sc[g] = _mm256_shuffle_epi8(s_lo, m);
        sc[4 + g] = _mm256_shuffle_epi8(s_hi, m);
    }
}

/* sum_j sc_j * sum((q - 32) * q8) over one block, as 8 int32 lanes; the -32 offset is applied
 * through the activations' 16-element sums (q8_K's bsums line up with q6_K's 16-element scales) */
AVX2 static inline __m256i q6_K_block_dot(const __m256i q[8], const __m256i sc[8], const __m256i sc16,
                                          const int8_t *q8, const int16_t *bsums) {
    __m256i sum = _mm256_setzero_si256();
    for (int g = 0; g < 8; g++) {
        const __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * g));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], y), sc[g]));
    }
    const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)bsums));
    return _mm256_sub_epi32(sum, _mm256_slli_epi32(corr, 5));
}

AVX2 void quant_vec_dot_q6_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q6_K *x = vx;
    const blk_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i q[8], sc[8];
        q6_K_load(&x[b], q, sc);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
        const __m256i si = q6_K_block_dot(q, sc, sc16, y[b].qs, y[b].bsums);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * f16(x[b].d)), _mm256_cvtepi32_ps(si), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 void quant_vec_dot_multi_q6_K_q8_K_avx2(int64_t n, float *s, const void *vx, const void *vy,
                                             size_t y_stride, int ny) {
    const blk_q6_K *x = vx;
    __m256 acc[QUANT_MULTI_MAX];
    for (int k = 0; k < ny; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_SUPER; b++) {
        __m256i q[8], sc[8];
        q6_K_load(&x[b], q, sc);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[b].scales));
        const float d = f16(x[b].d);
        for (int k = 0; k < ny; k++) {
            const blk_q8_K *y = (const blk_q8_K *)((const char *)vy + (size_t)k * y_stride) + b;
            const __m256i si = q6_K_block_dot(q, sc, sc16, y->qs, y->bsums);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(y->d * d), _mm256_cvtepi32_ps(si), acc[k]);
        }
    }
    for (int k = 0; k < ny; k++) s[k] = hsum_ps(acc[k]);
}

/* ------------------------------------------------------------------ q4_1 / q5_0 / q5_1 */

/* 0x10 in byte i where bit i of the 32-bit qh is set (q5's fifth bits, element order) */
AVX2 static inline __m256i q5_high_bits(const uint8_t qh4[4]) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
                                    _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                       0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* the 32 nibbles of a 16-byte q4/q5 payload as unsigned bytes 0..15, element order */
AVX2 static inline __m256i nibbles_u8(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0xf));
}

/* 8 int32 sums of u * y (u unsigned < 128) */
AVX2 static inline __m256i dot_u8_i8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

AVX2 void quant_vec_dot_q4_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q4_1 *x = vx;
    const blk_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        const __m256i p = dot_u8_i8(nibbles_u8(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p), acc);
        accm += f16(x[b].m) * f16(y[b].s);
    }
    *s = hsum_ps(acc) + accm;
}

AVX2 void quant_vec_dot_q5_0_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_0 *x = vx;
    const blk_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_32; b++) {
        const __m256i u = _mm256_or_si256(nibbles_u8(x[b].qs), q5_high_bits(x[b].qh));
        const __m256i yy = _mm256_loadu_si256((const __m256i *)y[b].qs);
        /* (u - 16) . y = u . y - 16 . y */
        const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(u, yy), _mm256_maddubs_epi16(_mm256_set1_epi8(16), yy));
        const __m256i p = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 void quant_vec_dot_q5_1_q8_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const blk_q5_1 *x = vx;
    const blk_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    for (int64_t b = 0; b < n / QK_32; b++) {
        const __m256i u = _mm256_or_si256(nibbles_u8(x[b].qs), q5_high_bits(x[b].qh));
        const __m256i p = dot_u8_i8(u, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(x[b].d) * f16(y[b].d)), _mm256_cvtepi32_ps(p), acc);
        accm += f16(x[b].m) * f16(y[b].s);
    }
    *s = hsum_ps(acc) + accm;
}

/* ------------------------------------------------------------------ activation quantizers */
/* Bit-identical to quant_q8_0_from_f32 / quant_q8_K_from_f32 (quants_ref.c): the same float
 * operations per element, max-abs is order independent, roundf's half-away-from-zero is
 * rebuilt from truncation, and q8_K's round-half-even is the hardware's default rounding. */

AVX2 static inline float hmax_ps(__m256 v) {
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 32 int32 lanes (4 vectors, element order) -> 32 int8 in element order (values in range) */
AVX2 static inline __m256i pack32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i v = _mm256_packs_epi16(ab, cd);
    /* packs work per 128-bit lane: lanes hold dwords a0 b0 c0 d0 | a1 b1 c1 d1 (4 bytes each) */
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* roundf: truncate, then step away from zero when the dropped part is >= 0.5 */
AVX2 static inline __m256i round_away_epi32(__m256 v) {
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 sign = _mm256_and_ps(v, _mm256_set1_ps(-0.0f));
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(v, t));
    const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                      _mm256_or_ps(sign, _mm256_set1_ps(1.0f)));
    return _mm256_cvtps_epi32(_mm256_add_ps(t, step));
}

AVX2 void quant_q8_0_from_f32_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / QK_32; b++, x += QK_32) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            const __m256 a = _mm256_and_ps(v[k], abs_mask);
            m = _mm256_max_ps(m, a);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ)); /* NaN, inf */
        }
        const float amax = hmax_ps(m);
        if (_mm256_movemask_ps(bad)) { /* non-finite block (max_ps may skip a NaN): the scalar path decides */
            quant_q8_0_from_f32(x, &y[b], QK_32);
            continue;
        }
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = quant_f32_to_f16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = round_away_epi32(_mm256_mul_ps(v[k], vid));
        _mm256_storeu_si256((__m256i *)y[b].qs, pack32_i8(q[0], q[1], q[2], q[3]));
    }
}

AVX2 void quant_q8_K_from_f32_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int64_t b = 0; b < n / QK_SUPER; b++, x += QK_SUPER) {
        __m256 m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int k = 0; k < QK_SUPER; k += 8) {
            const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask);
            m = _mm256_max_ps(m, a);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
        }
        const float amax = hmax_ps(m);
        if (_mm256_movemask_ps(bad)) {
            quant_q8_K_from_f32(x, &y[b], QK_SUPER);
            continue;
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        /* the sign of the first element of largest magnitude (the scalar search keeps the first) */
        float vmax = 0.0f;
        for (int j = 0; j < QK_SUPER; j++)
            if (fabsf(x[j]) == amax) {
                vmax = x[j];
                break;
            }
        const float iscale = -127.0f / vmax;
        const __m256 vis = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_SUPER; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vis),
                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(r), _mm256_set1_epi32(127));
            }
            const __m256i q8 = pack32_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(y[b].qs + j), q8);
            /* 16-element sums: bytes -> 16-bit pairs -> per-16 totals */
            const __m256i s16 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q8), _mm256_set1_epi16(1));
            /* s16: 8 int32 sums of 4 bytes; lanes 0..3 = elements j..j+15, 4..7 = j+16..j+31 */
            const __m128i lo = _mm256_castsi256_si128(s16), hi = _mm256_extracti128_si256(s16, 1);
            const __m128i t = _mm_hadd_epi32(lo, hi);   /* l0+l1, l2+l3, h0+h1, h2+h3 */
            const __m128i u = _mm_hadd_epi32(t, t);     /* sum lo, sum hi, ... */
            y[b].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(u);
            y[b].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(u, 1);
        }
        y[b].d = 1.0f / iscale;
    }
}

#endif /* QUANT_HAVE_X86 */
