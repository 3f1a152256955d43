/* plugins/cuda/ops_rows.cu — row-wise ops: rms_norm, norm, soft_max (scale, mask, ALiBi) and rope
 * (normal and neox, freq factors, YaRN). One block per row, any strides, f32/f16/bf16 storage,
 * f32 arithmetic. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common.cuh"
#include "set_rows.cuh"
#include "rope.cuh"

__device__ __forceinline__ void row_idx(const tview &v, int64_t r, int64_t *i1, int64_t *i2, int64_t *i3) {
    *i1 = r % v.ne[1];
    const int64_t t = r / v.ne[1];
    *i2 = t % v.ne[2];
    *i3 = t / v.ne[2];
}

template <bool RMS>
__global__ void k_norm(tview d, tview s, float eps) {
    __shared__ float sh[32];
    int64_t i1, i2, i3;
    row_idx(s, blockIdx.x, &i1, &i2, &i3);
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const int64_t n = s.ne[0];
    float mean = 0.0f;
    if (!RMS) {
        float acc = 0.0f;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += load_f(srow + i * s.nb[0], s.type);
        mean = block_sum(acc, sh) / (float)n;
    }
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = load_f(srow + i * s.nb[0], s.type) - mean;
        acc += x * x;
    }
    const float inv = rsqrtf(block_sum(acc, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        store_plain(drow + i * d.nb[0], d.type, (load_f(srow + i * s.nb[0], s.type) - mean) * inv);
}

/* rms_norm followed by a mul with a weight row (the model's norm * weight): one kernel writes both
 * the normalised row and its product with the weight, saving a launch per norm. */
__global__ void k_rms_mul(tview d, tview s, float eps, tview md, const float *w) {
    __shared__ float sh[32];
    int64_t i1, i2, i3;
    row_idx(s, blockIdx.x, &i1, &i2, &i3);
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    char *mrow = md.data + i1 * md.nb[1] + i2 * md.nb[2] + i3 * md.nb[3];
    const int64_t n = s.ne[0];
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float x = load_f(srow + i * s.nb[0], s.type);
        acc += x * x;
    }
    const float inv = rsqrtf(block_sum(acc, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        store_plain(drow + i * d.nb[0], d.type, load_f(srow + i * s.nb[0], s.type) * inv);
    __syncthreads(); /* the row's source is read for the last time above: the product may lie on it */
    /* the mul reads the stored norm (so it rounds as the unfused pair does when the norm is not f32) */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        store_plain(mrow + i * md.nb[0], md.type, load_f(drow + i * d.nb[0], d.type) * w[i]);
}

/* add -> rms_norm -> mul(norm, weight row) (the residual add and the next norm): one block per
 * row; all tensors are contiguous f32 rows of one shape and pairwise disjoint or identical
 * (checked at plan time), so shared bytes map element to element, and the barrier inside block_sum
 * orders every read of the sources before any write of the norm.
 * E > 0: each thread holds its E elements (i = t + k * blockDim.x) in registers, all loaded before
 * the first store: with a loop that stores `sum` between loads, the compiler may not move a later
 * load above a store that could alias it, so a 4096-wide row took four round trips in each of
 * two passes (4.9 us per call on the H200). E = 0: the looping form, for rows over 8192. */
template <int E, bool Q = false>
__global__ void k_add_rms_mul(float *sum, const float *a, const float *b, float *nrm, float *prod, const float *w,
                              int64_t n, float eps, int8_t *yq = NULL, float *yds = NULL) {
    __shared__ float sh[32];
    const int64_t off = (int64_t)blockIdx.x * n;
    pdl_wait(); /* launched with PDL at decode (launch_add_rms_mul) */
    if (E > 0) {
        float v[E > 0 ? E : 1], wv[E > 0 ? E : 1];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            v[k] = i < n ? a[off + i] + b[off + i] : 0.0f;
            wv[k] = i < n ? w[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            if (i < n) sum[off + i] = v[k];
            acc += v[k] * v[k];
        }
        const float inv = rsqrtf(block_sum(acc, sh) / (float)n + eps);
#pragma unroll
        for (int k = 0; k < E; k++) {
            const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
            const float x = v[k] * inv, y = x * wv[k];
            if (i < n) {
                nrm[off + i] = x;
                prod[off + i] = y;
            }
            /* Q (one row, n % 32 == 0): a warp holds 32 consecutive products = one q8 block of
             * the mat-vec that reads them next; whole warps are in or out of the row */
            if (Q && threadIdx.x - threadIdx.x % PYG_WARP_SIZE + (int64_t)k * blockDim.x < n)
                warp_quant_block(y, yq, yds, i / 32);
        }
        return;
    }
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = a[off + i] + b[off + i];
        sum[off + i] = v;
        acc += v * v;
    }
    const float inv = rsqrtf(block_sum(acc, sh) / (float)n + eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = sum[off + i] * inv;
        nrm[off + i] = v;
        prod[off + i] = v * w[i];
    }
}

