/* plugins/vulkan/vk_stages.c — what a plan's dispatches read and write, and the barrier stages that follow from
 * it (vk_graph.c records the plan stage by stage). */
#include "vk_plan.h"

/* What dispatch dp reads and writes (VKP_RPD ranges at most): its tensor slots, a fused add's output, extra outputs, its
 * regions of the plan's scratch (a key no pyg_buffer has: the plan itself). Returns how many. */
int vkp_dispatch_ranges(const pyg_graph_plan *plan, const dispatch *dp, range *my, unsigned char *myw) {
    int n = 0;
    for (int s = 0; s <= VKP_NBIND; s++) {
        const pyg_tensor *t = s < VKP_NBIND ? dp->slot[s] : dp->add_out;
        if (!t) continue;
        const pyg_buffer *buf = NULL; uint64_t off = 0;
        vkp_resolve(t, &buf, &off);
        my[n] = (range){ buf, off, off + pyg_tensor_nbytes(t) };
        myw[n++] = (unsigned char)(s == VKP_SLOT_DST || s == VKP_NBIND || (s == 3 && dp->writes_slot3));
    }
    for (int k = 0; k < 3; k++) {
        if (!dp->xout[k]) continue;
        const pyg_buffer *buf = NULL; uint64_t off = 0;
        vkp_resolve(dp->xout[k], &buf, &off);
        my[n] = (range){ buf, off, off + pyg_tensor_nbytes(dp->xout[k]) };
        myw[n++] = !dp->xout_ro[k];
    }
    const pyg_buffer *own = (const pyg_buffer *)(const void *)plan;
    if (dp->fa_split || dp->dq || dp->nfold) {
        my[n] = (range){ own, dp->scratch_off, dp->scratch_off + dp->scratch_size };
        myw[n++] = dp->dq != 2 && dp->nfold != 2;   /* (the GEMM, fold_norm's reader only read it) */
    }
    if (dp->b16) { my[n] = (range){ own, dp->b16_off, dp->b16_off + dp->b16_size }; myw[n++] = dp->b16 == 1; }
    if (dp->q8) { my[n] = (range){ own, dp->q8_off, dp->q8_off + dp->q8_size }; myw[n++] = dp->q8 == 1; }
    if (dp->ks) { my[n] = (range){ own, dp->ks_off, dp->ks_off + dp->ks_size }; myw[n++] = dp->ks == 1; }
    if (dp->span) { my[n] = (range){ own, dp->span_off, dp->span_off + dp->span_size }; myw[n++] = dp->span == 1; }
    return n;
}

/* Whether dispatch dp writes into t's bytes: its output slot, a fused norm's slot 3, a fused add's output, extra outputs
 * that are written (not the read-only extra bindings). */
int vkp_dispatch_writes_into(const dispatch *dp, const pyg_tensor *t) {
    const pyg_tensor *w[6] = { dp->slot[VKP_SLOT_DST], dp->writes_slot3 ? dp->slot[3] : NULL, dp->add_out,
                               dp->xout_ro[0] ? NULL : dp->xout[0], dp->xout_ro[1] ? NULL : dp->xout[1],
                               dp->xout_ro[2] ? NULL : dp->xout[2] };
    for (int k = 0; k < 6; k++) if (w[k] && !vkp_disjoint(w[k], t)) return 1;
    return 0;
}

/* Whether dispatch dp reads or writes any of t's bytes: its slots, a fused add's output, its extra bindings (read or
 * written). */
int vkp_dispatch_touches(const dispatch *dp, const pyg_tensor *t) {
    for (int s = 0; s < VKP_NBIND; s++) if (dp->slot[s] && !vkp_disjoint(dp->slot[s], t)) return 1;
    if (dp->add_out && !vkp_disjoint(dp->add_out, t)) return 1;
    for (int k = 0; k < 3; k++) if (dp->xout[k] && !vkp_disjoint(dp->xout[k], t)) return 1;
    return 0;
}

/* Barrier stages. reorder=1: a dispatch's stage is one past the latest stage of an earlier dispatch it
 * conflicts with (reads what that one writes, or writes what it reads or writes), and the dispatches are
 * recorded stage by stage (graph order within a stage), one barrier between stages: every conflicting pair
 * keeps its order with a barrier between, and independent nodes (a layer's q/k/v mat-vecs and ropes, its
 * gate and up) share a stage. reorder=0: graph order, a barrier before a dispatch that conflicts with one
 * since the last. Fills level[0..nd), returns the number of stages. */
int vkp_plan_levels(const pyg_device *d, int nd, const range *rg, const unsigned char *rgw,
                    const int *nrg, int *level) {
    int nstage = 0;
    for (int i = 0; i < nd; i++) {
        const range *mi = rg + (size_t)i * VKP_RPD; const unsigned char *wi = rgw + (size_t)i * VKP_RPD;
        int lv = 0, floor_lv = d->opts.reorder ? 0 : (i > 0 ? level[i - 1] : 0);
        for (int j = i - 1; j >= 0; j--) {
            if (level[j] + 1 <= lv || (!d->opts.reorder && level[j] < floor_lv)) continue;
            const range *mj = rg + (size_t)j * VKP_RPD; const unsigned char *wj = rgw + (size_t)j * VKP_RPD;
            int hit = 0;
            for (int a = 0; a < nrg[i] && !hit; a++)
                for (int b = 0; b < nrg[j] && !hit; b++)
                    hit = (wi[a] || wj[b]) && mi[a].buf == mj[b].buf && mi[a].lo < mj[b].hi && mj[b].lo < mi[a].hi;
            if (hit) lv = level[j] + 1;
        }
        level[i] = lv > floor_lv ? lv : floor_lv;
        if (level[i] + 1 > nstage) nstage = level[i] + 1;
    }
    return nstage;
}
