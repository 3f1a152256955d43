/* plugins/cuda/flash_attn_mma.cu — FLASH_ATTN_EXT for prefill on tensor cores (WMMA, f16 in, f32
 * accumulate): the per-query-warp kernel of flash_attn.cu runs every q.k and p.v product on FFMA,
 * which made attention half of a 7b prefill's GPU time (734 us per layer at 512 tokens on the H200).
 *
 * A block takes 64 consecutive queries of one (head, batch), 16 per warp, and walks the kv range
 * in tiles of 64 positions staged in shared memory (K and V rows are f16 in the cache already; Q is
 * rounded to f16 once). Two passes over the tiles instead of an online softmax: the first computes
 * each row's maximum score, the second exp(s - max), its row sum and O += P.V with the output
 * accumulators left in WMMA fragments for the whole walk. WMMA fragments have no documented element
 * layout, so an online rescale of O would need a round trip through shared memory per tile; the
 * extra q.k pass costs less than that. A tile whose mask is -inf for all the block's rows (the
 * causal future, the unfilled cache) is skipped in both passes.
 *
 * Taken when: the vendor has WMMA (vendor.h), n_q >= 16, K and V f16 with 16-byte aligned rows,
 * D == Dv in {64, 128}, and either fa_mma=1 or (fa_mma=2, the default) the online-softmax kernel of
 * fattn_mma.cuh does not take the node (before sm_80, an f32 mask); fa_mma=0 turns both off.
 * Otherwise flash_attn.cu's kernels run.
 * Precision: Q and P in f16 add an NMSE of about 1e-6 (flash_attn_ext's threshold is 5e-4).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#ifdef PYG_GPU_HAS_INT8_MMA
#include "fattn_mma.cuh"
#endif

int flash_attn_mma_launch(const pyg_tensor *n, op_ctx *c);

#ifdef PYG_GPU_HAS_WMMA
#include <mma.h>
using namespace nvcuda;

#define FM_QB 64       /* queries per block (16 per warp) */
#define FM_KT 64       /* kv positions per tile */
#define FM_WARPS 4
#define FM_THREADS (FM_WARPS * PYG_WARP_SIZE)

struct fm_args {
    tview q, k, v, mask, dst;
    int has_mask, n_q, n_kv, H;
    int64_t gqa;
    float scale, max_bias, softcap;
};

/* shared memory layout (halves unless noted), pitches padded by 16 bytes against bank conflicts */
template <int D> struct fm_smem {
    static constexpr int LDH = D + 8;            /* Q, K, V row pitch (halves) */
    static constexpr int LDS = FM_KT + 4;        /* S row pitch (floats) */
    static constexpr int LDP = FM_KT + 8;        /* P row pitch (halves) */
    static constexpr int LDO = D + 4;            /* O staging row pitch (floats) */
    static constexpr size_t Q_OFF = 0;
    static constexpr size_t K_OFF = Q_OFF + (size_t)FM_QB * LDH * 2;
    static constexpr size_t V_OFF = K_OFF + (size_t)FM_KT * LDH * 2;
    static constexpr size_t S_OFF = V_OFF + (size_t)FM_KT * LDH * 2;
    static constexpr size_t P_OFF = S_OFF + (size_t)FM_WARPS * 16 * LDS * 4;
    static constexpr size_t BYTES = P_OFF + (size_t)FM_WARPS * 16 * LDP * 2;
    /* at the end each warp stages its 16 x D outputs over the K and V tiles */
    static_assert((size_t)FM_WARPS * 16 * LDO * 4 <= S_OFF - K_OFF, "O staging must fit over K and V");
};

/* rows [t0, t0 + FM_KT) of a K or V head into shared memory as f16 (zeros past n_kv); each
 * thread's global loads are all issued before its shared stores */
