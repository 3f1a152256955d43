/* plugins/cuda/ops_basic.cu — elementwise ops (add, mul, scale, silu, gelu, swiglu), copies
 * (cpy, cont: f32/f16/bf16 in any combination, any strides), get_rows / set_rows and argmax.
 *
 * Every kernel works on arbitrary strides: one block per destination row (dims 1..3 flattened into
 * blockIdx.x), threads along dim 0. Arithmetic is in f32 whatever the storage type. */
#include <stdio.h>
#include "common.cuh"
#include "set_rows.cuh"

enum { EW_ADD, EW_MUL, EW_SCALE, EW_SILU, EW_GELU, EW_SWIGLU, EW_SWIGLU_HALVES };

#define ROW_THREADS 128

__device__ __forceinline__ void row_index(const tview &v, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % v.ne[1];
    const int64_t t = r / v.ne[1];
    *i2 = t % v.ne[2];
    *i3 = t / v.ne[2];
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

__device__ __forceinline__ float gelu_f(float x) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

template <int OP>
__global__ void k_elementwise(tview d, tview a, tview b, float p0, float p1, int swap) {
    int64_t i1, i2, i3;
    row_index(d, blockIdx.x, &i1, &i2, &i3);
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const char *arow = a.data + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3];
    const char *brow = NULL;
    if (OP == EW_ADD || OP == EW_MUL)
        brow = b.data + (i1 % b.ne[1]) * b.nb[1] + (i2 % b.ne[2]) * b.nb[2] + (i3 % b.ne[3]) * b.nb[3];
    if (OP == EW_SWIGLU) brow = b.data + i1 * b.nb[1] + i2 * b.nb[2] + i3 * b.nb[3];
    const int64_t n = d.ne[0];
    /* a row may be spread over gridDim.y blocks (few long rows: the decode case) */
    for (int64_t i0 = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; i0 < n; i0 += (int64_t)blockDim.x * gridDim.y) {
        float r;
        if (OP == EW_ADD || OP == EW_MUL) {
            const float x = load_f(arow + i0 * a.nb[0], a.type);
            const float y = load_f(brow + (i0 % b.ne[0]) * b.nb[0], b.type);
            r = OP == EW_ADD ? x + y : x * y;
        } else if (OP == EW_SCALE) {
            r = load_f(arow + i0 * a.nb[0], a.type) * p0 + p1;
        } else if (OP == EW_SILU) {
            r = silu_f(load_f(arow + i0 * a.nb[0], a.type));
        } else if (OP == EW_GELU) {
            r = gelu_f(load_f(arow + i0 * a.nb[0], a.type));
        } else if (OP == EW_SWIGLU) {
            r = silu_f(load_f(arow + i0 * a.nb[0], a.type)) * load_f(brow + i0 * b.nb[0], b.type);
        } else { /* halves of src0's row */
            const int64_t ia = swap ? i0 + n : i0, ib = swap ? i0 : i0 + n;
            r = silu_f(load_f(arow + ia * a.nb[0], a.type)) * load_f(arow + ib * a.nb[0], a.type);
        }
        store_plain(drow + i0 * d.nb[0], d.type, r);
    }
}

/* swiglu of one contiguous f32 row (n % 32 == 0) that also writes the row as the int8 activation
 * blocks of the mat-vec that reads it next (plan-time fusion: one quantize launch fewer). */
__global__ void k_swiglu_q(float *d, const float *a, const float *b, int64_t n, int8_t *yq, float *yds) {
    const int64_t i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i0 - i0 % PYG_WARP_SIZE >= n) return; /* whole warps: n % 32 == 0 */
    const float r = silu_f(a[i0]) * b[i0];
    d[i0] = r;
    warp_quant_block(r, yq, yds, i0 / PYG_WARP_SIZE);
}