__global__ void k_soft_max(tview d, tview s, tview m, int has_mask, float scale, float max_bias) {
    __shared__ float sh[32];
    int64_t i1, i2, i3;
    row_idx(s, blockIdx.x, &i1, &i2, &i3);
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const char *mrow = has_mask ? m.data + i1 * m.nb[1] + (i2 % m.ne[2]) * m.nb[2] + (i3 % m.ne[3]) * m.nb[3] : NULL;
    const float slope = has_mask ? alibi_slope(max_bias, (int)i2, (int)s.ne[2]) : 0.0f;
    const int64_t n = s.ne[0];
#define SM_VAL(i) (load_f(srow + (i) * s.nb[0], s.type) * scale + (mrow ? slope * load_f(mrow + (i) * m.nb[0], m.type) : 0.0f))
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, SM_VAL(i));
    mx = block_max(mx, sh);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += expf(SM_VAL(i) - mx);
    sum = block_sum(sum, sh);
    const float inv = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) store_plain(drow + i * d.nb[0], d.type, expf(SM_VAL(i) - mx) * inv);
#undef SM_VAL
}

/* One block per (head, token, batch) row; one thread per pair of elements. ST: also store the
 * row into a KV cache, as set_rows(cache, view(d as (tokens, heads * D)), idx) would: cache row
 * idx[token], columns head * D + i0 (rows_can_rope_store checks that layout). */
template <bool ST>
__device__ __forceinline__ void rope_row_t(const tview &d, const tview &s, int64_t row, const int32_t *pos,
                                           const float *ff, const rope_params &p, const tview &kc, const tview &kidx) {
    int64_t i1, i2, i3;
    row_idx(s, row, &i1, &i2, &i3);
    const char *srow = s.data + i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
    char *drow = d.data + i1 * d.nb[1] + i2 * d.nb[2] + i3 * d.nb[3];
    const float position = (float)pos[i2];
    char *crow = NULL;
    if (ST) {
        const int64_t r = load_index(kidx.data + i2 * kidx.nb[0], kidx.type);
        if (r >= 0 && r < kc.ne[1]) crow = kc.data + r * kc.nb[1] + i1 * s.ne[0] * kc.nb[0];
    }
    for (int64_t ip = threadIdx.x; ip < s.ne[0] / 2; ip += blockDim.x) {
        const int64_t i0 = 2 * ip;
        if (i0 >= p.n_dims) {
            const float y0 = load_f(srow + i0 * s.nb[0], s.type), y1 = load_f(srow + (i0 + 1) * s.nb[0], s.type);
            store_plain(drow + i0 * d.nb[0], d.type, y0);
            store_plain(drow + (i0 + 1) * d.nb[0], d.type, y1);
            if (ST && crow) {
                store_plain(crow + i0 * kc.nb[0], kc.type, y0);
                store_plain(crow + (i0 + 1) * kc.nb[0], kc.type, y1);
            }
            continue;
        }
        float c, sn;
        rope_cs(p, position, ip, ff, &c, &sn);
        const int64_t ia = p.neox ? ip : i0, ib = p.neox ? ip + p.n_dims / 2 : i0 + 1;
        const float x0 = load_f(srow + ia * s.nb[0], s.type), x1 = load_f(srow + ib * s.nb[0], s.type);
        const float y0 = x0 * c - x1 * sn, y1 = x0 * sn + x1 * c;
        store_plain(drow + ia * d.nb[0], d.type, y0);
        store_plain(drow + ib * d.nb[0], d.type, y1);
        if (ST && crow) {
            store_plain(crow + ia * kc.nb[0], kc.type, y0);
            store_plain(crow + ib * kc.nb[0], kc.type, y1);
        }
    }
}

