/* plugins/cpu/ops_attn.c — FLASH_ATTN_EXT: one pass over the keys per (query, head) with an
 * online softmax (running max and sum, the accumulator rescaled when the max grows).
 * K and V rows are used in place when contiguous f32/f16, gathered otherwise. */
#include <math.h>
#include "cpu_internal.h"

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

size_t cpu_flash_attn_thread_size(const pyg_tensor *node) {
    const pyg_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    return (size_t)(2 * pad16(q->ne[0]) + 3 * pad16(v->ne[0]) + pad16(k->ne[1]) + 64) * sizeof(float);
}

void cpu_op_flash_attn(const pyg_tensor *node, cpu_ctx *ctx) {
    const pyg_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2], *mask = node->src[3];
    const cpu_vec_ops *vo = cpu_vec(ctx);
    const int64_t D = q->ne[0], n_q = q->ne[1], H = q->ne[2], B = q->ne[3];
    const int64_t Dv = v->ne[0], n_kv = k->ne[1], H_kv = k->ne[2];
    const int64_t group = H / H_kv;
    float scale = pyg_op_param_f32(node->op_params, 0);
    const float max_bias = pyg_op_param_f32(node->op_params, 1);
    const float softcap = pyg_op_param_f32(node->op_params, 2);
    if (softcap != 0.0f) scale /= softcap;

    float *qb = (float *)ctx->wdata, *kb = qb + pad16(D), *acc = kb + pad16(D);
    float *vb = acc + pad16(Dv), *ob = vb + pad16(Dv), *mb = ob + pad16(Dv);
    const int k_f16 = k->type == PYG_TYPE_F16 && k->nb[0] == 2, k_f32 = k->type == PYG_TYPE_F32 && k->nb[0] == 4;
    const int v_f16 = v->type == PYG_TYPE_F16 && v->nb[0] == 2, v_f32 = v->type == PYG_TYPE_F32 && v->nb[0] == 4;

    int64_t t0, t1;
    cpu_split(n_q * H * B, ctx->ith, ctx->nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const int64_t h = t % H, iq = (t / H) % n_q, b = t / (H * n_q);
        const int64_t hk = h / group, bk = b % k->ne[3], bv = b % v->ne[3];
        const float *qr = cpu_load_row(q, iq, h, b, qb);
        const float *mr = mask ? cpu_load_row(mask, iq, h % mask->ne[2], b % mask->ne[3], mb) : NULL;
        const float slope = mask ? cpu_alibi_slope(max_bias, h, H) : 0.0f;
        float mx = -INFINITY, sum = 0.0f;
        memset(acc, 0, (size_t)Dv * sizeof(float));
        for (int64_t j = 0; j < n_kv; j++) {
            const float mv = mr ? slope * mr[j] : 0.0f;
            if (mv == -INFINITY) continue;
            const char *kp = cpu_row_ptr(k, j, hk, bk);
            float s;
            if (k_f16) s = vo->dot_f16_f32(D, (const uint16_t *)kp, qr);
            else if (k_f32) s = vo->dot_f32(D, (const float *)kp, qr);
            else s = vo->dot_f32(D, cpu_load_row(k, j, hk, bk, kb), qr);
            s *= scale;
            if (softcap != 0.0f) s = softcap * tanhf(s);
            s += mv;
            float w = 1.0f;
            if (s > mx) {
                const float ms = mx == -INFINITY ? 0.0f : expf(mx - s);
                mx = s;
                if (ms != 1.0f) vo->scale(Dv, acc, acc, ms, 0.0f);
                sum = sum * ms + 1.0f;
            } else {
                w = expf(s - mx);
                sum += w;
            }
            const char *vp = cpu_row_ptr(v, j, hk, bv);
            if (v_f16) vo->axpy_f16(Dv, acc, w, (const uint16_t *)vp);
            else if (v_f32) vo->axpy(Dv, acc, w, (const float *)vp);
            else vo->axpy(Dv, acc, w, cpu_load_row(v, j, hk, bv, vb));
        }
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        float *direct = cpu_row_f32_direct(node, h, iq, b);
        float *o = direct ? direct : ob;
        vo->scale(Dv, o, acc, inv, 0.0f);
        if (!direct) cpu_store_row(node, h, iq, b, o);
    }
}
