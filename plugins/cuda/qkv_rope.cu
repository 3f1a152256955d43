/* plugins/cuda/qkv_rope.cu — a decode layer's q/k/v mat-vecs, its two ropes and its two KV cache
 * writes as one launch (mmv_rp.cuh's mvr_qkv_body): the plan pattern, and the launch.
 *
 * The seven nodes, in plan order (graph.cu groups them when qkv_rope_can says yes):
 *   mq, mk, mv   three mat-vecs of one activation column over repacked weights of one K and one type,
 *                or q4_K and q6_K mixed (llama.cpp's Q4_K_M gives a third of the layers a q6_K v)
 *   rq, rk       rope(reshape(mq)), rope(reshape(mk)) in either order: the same parameters and
 *                positions, normal pairs (2i, 2i + 1), one token
 *   sk, sv       set_rows(K cache, view of rk, idx), set_rows(V cache, mv, idx') in either order
 * The launch writes what the nodes after the group can read: rq (rotated q) and the two cache rows.
 * It writes neither mq, mk, mv nor rk, so the pattern also asks that nothing after the group reads
 * their bytes before they are overwritten and that no graph output (a view of one included) lies on
 * them; otherwise the nodes run as before (a grouped mat-vec, then the rope and cache-write launches). On the H200 those two launches were about 5 us of a 1b
 * q4_0 decode layer's 48 (bench/results/vulkan-vs-cuda-profile-20261201T040434.json: k_rope 2.3 us,
 * k_rope_store_pair 2.6 us per launch). */
#include <stdio.h>
#include <string.h>
#include <type_traits>
#include "mmv_rp.cuh"
#include "mul_mat_rp.h"
#include "repack.h"

static int within(const pyg_tensor *x, const pyg_tensor *y) { /* x's bytes inside y's */
    const char *a = (const char *)x->data, *b = (const char *)y->data;
    return a >= b && a + pyg_tensor_nbytes(x) <= b + pyg_tensor_nbytes(y);
}

/* No graph output (any node of g flagged OUTPUT: the scheduler flags what the host or another split
 * reads after the graph, a view's owner for a view) holds x's bytes at the end, and no plan node from `from` on reads
 * them before they are overwritten (the planner reuses a dead tensor's bytes for later ones: a read
 * of those is no read of x). An output on x's bytes is harmless when it lies inside bytes the launch
 * writes (`w`, nw nodes: the rotated q and the caches) or is a later plan node that owns its bytes
 * (no view_src: it writes all of them itself, after x is dead). A node reads its operands before it
 * writes its output; a write that covers a prefix or a suffix of what is left of x takes that part
 * off, one in the middle is ignored (it only keeps x alive longer). */
static int dead_after(const pyg_tensor *x, const pyg_tensor *const *nodes, int n, int from, const pyg_graph *g,
                      const pyg_tensor *const *w, int nw) {
    for (int j = 0; g && j < g->n_nodes; j++) {
        const pyg_tensor *o = g->nodes[j];
        if (!o || !(o->flags & PYG_TENSOR_FLAG_OUTPUT) || !o->data || tensors_disjoint(x, o)) continue;
        int written = 0;
        for (int k = 0; k < nw && !written; k++) written = within(o, w[k]);
        for (int k = from; k < n && !written; k++) written = nodes[k] == o && !o->view_src;
        if (!written) return 0;
    }
    const char *lo = (const char *)x->data, *hi = lo + pyg_tensor_nbytes(x);
    for (int j = from; j < n && lo < hi; j++) {
        for (int s = 0; s < PYG_MAX_SRC; s++) {
            const pyg_tensor *r = nodes[j]->src[s];
            if (!r || !r->data) continue;
            const char *a = (const char *)r->data, *b = a + pyg_tensor_nbytes(r);
            if (a < hi && lo < b) return 0;
        }
        const char *a = (const char *)nodes[j]->data, *b = a + pyg_tensor_nbytes(nodes[j]);
        if (a <= lo && b > lo) lo = b < hi ? b : hi;
        if (a < hi && b >= hi) hi = a > lo ? a : lo;
    }
    return 1;
}

