/* plugins/vulkan/vk_fuse.c — which graph nodes one dispatch runs (vkp_plan_node, called by
 * vk_graph.c's plan builder for each compute node):
 *   add + rms_norm + mul (fuse): norm_mul*.comp writes all three nodes (norm_add.glsl for the add);
 *   gate + up mat-vecs + swiglu (fuse_glu): mul_mat_vec3g;
 *   a mat-vec reading a fused norm's result (fuse_norm_mv): mul_mat_vec3n recomputes that result from
 *     the norm's inputs, so it runs beside the norm dispatch instead of after it;
 *   a mat-vec reading a fused norm's result (mv_q8): mul_mat_vec3q stages the int8 blocks of that
 *     result the norm dispatch wrote beside it (norm_mul_reg.comp's Q8_OUT build);
 *   swiglu + the mat-vec reading it (fuse_swiglu): mul_mat_vec3s;
 *   rope + the set_rows of its result (fuse_rope): rope_store (vk_rope_store.c);
 * else the node alone (vkp_build_node). Every fused node's output is still written (R9). A fusion
 * whose dispatch would read bytes it (or, for mul_mat_vec3n, a dispatch since the norm) writes,
 * other than one element read then written by one invocation, is not made. */
#include <string.h>
#include "vk_plan.h"

/* rms_norm followed by a mul of its result (x_norm * w, w broadcast): one dispatch that writes
 * both nodes (every node is still written, R9), one barrier stage less per layer norm in
 * decode. Needs the subgroup row kernel. The option fuse=0 turns fusion off. */
static int fused_ranges_ok(const pyg_tensor *const *rd, int nr, const pyg_tensor *const *wr, int nw);
static int fusable(const pyg_device *d, const pyg_tensor *n, const pyg_tensor *m) {
    if (!d->opts.fuse) return 0;
    if (!d->subgroup_arith || n->op != PYG_OP_RMS_NORM || !m || m->op != PYG_OP_MUL) return 0;
    if (m->src[0] != n || m->src[1] == n || !vkp_same_shape(m, n)) return 0;
    const pyg_tensor *rd[2] = { n->src[0], m->src[1] }, *wr[2] = { n, m };
    return vkp_supports_op((pyg_device *)d, m) && fused_ranges_ok(rd, 2, wr, 2);
}

/* The workgroup-per-row variant (norm_mul_wg.comp), option norm_wg. */
static int norm_wg_on(const pyg_device *d) { return vkp_auto_on(d, d->opts.norm_wg); }

/* The fused norm's shader: the subgroup-per-row kernel, or where norm_wg is on the register kernel
 * (norm_v=2, rows up to 8192 = 256 invocations x 8 groups of 4: NV in norm_mul_reg.comp) or the
 * earlier workgroup kernel. */
int vkp_norm_reg_on(const pyg_device *d, int64_t width) { return norm_wg_on(d) && d->opts.norm_v == 2 && width <= 8192; }

static int norm_shader(const pyg_device *d, const pyg_tensor *n, int add) {
    if (!norm_wg_on(d)) return add ? VKP_SH_NORM_MUL_ADD : VKP_SH_NORM_MUL;
    if (vkp_norm_reg_on(d, n->ne[0])) return add ? VKP_SH_NORM_MUL_REG_ADD : VKP_SH_NORM_MUL_REG;
    return add ? VKP_SH_NORM_MUL_WG_ADD : VKP_SH_NORM_MUL_WG;
}

/* norm_mul_reg.comp's vec4 path (extra word 1): every tensor of the dispatch f32 with unit stride,
 * its rows 16-byte aligned (binding starts are: align), the weight row as wide as the norm's, and
 * the row a whole number of vec4s. Reads the parameter block as filled (slots, the add's extras). */
uint32_t vkp_norm_vec4_ok(const uint32_t *p, int add, uint64_t align) {
    static const int slots[4] = { 0, 1, 3, VKP_SLOT_DST };
    if (align % 16 || p[4] % 4 || p[16 + 4] != p[4]) return 0;
    for (int i = 0; i < 5; i++) {
        int s = i < 4 ? slots[i] : 2;
        if (i == 4 && !add) break;
        const uint32_t *t = &p[16 * s];
        if (t[1] != PYG_TYPE_F32 || t[0] % 16 || t[8] != 4 || t[9] % 16 || t[10] % 16 || t[11] % 16) return 0;
    }
    if (add) {   /* the add's output: offset, type, nb[0..3] in the extras 2..7 */
        const uint32_t *a = &p[96];
        if (a[2] % 16 || a[3] != PYG_TYPE_F32 || a[4] != 4 || a[5] % 16 || a[6] % 16 || a[7] % 16) return 0;
    }
    return 1;
}