template <int D>
__device__ __forceinline__ void fm_load_tile(gpu_half *dst, const char *base, int64_t nb1, int t0, int n_kv) {
    constexpr int CH = D / 8;                        /* 16-byte chunks per row */
    constexpr int PER = FM_KT * CH / FM_THREADS;     /* 8 (D = 128) or 4 (D = 64) per thread */
    uint4 v[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = threadIdx.x + u * FM_THREADS, r = i / CH, cc = i % CH;
        v[u] = t0 + r < n_kv ? *(const uint4 *)(base + (int64_t)(t0 + r) * nb1 + cc * 16) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = threadIdx.x + u * FM_THREADS, r = i / CH, cc = i % CH;
        *(uint4 *)(dst + r * fm_smem<D>::LDH + cc * 8) = v[u];
    }
}

/* Mask values of positions t .. t+31 of one row into registers (-inf past n_kv): one 64-byte run
 * of f16 when aligned, else 32 independent element loads (all issued before any use). */
__device__ __forceinline__ void fm_mask32(const fm_args &a, const char *mrow, int t, float *mv) {
    const char *p = mrow + (int64_t)t * a.mask.nb[0];
    if (a.mask.type == PYG_TYPE_F16 && a.mask.nb[0] == 2 && ((uintptr_t)p & 15) == 0 && t + 32 <= a.n_kv) {
        uint4 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = ((const uint4 *)p)[i];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t x[4] = {w[i].x, w[i].y, w[i].z, w[i].w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                mv[8 * i + 2 * e] = f16_bits_to_f32((uint16_t)(x[e] & 0xffffu));
                mv[8 * i + 2 * e + 1] = f16_bits_to_f32((uint16_t)(x[e] >> 16));
            }
        }
        return;
    }
    const bool f16 = a.mask.type == PYG_TYPE_F16;
#pragma unroll
    for (int j = 0; j < 32; j++) {
        const char *q = p + (int64_t)j * a.mask.nb[0];
        mv[j] = t + j >= a.n_kv ? -INFINITY : f16 ? f16_bits_to_f32(*(const uint16_t *)q) : *(const float *)q;
    }
}

/* Is any (row, position) of this block's rows in tile [t0, t0 + FM_KT) unmasked? (all threads:
 * it ends in a barrier) */
__device__ __forceinline__ bool fm_tile_live(const fm_args &a, const char *mbase, int q0, int t0) {
    bool live = false;
    if (!a.has_mask) {
        live = true;
    } else {
        const int r = threadIdx.x / 2, c0 = (threadIdx.x & 1) * (FM_KT / 2); /* 64 rows x 2 halves */
        const int iq = q0 + r;
        if (iq < a.n_q && t0 + c0 < a.n_kv) {
            float mv[32];
            fm_mask32(a, mbase + (int64_t)iq * a.mask.nb[1], t0 + c0, mv);
#pragma unroll
            for (int j = 0; j < 32; j++) live |= mv[j] != -INFINITY;
        }
    }
    return __syncthreads_or(live) != 0;
}

/* This warp's 16 x FM_KT scores of tile t0 into its S rows: scale, softcap, ALiBi mask applied,
 * -inf where masked or past n_kv. Lane layout afterwards: row lane/2, columns (lane&1)*32 + j. */
template <int D>
__device__ __forceinline__ void fm_scores(const fm_args &a, const gpu_half *Qw, const gpu_half *Ks, float *Sw,
                                          const char *mbase, int q0w, int t0, float slope) {
    constexpr int LDH = fm_smem<D>::LDH, LDS = fm_smem<D>::LDS;
#pragma unroll
    for (int nt = 0; nt < FM_KT / 16; nt++) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> s;
        wmma::fill_fragment(s, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, gpu_half, wmma::row_major> qa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, gpu_half, wmma::col_major> kb;
            wmma::load_matrix_sync(qa, Qw + kk * 16, LDH);
            wmma::load_matrix_sync(kb, Ks + nt * 16 * LDH + kk * 16, LDH); /* K^T: key rows as columns */
            wmma::mma_sync(s, qa, kb, s);
        }
        wmma::store_matrix_sync(Sw + nt * 16, s, LDS, wmma::mem_row_major);
    }
    __syncwarp();
    const int lane = threadIdx.x % PYG_WARP_SIZE, r = lane / 2, c0 = (lane & 1) * (FM_KT / 2);
    const int iq = q0w + r;
    float mv[32];