/* r = rope(reshape(m)) of one token, f32 in and out, contiguous, normal pairs */
static int rope_of(const pyg_tensor *r, const pyg_tensor *m) {
    const pyg_tensor *s = r->src[0];
    if (r->op != PYG_OP_ROPE || s->data != m->data || r->op_params[1] != PYG_ROPE_NORMAL) return 0;
    if (s->type != PYG_TYPE_F32 || r->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(s) || !pyg_tensor_is_contiguous(r))
        return 0;
    const int64_t D = s->ne[0], n_dims = r->op_params[0];
    if (s->ne[0] * s->ne[1] != m->ne[0] || s->ne[2] != 1 || s->ne[3] != 1 || D % 2 || n_dims % 2 || n_dims < 2 ||
        n_dims > D)
        return 0;
    for (int i = 0; i < 4; i++)
        if (r->ne[i] != s->ne[i]) return 0;
    const pyg_tensor *pos = r->src[1];
    return pos && pos->type == PYG_TYPE_I32 && pos->ne[0] >= 1;
}

/* y = set_rows(cache, m as one row, idx) into a 2-D cache of plain floats, m's row length wide */
static int store_of(const pyg_tensor *y, const pyg_tensor *m) {
    if (y->op != PYG_OP_SET_ROWS) return 0;
    const pyg_tensor *c = y->src[0], *s = y->src[1], *idx = y->src[2];
    if (s->data != m->data || s->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(s)) return 0;
    if (s->ne[0] != m->ne[0] || s->ne[1] != 1 || s->ne[2] != 1 || s->ne[3] != 1) return 0;
    if (!is_plain_float(c->type) || c->ne[0] != s->ne[0] || c->ne[2] != 1 || c->ne[3] != 1 || y->data != c->data)
        return 0;
    return idx && (idx->type == PYG_TYPE_I32 || idx->type == PYG_TYPE_I64) && idx->ne[0] == 1;
}

/* The roles of the group at nodes[i]: which of the three mat-vecs is q, k, v; which rope is q's;
 * which set_rows writes K. 0 when the seven nodes are not the pattern. */
struct qkv_roles { int q, k, v, rq, rk, sk, sv; };

static int qkv_roles_of(const pyg_tensor *const *nd, qkv_roles *o) {
    for (int a = 0; a < 2; a++) {          /* rq = nd[3 + a], rk = nd[4 - a] */
        const pyg_tensor *rq = nd[3 + a], *rk = nd[4 - a];
        for (int b = 0; b < 2; b++) {      /* sk = nd[5 + b], sv = nd[6 - b] */
            const pyg_tensor *sk = nd[5 + b], *sv = nd[6 - b];
            if (!rows_can_rope_store(rk, sk)) continue;
            for (int q = 0; q < 3; q++)
                for (int k = 0; k < 3; k++) {
                    const int v = 3 - q - k;
                    if (q == k || v < 0 || v > 2 || v == q || v == k) continue;
                    if (rope_of(rq, nd[q]) && rope_of(rk, nd[k]) && store_of(sv, nd[v])) {
                        *o = { q, k, v, 3 + a, 4 - a, 5 + b, 6 - b };
                        return 1;
                    }
                }
        }
    }
    return 0;
}