/* Converting copy; same shape: element (i0..i3) to (i0..i3). The source may be quantized (dequantize). */
__global__ void k_copy_same(tview d, tview s) {
    int64_t i1, i2, i3;
    row_index(d, blockIdx.x, &i1, &i2, &i3);
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    for (int64_t i0 = threadIdx.x; i0 < d.ne[0]; i0 += blockDim.x)
        store_plain(drow + i0 * d.nb[0], d.type, load_row_elem(srow, s.type, i0, s.nb[0]));
}

/* Converting copy between different shapes of equal element count: the k-th element in logical
 * (row-major over ne[3..0]) order of the source goes to the k-th of the destination. */
__global__ void k_copy_flat(tview d, tview s) {
    int64_t i1, i2, i3;
    row_index(d, blockIdx.x, &i1, &i2, &i3);
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const int64_t base = ((i3 * d.ne[2] + i2) * d.ne[1] + i1) * d.ne[0];
    for (int64_t i0 = threadIdx.x; i0 < d.ne[0]; i0 += blockDim.x) {
        int64_t k = base + i0;
        const int64_t s0 = k % s.ne[0]; k /= s.ne[0];
        const int64_t s1 = k % s.ne[1]; k /= s.ne[1];
        const int64_t s2 = k % s.ne[2]; k /= s.ne[2];
        const int64_t s3 = k;
        const float v = load_f(s.data + s0 * s.nb[0] + s1 * s.nb[1] + s2 * s.nb[2] + s3 * s.nb[3], s.type);
        store_plain(drow + i0 * d.nb[0], d.type, v);
    }
}


/* dst[:, i1, i2, i3] = src0[:, idx[i1, i2, i3], i2, i3] (any src0 type, converted). */
__global__ void k_get_rows(tview d, tview s, tview idx) {
    int64_t i1, i2, i3;
    row_index(d, blockIdx.x, &i1, &i2, &i3);
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const int64_t r = load_index(idx.data + i1 * idx.nb[0] + i2 * idx.nb[1] + i3 * idx.nb[2], idx.type);
    const bool ok = r >= 0 && r < s.ne[1];
    const char *srow = s.data + (ok ? r : 0) * s.nb[1] + (i2 % s.ne[2]) * s.nb[2] + (i3 % s.ne[3]) * s.nb[3];
    for (int64_t i0 = threadIdx.x; i0 < d.ne[0]; i0 += blockDim.x) {
        const float v = ok ? load_row_elem(srow, s.type, i0, s.nb[0]) : 0.0f; /* bad index: zeros, no OOB read */
        store_plain(drow + i0 * d.nb[0], d.type, v);
    }
}

/* dst[:, idx[i1, i2 % ., i3 % .], i2, i3] = src[:, i1, i2, i3]; rows with an out-of-range index are skipped.
 * Grid: (src row, chunk of blockDim.x elements), one element per thread: a decode step writes one
 * long row (a 7b KV row: 4096 values), and one block looping over it issued its load->convert->store
 * chains one round trip after another (7.9 us per call on the H200; load_f's type switch keeps the
 * compiler from hoisting the loads). */
__global__ void k_set_rows(tview d, tview s, tview idx) {
    set_rows_elem(d, s, idx, blockIdx.x, (int64_t)blockIdx.y * blockDim.x + threadIdx.x);
}

/* Two set_rows (a layer's K and V cache writes) in one launch: grid.z picks which; rows and chunks
 * past the smaller one's extent do nothing. */
__global__ void k_set_rows_pair(tview d0, tview s0, tview x0, unsigned rows0, tview d1, tview s1, tview x1,
                                unsigned rows1) {
    const int64_t i0 = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (blockIdx.z == 0) {
        if (blockIdx.x < rows0) set_rows_elem(d0, s0, x0, blockIdx.x, i0);
    } else if (blockIdx.x < rows1) {
        set_rows_elem(d1, s1, x1, blockIdx.x, i0);
    }
}

