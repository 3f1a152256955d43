/* plugins/cuda/mul_mat_mma.cu — our own tensor-core GEMMs (WMMA), for where cuBLAS is not used.
 *
 * k_mma_tn (below, via mma_gemm_tn): the prefill GEMM that gemm_blas.cu runs without cuBLAS, on the
 * operands it has already converted to f16/bf16 rows in plan scratch: 16-byte cp.async loads into
 * double-buffered shared memory, 128 x 128 tiles.
 *
 * k_gemm_mma (the older kernel, for nodes gemm_blas.cu declines): 128 x 64 output tiles, 8 warps
 * of 32 x 32 each, k in steps of 32: the weights (any supported type, dequantized element-wise) and
 * the f32 activations (any strides) are converted to bf16 in shared memory and multiplied with warp
 * matrix instructions accumulating in f32. bf16 keeps f32's range (no overflow on large
 * activations); its 8-bit mantissa costs an NMSE of about 1e-6 on the product (mul_mat's threshold
 * is 5e-4). Where the vendor has no WMMA (PYG_GPU_HAS_WMMA unset in vendor.h) or the device option mma=0,
 * mul_mat.cu uses its FFMA GEMM instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "gemm_blas.h"

#ifdef PYG_GPU_HAS_WMMA
#include <mma.h>

#define MMA_BM 128
#define MMA_BN 64
#define MMA_BK 32
#define MMA_LDS (MMA_BK + 8) /* bf16 row pitch in shared memory (bank spread; multiple of 8) */
#define MMA_THREADS 256

using namespace nvcuda;

__global__ void __launch_bounds__(MMA_THREADS) k_gemm_mma(tview A, tview B, tview C, int64_t r2, int64_t r3) {
    __shared__ __align__(32) gpu_bf16 As[MMA_BM * MMA_LDS];
    __shared__ __align__(32) gpu_bf16 Bs[MMA_BN * MMA_LDS];
    __shared__ __align__(32) float Cs[MMA_BM * MMA_BN];
    const int64_t M = A.ne[1], N = B.ne[1], K = A.ne[0];
    const int64_t i12 = blockIdx.z % B.ne[2], i13 = blockIdx.z / B.ne[2];
    const int64_t m0 = (int64_t)blockIdx.x * MMA_BM, n0 = (int64_t)blockIdx.y * MMA_BN;
    const char *abase = A.data + (i12 / r2) * A.nb[2] + (i13 / r3) * A.nb[3];
    const char *bbase = B.data + i12 * B.nb[2] + i13 * B.nb[3];
    const int warp = threadIdx.x / PYG_WARP_SIZE;
    const int wm = warp % 4, wn = warp / 4; /* warp tile: rows 32*wm, cols 32*wn */

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    /* loaders: A: thread -> row tid/2, 16 consecutive k; B: thread -> column tid/4, 8 consecutive k */
    const int ar = threadIdx.x / 2, ak = 16 * (threadIdx.x % 2);
    const int bn = threadIdx.x / 4, bk = 8 * (threadIdx.x % 4);
    const int64_t am = m0 + ar, bcol = n0 + bn;
    const char *arow = abase + (am < M ? am : 0) * A.nb[1];
    const char *bcolp = bbase + (bcol < N ? bcol : 0) * B.nb[1];

    for (int64_t k0 = 0; k0 < K; k0 += MMA_BK) {
#pragma unroll 4
        for (int t = 0; t < 16; t++) {
            const int64_t k = k0 + ak + t;
            const float v = (am < M && k < K) ? load_row_elem(arow, A.type, k, A.nb[0]) : 0.0f;
            As[ar * MMA_LDS + ak + t] = gpu_float2bf16(v);
        }
#pragma unroll
        for (int t = 0; t < 8; t++) {
            const int64_t k = k0 + bk + t;
            const float v = (bcol < N && k < K) ? *(const float *)(bcolp + k * B.nb[0]) : 0.0f;
            Bs[bn * MMA_LDS + bk + t] = gpu_float2bf16(v);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MMA_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, gpu_bf16, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, gpu_bf16, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], As + (32 * wm + 16 * i) * MMA_LDS + kk, MMA_LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], Bs + (32 * wn + 16 * j) * MMA_LDS + kk, MMA_LDS);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    /* stage through shared memory: Cs[n][m] (m fastest, as dst usually is) */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (32 * wn + 16 * j) * MMA_BM + 32 * wm + 16 * i, acc[i][j], MMA_BM,
                                    wmma::mem_col_major);
    __syncthreads();
    char *cbase = C.data + i12 * C.nb[2] + i13 * C.nb[3];
    for (int e = threadIdx.x; e < MMA_BM * MMA_BN; e += MMA_THREADS) {
        const int mm = e % MMA_BM, nn = e / MMA_BM;
        const int64_t m = m0 + mm, n = n0 + nn;
        if (m < M && n < N) *(float *)(cbase + m * C.nb[0] + n * C.nb[1]) = Cs[nn * MMA_BM + mm];
    }
}

