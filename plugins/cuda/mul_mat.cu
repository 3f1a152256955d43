/* plugins/cuda/mul_mat.cu — dst[m, n] = sum_k src0[k, m] * src1[k, n].
 *
 * Weights that have a repacked copy (repack.cu: 2-D quantized WEIGHT leaves, device option repack=1)
 * go to mul_mat_rp.cu: one activation column to its mat-vec, N > 8 columns to the int8 GEMM (option
 * mmq=1). Everything else, and every weight with repack=0, takes one of three paths here:
 *  - quantized mat-vec (N <= 8, the decode path; mmvq.cuh): activations quantized to int8 blocks in
 *    plan scratch, then one warp per weight row dots the quant blocks with them by dp4a; q4_0, q8_0,
 *    q4_K (device option mmvq=off selects the float mat-vec below instead, =all adds q6_K).
 *  - float mat-vec (N <= 8): one block per weight row, threads walk the row in units of 32 weights
 *    decoded to float from the quant blocks (q4_0, q8_0, q4_K, q6_K) or 8 plain values
 *    (f32, f16, bf16), each unit dotted with up to 8 activation columns at once; needs row-contiguous
 *    weights and 16-byte aligned activation columns.
 *  - GEMM (everything else): N >= option blas_min_n (32) through cuBLAS opened at run time
 *    (gemm_blas.cu); where cuBLAS is missing or off, N >= MMA_MIN_N on our own tensor-core kernel
 *    (mul_mat_mma.cu); otherwise (or with option mma=0) an FFMA kernel with 64x64 tiles, weights
 *    dequantized element-wise into shared memory; all take any strides on both operands.
 * Weights broadcast over dims 2, 3 as in ggml: src0 batch i02 = i12 / (B2 / b2).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.cuh"
#include "gemm_blas.h"
#include "mmvq.cuh"
#include "mul_mat_rp.h"
#include "repack.h"

#define MV_THREADS 128
#define MV_MAX_COLS 8

struct mv_args {
    const char *w;                  /* src0 data */
    int64_t nb01, nb02, nb03;       /* weight strides (bytes) */
    int64_t r2, r3;                 /* broadcast ratios B2/b2, B3/b3 */
    int64_t K, B2;
    const float *y;                 /* src1 data */
    int64_t ys1, ys2, ys3;          /* activation strides in floats */
    int ncols;                      /* N */
    float *dst;
    int64_t ds1, ds2, ds3;          /* dst strides in floats */
};

#include "mmv_decode.cuh"

/* Plain types: a unit is 8 consecutive values; the row tail (K % 8) reads zeros. */
template <int T> struct mv_plain {
    static constexpr int RUNS = 1, RL = 8, ROFF = 0;
    static __device__ __forceinline__ int64_t units(int64_t K) { return (K + 7) / 8; }
    static __device__ __forceinline__ int64_t decode(const char *row, int64_t u, int64_t K, float *w) {
        const int64_t k0 = u * 8;
        constexpr int es = T == PYG_TYPE_F32 ? 4 : 2;
        const char *p = row + k0 * es;
        if (k0 + 8 <= K && ((uintptr_t)p & 15) == 0) { /* 16-byte loads where the row allows */
            if (T == PYG_TYPE_F32) {
                const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
                w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
                w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
            } else {
                const uint4 v = *(const uint4 *)p;
                const uint32_t words[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const uint16_t lo = (uint16_t)(words[i] & 0xffff), hi = (uint16_t)(words[i] >> 16);
                    w[2 * i] = T == PYG_TYPE_F16 ? f16_bits_to_f32(lo) : bf16_bits_to_f32(lo);
                    w[2 * i + 1] = T == PYG_TYPE_F16 ? f16_bits_to_f32(hi) : bf16_bits_to_f32(hi);
                }
            }
            return k0;
        }
#pragma unroll
        for (int t = 0; t < 8; t++) w[t] = (k0 + t < K) ? load_f(row + (k0 + t) * es, T) : 0.0f;
        return k0;
    }
};
template <> struct mv<PYG_TYPE_F32> : mv_plain<PYG_TYPE_F32> {};
template <> struct mv<PYG_TYPE_F16> : mv_plain<PYG_TYPE_F16> {};
template <> struct mv<PYG_TYPE_BF16> : mv_plain<PYG_TYPE_BF16> {};

