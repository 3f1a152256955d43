/* plugins/cuda/flash_attn_dec.cu — FLASH_ATTN_EXT for decode (a few query rows over a long f16 KV
 * cache): split over the kv cells, sized by the n_kv the node attends, with the merge of the splits
 * folded into the kernel.
 *
 * A block takes one kv head, one query row and one split of the kv range, and all G = H / H_kv
 * query heads that share that kv head, so each K/V byte is read from memory once per query row
 * (grouped-query models read a quarter of what a block per query head would). The cells are read
 * as K/V rows of D f16 values by D/8 lanes, 16 bytes each: a warp instruction covers 32/(D/8)
 * whole rows (512 bytes), U such instructions of K and of V are in flight per lane. The lanes of a
 * row reduce their partial dot products by xor shuffles, so every lane of the row holds the score
 * and keeps its own online softmax state (max, sum, 8 output dims per head): no per-tile
 * block-wide reductions. The row groups of a warp, then the 4 warps (shared memory), then the
 * splits are merged at the end. A cell whose mask is -inf is not read: the mask of the next step is
 * loaded one step ahead, so K/V loads wait for nothing, and a masked region costs its mask values.
 *
 * Splits: as many as fill the device once (blocks per multiprocessor at the kernel's launch bounds)
 * but at least 32 cells each (device option fa_split_cells), so the split count follows n_kv: a
 * decode step over the filled cells of a cache (the model's kv extent) spreads them over the whole
 * device at every depth. Each split
 * writes (max, sum, unnormalised output) per head to the plan scratch; the last block of a
 * (kv head, query row) to finish -- a counter in the plan's zero-initialised sync area, reset by
 * that block -- merges them and writes the output (and, when the next mat-vec asked for it, its
 * int8 activations): no second kernel.
 *
 * Sparse path (device option fa_sparse, n_kv <= 4096 as in llama.cpp's sparse vec kernel): each
 * block first compacts the indices of the cells its query row may see (mask finite) into shared
 * memory, in ascending order, and the splits divide the live cells, not the range: a mask with holes
 * (several sequences in one cache, windows) costs what it lets through, balanced over the splits.
 * The 4096 bound is what the index list may take of shared memory.
 */
#include <math.h>
#include <stdio.h>
#include "common.cuh"

#define FD_WARPS 4
#define FD_THREADS (FD_WARPS * PYG_WARP_SIZE)
#define FD_MAX_SPLITS 64
#define FD_SPARSE_MAX_KV 4096
#define FD_MERGE_BATCH 32 /* split partials loaded at once per lane in the final merge */
#define FD_LOG2E 1.4426950408889634f
/* Lazy rescaling: a lane keeps its running max m until a score passes m + FD_RESCALE_TH (base-2
 * units), so p = 2^(s - m) stays below 2^FD_RESCALE_TH = 256 and the rescale of (l, acc), taken by
 * the whole warp when any lane needs it, is skipped once the max has settled. */
#define FD_RESCALE_TH 8.0f

struct fd_args : fa_views {
    int nsplit, chunk;
    float *part;         /* nsplit > 1: [row group][split][G][D + 2] (max, sum, output...) */
    unsigned *count;     /* nsplit > 1: per row group, blocks done (0 between launches) */
    int8_t *yq;          /* non-NULL: also write the output as int8 mat-vec activations */
    float *yds;
};

__device__ __forceinline__ float fd_mask_at(const fd_args &a, const char *mrow, int j) {
    if (!mrow) return 0.0f;
    return a.mask_f32 ? *(const float *)(mrow + (int64_t)j * 4) : f16_bits_to_f32(*(const uint16_t *)(mrow + (int64_t)j * 2));
}

__device__ __forceinline__ void fd_unpack8(const uint4 &r, float *f) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        f[2 * e] = f16_bits_to_f32((uint16_t)(w[e] & 0xffffu));
        f[2 * e + 1] = f16_bits_to_f32((uint16_t)(w[e] >> 16));
    }
}

/* (m, l, acc) <- the merge of two online-softmax states (base-2 maxima) */
template <int N>
__device__ __forceinline__ void fd_merge(float &m, float &l, float *acc, float mo, float lo, const float *acco) {
    const float mn = fmaxf(m, mo);
    const float fa = m == -INFINITY ? 0.0f : gpu_exp2_fast(m - mn), fb = mo == -INFINITY ? 0.0f : gpu_exp2_fast(mo - mn);
    l = l * fa + lo * fb;
#pragma unroll
    for (int e = 0; e < N; e++) acc[e] = acc[e] * fa + acco[e] * fb;
    m = mn;
}