__device__ __forceinline__ void rope_row(const tview &d, const tview &s, int64_t row, const int32_t *pos,
                                         const float *ff, const rope_params &p) {
    rope_row_t<false>(d, s, row, pos, ff, p, d, d);
}

__global__ void k_rope(tview d, tview s, const int32_t *pos, const float *ff, rope_params p) {
    rope_row(d, s, blockIdx.x, pos, ff, p);
}

/* Two ropes with the same parameters and positions (a layer's q and k) in one launch: blocks
 * below rows0 take the first, the rest the second. */
__global__ void k_rope_pair(tview d0, tview s0, tview d1, tview s1, unsigned rows0, const int32_t *pos,
                            const float *ff, rope_params p) {
    if (blockIdx.x < rows0) rope_row(d0, s0, blockIdx.x, pos, ff, p);
    else rope_row(d1, s1, blockIdx.x - rows0, pos, ff, p);
}

/* A rope whose output a set_rows stores into a cache unchanged (the K write), and a second
 * set_rows (the V write), in one launch: blocks [0, rrows) rope one row each and store it, the
 * rest take the other set_rows one element per thread over (row, chunk of blockDim.x). */
__global__ void k_rope_store_pair(tview d, tview s, const int32_t *pos, const float *ff, rope_params p, tview kc,
                                  tview kidx, unsigned rrows, tview vd, tview vs, tview vidx, unsigned vchunks) {
    if (blockIdx.x < rrows) {
        rope_row_t<true>(d, s, blockIdx.x, pos, ff, p, kc, kidx);
        return;
    }
    const unsigned b = blockIdx.x - rrows;
    set_rows_elem(vd, vs, vidx, b / vchunks, (int64_t)(b % vchunks) * blockDim.x + threadIdx.x);
}

/* ---------------------------------------------------------------- host side */

static int same_shape(const pyg_tensor *a, const pyg_tensor *b) {
    for (int i = 0; i < 4; i++)
        if (a->ne[i] != b->ne[i]) return 0;
    return 1;
}

int rows_supports(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0];
    if (!a || !is_plain_float(a->type) || !is_plain_float(n->type) || !same_shape(a, n)) return 0;
    switch (n->op) {
    case PYG_OP_RMS_NORM: case PYG_OP_NORM:
        return 1;
    case PYG_OP_SOFT_MAX: {
        const pyg_tensor *m = n->src[1];
        if (!m) return 1;
        return (m->type == PYG_TYPE_F32 || m->type == PYG_TYPE_F16) && m->ne[0] == a->ne[0] && m->ne[1] >= a->ne[1] &&
               a->ne[2] % m->ne[2] == 0 && a->ne[3] % m->ne[3] == 0;
    }
    case PYG_OP_ROPE: {
        const pyg_tensor *pos = n->src[1], *ff = n->src[2];
        const int n_dims = n->op_params[0], mode = n->op_params[1];
        if (!pos || pos->type != PYG_TYPE_I32 || pos->ne[0] != a->ne[2] || !pyg_tensor_is_contiguous(pos)) return 0;
        if (a->type == PYG_TYPE_BF16) return 0;
        if (mode != PYG_ROPE_NORMAL && mode != PYG_ROPE_NEOX) return 0;
        if (n_dims <= 0 || (n_dims & 1) || n_dims > a->ne[0] || (a->ne[0] & 1)) return 0;
        if (ff && (ff->type != PYG_TYPE_F32 || ff->ne[0] < n_dims / 2 || !pyg_tensor_is_contiguous(ff))) return 0;
        return 1;
    }
    default:
        return 0;
    }
}

static unsigned threads_for(int64_t n, unsigned max) {
    int64_t t = (n + 31) / 32 * 32;
    return (unsigned)(t < (int64_t)max ? t : max);
}

/* Few rows (decode): up to 1024 threads per row, so each thread's loads are one or two round
 * trips, not eight (rms_norm over 2048 floats: 3.7 us per call with 256 threads on the H200). */
static unsigned row_threads(int64_t n, int64_t rows, int n_sm) {
    return threads_for(n, rows < (int64_t)n_sm ? 1024u : 256u);
}

