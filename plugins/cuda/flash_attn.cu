/* plugins/cuda/flash_attn.cu — FLASH_ATTN_EXT: out = softmax(scale*q.k (softcap) + slope*mask) . v
 * with online softmax, never materialising the scores.
 *
 * The kv positions are walked in tiles of one warp's width, one position per lane: each lane dots
 * the query (in shared memory) with its own K row, the tile's scores are reduced once per tile
 * (one max and one sum across the warp, not one per position), and V is accumulated with the
 * tile's probabilities broadcast lane by lane (each lane owns DPL output dims). A tile whose mask
 * is -inf everywhere (the unfilled part of a KV cache; the future under a causal mask) costs one
 * coalesced read of its mask values and nothing else, so decode over a cache of n_ctx cells costs
 * what the filled cells cost.
 *
 * Two layouts of the work:
 *  - per-query warps (prefill, n_q > 1 with enough rows to fill the device): a block holds
 *    FA_WARPS consecutive queries of one head, each warp walks the whole kv range for its query
 *    (the warps read the same K/V rows, which L1 then serves once);
 *  - split kv (decode): a block holds one query row and one of nsplit kv ranges, its warps take
 *    alternate tiles of that range, are merged through shared memory, and with nsplit > 1 write
 *    partials (m, l, o) to plan scratch that a second kernel merges.
 * Grouped-query: kv head = h / (H / H_kv).
 */
#include <math.h>
#include <stdio.h>
#include "common.cuh"

#define FA_WARPS 4
#define FA_TILE PYG_WARP_SIZE    /* kv positions per warp step: one per lane */
#define FA_MAX_D 256
#define FA_MIN_KV_PER_SPLIT (FA_WARPS * FA_TILE) /* one tile per warp at least */
#define FA_MAX_SPLITS 32

struct fa_args {
    tview q, k, v, mask, dst;
    int has_mask;
    int H, n_q, n_kv, B, D, Dv, nsplit;
    int per_query_warps;  /* 1: warps = queries (nsplit == 1); 0: warps share one query's kv range */
    int kvec;             /* K rows: 1 = f16 and 2 = f32 read 16 bytes at a time; 0 = element-wise */
    int64_t gqa;          /* H / H_kv */
    float scale, max_bias, softcap;
    float *part;          /* nsplit > 1: [rows][nsplit][Dv + 2] partials (m, l, o...) */
};

/* q (shared memory, D floats) . one K row. The vector paths load 128 bytes of the row at a time,
 * unrolled with the tail predicated, so a D=64 f16 row is in flight at once (a plain loop over the
 * run-time D issued the loads one round trip at a time: ~17 us per decode call). */
/* CH: 16-byte loads in flight per lane (16 in the split-kv decode layout: a D=128 f16 row in one
 * round trip; 8 in the per-query layout, whose register budget sets its occupancy). */
template <int CH>
__device__ __forceinline__ float fa_dot(const float *qs, const char *kr, const fa_args &a) {
    float s = 0.0f;
    if (a.kvec) {
        const int per16 = a.kvec == 1 ? 8 : 4; /* elements per 16 bytes */
        const int n16 = a.D / per16;
        for (int c0 = 0; c0 < n16; c0 += CH) {
            uint4 u[CH];
#pragma unroll
            for (int c = 0; c < CH; c++)
                if (c0 + c < n16) u[c] = ((const uint4 *)kr)[c0 + c];
#pragma unroll
            for (int c = 0; c < CH; c++) {
                if (c0 + c >= n16) break;
                const uint32_t w4[4] = {u[c].x, u[c].y, u[c].z, u[c].w};
                const float *qc = qs + (c0 + c) * per16;
                if (a.kvec == 1) {
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        s += qc[2 * e] * f16_bits_to_f32((uint16_t)(w4[e] & 0xffffu));
                        s += qc[2 * e + 1] * f16_bits_to_f32((uint16_t)(w4[e] >> 16));
                    }
                } else {
#pragma unroll
                    for (int e = 0; e < 4; e++) s += qc[e] * bits_as_f32(w4[e]);
                }
            }
        }
    } else {
        for (int d = 0; d < a.D; d++) s += qs[d] * load_f(kr + (int64_t)d * a.k.nb[0], a.k.type);
    }
    return s;
}