/* One block per row of src; dst is i32 with one element per row, in row order. */
__global__ void k_argmax(int32_t *dst, tview s) {
    int64_t i1, i2, i3;
    row_index(s, blockIdx.x, &i1, &i2, &i3);
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    const int NONE = 0x7fffffff;
    float best = -INFINITY;
    int best_i = NONE;
    for (int64_t i0 = threadIdx.x; i0 < s.ne[0]; i0 += blockDim.x) {
        const float v = load_f(srow + i0 * s.nb[0], s.type);
        if (best_i == NONE || v > best) { best = v; best_i = (int)i0; } /* i0 grows: ties keep the first */
    }
    /* reduce (largest value, then smallest index) */
    for (int o = PYG_WARP_SIZE / 2; o > 0; o >>= 1) {
        const float v2 = gpu_shfl_xor(best, o);
        const int j2 = gpu_shfl_xor(best_i, o);
        if (j2 != NONE && (best_i == NONE || v2 > best || (v2 == best && j2 < best_i))) { best = v2; best_i = j2; }
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    const int lane = threadIdx.x % PYG_WARP_SIZE, w = threadIdx.x / PYG_WARP_SIZE;
    if (lane == 0) { sv[w] = best; si[w] = best_i; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < (int)(blockDim.x / PYG_WARP_SIZE); k++)
            if (si[k] != NONE && (best_i == NONE || sv[k] > best || (sv[k] == best && si[k] < best_i))) {
                best = sv[k];
                best_i = si[k];
            }
        dst[blockIdx.x] = best_i == NONE ? 0 : best_i;
    }
}

/* ---------------------------------------------------------------- host side */

static int same_ne(const pyg_tensor *a, const pyg_tensor *b) {
    for (int i = 0; i < 4; i++)
        if (a->ne[i] != b->ne[i]) return 0;
    return 1;
}

static int is_index_type(int t) { return t == PYG_TYPE_I32 || t == PYG_TYPE_I64; }

int basic_supports(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1], *c = n->src[2];
    if (!a) return 0;
    switch (n->op) {
    case PYG_OP_ADD: case PYG_OP_MUL:
        if (!b || !is_plain_float(n->type) || !is_plain_float(a->type) || !is_plain_float(b->type)) return 0;
        if (!same_ne(n, a)) return 0;
        for (int i = 0; i < 4; i++)
            if (a->ne[i] % b->ne[i]) return 0;
        return 1;
    case PYG_OP_SCALE: case PYG_OP_SILU: case PYG_OP_GELU:
        return is_plain_float(n->type) && is_plain_float(a->type) && same_ne(n, a);
    case PYG_OP_SWIGLU:
        if (!is_plain_float(n->type) || !is_plain_float(a->type)) return 0;
        if (b) return is_plain_float(b->type) && same_ne(n, a) && same_ne(n, b);
        return a->ne[0] == 2 * n->ne[0] && a->ne[1] == n->ne[1] && a->ne[2] == n->ne[2] && a->ne[3] == n->ne[3];
    case PYG_OP_CPY:
        return b && is_plain_float(a->type) && is_plain_float(b->type) &&
               pyg_tensor_nelements(a) == pyg_tensor_nelements(b);
    case PYG_OP_CONT:
        if (is_supported_quant(a->type)) /* dequantize */
            return is_plain_float(n->type) && pyg_tensor_rows_contiguous(a) && same_ne(a, n);
        return is_plain_float(a->type) && is_plain_float(n->type) && pyg_tensor_nelements(a) == pyg_tensor_nelements(n);
    case PYG_OP_GET_ROWS:
        if (!b || !is_index_type(b->type) || !is_plain_float(n->type)) return 0;
        if (!is_plain_float(a->type) && !is_supported_quant(a->type)) return 0;
        if (is_supported_quant(a->type) && !pyg_tensor_rows_contiguous(a)) return 0;
        return n->ne[0] == a->ne[0] && n->ne[1] == b->ne[0] && n->ne[2] == b->ne[1] && n->ne[3] == b->ne[2] &&
               b->ne[3] == 1;
    case PYG_OP_SET_ROWS:
        if (!b || !c || !is_index_type(c->type) || !is_plain_float(a->type) || !is_plain_float(b->type)) return 0;
        return b->ne[0] == a->ne[0] && c->ne[0] == b->ne[1] && b->ne[2] == a->ne[2] && b->ne[3] == a->ne[3] &&
               b->ne[2] % c->ne[1] == 0 && b->ne[3] % c->ne[2] == 0 && c->ne[3] == 1 &&
               b->ne[0] <= 65535LL * ROW_THREADS; /* grid.y chunks of a row */
    case PYG_OP_ARGMAX:
        return n->type == PYG_TYPE_I32 && is_plain_float(a->type) && pyg_tensor_is_contiguous(n) &&
               pyg_tensor_nelements(n) == pyg_tensor_nrows(a);
    default:
        return 0;
    }
}