template <int T, int NC>
__global__ void __launch_bounds__(MV_THREADS) k_matvec(mv_args a) {
    typedef mv<T> Q;
    const int64_t m = blockIdx.x;
    const int64_t i12 = blockIdx.y % a.B2, i13 = blockIdx.y / a.B2;
    const int c0 = blockIdx.z * NC;
    const char *row = a.w + m * a.nb01 + (i12 / a.r2) * a.nb02 + (i13 / a.r3) * a.nb03;
    const float *ybase = a.y + i12 * a.ys2 + i13 * a.ys3;
    const int64_t nu = Q::units(a.K);
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    for (int64_t u = threadIdx.x; u < nu; u += MV_THREADS) {
        float w[Q::RUNS * Q::RL];
        const int64_t kb = Q::decode(row, u, a.K, w);
        const bool full = kb + Q::RL <= a.K || Q::RUNS > 1;
#pragma unroll
        for (int c = 0; c < NC; c++) {
            if (c0 + c >= a.ncols) break;
            const float *yc = ybase + (int64_t)(c0 + c) * a.ys1 + kb;
            float s = 0.0f;
            if (full) {
#pragma unroll
                for (int r = 0; r < Q::RUNS; r++) {
#pragma unroll
                    for (int t = 0; t < Q::RL; t += 4) {
                        const float4 yv = *(const float4 *)(yc + r * Q::ROFF + t);
                        const float *wv = w + r * Q::RL + t;
                        s += wv[0] * yv.x + wv[1] * yv.y + wv[2] * yv.z + wv[3] * yv.w;
                    }
                }
            } else {
#pragma unroll
                for (int t = 0; t < Q::RL; t++)
                    if (kb + t < a.K) s += w[t] * yc[t];
            }
            acc[c] += s;
        }
    }
    __shared__ float sh[MV_THREADS / PYG_WARP_SIZE][NC];
    const int lane = threadIdx.x % PYG_WARP_SIZE, wi = threadIdx.x / PYG_WARP_SIZE;
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0) sh[wi][c] = v;
    }
    __syncthreads();
    if (threadIdx.x < NC && c0 + (int)threadIdx.x < a.ncols) {
        float v = 0.0f;
#pragma unroll
        for (int k = 0; k < MV_THREADS / PYG_WARP_SIZE; k++) v += sh[k][threadIdx.x];
        a.dst[m + (int64_t)(c0 + threadIdx.x) * a.ds1 + i12 * a.ds2 + i13 * a.ds3] = v;
    }
}

/* ---------------------------------------------------------------- quantized mat-vec (dp4a) */

struct mvq_args {
    const char *w;
    int64_t nb01, nb02, nb03, r2, r3, K, M, B2;
    const int8_t *yq;       /* [columns][K] int8 */
    const float *yds;       /* [columns][K/32] (d, s) */
    int ncols;
    float *dst;
    int64_t ds1, ds2, ds3;
};

/* One warp per 32 activations: int8 quants and (d, d*sum). Columns flattened as c + N*(i12 + B2*i13). */
__global__ void k_quantize_y(const float *y, int64_t ys1, int64_t ys2, int64_t ys3, int64_t K, int ncols, int64_t B2,
                             int64_t nblk, int8_t *yq, float *yds) {
    const int lane = threadIdx.x % PYG_WARP_SIZE;
    const int64_t gb = (int64_t)blockIdx.x * (blockDim.x / PYG_WARP_SIZE) + threadIdx.x / PYG_WARP_SIZE;
    if (gb >= nblk) return;
    const int64_t kb = gb % (K / 32), col = gb / (K / 32);
    const int64_t c = col % ncols, bt = col / ncols, i12 = bt % B2, i13 = bt / B2;
    const float v = y[c * ys1 + i12 * ys2 + i13 * ys3 + kb * 32 + lane];
    warp_quant_block(v, yq, yds, gb); /* block gb = col * (K/32) + kb: quants at gb * 32 */
}

#define MVQ_ROWS 4 /* warps per block */

/* Each warp dots one row against NC activation columns; U unrolls the unit loop (1 for one
 * column, see launch_mmvq). */
