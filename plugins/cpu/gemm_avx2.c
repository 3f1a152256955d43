/* plugins/cpu/gemm_avx2.c — packed f32 GEMM for MUL_MAT batches (prefill).
 *
 * Goto-style blocking: for each K chunk (KC) the src1 rows of an N block are packed 6 at a time
 * (MR) and the src0 rows of an M block 16 at a time (NR), converted to f32 on the way (any type
 * with to_f32: f16, bf16 and the quantized ones); a 6x16 register tile (12 ymm accumulators)
 * runs over the chunk. Threads split M. Compiled for AVX2+FMA; called only after
 * cpu_have_avx2(). */
#include "cpu_internal.h"

#define MR 6      /* src1 rows per micro tile (broadcast operand) */
#define NR 16     /* src0 rows per micro tile (two ymm) */
#define KC 256    /* K chunk: a multiple of every block size */
#ifndef MC
#define MC 128    /* src0 rows packed at once (MC x KC floats: 128 KiB, L2) */
#endif
#ifndef NC
#define NC 768    /* src1 rows packed at once (NC x KC floats: 768 KiB, from L3) */
#endif

size_t cpu_gemm_wsize(void) {
    return (size_t)(MC * KC + NC * KC + NR * KC + MR * NR + 64) * sizeof(float);
}

#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