int qkv_rope_can(const pyg_tensor *const *nodes, int n, int i, cuda_repack *const *rp, const pyg_graph *g) {
    if (!cuda_fuse_enabled() || !cuda_opts()->qkv_rope || !cuda_opts()->repack || !rp || i + 7 > n) return 0;
    const pyg_tensor *const *nd = nodes + i;
    for (int k = 0; k < 3; k++)
        if (!rp[i + k]) return 0;
    if (!mul_mat_can_group_types(nd[0], nd[1], 1, 1) || !mul_mat_can_group_types(nd[0], nd[2], 1, 1)) return 0;
    if (!mvr_k_ok(nd[0]->src[0]->ne[0])) return 0;
    if (!rows_can_pair_rope(nd[3], nd[4])) return 0; /* same parameters, positions and frequency factors */
    qkv_roles r;
    if (!qkv_roles_of(nd, &r) || !is_plain_float(nd[r.sk]->src[0]->type)) return 0;
    const pyg_tensor *const wr[3] = {nd[r.rq], nd[r.sk], nd[r.sv]}; /* what the launch writes */
    return dead_after(nd[r.q], nodes, n, i + 7, g, wr, 3) && dead_after(nd[r.k], nodes, n, i + 7, g, wr, 3) &&
           dead_after(nd[r.v], nodes, n, i + 7, g, wr, 3) && dead_after(nd[r.rk], nodes, n, i + 7, g, wr, 3);
}

/* T2 != T: each block's matrix is of type T or T2 (mvr_qkv_body) */
template <int T, int T2, int J, int NB>
__global__ void __launch_bounds__(MVR_MAX_KW * PYG_WARP_SIZE) k_mvr_qkv(mvr_args a, mvr_qkv e) {
    __shared__ float sh[MVR_MAX_KW * 8 * NB];
    DevThr t;
    mvr_qkv_body<T, T2, J, NB>(t, a, e, sh);
}

template <int T, int T2, int J, int NB>
static gpuError_t launch_qkv_tjn(const mvr_args &a, const mvr_qkv &e, unsigned blocks, unsigned threads, int pdl,
                                 gpuStream_t s) {
#ifdef PYG_GPU_HAS_PDL
    if (pdl) return gpu_launch_pdl(k_mvr_qkv<T, T2, J, NB>, dim3(blocks), dim3(threads), 0, s, a, e);
#endif
    (void)pdl;
    k_mvr_qkv<T, T2, J, NB><<<blocks, threads, 0, s>>>(a, e);
    return gpuGetLastError();
}

template <int T, int T2>
static gpuError_t launch_qkv_t(const mvr_args &a, const mvr_qkv &e, int J, int NB, unsigned blocks, unsigned threads,
                               int pdl, gpuStream_t s) {
    switch (J * 10 + NB) {
    case 11: return launch_qkv_tjn<T, T2, 1, 1>(a, e, blocks, threads, pdl, s);
    case 12: return launch_qkv_tjn<T, T2, 1, 2>(a, e, blocks, threads, pdl, s);
    case 21: return launch_qkv_tjn<T, T2, 2, 1>(a, e, blocks, threads, pdl, s);
    case 22: return launch_qkv_tjn<T, T2, 2, 2>(a, e, blocks, threads, pdl, s);
    case 31: return launch_qkv_tjn<T, T2, 3, 1>(a, e, blocks, threads, pdl, s);
    default: return launch_qkv_tjn<T, T2, 3, 2>(a, e, blocks, threads, pdl, s);
    }
}

static void cache_dest(mvr_qkv &e, int g, const pyg_tensor *set_rows) {
    const pyg_tensor *c = set_rows->src[0], *idx = set_rows->src[2];
    e.cache[g] = (char *)c->data;
    e.ctype[g] = c->type;
    e.cnb0[g] = (int64_t)c->nb[0];
    e.cnb1[g] = (int64_t)c->nb[1];
    e.crows[g] = c->ne[1];
    e.idx[g] = (const char *)idx->data;
    e.itype[g] = idx->type;
}