template <int T, int NC, int U = 2>
__global__ void __launch_bounds__(MVQ_ROWS * PYG_WARP_SIZE) k_mmvq(mvq_args a) {
    const int lane = threadIdx.x % PYG_WARP_SIZE;
    const int64_t m0 = (int64_t)blockIdx.x * MVQ_ROWS + threadIdx.x / PYG_WARP_SIZE;
    if (m0 >= a.M) return; /* whole warps only */
    const int64_t i12 = blockIdx.y % a.B2, i13 = blockIdx.y / a.B2;
    const char *row = a.w + m0 * a.nb01 + (i12 / a.r2) * a.nb02 + (i13 / a.r3) * a.nb03;
    const int64_t col0 = (int64_t)blockIdx.y * a.ncols;
    const int8_t *yq = a.yq + col0 * a.K;
    const float *yds = a.yds + col0 * (a.K / 16);
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    const int64_t nu = mmvq<T>::units(a.K);
#pragma unroll U
    for (int64_t u = lane; u < nu; u += PYG_WARP_SIZE) mmvq<T>::template unit<NC>(row, u, yq, yds, a.K, a.K / 16, a.ncols, acc);
#pragma unroll
    for (int c = 0; c < NC; c++) {
        const float v = warp_sum(acc[c]);
        if (lane == 0 && c < a.ncols) a.dst[m0 + c * a.ds1 + i12 * a.ds2 + i13 * a.ds3] = v;
    }
}

/* ---------------------------------------------------------------- tiled GEMM (any type, any strides) */

#define GM_BM 64
#define GM_BN 64
#define GM_BK 32
#define GM_THREADS 256

__global__ void __launch_bounds__(GM_THREADS) k_gemm(tview A, tview B, tview C, int64_t r2, int64_t r3) {
    __shared__ float As[GM_BK][GM_BM + 1];
    __shared__ float Bs[GM_BK][GM_BN + 1];
    const int64_t M = A.ne[1], N = B.ne[1], K = A.ne[0];
    const int64_t i12 = blockIdx.z % B.ne[2], i13 = blockIdx.z / B.ne[2];
    const int64_t m0 = (int64_t)blockIdx.x * GM_BM, n0 = (int64_t)blockIdx.y * GM_BN;
    const char *abase = A.data + (i12 / r2) * A.nb[2] + (i13 / r3) * A.nb[3];
    const char *bbase = B.data + i12 * B.nb[2] + i13 * B.nb[3];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += GM_BK) {
#pragma unroll
        for (int i = 0; i < GM_BM * GM_BK / GM_THREADS; i++) {
            const int e = threadIdx.x + GM_THREADS * i;
            const int mm = e / GM_BK, kk = e % GM_BK;
            const int64_t m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? load_row_elem(abase + m * A.nb[1], A.type, k, A.nb[0]) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < GM_BN * GM_BK / GM_THREADS; i++) {
            const int e = threadIdx.x + GM_THREADS * i;
            const int nn = e / GM_BK, kk = e % GM_BK;
            const int64_t n = n0 + nn, k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? *(const float *)(bbase + n * B.nb[1] + k * B.nb[0]) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < GM_BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) av[i] = As[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * bv[j];
        }
        __syncthreads();
    }
    char *cbase = C.data + i12 * C.nb[2] + i13 * C.nb[3];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t m = m0 + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t n = n0 + tx + 16 * j;
            if (n < N) *(float *)(cbase + m * C.nb[0] + n * C.nb[1]) = acc[i][j];
        }
    }
}

/* ---------------------------------------------------------------- host side */