/* A fused kernel writes a later node's output while it still reads an earlier node's input. The
 * planner frees an input after its last node, so a later output may lie on its bytes at any
 * offset: fusing is safe only where the two are disjoint or start at the same byte with the same
 * layout (then each element is read before its own thread overwrites it). */
static int fusable_alias(const pyg_tensor *out, const pyg_tensor *in) {
    const char *o = (const char *)out->data, *i = (const char *)in->data;
    if (o + pyg_tensor_nbytes(out) <= i || i + pyg_tensor_nbytes(in) <= o) return 1;
    if (o != i || out->type != in->type) return 0;
    for (int d = 0; d < 4; d++)
        if (out->nb[d] != in->nb[d] || out->ne[d] != in->ne[d]) return 0;
    return 1;
}

int rows_can_fuse_mul(const pyg_tensor *norm, const pyg_tensor *mul) {
    if (!cuda_fuse_enabled() || norm->op != PYG_OP_RMS_NORM || mul->op != PYG_OP_MUL || mul->src[0] != norm) return 0;
    const pyg_tensor *w = mul->src[1];
    if (!w || w->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(w) || w->ne[0] != norm->ne[0] || w->ne[1] != 1 ||
        w->ne[2] != 1 || w->ne[3] != 1)
        return 0;
    if (!is_plain_float(mul->type) || !same_shape(mul, norm) || w->data == norm->data) return 0;
    /* mul's output against the norm's output, and against the norm's input: with one row (one
     * block) a barrier separates the last read of the input from the first write of the product;
     * with more rows another block may still be reading */
    if (!fusable_alias(mul, norm) || (pyg_tensor_nrows(norm) > 1 && !fusable_alias(mul, norm->src[0]))) return 0;
    return rows_supports(norm);
}

static int f32_rows_like(const pyg_tensor *t, const pyg_tensor *ref) {
    return t->type == PYG_TYPE_F32 && pyg_tensor_is_contiguous(t) && same_shape(t, ref);
}

int rows_can_fuse_add(const pyg_tensor *add, const pyg_tensor *norm, const pyg_tensor *mul) {
    if (!cuda_fuse_enabled() || add->op != PYG_OP_ADD || norm->src[0] != add || !rows_can_fuse_mul(norm, mul)) return 0;
    const pyg_tensor *a = add->src[0], *b = add->src[1];
    if (!b || !f32_rows_like(add, add) || !f32_rows_like(a, add) || !f32_rows_like(b, add) || !f32_rows_like(norm, add) ||
        !f32_rows_like(mul, add))
        return 0;
    /* the sum, the norm and the product against everything the kernel reads before writing them;
     * with one row (one block) the barrier in block_sum already puts every read of a and b before
     * any write of the norm or the product */
    if (!fusable_alias(add, a) || !fusable_alias(add, b) || !fusable_alias(norm, add) || !fusable_alias(mul, add) ||
        !fusable_alias(mul, norm))
        return 0;
    return pyg_tensor_nrows(add) == 1 || (fusable_alias(norm, a) && fusable_alias(norm, b) && fusable_alias(mul, a) &&
                                          fusable_alias(mul, b));
}

int rows_can_prequant_add(const pyg_tensor *mul) {
    return pyg_tensor_nrows(mul) == 1 && mul->ne[0] % 32 == 0 && mul->ne[0] <= 8192;
}

/* k_add_rms_mul with E = the elements per thread rounded up to 1, 2, 4 or 8 (the looping form
 * past 8, which never pre-quantizes: the caller checks per <= 8 when Q) */
template <bool Q>
static void launch_add_rms_mul(int64_t per, unsigned rows, unsigned th, const op_ctx *c, float *sum, const float *a,
                               const float *b, float *nrm, float *prod, const float *w, int64_t n, float eps,
                               int8_t *yq, float *yds) {
    /* one row (a decode step): programmatic dependent launch, as the mat-vecs around it */
    const int pdl = rows == 1 && cuda_opts()->pdl && c->cc >= 90;
    void (*k)(float *, const float *, const float *, float *, float *, const float *, int64_t, float, int8_t *,
              float *) = per <= 1 ? k_add_rms_mul<1, Q>
                       : per <= 2 ? k_add_rms_mul<2, Q>
                       : per <= 4 ? k_add_rms_mul<4, Q>
                       : per <= 8 ? k_add_rms_mul<8, Q>
                                  : k_add_rms_mul<0, false>;
    if (per > 8) yq = NULL, yds = NULL;
    launch_maybe_pdl(pdl, k, dim3(rows), dim3(th), c->stream, sum, a, b, nrm, prod, w, n, eps, yq, yds);
}

