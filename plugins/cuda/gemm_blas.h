/* plugins/cuda/gemm_blas.h — mul_mat's prefill GEMM through cuBLAS, opened at run time (gemm_blas.cu),
 * or, where cuBLAS is missing, our own tensor-core kernel on the same converted operands.
 *
 * mul_mat.cu asks gemm_blas_scratch_bytes() when a plan is created and gemm_blas_launch() when the
 * node runs; both answer "not mine" (0 / GEMM_BLAS_DECLINED) where the path does not apply, and
 * mul_mat.cu then uses its own kernels (tensor-core WMMA in mul_mat_mma.cu, or the FFMA GEMM).
 */
#ifndef PYG_CUDA_GEMM_BLAS_H
#define PYG_CUDA_GEMM_BLAS_H

#include "common.cuh"

#define GEMM_BLAS_DECLINED (-1) /* gemm_blas_launch: path not usable for this node now; nothing was queued */

/* Plan scratch the cuBLAS path needs for `node` (workspace, converted operands); 0 when the path
 * will not take the node: N below the threshold, cuBLAS missing or switched off (option blas=0),
 * a HIP/MUSA build, or sizes beyond cuBLAS's int arguments. Opens cuBLAS on its first call. */
size_t gemm_blas_scratch_bytes(const pyg_tensor *node);

/* Queue `node` on c->stream through cuBLAS (plus conversion kernels). Returns a pyg_status, or
 * GEMM_BLAS_DECLINED (nothing queued) when the path does not take the node: the caller falls back. */
int gemm_blas_launch(const pyg_tensor *node, op_ctx *c);

/* Option blas_lib: the cuBLAS library to open instead of searching for one (process-wide; refused
 * once the library was looked for). A pyg_status, with the reason in msg. */
int32_t gemm_blas_set_library(const char *path, char *msg, size_t msglen);

/* Our tensor-core GEMM on converted operands (mul_mat_mma.cu), with cublasGemmStridedBatchedEx's
 * TN semantics: for b < batch, C[b*sc + m + n*ldc] = alpha * sum_{k < K} A[b*sa + k + m*lda] *
 * B[b*sb + k + n*ldb]; A, B f16 (f16 = 1) or bf16, C f32; alpha a device pointer, NULL = 1.
 * Needs K % 32 == 0 (zero-pad), lda, ldb, sa, sb multiples of 8 and 16-byte aligned A, B.
 * mma_gemm_available: built with WMMA and not switched off (option mma=0). */
int mma_gemm_available(void);
int mma_gemm_tn(int f16, int64_t M, int64_t N, int64_t K, const void *A, int64_t lda, int64_t sa, const void *B,
                int64_t ldb, int64_t sb, float *C, int64_t ldc, int64_t sc, int batch, const float *alpha,
                op_ctx *c);

#endif
