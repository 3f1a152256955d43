/* plugins/cpu/gemm_vnni.c — the integer GEMM tiles of MUL_MAT (8 interleaved weight rows x up to 8
 * activation rows) with AVX512-VNNI on 256-bit vectors (AVX512VL): vpdpbusd multiplies unsigned
 * weight bytes by signed activation bytes and adds groups of four into 32-bit lanes, one
 * instruction where AVX2 needs vpmaddubsw + vpaddw (and a vpmaddwd later), and the 32 vector
 * registers of AVX-512 hold eight activation rows' accumulators at once, so each weight vector
 * loaded serves eight columns instead of four.
 *
 * Panels are the AVX2 kernels' (quants_avx2_x8.c), q4_Kx8 with its nibbles split into bytes once per
 * panel (the tile then only loads and multiplies). The integer sums are exact and combined with
 * the scales in the AVX2 kernels' order, so a tile gives the same floats as the AVX2 one. Compiled for the baseline target: each function carries its
 * target attribute and runs only where quant_cpu_has_avx512() == 2.
 */
#include "quants.h"
#include "quants_avx2.h" /* q4_Kx8_block_acc: the AVX2 tile's tail */

#ifdef QUANT_HAVE_X86
#include <immintrin.h>

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define BCAST32(p) ({ int32_t v_; memcpy(&v_, (p), 4); _mm256_set1_epi32(v_); })

/* the 64 nibbles of the 32 bytes at src as bytes 0..15: the low ones to lo, the high ones to hi */
VNNI static inline void split_nibbles(const char *src, char *lo, char *hi) {
    const __m256i m4 = _mm256_set1_epi8(0xf), t = _mm256_loadu_si256((const __m256i *)src);
    _mm256_storeu_si256((__m256i *)lo, _mm256_and_si256(t, m4));
    _mm256_storeu_si256((__m256i *)hi, _mm256_and_si256(_mm256_srli_epi16(t, 4), m4));
}

/* ------------------------------------------------------------------ q4_K */
/* The tile reads a panel of bytes: the q4_Kx8 panel's 160-byte head (d, dmin, scales, mins), then
 * 64 vectors e = 0..63 whose lane l holds row l's values of elements 4e..4e+3 as bytes 0..15 (the
 * nibbles split once per panel, not once per activation row). */
#define Q4_KX8B_BLOCK (160 + 2048)

VNNI void quant_q4_Kx8_expand_vnni(int64_t nb, const void *panel, void *dst) {
    const char *pa = panel;
    char *o = dst;
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q4_KX8_BLOCK, o += Q4_KX8B_BLOCK) {
        memcpy(o, pa, 160);
        for (int c = 0; c < 4; c++)
            for (int g = 0; g < 8; g++)
                split_nibbles(pa + 160 + 32 * (8 * c + g), o + 160 + 32 * (16 * c + g), o + 160 + 32 * (16 * c + 8 + g));
    }
}

__attribute__((always_inline)) VNNI static inline void q4_Kx8_tile_vnni(int64_t nb, const char *pa,
                                                                      const blk_q8_K *const *yc, __m256 *acc,
                                                                      const int NC) {
    for (int64_t b = 0; b < nb; b++, pa += Q4_KX8B_BLOCK) {
        __m256i isum[8];
        for (int k = 0; k < NC; k++) isum[k] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) { /* sub-block j: elements 32j..32j+31 */
            __m256i p[8];
            for (int k = 0; k < NC; k++) p[k] = _mm256_setzero_si256();
            for (int v = 0; v < 8; v++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(pa + 160 + 32 * (8 * j + v)));
                for (int k = 0; k < NC; k++) p[k] = _mm256_dpbusd_epi32(p[k], w, BCAST32(yc[k][b].qs + 32 * j + 4 * v));
            }
            const __m256i sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(pa + 32 + 8 * j)));
            for (int k = 0; k < NC; k++) isum[k] = _mm256_add_epi32(isum[k], _mm256_mullo_epi32(p[k], sc));
        }
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        const __m256 m8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(pa + 16)));
        for (int k = 0; k < NC; k++) acc[k] = q4_Kx8_block_acc(acc[k], pa, d8, m8, isum[k], &yc[k][b]); /* AVX2's tail */
    }
}