/* acc[lane's dims] += p_j * V row j for the tile's nv rows (p_j lives in lane j). The rows are
 * loaded FA_V_BATCH at a time (8; 16 in the decode layout with DPL <= 4) before any shuffle: a
 * load placed after a shuffle waits for it, and one round trip per row made a 32-key tile cost
 * ~16 us on the H200 (ncu: long-scoreboard stalls). */
template <int DPL, int FA_V_BATCH>
__device__ __forceinline__ void fa_acc_v(float *acc, float p, const char *vt, int nv, int lane, const fa_args &a) {
    for (int j0 = 0; j0 < nv; j0 += FA_V_BATCH) {
        float vv[FA_V_BATCH][DPL];
        /* raw loads first, conversions after: load_f's switch puts each f16 load and its
         * conversion in one branch, so every load was waited for before the next was issued */
        if (a.v.type == PYG_TYPE_F16) {
            uint16_t raw[FA_V_BATCH][DPL];
#pragma unroll
            for (int r = 0; r < FA_V_BATCH; r++) {
                const char *vr = vt + (int64_t)min(j0 + r, nv - 1) * a.v.nb[1]; /* past nv: re-read a valid row */
#pragma unroll
                for (int i = 0; i < DPL; i++) {
                    const int d = lane + PYG_WARP_SIZE * i;
                    raw[r][i] = d < a.Dv ? *(const uint16_t *)(vr + (int64_t)d * a.v.nb[0]) : (uint16_t)0;
                }
            }
#pragma unroll
            for (int r = 0; r < FA_V_BATCH; r++)
#pragma unroll
                for (int i = 0; i < DPL; i++) vv[r][i] = f16_bits_to_f32(raw[r][i]);
        } else {
#pragma unroll
            for (int r = 0; r < FA_V_BATCH; r++) {
                const char *vr = vt + (int64_t)min(j0 + r, nv - 1) * a.v.nb[1];
#pragma unroll
                for (int i = 0; i < DPL; i++) {
                    const int d = lane + PYG_WARP_SIZE * i;
                    vv[r][i] = d < a.Dv ? *(const float *)(vr + (int64_t)d * a.v.nb[0]) : 0.0f;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < FA_V_BATCH; r++) {
            float pj = gpu_shfl(p, (j0 + r) % PYG_WARP_SIZE);
            if (j0 + r >= nv) pj = 0.0f;
#pragma unroll
            for (int i = 0; i < DPL; i++) acc[i] += pj != 0.0f ? pj * vv[r][i] : 0.0f; /* a masked cell's V may hold inf/NaN */
        }
    }
}

/* DEC: the split-kv (decode) layout, with more loads in flight per lane; else per-query warps. */
template <int DPL, bool DEC>
__global__ void __launch_bounds__(FA_WARPS * PYG_WARP_SIZE) k_fattn(fa_args a) {
    constexpr int CH = DEC && DPL <= 4 ? 16 : 8, VB = DEC && DPL <= 4 ? 16 : 8;
    __shared__ float sq[FA_WARPS][FA_MAX_D];
    const int lane = threadIdx.x % PYG_WARP_SIZE, w = threadIdx.x / PYG_WARP_SIZE;
    const int h = blockIdx.x;
    const int b = blockIdx.z / a.nsplit, split = blockIdx.z % a.nsplit;
    const int hk = (int)(h / a.gqa);
    int iq, t0, t_end, t_step;
    if (a.per_query_warps) {
        iq = blockIdx.y * FA_WARPS + w;
        t0 = 0;
        t_end = a.n_kv;
        t_step = FA_TILE;
    } else {
        iq = blockIdx.y;
        int chunk = (a.n_kv + a.nsplit - 1) / a.nsplit;
        chunk = (chunk + FA_TILE - 1) / FA_TILE * FA_TILE;
        t0 = split * chunk + w * FA_TILE;
        t_end = min(a.n_kv, (split + 1) * chunk);
        t_step = FA_WARPS * FA_TILE;
    }
    const bool active = iq < a.n_q; /* per-query warps: the last block may have spare warps */

    const char *qp = a.q.data + (int64_t)iq * a.q.nb[1] + (int64_t)h * a.q.nb[2] + (int64_t)b * a.q.nb[3];
    const char *kb = a.k.data + (int64_t)hk * a.k.nb[2] + (int64_t)(b % a.k.ne[3]) * a.k.nb[3];
    const char *vb = a.v.data + (int64_t)hk * a.v.nb[2] + (int64_t)(b % a.v.ne[3]) * a.v.nb[3];
    const char *mrow = a.has_mask && active
                           ? a.mask.data + (int64_t)iq * a.mask.nb[1] + (int64_t)(h % a.mask.ne[2]) * a.mask.nb[2] +
                                 (int64_t)(b % a.mask.ne[3]) * a.mask.nb[3]
                           : NULL;
    const float slope = a.has_mask ? alibi_slope(a.max_bias, h, a.H) : 0.0f;
    if (active) { /* q is f32 (flash_attn_supports): all of a lane's loads first, one round trip */
        float qv[FA_MAX_D / PYG_WARP_SIZE];
#pragma unroll
        for (int i = 0; i < FA_MAX_D / PYG_WARP_SIZE; i++) {
            const int d = lane + PYG_WARP_SIZE * i;
            qv[i] = d < a.D ? *(const float *)(qp + (int64_t)d * a.q.nb[0]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < FA_MAX_D / PYG_WARP_SIZE; i++)
            if (lane + PYG_WARP_SIZE * i < a.D) sq[w][lane + PYG_WARP_SIZE * i] = qv[i];
    }
    __syncthreads(); /* every warp reaches this: the loop below is where inactive warps drop out */

    float acc[DPL];
#pragma unroll
    for (int i = 0; i < DPL; i++) acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int t = t0; active && t < t_end; t += t_step) {
        const int j = t + lane;
        const bool in = j < t_end;
        float mv = 0.0f;
        if (mrow && in) mv = load_f(mrow + (int64_t)j * a.mask.nb[0], a.mask.type);
        const bool live = in && mv != -INFINITY;
        if (warp_max(live ? 1.0f : 0.0f) == 0.0f) continue; /* the whole tile is masked */
        float s = -INFINITY;
        if (live) {
            s = fa_dot<CH>(sq[w], kb + (int64_t)j * a.k.nb[1], a) * a.scale;
            if (a.softcap != 0.0f) s = a.softcap * tanhf(s / a.softcap);
            if (mrow) s += slope * mv;
        }
        const float mn = fmaxf(m, warp_max(s));
        if (mn == -INFINITY) continue;
        const float p = s == -INFINITY ? 0.0f : expf(s - mn);
        const float corr = expf(m - mn); /* 0 while m is -inf */
        l = l * corr + warp_sum(p);
        m = mn;
#pragma unroll
        for (int i = 0; i < DPL; i++) acc[i] *= corr;
        fa_acc_v<DPL, VB>(acc, p, vb + (int64_t)t * a.v.nb[1], min(FA_TILE, t_end - t), lane, a);
    }

    if (a.per_query_warps) { /* each warp owns its query row: write it */
        if (!active) return;
#pragma unroll
        for (int i = 0; i < DPL; i++) {
            const int d = lane + PYG_WARP_SIZE * i;
            if (d < a.Dv)
                *(float *)(a.dst.data + (int64_t)d * a.dst.nb[0] + (int64_t)h * a.dst.nb[1] +
                           (int64_t)iq * a.dst.nb[2] + (int64_t)b * a.dst.nb[3]) = l > 0.0f ? acc[i] / l : 0.0f;
        }
        return;
    }
    /* merge the warps */
    __shared__ float sm[FA_WARPS], sl[FA_WARPS];
    __shared__ float so[FA_WARPS][DPL * PYG_WARP_SIZE];
    if (lane == 0) { sm[w] = m; sl[w] = l; }
#pragma unroll
    for (int i = 0; i < DPL; i++) so[w][lane + PYG_WARP_SIZE * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int k = 0; k < FA_WARPS; k++) M = fmaxf(M, sm[k]);
    float L = 0.0f, f[FA_WARPS];
#pragma unroll
    for (int k = 0; k < FA_WARPS; k++) {
        f[k] = sm[k] == -INFINITY ? 0.0f : expf(sm[k] - M);
        L += sl[k] * f[k];
    }
    const int64_t row = ((int64_t)b * a.n_q + iq) * a.H + h;
    for (int d = threadIdx.x; d < a.Dv; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int k = 0; k < FA_WARPS; k++) o += so[k][d] * f[k];
        if (a.nsplit == 1) {
            *(float *)(a.dst.data + (int64_t)d * a.dst.nb[0] + (int64_t)h * a.dst.nb[1] + (int64_t)iq * a.dst.nb[2] +
                       (int64_t)b * a.dst.nb[3]) = L > 0.0f ? o / L : 0.0f;
        } else {
            a.part[(row * a.nsplit + split) * (a.Dv + 2) + 2 + d] = o;
        }
    }
    if (a.nsplit > 1 && threadIdx.x == 0) {
        float *pp = a.part + (row * a.nsplit + split) * (a.Dv + 2);
        pp[0] = M;
        pp[1] = L;
    }
}

/* Merge the kv splits of one (head, query, batch) row. yq != NULL (one query, one batch, Dv % 32
 * == 0, contiguous dst; flash_attn_can_prequant): also write the output, whose flat index is
 * h * Dv + d, as the int8 activation blocks of the mat-vec that reads it next. */
__global__ void k_fattn_merge(fa_args a, int8_t *yq, float *yds) {
    const int h = blockIdx.x, iq = blockIdx.y, b = blockIdx.z;
    const int64_t row = ((int64_t)b * a.n_q + iq) * a.H + h;
    const float *pp = a.part + row * a.nsplit * (a.Dv + 2);
    float M = -INFINITY;
    for (int s = 0; s < a.nsplit; s++) M = fmaxf(M, pp[s * (a.Dv + 2)]);
    float L = 0.0f;
    for (int s = 0; s < a.nsplit; s++) {
        const float ms = pp[s * (a.Dv + 2)];
        if (ms != -INFINITY) L += pp[s * (a.Dv + 2) + 1] * expf(ms - M);
    }
    for (int d0 = 0; d0 < a.Dv; d0 += blockDim.x) { /* blockDim.x is a multiple of 32 */
        const int d = d0 + threadIdx.x;
        if (d0 + (int)(threadIdx.x - threadIdx.x % PYG_WARP_SIZE) >= a.Dv) break; /* whole warps past Dv */
        float o = 0.0f;
        if (d < a.Dv) {
            for (int s = 0; s < a.nsplit; s++) {
                const float ms = pp[s * (a.Dv + 2)];
                if (ms != -INFINITY) o += pp[s * (a.Dv + 2) + 2 + d] * expf(ms - M);
            }
            o = L > 0.0f ? o / L : 0.0f;
            *(float *)(a.dst.data + (int64_t)d * a.dst.nb[0] + (int64_t)h * a.dst.nb[1] + (int64_t)iq * a.dst.nb[2] +
                       (int64_t)b * a.dst.nb[3]) = o;
        }
        if (yq) warp_quant_block(o, yq, yds, ((int64_t)h * a.Dv + d) / 32); /* Dv % 32 == 0: whole warps in */
    }
}

/* ---------------------------------------------------------------- host side */

int flash_attn_supports(const pyg_tensor *n) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    if (!q || !k || !v || n->type != PYG_TYPE_F32 || q->type != PYG_TYPE_F32) return 0;
    if ((k->type != PYG_TYPE_F32 && k->type != PYG_TYPE_F16) || (v->type != PYG_TYPE_F32 && v->type != PYG_TYPE_F16))
        return 0;
    const int64_t D = q->ne[0], n_q = q->ne[1], H = q->ne[2], B = q->ne[3];
    const int64_t n_kv = k->ne[1], H_kv = k->ne[2], Dv = v->ne[0];
    if (D > FA_MAX_D || Dv > FA_MAX_D || k->ne[0] != D || v->ne[1] != n_kv || v->ne[2] != H_kv) return 0;
    if (H % H_kv || (k->ne[3] != B && k->ne[3] != 1) || (v->ne[3] != B && v->ne[3] != 1)) return 0;
    if (n->ne[0] != Dv || n->ne[1] != H || n->ne[2] != n_q || n->ne[3] != B) return 0;
    if (H > 0x7fffffff || n_q > 65535 || B * FA_MAX_SPLITS > 65535 || n_kv > 0x7fffffff) return 0;
    if (m) {
        if (m->type != PYG_TYPE_F32 && m->type != PYG_TYPE_F16) return 0;
        if (m->ne[0] != n_kv || m->ne[1] < n_q || H % m->ne[2] || B % m->ne[3]) return 0;
    }
    return 1;
}

