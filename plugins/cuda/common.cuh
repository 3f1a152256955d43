/* plugins/cuda/common.cuh — shared by every .cu of the CUDA plugin (and, later, HIP/MUSA):
 * element loads/stores for the plain types, the ggml-compatible quant block layouts with their
 * dequantizers (host+device, so a CPU-only test can check them), and the op launcher interface
 * between graph.cu and the ops_*.cu / mul_mat.cu / flash_attn.cu files.
 *
 * Nothing here is exported from the library (built with -fvisibility=hidden).
 */
#ifndef PYG_CUDA_COMMON_CUH
#define PYG_CUDA_COMMON_CUH

#include <math.h>
#include <stdint.h>
#include <stddef.h>
#include "vendor.h"
#include "pyggml/pyggml.h"
#include "options.h"

#define PYG_HD __host__ __device__ __forceinline__

/* ---------------------------------------------------------------- tensor view for kernels */

/* What a kernel needs of a pyg_tensor, passed by value (descriptors live in host memory). */
struct tview {
    char *data;
    int32_t type;
    int32_t pad;
    int64_t ne[4];
    int64_t nb[4];
};

static inline tview make_view(const pyg_tensor *t) {
    tview v;
    v.data = (char *)t->data;
    v.type = t->type;
    v.pad = 0;
    for (int i = 0; i < 4; i++) { v.ne[i] = t->ne[i]; v.nb[i] = (int64_t)t->nb[i]; }
    return v;
}

/* ---------------------------------------------------------------- programmatic dependent launch
 * A kernel launched with launch_maybe_pdl(1, ...) may start while the kernel before it in the stream
 * finishes (CUDA, sm_90: the launch overlaps that kernel's tail). Every block of it must call
 * pdl_wait() before it reads or writes anything that kernel or an earlier one touches; then a
 * kernel's completion still implies its predecessor's. Without PYG_GPU_HAS_PDL both are plain. */
__device__ __forceinline__ void pdl_wait() {
#ifdef PYG_GPU_HAS_PDL
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#endif
}

#ifndef PYG_GPU_HOST_EMU /* the host emulation (test/vendor_emu.h) launches its own way */
template <typename... P, typename... A>
static inline gpuError_t launch_maybe_pdl(int pdl, void (*k)(P...), dim3 grid, dim3 block, gpuStream_t s, A... args) {
#ifdef PYG_GPU_HAS_PDL
    if (pdl) return gpu_launch_pdl(k, grid, block, 0, s, args...);
#endif
    (void)pdl;
    k<<<grid, block, 0, s>>>(args...);
    return gpuGetLastError();
}
#endif

/* ---------------------------------------------------------------- plain type conversions */

PYG_HD float f16_bits_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
    return gpu_half2float(*(const gpu_half *)&h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) { u = sign; }
        else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            u = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

PYG_HD float bits_as_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

PYG_HD uint32_t f32_as_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}