static void build_fused_norm_mul(pyg_device *d, const pyg_tensor *n, const pyg_tensor *m, dispatch *dp, uint32_t *p) {
    memset(dp->slot, 0, sizeof dp->slot);
    dp->slot[0] = n->src[0];
    dp->slot[1] = m->src[1];
    dp->slot[3] = n;
    dp->slot[VKP_SLOT_DST] = m;
    dp->writes_slot3 = 1;
    memcpy(&p[80], n->op_params, sizeof n->op_params);
    p[96] = (uint32_t)pyg_tensor_nrows(n->src[0]);
    uint32_t rpw = norm_wg_on(d) ? 1 : vkp_rows_per_wg(d);
    vkp_fold_groups((p[96] + rpw - 1) / rpw, dp->groups);
}

/* An add whose result the next node rms-normalizes (fused as above): the residual add of a layer
 * joins that dispatch too (norm_add.glsl), one more barrier stage less per layer norm. Same shapes
 * (no broadcast); the same switch as the norm fusion. */
static int add_fusable(const pyg_device *d, const pyg_tensor *a, const pyg_tensor *n, const pyg_tensor *m) {
    if (a->op != PYG_OP_ADD || !a->src[1] || !n || n->src[0] != a || !fusable(d, n, m)) return 0;
    if (!vkp_same_shape(a, a->src[0]) || !vkp_same_shape(a, a->src[1]) || m->src[1] == a) return 0;
    const pyg_tensor *rd[3] = { a->src[0], a->src[1], m->src[1] }, *wr[3] = { a, n, m };
    return vkp_supports_op((pyg_device *)d, a) && fused_ranges_ok(rd, 3, wr, 3);
}

/* A fused dispatch runs its nodes element by element, not one after another: the allocator may have
 * put a later node's output over an earlier node's input (its lifetime ended there), which is safe
 * only where the two are the same elements in the same layout (each element is read, then written,
 * by one invocation). Any other overlap between what the dispatch writes and what it reads or
 * writes elsewhere (a shifted reuse reaching another row) keeps the nodes apart. */
static int same_bytes(const pyg_tensor *a, const pyg_tensor *b, const pyg_buffer *ba, uint64_t oa, const pyg_buffer *bb, uint64_t ob) {
    if (ba != bb || oa != ob || a->type != b->type) return 0;
    for (int i = 0; i < PYG_MAX_DIMS; i++) if (a->ne[i] != b->ne[i] || a->nb[i] != b->nb[i]) return 0;
    return 1;
}

static int fused_ranges_ok(const pyg_tensor *const *rd, int nr, const pyg_tensor *const *wr, int nw) {
    for (int i = 0; i < nw; i++) {
        const pyg_buffer *bw; uint64_t ow;
        if (!vkp_resolve(wr[i], &bw, &ow)) return 0;
        uint64_t ew = ow + pyg_tensor_nbytes(wr[i]);
        for (int j = 0; j < nr + nw; j++) {
            const pyg_tensor *o = j < nr ? rd[j] : wr[j - nr];
            if (o == wr[i]) continue;
            const pyg_buffer *bo; uint64_t oo;
            if (!vkp_resolve(o, &bo, &oo)) return 0;
            if (bo == bw && oo < ew && ow < oo + pyg_tensor_nbytes(o) && !same_bytes(wr[i], o, bw, ow, bo, oo)) return 0;
        }
    }
    return 1;
}

/* the next compute node after index i that no dispatch took ahead of its place (NULL at the end) */
static const pyg_tensor *next_compute(const pyg_graph *g, int i, const unsigned char *done) {
    for (int j = i + 1; j < g->n_nodes && g->nodes[j]; j++)
        if (g->nodes[j]->op != PYG_OP_NONE && !pyg_op_is_view(g->nodes[j]->op) && !done[j]) return g->nodes[j];
    return NULL;
}

/* a = mul_mat(W_a, x), b = mul_mat(W_b, x), swiglu(a, b) as one mul_mat_vec3g dispatch (fuse_glu):
 * slots W_a, x, W_b, a (written), the swiglu; b at binding 6 */
static void glu_slots(dispatch *dp, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw) {   /* (and mul_mat_vec_rpg's) */
    memset(dp->slot, 0, sizeof dp->slot);
    dp->slot[0] = a->src[0]; dp->slot[1] = a->src[1]; dp->slot[2] = b->src[0]; dp->slot[3] = a; dp->slot[4] = sw;
    dp->writes_slot3 = 1;
    dp->add_out = b;
}