/* D: head size (64, 128, 256); G: query heads per kv head; U: row loads in flight per lane. */
template <int D, int G, int U, bool SPARSE>
__global__ void __launch_bounds__(FD_THREADS, G <= 4 ? 4 : 2) k_fattn_dec(fd_args a) {
    constexpr int LPR = D / 8, RPW = PYG_WARP_SIZE / LPR, WSTEP = U * RPW, BSTEP = FD_WARPS * WSTEP;
    const int lane = threadIdx.x % PYG_WARP_SIZE, w = threadIdx.x / PYG_WARP_SIZE;
    const int col = lane % LPR, sub = lane / LPR;
    const int hk = blockIdx.x, split = blockIdx.y, iq = blockIdx.z % a.n_q, b = blockIdx.z / a.n_q;
    const int Hkv = gridDim.x;
    pdl_wait(); /* launched with PDL (fd_launch_dg): q, the cache and the mask come from before */
    const int64_t rg = ((int64_t)b * a.n_q + iq) * Hkv + hk; /* row group: (kv head, query row) */

    __shared__ float s_acc[FD_WARPS][G][D];
    __shared__ float s_m[FD_WARPS][G], s_l[FD_WARPS][G];
    __shared__ float s_bm[G], s_bl[G], s_f[G][FD_MAX_SPLITS > FD_WARPS ? FD_MAX_SPLITS : FD_WARPS];
    __shared__ float s_ms[G][FD_MAX_SPLITS], s_ls[G][FD_MAX_SPLITS]; /* the final merge's (max, sum) per split */
    __shared__ int s_last;

    float q[G][8], slope[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        const int h = hk * G + g;
        const float *qp = (const float *)(a.q + (int64_t)iq * a.q_nb1 + (int64_t)h * a.q_nb2 + (int64_t)b * a.q_nb3) + col * 8;
#pragma unroll
        for (int e = 0; e < 8; e++) q[g][e] = qp[e] * (a.scale * FD_LOG2E); /* scores in base-2 units */
        slope[g] = a.mask ? alibi_slope(a.max_bias, h, a.H) * FD_LOG2E : 0.0f;
    }
    const char *kb = a.k + (int64_t)hk * a.k_nb2 + (int64_t)(b % a.k_ne3) * a.k_nb3 + col * 16;
    const char *vb = a.v + (int64_t)hk * a.v_nb2 + (int64_t)(b % a.v_ne3) * a.v_nb3 + col * 16;
    const char *mrow = a.mask ? a.mask + (int64_t)iq * a.m_nb1 + (int64_t)(b % a.m_ne3) * a.m_nb3 : NULL;

    /* the cells this block walks: positions [c0, c1) of the range, or of the live list */
    int c0, c1;
    const uint16_t *live = NULL;
    if constexpr (SPARSE) {
        __shared__ uint16_t s_idx[FD_SPARSE_MAX_KV];
        __shared__ int s_wn[FD_WARPS], s_n;
        constexpr int PER = FD_SPARSE_MAX_KV / FD_THREADS; /* 32 cells per thread */
        const int j0 = threadIdx.x * PER;
        uint32_t bits = 0;
#pragma unroll
        for (int e = 0; e < PER; e++)
            if (j0 + e < a.n_kv && fd_mask_at(a, mrow, j0 + e) != -INFINITY) bits |= 1u << e;
        const int cnt = __popc(bits);
        int incl = cnt; /* inclusive scan over the warp */
#pragma unroll
        for (int o = 1; o < PYG_WARP_SIZE; o <<= 1) {
            const int y = gpu_shfl(incl, lane >= o ? lane - o : lane);
            if (lane >= o) incl += y;
        }
        if (lane == PYG_WARP_SIZE - 1) s_wn[w] = incl;
        __syncthreads();
        int pos = incl - cnt;
        for (int k = 0; k < w; k++) pos += s_wn[k];
        if (threadIdx.x == FD_THREADS - 1) s_n = pos + cnt;
        for (int e = 0; e < PER; e++)
            if (bits >> e & 1u) s_idx[pos++] = (uint16_t)(j0 + e);
        __syncthreads();
        const int per = (s_n + a.nsplit - 1) / a.nsplit;
        c0 = min(s_n, split * per);
        c1 = min(s_n, c0 + per);
        live = s_idx;
    } else {
        c0 = split * a.chunk;
        c1 = min(a.n_kv, c0 + a.chunk);
    }

    float m[G], l[G], acc[G][8];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
    }

    int base = c0 + w * WSTEP;
    float mnext[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int p = base + u * RPW + sub;
        mnext[u] = p < c1 ? (SPARSE ? 0.0f : fd_mask_at(a, mrow, p)) : -INFINITY;
    }
    for (; base < c1; base += BSTEP) {
        float mv[U];
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int p = base + u * RPW + sub;
            mv[u] = mnext[u];
            const int j = SPARSE && p < c1 ? (int)live[p] : p;
            if (mv[u] != -INFINITY) {
                kr[u] = *(const uint4 *)(kb + (int64_t)j * a.k_nb1);
                vr[u] = *(const uint4 *)(vb + (int64_t)j * a.v_nb1);
                if (SPARSE) mv[u] = fd_mask_at(a, mrow, j);   /* its additive value (finite) */
            } else {
                kr[u] = make_uint4(0u, 0u, 0u, 0u);
                vr[u] = kr[u];
            }
        }
        if (!SPARSE) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int p = base + BSTEP + u * RPW + sub;
                mnext[u] = p < c1 ? fd_mask_at(a, mrow, p) : -INFINITY;
            }
        } else {
#pragma unroll
            for (int u = 0; u < U; u++) mnext[u] = base + BSTEP + u * RPW + sub < c1 ? 0.0f : -INFINITY;
        }
        float s[U][G];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[8];
            fd_unpack8(kr[u], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float t = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) t += q[g][e] * kf[e];