#pragma unroll
    for (int j = 0; j < 32; j++) mv[j] = 0.0f;
    if (a.has_mask && iq < a.n_q && t0 + c0 < a.n_kv) fm_mask32(a, mbase + (int64_t)iq * a.mask.nb[1], t0 + c0, mv);
#pragma unroll
    for (int j = 0; j < FM_KT / 2; j++) {
        const int t = t0 + c0 + j;
        float s = Sw[r * LDS + c0 + j] * a.scale;
        if (a.softcap != 0.0f) s = a.softcap * tanhf(s / a.softcap);
        if (iq >= a.n_q || t >= a.n_kv || mv[j] == -INFINITY) s = -INFINITY;
        else s += slope * mv[j];
        Sw[r * LDS + c0 + j] = s;
    }
    __syncwarp();
}

template <int D>
__global__ void __launch_bounds__(FM_THREADS) k_fattn_mma(fm_args a) {
    extern __shared__ __align__(128) unsigned char fm_raw[];
    typedef fm_smem<D> L;
    gpu_half *Qs = (gpu_half *)(fm_raw + L::Q_OFF), *Ks = (gpu_half *)(fm_raw + L::K_OFF);
    gpu_half *Vs = (gpu_half *)(fm_raw + L::V_OFF);
    const int warp = threadIdx.x / PYG_WARP_SIZE, lane = threadIdx.x % PYG_WARP_SIZE;
    float *Sw = (float *)(fm_raw + L::S_OFF) + warp * 16 * L::LDS;
    gpu_half *Pw = (gpu_half *)(fm_raw + L::P_OFF) + warp * 16 * L::LDP;
    const int h = blockIdx.x, q0 = blockIdx.y * FM_QB, b = blockIdx.z;
    const int hk = (int)(h / a.gqa);
    const char *kb = a.k.data + (int64_t)hk * a.k.nb[2] + (int64_t)(b % a.k.ne[3]) * a.k.nb[3];
    const char *vb = a.v.data + (int64_t)hk * a.v.nb[2] + (int64_t)(b % a.v.ne[3]) * a.v.nb[3];
    const char *mbase = a.has_mask ? a.mask.data + (int64_t)(h % a.mask.ne[2]) * a.mask.nb[2] +
                                         (int64_t)(b % a.mask.ne[3]) * a.mask.nb[3]
                                   : NULL;
    const float slope = a.has_mask ? alibi_slope(a.max_bias, h, a.H) : 0.0f;

    /* Q rows -> f16, eight loads in flight per thread */
    for (int i0 = threadIdx.x; i0 < FM_QB * D; i0 += 8 * FM_THREADS) {
        float v[8];
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * FM_THREADS, r = i / D, d = i % D, iq = q0 + r;
            v[u] = iq < a.n_q ? *(const float *)(a.q.data + (int64_t)d * a.q.nb[0] + (int64_t)iq * a.q.nb[1] +
                                                 (int64_t)h * a.q.nb[2] + (int64_t)b * a.q.nb[3])
                              : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const int i = i0 + u * FM_THREADS;
            Qs[(i / D) * L::LDH + i % D] = gpu_float2half(v[u]);
        }
    }
    __syncthreads();
    const gpu_half *Qw = Qs + warp * 16 * L::LDH;
    const int q0w = q0 + warp * 16;

    /* pass 1: row maxima (each row lives in two lanes) */
    float m = -INFINITY;
    for (int t0 = 0; t0 < a.n_kv; t0 += FM_KT) {
        if (!fm_tile_live(a, mbase, q0, t0)) continue; /* ends in a barrier: the K tile is free */
        fm_load_tile<D>(Ks, kb, a.k.nb[1], t0, a.n_kv);
        __syncthreads();
        fm_scores<D>(a, Qw, Ks, Sw, mbase, q0w, t0, slope);
        const int r = lane / 2, c0 = (lane & 1) * (FM_KT / 2);
        for (int j = 0; j < FM_KT / 2; j++) m = fmaxf(m, Sw[r * L::LDS + c0 + j]);
    }
    m = fmaxf(m, gpu_shfl_xor(m, 1));

    /* pass 2: P = exp(s - m), l = sum P, O += P.V */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> o[D / 16];
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::fill_fragment(o[j], 0.0f);
    float l = 0.0f;
    for (int t0 = 0; t0 < a.n_kv; t0 += FM_KT) {
        if (!fm_tile_live(a, mbase, q0, t0)) continue;
        fm_load_tile<D>(Ks, kb, a.k.nb[1], t0, a.n_kv);
        fm_load_tile<D>(Vs, vb, a.v.nb[1], t0, a.n_kv);
        __syncthreads();
        fm_scores<D>(a, Qw, Ks, Sw, mbase, q0w, t0, slope);
        {
            const int r = lane / 2, c0 = (lane & 1) * (FM_KT / 2);
            for (int j = 0; j < FM_KT / 2; j++) {
                const float s = Sw[r * L::LDS + c0 + j];
                const float p = s == -INFINITY ? 0.0f : expf(s - m);
                l += p;
                Pw[r * L::LDP + c0 + j] = gpu_float2half(p);
            }
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < FM_KT / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, gpu_half, wmma::row_major> pa;
            wmma::load_matrix_sync(pa, Pw + kk * 16, L::LDP);
#pragma unroll
            for (int j = 0; j < D / 16; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, gpu_half, wmma::row_major> vf;
                wmma::load_matrix_sync(vf, Vs + kk * 16 * L::LDH + j * 16, L::LDH);
                wmma::mma_sync(o[j], pa, vf, o[j]);
            }
        }
        __syncthreads(); /* the K and V tiles are rewritten by the next live tile */
    }
    l += gpu_shfl_xor(l, 1);

    /* stage O over the (now unused) K and V tiles, then write rows / l */
    __syncthreads();
    float *Ow = (float *)(fm_raw + L::K_OFF) + warp * 16 * L::LDO;
