/* plugins/vulkan/vk_norm_in.c — how a repacked decode mat-vec reads a fused layer norm's result other than as the norm
 * wrote it: from what the mat-vec before the norm wrote for it (fold_in, option fold_norm, and with option fold_nodes
 * fold_write, which writes the norm's nodes there and leaves the norm dispatch out; below), recomputed from the
 * norm's inputs (norm_in, option rp_norm_in) or as the norm's int8 copy (q8_in, option mv_q8; below), the first where
 * it applies (vkp_rp_norm_read).
 *
 * Option rp_norm_in: a layer's q/k/v (mul_mat_vec_rpe) or gate/up (mul_mat_vec_rpg)
 * mat-vec on matvec_rp that reads a fused norm's result m = rms_norm(x [+ r]) * w recomputes it from x, r and w
 * (mul_mat_vec_rp.comp's norm-in, specialization bits 11 and 12) instead of reading m. It then reads nothing the norm
 * dispatch writes, so the two share a barrier stage (vk_stages.c): the stage between a layer norm and its mat-vecs
 * goes away. The norm dispatch still runs and writes all its nodes (R9).
 *
 * Bindings: slot 1 becomes x (the norm's input), r goes to binding 8 (extras 20..25) and w to binding 9 (extras
 * 26..31), both read-only extra bindings; eps at extra word 7 (rpe) or 8 (rpg): the words those builds leave free.
 * Taken where the norm ran on norm_mul_reg.comp's vec4 path (so x, r, w and m are f32 with unit stride and rows on 16
 * bytes, w as wide as the row), for one row, and where nothing from the norm dispatch up to this one writes over x, r
 * or w (the norm's own add may not take their bytes), nor does the mat-vec. The arena keeps decode-sized tensors
 * apart for SMALL_LAG steps (pyggml/_alloc.py), past the ropes and cache writes the q/k/v dispatches write.
 *
 * auto (the default) takes rows up to 1024 wide. Every workgroup reads x, r and w where it read m: three rows of
 * activations for one, which wide rows pay for. H100 at c348471 + this, 6 rounds interleaved with CUDA
 * (bench/results/gpu-vulkan-normin-h100-20261206T1452/): tg128 SmolLM2-135M's geometry in q4_1 (rows of 576) 747 against
 * 619 t/s (+21%, 0.71x of CUDA against 0.59x); at rows of 2048 (1b) q4_K 770 against 719 (+7%) but q4_0 772 against
 * 799 (-3%); at 4096 (7b q4_0) 220 against 279 (-21%). */
#include <string.h>
#include "vk_plan.h"

/* the mat-vec node dp runs first (mul_mat_vec_rpg: the gate, its slot 3), for the debug log */
static const char *mv_name(const dispatch *dp) {
    return (dp->shader == VKP_SH_MUL_MAT_VEC_RPG ? dp->slot[3] : dp->slot[VKP_SLOT_DST])->name;
}

/* the setup that built dp (mul_mat_vec_rp, _rpe, _rpn or _rpg), again: its specialization, workgroups and extras */
static int rp_setup(pyg_device *d, const dispatch *dp, uint32_t spec[2], uint64_t *work, uint32_t ex[2]) {
    int sh = dp->shader;
    const pyg_tensor *y = dp->slot[VKP_SLOT_DST];
    return sh == VKP_SH_MUL_MAT_VEC_RPG ? vkp_rp_glu_setup(d, dp->slot[3], dp->add_out, y, spec, work, ex)
         : sh == VKP_SH_MUL_MAT_VEC_RPE || sh == VKP_SH_MUL_MAT_VEC_RPN ? vkp_mv_rp_epi_setup(d, y, sh, spec, work, ex)
         : vkp_mv_rp_setup(d, y, spec, work, ex);
}

/* dp, a mul_mat_vec_rp / _rpe / _rpg dispatch as built, runs the same build with specialization `bits` added (its
 * workgroup size as the setup chose it); 0 where that pipeline cannot be made here (logged), dp left as it was */
static int respecialize(pyg_device *d, dispatch *dp, uint32_t bits) {
    int sh = dp->shader;
    uint32_t spec[2], ex[2]; uint64_t work;
    int ok = rp_setup(d, dp, spec, &work, ex);
    if (!ok || (spec[0] & ~(1u << 16)) != (dp->spec0 & ~(1u << 16))) return 0;   /* (bit 16 kept: the fold-in build) */
    spec[0] = dp->spec0 | bits;
    VkPipeline pipe = VK_NULL_HANDLE;
    pyg_error *e = vkp_get_pipeline(d, sh, spec, &pipe);
    if (e) {   /* (the build without the bits stays in use) */
        vkp_log(PYG_LOG_WARN, "%s: the %s pipeline with 0x%x failed (%s); the build without runs", d->props.deviceName,
                vkp_shader_name(sh), bits, vkp_error_text(e));
        vkp_error_free(e);
        return 0;
    }
    dp->pipe = pipe;
    dp->spec0 = spec[0];
    return 1;
}

