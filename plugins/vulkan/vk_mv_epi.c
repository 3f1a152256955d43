/* plugins/vulkan/vk_mv_epi.c — a decode mat-vec on matvec_rp with what the graph does next with its result, in the
 * same dispatch (vkp_mv_epilogue, called for every mul_mat_vec_rp dispatch the plan builds). Two patterns:
 *
 * fuse_rope_mv (default 1; mul_mat_vec_rp.comp's RP_EPI build, mul_mat_vec_rpe): a layer's q, k and v mat-vecs,
 * each with what the layer does next with its result. Besides y = mul_mat(W, x) (ex[2]):
 *   q: r = rope(y viewed as [D, H, 1])                                            bit 0
 *   k: r as for q, then set_rows(cache, r viewed as [H * D, 1], idx)              bits 0 and 1
 *   v: set_rows(cache, y, idx)                                                    bit 1
 * That is pyggml/models/llama.py's layer; the CUDA plugin's mvr_qkv does the same. The separate rope stage
 * between the mat-vecs and the attention goes away.
 *
 * The rope and the set_rows come later in the graph (after the other mat-vecs); the dispatch runs them at
 * the mat-vec's place. So every compute node between must neither write what they read or write, nor read
 * what they write (the allocator reuses bytes), and what the dispatch writes must be disjoint from all it
 * touches. Every node's result is still written (R9): y at slot 4, r at binding 6, the cache row at binding 7.
 * Taken: a normal-mode rope (adjacent pairs: both in one workgroup's 8 rows) of one token without frequency
 * factors, y and r f32 and contiguous; a 2-D cache of f32, f16 or bf16 as wide as y, one i32/i64 index.
 *
 * fold_norm (the RP_NORM build, mul_mat_vec_rpn; vk_norm_in.c reads it): a layer's o and down projections, whose result
 * y the graph adds to a residual r and normalizes next (a = r + y, n = rms_norm(a), h = n * w). Besides y, the dispatch
 * writes into a region of the plan's scratch what h's readers need to read h without the norm's stage between: the
 * int8 blocks of (r + y) * w, with a scale per 8 elements (a workgroup's rows), and the sums of (r + y)^2 per 8
 * (mul_mat_vec_rp.comp's header). It takes none of the add, norm and mul nodes: they stay one dispatch
 * (add+norm_mul_reg), which the readers then run beside. Taken where y, a, r and w are one f32 row of M, a multiple
 * of 32, and nothing between the mat-vec and the add writes over r or w (the dispatch reads them at its place).
 * The last-workgroup build before it (its last workgroup normalized the whole row; a counter per run) was 5% slower
 * on 7b at 2e2104a: the tail and every workgroup's count cost what the stage did.
 * With fold_nodes, where a_writable holds, the region also has room for a and w as floats (fold_a): a reader that takes
 * the norm's nodes (vk_norm_in.c's fold_write) makes this dispatch write a itself and the add + norm dispatch goes. */
#include <string.h>
#include "vk_plan.h"

/* t without the view nodes in front of it (in-place ops, which also have a view_src, are kept) */
static const pyg_tensor *through_views(const pyg_tensor *t) {
    for (int depth = 0; t && pyg_op_is_view(t->op) && t->view_src && depth < 16; depth++) t = t->view_src;
    return t;
}

static int overlap(const pyg_tensor *a, const pyg_tensor *b) { return !vkp_disjoint(a, b); }   /* (either without bytes: 1) */

/* v: a contiguous f32 view of all of y's bytes, ne elements along dim 0 and one row */
static int whole_f32(const pyg_tensor *v, const pyg_tensor *y, int64_t ne) {
    const pyg_buffer *bv, *by; uint64_t ov, oy;
    if (!vkp_resolve(v, &bv, &ov) || !vkp_resolve(y, &by, &oy) || bv != by || ov != oy) return 0;
    return v->type == PYG_TYPE_F32 && pyg_tensor_is_contiguous(v) && pyg_tensor_nelements(v) == ne;
}