#pragma unroll
    for (int j = 0; j < D / 16; j++) wmma::store_matrix_sync(Ow + j * 16, o[j], L::LDO, wmma::mem_row_major);
    __syncwarp();
    const int r = lane / 2, iq = q0w + r;
    if (iq < a.n_q) {
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        for (int d = (lane & 1); d < D; d += 2)
            *(float *)(a.dst.data + (int64_t)d * a.dst.nb[0] + (int64_t)h * a.dst.nb[1] + (int64_t)iq * a.dst.nb[2] +
                       (int64_t)b * a.dst.nb[3]) = Ow[r * L::LDO + d] * inv;
    }
}

static int fa_mma_enabled(void) { return cuda_opts()->fa_mma != 0; }

#ifdef PYG_GPU_HAS_INT8_MMA /* mma.sync, ldmatrix and cp.async (sm_80) */
template <int D>
__global__ void __launch_bounds__(FA2_THREADS) k_fattn_mma2(fa2_args a) {
    extern __shared__ __align__(16) unsigned char fa2_raw[];
    DevThr t;
    fa2_body<D>(t, a, fa2_raw);
}

template <int D>
static int fa2_launch_d(const fa2_args &a, int B, op_ctx *c) {
    static int attr_set[PYG_SMEM_OPT_DEVICES];
    const size_t smem = fa2_smem<D>::BYTES;
    if (smem_opt_in(k_fattn_mma2<D>, smem, c->device, attr_set) != gpuSuccess) return PYG_ERR_UNSUPPORTED;
    k_fattn_mma2<D><<<dim3((unsigned)a.H, (unsigned)(a.nqb * B)), FA2_THREADS, smem, c->stream>>>(a);
    return check_launch(c, "flash_attn_ext (tensor cores, online softmax)");
}

/* fa_mma=2: fattn_mma.cuh's kernel where its requirements hold (sm_80+, f16 mask or none), else
 * PYG_ERR_UNSUPPORTED and the two-pass kernel below is tried. */