PYG_HD float bf16_bits_to_f32(uint16_t h) {
    return bits_as_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN stays a quiet NaN (ggml's rule). */
PYG_HD uint16_t f32_to_bf16_bits(float f) {
    uint32_t u = f32_as_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* Round to nearest even (IEEE binary16); NaN stays a quiet NaN, overflow gives infinity. */
PYG_HD uint16_t f32_to_f16_bits(float f) {
#ifdef __CUDA_ARCH__
    const gpu_half h = gpu_float2half(f);
    return *(const uint16_t *)&h;
#else
    const uint32_t u = f32_as_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* 65520 and up round to infinity */
    if (a < 0x38800000u) return (uint16_t)(sign | (uint32_t)rintf(bits_as_f32(a) * 16777216.0f)); /* subnormal */
    const uint32_t r = a - 0x38000000u;                     /* exponent rebased to 15 */
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
#endif
}

/* v stored as a plain float type (f32, f16, bf16), host+device */
PYG_HD void store_plain(char *p, int type, float v) {
    if (type == PYG_TYPE_F16) *(uint16_t *)p = f32_to_f16_bits(v);
    else if (type == PYG_TYPE_BF16) *(uint16_t *)p = f32_to_bf16_bits(v);
    else *(float *)p = v;
}

__device__ __forceinline__ float load_f(const char *p, int type) {
    switch (type) {
    case PYG_TYPE_F16: return f16_bits_to_f32(*(const uint16_t *)p);
    case PYG_TYPE_BF16: return bf16_bits_to_f32(*(const uint16_t *)p);
    default: return *(const float *)p;
    }
}


/* a's bytes and b's share none (host: plan-time checks of graph.cu and qkv_rope.cu) */
static inline int tensors_disjoint(const pyg_tensor *a, const pyg_tensor *b) {
    const char *x = (const char *)a->data, *y = (const char *)b->data;
    return x + pyg_tensor_nbytes(a) <= y || y + pyg_tensor_nbytes(b) <= x;
}

static inline int is_plain_float(int type) {
    return type == PYG_TYPE_F32 || type == PYG_TYPE_F16 || type == PYG_TYPE_BF16;
}

/* ---------------------------------------------------------------- quant blocks (ggml layouts)
 * Offsets in bytes inside one block; blocks are only 2-byte aligned in general. */

/* q4_0: 32 weights, 18 bytes: f16 d; 16 bytes of nibbles (low = weights 0..15, high = 16..31); w = d*(q-8) */
/* q4_1: 32 weights, 20 bytes: f16 d, f16 m; 16 bytes of nibbles as q4_0; w = d*q + m */
/* q8_0: 32 weights, 34 bytes: f16 d; 32 int8; w = d*q */
/* q4_K: 256 weights, 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins for 8 sub-blocks,
 *       128 bytes of nibbles: byte 32g+l holds weight 64g+l (low) and 64g+32+l (high);
 *       w = d*sc[s]*q - dmin*mn[s] */
/* q6_K: 256 weights, 210 bytes: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits),
 *       16 int8 scales, f16 d; w = d*sc*(q-32) */

#define Q4_K_BYTES 144
#define Q6_K_BYTES 210

PYG_HD uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Scale and min of sub-block j (0..7) of a q4_K block, from its 12 packed bytes. */
PYG_HD void q4k_scale_min(const uint8_t *sc, int j, int *s, int *m) {
    if (j < 4) {
        *s = sc[j] & 63;
        *m = sc[j + 4] & 63;
    } else {
        *s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}

/* Weight i of one block of `type` (i < block size). Slow but simple: used by get_rows and the
 * generic GEMM loader; the mat-vec kernels have their own vectorised decoders. */
PYG_HD float dequant_one(const uint8_t *blk, int type, int i) {
    switch (type) {
    case PYG_TYPE_Q4_0: {
        const float d = f16_bits_to_f32(rd16(blk));
        const uint8_t b = blk[2 + (i & 15)];
        const int q = (i < 16 ? (b & 15) : (b >> 4)) - 8;
        return d * (float)q;
    }
    case PYG_TYPE_Q4_1: { /* f16 d, f16 m, nibbles as q4_0's: w = d*q + m */
        const uint8_t b = blk[4 + (i & 15)];
        const int q = i < 16 ? (b & 15) : (b >> 4);
        return f16_bits_to_f32(rd16(blk)) * (float)q + f16_bits_to_f32(rd16(blk + 2));
    }
    case PYG_TYPE_Q8_0:
        return f16_bits_to_f32(rd16(blk)) * (float)(int8_t)blk[2 + i];
    case PYG_TYPE_Q4_K: {
        const float d = f16_bits_to_f32(rd16(blk)), dmin = f16_bits_to_f32(rd16(blk + 2));
        const int g = i >> 6, w = i & 63, l = w & 31, sub = 2 * g + (w >> 5);
        const uint8_t b = blk[16 + 32 * g + l];
        const int q = (w < 32) ? (b & 15) : (b >> 4);
        int s, m;
        q4k_scale_min(blk + 4, sub, &s, &m);
        return d * (float)s * (float)q - dmin * (float)m;
    }
    case PYG_TYPE_Q6_K: {
        const int n = i >> 7, r = i & 127, quarter = r >> 5, l = r & 31;
        const uint8_t *ql = blk + 64 * n, *qh = blk + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(blk + 192) + 8 * n;
        const uint8_t lo = ql[l + ((quarter & 1) ? 32 : 0)];
        const int q = (((quarter & 2) ? (lo >> 4) : (lo & 15)) | (((qh[l] >> (2 * quarter)) & 3) << 4)) - 32;
        const float d = f16_bits_to_f32(rd16(blk + 208));
        return d * (float)sc[(l >> 4) + 2 * quarter] * (float)q;
    }
    default:
        return 0.0f;
    }
}

static inline int is_supported_quant(int type) {
    return type == PYG_TYPE_Q4_0 || type == PYG_TYPE_Q4_1 || type == PYG_TYPE_Q8_0 || type == PYG_TYPE_Q4_K ||
           type == PYG_TYPE_Q6_K;
}

/* Element i0 of a row of any supported type (plain or quantized). */
__device__ __forceinline__ float load_row_elem(const char *row, int type, int64_t i0, int64_t nb0) {
    switch (type) {
    case PYG_TYPE_F32: case PYG_TYPE_F16: case PYG_TYPE_BF16:
        return load_f(row + i0 * nb0, type);
    case PYG_TYPE_Q4_0: case PYG_TYPE_Q4_1: case PYG_TYPE_Q8_0:
        return dequant_one((const uint8_t *)row + (i0 >> 5) * nb0, type, (int)(i0 & 31));
    default:
        return dequant_one((const uint8_t *)row + (i0 >> 8) * nb0, type, (int)(i0 & 255));
    }
}

/* ---------------------------------------------------------------- reductions */

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = PYG_WARP_SIZE / 2; o > 0; o >>= 1) v += gpu_shfl_xor(v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = PYG_WARP_SIZE / 2; o > 0; o >>= 1) v = fmaxf(v, gpu_shfl_xor(v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of the warp size, <= 1024); every thread gets it. */
__device__ __forceinline__ float block_sum(float v, float *sh /* >= 32 floats */) {
    const int lane = threadIdx.x % PYG_WARP_SIZE, w = threadIdx.x / PYG_WARP_SIZE;
    const int nw = blockDim.x / PYG_WARP_SIZE;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float *sh) {
    const int lane = threadIdx.x % PYG_WARP_SIZE, w = threadIdx.x / PYG_WARP_SIZE;
    const int nw = blockDim.x / PYG_WARP_SIZE;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    return warp_max(v);
}

/* A FLASH_ATTN_EXT node's operands as the attention kernels read them: q (f32), k, v, the mask (NULL:
 * none), dst, their byte strides, the sizes and the op's parameters (scale, ALiBi max_bias,
 * softcap). The kernels' own argument structs extend it (flash_attn_dec.cu, fattn_mma.cuh). */
struct fa_views {
    const char *q, *k, *v, *mask;
    char *dst;
    int64_t q_nb1, q_nb2, q_nb3, k_nb1, k_nb2, k_nb3, v_nb1, v_nb2, v_nb3;
    int64_t m_nb1, m_nb2, m_nb3, d_nb1, d_nb2, d_nb3;
    int H, n_q, n_kv, k_ne3, v_ne3, m_ne0, m_ne2, m_ne3, mask_f32;
    float scale, max_bias, softcap;
};

static inline void fa_views_of(const pyg_tensor *n, fa_views *a) {
    const pyg_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *m = n->src[3];
    memset(a, 0, sizeof *a);
    a->q = (const char *)q->data;
    a->k = (const char *)k->data;
    a->v = (const char *)v->data;
    a->mask = m ? (const char *)m->data : NULL;
    a->dst = (char *)n->data;
    a->q_nb1 = q->nb[1]; a->q_nb2 = q->nb[2]; a->q_nb3 = q->nb[3];
    a->k_nb1 = k->nb[1]; a->k_nb2 = k->nb[2]; a->k_nb3 = k->nb[3];
    a->v_nb1 = v->nb[1]; a->v_nb2 = v->nb[2]; a->v_nb3 = v->nb[3];
    if (m) {
        a->m_nb1 = m->nb[1]; a->m_nb2 = m->nb[2]; a->m_nb3 = m->nb[3];
        a->m_ne0 = (int)m->ne[0]; a->m_ne2 = (int)m->ne[2]; a->m_ne3 = (int)m->ne[3];
        a->mask_f32 = m->type == PYG_TYPE_F32;
    }
    a->d_nb1 = n->nb[1]; a->d_nb2 = n->nb[2]; a->d_nb3 = n->nb[3];
    a->H = (int)q->ne[2];
    a->n_q = (int)q->ne[1];
    a->n_kv = (int)k->ne[1];
    a->k_ne3 = (int)k->ne[3];
    a->v_ne3 = (int)v->ne[3];
    a->scale = pyg_op_param_f32(n->op_params, 0);
    a->max_bias = pyg_op_param_f32(n->op_params, 1);
    a->softcap = pyg_op_param_f32(n->op_params, 2);
}

/* ALiBi slope of head h of n_head (ggml's rule); 1 when max_bias == 0. */
PYG_HD float alibi_slope(float max_bias, int h, int n_head) {
    if (max_bias <= 0.0f) return 1.0f;
    int n_log2 = 1;
    while (n_log2 * 2 <= n_head) n_log2 *= 2;
    const float m0 = exp2f(-max_bias / (float)n_log2);
    const float m1 = exp2f(-(max_bias / 2.0f) / (float)n_log2);
    return h < n_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_log2) + 1));
}

/* ---------------------------------------------------------------- op launcher interface */

/* Kernel bodies shared with the host tests are templates over the thread running them (simt.cuh):
 * device code in the plugin, host code where a test defines PYG_SIMT_HOST. */
#ifdef PYG_SIMT_HOST
#define PYG_KB inline
#else
#define PYG_KB __device__ __forceinline__
#endif

/* float -> int, round to nearest even (NaN does not occur: callers pass finite values) */
PYG_HD int f2i_rn(float x) {
#ifdef __CUDA_ARCH__
    return __float2int_rn(x);
#else
    return (int)rintf(x);
#endif
}

/* One q8 block of activations held one per lane (a whole warp, lanes in element order): int8
 * quants and (d, d * sum) at block kb, the rounding the mat-vec's own quantizer uses. Every lane
 * must call it (shuffles; t: a thread of simt.cuh, or DevLane). A NaN or an inf in the block gives
 * it a NaN scale and zero quants (the CPU plugin's rule), so every product with the block is NaN, as
 * in the float paths (fmaxf alone dropped the NaN: the block read as zeros, a finite result). */
template <class L>
PYG_KB void quant_block32(const L &t, float v, int8_t *yq, float *yds, int64_t kb) {
    float amax = v != v ? INFINITY : fabsf(v);
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, t.shfl_xor(amax, o));
    const float d = amax < INFINITY ? amax / 127.0f : NAN, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const float x = v * id;
    const int q = x == x ? f2i_rn(x) : 0;
    float sum = (float)q;
    for (int o = 16; o > 0; o >>= 1) sum += t.shfl_xor(sum, o);
    yq[kb * 32 + t.lane] = (int8_t)q;
    if (t.lane == 0) {
        yds[2 * kb] = d;
        yds[2 * kb + 1] = d * sum;
    }
}