#pragma unroll
                for (int o = LPR / 2; o > 0; o >>= 1) t += gpu_shfl_xor(t, o);
                if (a.softcap != 0.0f) t = (a.softcap * FD_LOG2E) * tanhf(t * (1.0f / FD_LOG2E));
                s[u][g] = mv[u] == -INFINITY ? -INFINITY : t + slope[g] * mv[u];
            }
        }
        float vf[U][8];
#pragma unroll
        for (int u = 0; u < U; u++) fd_unpack8(vr[u], vf[u]);
        float smax[G];
        bool grow = false;
#pragma unroll
        for (int g = 0; g < G; g++) {
            smax[g] = s[0][g];
#pragma unroll
            for (int u = 1; u < U; u++) smax[g] = fmaxf(smax[g], s[u][g]);
            grow |= smax[g] > m[g] + FD_RESCALE_TH; /* true for any finite score while m is -inf */
        }
        if (gpu_any(grow)) { /* uniform over the warp: every lane passes the same loop steps */
#pragma unroll
            for (int g = 0; g < G; g++) {
                if (!(smax[g] > m[g])) continue;
                const float corr = gpu_exp2_fast(m[g] - smax[g]); /* 0 while m is -inf */
                l[g] *= corr;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] *= corr;
                m[g] = smax[g];
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float mg = m[g] == -INFINITY ? 0.0f : m[g]; /* then every s of g is -inf: p = 0 */
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float p = gpu_exp2_fast(s[u][g] - mg); /* 0 for a masked cell, whose K/V were not read */
                l[g] += p;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] += p * vf[u][e];
            }
        }
    }

    /* merge the row groups of the warp (lanes with the same dims), then the warps */
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int o = LPR; o < PYG_WARP_SIZE; o <<= 1) {
            float acco[8];
            const float mo = gpu_shfl_xor(m[g], o), lo = gpu_shfl_xor(l[g], o);
#pragma unroll
            for (int e = 0; e < 8; e++) acco[e] = gpu_shfl_xor(acc[g][e], o);
            fd_merge<8>(m[g], l[g], acc[g], mo, lo, acco);
        }
        if (sub == 0) {
#pragma unroll
            for (int e = 0; e < 8; e++) s_acc[w][g][col * 8 + e] = acc[g][e];
            if (lane == 0) {
                s_m[w][g] = m[g];
                s_l[w][g] = l[g];
            }
        }
    }
    __syncthreads();
    if (threadIdx.x < G) { /* per head: the block's max and sum, and each warp's factor */
        const int g = threadIdx.x;
        float M = -INFINITY, L = 0.0f;
        for (int k = 0; k < FD_WARPS; k++) M = fmaxf(M, s_m[k][g]);
        for (int k = 0; k < FD_WARPS; k++) {
            s_f[g][k] = s_m[k][g] == -INFINITY ? 0.0f : gpu_exp2_fast(s_m[k][g] - M);
            L += s_l[k][g] * s_f[g][k];
        }
        s_bm[g] = M;
        s_bl[g] = L;
    }
    __syncthreads();

    const int64_t rec = (int64_t)(D + 2);
    if (a.nsplit > 1) { /* this split's partial, then the last block of the row group merges */
        float *pp = a.part + (rg * a.nsplit + split) * G * rec;
        for (int i = threadIdx.x; i < G * D; i += FD_THREADS) {
            const int g = i / D, d = i % D;
            float o = 0.0f;
#pragma unroll
            for (int k = 0; k < FD_WARPS; k++) o += s_acc[k][g][d] * s_f[g][k];
            pp[g * rec + 2 + d] = o;
        }
        if (threadIdx.x < G) {
            pp[threadIdx.x * rec] = s_bm[threadIdx.x];
            pp[threadIdx.x * rec + 1] = s_bl[threadIdx.x];
        }
        __threadfence(); /* the partial is visible before the count says so */
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(&a.count[rg], 1u) == (unsigned)(a.nsplit - 1);
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        const volatile float *all = a.part + rg * a.nsplit * G * rec; /* other blocks' writes: not via L1 */
        /* Every load of the merge is issued in parallel: the (max, sum) pairs by all threads at once,
         * the outputs in batches of FD_MERGE_BATCH splits per lane. (A per-head serial walk over the
         * splits costs one L2 round trip per split: 64 splits x 3 walks was ~25 us per layer.) */
        constexpr int PAIRS = (G * FD_MAX_SPLITS + FD_THREADS - 1) / FD_THREADS; /* per thread, at most */
        float pm[PAIRS], pl[PAIRS];
#pragma unroll
        for (int r = 0; r < PAIRS; r++) { /* all loads first: one round trip */
            const int i = threadIdx.x + r * FD_THREADS, g = i / a.nsplit, sp = i % a.nsplit;
            if (i < G * a.nsplit) {
                pm[r] = all[(sp * G + g) * rec];
                pl[r] = all[(sp * G + g) * rec + 1];
            }
        }
#pragma unroll
        for (int r = 0; r < PAIRS; r++) {
            const int i = threadIdx.x + r * FD_THREADS, g = i / a.nsplit, sp = i % a.nsplit;
            if (i < G * a.nsplit) {
                s_ms[g][sp] = pm[r];
                s_ls[g][sp] = pl[r];
            }
        }
        __syncthreads();
        for (int g = w; g < G; g += FD_WARPS) { /* one warp per head: max, sum, then each split's factor */
            float M = -INFINITY, L = 0.0f;
            for (int sp = lane; sp < a.nsplit; sp += PYG_WARP_SIZE) M = fmaxf(M, s_ms[g][sp]);
#pragma unroll
            for (int o = PYG_WARP_SIZE / 2; o > 0; o >>= 1) M = fmaxf(M, gpu_shfl_xor(M, o));
            for (int sp = lane; sp < a.nsplit; sp += PYG_WARP_SIZE)
                if (s_ms[g][sp] != -INFINITY) L += s_ls[g][sp] * gpu_exp2_fast(s_ms[g][sp] - M);
#pragma unroll
            for (int o = PYG_WARP_SIZE / 2; o > 0; o >>= 1) L += gpu_shfl_xor(L, o);
            const float inv = L > 0.0f ? 1.0f / L : 0.0f;
            for (int sp = lane; sp < a.nsplit; sp += PYG_WARP_SIZE)
                s_f[g][sp] = s_ms[g][sp] == -INFINITY ? 0.0f : gpu_exp2_fast(s_ms[g][sp] - M) * inv;
        }
        __syncthreads();
        const int64_t sstride = (int64_t)G * rec;
        for (int i0 = w * PYG_WARP_SIZE; i0 < G * D; i0 += FD_THREADS) { /* whole warps: the quantizer shuffles */
            const int i = i0 + lane, g = i / D, d = i % D;
            const volatile float *col = all + g * rec + 2 + d;
            float o = 0.0f;
            int sp = 0;
            for (; sp + FD_MERGE_BATCH <= a.nsplit; sp += FD_MERGE_BATCH) {
                float x[FD_MERGE_BATCH];
#pragma unroll
                for (int u = 0; u < FD_MERGE_BATCH; u++) x[u] = col[(sp + u) * sstride];
#pragma unroll
                for (int u = 0; u < FD_MERGE_BATCH; u++) o += x[u] * s_f[g][sp + u];
            }
            for (; sp < a.nsplit; sp++) o += col[sp * sstride] * s_f[g][sp];
            *(float *)(a.dst + (int64_t)d * 4 + (int64_t)(hk * G + g) * a.d_nb1 + (int64_t)iq * a.d_nb2 +
                       (int64_t)b * a.d_nb3) = o;
            if (a.yq) warp_quant_block(o, a.yq, a.yds, ((int64_t)hk * G * D + i0) / 32);
        }
        if (threadIdx.x == 0) a.count[rg] = 0; /* ready for the next launch */
        return;
    }
    for (int i0 = w * PYG_WARP_SIZE; i0 < G * D; i0 += FD_THREADS) {
        const int i = i0 + lane, g = i / D, d = i % D;
        float o = 0.0f;
#pragma unroll
        for (int k = 0; k < FD_WARPS; k++) o += s_acc[k][g][d] * s_f[g][k];
        o = s_bl[g] > 0.0f ? o / s_bl[g] : 0.0f;
        *(float *)(a.dst + (int64_t)d * 4 + (int64_t)(hk * G + g) * a.d_nb1 + (int64_t)iq * a.d_nb2 + (int64_t)b * a.d_nb3) = o;
        if (a.yq) warp_quant_block(o, a.yq, a.yds, ((int64_t)hk * G * D + i0) / 32);
    }
}