static int fa2_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *m = n->src[3];
    if (c->cc < 80) return PYG_ERR_UNSUPPORTED;
    if (q->nb[0] != 4 || n->nb[0] != 4) return PYG_ERR_UNSUPPORTED;
    if (m && (m->type != PYG_TYPE_F16 || m->nb[0] != 2 || ((uintptr_t)m->data | m->nb[1] | m->nb[2] | m->nb[3]) & 15 ||
              m->ne[0] < k->ne[1] || m->ne[1] < q->ne[1]))
        return PYG_ERR_UNSUPPORTED;
    const int64_t nqb = (q->ne[1] + FA2_QB - 1) / FA2_QB;
    if (nqb * q->ne[3] > 65535 || q->ne[2] > 65535) return PYG_ERR_UNSUPPORTED;
    fa2_args a;
    memset(&a, 0, sizeof a);
    fa_views_of(n, &a);
    a.gqa = (int)(q->ne[2] / k->ne[2]);
    a.nqb = (int)nqb;
    return q->ne[0] == 64 ? fa2_launch_d<64>(a, (int)q->ne[3], c) : fa2_launch_d<128>(a, (int)q->ne[3], c);
}
#else
static int fa2_launch(const pyg_tensor *, op_ctx *) { return PYG_ERR_UNSUPPORTED; }
#endif

template <int D>
static int fm_launch(const fm_args &a, int B, op_ctx *c) {
    static int attr_set[PYG_SMEM_OPT_DEVICES];
    const size_t smem = fm_smem<D>::BYTES;
    if (smem_opt_in(k_fattn_mma<D>, smem, c->device, attr_set) != gpuSuccess)
        return PYG_ERR_UNSUPPORTED; /* not this device: the FFMA kernel runs */
    const dim3 grid((unsigned)a.H, (unsigned)((a.n_q + FM_QB - 1) / FM_QB), (unsigned)B);
    k_fattn_mma<D><<<grid, FM_THREADS, smem, c->stream>>>(a);
    return check_launch(c, "flash_attn_ext (tensor cores)");
}

/* PYG_ERR_UNSUPPORTED: not taken here (nothing queued); the caller runs its own kernels. */
int flash_attn_mma_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    if (!fa_mma_enabled() || q->ne[1] < 16) return PYG_ERR_UNSUPPORTED;
    const int64_t D = q->ne[0];
    if ((D != 64 && D != 128) || v->ne[0] != D || k->type != PYG_TYPE_F16 || v->type != PYG_TYPE_F16)
        return PYG_ERR_UNSUPPORTED;
    if (k->nb[0] != 2 || ((uintptr_t)k->data | k->nb[1] | k->nb[2] | k->nb[3]) & 15) return PYG_ERR_UNSUPPORTED;
    if (v->nb[0] != 2 || ((uintptr_t)v->data | v->nb[1] | v->nb[2] | v->nb[3]) & 15) return PYG_ERR_UNSUPPORTED;
    if (q->ne[2] > 65535 || q->ne[3] > 65535 || (q->ne[1] + FM_QB - 1) / FM_QB > 65535) return PYG_ERR_UNSUPPORTED;
    if (cuda_opts()->fa_mma >= 2) {
        const int st = fa2_launch(n, c);
        if (st != PYG_ERR_UNSUPPORTED) return st;
    }
    fm_args a;
    a.q = make_view(q);
    a.k = make_view(k);
    a.v = make_view(v);
    a.has_mask = m != NULL;
    a.mask = m ? make_view(m) : a.q;
    a.dst = make_view(n);
    a.n_q = (int)q->ne[1];
    a.n_kv = (int)k->ne[1];
    a.H = (int)q->ne[2];
    a.gqa = q->ne[2] / k->ne[2];
    a.scale = pyg_op_param_f32(n->op_params, 0);
    a.max_bias = pyg_op_param_f32(n->op_params, 1);
    a.softcap = pyg_op_param_f32(n->op_params, 2);
    return D == 64 ? fm_launch<64>(a, (int)q->ne[3], c) : fm_launch<128>(a, (int)q->ne[3], c);
}

#else /* no WMMA in this vendor's toolchain */

int flash_attn_mma_launch(const pyg_tensor *, op_ctx *) { return PYG_ERR_UNSUPPORTED; }

#endif
