/* plugins/cuda/mul_mat_rp.cu — mul_mat over repacked weights (repack.cu): the decode mat-vec of
 * mmv_rp.cuh (one activation column; single nodes and groups of up to MVR_MAX) and the prefill int8
 * GEMM of mmq.cuh (N > 8 columns) with its activation quantizer. mul_mat.cu decides when they run. */
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include "mul_mat_rp.h"
#include "mmv_rp.cuh"
#include "mmq.cuh"

/* launch(std::integral_constant<int, T>) for the weight type T of the four, its status as a pyg_status */
template <class F>
static int launch_by_type(int type, F &&launch, op_ctx *c, const char *what) {
    gpuError_t e;
    switch (type) {
    case PYG_TYPE_Q4_0: e = launch(std::integral_constant<int, PYG_TYPE_Q4_0>()); break;
    case PYG_TYPE_Q8_0: e = launch(std::integral_constant<int, PYG_TYPE_Q8_0>()); break;
    case PYG_TYPE_Q4_K: e = launch(std::integral_constant<int, PYG_TYPE_Q4_K>()); break;
    case PYG_TYPE_Q6_K: e = launch(std::integral_constant<int, PYG_TYPE_Q6_K>()); break;
    default:
        snprintf(c->err, c->errlen, "mul_mat (%s): type %d", what, type);
        return PYG_ERR_INTERNAL;
    }
    if (e != gpuSuccess) {
        gpuGetLastError();
        snprintf(c->err, c->errlen, "mul_mat (%s): kernel launch failed: %s", what, gpuGetErrorString(e));
        return PYG_ERR_DEVICE;
    }
    return PYG_OK;
}

/* ---------------------------------------------------------------- decode mat-vec */

template <int T, int J, int NB>
__global__ void __launch_bounds__(MVR_MAX_KW * PYG_WARP_SIZE) k_mvr(mvr_args a) {
    __shared__ float sh[MVR_MAX_KW * 8 * NB];
    DevThr t;
    mvr_body<T, J, NB>(t, a, sh);
}

template <int T, int J, int NB>
static gpuError_t launch_mvr_tjn(const mvr_args &a, unsigned blocks, unsigned threads, int pdl, gpuStream_t s) {
#ifdef PYG_GPU_HAS_PDL
    if (pdl) return gpu_launch_pdl(k_mvr<T, J, NB>, dim3(blocks), dim3(threads), 0, s, a);
#endif
    (void)pdl;
    k_mvr<T, J, NB><<<blocks, threads, 0, s>>>(a);
    return gpuGetLastError();
}

template <int T>
static gpuError_t launch_mvr_t(const mvr_args &a, int J, int NB, unsigned blocks, unsigned threads, int pdl,
                               gpuStream_t s) {
    switch (J * 10 + NB) {
    case 11: return launch_mvr_tjn<T, 1, 1>(a, blocks, threads, pdl, s);
    case 12: return launch_mvr_tjn<T, 1, 2>(a, blocks, threads, pdl, s);
    case 21: return launch_mvr_tjn<T, 2, 1>(a, blocks, threads, pdl, s);
    case 22: return launch_mvr_tjn<T, 2, 2>(a, blocks, threads, pdl, s);
    case 31: return launch_mvr_tjn<T, 3, 1>(a, blocks, threads, pdl, s);
    default: return launch_mvr_tjn<T, 3, 2>(a, blocks, threads, pdl, s);
    }
}

int mvr_k_ok(int64_t K) { return mvr_units_per_lane(K) != 0; }