int qkv_rope_launch(const pyg_tensor *const *nd, const rq_w *const *ws, const int8_t *yq, const float *yds,
                    op_ctx *c) {
    qkv_roles r;
    if (!qkv_roles_of(nd, &r)) {
        snprintf(c->err, c->errlen, "q/k/v + rope + cache launch: not the pattern it was planned for");
        return PYG_ERR_INTERNAL;
    }
    const int64_t K = ws[0]->K;
    const int J = mvr_units_per_lane(K), NB = cuda_opts()->mmv_nb == 2 ? 2 : 1;
    if (!J) {
        snprintf(c->err, c->errlen, "q/k/v + rope + cache launch: K = %lld", (long long)K);
        return PYG_ERR_INTERNAL;
    }
    mvr_args a;
    mvr_args_init(a, yq, yds, K, 3);
    mvr_qkv e;
    memset(&e, 0, sizeof e);
    const pyg_tensor *rq = nd[r.rq];
    e.pos = (const int32_t *)rq->src[1]->data;
    e.ff = rq->src[2] ? (const float *)rq->src[2]->data : NULL;
    e.rp = rope_params_of(rq);
    e.D = rq->ne[0];
    const int order[3] = { r.q, r.k, r.v };
    unsigned blocks = 0;
    for (int i = 0; i < MVR_MAX; i++) {
        const int g = i < 3 ? i : 2, m = order[g];
        a.w[i] = *ws[m];
        a.dst[i] = g == 0 ? (float *)rq->data : NULL;
        e.kind[i] = g == 0 ? MVR_ST_ROPE : g == 1 ? MVR_ST_ROPE_CACHE : MVR_ST_CACHE;
        a.blk0[i] = blocks;
        if (i < 3) blocks += (unsigned)(ws[m]->Mp / (8 * NB));
    }
    a.blk0[MVR_MAX] = blocks;
    cache_dest(e, 1, nd[r.sk]);
    cache_dest(e, 2, nd[r.sv]);
    cache_dest(e, 3, nd[r.sv]);
    const unsigned threads = (unsigned)mvr_warps(K, J) * PYG_WARP_SIZE;
    const int pdl = cuda_opts()->pdl && c->cc >= 90;
    const int t0 = ws[0]->type, mixed = t0 != ws[1]->type || t0 != ws[2]->type;
    gpuError_t err;
    if (mixed) { /* q4_K beside q6_K (mul_mat_can_group_types) */
        for (int i = 0; i < 3; i++)
            if (ws[i]->type != PYG_TYPE_Q4_K && ws[i]->type != PYG_TYPE_Q6_K) {
                snprintf(c->err, c->errlen, "q/k/v + rope + cache launch: types %d, %d, %d", ws[0]->type,
                         ws[1]->type, ws[2]->type);
                return PYG_ERR_INTERNAL;
            }
        err = launch_qkv_t<PYG_TYPE_Q4_K, PYG_TYPE_Q6_K>(a, e, J, NB, blocks, threads, pdl, c->stream);
    } else {
        switch (t0) {
        case PYG_TYPE_Q4_0: err = launch_qkv_t<PYG_TYPE_Q4_0, PYG_TYPE_Q4_0>(a, e, J, NB, blocks, threads, pdl, c->stream); break;
        case PYG_TYPE_Q8_0: err = launch_qkv_t<PYG_TYPE_Q8_0, PYG_TYPE_Q8_0>(a, e, J, NB, blocks, threads, pdl, c->stream); break;
        case PYG_TYPE_Q4_K: err = launch_qkv_t<PYG_TYPE_Q4_K, PYG_TYPE_Q4_K>(a, e, J, NB, blocks, threads, pdl, c->stream); break;
        case PYG_TYPE_Q6_K: err = launch_qkv_t<PYG_TYPE_Q6_K, PYG_TYPE_Q6_K>(a, e, J, NB, blocks, threads, pdl, c->stream); break;
        default:
            snprintf(c->err, c->errlen, "q/k/v + rope + cache launch: type %d", t0);
            return PYG_ERR_INTERNAL;
        }
    }
    if (err != gpuSuccess) {
        gpuGetLastError();
        snprintf(c->err, c->errlen, "q/k/v + rope + cache launch failed: %s", gpuGetErrorString(err));
        return PYG_ERR_DEVICE;
    }
    return PYG_OK;
}