static int glu_fusable(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw, dispatch *dp, uint32_t *p) {
    uint32_t spec[2]; uint64_t work;
    if (!sw || !vkp_glu_setup(d, a, b, sw, spec, &work)) return 0;
    const pyg_tensor *rd[3] = { a->src[0], a->src[1], b->src[0] }, *wr[3] = { a, b, sw };
    if (!fused_ranges_ok(rd, 3, wr, 3)) return 0;
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' + mul_mat '%s' + swiglu '%s': mul_mat_vec3g", a->name, b->name, sw->name);
    glu_slots(dp, a, b, sw);
    dp->shader = VKP_SH_MUL_MAT_VEC3G;
    dp->spec0 = spec[0];
    p[96] = (uint32_t)work;
    vkp_fold_groups(work, dp->groups);
    return 1;
}

/* t[0..nw) written, t[nw..n) read by one dispatch whose workgroups run in any order: each written tensor
 * disjoint from every other */
static int writes_apart(const pyg_tensor *const *t, int nw, int n) {
    for (int i = 0; i < nw; i++)
        for (int j = i + 1; j < n; j++)
            if (!vkp_disjoint(t[i], t[j])) return 0;
    return 1;
}

/* matvec_rp: a = mul_mat(W_a, x), b = mul_mat(W_b, x), sw = swiglu(a, b) as one mul_mat_vec_rpg dispatch on the
 * two weights' repacked copies (vk_matmul.c's vkp_rp_glu_setup): slots W_a, x, W_b, a (written), sw; b at binding
 * 6. Its workgroups each write their own rows of a, b and sw while all of them read x: what it writes must not
 * touch what it reads or writes elsewhere. */
static int rp_glu_fusable(pyg_device *d, const pyg_tensor *a, const pyg_tensor *b, const pyg_tensor *sw, dispatch *dp, uint32_t *p) {
    uint32_t spec[2], ex[2]; uint64_t work;
    if (!sw || !vkp_rp_glu_setup(d, a, b, sw, spec, &work, ex)) return 0;
    const pyg_tensor *all[6] = { a, b, sw, a->src[0], a->src[1], b->src[0] };   /* written: the first three */
    if (!writes_apart(all, 3, 6)) return 0;
    struct vkp_repack *ra = vkp_repack_get(d, a->src[0], a->name), *rb = ra ? vkp_repack_get(d, b->src[0], b->name) : NULL;
    VkPipeline pipe = VK_NULL_HANDLE;
    pyg_error *e = rb ? vkp_get_pipeline(d, VKP_SH_MUL_MAT_VEC_RPG, spec, &pipe) : NULL;   /* (usable: vk_matmul.c made it) */
    if (!rb || e) {
        if (e) {
            vkp_log(PYG_LOG_WARN, "mul_mat '%s' + mul_mat '%s': %s; the other mat-vecs run", a->name, b->name, vkp_error_text(e));
            vkp_error_free(e);
        }
        vkp_repack_release(rb);
        vkp_repack_release(ra);
        return 0;
    }
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' + mul_mat '%s' + swiglu '%s': mul_mat_vec_rpg", a->name, b->name, sw->name);
    glu_slots(dp, a, b, sw);
    dp->rp = ra;
    dp->rp2 = rb;
    dp->pipe = pipe;
    dp->shader = VKP_SH_MUL_MAT_VEC_RPG;
    dp->spec0 = spec[0];
    p[96] = ex[0];
    p[97] = ex[1];
    vkp_fold_groups(work, dp->groups);
    return 1;
}

/* sw = swiglu(a, b), y = mul_mat(W, sw) as one mul_mat_vec3s dispatch (fuse_swiglu; vk_matmul.c):
 * slots W, a, b, y; sw at binding 6. Its workgroups run in any order, the first row group writing
 * sw while the others read a and b: what it writes must not touch what it reads or writes
 * elsewhere at all (not even the same elements, which the element-by-element fusions allow). */
static int swiglu_mv_fusable(pyg_device *d, const pyg_tensor *sw, const pyg_tensor *mm, dispatch *dp, uint32_t *p) {
    uint32_t spec[2]; uint64_t work;
    if (!vkp_swiglu_mv_setup(d, sw, mm, spec, &work)) return 0;
    const pyg_tensor *all[5] = { sw, mm, mm->src[0], sw->src[0], sw->src[1] };   /* written: the first two */
    if (!writes_apart(all, 2, 5)) return 0;
    vkp_log(PYG_LOG_DEBUG, "swiglu '%s' + mul_mat '%s': mul_mat_vec3s", sw->name, mm->name);
    memset(dp->slot, 0, sizeof dp->slot);
    dp->slot[0] = mm->src[0]; dp->slot[1] = sw->src[0]; dp->slot[2] = sw->src[1]; dp->slot[VKP_SLOT_DST] = mm;
    dp->add_out = sw;
    dp->shader = VKP_SH_MUL_MAT_VEC3S;
    dp->spec0 = spec[0];
    memcpy(&p[80], mm->op_params, sizeof mm->op_params);
    p[96] = (uint32_t)work;
    vkp_fold_groups(work, dp->groups);
    return 1;
}