static unsigned row_threads(int64_t ne0) {
    int64_t t = (ne0 + 31) / 32 * 32;
    return (unsigned)(t < ROW_THREADS ? t : ROW_THREADS);
}

/* Blocks per row for the elementwise kernels: one block per row fills the GPU when there are many
 * rows; with few long rows (decode: one token) a single block per row left the GPU nearly idle,
 * so each row is then split over several blocks (grid.y, at most 65535). */
static unsigned row_splits(int64_t rows, int64_t ne0, unsigned th) {
    if (rows >= 1024) return 1;
    int64_t want = (ne0 + th - 1) / th;
    int64_t cap = (2048 + rows - 1) / rows;
    if (want > cap) want = cap;
    if (want > 65535) want = 65535;
    return (unsigned)(want < 1 ? 1 : want);
}

int basic_can_pair_set_rows(const pyg_tensor *x, const pyg_tensor *y) {
    return cuda_fuse_enabled() && x->op == PYG_OP_SET_ROWS && y->op == PYG_OP_SET_ROWS &&
           pyg_tensor_nrows(x->src[1]) <= 0x7fffffffLL && pyg_tensor_nrows(y->src[1]) <= 0x7fffffffLL;
}

int basic_launch_set_rows_pair(const pyg_tensor *x, const pyg_tensor *y, op_ctx *c) {
    const unsigned r0 = (unsigned)pyg_tensor_nrows(x->src[1]), r1 = (unsigned)pyg_tensor_nrows(y->src[1]);
    const int64_t ne0 = x->src[1]->ne[0] > y->src[1]->ne[0] ? x->src[1]->ne[0] : y->src[1]->ne[0];
    const unsigned th = row_threads(ne0);
    const int64_t chunks = (ne0 + th - 1) / th; /* <= 65535: supports_op bounds each row */
    /* each node aliases its src[0] (the cache): write through src[0]'s layout */
    k_set_rows_pair<<<dim3(r0 > r1 ? r0 : r1, (unsigned)chunks, 2), th, 0, c->stream>>>(
        make_view(x->src[0]), make_view(x->src[1]), make_view(x->src[2]), r0, make_view(y->src[0]),
        make_view(y->src[1]), make_view(y->src[2]), r1);
    return check_launch(c, "set_rows (pair)");
}

int swiglu_can_prequant(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    return n->op == PYG_OP_SWIGLU && b && n->type == PYG_TYPE_F32 && a->type == PYG_TYPE_F32 &&
           b->type == PYG_TYPE_F32 && pyg_tensor_is_contiguous(n) && pyg_tensor_is_contiguous(a) &&
           pyg_tensor_is_contiguous(b) && pyg_tensor_nrows(n) == 1 && same_ne(n, a) && same_ne(n, b) &&
           n->ne[0] % 32 == 0;
}