/* the first compute node after index i, not taken yet, that reads t (through views): its index, or -1 */
static int first_reader(const pyg_graph *g, int i, const unsigned char *done, const pyg_tensor *t) {
    for (int j = i + 1; j < g->n_nodes && g->nodes[j]; j++) {
        const pyg_tensor *c = g->nodes[j];
        if (c->op == PYG_OP_NONE || pyg_op_is_view(c->op) || done[j]) continue;
        for (int k = 0; k < PYG_MAX_SRC; k++)
            if (c->src[k] && through_views(c->src[k]) == t) return j;
    }
    return -1;
}

/* s = set_rows(cache, src, idx) writing src (M f32, one row) into a 2-D cache M wide */
static int store_ok(pyg_device *d, const pyg_tensor *s, const pyg_tensor *src, int64_t M) {
    const pyg_tensor *cache = s->src[0], *idx = s->src[2];
    if (s->op != PYG_OP_SET_ROWS || !cache || !idx || through_views(s->src[1]) != src || !whole_f32(s->src[1], src, M)) return 0;
    if (cache->ne[0] != M || cache->ne[2] != 1 || cache->ne[3] != 1) return 0;
    if (cache->type != PYG_TYPE_F32 && cache->type != PYG_TYPE_F16 && cache->type != PYG_TYPE_BF16) return 0;
    if (cache->nb[0] != (uint64_t)pyg_type_get_traits(cache->type)->type_size) return 0;
    if (pyg_tensor_nelements(idx) != 1 || (idx->type != PYG_TYPE_I32 && idx->type != PYG_TYPE_I64)) return 0;
    const pyg_buffer *bc, *bs; uint64_t oc, os;
    if (!vkp_resolve(cache, &bc, &oc) || !vkp_resolve(s, &bs, &os) || bc != bs || oc != os) return 0;
    return vkp_supports_op(d, s);
}

/* r = rope(y viewed as [D, H, 1]): normal mode, all of y, no frequency factors, r f32 and contiguous */
static int rope_ok(pyg_device *d, const pyg_tensor *r, const pyg_tensor *y, int64_t M) {
    if (r->op != PYG_OP_ROPE || r->src[2] || !r->src[1] || through_views(r->src[0]) != y || !whole_f32(r->src[0], y, M)) return 0;
    if (r->type != PYG_TYPE_F32 || !pyg_tensor_is_contiguous(r) || pyg_tensor_nelements(r) != M) return 0;
    if (r->ne[0] % 2 || r->ne[2] != 1 || r->ne[3] != 1 || r->op_params[1] != 0) return 0;
    if (r->op_params[0] <= 0 || r->op_params[0] > r->ne[0] || r->src[1]->type != PYG_TYPE_I32) return 0;
    return vkp_supports_op(d, r);
}

/* moving the writes wr[0..nw) and the reads rd[0..nr) ahead to index i: no compute node in (i, j) that
 * stays in place (not done, not in wr) touches what is written, or writes what is read */
static int hoistable(const pyg_graph *g, int i, int j, const unsigned char *done, const pyg_tensor *const *wr, int nw,
                     const pyg_tensor *const *rd, int nr) {
    for (int k = i + 1; k < j; k++) {
        const pyg_tensor *c = g->nodes[k];
        if (!c || c->op == PYG_OP_NONE || pyg_op_is_view(c->op) || done[k]) continue;
        int moved = 0;
        for (int w = 0; w < nw; w++) moved |= c == wr[w];
        if (moved) continue;
        for (int w = 0; w < nw; w++) {
            if (overlap(c, wr[w])) return 0;
            for (int s = 0; s < PYG_MAX_SRC; s++) if (c->src[s] && overlap(c->src[s], wr[w])) return 0;
        }
        for (int r = 0; r < nr; r++) if (overlap(c, rd[r])) return 0;
    }
    return 1;
}