VNNI void quant_q4_Kx8_gemm8_vnni(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc) {
    const blk_q8_K *yc[8];
    __m256 acc[8];
    for (int c = 0; c < 8; c++) {
        yc[c] = y[c < nc ? c : 0];
        acc[c] = _mm256_setzero_ps();
    }
    if (nc > 4) q4_Kx8_tile_vnni(nb, panel, yc, acc, 8);
    else q4_Kx8_tile_vnni(nb, panel, yc, acc, 4);
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

/* ------------------------------------------------------------------ q4_0, q8_0 */
/* Expanded panels, per block: the 8 rows' scales (q4_0: 16 B of f16; q8_0: 32 B of f32 as in the
 * q8_0x8 panel), then 8 vectors e = 0..7, lane l = row l's elements 4e..4e+3 as unsigned bytes:
 * q4_0's nibbles (0..15), q8_0's quants + 128. Both offsets come off through the activation
 * blocks' sums: q4_0's (q - 8) . y = q . y - 8 sum(y) (the s8 the AVX2 tile takes), q8_0's
 * (q + 128) . y - 128 sum(y) = q . y (16 * s8). */
#define Q4_0X8B_BLOCK (16 + 256)
#define Q8_0X8B_BLOCK (32 + 256)

VNNI void quant_q4_0x8_expand_vnni(int64_t nb, const void *panel, void *dst) {
    const char *pa = panel;
    char *o = dst;
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q4_0X8_BLOCK, o += Q4_0X8B_BLOCK) {
        memcpy(o, pa, 16);
        for (int j = 0; j < 4; j++) split_nibbles(pa + 16 + 32 * j, o + 16 + 32 * j, o + 16 + 32 * (4 + j));
    }
}

VNNI void quant_q8_0x8_expand_vnni(int64_t nb, const void *panel, void *dst) {
    const __m256i k80 = _mm256_set1_epi8((char)0x80);
    const char *pa = panel;
    char *o = dst;
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q8_0X8_BLOCK, o += Q8_0X8B_BLOCK) {
        memcpy(o, pa, 32);
        for (int g = 0; g < 8; g++)
            _mm256_storeu_si256((__m256i *)(o + 32 + 32 * g),
                                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(pa + 32 + 32 * g)), k80));
    }
}

size_t quant_x8_expand_bytes(int32_t type, int64_t nb) {
    return (size_t)nb * (type == PYG_TYPE_Q4_0 ? Q4_0X8B_BLOCK : type == PYG_TYPE_Q8_0 ? Q8_0X8B_BLOCK : Q4_KX8B_BLOCK);
}

/* q8_0 blocks: quants 2 bytes in; dy / s8: per block float scale and 8 * sum(quants) */
__attribute__((always_inline)) VNNI static inline void q_x8_tile_vnni(int64_t nb, const char *pa, const char *const *yc,
                                                                    const float *const *dy, const int32_t *const *s8,
                                                                    __m256 *acc, const int NC, const int q8) {
    const size_t bb = q8 ? Q8_0X8B_BLOCK : Q4_0X8B_BLOCK, head = q8 ? 32 : 16;
    for (int64_t b = 0; b < nb; b++, pa += bb) {
        __m256i p[8];
        for (int k = 0; k < NC; k++) p[k] = _mm256_setzero_si256();
        const size_t yo = (size_t)b * sizeof(blk_q8_0);
        for (int e = 0; e < 8; e++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(pa + head + 32 * e));
            for (int k = 0; k < NC; k++) p[k] = _mm256_dpbusd_epi32(p[k], w, BCAST32(yc[k] + yo + 4 * e));
        }
        const __m256 dw = q8 ? _mm256_loadu_ps((const float *)pa) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        for (int k = 0; k < NC; k++) {
            const __m256i q = _mm256_sub_epi32(p[k], _mm256_set1_epi32(q8 ? 16 * s8[k][b] : s8[k][b]));
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dy[k][b])), _mm256_cvtepi32_ps(q), acc[k]);
        }
    }
}

VNNI void quant_q_x8_gemm8_vnni(int32_t type, int64_t nb, const void *expanded, const void *const *y,
                                const float *const *dy, const int32_t *const *s8, float *const *dst, int nc) {
    const char *yc[8];
    const float *d8[8];
    const int32_t *t8[8];
    __m256 acc[8];
    for (int c = 0; c < 8; c++) { /* columns past nc repeat column 0 (computed, not stored) */
        yc[c] = (const char *)y[c < nc ? c : 0] + 2;
        d8[c] = dy[c < nc ? c : 0];
        t8[c] = s8[c < nc ? c : 0];
        acc[c] = _mm256_setzero_ps();
    }
    const int q8 = type == PYG_TYPE_Q8_0;
    if (nc > 4) {
        if (q8) q_x8_tile_vnni(nb, expanded, yc, d8, t8, acc, 8, 1);
        else q_x8_tile_vnni(nb, expanded, yc, d8, t8, acc, 8, 0);
    } else {
        if (q8) q_x8_tile_vnni(nb, expanded, yc, d8, t8, acc, 4, 1);
        else q_x8_tile_vnni(nb, expanded, yc, d8, t8, acc, 4, 0);
    }
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

#endif /* QUANT_HAVE_X86 */