/* mul_mat(W, m) where m is the result of the fused norm dispatch dps[ns] (rms_norm(x [+ r]) * w, on
 * norm_mul_reg.comp's vec4 path) as mul_mat_vec3n (vk_matmul.c): slots W, x, r, w, y. It reads x, r
 * and w where the norm dispatch read them, later, so nothing from that dispatch up to this one
 * may have written over them (the arena may reuse a dead tensor's bytes: REUSE_LAG in
 * pyggml/_alloc.py keeps them a few steps), nor may y. Later writers of them come after it in the
 * plan's stages (they conflict with its reads). */
static int norm_mv_fusable(pyg_device *d, const pyg_tensor *mm, const dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p) {
    if (ns < 0 || mm->op != PYG_OP_MUL_MAT || mm->src[1] != dps[ns].slot[VKP_SLOT_DST]) return 0;
    const dispatch *nm = &dps[ns];
    const pyg_tensor *x = nm->slot[0], *r = nm->add_out ? nm->slot[2] : NULL, *w = nm->slot[1], *norm = nm->slot[3];
    uint32_t spec[2]; uint64_t work;
    if (!vkp_norm_mv_setup(d, mm, x, r, w, spec, &work)) return 0;
    const pyg_tensor *rd[4] = { mm->src[0], x, w, r };
    for (int k = 0; k < 4; k++) {
        if (!rd[k]) continue;
        if (!vkp_disjoint(rd[k], mm)) return 0;
        for (int j = ns; j < nd; j++) if (vkp_dispatch_writes_into(&dps[j], rd[k])) return 0;
    }
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' recomputes rms_norm '%s': mul_mat_vec3n", mm->name, norm->name);
    memset(dp->slot, 0, sizeof dp->slot);
    dp->slot[0] = mm->src[0]; dp->slot[1] = x; dp->slot[2] = r; dp->slot[3] = w; dp->slot[VKP_SLOT_DST] = mm;
    dp->shader = VKP_SH_MUL_MAT_VEC3N;
    dp->spec0 = spec[0];
    memcpy(&p[80], norm->op_params, sizeof norm->op_params);   /* eps */
    p[96] = (uint32_t)work;
    p[97] = r != NULL;
    vkp_fold_groups(work, dp->groups);
    return 1;
}

/* mul_mat(W, m) where m is the result of the fused norm dispatch dps[ns], which can write m's int8
 * blocks (vk_graph.c marked it q8): mul_mat_vec3q reads that copy as its activations (slot 1 still
 * describes m; the plan binds the copy there). The copy is m as the norm dispatch wrote it, so nothing
 * from that dispatch up to this one may have written over m. The norm's Q8_OUT build is chosen once
 * a mat-vec reads its copy (q8_n). */
static int q8_mv(pyg_device *d, const pyg_tensor *mm, dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p) {
    if (ns < 0 || dps[ns].q8 != 1 || mm->op != PYG_OP_MUL_MAT || mm->src[1] != dps[ns].slot[VKP_SLOT_DST]) return 0;
    for (int j = ns + 1; j < nd; j++) if (vkp_dispatch_writes_into(&dps[j], mm->src[1])) return 0;
    uint32_t spec[2]; uint64_t work;
    if (!vkp_mv3q_setup(d, mm, spec, &work)) return 0;
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' reads rms_norm '%s''s int8 copy: mul_mat_vec3q", mm->name, dps[ns].slot[3]->name);
    memset(dp->slot, 0, sizeof dp->slot);
    dp->slot[0] = mm->src[0]; dp->slot[1] = mm->src[1]; dp->slot[VKP_SLOT_DST] = mm;
    dp->shader = VKP_SH_MUL_MAT_VEC3Q;
    dp->spec0 = spec[0];
    dp->q8 = 2;
    dps[ns].q8_n++;
    memcpy(&p[80], mm->op_params, sizeof mm->op_params);
    p[96] = (uint32_t)work;
    vkp_fold_groups(work, dp->groups);
    return 1;
}