int mul_mat_supports(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    if (!a || !b || n->type != PYG_TYPE_F32 || b->type != PYG_TYPE_F32) return 0;
    if (!is_plain_float(a->type) && !is_supported_quant(a->type)) return 0;
    if (is_supported_quant(a->type) && !pyg_tensor_rows_contiguous(a)) return 0;
    if (a->ne[0] != b->ne[0]) return 0;
    if (n->ne[0] != a->ne[1] || n->ne[1] != b->ne[1] || n->ne[2] != b->ne[2] || n->ne[3] != b->ne[3]) return 0;
    if (b->ne[2] % a->ne[2] || b->ne[3] % a->ne[3]) return 0;
    if (b->ne[2] * b->ne[3] > 65535) return 0;
    return 1;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static int matvec_ok(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    if (b->ne[1] > MV_MAX_COLS || !pyg_tensor_rows_contiguous(a) || n->nb[0] != 4 || b->nb[0] != 4) return 0;
    if (!aligned16(b->data) || (b->nb[1] | b->nb[2] | b->nb[3]) & 15) return 0;
    if (n->ne[0] > 0x7fffffffLL) return 0;
    if (a->type == PYG_TYPE_Q4_K && (!aligned16(a->data) || (a->nb[1] | a->nb[2] | a->nb[3]) & 15)) return 0;
    if ((a->type == PYG_TYPE_Q4_0 || a->type == PYG_TYPE_Q4_1 || a->type == PYG_TYPE_Q8_0 || a->type == PYG_TYPE_Q6_K) &&
        (((uintptr_t)a->data | a->nb[1] | a->nb[2] | a->nb[3]) & 1))
        return 0;
    if ((a->type == PYG_TYPE_F16 || a->type == PYG_TYPE_BF16) && (((uintptr_t)a->data | a->nb[1] | a->nb[2] | a->nb[3]) & 1))
        return 0;
    if (a->type == PYG_TYPE_F32 && (((uintptr_t)a->data | a->nb[1] | a->nb[2] | a->nb[3]) & 3)) return 0;
    return 1;
}

static int single_column(const pyg_tensor *n) {
    const pyg_tensor *b = n->src[1];
    return b->ne[1] == 1 && b->ne[2] == 1 && b->ne[3] == 1;
}

/* repacked: the weights have a repacked copy in use (then one column goes to mmv_rp.cuh's mat-vec).
 * q6_K stays on the float mat-vec without it: on the H200 that measured 1.42 TB/s against 1.28 TB/s
 * in mmvq (bench/results/cuda-matvec-20261130T091951.json and ...T094012.json); the device option
 * mmvq=all forces mmvq for it too, mmvq=off turns it off for every type. */
static int use_mmvq(const pyg_tensor *n, int repacked) {
    const int t = n->src[0]->type;
    const int64_t mode = cuda_opts()->mmvq;
    if (!is_supported_quant(t) || !matvec_ok(n) || mode == MMVQ_OFF) return 0;
    return t != PYG_TYPE_Q6_K || mode == MMVQ_ALL || (repacked && single_column(n) && mvr_k_ok(n->src[0]->ne[0]));
}

static size_t align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* the int8 activation columns of the mat-vecs: quants, then (d, s) pairs */
static size_t mmvq_scratch(const pyg_tensor *n) {
    const pyg_tensor *b = n->src[1];
    const size_t cols = (size_t)(b->ne[1] * b->ne[2] * b->ne[3]);
    return align256(cols * (size_t)b->ne[0]) + cols * (size_t)(b->ne[0] / 32) * 2 * sizeof(float);
}

size_t mul_mat_scratch_bytes(const pyg_tensor *n, int repacked, int cc) {
    const int rp = repacked && cuda_opts()->repack;
    if (use_mmvq(n, rp)) return mmvq_scratch(n);
    if (matvec_ok(n)) return 0;
    if (rp && mmq_usable(n, cc)) return mmq_scratch_bytes(n);
    return gemm_blas_scratch_bytes(n); /* 0 unless cuBLAS takes it */
}

/* The repacked weights launch node i of c reads, when the plan has them and they are in use. */
static const rq_w *repacked_weights(const op_ctx *c, int i) {
    return c->rp && c->rp[i] && cuda_opts()->repack ? cuda_repack_weights(c->rp[i]) : NULL;
}

/* One column: one row per warp, no unrolling of the unit loop. On the H200 at 4096x14336
 * (bench_matvec, 2026-11-30) 2 and 4 rows per warp measured 1545/1724/2272 and ~1200 GB/s
 * (q4_K/q4_0/q8_0) against 1651/1939/2445 for one row; unrolling by 2 and 4 measured
 * 1536/1849/2319 and 1376/1884/2439 against 1683/1978/2562 without (gpu-check at 6c06256): fewer
 * registers and more resident warps beat more loads in flight per lane. Those variants are gone. */
template <int T>
static void launch_mmvq(const mvq_args &args, int64_t M, unsigned gy, int nc, gpuStream_t s) {
    const unsigned th = MVQ_ROWS * PYG_WARP_SIZE;
    const dim3 grid(ceil_div_u(M, MVQ_ROWS), gy, 1);
    switch (nc) {
    case 1: k_mmvq<T, 1, 1><<<grid, th, 0, s>>>(args); break;
    case 2: k_mmvq<T, 2><<<grid, th, 0, s>>>(args); break;
    case 4: k_mmvq<T, 4><<<grid, th, 0, s>>>(args); break;
    default: k_mmvq<T, 8><<<grid, th, 0, s>>>(args); break;
    }
}

/* Quantize n's activation columns into plan scratch (int8 quants, then the (d, s) pairs), unless
 * the launch before this one already wrote them there (c->quant_in). */
static int quantize_activations(const pyg_tensor *n, op_ctx *c, int8_t **yq, float **yds) {
    const pyg_tensor *b = n->src[1];
    const size_t need = mmvq_scratch(n);
    if (!c->scratch || c->scratch_size < need) {
        snprintf(c->err, c->errlen, "mul_mat: plan scratch too small (%zu < %zu)", c->scratch_size, need);
        return PYG_ERR_INTERNAL;
    }
    const int64_t K = n->src[0]->ne[0], cols = b->ne[1] * b->ne[2] * b->ne[3];
    const int64_t nblk = cols * (K / 32);
    *yq = (int8_t *)c->scratch;
    *yds = (float *)((char *)c->scratch + align256((size_t)(cols * K)));
    if (c->quant_in) {
        if (cols != 1) {
            snprintf(c->err, c->errlen, "mul_mat: pre-quantized activations with %lld columns", (long long)cols);
            return PYG_ERR_INTERNAL;
        }
        mul_mat_quant_layout((char *)c->scratch + c->quant_in_off, K, yq, yds);
        return PYG_OK;
    }
    k_quantize_y<<<ceil_div_u(nblk, 8), 256, 0, c->stream>>>((const float *)b->data, (int64_t)b->nb[1] / 4,
                                                            (int64_t)b->nb[2] / 4, (int64_t)b->nb[3] / 4, K,
                                                            (int)b->ne[1], b->ne[2], nblk, *yq, *yds);
    return check_launch(c, "mul_mat (quantize activations)");
}

static int run_mmvq(const pyg_tensor *n, const rq_w *w, op_ctx *c) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    const int64_t K = a->ne[0];
    int8_t *yq;
    float *yds;
    int st = quantize_activations(n, c, &yq, &yds);
    if (st != PYG_OK) return st;
    if (w && single_column(n) && n->nb[0] == sizeof(float) && mvr_k_ok(K))
        return mvr_launch(&n, &w, 1, yq, yds, c);
    mvq_args args;
    args.w = (const char *)a->data;
    args.nb01 = (int64_t)a->nb[1];
    args.nb02 = (int64_t)a->nb[2];
    args.nb03 = (int64_t)a->nb[3];
    args.r2 = b->ne[2] / a->ne[2];
    args.r3 = b->ne[3] / a->ne[3];
    args.K = K;
    args.M = a->ne[1];
    args.B2 = b->ne[2];
    args.yq = yq;
    args.yds = yds;
    args.ncols = (int)b->ne[1];
    args.dst = (float *)n->data;
    args.ds1 = (int64_t)n->nb[1] / 4;
    args.ds2 = (int64_t)n->nb[2] / 4;
    args.ds3 = (int64_t)n->nb[3] / 4;
    const int nc = args.ncols <= 1 ? 1 : args.ncols <= 2 ? 2 : args.ncols <= 4 ? 4 : 8;
    const unsigned gy = (unsigned)(b->ne[2] * b->ne[3]);
    switch (a->type) {
    case PYG_TYPE_Q4_0: launch_mmvq<PYG_TYPE_Q4_0>(args, a->ne[1], gy, nc, c->stream); break;
    case PYG_TYPE_Q4_1: launch_mmvq<PYG_TYPE_Q4_1>(args, a->ne[1], gy, nc, c->stream); break;
    case PYG_TYPE_Q8_0: launch_mmvq<PYG_TYPE_Q8_0>(args, a->ne[1], gy, nc, c->stream); break;
    case PYG_TYPE_Q4_K: launch_mmvq<PYG_TYPE_Q4_K>(args, a->ne[1], gy, nc, c->stream); break;
    case PYG_TYPE_Q6_K: launch_mmvq<PYG_TYPE_Q6_K>(args, a->ne[1], gy, nc, c->stream); break;
    default:
        snprintf(c->err, c->errlen, "mmvq: type %d", a->type);
        return PYG_ERR_INTERNAL;
    }
    return check_launch(c, "mul_mat (quantized mat-vec)");
}

