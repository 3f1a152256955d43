/* plugins/cuda/mul_mat_mma.cu — the GEMM path for larger N (prefill) on tensor cores.
 *
 * 128 x 64 output tiles, 8 warps of 32 x 32 each, k in steps of 32: the weights (any supported type,
 * dequantized element-wise) and the f32 activations (any strides) are converted to bf16 in shared
 * memory and multiplied with warp matrix instructions (WMMA) accumulating in f32. bf16 keeps f32's
 * range (no overflow on large activations); its 8-bit mantissa costs an NMSE of about 1e-6 on the
 * product (mul_mat's threshold is 5e-4). Where the vendor has no WMMA (PYG_GPU_HAS_WMMA unset in
 * vendor.h) or PYGGML_CUDA_MMA=0, mul_mat.cu uses its FFMA GEMM instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"

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

int mul_mat_mma_usable(const pyg_tensor *n) {
    static int enabled = -1;
    if (enabled < 0) {
        const char *e = getenv("PYGGML_CUDA_MMA");
        enabled = !(e && strcmp(e, "0") == 0);
    }
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    return enabled && b->ne[1] >= MMA_MIN_N && a->ne[1] >= 16 && ceil_div_u(b->ne[1], MMA_BN) <= 65535;
}

int mul_mat_mma_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    const dim3 grid(ceil_div_u(a->ne[1], MMA_BM), ceil_div_u(b->ne[1], MMA_BN), (unsigned)(b->ne[2] * b->ne[3]));
    k_gemm_mma<<<grid, MMA_THREADS, 0, c->stream>>>(make_view(a), make_view(b), make_view(n), b->ne[2] / a->ne[2],
                                                    b->ne[3] / a->ne[3]);
    return check_launch(c, "mul_mat (tensor-core gemm)");
}

#else /* no WMMA on this vendor */

int mul_mat_mma_usable(const pyg_tensor *n) { return 0; }
int mul_mat_mma_launch(const pyg_tensor *n, op_ctx *c) {
    snprintf(c->err, c->errlen, "no tensor-core GEMM in this build");
    return PYG_ERR_INTERNAL;
}

#endif
