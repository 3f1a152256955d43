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
#define FA_QT 8  /* queries per task: a block's K/V rows are converted once for all of them */
#define FA_PREFETCH 16 /* keys ahead whose K/V rows are prefetched */

static inline int64_t pad16(int64_t n) { return (n + 15) & ~(int64_t)15; }

size_t cpu_flash_attn_thread_size(const pyg_tensor *node) {
    const pyg_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    const int64_t D = q->ne[0], Dv = v->ne[0], n_kv = k->ne[1], group = q->ne[2] / k->ne[2];
    const int64_t rows = group * FA_QT;
    const int64_t floats = rows * (pad16(D) + pad16(Dv) + FA_KB + pad16(n_kv) + 16) +
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
    const int64_t krow_bytes = D * (int64_t)k->nb[0], vrow_bytes = Dv * (int64_t)v->nb[0];
    const int64_t rows_max = group * FA_QT; /* (query of the tile, head of the group) rows per task */

    /* scratch, per row: q, accumulator, block scores, mask row, max, sum; then a block of K and V */
    float *w = (float *)ctx->wdata;
    float *qs = w;                          w += rows_max * pad16(D);
    float *acc = w;                         w += rows_max * pad16(Dv);
    float *sc = w;                          w += rows_max * FA_KB;
    float *mrows = w;                       w += rows_max * pad16(n_kv);
    float *mx = w;                          w += rows_max * 8;
    float *sum = w;                         w += rows_max * 8;
    float *kblk = w;                        w += FA_KB * pad16(D);  /* a block of K rows as f32 */
    float *vblk = w;                        w += FA_KB * pad16(Dv); /* the same for V */
    float *ob = w;
    const float *krow[FA_KB], *vrow[FA_KB];
    const float *qr[rows_max > 0 ? rows_max : 1], *mr[rows_max > 0 ? rows_max : 1];
    float slope[rows_max > 0 ? rows_max : 1];

    /* a task is (tile of FA_QT consecutive queries, KV head, batch): each K/V row of a block is
     * converted once and meets every query of the tile and every head of the group. A row's result
     * does not depend on the tiling: keys masked for it get weight 0 exactly. */
    const int64_t n_tiles = (n_q + FA_QT - 1) / FA_QT;
    const int64_t n_tasks = n_tiles * H_kv * B;
    for (int64_t t = cpu_next_chunk(ctx); t < n_tasks; t = cpu_next_chunk(ctx)) {
        const int64_t iq0 = (t % n_tiles) * FA_QT, hk = (t / n_tiles) % H_kv, b = t / (H_kv * n_tiles);
        const int64_t nq = n_q - iq0 < FA_QT ? n_q - iq0 : FA_QT, rows = nq * group;
        const int64_t bk = b % k->ne[3], bv = b % v->ne[3];
        for (int64_t r = 0; r < rows; r++) {
            const int64_t iq = iq0 + r / group, g = r % group, h = hk * group + g;
            qr[r] = cpu_load_row(q, iq, h, b, qs + r * pad16(D));
            if (mask) {
                if (g == 0 || mask_per_head)
                    mr[r] = cpu_load_row(mask, iq, h % mask->ne[2], b % mask->ne[3], mrows + r * pad16(n_kv));
                else
                    mr[r] = mr[r - g];
                slope[r] = cpu_alibi_slope(max_bias, h, H);
            } else {
                mr[r] = NULL;
                slope[r] = 0.0f;
            }
            mx[r] = -INFINITY;
            sum[r] = 0.0f;
            memset(acc + r * pad16(Dv), 0, (size_t)Dv * sizeof(float));
        }
        for (int64_t j0 = 0; j0 < n_kv; j0 += FA_KB) {
            const int64_t nb = n_kv - j0 < FA_KB ? n_kv - j0 : FA_KB;
            /* keys masked (-inf) for every row of the task are skipped without touching K/V:
             * a decode step over a mostly empty KV cache reads only the filled part, a causal
             * prefill tile only the keys up to its last query */
            int64_t live = 0;
            for (int64_t jj = 0; jj < nb; jj++) {
                int any = !mask;
                for (int64_t r = 0; r < rows && !any; r++) any = mr[r][j0 + jj] != -INFINITY;
                if (!any) {
                    krow[jj] = vrow[jj] = NULL;
                    continue;
                }
                live++;
                const int64_t j = j0 + jj;
                const char *kp = cpu_row_ptr(k, j, hk, bk), *vp = cpu_row_ptr(v, j, hk, bv);
                if (j + FA_PREFETCH < n_kv) { /* rows of one head lie a whole cache row apart: the hardware
                                               * prefetchers miss them, the next ones are asked for here */
                    const char *kn = cpu_row_ptr(k, j + FA_PREFETCH, hk, bk), *vn = cpu_row_ptr(v, j + FA_PREFETCH, hk, bv);
                    for (int64_t o = 0; o < krow_bytes; o += 64) __builtin_prefetch(kn + o);
                    for (int64_t o = 0; o < vrow_bytes; o += 64) __builtin_prefetch(vn + o);
                }
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
            /* identity compaction (every key of the block live for some row): the mask slice is
             * contiguous, so the scale and the mask add run vectorised where that is exact */
            const int contiguous = nl == nb;
            for (int64_t r = 0; r < rows;) {
                /* each row's live keys in the block: only those enter its softmax (a causal
                 * tile's earlier queries see a prefix of the tile's keys) */
                const int pair = r + 1 < rows;
                int64_t nr[2] = {nl, pair ? nl : 0};
                for (int k = 0; k <= pair; k++)
                    if (mr[r + k])
                        while (nr[k] > 0 && mr[r + k][j0 + idx[nr[k] - 1]] == -INFINITY) nr[k]--;
                const int64_t nmax = nr[0] > nr[1] ? nr[0] : nr[1];
                if (nmax == 0) {
                    r += 1 + pair;
                    continue;
                }
                /* scores: two rows share each K row load (a score past a row's own keys is unused) */
                if (pair) vo->dots2(D, sc + r * FA_KB, sc + (r + 1) * FA_KB, qr[r], qr[r + 1], krow, nmax);
                else vo->dots(D, sc + r * FA_KB, qr[r], krow, nmax);
                int live[2] = {0, 0};
                for (int k = 0; k <= pair; k++) {
                    const int64_t rr = r + k, n = nr[k];
                    float *s = sc + rr * FA_KB;
                    if (n == 0) continue;
                    if (contiguous && softcap == 0.0f && slope[rr] == 1.0f) {
                        vo->scale(n, s, s, scale, 0.0f);
                        if (mr[rr]) vo->add(n, s, s, mr[rr] + j0);
                    } else {
                        for (int64_t l = 0; l < n; l++) {
                            float x = s[l] * scale;
                            if (softcap != 0.0f) x = softcap * tanhf(x);
                            s[l] = mr[rr] ? x + slope[rr] * mr[rr][j0 + idx[l]] : x;
                        }
                    }
                    /* online softmax update, once per block and row */
                    const float bm = vo->max(n, s);
                    if (bm == -INFINITY) continue; /* the whole block is masked for this row */
                    if (bm > mx[rr]) {
                        const float rs = mx[rr] == -INFINITY ? 0.0f : expf(mx[rr] - bm);
                        if (rs != 1.0f) vo->scale(Dv, acc + rr * pad16(Dv), acc + rr * pad16(Dv), rs, 0.0f);
                        sum[rr] *= rs;
                        mx[rr] = bm;
                    }
                    sum[rr] += vo->exp_sum(n, s, s, mx[rr]); /* s now holds the weights */
                    live[k] = 1;
                }
                /* accumulate V: two rows share each V row load when they weigh the same keys */
                if (live[0] && live[1] && nr[0] == nr[1])
                    vo->wsum2(Dv, acc + r * pad16(Dv), acc + (r + 1) * pad16(Dv), sc + r * FA_KB,
                              sc + (r + 1) * FA_KB, vrow, nr[0]);
                else
                    for (int k = 0; k <= pair; k++)
                        if (live[k]) vo->wsum(Dv, acc + (r + k) * pad16(Dv), sc + (r + k) * FA_KB, vrow, nr[k]);
                r += 1 + pair;
            }
        }
        for (int64_t r = 0; r < rows; r++) {
            const int64_t iq = iq0 + r / group, h = hk * group + r % group;
            const float inv = sum[r] > 0.0f ? 1.0f / sum[r] : 0.0f;
            float *direct = cpu_row_f32_direct(node, h, iq, b);
            float *o = direct ? direct : ob;
            vo->scale(Dv, o, acc + r * pad16(Dv), inv, 0.0f);
            if (!direct) cpu_store_row(node, h, iq, b, o);
        }
    }
}
