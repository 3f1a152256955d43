/* plugins/cuda/mul_mat_rp.h — mul_mat over repacked weights (mul_mat_rp.cu), as mul_mat.cu uses it. */
#ifndef PYG_CUDA_MUL_MAT_RP_H
#define PYG_CUDA_MUL_MAT_RP_H
#include "common.cuh"
#include "repack.cuh"

#define MMQ_MIN_N 9 /* columns from which the int8 GEMM runs (below: the mat-vecs) */
#define MVR_MAX 4   /* matrices per repacked mat-vec launch */

/* Mat-vec of g (1..MVR_MAX) nodes sharing one activation column, already quantized at yq/yds (the
 * mat-vec layout), nodes[i] reading the repacked weights w[i] (one type, one K with mvr_units_per_lane). */
int mvr_k_ok(int64_t K); /* K within the repacked mat-vec's reach */
int mvr_launch(const pyg_tensor *const *nodes, const rq_w *const *w, int g, const int8_t *yq, const float *yds,
               op_ctx *c);
/* A layer's gate and up mat-vecs (nodes[0], nodes[1], weights wg, wu, one activation column at yq/yds)
 * and the swiglu nodes[2] = silu(gate) * up, in one launch; oq/ods: NULL, or where the swiglu's row
 * also goes as the next mat-vec's int8 activations (M % 32 == 0). */
int mvr_glu_k_ok(int64_t K); /* K within the fused launch's reach */
int mvr_launch_glu(const pyg_tensor *const *nodes, const rq_w *wg, const rq_w *wu, const int8_t *yq, const float *yds,
                   int8_t *oq, float *ods, op_ctx *c);
/* The q/k/v + rope + cache-write launch (qkv_rope.cu; qkv_rope_can in common.cuh) with the column
 * quantized at yq/yds and ws[0..2] the repacked weights of nodes[0..2]. */
int qkv_rope_launch(const pyg_tensor *const *nodes, const rq_w *const *ws, const int8_t *yq, const float *yds,
                    op_ctx *c);
/* May node, whose weights are repacked, run on the int8 GEMM (options, device, operand layouts)? */
int mmq_usable(const pyg_tensor *node, int cc);
size_t mmq_scratch_bytes(const pyg_tensor *node);
int mmq_launch(const pyg_tensor *node, const rq_w *w, op_ctx *c);

#endif