int mma_gemm_available(void) { return cuda_opts()->mma != 0; }

int mul_mat_mma_usable(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    return mma_gemm_available() && b->ne[1] >= MMA_MIN_N && a->ne[1] >= 16 && ceil_div_u(b->ne[1], MMA_BN) <= 65535;
}

int mul_mat_mma_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    const dim3 grid(ceil_div_u(a->ne[1], MMA_BM), ceil_div_u(b->ne[1], MMA_BN), (unsigned)(b->ne[2] * b->ne[3]));
    k_gemm_mma<<<grid, MMA_THREADS, 0, c->stream>>>(make_view(a), make_view(b), make_view(n), b->ne[2] / a->ne[2],
                                                    b->ne[3] / a->ne[3]);
    return check_launch(c, "mul_mat (tensor-core gemm)");
}

/* ---------------------------------------------------------------- TN GEMM on converted operands
 *
 * What gemm_blas.cu runs where cuBLAS is missing: A [M][lda] and B [N][ldb] f16/bf16, rows of K
 * (a multiple of 32, zero-padded), both 16-byte aligned, so every tile is loaded with 16-byte
 * cp.async copies into a double-buffered shared-memory pipeline (the next k step streams in while
 * the tensor cores work on this one); rows past M or N are zero-filled by the copy itself.
 * 128 x 128 output tiles, 8 warps of 64 x 32, f32 accumulation, alpha from device memory. */
#define TN_BM 128
#define TN_BN 128
#define TN_BK 32
#define TN_LDS (TN_BK + 8) /* smem row pitch in elements: 80 bytes, 16-byte aligned chunks, banks spread */
#define TN_THREADS 256