static int norm_in(pyg_device *d, const dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p) {
    if (d->opts.rp_norm_in == VKP_OFF || ns < 0 || ns >= nd) return 0;
    int glu = dp->shader == VKP_SH_MUL_MAT_VEC_RPG;
    if (!glu && dp->shader != VKP_SH_MUL_MAT_VEC_RPE) return 0;
    const dispatch *nm = &dps[ns];
    const pyg_tensor *m = nm->slot[VKP_SLOT_DST], *x = nm->slot[0], *w = nm->slot[1], *norm = nm->slot[3];
    const pyg_tensor *r = nm->add_out ? nm->slot[2] : NULL;
    if (!m || !x || !w || !norm || dp->slot[1] != m || pyg_tensor_nrows(m) != 1 || dp->xout[1] || dp->xout[2]) return 0;
    if (d->opts.rp_norm_in == VKP_AUTO && m->ne[0] > 1024) return 0;   /* (H100, interleaved: below) */
    const pyg_tensor *rd[3] = { x, r, w };
    for (int k = 0; k < 3; k++)   /* (dps[nd] is dp: the mat-vec itself may not write over them either) */
        for (int j = ns; rd[k] && j <= nd; j++) if (vkp_dispatch_writes_into(&dps[j], rd[k])) return 0;
    if (!respecialize(d, dp, 1u << 11 | (r ? 1u << 12 : 0u))) return 0;
    dp->slot[1] = x;
    if (r) { dp->xout[1] = r; dp->xout_word[1] = 20; dp->xout_ro[1] = 1; }
    dp->xout[2] = w; dp->xout_word[2] = 26; dp->xout_ro[2] = 1;
    p[96 + (glu ? 8 : 7)] = (uint32_t)norm->op_params[0];   /* eps (float bits) */
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' recomputes rms_norm '%s': %s norm-in", mv_name(dp), norm->name, vkp_shader_name(dp->shader));
    return 1;
}

/* mv_q8 for the repacked mat-vecs: dispatch dp (mul_mat_vec_rp, _rpe or _rpg; q4_0, q4_1 or q6_K weights, whose
 * activations are quantized per 32 as the copy is) reading the result m of the fused norm dispatch dps[ns], which can
 * write m's int8 blocks (vk_graph.c marked it q8 = 1), reads that copy at binding 1 instead of quantizing m
 * (mul_mat_vec_rp.comp's q8-in, specialization bit 13): the same bytes. The copy is m as the norm wrote it, so nothing
 * from that dispatch up to this one may write over m. The norm's Q8_OUT build is chosen once a mat-vec reads its copy. */
static int q8_in(pyg_device *d, dispatch *dps, int nd, int ns, dispatch *dp) {
    if (!d->opts.mv_q8 || ns < 0 || ns >= nd || dps[ns].q8 != 1) return 0;
    int sh = dp->shader;
    if (sh != VKP_SH_MUL_MAT_VEC_RP && sh != VKP_SH_MUL_MAT_VEC_RPE && sh != VKP_SH_MUL_MAT_VEC_RPG) return 0;
    const pyg_tensor *m = dps[ns].slot[VKP_SLOT_DST];
    int ty = (int)(dp->spec0 & 255u);
    if (!m || dp->slot[1] != m || pyg_tensor_nrows(m) != 1 || (dp->spec0 >> 11 & 1u)) return 0;
    if (ty != PYG_TYPE_Q4_0 && ty != PYG_TYPE_Q4_1 && ty != PYG_TYPE_Q6_K) return 0;
    for (int j = ns + 1; j < nd; j++) if (vkp_dispatch_writes_into(&dps[j], m)) return 0;
    if (!respecialize(d, dp, 1u << 13)) return 0;
    dp->q8 = 2;
    dps[ns].q8_n++;
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' reads rms_norm '%s''s int8 copy: %s q8-in", mv_name(dp), dps[ns].slot[3]->name, vkp_shader_name(sh));
    return 1;
}

/* fold_nodes: the fold-in reader dp (built as such, its norm dispatch dps[ns], the rpn that wrote its region dps[k])
 * also writes that norm's results n and m, and the rpn the add's result a (mul_mat_vec_rp.comp's RP_NWR builds,
 * specialization bit 17), so the norm dispatch is left out of the plan (dropped; vk_graph.c). Taken for the norm's
 * first fold-in reader, where the rpn may write a at its place (vk_mv_epi.c: fold_a), n and m are rows of K f32 (the
 * same bytes, or apart), no dispatch between the norm's place and dp's touches them (they are written later than
 * the norm dispatch wrote them), they are apart from all dp touches, nobody reads the norm's int8 copy, and dp's
 * invocations, one element each, cover the row. */