/* 8x8 transpose of rows r[0..7] at column k into d[i*NR + j] = r[j][k + i] */
static inline void transpose8(float *d, const float *const *r, int64_t k) {
    __m256 a0 = _mm256_loadu_ps(r[0] + k), a1 = _mm256_loadu_ps(r[1] + k), a2 = _mm256_loadu_ps(r[2] + k);
    __m256 a3 = _mm256_loadu_ps(r[3] + k), a4 = _mm256_loadu_ps(r[4] + k), a5 = _mm256_loadu_ps(r[5] + k);
    __m256 a6 = _mm256_loadu_ps(r[6] + k), a7 = _mm256_loadu_ps(r[7] + k);
    __m256 t0 = _mm256_unpacklo_ps(a0, a1), t1 = _mm256_unpackhi_ps(a0, a1);
    __m256 t2 = _mm256_unpacklo_ps(a2, a3), t3 = _mm256_unpackhi_ps(a2, a3);
    __m256 t4 = _mm256_unpacklo_ps(a4, a5), t5 = _mm256_unpackhi_ps(a4, a5);
    __m256 t6 = _mm256_unpacklo_ps(a6, a7), t7 = _mm256_unpackhi_ps(a6, a7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_store_ps(d + 0 * NR, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_store_ps(d + 1 * NR, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_store_ps(d + 2 * NR, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_store_ps(d + 3 * NR, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_store_ps(d + 4 * NR, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_store_ps(d + 5 * NR, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_store_ps(d + 6 * NR, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_store_ps(d + 7 * NR, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* dst[k*NR + j] = rows[j][k] (0 where rows[j] is NULL), k < kc */
static void pack_a(float *dst, const float *const *rows, int64_t kc) {
    int full = 1;
    for (int j = 0; j < NR; j++) full &= rows[j] != NULL;
    int64_t k = 0;
    if (full) {
        for (; k + 8 <= kc; k += 8) {
            transpose8(dst + k * NR, rows, k);
            transpose8(dst + k * NR + 8, rows + 8, k);
        }
    }
    for (; k < kc; k++)
        for (int j = 0; j < NR; j++) dst[k * NR + j] = rows[j] ? rows[j][k] : 0.0f;
}

/* c[i*ldc + j] (+)= sum_k b[k*MR + i] * a[k*NR + j] for i < mr, j < nr */
static void micro_6x16(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, int acc,
                       int mr, int nr) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t k = 0; k < kc; k++) {
        const __m256 a0 = _mm256_load_ps(a), a1 = _mm256_load_ps(a + 8);
        __m256 bb;
        bb = _mm256_broadcast_ss(b + 0); c00 = _mm256_fmadd_ps(a0, bb, c00); c01 = _mm256_fmadd_ps(a1, bb, c01);
        bb = _mm256_broadcast_ss(b + 1); c10 = _mm256_fmadd_ps(a0, bb, c10); c11 = _mm256_fmadd_ps(a1, bb, c11);
        bb = _mm256_broadcast_ss(b + 2); c20 = _mm256_fmadd_ps(a0, bb, c20); c21 = _mm256_fmadd_ps(a1, bb, c21);
        bb = _mm256_broadcast_ss(b + 3); c30 = _mm256_fmadd_ps(a0, bb, c30); c31 = _mm256_fmadd_ps(a1, bb, c31);
        bb = _mm256_broadcast_ss(b + 4); c40 = _mm256_fmadd_ps(a0, bb, c40); c41 = _mm256_fmadd_ps(a1, bb, c41);
        bb = _mm256_broadcast_ss(b + 5); c50 = _mm256_fmadd_ps(a0, bb, c50); c51 = _mm256_fmadd_ps(a1, bb, c51);
        a += NR;
        b += MR;
    }
    __m256 t[MR][2] = { { c00, c01 }, { c10, c11 }, { c20, c21 }, { c30, c31 }, { c40, c41 }, { c50, c51 } };
    if (mr == MR && nr == NR) {
        for (int i = 0; i < MR; i++) {
            float *ci = c + i * ldc;
            if (acc) {
                t[i][0] = _mm256_add_ps(t[i][0], _mm256_loadu_ps(ci));
                t[i][1] = _mm256_add_ps(t[i][1], _mm256_loadu_ps(ci + 8));
            }
            _mm256_storeu_ps(ci, t[i][0]);
            _mm256_storeu_ps(ci + 8, t[i][1]);
        }
        return;
    }
    float tmp[NR] __attribute__((aligned(32)));
    for (int i = 0; i < mr; i++) {
        _mm256_store_ps(tmp, t[i][0]);
        _mm256_store_ps(tmp + 8, t[i][1]);
        float *ci = c + i * ldc;
        for (int j = 0; j < nr; j++) ci[j] = acc ? ci[j] + tmp[j] : tmp[j];
    }
}

void cpu_gemm_f32_avx2(const pyg_tensor *node, cpu_ctx *ctx, const cpu_type_funcs *tf0, const cpu_rows *b) {
    const pyg_tensor *s0 = node->src[0], *s1 = node->src[1];
    const int64_t K = s0->ne[0], M = s0->ne[1];
    const int64_t N = s1->ne[1], B2 = s1->ne[2], B3 = s1->ne[3];
    const int64_t r2 = B2 / s0->ne[2], r3 = B3 / s0->ne[3];
    const int64_t ldc = (int64_t)node->nb[1] / 4;
    const pyg_type_traits *tr0 = pyg_type_get_traits(s0->type);

    /* scratch (64-aligned start): packed A, packed B, one converted chunk */
    float *pa = (float *)(((uintptr_t)ctx->wdata + 63) & ~(uintptr_t)63);
    float *pb = pa + MC * KC;
    float *tmp = pb + NC * KC;

    /* Work split: by batch when there are enough batches (attention-like products), else by
     * src0 rows in NR multiples, else (few src0 rows) by src1 rows in MR multiples. */
    const int64_t nb = B2 * B3, tiles_m = (M + NR - 1) / NR, tiles_n = (N + MR - 1) / MR;
    int64_t b_lo = 0, b_hi = nb, m_lo = 0, m_hi = M, n_lo = 0, n_hi = N;
    if (nb >= 2 * ctx->nth) {
        cpu_split(nb, ctx->ith, ctx->nth, &b_lo, &b_hi);
    } else if (tiles_m >= 4 * ctx->nth || tiles_n < 4 * ctx->nth) {
        int64_t t_lo, t_hi;
        cpu_split(tiles_m, ctx->ith, ctx->nth, &t_lo, &t_hi);
        m_lo = t_lo * NR;
        m_hi = t_hi * NR < M ? t_hi * NR : M;
    } else {
        int64_t t_lo, t_hi;
        cpu_split(tiles_n, ctx->ith, ctx->nth, &t_lo, &t_hi);
        n_lo = t_lo * MR;
        n_hi = t_hi * MR < N ? t_hi * MR : N;
    }
    if (m_lo >= m_hi || n_lo >= n_hi || b_lo >= b_hi) return;

    for (int64_t bi = b_lo; bi < b_hi; bi++) {
        const int64_t i2 = bi % B2, i3 = bi / B2;
        const int64_t j2 = i2 / r2, j3 = i3 / r3;
        float *cbase = (float *)((char *)node->data + i2 * (int64_t)node->nb[2] + i3 * (int64_t)node->nb[3]);
        const char *bbase = b->base + (size_t)i2 * b->s2 + (size_t)i3 * b->s3;
        for (int64_t jc = n_lo; jc < n_hi; jc += NC) {
            const int64_t nc = n_hi - jc < NC ? n_hi - jc : NC;
            for (int64_t pc = 0; pc < K; pc += KC) {
                const int64_t kc = K - pc < KC ? K - pc : KC;
                /* pack B: nc rows of src1, MR at a time, k-major inside a sliver */
                for (int64_t q = 0; q < nc; q += MR) {
                    float *dst = pb + q * kc;
                    for (int i = 0; i < MR; i++) {
                        if (q + i < nc) {
                            const float *src = (const float *)(bbase + (size_t)(jc + q + i) * b->s1) + pc;
                            for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = src[k];
                        } else {
                            for (int64_t k = 0; k < kc; k++) dst[k * MR + i] = 0.0f;
                        }
                    }
                }
                for (int64_t ic = m_lo; ic < m_hi; ic += MC) {
                    const int64_t mc = m_hi - ic < MC ? m_hi - ic : MC;
                    /* pack A: mc rows of src0 (converted to f32), NR at a time */
                    for (int64_t p = 0; p < mc; p += NR) {
                        const float *rows[NR];
                        for (int j = 0; j < NR; j++) {
                            if (p + j >= mc) {
                                rows[j] = NULL;
                                continue;
                            }
                            const char *row = cpu_row_ptr(s0, ic + p + j, j2, j3);
                            if (s0->type == PYG_TYPE_F32) {
                                rows[j] = (const float *)row + pc;
                            } else {
                                float *t = tmp + j * KC;
                                tf0->to_f32(row + (pc / tr0->block_size) * tr0->type_size, t, kc);
                                rows[j] = t;
                            }
                        }
                        pack_a(pa + p * kc, rows, kc);
                    }
                    for (int64_t q = 0; q < nc; q += MR) {
                        const int mr = nc - q < MR ? (int)(nc - q) : MR;
                        for (int64_t p = 0; p < mc; p += NR) {
                            const int nr = mc - p < NR ? (int)(mc - p) : NR;
                            micro_6x16(kc, pa + p * kc, pb + q * kc, cbase + (jc + q) * ldc + ic + p, ldc,
                                       pc > 0, mr, nr);
                        }
                    }
                }
            }
        }
    }
}

#else

void cpu_gemm_f32_avx2(const pyg_tensor *node, cpu_ctx *ctx, const cpu_type_funcs *tf0, const cpu_rows *b) {
    (void)node; (void)ctx; (void)tf0; (void)b; /* never called: simd is 0 off x86-64 */
}

#endif