/* dp, mul_mat_vec_rp for y, becomes `shader`, the same mat-vec with an epilogue (the same workgroups and parameters);
 * 0 where that build cannot run here (logged), and dp is left as it was */
static int become(pyg_device *d, const pyg_tensor *y, int shader, dispatch *dp) {
    uint32_t sp[2], ex[2]; uint64_t work;
    VkPipeline pipe = VK_NULL_HANDLE;
    if (!vkp_mv_rp_epi_setup(d, y, shader, sp, &work, ex)) return 0;
    pyg_error *e = vkp_get_pipeline(d, shader, sp, &pipe);   /* (usable: vk_matmul.c made it) */
    if (e) {
        vkp_log(PYG_LOG_WARN, "mul_mat '%s': %s; mul_mat_vec_rp runs", y->name, vkp_error_text(e));
        vkp_error_free(e);
        return 0;
    }
    dp->pipe = pipe;
    dp->shader = shader;
    return 1;
}

static int rope_mv(pyg_device *d, const pyg_graph *g, int i, unsigned char *done, dispatch *dp, uint32_t *p) {
    const pyg_tensor *y = g->nodes[i];
    if (!d->opts.fuse_rope_mv || y->op != PYG_OP_MUL_MAT) return 0;
    const int64_t M = y->ne[0];
    const pyg_tensor *r = NULL, *s = NULL;
    int jr = -1, js = -1;
    int j = first_reader(g, i, done, y);
    if (j < 0) return 0;
    if (rope_ok(d, g->nodes[j], y, M)) {
        r = g->nodes[jr = j];
        int j2 = first_reader(g, jr, done, r);
        if (j2 >= 0 && store_ok(d, g->nodes[j2], r, M)) s = g->nodes[js = j2];
    } else if (store_ok(d, g->nodes[j], y, M)) {
        s = g->nodes[js = j];
    } else {
        return 0;
    }
    /* what the dispatch writes (y, r, the cache) disjoint from one another and from what it reads */
    const pyg_tensor *wr[3], *rd[4];
    int nw = 0, nr = 0;
    wr[nw++] = y;
    if (r) wr[nw++] = r;
    if (s) wr[nw++] = s;
    rd[nr++] = y->src[0];
    rd[nr++] = y->src[1];
    if (r) rd[nr++] = r->src[1];
    if (s) rd[nr++] = s->src[2];
    for (int a = 0; a < nw; a++) {
        for (int b = a + 1; b < nw; b++) if (overlap(wr[a], wr[b])) return 0;
        for (int b = 0; b < nr; b++) if (overlap(wr[a], rd[b])) return 0;
    }
    if (!hoistable(g, i, js > jr ? js : jr, done, wr + 1, nw - 1, rd + 2, nr - 2) || !become(d, y, VKP_SH_MUL_MAT_VEC_RPE, dp)) return 0;
    p[98] = (r ? 1u : 0u) | (s ? 2u : 0u);
    if (r) {
        memcpy(&p[80], r->op_params, sizeof r->op_params);
        vkp_rope_extras(r, &p[99]);
        p[102] = (uint32_t)r->ne[0];
        dp->slot[2] = r->src[1];
        dp->add_out = r;
        dp->out6_word = 8;
        done[jr] = 1;
    }
    if (s) {
        dp->slot[3] = s->src[2];
        dp->xout[0] = s;
        dp->xout_word[0] = 14;
        done[js] = 1;
    }
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s'%s%s%s%s: mul_mat_vec_rpe", y->name, r ? " + rope '" : "", r ? r->name : "", r ? "'" : "",
            s ? " + set_rows" : "");
    return 1;
}