pyg_error *vkp_plan_node(pyg_device *d, const pyg_graph *g, int *ip, dispatch *dps, int nd, uint32_t *p, int norm_src,
                         unsigned char *done) {
    pyg_error *e = NULL;
    int i = *ip, nn = g->n_nodes;
    const pyg_tensor *n = g->nodes[i];
    const pyg_tensor *next = next_compute(g, i, done);
    const pyg_tensor *next2 = NULL;
    for (int j = i + 1; next && j < nn; j++) if (g->nodes[j] == next) { next2 = next_compute(g, j, done); break; }
    const pyg_tensor *add = NULL;
    if (add_fusable(d, n, next, next2)) { add = n; n = next; next = next2; }
    if (add || fusable(d, n, next)) {
        build_fused_norm_mul(d, n, next, &dps[nd], p);
        uint32_t specs[2] = { 0, vkp_rows_per_wg(d) };
        dps[nd].shader = norm_shader(d, n, add != NULL);
        if (add) {   /* x = add's operands; the add's output at binding 6, described in the extras */
            dps[nd].slot[0] = add->src[0];
            dps[nd].slot[2] = add->src[1];
            dps[nd].add_out = add;
        }
        if ((e = vkp_get_pipeline(d, dps[nd].shader, specs, &dps[nd].pipe))) return e;
        while (g->nodes[i] != next) i++;   /* the mul (and the norm) are done by this dispatch */
    } else if (rp_glu_fusable(d, n, next, next2, &dps[nd], p)) {   /* gate, up, swiglu on repacked copies (matvec_rp) */
        vkp_rp_norm_read(d, dps, nd, norm_src, &dps[nd], p);   /* (the norm before them recomputed, or its int8 copy read) */
        while (g->nodes[i] != next2) i++;
    } else if (glu_fusable(d, n, next, next2, &dps[nd], p)) {   /* gate, up, swiglu (vk_matmul.c) */
        if ((e = vkp_get_pipeline(d, dps[nd].shader, (uint32_t[2]){ dps[nd].spec0, 1 }, &dps[nd].pipe))) return e;
        while (g->nodes[i] != next2) i++;
    } else if (norm_mv_fusable(d, n, dps, nd, norm_src, &dps[nd], p)) {   /* a mat-vec beside the norm it reads */
        if ((e = vkp_get_pipeline(d, dps[nd].shader, (uint32_t[2]){ dps[nd].spec0, 1 }, &dps[nd].pipe))) return e;
    } else if (q8_mv(d, n, dps, nd, norm_src, &dps[nd], p)) {   /* a mat-vec staging the norm's int8 copy */
        if ((e = vkp_get_pipeline(d, dps[nd].shader, (uint32_t[2]){ dps[nd].spec0, 1 }, &dps[nd].pipe))) return e;
    } else if (swiglu_mv_fusable(d, n, next, &dps[nd], p)) {   /* swiglu + the down projection */
        if ((e = vkp_get_pipeline(d, dps[nd].shader, (uint32_t[2]){ dps[nd].spec0, 1 }, &dps[nd].pipe))) return e;
        while (g->nodes[i] != next) i++;
        n = next;   /* (a mat-vec: its op in profiles) */
    } else if (vkp_rope_store_fusable(d, n, next)) {   /* rope + its result's cache write (vk_rope_store.c) */
        uint32_t specs[2] = { 0, 1 };
        if ((e = vkp_build_node(d, n, &dps[nd], p))) return e;
        dps[nd].slot[3] = next->src[2];
        dps[nd].slot[4] = next;   /* the set_rows node: its cache's bytes */
        dps[nd].add_out = n;      /* the rope's own result at binding 6, extras 8.. */
        dps[nd].out6_word = 8;
        dps[nd].shader = VKP_SH_ROPE_STORE;
        if ((e = vkp_get_pipeline(d, VKP_SH_ROPE_STORE, specs, &dps[nd].pipe))) return e;
        vkp_log(PYG_LOG_DEBUG, "rope '%s' + set_rows '%s': rope_store", n->name, next->name);
        while (g->nodes[i] != next) i++;
    } else if ((e = vkp_build_node(d, n, &dps[nd], p))) {
        return e;
    } else if (dps[nd].shader == VKP_SH_MUL_MAT_VEC_RP) {   /* with what comes next for its result (vk_mv_epi.c) */
        vkp_mv_epilogue(d, g, i, done, &dps[nd], p);
        vkp_rp_norm_read(d, dps, nd, norm_src, &dps[nd], p);
    }
    dps[nd].op = n->op;
    *ip = i;
    return NULL;
}