/* ---------------------------------------------------------------- grouped decode mat-vecs
 * Adjacent mul_mat nodes of a plan that multiply the same single activation column by different
 * quantized weights of one type and K (a layer's q/k/v, its gate/up) run as one launch: the column
 * is quantized once and the blocks of all the matrices form one grid, so a 16-layer decode issues
 * 48 fewer quantize launches and 48 fewer mat-vec launches. The device option fuse=0 turns it off. */
#define MVQ_GROUP_MAX 4

struct mvq_group_args {
    const int8_t *yq;
    const float *yds;
    int64_t K;
    int n;
    const char *w[MVQ_GROUP_MAX];
    int64_t nb01[MVQ_GROUP_MAX], M[MVQ_GROUP_MAX];
    float *dst[MVQ_GROUP_MAX];
    unsigned blk0[MVQ_GROUP_MAX + 1]; /* first block of each matrix; blk0[n] = grid size */
};

template <int T, int U>
__global__ void __launch_bounds__(MVQ_ROWS * PYG_WARP_SIZE) k_mmvq_group(mvq_group_args a) {
    const int lane = threadIdx.x % PYG_WARP_SIZE;
    int g = 0;
#pragma unroll
    for (int i = 1; i < MVQ_GROUP_MAX; i++)
        if (i < a.n && blockIdx.x >= a.blk0[i]) g = i;
    const int64_t m = (int64_t)(blockIdx.x - a.blk0[g]) * MVQ_ROWS + threadIdx.x / PYG_WARP_SIZE;
    if (m >= a.M[g]) return; /* whole warps only */
    const char *row = a.w[g] + m * a.nb01[g];
    float acc[1] = {0.0f};
    const int64_t nu = mmvq<T>::units(a.K);
#pragma unroll U
    for (int64_t u = lane; u < nu; u += PYG_WARP_SIZE)
        mmvq<T>::template unit<1>(row, u, a.yq, a.yds, a.K, a.K / 16, 1, acc);
    const float v = warp_sum(acc[0]);
    if (lane == 0) a.dst[g][m] = v;
}