#ifndef PYG_SIMT_HOST
/* the lane of a plain kernel, for quant_block32 */
struct DevLane {
    int lane;
    __device__ __forceinline__ DevLane() : lane((int)threadIdx.x % PYG_WARP_SIZE) {}
    __device__ __forceinline__ float shfl_xor(float v, int m) const { return gpu_shfl_xor(v, m); }
};

__device__ __forceinline__ void warp_quant_block(float v, int8_t *yq, float *yds, int64_t kb) {
    quant_block32(DevLane(), v, yq, yds, kb);
}
#endif

struct cuda_repack;

/* Per-launch context handed from graph.cu to the launchers. */
struct op_ctx {
    gpuStream_t stream;
    int device;
    int n_sm;                 /* multiprocessors of the device */
    void *scratch;            /* plan-owned device scratch (may be NULL) */
    size_t scratch_size;
    char *err;                /* message buffer for a non-OK return */
    size_t errlen;
    /* Activation pre-quantization (plan-time fusion, decode): quant_out: this launch also writes
     * its one output row as int8 blocks into the scratch, laid out as mul_mat's mat-vec wants them
     * (mul_mat_quant_layout); quant_in: this mat-vec finds its activations there already. */
    int quant_out, quant_in;
    size_t quant_off;         /* where in the scratch a producer writes those int8 blocks (past any
                                 producer's own use of the scratch) */
    size_t quant_in_off;      /* where a consumer finds them (another region when the launch is both:
                                 the fused gate/up + swiglu reads one column and writes the next) */
    int cc;                   /* compute capability, major * 10 + minor */
    cuda_repack *const *rp;   /* mul_mat: the repacked weights of this launch's nodes (NULL entries:
                                 none); NULL when the plan has none */
    /* The plan's sync area: words zeroed once when the plan is made, which a kernel that counts
     * its finished blocks (the decode flash attention's folded merge) leaves zeroed again. */
    size_t sync_off, sync_bytes;
};