/* 16 bytes global -> shared, asynchronous on sm_80+; zero-filled when !pred (src not read). */
__device__ __forceinline__ void tn_copy16(void *smem, const void *gmem, bool pred) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(pred ? 16 : 0));
#else
    *(uint4 *)smem = pred ? *(const uint4 *)gmem : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void tn_commit(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int N> __device__ __forceinline__ void tn_wait(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

template <typename T>
__global__ void __launch_bounds__(TN_THREADS, 2) k_mma_tn(int M, int N, int K, const T *A, int64_t lda, int64_t sa,
                                                       const T *B, int64_t ldb, int64_t sb, float *C, int64_t ldc,
                                                       int64_t sc, const float *alpha) {
    __shared__ __align__(128) T As[2][TN_BM * TN_LDS];
    __shared__ __align__(128) T Bs[2][TN_BN * TN_LDS];
    A += (int64_t)blockIdx.z * sa;
    B += (int64_t)blockIdx.z * sb;
    C += (int64_t)blockIdx.z * sc;
    const int m0 = blockIdx.x * TN_BM, n0 = blockIdx.y * TN_BN;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp % 2, wn = warp / 2; /* warp tile: rows 64*wm.., columns 32*wn.. */

    /* loader: a tile is 128 rows x 4 chunks of 8 elements; thread -> rows tid/4 and tid/4 + 64, chunk
     * tid%4 (addresses recomputed per step: cheaper than holding them in registers) */
    auto load = [&](int stage, int k0) {
        const int r0 = tid / 4, kc = (tid % 4) * 8;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = r0 + 64 * i;
            const bool pa = m0 + r < M, pb = n0 + r < N;
            tn_copy16(&As[stage][r * TN_LDS + kc], A + (int64_t)(pa ? m0 + r : 0) * lda + k0 + kc, pa);
            tn_copy16(&Bs[stage][r * TN_LDS + kc], B + (int64_t)(pb ? n0 + r : 0) * ldb + k0 + kc, pb);
        }
        tn_commit();
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    const int KT = K / TN_BK;
    load(0, 0);
    for (int kt = 0; kt < KT; kt++) {
        const int st = kt & 1;
        if (kt + 1 < KT) { /* the other buffer was last read in step kt-1, which ended with a barrier */
            load(st ^ 1, (kt + 1) * TN_BK);
            tn_wait<1>();
        } else {
            tn_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TN_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 4; i++) wmma::load_matrix_sync(fa[i], &As[st][(64 * wm + 16 * i) * TN_LDS + kk], TN_LDS);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &Bs[st][(32 * wn + 16 * j) * TN_LDS + kk], TN_LDS);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    /* epilogue: each warp stages one 16 x 16 fragment at a time in (now free) shared memory and
     * writes it column by column (C is column-major: m fastest), masking the edges */
    const float al = alpha ? *alpha : 1.0f;
    float *stage = (float *)&As[0][0] + warp * 256;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) {
#pragma unroll
            for (int t = 0; t < acc[i][j].num_elements; t++) acc[i][j].x[t] *= al;
            wmma::store_matrix_sync(stage, acc[i][j], 16, wmma::mem_col_major);
            __syncwarp();
            const int gm0 = m0 + 64 * wm + 16 * i, gn0 = n0 + 32 * wn + 16 * j;
#pragma unroll
            for (int t = lane; t < 256; t += 32) {
                const int gm = gm0 + t % 16, gn = gn0 + t / 16;
                if (gm < M && gn < N) C[gm + (int64_t)gn * ldc] = stage[t];
            }
            __syncwarp();
        }
}

int mma_gemm_tn(int f16, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B,
                int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int batch, const float *alpha,
                op_ctx *c) {
    const dim3 grid(ceil_div_u(M, TN_BM), ceil_div_u(N, TN_BN), (unsigned)batch);
    if (K % TN_BK || (lda | ldb | sa | sb) % 8 || (((uintptr_t)A | (uintptr_t)B) & 15) || M > 0x7fffffff ||
        N > 0x7fffffff || K > 0x7fffffff || batch < 1 || batch > 65535 || grid.y > 65535) {
        snprintf(c->err, c->errlen, "mul_mat: tensor-core GEMM cannot take M=%lld N=%lld K=%lld lda=%lld ldb=%lld",
                 (long long)M, (long long)N, (long long)K, (long long)lda, (long long)ldb);
        return PYG_ERR_INTERNAL;
    }
    if (f16)
        k_mma_tn<gpu_half><<<grid, TN_THREADS, 0, c->stream>>>((int)M, (int)N, (int)K, (const gpu_half *)A, lda, sa,
                                                               (const gpu_half *)B, ldb, sb, C, ldc, sc, alpha);
    else
        k_mma_tn<gpu_bf16><<<grid, TN_THREADS, 0, c->stream>>>((int)M, (int)N, (int)K, (const gpu_bf16 *)A, lda, sa,
                                                               (const gpu_bf16 *)B, ldb, sb, C, ldc, sc, alpha);
    return check_launch(c, "mul_mat (tensor-core gemm)");
}

#else /* no WMMA on this vendor */

int mma_gemm_available(void) { return 0; }
int mma_gemm_tn(int f16, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B,
                int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int batch, const float *alpha,
                op_ctx *c) {
    snprintf(c->err, c->errlen, "no tensor-core GEMM in this build");
    return PYG_ERR_INTERNAL;
}
int mul_mat_mma_usable(const pyg_tensor *n) { return 0; }
int mul_mat_mma_launch(const pyg_tensor *n, op_ctx *c) {
    snprintf(c->err, c->errlen, "no tensor-core GEMM in this build");
    return PYG_ERR_INTERNAL;
}

#endif