static int fold_write(pyg_device *d, dispatch *dps, int nd, int ns, int k, dispatch *dp) {
    dispatch *nm = &dps[ns], *f = &dps[k];
    const pyg_tensor *n = nm->slot[3], *m = nm->slot[VKP_SLOT_DST];
    int64_t K = m->ne[0];
    if (!d->opts.fold_nodes || nm->dropped || !f->fold_a || f->fold_a != nm->add_out || (nm->q8 == 1 && nm->q8_n > 0)) return 0;
    if ((dp->spec0 | f->spec0) & 3u << 14 || !vkp_row_f32(n, K) || !vkp_row_f32(m, K)) return 0;   /* (the 8-row builds, J specialized) */
    if (!vkp_disjoint(n, m)) {   /* an in-place mul: the same elements (each invocation writes n, then m) */
        const pyg_buffer *bn, *bm; uint64_t on, om;
        if (!vkp_resolve(n, &bn, &on) || !vkp_resolve(m, &bm, &om) || bn != bm || on != om) return 0;
    }
    if (vkp_dispatch_touches(dp, n) || vkp_dispatch_touches(dp, m)) return 0;
    for (int j = ns + 1; j < nd; j++) if (vkp_dispatch_touches(&dps[j], n) || vkp_dispatch_touches(&dps[j], m)) return 0;
    uint32_t spec[2], ex[2]; uint64_t work;   /* dp's workgroups and their size */
    if (!rp_setup(d, dp, spec, &work, ex) || work * spec[1] < (uint64_t)K) return 0;
    dispatch wf = *f;
    if (!respecialize(d, &wf, 1u << 17) || !respecialize(d, dp, 1u << 17)) return 0;
    f->pipe = wf.pipe;
    f->spec0 = wf.spec0;
    f->xout[0] = f->fold_a;
    f->xout_word[0] = 14;
    dp->xout[1] = n; dp->xout_word[1] = 20;
    dp->xout[2] = m; dp->xout_word[2] = 26;
    dp->fold_wr = k + 1;
    nm->dropped = 1;
    nm->q8 = 0;
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' writes rms_norm '%s' and mul '%s', mul_mat '%s' the add '%s': the add + norm dispatch "
            "is not run (fold_nodes)", mv_name(dp), n->name, m->name, f->slot[VKP_SLOT_DST]->name, f->fold_a->name);
    return 1;
}

/* fold_norm for the readers: dispatch dp (mul_mat_vec_rpe or _rpg on q4_0, q4_1, q4_K or q6_K weights) reading the result m of the
 * fused add + norm dispatch dps[ns], whose add sums y and r, where an earlier mul_mat_vec_rpn wrote y and, for this
 * norm (its r and w the norm's), the int8 blocks of (r + y) * w and the squares (vk_mv_epi.c), reads that region at
 * binding 1 (fold-in, specialization bit 16; slot 1 empty, so the dispatch reads nothing the norm writes and shares its
 * stage) and scales its sums by 1 / rms (eps at extra word 7 or 8). Nothing else writes the region. */
static int fold_in(pyg_device *d, dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p) {
    if (!d->opts.fold_norm || ns < 0 || ns >= nd) return 0;
    int glu = dp->shader == VKP_SH_MUL_MAT_VEC_RPG, ty = (int)(dp->spec0 & 255u);
    if (!glu && dp->shader != VKP_SH_MUL_MAT_VEC_RPE) return 0;
    if (ty != PYG_TYPE_Q4_0 && ty != PYG_TYPE_Q4_1 && ty != PYG_TYPE_Q4_K && ty != PYG_TYPE_Q6_K) return 0;
    const dispatch *nm = &dps[ns];
    const pyg_tensor *m = nm->slot[VKP_SLOT_DST], *norm = nm->slot[3];
    if (!m || !norm || norm->op != PYG_OP_RMS_NORM || !nm->add_out || dp->slot[1] != m || pyg_tensor_nrows(m) != 1) return 0;
    int k = ns - 1;
    for (; k >= 0; k--) {
        const dispatch *f = &dps[k];
        const pyg_tensor *y = f->slot[VKP_SLOT_DST];
        if (f->nfold == 1 && f->slot[3] == nm->slot[1] && y && y->ne[0] == m->ne[0] &&
            ((y == nm->slot[0] && f->slot[2] == nm->slot[2]) || (y == nm->slot[2] && f->slot[2] == nm->slot[0]))) break;
    }
    if (k < 0 || !respecialize(d, dp, 1u << 16)) return 0;
    dp->slot[1] = NULL;
    dp->nfold = 2;
    dp->scratch_off = dps[k].scratch_off;
    dp->scratch_size = dps[k].scratch_size;
    p[96 + (glu ? 8 : 7)] = (uint32_t)norm->op_params[0];   /* eps (float bits) */
    vkp_log(PYG_LOG_DEBUG, "mul_mat '%s' reads rms_norm '%s' as '%s' wrote it: %s fold-in", mv_name(dp), norm->name,
            dps[k].slot[VKP_SLOT_DST]->name, vkp_shader_name(dp->shader));
    fold_write(d, dps, nd, ns, k, dp);   /* (fold_nodes: and the norm's nodes, where it can) */
    return 1;
}

int vkp_rp_norm_read(pyg_device *d, dispatch *dps, int nd, int ns, dispatch *dp, uint32_t *p) {
    return fold_in(d, dps, nd, ns, dp, p) || norm_in(d, dps, nd, ns, dp, p) || q8_in(d, dps, nd, ns, dp);
}