/* Each op family: supports (pure, host side) and launch (queues kernels; returns a pyg_status and
 * writes err on failure). scratch_bytes says what launch needs in op_ctx.scratch. */
int basic_supports(const pyg_tensor *node);
int basic_launch(const pyg_tensor *node, op_ctx *c);
int rows_supports(const pyg_tensor *node);
/* rms_norm immediately followed by mul(norm, weight row): one kernel (plan-time fusion) */
int rows_can_fuse_mul(const pyg_tensor *norm, const pyg_tensor *mul);
int rows_launch_fused_mul(const pyg_tensor *norm, const pyg_tensor *mul, op_ctx *c);
/* add, then rms_norm of the sum, then mul(norm, weight row): one kernel (all contiguous f32 rows) */
int rows_can_fuse_add(const pyg_tensor *add, const pyg_tensor *norm, const pyg_tensor *mul);
int rows_launch_fused_add(const pyg_tensor *add, const pyg_tensor *norm, const pyg_tensor *mul, op_ctx *c);
int rows_launch(const pyg_tensor *node, op_ctx *c);
int mul_mat_supports(const pyg_tensor *node);
int mul_mat_launch(const pyg_tensor *node, op_ctx *c);
/* repacked: the node's weights have a repacked copy; cc: the device's compute capability */
size_t mul_mat_scratch_bytes(const pyg_tensor *node, int repacked, int cc);
/* Plan-time fusion (graph.cu groups nodes; mul_mat.cu and ops_rows.cu launch the groups) unless
 * the device option fuse=0. */
