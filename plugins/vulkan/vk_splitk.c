/* plugins/vulkan/vk_splitk.c — gemm_splitk's parts of a plan (vk_graph.c calls them): the splitk_add pass after a GEMM
 * over K splits, and the region of the plan's scratch that every split GEMM shares in turn (their stages keep them in
 * order): with option splitk_last, the tiles' counters first (zero before each run: the plan fills them; each tile's
 * last split sets its counter back), then the partial sums. */
#include <string.h>
#include "vk_plan.h"

/* dispatch c (params pc) as splitk_add.comp after GEMM gm (params pg, its split count at extra word 2): adds the partials
 * of gm's splits 1.. (the plan's scratch) into its result, one invocation an element. Not with splitk_last (extra word
 * 4): that GEMM's last split of each tile adds them itself. */
pyg_error *vkp_splitk_pass(pyg_device *d, const dispatch *gm, const uint32_t *pg, dispatch *c, uint32_t *pc, uint64_t pstride) {
    memset(c, 0, sizeof *c);
    c->slot[VKP_SLOT_DST] = gm->slot[VKP_SLOT_DST];
    c->op = gm->op;
    c->ks = 2;
    c->ks_size = gm->ks_size;
    memcpy(pc, pg, (size_t)pstride);   /* (slot 4's description) */
    uint64_t total = (uint64_t)pyg_tensor_nelements(gm->slot[VKP_SLOT_DST]);
    pc[96] = (uint32_t)total;
    pc[97] = pg[96 + 2] - 1;
    c->shader = VKP_SH_SPLITK_ADD;
    c->spec0 = 0;
    vkp_fold_groups((total + 255) / 256, c->groups);
    uint32_t specs[2] = { 0, 1 };
    return vkp_get_pipeline(d, VKP_SH_SPLITK_ADD, specs, &c->pipe);
}

/* the shared region for dispatches[0..nd) (their ks_size: each one's partials; ks_tiles: each splitk_last GEMM's tiles),
 * from *scratch_total: every ks dispatch's ks_off / ks_size set, each splitk_last GEMM's extra word 5 the partials' first
 * word; *cnt_bytes: the counters' bytes at the region's start (0: none) */
void vkp_splitk_layout(dispatch *dps, int nd, void *params, uint64_t pstride, uint64_t align, uint64_t *scratch_total,
                       uint64_t *cnt_bytes) {
    uint64_t part = 0, tiles = 0;
    for (int i = 0; i < nd; i++) {
        if (!dps[i].ks) continue;
        if (dps[i].ks_size > part) part = dps[i].ks_size;
        if (dps[i].ks_tiles > tiles) tiles = dps[i].ks_tiles;
    }
    *cnt_bytes = (tiles * 4 + 15) / 16 * 16;
    if (part == 0) return;
    for (int i = 0; i < nd; i++) {
        if (!dps[i].ks) continue;
        dps[i].ks_off = *scratch_total;
        dps[i].ks_size = *cnt_bytes + part;
        if (dps[i].ks_tiles) ((uint32_t *)((char *)params + (size_t)i * pstride))[96 + 5] = (uint32_t)(*cnt_bytes / 4);
    }
    *scratch_total += (*cnt_bytes + part + align - 1) / align * align;
}