/* repacked: the node's weights are repacked (a q6_K mat-vec then takes the int8 path too) */
static int mmvq_single_column(const pyg_tensor *n, int repacked) {
    const pyg_tensor *a = n->src[0];
    return n->op == PYG_OP_MUL_MAT && use_mmvq(n, repacked) && single_column(n) && a->ne[2] == 1 && a->ne[3] == 1 &&
           n->nb[0] == sizeof(float);
}

/* The producer writes K (a multiple of 32) contiguous f32 values, which are exactly the single
 * activation column of the consumer's int8 mat-vec (a row, or an attention output viewed as one). */
int mul_mat_can_prequant(const pyg_tensor *producer, const pyg_tensor *consumer, int repacked) {
    if (!cuda_fuse_enabled() || !producer || !consumer || !mmvq_single_column(consumer, repacked)) return 0;
    const pyg_tensor *b = consumer->src[1];
    if (b->data != producer->data || b->type != PYG_TYPE_F32 || producer->type != PYG_TYPE_F32) return 0;
    if (!pyg_tensor_is_contiguous(producer) || !pyg_tensor_is_contiguous(b)) return 0;
    return (int64_t)pyg_tensor_nelements(producer) == b->ne[0] && b->ne[0] % 32 == 0 &&
           consumer->src[0]->ne[0] == b->ne[0];
}

static int k_quant_pair(int t0, int t1) {
    return (t0 == PYG_TYPE_Q4_K || t0 == PYG_TYPE_Q6_K) && (t1 == PYG_TYPE_Q4_K || t1 == PYG_TYPE_Q6_K);
}

int mul_mat_can_group_types(const pyg_tensor *x, const pyg_tensor *y, int repacked, int k_mix) {
    if (!cuda_fuse_enabled() || !mmvq_single_column(x, repacked) || !mmvq_single_column(y, repacked)) return 0;
    const pyg_tensor *a0 = x->src[0], *b0 = x->src[1], *a1 = y->src[0], *b1 = y->src[1];
    if (a0->type != a1->type && !(k_mix && k_quant_pair(a0->type, a1->type))) return 0;
    if (a0->ne[0] != a1->ne[0] || b0->type != b1->type || b0->data != b1->data) return 0;
    for (int i = 0; i < 4; i++)
        if (b0->ne[i] != b1->ne[i] || b0->nb[i] != b1->nb[i]) return 0;
    return b1->data != x->data; /* y must not read what x writes */
}

int mul_mat_can_group(const pyg_tensor *x, const pyg_tensor *y) { return mul_mat_can_group_types(x, y, 0, 0); }

int mul_mat_can_glu(const pyg_tensor *x, const pyg_tensor *y, const pyg_tensor *z, const cuda_repack *rx,
                    const cuda_repack *ry) {
    if (!cuda_opts()->repack || !rx || !ry || !z || !mul_mat_can_group_types(x, y, 1, 0)) return 0;
    if (z->op != PYG_OP_SWIGLU || !swiglu_can_prequant(z)) return 0;
    if (!((z->src[0] == x && z->src[1] == y) || (z->src[0] == y && z->src[1] == x))) return 0; /* either order */
    const rq_w *wx = cuda_repack_weights(rx), *wy = cuda_repack_weights(ry);
    return wx->M == wy->M && wx->K == wy->K && mvr_glu_k_ok(wx->K) && z->ne[0] == wx->M;
}