int mvr_launch(const pyg_tensor *const *nodes, const rq_w *const *w, int g, const int8_t *yq, const float *yds,
               op_ctx *c) {
    if (g < 1 || g > MVR_MAX) {
        snprintf(c->err, c->errlen, "repacked mat-vec: %d matrices in one launch", g);
        return PYG_ERR_INTERNAL;
    }
    const int64_t K = w[0]->K;
    const int J = mvr_units_per_lane(K);
    if (!J) {
        snprintf(c->err, c->errlen, "repacked mat-vec: K = %lld", (long long)K);
        return PYG_ERR_INTERNAL;
    }
    const int NB = cuda_opts()->mmv_nb == 2 ? 2 : 1;
    mvr_args a;
    mvr_args_init(a, yq, yds, K, g);
    unsigned blocks = 0;
    for (int i = 0; i < MVR_MAX; i++) {
        const int k = i < g ? i : g - 1;
        a.w[i] = *w[k];
        a.dst[i] = (float *)nodes[k]->data;
        a.blk0[i] = blocks;
        if (i < g) blocks += (unsigned)(w[k]->Mp / (8 * NB));
    }
    a.blk0[MVR_MAX] = blocks;
    const unsigned threads = (unsigned)mvr_warps(K, J) * PYG_WARP_SIZE;
    const int pdl = cuda_opts()->pdl && c->cc >= 90;
    return launch_by_type(w[0]->type, [&](auto t) {
        return launch_mvr_t<decltype(t)::value>(a, J, NB, blocks, threads, pdl, c->stream);
    }, c, "repacked mat-vec");
}

/* GW warps per K slice (mvr_glu_body): GW > 1 blocks are up to 512 threads */
template <int T, int J, int GW>
__global__ void __launch_bounds__(GW == 1 ? MVR_MAX_KW * PYG_WARP_SIZE : 512) k_mvr_glu(mvr_args a, mvr_glu e) {
    __shared__ float sh[MVR_MAX_KW * 64];
    DevThr t;
    mvr_glu_body<T, J, GW>(t, a, e, sh);
}

template <int T, int J, int GW>
static gpuError_t launch_glu_tjg(const mvr_args &a, const mvr_glu &e, unsigned blocks, unsigned threads, int pdl,
                                 gpuStream_t s) {
#ifdef PYG_GPU_HAS_PDL
    if (pdl) return gpu_launch_pdl(k_mvr_glu<T, J, GW>, dim3(blocks), dim3(threads), 0, s, a, e);
#endif
    (void)pdl;
    k_mvr_glu<T, J, GW><<<blocks, threads, 0, s>>>(a, e);
    return gpuGetLastError();
}

template <int T, int J>
static gpuError_t launch_glu_tj(const mvr_args &a, const mvr_glu &e, int GW, unsigned blocks, unsigned threads,
                                int pdl, gpuStream_t s) {
    switch (GW) {
    case 1: return launch_glu_tjg<T, J, 1>(a, e, blocks, threads, pdl, s);
    case 2: return launch_glu_tjg<T, J, 2>(a, e, blocks, threads, pdl, s);
    case 4: return launch_glu_tjg<T, J, 4>(a, e, blocks, threads, pdl, s);
    default: return launch_glu_tjg<T, J, 8>(a, e, blocks, threads, pdl, s);
    }
}

template <int T>
static gpuError_t launch_glu_t(const mvr_args &a, const mvr_glu &e, int J, int GW, unsigned blocks, unsigned threads,
                               int pdl, gpuStream_t s) {
    return J == 1 ? launch_glu_tj<T, 1>(a, e, GW, blocks, threads, pdl, s)
                  : launch_glu_tj<T, 2>(a, e, GW, blocks, threads, pdl, s);
}

/* K <= 16384: with 3 units per lane the q8_0 and q6_K forms spill registers (ptxas -v, sm_90) */
int mvr_glu_k_ok(int64_t K) { return mvr_units_per_lane(K) == 1 || mvr_units_per_lane(K) == 2; }

