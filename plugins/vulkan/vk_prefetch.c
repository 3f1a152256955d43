/* plugins/vulkan/vk_prefetch.c — option prefetch_mb: a decode mat-vec's weights read into L2 one stage early.
 *
 * Why: on the H100 a lone 151 MB q4_0 mat-vec runs at 2.0-2.2 TB/s and an argmax over 1 GiB at 3.0 (torch's
 * rate), but the 7b decode's mat-vecs (9-25 MB each, a stage each) average 1.2 TB/s: each is one wave of
 * workgroups that loads its weights once, so its stage pays a full memory round trip and a ramp, which the
 * CUDA plugin hides by issuing the next kernel's weight loads before it waits on the previous one (programmatic
 * dependent launch). Vulkan has no such overlap, but the stage before a mat-vec (a norm, the ropes and cache
 * writes, the attention, the swiglu) moves few bytes: a prefetch dispatch there (prefetch.comp: one load per
 * 32-byte sector) streams the next mat-vec's weights into L2, at the argmax's rate, beside that stage's work.
 *
 * Placement: the plan's stages are computed as for recording (vkp_plan_levels); for every MUL_MAT dispatch with
 * one to four columns in stage L > 0 whose stage L - 1 holds no MUL_MAT and no attention over more than 8 MB
 * of K/V, a prefetch of its weights (or their repacked copy: binding 0 as the mat-vec's) joins stage L - 1,
 * up to prefetch_mb MiB per stage in graph order (a weight's first bytes where the rest does not fit: the
 * first workgroups' rows). A prefetch only reads weights, which no dispatch writes, so it conflicts with
 * nothing and changes no result. */
#include <stdlib.h>
#include <string.h>
#include "vk_plan.h"

static int heavy(const dispatch *dp) {
    if (dp->op == PYG_OP_MUL_MAT) return 1;
    if (dp->op == PYG_OP_FLASH_ATTN_EXT)
        return (dp->slot[1] ? pyg_tensor_nbytes(dp->slot[1]) : 0) + (dp->slot[2] ? pyg_tensor_nbytes(dp->slot[2]) : 0) > (8ull << 20);
    return 0;
}

pyg_error *vkp_add_prefetches(pyg_device *d, pyg_graph_plan *plan, dispatch **dpsp, uint32_t **paramsp, int *cap,
                              int *ndp, uint64_t pstride) {
    int nd = *ndp;
    if (d->opts.prefetch_mb <= 0 || !d->opts.reorder || nd < 2) return NULL;
    dispatch *dps = *dpsp;
    range *rg = calloc((size_t)nd * VKP_RPD, sizeof *rg);
    unsigned char *rgw = calloc((size_t)nd * VKP_RPD, 1), *hv = calloc((size_t)nd + 1, 1);
    int *nrg = calloc((size_t)nd, sizeof *nrg), *level = calloc((size_t)nd, sizeof *level);
    uint64_t *left = calloc((size_t)nd + 1, sizeof *left);
    int nw = 0;
    pyg_error *e = NULL;
    if (!rg || !rgw || !hv || !nrg || !level || !left) { e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "prefetch"); goto done; }
    for (int i = 0; i < nd; i++) nrg[i] = vkp_dispatch_ranges(plan, &dps[i], rg + (size_t)i * VKP_RPD, rgw + (size_t)i * VKP_RPD);
    int nstage = vkp_plan_levels(d, dps, nd, rg, rgw, nrg, level);
    for (int i = 0; i < nd; i++) if (heavy(&dps[i])) hv[level[i]] = 1;
    for (int l = 0; l < nstage; l++) left[l] = (uint64_t)d->opts.prefetch_mb << 20;
    uint64_t align = vkp_dev_align(d);
    for (int i = 0; i < nd; i++) {
        const dispatch *m = &dps[i];
        int l = level[i] - 1;
        if (m->op != PYG_OP_MUL_MAT || m->pf || !m->slot[0] || !m->slot[1] || m->slot[1]->ne[1] > 4 || l < 0 || hv[l]) continue;
        uint64_t bytes = pyg_tensor_nbytes(m->slot[0]);
        if (m->rp) vkp_repack_buffer(m->rp, &bytes);
        uint64_t take = bytes < left[l] ? bytes : left[l];
        take &= ~(uint64_t)1023;
        if (take < (256u << 10)) continue;
        left[l] -= take;
        if (nd + nw >= *cap) {   /* room for it */
            int nc = *cap * 2;
            dispatch *nd2 = realloc(*dpsp, (size_t)nc * sizeof *nd2);
            if (nd2) *dpsp = nd2;
            uint32_t *np = nd2 ? realloc(*paramsp, (size_t)nc * pstride) : NULL;
            if (!nd2 || !np) { e = vkp_err(PYG_ERR_OUT_OF_MEMORY, "prefetch"); goto done; }
            *paramsp = np;
            memset(*dpsp + *cap, 0, (size_t)(nc - *cap) * sizeof **dpsp);
            memset((char *)np + (size_t)*cap * pstride, 0, (size_t)(nc - *cap) * pstride);
            *cap = nc;
            dps = *dpsp;
            m = &dps[i];
        }
        dispatch *f = &dps[nd + nw];
        uint32_t *p = (uint32_t *)((char *)*paramsp + (size_t)(nd + nw) * pstride);
        memset(f, 0, sizeof *f);
        memset(p, 0, (size_t)pstride);
        f->slot[0] = m->slot[0];
        f->rp = m->rp;   /* (the plan holds its reference for the mat-vec) */
        f->pf = 1;
        f->pf_level = l;
        f->op = PYG_OP_NONE;
        f->shader = VKP_SH_PREFETCH;
        const pyg_buffer *b = NULL; uint64_t off = 0;
        vkp_resolve(m->slot[0], &b, &off);
        p[0] = m->rp ? 0 : (uint32_t)(off & (align - 1));
        p[1] = (uint32_t)m->slot[0]->type;
        p[96] = (uint32_t)(take / 32);
        vkp_fold_groups((take / 32 + 1023) / 1024 < 1024 ? (take / 32 + 1023) / 1024 : 1024, f->groups);
        if ((e = vkp_get_pipeline(d, VKP_SH_PREFETCH, (uint32_t[2]){ 0, 1 }, &f->pipe))) goto done;
        nw++;
    }
    if (nw) vkp_log(PYG_LOG_DEBUG, "plan: %d prefetch dispatch(es), at most %lld MiB per stage", nw, (long long)d->opts.prefetch_mb);
    *ndp = nd + nw;
done:
    free(rg); free(rgw); free(hv); free(nrg); free(level); free(left);
    return e;
}