int mul_mat_launch_glu(const pyg_tensor *const *nodes, op_ctx *c) {
    const int gi = nodes[2]->src[0] == nodes[0] ? 0 : 1; /* the gate (silu's operand) may come second */
    const pyg_tensor *ordered[3] = { nodes[gi], nodes[1 - gi], nodes[2] };
    const rq_w *wg = repacked_weights(c, gi), *wu = repacked_weights(c, 1 - gi);
    if (!wg || !wu) {
        snprintf(c->err, c->errlen, "gate/up/swiglu launch without repacked weights");
        return PYG_ERR_INTERNAL;
    }
    int8_t *yq, *oq = NULL;
    float *yds, *ods = NULL;
    int st = quantize_activations(nodes[0], c, &yq, &yds);
    if (st != PYG_OK) return st;
    if (c->quant_out) mul_mat_quant_layout((char *)c->scratch + c->quant_off, nodes[2]->ne[0], &oq, &ods);
    return mvr_launch_glu(ordered, wg, wu, yq, yds, oq, ods, c);
}

int mul_mat_launch_qkv_rope(const pyg_tensor *const *nodes, op_ctx *c) {
    int8_t *yq;
    float *yds;
    int st = quantize_activations(nodes[0], c, &yq, &yds); /* the one column the three share */
    if (st != PYG_OK) return st;
    const rq_w *ws[3];
    for (int i = 0; i < 3; i++)
        if (!(ws[i] = repacked_weights(c, i))) {
            snprintf(c->err, c->errlen, "q/k/v + rope + cache launch without repacked weights");
            return PYG_ERR_INTERNAL;
        }
    return qkv_rope_launch(nodes, ws, yq, yds, c);
}

template <int U>
static int launch_mmvq_group_u(int type, const mvq_group_args &args, unsigned blocks, unsigned th, gpuStream_t s) {
    switch (type) {
    case PYG_TYPE_Q4_0: k_mmvq_group<PYG_TYPE_Q4_0, U><<<blocks, th, 0, s>>>(args); return PYG_OK;
    case PYG_TYPE_Q4_1: k_mmvq_group<PYG_TYPE_Q4_1, U><<<blocks, th, 0, s>>>(args); return PYG_OK;
    case PYG_TYPE_Q8_0: k_mmvq_group<PYG_TYPE_Q8_0, U><<<blocks, th, 0, s>>>(args); return PYG_OK;
    case PYG_TYPE_Q4_K: k_mmvq_group<PYG_TYPE_Q4_K, U><<<blocks, th, 0, s>>>(args); return PYG_OK;
    case PYG_TYPE_Q6_K: k_mmvq_group<PYG_TYPE_Q6_K, U><<<blocks, th, 0, s>>>(args); return PYG_OK;
    default: return PYG_ERR_INTERNAL;
    }
}


int mul_mat_launch_group(const pyg_tensor *const *nodes, int g, op_ctx *c) {
    if (g <= 1) return mul_mat_launch(nodes[0], c);
    if (g > MVQ_GROUP_MAX) {
        snprintf(c->err, c->errlen, "mul_mat group of %d > %d", g, MVQ_GROUP_MAX);
        return PYG_ERR_INTERNAL;
    }
    const pyg_tensor *a = nodes[0]->src[0];
    int8_t *yq;
    float *yds;
    int st = quantize_activations(nodes[0], c, &yq, &yds); /* the one column all of them share */
    if (st != PYG_OK) return st;
    const rq_w *ws[MVQ_GROUP_MAX];
    int all_rp = g <= MVR_MAX && mvr_k_ok(a->ne[0]);
    for (int i = 0; i < g; i++) all_rp = all_rp && (ws[i] = repacked_weights(c, i)) != NULL;
    if (all_rp) return mvr_launch(nodes, ws, g, yq, yds, c);
    mvq_group_args args;
    args.yq = yq;
    args.yds = yds;
    args.K = a->ne[0];
    args.n = g;
    unsigned blocks = 0;
    for (int i = 0; i < MVQ_GROUP_MAX; i++) {
        const pyg_tensor *n = nodes[i < g ? i : g - 1];
        args.w[i] = (const char *)n->src[0]->data;
        args.nb01[i] = (int64_t)n->src[0]->nb[1];
        args.M[i] = n->src[0]->ne[1];
        args.dst[i] = (float *)n->data;
        args.blk0[i] = blocks;
        if (i < g) blocks += ceil_div_u(args.M[i], MVQ_ROWS);
    }
    args.blk0[MVQ_GROUP_MAX] = blocks;
    const unsigned th = MVQ_ROWS * PYG_WARP_SIZE;
    int st2 = launch_mmvq_group_u<1>(a->type, args, blocks, th, c->stream); /* no unrolling: see launch_mmvq */
    if (st2 != PYG_OK) {
        snprintf(c->err, c->errlen, "mmvq group: type %d", a->type);
        return st2;
    }
    return check_launch(c, "mul_mat group (quantized mat-vec)");
}

