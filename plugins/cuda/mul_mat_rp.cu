/* plugins/cuda/mul_mat_rp.cu — mul_mat over repacked weights (repack.cu): the decode mat-vec of
 * mmv_rp.cuh (one activation column; single nodes and groups of up to MVR_MAX) and the prefill int8
 * GEMM of mmq.cuh (N > 8 columns) with its activation quantizer. mul_mat.cu decides when they run. */
#include <stdio.h>
#include <string.h>
#include "mul_mat_rp.h"
#include "mmv_rp.cuh"
#include "mmq.cuh"

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
    memset(&a, 0, sizeof a);
    a.yq = yq;
    a.yds = yds;
    a.K = K;
    a.n = g;
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
    gpuError_t e;
    switch (w[0]->type) {
    case PYG_TYPE_Q4_0: e = launch_mvr_t<PYG_TYPE_Q4_0>(a, J, NB, blocks, threads, pdl, c->stream); break;
    case PYG_TYPE_Q8_0: e = launch_mvr_t<PYG_TYPE_Q8_0>(a, J, NB, blocks, threads, pdl, c->stream); break;
    case PYG_TYPE_Q4_K: e = launch_mvr_t<PYG_TYPE_Q4_K>(a, J, NB, blocks, threads, pdl, c->stream); break;
    case PYG_TYPE_Q6_K: e = launch_mvr_t<PYG_TYPE_Q6_K>(a, J, NB, blocks, threads, pdl, c->stream); break;
    default:
        snprintf(c->err, c->errlen, "repacked mat-vec: type %d", w[0]->type);
        return PYG_ERR_INTERNAL;
    }
    if (e != gpuSuccess) {
        gpuGetLastError();
        snprintf(c->err, c->errlen, "mul_mat (repacked mat-vec): kernel launch failed: %s", gpuGetErrorString(e));
        return PYG_ERR_DEVICE;
    }
    return PYG_OK;
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
    static int attr_set[64]; /* per device: the shared-memory limit raised for this kernel */
    const size_t smem = mmq_t<T, NT>::SMEM;
    void (*k)(mmq_args) = k_mmq<T, NT>;
    if (device >= 0 && device < 64 && !attr_set[device]) {
        gpuError_t e = gpuFuncSetMaxDynamicSharedMemory(k, (int)smem);
        if (e != gpuSuccess) return e;
        attr_set[device] = 1;
    }
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
    gpuError_t e;
    switch (w->type) {
    case PYG_TYPE_Q4_0: e = launch_mmq_t<PYG_TYPE_Q4_0>(a, gx, d.Np, c->n_sm, c->device, c->stream); break;
    case PYG_TYPE_Q8_0: e = launch_mmq_t<PYG_TYPE_Q8_0>(a, gx, d.Np, c->n_sm, c->device, c->stream); break;
    case PYG_TYPE_Q4_K: e = launch_mmq_t<PYG_TYPE_Q4_K>(a, gx, d.Np, c->n_sm, c->device, c->stream); break;
    case PYG_TYPE_Q6_K: e = launch_mmq_t<PYG_TYPE_Q6_K>(a, gx, d.Np, c->n_sm, c->device, c->stream); break;
    default:
        snprintf(c->err, c->errlen, "int8 GEMM: type %d", w->type);
        return PYG_ERR_INTERNAL;
    }
    if (e != gpuSuccess) {
        gpuGetLastError();
        snprintf(c->err, c->errlen, "mul_mat (int8 GEMM): kernel launch failed: %s", gpuGetErrorString(e));
        return PYG_ERR_DEVICE;
    }
    return PYG_OK;
#else
    (void)n, (void)w;
    snprintf(c->err, c->errlen, "int8 GEMM: not built for %s", PYG_GPU_RUNTIME);
    return PYG_ERR_INTERNAL;
#endif
}
