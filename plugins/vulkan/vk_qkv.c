/* plugins/vulkan/vk_qkv.c — fuse_qkv (default 1): a decode layer's q, k and v mat-vecs as one dispatch.
 *
 * With fuse_rope_mv, vk_mv_epi.c makes each of a layer's q, k and v mat-vecs (matvec_rp) a mul_mat_vec_rpe dispatch
 * that also does what the layer does next with its product: q ropes it, k ropes it and writes the K-cache row, v writes
 * the V-cache row. The three read one activation row and share a stage. This pass makes each such run of three
 * consecutive dispatches one mul_mat_vec_rpq dispatch (mul_mat_vec_rp.comp's RP_QKV build): the workgroups of q, then
 * k's, then v's, each on its weight's repacked copy (bindings 0, 2, 3). The same sums in the same order, so the same
 * bytes as the three dispatches.
 *
 * Taken where:
 *   - the three are mul_mat_vec_rpe with modes rope (q), rope + store (k), store (v), in that order (llama.py's order);
 *   - one specialization: weight type q4_0, q4_1 or q4_K (no second plane), one row length, 8 rows per workgroup, no
 *     norm-in (whose inputs take bindings 8 and 9); the same activations (x, or the one int8 copy of mv_q8);
 *   - q's and k's ropes have one set of parameters, position tensor and head size, and both stores one index tensor;
 *   - nothing else reads the three products or k's roped row, and none is a graph output: those are not written here
 *     (what reads them is in this dispatch), so the bindings are q's roped row (slot 4), the caches (6, 7), the position
 *     (8) and the index (9).
 * Parameter block: slots 0, 2, 3 describe the three weights (ne1 their rows), slot 1 the activations, slot 4 q's roped
 * row; ex[0] all workgroups, ex[7] q's, ex[2] k's; the rope's words as mul_mat_vec_rpe's (80.., ex[3..6]); the K cache
 * at extras 14.., the V cache at 20.., the position at 26.., the index at 8.. (offset, type, nb0..nb3 each). */
#include <string.h>
#include "vk_plan.h"

/* whether nothing but `reader` reads t's bytes: no other compute node reads t or a view of it, no view of it and not
 * t itself is a graph output (views alone are not readers) */
static int only_reader(const pyg_graph *g, const pyg_tensor *t, const pyg_tensor *reader) {
    if (!t || (t->flags & PYG_TENSOR_FLAG_OUTPUT)) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const pyg_tensor *n = g->nodes[i];
        if (!n || n == t || n == reader) continue;
        if (pyg_op_is_view(n->op)) {
            if (n->flags & PYG_TENSOR_FLAG_OUTPUT)
                for (const pyg_tensor *v = n->view_src; v; v = v->view_src) if (v == t) return 0;
            continue;
        }
        for (int k = 0; k < PYG_MAX_SRC; k++)
            for (const pyg_tensor *s = n->src[k]; s; s = s->view_src) if (s == t) return 0;
    }
    return 1;
}

/* tensor t described at extra word `word` of parameter block p: offset in its binding, type, nb0..nb3 */
static void describe(uint32_t *p, uint32_t word, const pyg_tensor *t, uint64_t align) {
    const pyg_buffer *b; uint64_t off = 0;
    vkp_resolve(t, &b, &off);
    uint32_t *w = &p[96 + word];
    w[0] = (uint32_t)(off & (align - 1));
    w[1] = (uint32_t)t->type;
    for (int k = 0; k < 4; k++) w[2 + k] = (uint32_t)t->nb[k];
}

/* a, b, c (parameter blocks pa, pb, pc): q, k and v as the header takes them */
static int qkv_ok(const pyg_graph *g, const dispatch *a, const dispatch *b, const dispatch *c, const uint32_t *pa,
                  const uint32_t *pb, const uint32_t *pc) {
    if (a->shader != VKP_SH_MUL_MAT_VEC_RPE || b->shader != VKP_SH_MUL_MAT_VEC_RPE || c->shader != VKP_SH_MUL_MAT_VEC_RPE) return 0;
    if ((pa[98] & 3u) != 1u || (pb[98] & 3u) != 3u || (pc[98] & 3u) != 2u) return 0;
    uint32_t sp = a->spec0, ty = sp & 255u;
    if (b->spec0 != sp || c->spec0 != sp || (sp & (1u << 14 | 1u << 11))) return 0;   /* (8 rows, no norm-in) */
    if (ty != PYG_TYPE_Q4_0 && ty != PYG_TYPE_Q4_1 && ty != PYG_TYPE_Q4_K) return 0;
    if (!a->rp || !b->rp || !c->rp || a->slot[1] != b->slot[1] || a->slot[1] != c->slot[1] || a->q8 != b->q8 || a->q8 != c->q8) return 0;
    if (a->slot[0]->ne[0] != b->slot[0]->ne[0] || a->slot[0]->ne[0] != c->slot[0]->ne[0]) return 0;
    if (memcmp(pa + 80, pb + 80, 16 * sizeof *pa) || memcmp(pa + 99, pb + 99, 4 * sizeof *pa) || a->slot[2] != b->slot[2]) return 0;
    if (!b->slot[3] || b->slot[3] != c->slot[3] || !a->add_out || !b->add_out || !b->xout[0] || !c->xout[0]) return 0;
    return only_reader(g, a->slot[VKP_SLOT_DST], a->add_out) && only_reader(g, b->slot[VKP_SLOT_DST], b->add_out) &&
           only_reader(g, b->add_out, b->xout[0]) && only_reader(g, c->slot[VKP_SLOT_DST], c->xout[0]);
}