static int fa_splits(const pyg_tensor *n, int n_sm) {
    const int64_t rows = n->ne[1] * n->ne[2] * n->ne[3];
    const int64_t n_kv = n->src[1]->ne[1];
    const int64_t want = 2 * (int64_t)n_sm; /* blocks to fill the device about twice */
    if (rows >= want) return 1;
    int64_t s = (want + rows - 1) / rows;
    const int64_t by_kv = n_kv / FA_MIN_KV_PER_SPLIT;
    if (s > by_kv) s = by_kv;
    if (s > FA_MAX_SPLITS) s = FA_MAX_SPLITS;
    return s < 1 ? 1 : (int)s;
}

int flash_attn_can_prequant(const pyg_tensor *n, int n_sm) {
    return n->op == PYG_OP_FLASH_ATTN_EXT && flash_attn_supports(n) && n->ne[2] == 1 && n->ne[3] == 1 &&
           n->ne[0] % 32 == 0 && pyg_tensor_is_contiguous(n) &&
           (flash_attn_dec_usable(n) || fa_splits(n, n_sm) > 1);
}

size_t flash_attn_sync_bytes(const pyg_tensor *n, int n_sm) {
    return flash_attn_dec_usable(n) ? flash_attn_dec_sync_bytes(n, n_sm) : 0;
}

