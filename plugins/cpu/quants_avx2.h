/* plugins/cpu/quants_avx2.h — the small AVX2 helpers shared by quants_avx2.c (dot products and
 * quantizers) and quants_avx2_x8.c (8-row interleaved tiles). Only for files compiled with
 * QUANT_HAVE_X86; every function carries the AVX2 target attribute. */
#ifndef PYG_CPU_QUANTS_AVX2_H
#define PYG_CPU_QUANTS_AVX2_H
#include "quants.h"

#ifdef QUANT_HAVE_X86
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static inline float hsum_ps(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

AVX2 static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* 8 int32 sums of products of 4 consecutive signed bytes of x and y (x != -128) */
AVX2 static inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* the 32 nibbles of a q4_0 block as signed bytes -8..7, in element order */
AVX2 static inline __m256i q4_0_unpack(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_sub_epi8(_mm256_and_si256(v, _mm256_set1_epi8(0xf)), _mm256_set1_epi8(8));
}
/* A q4_Kx8 panel block's contribution to one activation column: acc + d dy isum - dmin dy (the
 * 8 rows' sub-block mins against the activation block's sub-block sums). pa: the block's head (8 d
 * as f16, 8 dmin as f16, ..., at 96 the mins of sub-blocks 2p, 2p+1 for the 8 rows); d8, dmin8: its
 * d and dmin as floats; isum: the rows' integer dot sums already scaled by the sub-block scales.
 * The AVX2 tile (quants_avx2_x8.c) and the VNNI one (gemm_vnni.c) both end with it: the same floats. */
AVX2 static inline __m256 q4_Kx8_block_acc(__m256 acc, const char *pa, __m256 d8, __m256 dmin8, __m256i isum,
                                           const blk_q8_K *yb) {
    /* sums of the 8 sub-blocks' activations, pairwise as 32-bit words (2p, 2p+1) */
    const __m128i bs = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)yb->bsums),
                                      _mm_loadu_si128((const __m128i *)(yb->bsums + 8)));
    __m256i msum = _mm256_setzero_si256();
    for (int pp = 0; pp < 4; pp++) {
        const __m256i mn = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(pa + 96 + 16 * pp)));
        const __m256i w = _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(bs), _mm256_set1_epi32(pp));
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(mn, w));
    }
    const __m256 dy = _mm256_set1_ps(yb->d);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(d8, dy), _mm256_cvtepi32_ps(isum), acc);
    return _mm256_fnmadd_ps(_mm256_mul_ps(dmin8, dy), _mm256_cvtepi32_ps(msum), acc);
}
#endif /* QUANT_HAVE_X86 */
#endif
