/* plugins/cpu/ops_attn.c — FLASH_ATTN_EXT with an online softmax over blocks of keys.
 *
 * A task is (query row, KV head, batch): the `group` query heads that share one KV head are
 * processed together, so each K and V row is read once per task and stays in L1 while it meets
 * every head of the group. Per block of FA_KB keys: scores (dot products), softcap, ALiBi-scaled
 * mask; then per head the running max/sum are updated once, the block's exponentials computed
 * vectorised, and the V rows accumulated. K/V rows are used in place when contiguous f32/f16. */
#include <math.h>
#include "cpu_internal.h"

#define FA_KB 64 /* keys per block */

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

size_t cpu_flash_attn_thread_size(const pyg_tensor *node) {
    const pyg_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const int64_t D = q->ne[0], Dv = v->ne[0], n_kv = k->ne[1], group = q->ne[2] / k->ne[2];
    const int64_t floats = group * (pad16(D) + pad16(Dv) + FA_KB + pad16(n_kv) + 16) +
                           FA_KB * (pad16(D) + pad16(Dv)) + pad16(Dv) + 64;
    return (size_t)floats * sizeof(float);
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
    const int k_f16 = k->type == PYG_TYPE_F16 && k->nb[0] == 2, k_f32 = k->type == PYG_TYPE_F32 && k->nb[0] == 4;
    const int v_f16 = v->type == PYG_TYPE_F16 && v->nb[0] == 2, v_f32 = v->type == PYG_TYPE_F32 && v->nb[0] == 4;
    const int mask_per_head = mask && mask->ne[2] > 1;

    /* scratch: per head of the group q row, accumulator, block scores, mask row, max, sum */
    float *w = (float *)ctx->wdata;
    float *qs = w;                          w += group * pad16(D);
    float *acc = w;                         w += group * pad16(Dv);
    float *sc = w;                          w += group * FA_KB;
    float *mrows = w;                       w += group * pad16(n_kv);
    float *mx = w;                          w += group * 8;
    float *sum = w;                         w += group * 8;
    float *kblk = w;                        w += FA_KB * pad16(D);  /* a block of K rows as f32 */
    float *vblk = w;                        w += FA_KB * pad16(Dv); /* the same for V */
    float *ob = w;
    const float *krow[FA_KB], *vrow[FA_KB];
    const float *qr[group > 0 ? group : 1], *mr[group > 0 ? group : 1];
    float slope[group > 0 ? group : 1];

    /* tasks handed out one at a time; consecutive tasks are neighbouring queries of one KV head */
    const int64_t n_tasks = n_q * H_kv * B;
    for (int64_t t = cpu_next_chunk(ctx); t < n_tasks; t = cpu_next_chunk(ctx)) {
        const int64_t iq = t % n_q, hk = (t / n_q) % H_kv, b = t / (H_kv * n_q);
        const int64_t bk = b % k->ne[3], bv = b % v->ne[3];
        for (int64_t g = 0; g < group; g++) {
            const int64_t h = hk * group + g;
            qr[g] = cpu_load_row(q, iq, h, b, qs + g * pad16(D));
            if (mask) {
                if (g == 0 || mask_per_head)
                    mr[g] = cpu_load_row(mask, iq, h % mask->ne[2], b % mask->ne[3], mrows + g * pad16(n_kv));
                else
                    mr[g] = mr[0];
                slope[g] = cpu_alibi_slope(max_bias, h, H);
            } else {
                mr[g] = NULL;
                slope[g] = 0.0f;
            }
            mx[g] = -INFINITY;
            sum[g] = 0.0f;
            memset(acc + g * pad16(Dv), 0, (size_t)Dv * sizeof(float));
        }
        for (int64_t j0 = 0; j0 < n_kv; j0 += FA_KB) {
            const int64_t nb = n_kv - j0 < FA_KB ? n_kv - j0 : FA_KB;
            /* keys masked (-inf) for every head of the group are skipped without touching K/V:
             * a decode step over a mostly empty KV cache reads only the filled part */
            int64_t live = 0;
            for (int64_t jj = 0; jj < nb; jj++) {
                int any = !mask;
                for (int64_t g = 0; g < group && !any; g++) any = mr[g][j0 + jj] != -INFINITY;
                if (!any) {
                    krow[jj] = vrow[jj] = NULL;
                    continue;
                }
                live++;
                const int64_t j = j0 + jj;
                const char *kp = cpu_row_ptr(k, j, hk, bk), *vp = cpu_row_ptr(v, j, hk, bv);
                if (k_f32) krow[jj] = (const float *)kp;
                else if (k_f16) vo->f16_to_f32((const uint16_t *)kp, kblk + jj * pad16(D), D), krow[jj] = kblk + jj * pad16(D);
                else krow[jj] = cpu_load_row(k, j, hk, bk, kblk + jj * pad16(D));
                if (v_f32) vrow[jj] = (const float *)vp;
                else if (v_f16) vo->f16_to_f32((const uint16_t *)vp, vblk + jj * pad16(Dv), Dv), vrow[jj] = vblk + jj * pad16(Dv);
                else vrow[jj] = cpu_load_row(v, j, hk, bv, vblk + jj * pad16(Dv));
            }
            if (live == 0) continue;
            /* compact the live keys to the front (scores, K and V rows in the same order) */
            int64_t idx[FA_KB], nl = 0;
            for (int64_t jj = 0; jj < nb; jj++)
                if (krow[jj]) {
                    idx[nl] = jj;
                    krow[nl] = krow[jj];
                    vrow[nl] = vrow[jj];
                    nl++;
                }
            /* scores */
            for (int64_t g = 0; g < group; g++) {
                float *s = sc + g * FA_KB;
                vo->dots(D, s, qr[g], krow, nl);
                for (int64_t l = 0; l < nl; l++) {
                    float x = s[l] * scale;
                    if (softcap != 0.0f) x = softcap * tanhf(x);
                    s[l] = mr[g] ? x + slope[g] * mr[g][j0 + idx[l]] : x;
                }
            }
            /* online softmax update, once per block and head */
            for (int64_t g = 0; g < group; g++) {
                float *s = sc + g * FA_KB;
                const float bm = vo->max(nl, s);
                if (bm == -INFINITY) { /* the whole block is masked for this head: zero weights */
                    memset(s, 0, (size_t)nl * sizeof(float));
                    continue;
                }
                if (bm > mx[g]) {
                    const float r = mx[g] == -INFINITY ? 0.0f : expf(mx[g] - bm);
                    if (r != 1.0f) vo->scale(Dv, acc + g * pad16(Dv), acc + g * pad16(Dv), r, 0.0f);
                    sum[g] *= r;
                    mx[g] = bm;
                }
                sum[g] += vo->exp_sum(nl, s, s, mx[g]); /* s now holds the weights */
            }
            /* accumulate V */
            for (int64_t g = 0; g < group; g++) {
                if (mx[g] == -INFINITY) continue;
                vo->wsum(Dv, acc + g * pad16(Dv), sc + g * FA_KB, vrow, nl);
            }
        }
        for (int64_t g = 0; g < group; g++) {
            const int64_t h = hk * group + g;
            const float inv = sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f;
            float *direct = cpu_row_f32_direct(node, h, iq, b);
            float *o = direct ? direct : ob;
            vo->scale(Dv, o, acc + g * pad16(Dv), inv, 0.0f);
            if (!direct) cpu_store_row(node, h, iq, b, o);
        }
    }
}