int mvr_launch_glu(const pyg_tensor *const *nodes, const rq_w *wg, const rq_w *wu, const int8_t *yq, const float *yds,
                   int8_t *oq, float *ods, op_ctx *c) {
    const int64_t K = wg->K, M = wg->M;
    const int J = mvr_units_per_lane(K);
    if (!mvr_glu_k_ok(K) || wu->K != K || wu->M != M || wu->type != wg->type) {
        snprintf(c->err, c->errlen, "gate/up/swiglu launch: K = %lld, M = %lld / %lld", (long long)K, (long long)M,
                 (long long)wu->M);
        return PYG_ERR_INTERNAL;
    }
    mvr_args a;
    mvr_args_init(a, yq, yds, K, 2);
    a.w[0] = *wg;
    a.w[1] = *wu;
    a.dst[0] = (float *)nodes[0]->data;
    a.dst[1] = (float *)nodes[1]->data;
    mvr_glu e;
    e.out = (float *)nodes[2]->data;
    e.yq = oq;
    e.yds = ods;
    const int KW = mvr_warps(K, J), GW = mvr_glu_gw(KW, J, (int)cuda_opts()->glu_spread);
    const unsigned blocks = ceil_div_u(M, 32), threads = (unsigned)(KW * GW) * PYG_WARP_SIZE;
    const int pdl = cuda_opts()->pdl && c->cc >= 90;
    return launch_by_type(wg->type, [&](auto t) {
        return launch_glu_t<decltype(t)::value>(a, e, J, GW, blocks, threads, pdl, c->stream);
    }, c, "gate/up/swiglu");
}

/* ---------------------------------------------------------------- prefill int8 GEMM */

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
static size_t al256(size_t x) { return (x + 255) & ~(size_t)255; }

struct mmq_dims {
    int64_t K, Kp, Ntot, Np;
};

static mmq_dims mmq_dims_of(const pyg_tensor *n) {
    const pyg_tensor *b = n->src[1];
    mmq_dims d;
    d.K = n->src[0]->ne[0];
    d.Kp = round_up(d.K, MMQ_BK);
    d.Ntot = b->ne[1] * b->ne[2] * b->ne[3];
    d.Np = round_up(d.Ntot, MMQ_BN);
    return d;
}

int mmq_usable(const pyg_tensor *n, int cc) {
#ifdef PYG_GPU_HAS_INT8_MMA
    const pyg_tensor *b = n->src[1];
    if (!cuda_opts()->mmq || !cuda_opts()->repack || cc < 80 || b->type != PYG_TYPE_F32 || b->nb[0] != 4 || n->nb[0] != 4) return 0;
    if (((uintptr_t)b->data | b->nb[1] | b->nb[2] | b->nb[3] | n->nb[1] | n->nb[2] | n->nb[3]) & 3) return 0;
    const mmq_dims d = mmq_dims_of(n);
    return d.Ntot > MMQ_MIN_N - 1 && d.Np / MMQ_BN <= 65535 && n->src[0]->ne[1] / MMQ_BM < 0x7fffffffLL;
#else
    (void)n, (void)cc;
    return 0;
#endif
}

size_t mmq_scratch_bytes(const pyg_tensor *n) {
    const mmq_dims d = mmq_dims_of(n);
    return al256((size_t)(d.Np * d.Kp)) + (size_t)(d.Np * (d.Kp / 32)) * sizeof(mmq_yd);
}

/* One warp per block of 32 activations of one column (columns flattened over dims 1-3, padded to Np with
 * zeros, k padded to Kp with zeros). */
__global__ void k_mmq_quantize(const char *x, int64_t nb1, int64_t nb2, int64_t nb3, int64_t K, int64_t Kp,
                               int64_t Ntot, int64_t N, int64_t B2, int64_t nblk, int8_t *yq, mmq_yd *yd) {
    const int lane = threadIdx.x % PYG_WARP_SIZE;
    const int64_t gb = (int64_t)blockIdx.x * (blockDim.x / PYG_WARP_SIZE) + threadIdx.x / PYG_WARP_SIZE;
    if (gb >= nblk) return;
    const int64_t kpb = Kp / 32, col = gb / kpb, k = (gb % kpb) * 32 + lane;
    float v = 0.0f;
    if (col < Ntot && k < K) {
        const int64_t nn = col % N, r = col / N;
        v = *(const float *)(x + k * 4 + nn * nb1 + (r % B2) * nb2 + (r / B2) * nb3);
    }
    const float d = mmq_block_scale(warp_max(v != v ? INFINITY : fabsf(v)));
    const float id = d > 0.0f ? 1.0f / d : 0.0f; /* d NaN: 0 */
    const float xq = v * id;
    const int q = xq == xq ? __float2int_rn(xq) : 0;
    int s = q;
    s += gpu_shfl_xor(s, 8);
    s += gpu_shfl_xor(s, 4);
    s += gpu_shfl_xor(s, 2);
    s += gpu_shfl_xor(s, 1);
    const int other = gpu_shfl_xor(s, 16);
    yq[col * Kp + k] = (int8_t)q;
    if (lane == 0) {
        mmq_yd r;
        r.d = d;
        r.sums = (s & 0xffff) | (other << 16);
        yd[gb] = r;
    }
}

