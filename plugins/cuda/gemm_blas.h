/* plugins/cuda/gemm_blas.h — mul_mat's prefill GEMM through cuBLAS, opened at run time (gemm_blas.cu).
 *
 * mul_mat.cu asks gemm_blas_scratch_bytes() when a plan is created and gemm_blas_launch() when the
 * node runs; both answer "not mine" (0 / GEMM_BLAS_DECLINED) where the path does not apply, and
 * mul_mat.cu then uses its own kernels (tensor-core WMMA in mul_mat_mma.cu, or the FFMA GEMM).
 */
#ifndef PYG_CUDA_GEMM_BLAS_H
#define PYG_CUDA_GEMM_BLAS_H

#include "common.cuh"

#define GEMM_BLAS_MIN_N 32    /* default smallest N (columns of src1) sent to cuBLAS; PYGGML_CUDA_BLAS_MIN_N */
#define GEMM_BLAS_DECLINED (-1) /* gemm_blas_launch: path not usable for this node now; nothing was queued */

/* Plan scratch the cuBLAS path needs for `node` (workspace, converted operands); 0 when the path
 * will not take the node: N below the threshold, cuBLAS missing or switched off (PYGGML_CUDA_BLAS=0),
 * a HIP/MUSA build, or sizes beyond cuBLAS's int arguments. Opens cuBLAS on its first call. */
size_t gemm_blas_scratch_bytes(const pyg_tensor *node);

/* Queue `node` on c->stream through cuBLAS (plus conversion kernels). Returns a pyg_status, or
 * GEMM_BLAS_DECLINED (nothing queued) when the path does not take the node: the caller falls back. */
int gemm_blas_launch(const pyg_tensor *node, op_ctx *c);

#endif