static inline int cuda_fuse_enabled(void) { return cuda_opts()->fuse != 0; }
/* Where the int8 activation column of a one-column mat-vec with K inputs lies in the scratch. */
static inline void mul_mat_quant_layout(void *scratch, int64_t K, int8_t **yq, float **yds) {
    *yq = (int8_t *)scratch;
    *yds = (float *)((char *)scratch + (((size_t)K + 255) & ~(size_t)255));
}
/* May `producer`'s launch write the quantized column that `consumer` (the first node of the next
 * launch) reads? producer: the mul of a fused add+norm+mul group, a two-operand swiglu, or a decode
 * flash_attn_ext whose kv splits are merged by a second kernel. repacked: consumer's weights are
 * repacked (a q6_K consumer then reads int8 activations too). */
int mul_mat_can_prequant(const pyg_tensor *producer, const pyg_tensor *consumer, int repacked);
/* The mul of a fused add+norm+mul group that can write them: one row, a multiple of 32, at most
 * 8192 wide (each of the kernel's 1024 threads holds at most 8 elements). */
int rows_can_prequant_add(const pyg_tensor *mul);
/* A swiglu (two operands, one contiguous f32 row of a multiple of 32) that can write them. */
int swiglu_can_prequant(const pyg_tensor *node);
/* Pairs of adjacent nodes launched as one (a layer's q/k ropes, its K/V cache writes); graph.cu
 * also checks that neither reads or overwrites what the other writes. */
int rows_can_pair_rope(const pyg_tensor *x, const pyg_tensor *y);
int rows_launch_rope_pair(const pyg_tensor *x, const pyg_tensor *y, op_ctx *c);
/* rope x whose output set_rows y stores unchanged into a cache, and set_rows z: one launch */
int rows_can_rope_store(const pyg_tensor *x, const pyg_tensor *y);
int rows_launch_rope_store_pair(const pyg_tensor *x, const pyg_tensor *y, const pyg_tensor *z, op_ctx *c);
int basic_can_pair_set_rows(const pyg_tensor *x, const pyg_tensor *y);
int basic_launch_set_rows_pair(const pyg_tensor *x, const pyg_tensor *y, op_ctx *c);
/* A layer's gate and up mat-vecs x, y (in either order) and swiglu z = silu(gate) * up, adjacent in the
 * plan, as one launch
 * (mul_mat_rp.cu): both weights repacked (rx, ry), one activation column, a contiguous f32 row of a
 * multiple of 32 (z may then also write the down mat-vec's int8 activations). */