int rows_launch_fused_add(const pyg_tensor *add, const pyg_tensor *norm, const pyg_tensor *mul, op_ctx *c) {
    const int64_t n = add->ne[0];
    const unsigned rows = (unsigned)pyg_tensor_nrows(add);
    const unsigned th = row_threads(n, rows, c->n_sm);
    const int64_t per = (n + th - 1) / th; /* elements per thread */
    float *sum = (float *)add->data, *nrm = (float *)norm->data, *prod = (float *)mul->data;
    const float *a = (const float *)add->src[0]->data, *b = (const float *)add->src[1]->data;
    const float *w = (const float *)mul->src[1]->data;
    const float eps = pyg_op_param_f32(norm->op_params, 0);
    if (c->quant_out) { /* one row, n % 32 == 0 (mul_mat_can_prequant) */
        int8_t *yq;
        float *yds;
        mul_mat_quant_layout((char *)c->scratch + c->quant_off, n, &yq, &yds);
        if (rows != 1 || n % 32 || per > 8 || !c->scratch) {
            snprintf(c->err, c->errlen, "add + rms_norm * weight: cannot pre-quantize %u rows of %lld", rows, (long long)n);
            return PYG_ERR_INTERNAL;
        }
        launch_add_rms_mul<true>(per, rows, th, c, sum, a, b, nrm, prod, w, n, eps, yq, yds);
        return check_launch(c, "add + rms_norm * weight (+ int8 activations)");
    }
    launch_add_rms_mul<false>(per, rows, th, c, sum, a, b, nrm, prod, w, n, eps, NULL, NULL);
    return check_launch(c, "add + rms_norm * weight");
}

int rows_launch_fused_mul(const pyg_tensor *norm, const pyg_tensor *mul, op_ctx *c) {
    const tview d = make_view(norm), s = make_view(norm->src[0]), md = make_view(mul);
    const unsigned rows = (unsigned)pyg_tensor_nrows(norm->src[0]);
    k_rms_mul<<<rows, row_threads(s.ne[0], rows, c->n_sm), 0, c->stream>>>(d, s, pyg_op_param_f32(norm->op_params, 0),
                                                                            md, (const float *)mul->src[1]->data);
    return check_launch(c, "rms_norm * weight");
}

int rows_can_pair_rope(const pyg_tensor *x, const pyg_tensor *y) {
    if (!cuda_fuse_enabled() || x->op != PYG_OP_ROPE || y->op != PYG_OP_ROPE) return 0;
    if (memcmp(x->op_params, y->op_params, sizeof x->op_params) != 0) return 0;
    if (x->src[1]->data != y->src[1]->data || !x->src[2] != !y->src[2]) return 0;
    if (x->src[2] && x->src[2]->data != y->src[2]->data) return 0;
    return pyg_tensor_nrows(x->src[0]) + pyg_tensor_nrows(y->src[0]) <= 0x7fffffffLL;
}

/* rope x (f32 out, contiguous [D, heads, tokens]) and y = set_rows(cache, view of x's output as
 * [heads * D, tokens], idx over the tokens) into a 2-D cache of heads * D columns */
int rows_can_rope_store(const pyg_tensor *x, const pyg_tensor *y) {
    if (!cuda_fuse_enabled() || x->op != PYG_OP_ROPE || y->op != PYG_OP_SET_ROWS) return 0;
    const pyg_tensor *src = y->src[1], *kc = y->src[0], *idx = y->src[2];
    if (x->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(x) || x->ne[3] != 1) return 0;
    if (src->data != x->data || src->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(src)) return 0;
    if (src->ne[0] != x->ne[0] * x->ne[1] || src->ne[1] != x->ne[2] || src->ne[2] != 1 || src->ne[3] != 1) return 0;
    if (kc->ne[0] != src->ne[0] || kc->ne[2] != 1 || kc->ne[3] != 1 || y->data != kc->data) return 0;
    if (idx->ne[0] != src->ne[1] || idx->ne[1] != 1 || idx->ne[2] != 1) return 0;
    return pyg_tensor_nrows(x->src[0]) <= 0x7fffffffLL;
}