/* a, one f32 row, the same bytes as t or apart from them */
static int same_or_apart(const pyg_tensor *a, const pyg_tensor *t) {
    const pyg_buffer *ba, *bt; uint64_t oa, ot;
    if (!overlap(a, t)) return 1;
    return vkp_resolve(a, &ba, &oa) && vkp_resolve(t, &bt, &ot) && ba == bt && oa == ot && vkp_row_f32(t, a->ne[0]);
}

/* fold_nodes: whether mul_mat_vec_rpn for y (node i) may write the add's result a = y + r (node ja) at its own place:
 * a apart from what the dispatch reads (the weight, x, w; or the same elements of r or y, each read then written by one
 * invocation), and no compute node between the two touches a */
static int a_writable(const pyg_graph *g, int i, int ja, const unsigned char *done, const pyg_tensor *y, const pyg_tensor *a,
                      const pyg_tensor *r, const pyg_tensor *w) {
    if (overlap(a, y->src[0]) || overlap(a, y->src[1]) || overlap(a, w) || !same_or_apart(a, y) || !same_or_apart(a, r)) return 0;
    return hoistable(g, i, ja, done, &a, 1, NULL, 0);
}

static int norm_fold(pyg_device *d, const pyg_graph *g, int i, unsigned char *done, dispatch *dp) {
    const pyg_tensor *y = g->nodes[i];
    if (!d->opts.fold_norm || y->op != PYG_OP_MUL_MAT) return 0;
    const int64_t M = y->ne[0];
    if (!vkp_norm_reg_on(d, M)) return 0;   /* (its readers take the copy only beside the register norm: as on GPUs) */
    int ja = vkp_row_f32(y, M) && M % 32 == 0 ? first_reader(g, i, done, y) : -1;
    const pyg_tensor *a = ja >= 0 ? g->nodes[ja] : NULL;
    if (!a || a->op != PYG_OP_ADD || !a->src[1] || (a->src[0] == y) == (a->src[1] == y)) return 0;
    const pyg_tensor *r = a->src[0] == y ? a->src[1] : a->src[0];
    int jn = vkp_row_f32(a, M) && vkp_row_f32(r, M) ? first_reader(g, ja, done, a) : -1;
    const pyg_tensor *n = jn >= 0 ? g->nodes[jn] : NULL;
    if (!n || n->op != PYG_OP_RMS_NORM || n->src[0] != a || !vkp_row_f32(n, M)) return 0;
    int jm = first_reader(g, jn, done, n);
    const pyg_tensor *m = jm >= 0 ? g->nodes[jm] : NULL;
    if (!m || m->op != PYG_OP_MUL || m->src[0] != n || !m->src[1] || m->src[1] == n || !vkp_row_f32(m, M) || !vkp_row_f32(m->src[1], M)) return 0;
    const pyg_tensor *w = m->src[1], *rd[2] = { r, w };
    if (overlap(y, r) || overlap(y, w) || !hoistable(g, i, ja, done, NULL, 0, rd, 2)) return 0;
    if (!become(d, y, VKP_SH_MUL_MAT_VEC_RPN, dp)) return 0;
    dp->slot[2] = r;
    dp->slot[3] = w;
    dp->nfold = 1;
    dp->scratch_size = (uint64_t)M * 2;   /* M int8, then M / 8 scales and M / 8 sums of squares (floats) */
    if (d->opts.fold_nodes && a_writable(g, i, ja, done, y, a, r, w)) {
        dp->fold_a = a;   /* (written once a reader takes the norm's nodes: vk_norm_in.c) */
        dp->scratch_size += (uint64_t)M * 8;   /* then a and w as floats */
    }
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' (int8 copy and squares of (+ '%s') * '%s' for rms_norm '%s'): mul_mat_vec_rpn", y->name,
            r->name, w->name, n->name);
    return 1;
}

void vkp_mv_epilogue(pyg_device *d, const pyg_graph *g, int i, unsigned char *done, dispatch *dp, uint32_t *p) {
    if (!rope_mv(d, g, i, done, dp, p)) norm_fold(d, g, i, done, dp);
}
