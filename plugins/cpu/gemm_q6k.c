/* plugins/cpu/gemm_q6k.c — the q6_K integer GEMM tile of MUL_MAT prefill: 8 weight rows repacked
 * into one panel against 4 (AVX2) or 8 (AVX512-VNNI) q8_K activation rows. Without it q6_K
 * batches went through dequantize-to-f32 and the float GEMM (half the speed of the q4_K tiles).
 *
 * Panel per super-block (QUANT_Q6_KX8_BLOCK bytes), 32-bit lane l = row l as in q4_Kx8:
 *     16 B  the 8 rows' f16 d
 *    128 B  scales: byte 8j + l = signed scale j of row l (j < 16, one per 16 elements)
 *    256 B  scale pairs: vector p (p < 8), 16-bit lanes 2l, 2l+1 = scales 2p, 2p+1 of row l
 *   2048 B  vectors i = 0..63: lane l = row l's six-bit values of elements 4i..4i+3 (bytes 0..63,
 *           decoded from ql/qh once here, so the tile only loads them)
 * Per row and super-block the tile computes sum_j sc_j * sum_{e in j} (q_e - 32) y_e as
 * sum_j sc_j * dot_j - 32 * sum_j sc_j * bsum_j (q8_K's 16-element sums), exact in 32 bits, then
 * acc += d * d_y * that, as the q6_K dot products do.
 */
#include "quants.h"

#ifdef QUANT_HAVE_X86
#include <immintrin.h>

#define AVX2Q __attribute__((target("avx2,fma,f16c")))
#define VNNIQ __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

/* The 256 values of one q6_K block as bytes 0..63 in element order (ggml's layout). */
static void q6_K_values(const blk_q6_K *x, uint8_t v[QK_SUPER]) {
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        uint8_t *o = v + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((ql[l] & 0xf) | ((qh[l] & 3) << 4));
            o[l + 32] = (uint8_t)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
        }
    }
}

void quant_q6_K_repack8(const void *vx, size_t row_stride, int64_t nb, void *vdst) {
    const char *base = vx;
    char *dst = vdst;
    uint8_t v[QK_SUPER];
    for (int64_t b = 0; b < nb; b++, dst += QUANT_Q6_KX8_BLOCK) {
        for (int l = 0; l < 8; l++) {
            const blk_q6_K *r = (const blk_q6_K *)(base + (size_t)l * row_stride) + b;
            memcpy(dst + 2 * l, &r->d, 2);
            for (int j = 0; j < 16; j++) {
                dst[16 + 8 * j + l] = (char)r->scales[j];
                const int16_t s = r->scales[j];
                memcpy(dst + 144 + 32 * (j / 2) + 4 * l + 2 * (j % 2), &s, 2);
            }
            q6_K_values(r, v);
            for (int i = 0; i < 64; i++) memcpy(dst + 400 + 32 * i + 4 * l, v + 4 * i, 4);
        }
    }
}

#define BCAST32(p) ({ int32_t v_; memcpy(&v_, (p), 4); _mm256_set1_epi32(v_); })

/* the -32 offset: per row, 32 * sum_j sc_j * bsum_j (16-bit products summed in pairs) */
#define Q6_CORR(MADD, pa, y)                                                                          \
    ({                                                                                                \
        __m256i c_ = _mm256_setzero_si256();                                                          \
        for (int p_ = 0; p_ < 8; p_++)                                                                \
            c_ = MADD(c_, _mm256_loadu_si256((const __m256i *)((pa) + 144 + 32 * p_)),                \
                      BCAST32((y)->bsums + 2 * p_));                                                  \
        _mm256_slli_epi32(c_, 5);                                                                     \
    })
#define MADD_AVX2(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#define MADD_VNNI(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))

__attribute__((always_inline)) AVX2Q static inline void q6_Kx8_tile_avx2(int64_t nb, const char *pa,
                                                                       const blk_q8_K *const *yc, __m256 *acc) {
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q6_KX8_BLOCK) {
        __m256i isum[4] = { _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256() };
        for (int j = 0; j < 16; j++) {
            /* each row's scale j in both 16-bit halves of its lane */
            const __m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pa + 16 + 8 * j)));
            const __m256i sc = _mm256_blend_epi16(s32, _mm256_slli_epi32(s32, 16), 0xAA);
            for (int i = 0; i < 4; i++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(pa + 400 + 32 * (4 * j + i)));
                for (int k = 0; k < 4; k++) /* one vpmaddubsw per madd: its 16-bit sums stay in range */
                    isum[k] = MADD_AVX2(isum[k], _mm256_maddubs_epi16(w, BCAST32(yc[k][b].qs + 16 * j + 4 * i)), sc);
            }
        }
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        for (int k = 0; k < 4; k++) {
            const __m256i s = _mm256_sub_epi32(isum[k], Q6_CORR(MADD_AVX2, pa, &yc[k][b]));
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(yc[k][b].d)), _mm256_cvtepi32_ps(s), acc[k]);
        }
    }
}

AVX2Q void quant_q6_Kx8_gemm4_avx2(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc) {
    const blk_q8_K *yc[4];
    __m256 acc[4];
    for (int c = 0; c < 4; c++) {
        yc[c] = y[c < nc ? c : 0];
        acc[c] = _mm256_setzero_ps();
    }
    q6_Kx8_tile_avx2(nb, panel, yc, acc);
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

__attribute__((always_inline)) VNNIQ static inline void q6_Kx8_tile_vnni(int64_t nb, const char *pa,
                                                                       const blk_q8_K *const *yc, __m256 *acc,
                                                                       const int NC) {
    for (int64_t b = 0; b < nb; b++, pa += QUANT_Q6_KX8_BLOCK) {
        __m256i isum[8];
        for (int k = 0; k < NC; k++) isum[k] = _mm256_setzero_si256();
        for (int j = 0; j < 16; j++) {
            __m256i p[8];
            for (int k = 0; k < NC; k++) p[k] = _mm256_setzero_si256();
            for (int i = 0; i < 4; i++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(pa + 400 + 32 * (4 * j + i)));
                for (int k = 0; k < NC; k++) p[k] = _mm256_dpbusd_epi32(p[k], w, BCAST32(yc[k][b].qs + 16 * j + 4 * i));
            }
            const __m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(pa + 16 + 8 * j)));
            for (int k = 0; k < NC; k++) isum[k] = _mm256_add_epi32(isum[k], _mm256_mullo_epi32(p[k], s32));
        }
        const __m256 d8 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)pa));
        for (int k = 0; k < NC; k++) {
            const __m256i s = _mm256_sub_epi32(isum[k], Q6_CORR(MADD_VNNI, pa, &yc[k][b]));
            acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d8, _mm256_set1_ps(yc[k][b].d)), _mm256_cvtepi32_ps(s), acc[k]);
        }
    }
}

VNNIQ void quant_q6_Kx8_gemm8_vnni(int64_t nb, const void *panel, const void *const *y, float *const *dst, int nc) {
    const blk_q8_K *yc[8];
    __m256 acc[8];
    for (int c = 0; c < 8; c++) {
        yc[c] = y[c < nc ? c : 0];
        acc[c] = _mm256_setzero_ps();
    }
    if (nc > 4) q6_Kx8_tile_vnni(nb, panel, yc, acc, 8);
    else q6_Kx8_tile_vnni(nb, panel, yc, acc, 4);
    for (int c = 0; c < nc; c++) _mm256_storeu_ps(dst[c], acc[c]);
}

#endif /* QUANT_HAVE_X86 */