int mul_mat_can_glu(const pyg_tensor *x, const pyg_tensor *y, const pyg_tensor *z, const cuda_repack *rx,
                    const cuda_repack *ry);
int mul_mat_launch_glu(const pyg_tensor *const *nodes, op_ctx *c);
/* A decode layer's q/k/v mat-vecs, its q and k ropes and its K/V cache writes: the 7 plan nodes
 * from nodes[i] (of n) as one launch (qkv_rope.cu, which states the pattern; rp: the plan's repacked
 * weights per node; g: the graph, for its outputs), and that launch of nodes[0..6]. */
int qkv_rope_can(const pyg_tensor *const *nodes, int n, int i, cuda_repack *const *rp, const pyg_graph *g);
int mul_mat_launch_qkv_rope(const pyg_tensor *const *nodes, op_ctx *c);
/* Decode mat-vec grouping (plan time): may y run in the same launch as x (adjacent plan nodes)?
 * The same weight type and K, the same activation column. mul_mat_can_group_types for weights the
 * caller knows are repacked (repacked: q6_K then runs the int8 mat-vec too), with k_mix also q4_K
 * beside q6_K (the q/k/v launch, whose blocks take either type). */
int mul_mat_can_group(const pyg_tensor *x, const pyg_tensor *y);
int mul_mat_can_group_types(const pyg_tensor *x, const pyg_tensor *y, int repacked, int k_mix);
/* Launch nodes[0..g-1] (each joinable to nodes[0] by mul_mat_can_group) as one; g == 1: a plain launch. */
int mul_mat_launch_group(const pyg_tensor *const *nodes, int g, op_ctx *c);
#define MMA_MIN_N 32 /* N from which mul_mat uses the tensor-core GEMM */
int mul_mat_mma_usable(const pyg_tensor *node);
int mul_mat_mma_launch(const pyg_tensor *node, op_ctx *c);
int flash_attn_supports(const pyg_tensor *node);
size_t flash_attn_scratch_bytes(const pyg_tensor *node, int n_sm);
size_t flash_attn_sync_bytes(const pyg_tensor *node, int n_sm);
int flash_attn_launch(const pyg_tensor *node, op_ctx *c);
/* One query, one batch, Dv % 32 == 0, contiguous output, and a kernel that ends with the whole
 * output row in hand (the decode kernel, or the merge kernel of the older kv split) with this many
 * multiprocessors: it can also write the output as int8 mat-vec activations. */
int flash_attn_can_prequant(const pyg_tensor *node, int n_sm);
/* The split-kv decode kernel (flash_attn_dec.cu): usable for this node with these options? */
int flash_attn_dec_usable(const pyg_tensor *node);
size_t flash_attn_dec_scratch_bytes(const pyg_tensor *node, int n_sm);
size_t flash_attn_dec_sync_bytes(const pyg_tensor *node, int n_sm);
int flash_attn_dec_launch(const pyg_tensor *node, op_ctx *c);

/* Raise kernel k's dynamic shared-memory limit to `bytes` (the opt-in above 48 KiB), once per device:
 * done[] is the caller's per-kernel flag array (static, PYG_SMEM_OPT_DEVICES entries); a device past
 * it is set on every call. On failure the runtime's last error is cleared and its code returned. */
#define PYG_SMEM_OPT_DEVICES 64
template <typename K>
static inline gpuError_t smem_opt_in(K *k, size_t bytes, int device, int *done) {
    const bool tracked = device >= 0 && device < PYG_SMEM_OPT_DEVICES;
    if (tracked && done[device]) return gpuSuccess;
    const gpuError_t e = gpuFuncSetMaxDynamicSharedMemory(k, (int)bytes);
    if (e != gpuSuccess) {
        gpuGetLastError();
        return e;
    }
    if (tracked) done[device] = 1;
    return gpuSuccess;
}

/* Launch-error check shared by the launchers. */
int check_launch(op_ctx *c, const char *what);

static inline unsigned ceil_div_u(int64_t a, int64_t b) { return (unsigned)((a + b - 1) / b); }

#endif /* PYG_CUDA_COMMON_CUH */