template <int T>
static void launch_matvec(const mv_args &args, dim3 grid, int nc, gpuStream_t s) {
    switch (nc) {
    case 1: k_matvec<T, 1><<<grid, MV_THREADS, 0, s>>>(args); break;
    case 2: k_matvec<T, 2><<<grid, MV_THREADS, 0, s>>>(args); break;
    case 4: k_matvec<T, 4><<<grid, MV_THREADS, 0, s>>>(args); break;
    default: k_matvec<T, 8><<<grid, MV_THREADS, 0, s>>>(args); break;
    }
}

int mul_mat_launch(const pyg_tensor *n, op_ctx *c) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
    const rq_w *w = repacked_weights(c, 0);
    if (use_mmvq(n, w != NULL)) return run_mmvq(n, w, c);
    if (matvec_ok(n)) {
        mv_args args;
        args.w = (const char *)a->data;
        args.nb01 = (int64_t)a->nb[1];
        args.nb02 = (int64_t)a->nb[2];
        args.nb03 = (int64_t)a->nb[3];
        args.r2 = r2;
        args.r3 = r3;
        args.K = a->ne[0];
        args.B2 = b->ne[2];
        args.y = (const float *)b->data;
        args.ys1 = (int64_t)b->nb[1] / 4;
        args.ys2 = (int64_t)b->nb[2] / 4;
        args.ys3 = (int64_t)b->nb[3] / 4;
        args.ncols = (int)b->ne[1];
        args.dst = (float *)n->data;
        args.ds1 = (int64_t)n->nb[1] / 4;
        args.ds2 = (int64_t)n->nb[2] / 4;
        args.ds3 = (int64_t)n->nb[3] / 4;
        const int nc = args.ncols <= 1 ? 1 : args.ncols <= 2 ? 2 : args.ncols <= 4 ? 4 : 8;
        const dim3 grid((unsigned)n->ne[0], (unsigned)(b->ne[2] * b->ne[3]), 1);
        switch (a->type) {
        case PYG_TYPE_F32: launch_matvec<PYG_TYPE_F32>(args, grid, nc, c->stream); break;
        case PYG_TYPE_F16: launch_matvec<PYG_TYPE_F16>(args, grid, nc, c->stream); break;
        case PYG_TYPE_BF16: launch_matvec<PYG_TYPE_BF16>(args, grid, nc, c->stream); break;
        case PYG_TYPE_Q4_0: launch_matvec<PYG_TYPE_Q4_0>(args, grid, nc, c->stream); break;
        case PYG_TYPE_Q4_1: launch_matvec<PYG_TYPE_Q4_1>(args, grid, nc, c->stream); break;
        case PYG_TYPE_Q8_0: launch_matvec<PYG_TYPE_Q8_0>(args, grid, nc, c->stream); break;
        case PYG_TYPE_Q4_K: launch_matvec<PYG_TYPE_Q4_K>(args, grid, nc, c->stream); break;
        case PYG_TYPE_Q6_K: launch_matvec<PYG_TYPE_Q6_K>(args, grid, nc, c->stream); break;
        default:
            snprintf(c->err, c->errlen, "mat-vec: type %d", a->type);
            return PYG_ERR_INTERNAL;
        }
        return check_launch(c, "mul_mat (mat-vec)");
    }
    if (w && mmq_usable(n, c->cc)) return mmq_launch(n, w, c);
    const int bst = gemm_blas_launch(n, c); /* N >= option blas_min_n where cuBLAS is available */
    if (bst != GEMM_BLAS_DECLINED) return bst;
    if (mul_mat_mma_usable(n)) return mul_mat_mma_launch(n, c);
    const dim3 grid(ceil_div_u(a->ne[1], GM_BM), ceil_div_u(b->ne[1], GM_BN), (unsigned)(b->ne[2] * b->ne[3]));
    if (grid.y > 65535) {
        snprintf(c->err, c->errlen, "mul_mat: N = %lld too large for one launch", (long long)b->ne[1]);
        return PYG_ERR_UNSUPPORTED;
    }
    k_gemm<<<grid, GM_THREADS, 0, c->stream>>>(make_view(a), make_view(b), make_view(n), r2, r3);
    return check_launch(c, "mul_mat (gemm)");
}