int rows_launch_rope_store_pair(const pyg_tensor *x, const pyg_tensor *y, const pyg_tensor *z, op_ctx *c) {
    const rope_params rp = rope_params_of(x);
    const unsigned rr = (unsigned)pyg_tensor_nrows(x->src[0]);
    const unsigned th = 128; /* >= a rope row's pairs up to D = 256; set_rows chunks of 128 */
    const int64_t vrows = pyg_tensor_nrows(z->src[1]), vchunks = (z->src[1]->ne[0] + th - 1) / th;
    if ((int64_t)rr + vrows * vchunks > 0x7fffffffLL) {
        snprintf(c->err, c->errlen, "rope + cache writes: grid too large");
        return PYG_ERR_INTERNAL;
    }
    /* the set_rows nodes alias their caches (src[0]): write through those */
    k_rope_store_pair<<<(unsigned)(rr + vrows * vchunks), th, 0, c->stream>>>(
        make_view(x), make_view(x->src[0]), (const int32_t *)x->src[1]->data,
        x->src[2] ? (const float *)x->src[2]->data : NULL, rp, make_view(y->src[0]), make_view(y->src[2]), rr,
        make_view(z->src[0]), make_view(z->src[1]), make_view(z->src[2]), (unsigned)vchunks);
    return check_launch(c, "rope + K/V cache writes");
}

int rows_launch_rope_pair(const pyg_tensor *x, const pyg_tensor *y, op_ctx *c) {
    const rope_params rp = rope_params_of(x);
    const unsigned r0 = (unsigned)pyg_tensor_nrows(x->src[0]), r1 = (unsigned)pyg_tensor_nrows(y->src[0]);
    const int64_t ne0 = x->src[0]->ne[0] > y->src[0]->ne[0] ? x->src[0]->ne[0] : y->src[0]->ne[0];
    k_rope_pair<<<r0 + r1, threads_for(ne0 / 2, 256), 0, c->stream>>>(
        make_view(x), make_view(x->src[0]), make_view(y), make_view(y->src[0]), r0, (const int32_t *)x->src[1]->data,
        x->src[2] ? (const float *)x->src[2]->data : NULL, rp);
    return check_launch(c, "rope (pair)");
}

int rows_launch(const pyg_tensor *n, op_ctx *c) {
    const tview d = make_view(n), s = make_view(n->src[0]);
    const unsigned rows = (unsigned)pyg_tensor_nrows(n->src[0]);
    const int32_t *p = n->op_params;
    switch (n->op) {
    case PYG_OP_RMS_NORM:
        k_norm<true><<<rows, row_threads(s.ne[0], rows, c->n_sm), 0, c->stream>>>(d, s, pyg_op_param_f32(p, 0));
        break;
    case PYG_OP_NORM:
        k_norm<false><<<rows, row_threads(s.ne[0], rows, c->n_sm), 0, c->stream>>>(d, s, pyg_op_param_f32(p, 0));
        break;
    case PYG_OP_SOFT_MAX: {
        const tview m = n->src[1] ? make_view(n->src[1]) : s;
        k_soft_max<<<rows, row_threads(s.ne[0], rows, c->n_sm), 0, c->stream>>>(d, s, m, n->src[1] != NULL,
                                                                      pyg_op_param_f32(p, 0), pyg_op_param_f32(p, 1));
        break;
    }
    case PYG_OP_ROPE: {
        const rope_params rp = rope_params_of(n);
        k_rope<<<rows, threads_for(s.ne[0] / 2, 256), 0, c->stream>>>(
            d, s, (const int32_t *)n->src[1]->data, n->src[2] ? (const float *)n->src[2]->data : NULL, rp);
        break;
    }
    default:
        snprintf(c->err, c->errlen, "op %s not handled here", pyg_op_name(n->op));
        return PYG_ERR_INTERNAL;
    }
    return check_launch(c, pyg_op_name(n->op));
}