int basic_launch(const pyg_tensor *n, op_ctx *c) {
    const tview d = make_view(n);
    const tview a = make_view(n->src[0]);
    const tview b = n->src[1] ? make_view(n->src[1]) : a;
    const int32_t *p = n->op_params;
    const unsigned th = row_threads(n->ne[0]);
    const unsigned rows = (unsigned)pyg_tensor_nrows(n);
    const dim3 ew(rows, row_splits(rows, n->ne[0], th));   /* elementwise kernels only */
    switch (n->op) {
    case PYG_OP_ADD: k_elementwise<EW_ADD><<<ew, th, 0, c->stream>>>(d, a, b, 0, 0, 0); break;
    case PYG_OP_MUL: k_elementwise<EW_MUL><<<ew, th, 0, c->stream>>>(d, a, b, 0, 0, 0); break;
    case PYG_OP_SCALE:
        k_elementwise<EW_SCALE><<<ew, th, 0, c->stream>>>(d, a, b, pyg_op_param_f32(p, 0), pyg_op_param_f32(p, 1), 0);
        break;
    case PYG_OP_SILU: k_elementwise<EW_SILU><<<ew, th, 0, c->stream>>>(d, a, b, 0, 0, 0); break;
    case PYG_OP_GELU: k_elementwise<EW_GELU><<<ew, th, 0, c->stream>>>(d, a, b, 0, 0, 0); break;
    case PYG_OP_SWIGLU:
        if (c->quant_out) { /* checked at plan time: mul_mat_can_prequant and swiglu_can_prequant */
            const int64_t ne = n->ne[0];
            int8_t *yq;
            float *yds;
            mul_mat_quant_layout((char *)c->scratch + c->quant_off, ne, &yq, &yds);
            k_swiglu_q<<<ceil_div_u(ne, ROW_THREADS), ROW_THREADS, 0, c->stream>>>(
                (float *)n->data, (const float *)n->src[0]->data, (const float *)n->src[1]->data, ne, yq, yds);
        } else if (n->src[1]) k_elementwise<EW_SWIGLU><<<ew, th, 0, c->stream>>>(d, a, b, 0, 0, 0);
        else k_elementwise<EW_SWIGLU_HALVES><<<ew, th, 0, c->stream>>>(d, a, a, 0, 0, p[0] == 1);
        break;
    case PYG_OP_CPY: {
        /* the node aliases src[1]: write through src[1]'s layout */
        const unsigned r1 = (unsigned)pyg_tensor_nrows(n->src[1]);
        const unsigned t1 = row_threads(n->src[1]->ne[0]);
        if (same_ne(n->src[0], n->src[1])) k_copy_same<<<r1, t1, 0, c->stream>>>(b, a);
        else k_copy_flat<<<r1, t1, 0, c->stream>>>(b, a);
        break;
    }
    case PYG_OP_CONT:
        if (same_ne(n->src[0], n)) k_copy_same<<<rows, th, 0, c->stream>>>(d, a);
        else k_copy_flat<<<rows, th, 0, c->stream>>>(d, a);
        break;
    case PYG_OP_GET_ROWS: k_get_rows<<<rows, th, 0, c->stream>>>(d, a, b); break;
    case PYG_OP_SET_ROWS: {
        const tview idx = make_view(n->src[2]);
        const unsigned r1 = (unsigned)pyg_tensor_nrows(n->src[1]);
        /* the node aliases src[0]: write through src[0]'s layout */
        const unsigned t1 = row_threads(n->src[1]->ne[0]);
        const int64_t chunks = (n->src[1]->ne[0] + t1 - 1) / t1;
        if (chunks > 65535) {
            snprintf(c->err, c->errlen, "set_rows: rows of %lld elements are too long", (long long)n->src[1]->ne[0]);
            return PYG_ERR_UNSUPPORTED;
        }
        k_set_rows<<<dim3(r1, (unsigned)chunks), t1, 0, c->stream>>>(a, b, idx);
        break;
    }
    case PYG_OP_ARGMAX: {
        const unsigned r0 = (unsigned)pyg_tensor_nrows(n->src[0]);
        k_argmax<<<r0, ROW_THREADS, 0, c->stream>>>((int32_t *)n->data, a);
        break;
    }
    default:
        snprintf(c->err, c->errlen, "op %s not handled here", pyg_op_name(n->op));
        return PYG_ERR_INTERNAL;
    }
    return check_launch(c, pyg_op_name(n->op));
}