/* ---------------------------------------------------------------- host side */

static int fd_aligned16(const pyg_tensor *t) {
    return ((uintptr_t)t->data % 16) == 0 && t->nb[1] % 16 == 0 && t->nb[2] % 16 == 0 && t->nb[3] % 16 == 0;
}

int flash_attn_dec_usable(const pyg_tensor *n) {
    if (!cuda_opts()->fa_decode || !flash_attn_supports(n)) return 0;
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    const int64_t D = q->ne[0], n_q = q->ne[1], H = q->ne[2], B = q->ne[3], H_kv = k->ne[2];
    if (n_q * B > 8 || (D != 64 && D != 128 && D != 256) || v->ne[0] != D) return 0;
    const int64_t G = H / H_kv;
    if (G != 1 && G != 2 && G != 4 && G != 8) return 0;
    if (k->type != PYG_TYPE_F16 || v->type != PYG_TYPE_F16 || k->nb[0] != 2 || v->nb[0] != 2) return 0;
    if (!fd_aligned16(k) || !fd_aligned16(v) || q->nb[0] != 4 || n->nb[0] != 4) return 0;
    if (m && (m->ne[2] != 1 || m->nb[0] != (m->type == PYG_TYPE_F32 ? 4u : 2u))) return 0;
    return 1;
}