int vkp_merge_qkv(pyg_device *d, const pyg_graph *g, dispatch *dps, char *params, uint64_t pstride, int nd) {
    if (!d->opts.fuse_qkv || d->mvrpq_broken) return nd;
    const uint64_t align = vkp_dev_align(d);
    for (int i = 0; i + 2 < nd; i++) {
        dispatch *a = &dps[i], *b = &dps[i + 1], *c = &dps[i + 2];
        uint32_t *pa = (uint32_t *)(params + (size_t)i * pstride), *pb = (uint32_t *)(params + (size_t)(i + 1) * pstride),
                 *pc = (uint32_t *)(params + (size_t)(i + 2) * pstride);
        if (!qkv_ok(g, a, b, c, pa, pb, pc)) continue;
        uint64_t nb = (uint64_t)a->slot[0]->ne[0] / 32, J = (nb + 255) / 256, KW = (nb + 32 * J - 1) / (32 * J);
        uint32_t sp[2] = { a->spec0 & ~(1u << 15), (uint32_t)(32 * KW) };   /* (no literal build of it) */
        VkPipeline pipe = VK_NULL_HANDLE;
        if (!vkp_pipeline_usable(d, VKP_SH_MUL_MAT_VEC_RPQ, sp, &d->mvrpq_broken)) return nd;
        pyg_error *e = vkp_get_pipeline(d, VKP_SH_MUL_MAT_VEC_RPQ, sp, &pipe);
        if (e) {
            vkp_log(PYG_LOG_WARN, "mul_mat '%s': %s; mul_mat_vec_rpe runs", a->slot[VKP_SLOT_DST]->name, vkp_error_text(e));
            vkp_error_free(e);
            return nd;
        }
        vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' + '%s' + '%s' (with their ropes and cache writes): mul_mat_vec_rpq",
                a->slot[VKP_SLOT_DST]->name, b->slot[VKP_SLOT_DST]->name, c->slot[VKP_SLOT_DST]->name);
        uint32_t wq = pa[96], wk = pb[96], total = pa[96] + pb[96] + pc[96];
        dispatch m = *a;
        m.pipe = pipe;
        m.shader = VKP_SH_MUL_MAT_VEC_RPQ;
        m.spec0 = sp[0];
        m.slot[2] = b->slot[0];
        m.slot[3] = c->slot[0];
        m.slot[VKP_SLOT_DST] = a->add_out;                 /* q roped */
        m.add_out = b->xout[0]; m.out6_word = 14;          /* the K cache (k's set_rows) */
        m.xout[0] = c->xout[0]; m.xout_word[0] = 20; m.xout_ro[0] = 0;   /* the V cache */
        m.xout[1] = a->slot[2]; m.xout_word[1] = 26; m.xout_ro[1] = 1;   /* the position */
        m.xout[2] = b->slot[3]; m.xout_word[2] = 8; m.xout_ro[2] = 1;    /* the cache row index */
        m.rp2 = b->rp;
        m.rp3 = c->rp;
        vkp_fold_groups(total, m.groups);
        uint32_t pm[VKP_PARAM_WORDS];
        memcpy(pm, pa, sizeof pm);
        memcpy(pm + 32, pb, 16 * sizeof *pm);              /* slot 2: k's weight (b's slot 0) */
        memcpy(pm + 48, pc, 16 * sizeof *pm);              /* slot 3: v's weight */
        const pyg_tensor *r = a->add_out;
        const pyg_buffer *rb; uint64_t roff = 0;
        vkp_resolve(r, &rb, &roff);
        memset(pm + 64, 0, 16 * sizeof *pm);
        pm[64] = (uint32_t)(roff & (align - 1));
        pm[65] = (uint32_t)r->type;
        for (int k = 0; k < 4; k++) { pm[68 + k] = (uint32_t)r->ne[k]; pm[72 + k] = (uint32_t)r->nb[k]; }
        pm[96] = total;
        pm[98] = wk;
        pm[103] = wq;
        describe(pm, 14, m.add_out, align);
        describe(pm, 20, m.xout[0], align);
        describe(pm, 26, m.xout[1], align);
        describe(pm, 8, m.xout[2], align);
        *a = m;
        memcpy(pa, pm, sizeof pm);
        memmove(&dps[i + 1], &dps[i + 3], (size_t)(nd - i - 3) * sizeof *dps);
        memmove(params + (size_t)(i + 1) * pstride, params + (size_t)(i + 3) * pstride, (size_t)(nd - i - 3) * pstride);
        nd -= 2;
    }
    return nd;
}