#ifdef PYG_GPU_HAS_INT8_MMA
template <int T, int NT>
__global__ void __launch_bounds__(MMQ_THREADS) k_mmq(mmq_args a) {
    extern __shared__ __align__(16) unsigned char mmq_smem[];
    DevThr t;
    mmq_body<T, NT>(t, a, mmq_smem);
}

template <int T, int NT>
static gpuError_t launch_mmq_tn(const mmq_args &a, unsigned gx, int64_t Np, int device, gpuStream_t s) {
    static int attr_set[PYG_SMEM_OPT_DEVICES];
    const size_t smem = mmq_t<T, NT>::SMEM;
    void (*k)(mmq_args) = k_mmq<T, NT>;
    const gpuError_t e = smem_opt_in(k, smem, device, attr_set);
    if (e != gpuSuccess) return e;
    k<<<dim3(gx, (unsigned)(Np / (32 * NT))), MMQ_THREADS, smem, s>>>(a);
    return gpuGetLastError();
}

/* 128-column tiles, or 64 when 128 would give fewer blocks than multiprocessors */
template <int T>
static gpuError_t launch_mmq_t(const mmq_args &a, unsigned gx, int64_t Np, int n_sm, int device, gpuStream_t s) {
    if ((int64_t)gx * (Np / MMQ_BN) < n_sm) return launch_mmq_tn<T, 2>(a, gx, Np, device, s);
    return launch_mmq_tn<T, 4>(a, gx, Np, device, s);
}
#endif

int mmq_launch(const pyg_tensor *n, const rq_w *w, op_ctx *c) {
#ifdef PYG_GPU_HAS_INT8_MMA
    const pyg_tensor *b = n->src[1];
    const mmq_dims d = mmq_dims_of(n);
    const size_t need = mmq_scratch_bytes(n);
    if (!c->scratch || c->scratch_size < need) {
        snprintf(c->err, c->errlen, "mul_mat (int8 GEMM): plan scratch too small (%zu < %zu)", c->scratch_size, need);
        return PYG_ERR_INTERNAL;
    }
    int8_t *yq = (int8_t *)c->scratch;
    mmq_yd *yd = (mmq_yd *)((char *)c->scratch + al256((size_t)(d.Np * d.Kp)));
    const int64_t nblk = d.Np * (d.Kp / 32);
    k_mmq_quantize<<<ceil_div_u(nblk, 8), 256, 0, c->stream>>>((const char *)b->data, (int64_t)b->nb[1],
                                                                (int64_t)b->nb[2], (int64_t)b->nb[3], d.K, d.Kp,
                                                                d.Ntot, b->ne[1], b->ne[2], nblk, yq, yd);
    int st = check_launch(c, "mul_mat (int8 GEMM: quantize activations)");
    if (st != PYG_OK) return st;
    mmq_args a;
    a.w = *w;
    a.yq = yq;
    a.yd = yd;
    a.Kp = d.Kp;
    a.Ntot = d.Ntot;
    a.N = b->ne[1];
    a.B2 = b->ne[2];
    a.dst = (float *)n->data;
    a.ds1 = (int64_t)n->nb[1] / 4;
    a.ds2 = (int64_t)n->nb[2] / 4;
    a.ds3 = (int64_t)n->nb[3] / 4;
    const unsigned gx = (unsigned)(w->Mp / MMQ_BM);
    return launch_by_type(w->type, [&](auto t) {
        return launch_mmq_t<decltype(t)::value>(a, gx, d.Np, c->n_sm, c->device, c->stream);
    }, c, "int8 GEMM");
#else
    (void)n, (void)w;
    snprintf(c->err, c->errlen, "int8 GEMM: not built for %s", PYG_GPU_RUNTIME);
    return PYG_ERR_INTERNAL;
#endif
}