static int fd_sparse(const pyg_tensor *n) {
    return cuda_opts()->fa_sparse && n->src[3] && n->src[1]->ne[1] <= FD_SPARSE_MAX_KV;
}

/* Splits: blocks for one wave at the kernel's launch bounds, >= option fa_split_cells cells each. */
static int fd_splits(const pyg_tensor *n, int n_sm, int *chunk) {
    const pyg_tensor *q = n->src[0], *k = n->src[1];
    const int64_t groups = k->ne[2] * q->ne[1] * q->ne[3], n_kv = k->ne[1];
    const int64_t G = q->ne[2] / k->ne[2];
    const int64_t want = (int64_t)n_sm * (G <= 4 ? 4 : 2);
    int64_t s = want / groups;
    const int64_t per = cuda_opts()->fa_split_cells;
    const int64_t by_kv = (n_kv + per - 1) / per;
    if (s > by_kv) s = by_kv;
    if (s > FD_MAX_SPLITS) s = FD_MAX_SPLITS;
    if (s < 1) s = 1;
    int64_t c = (n_kv + s - 1) / s;
    c = (c + 15) / 16 * 16;
    if (chunk) *chunk = (int)c;
    return (int)((n_kv + c - 1) / c);
}

size_t flash_attn_dec_scratch_bytes(const pyg_tensor *n, int n_sm) {
    const int s = fd_splits(n, n_sm, NULL);
    if (s <= 1) return 0;
    const pyg_tensor *q = n->src[0];
    return (size_t)q->ne[1] * q->ne[2] * q->ne[3] * s * (q->ne[0] + 2) * sizeof(float); /* groups * G = H */
}

