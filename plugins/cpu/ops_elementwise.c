/* plugins/cpu/ops_elementwise.c — ADD, MUL (src1 broadcasts over src0), SCALE, SILU, GELU, SWIGLU.
 * Rows are read through cpu_load_row (direct pointers for contiguous f32, a gather otherwise)
 * and written directly when the destination row is contiguous f32. */
#include "cpu_internal.h"

/* per-thread row buffers: ctx->wdata holds 4 of them, each `stride` floats */
static inline float *row_buf(const cpu_ctx *ctx, int k, int64_t stride) {
    return (float *)ctx->wdata + k * stride;
}
static inline int64_t buf_stride(const pyg_tensor *node) {
    int64_t m = node->ne[0];
    for (int i = 0; i < PYG_MAX_SRC; i++)
        if (node->src[i] && node->src[i]->ne[0] > m) m = node->src[i]->ne[0];
    return (m + 15) & ~(int64_t)15;
}

void cpu_op_binary(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0], *b = node->src[1];
    const cpu_vec_ops *v = cpu_vec(ctx);
    void (*f)(int64_t, float *, const float *, const float *) = node->op == PYG_OP_ADD ? v->add : v->mul;
    const int64_t ne0 = node->ne[0], nb0 = b->ne[0];
    const int64_t stride = buf_stride(node);
    int64_t r0, r1;
    cpu_split(pyg_tensor_nrows(node), ctx->ith, ctx->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % node->ne[1], i2 = (r / node->ne[1]) % node->ne[2];
        const int64_t i3 = r / (node->ne[1] * node->ne[2]);
        const float *x = cpu_load_row(a, i1, i2, i3, row_buf(ctx, 0, stride));
        const float *y = cpu_load_row(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3], row_buf(ctx, 1, stride));
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : row_buf(ctx, 2, stride);
        for (int64_t i = 0; i < ne0; i += nb0) f(nb0, z + i, x + i, y);
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    }
}

void cpu_op_unary(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0];
    const cpu_vec_ops *v = cpu_vec(ctx);
    const int64_t ne0 = node->ne[0];
    const int64_t stride = buf_stride(node);
    const float s = pyg_op_param_f32(node->op_params, 0), c = pyg_op_param_f32(node->op_params, 1);
    int64_t r0, r1;
    cpu_split(pyg_tensor_nrows(node), ctx->ith, ctx->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % node->ne[1], i2 = (r / node->ne[1]) % node->ne[2];
        const int64_t i3 = r / (node->ne[1] * node->ne[2]);
        const float *x = cpu_load_row(a, i1, i2, i3, row_buf(ctx, 0, stride));
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : row_buf(ctx, 2, stride);
        switch (node->op) {
        case PYG_OP_SCALE: v->scale(ne0, z, x, s, c); break;
        case PYG_OP_SILU: v->silu(ne0, z, x); break;
        default: v->gelu(ne0, z, x); break;
        }
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    }
}

void cpu_op_swiglu(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *a = node->src[0], *b = node->src[1];
    const cpu_vec_ops *v = cpu_vec(ctx);
    const int64_t ne0 = node->ne[0];
    const int64_t stride = buf_stride(node);
    const int swapped = node->op_params[0] == 1;
    int64_t r0, r1;
    cpu_split(pyg_tensor_nrows(node), ctx->ith, ctx->nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i1 = r % node->ne[1], i2 = (r / node->ne[1]) % node->ne[2];
        const int64_t i3 = r / (node->ne[1] * node->ne[2]);
        const float *x, *y;
        if (b) {
            x = cpu_load_row(a, i1, i2, i3, row_buf(ctx, 0, stride));
            y = cpu_load_row(b, i1, i2, i3, row_buf(ctx, 1, stride));
        } else {
            const float *row = cpu_load_row(a, i1, i2, i3, row_buf(ctx, 0, stride));
            x = swapped ? row + ne0 : row;
            y = swapped ? row : row + ne0;
        }
        float *direct = cpu_row_f32_direct(node, i1, i2, i3);
        float *z = direct ? direct : row_buf(ctx, 2, stride);
        v->swiglu(ne0, z, x, y);
        if (!direct) cpu_store_row(node, i1, i2, i3, z);
    }
}