size_t flash_attn_scratch_bytes(const pyg_tensor *n, int n_sm) {
    if (flash_attn_dec_usable(n)) return flash_attn_dec_scratch_bytes(n, n_sm);
    const int s = fa_splits(n, n_sm);
    if (s <= 1) return 0;
    const int64_t rows = n->ne[1] * n->ne[2] * n->ne[3];
    return (size_t)rows * (size_t)s * (size_t)(n->ne[0] + 2) * sizeof(float);
}

int flash_attn_mma_launch(const pyg_tensor *n, op_ctx *c); /* flash_attn_mma.cu */

int flash_attn_launch(const pyg_tensor *n, op_ctx *c) {
    if (flash_attn_dec_usable(n)) return flash_attn_dec_launch(n, c);
    if (n->src[0]->ne[1] >= 16) { /* prefill: tensor cores where they apply */
        const int st = flash_attn_mma_launch(n, c);
        if (st != PYG_ERR_UNSUPPORTED) return st;
    }
    fa_args a;
    a.q = make_view(n->src[0]);
    a.k = make_view(n->src[1]);
    a.v = make_view(n->src[2]);
    a.has_mask = n->src[3] != NULL;
    a.mask = a.has_mask ? make_view(n->src[3]) : a.q;
    a.dst = make_view(n);
    a.D = (int)a.q.ne[0];
    a.n_q = (int)a.q.ne[1];
    a.H = (int)a.q.ne[2];
    a.B = (int)a.q.ne[3];
    a.n_kv = (int)a.k.ne[1];
    a.Dv = (int)a.v.ne[0];
    a.gqa = a.q.ne[2] / a.k.ne[2];
    a.scale = pyg_op_param_f32(n->op_params, 0);
    a.max_bias = pyg_op_param_f32(n->op_params, 1);
    a.softcap = pyg_op_param_f32(n->op_params, 2);
    a.nsplit = fa_splits(n, c->n_sm);
    a.part = (float *)c->scratch;
    a.per_query_warps = a.nsplit == 1 && a.n_q > 1;
    {
        const pyg_tensor *k = n->src[1];
        const int64_t es = k->type == PYG_TYPE_F16 ? 2 : 4;
        const int al = ((uintptr_t)a.k.data % 16) == 0 && k->nb[1] % 16 == 0 && k->nb[2] % 16 == 0 &&
                       k->nb[3] % 16 == 0 && k->nb[0] == (size_t)es;
        a.kvec = !al ? 0 : (k->type == PYG_TYPE_F16 && a.D % 8 == 0) ? 1 : (k->type == PYG_TYPE_F32 && a.D % 4 == 0) ? 2 : 0;
    }
    if (a.nsplit > 1 && (!c->scratch || c->scratch_size < flash_attn_scratch_bytes(n, c->n_sm))) {
        snprintf(c->err, c->errlen, "flash_attn_ext: plan scratch too small");
        return PYG_ERR_INTERNAL;
    }
    const int dmax = a.D > a.Dv ? a.D : a.Dv;
    const unsigned gy = a.per_query_warps ? (unsigned)((a.n_q + FA_WARPS - 1) / FA_WARPS) : (unsigned)a.n_q;
    const dim3 grid((unsigned)a.H, gy, (unsigned)(a.B * a.nsplit));
    const unsigned th = FA_WARPS * PYG_WARP_SIZE;
    if (a.per_query_warps) {
        if (dmax <= 64) k_fattn<2, false><<<grid, th, 0, c->stream>>>(a);
        else if (dmax <= 128) k_fattn<4, false><<<grid, th, 0, c->stream>>>(a);
        else k_fattn<8, false><<<grid, th, 0, c->stream>>>(a);
    } else {
        if (dmax <= 64) k_fattn<2, true><<<grid, th, 0, c->stream>>>(a);
        else if (dmax <= 128) k_fattn<4, true><<<grid, th, 0, c->stream>>>(a);
        else k_fattn<8, true><<<grid, th, 0, c->stream>>>(a);
    }
    int st = check_launch(c, "flash_attn_ext");
    if (st != PYG_OK || a.nsplit == 1) {
        if (st == PYG_OK && c->quant_out) {
            snprintf(c->err, c->errlen, "flash_attn_ext: asked to pre-quantize without a kv split");
            return PYG_ERR_INTERNAL;
        }
        return st;
    }
    int8_t *yq = NULL;
    float *yds = NULL;
    if (c->quant_out) { /* the int8 blocks lie past the split partials in the scratch (quant_off) */
        if (a.Dv % 32 || a.n_q != 1 || a.B != 1) {
            snprintf(c->err, c->errlen, "flash_attn_ext: cannot pre-quantize this output");
            return PYG_ERR_INTERNAL;
        }
        mul_mat_quant_layout((char *)c->scratch + c->quant_off, (int64_t)a.H * a.Dv, &yq, &yds);
    }
    k_fattn_merge<<<dim3((unsigned)a.H, (unsigned)a.n_q, (unsigned)a.B), 128, 0, c->stream>>>(a, yq, yds);
    return check_launch(c, "flash_attn_ext (merge)");
}