size_t flash_attn_dec_sync_bytes(const pyg_tensor *n, int n_sm) {
    if (fd_splits(n, n_sm, NULL) <= 1) return 0;
    const pyg_tensor *q = n->src[0], *k = n->src[1];
    return (size_t)(k->ne[2] * q->ne[1] * q->ne[3]) * sizeof(unsigned);
}

#ifdef PYG_GPU_HOST_EMU /* plugins/cuda/test/fattn_dec_host.cpp: blocks run on host threads */
#define FD_LAUNCH(kernel, grid, a, st, pdl) ((void)st, (void)pdl, emu_launch(kernel, grid, FD_THREADS, a) == 0 || (abort(), 0))
#else
#define FD_LAUNCH(kernel, grid, a, st, pdl) launch_maybe_pdl(pdl, kernel, grid, dim3(FD_THREADS), st, a)
#endif

template <int D, int G>
static void fd_launch_dg(const fd_args &a, dim3 grid, bool sparse, gpuStream_t st, int pdl) {
    constexpr int U = G <= 2 ? 4 : 2;
    void (*kern)(fd_args) = sparse ? k_fattn_dec<D, G, U, true> : k_fattn_dec<D, G, U, false>;
    FD_LAUNCH(kern, grid, a, st, pdl);
}

template <int D>
static void fd_launch_d(const fd_args &a, int G, dim3 grid, bool sparse, gpuStream_t st, int pdl) {
    switch (G) {
    case 1: fd_launch_dg<D, 1>(a, grid, sparse, st, pdl); break;
    case 2: fd_launch_dg<D, 2>(a, grid, sparse, st, pdl); break;
    case 4: fd_launch_dg<D, 4>(a, grid, sparse, st, pdl); break;
    default: fd_launch_dg<D, 8>(a, grid, sparse, st, pdl); break;
    }
}

int flash_attn_dec_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *q = n->src[0], *k = n->src[1];
    fd_args a;
    memset(&a, 0, sizeof a);
    fa_views_of(n, &a);
    if (a.softcap != 0.0f) a.scale /= a.softcap;
    a.nsplit = fd_splits(n, c->n_sm, &a.chunk);
    const int D = (int)q->ne[0], G = (int)(q->ne[2] / k->ne[2]);
    if (a.nsplit > 1) {
        const size_t need = flash_attn_dec_scratch_bytes(n, c->n_sm), sync = flash_attn_dec_sync_bytes(n, c->n_sm);
        if (!c->scratch || c->scratch_size < need || c->sync_bytes < sync) {
            snprintf(c->err, c->errlen, "flash_attn_ext: plan scratch too small (decode splits)");
            return PYG_ERR_INTERNAL;
        }
        a.part = (float *)c->scratch;
        a.count = (unsigned *)((char *)c->scratch + c->sync_off);
    }
    if (c->quant_out) { /* the int8 blocks lie past the split partials in the scratch (quant_off) */
        if (D % 32 || a.n_q != 1 || q->ne[3] != 1) {
            snprintf(c->err, c->errlen, "flash_attn_ext: cannot pre-quantize this output");
            return PYG_ERR_INTERNAL;
        }
        mul_mat_quant_layout((char *)c->scratch + c->quant_off, (int64_t)a.H * D, &a.yq, &a.yds);
    }
    const dim3 grid((unsigned)k->ne[2], (unsigned)a.nsplit, (unsigned)(a.n_q * q->ne[3]));
    const bool sparse = fd_sparse(n);
    const int pdl = cuda_opts()->pdl && c->cc >= 90;
    if (D == 64) fd_launch_d<64>(a, G, grid, sparse, c->stream, pdl);
    else if (D == 128) fd_launch_d<128>(a, G, grid, sparse, c->stream, pdl);
    else fd_launch_d<256>(a, G, grid, sparse, c->stream, pdl);
    return check_launch(c, "flash_attn_ext (decode)");
}
