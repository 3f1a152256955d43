/* plugins/vulkan/vk_soft.c — option soft_sync: in a decode plan, a stage of the repacked mat-vecs or the fused norms
 * follows the stage before it without a pipeline barrier. Its workgroups issue the loads of their weights (which no
 * dispatch writes), then wait in the shader until every workgroup of the stage before has counted itself done on the
 * plan's counter for that stage (common.glsl's main: binding 10, words 2, 3 and 18 of the parameter block), then read
 * what the earlier stages wrote through coherent bindings. That is the CUDA plugin's programmatic dependent launch
 * (mmv_rp.cuh: the weight loads before grid_wait) in Vulkan: the weights' latency overlaps the stage before, where a
 * barrier drains it first. With soft_sync=2 the decode attention (flash_attn_dec, _dec2) waits too, at its start (no weights
 * to load), so the stage before it goes without a barrier as well.
 *
 * What it rests on, beyond the Vulkan specification: the device starts the workgroups of one queue's dispatches in
 * submission order, so a waiting workgroup never holds back one it waits for (NVIDIA's hardware does; lavapipe runs
 * the dispatches one after another, so its waits find the count complete), and a device-scope memory barrier before
 * an atomic count makes the counted workgroup's writes visible to a reader that saw the count and reads through a
 * coherent binding. Stages of other kernels keep their barrier, and so does everything in a plan with a cooperative-
 * matrix kernel (a prefill). Synchronization validation does not model synchronization through shader atomics: under
 * the validation layer the option is not applied. A wait that polls 1024 x 4096 times gives up and sets the stall
 * flag rather than hang the device; the flag is copied to the host after the run, and the next host wait on the
 * device (or the plan's next compute) fails with an error naming the option. Counters are zeroed at the start of
 * every run (vk_graph.c's fill before the first stage). */
#include <stdlib.h>
#include "vk_plan.h"

/* shaders whose waits come before their reads of earlier stages' results and read those coherently (the decode
 * attention: q, K and V; its mask through common.glsl's binding, so only where no dispatch of the plan writes it) */
static int soft_ok(int soft, const dispatch *dp, const uint32_t *p, const dispatch *dps, int nd) {
    switch (dp->shader) {
    case VKP_SH_FLASH_ATTN_DEC: case VKP_SH_FLASH_ATTN_DEC2:
        if (soft < 2) return 0;   /* (soft_sync=2 only) */
        for (int j = 0; j < nd && dp->slot[3]; j++)
            if (vkp_dispatch_writes_into(&dps[j], dp->slot[3])) return 0;
        return dp->fa_fold != 0;   /* (the merge folded in: no second dispatch) */
    case VKP_SH_MUL_MAT_VEC_RPE:   /* its rope positions and cache index through common.glsl's bindings: inputs only */
        for (int j = 0; j < nd; j++)
            for (int k = 2; k <= 3; k++)
                if (dp->slot[k] && vkp_dispatch_writes_into(&dps[j], dp->slot[k])) return 0;
        /* fall through */
    case VKP_SH_MUL_MAT_VEC_RP: case VKP_SH_MUL_MAT_VEC_RPG:
        return dp->xout[2] == NULL || dp->xout_ro[2];   /* (not fold_norm's mul_mat_vec_rpn outputs; norm-in is read coherently) */
    case VKP_SH_NORM_MUL_REG: case VKP_SH_NORM_MUL_REG_ADD: case VKP_SH_NORM_MUL_REG_Q8: case VKP_SH_NORM_MUL_REG_ADD_Q8:
        return p[96 + 1] != 0;   /* its vec4 path (the scalar one reads through common.glsl's bindings) */
    default:
        return 0;
    }
}

int vkp_soft_plan(const pyg_device *d, const dispatch *dps, int nd) {
    if (!d->opts.soft_sync || d->opts.debug_drop_barriers || d->opts.barrier != VKP_BARRIER_MEMORY || vkp_validation_active() || nd < 2)
        return 0;
    for (int i = 0; i < nd; i++)
        switch (dps[i].shader) {
        case VKP_SH_MUL_MAT_CM: case VKP_SH_MUL_MAT_CM128: case VKP_SH_MUL_MAT_CM2: case VKP_SH_MUL_MAT_CM2_128:
        case VKP_SH_MUL_MAT_CM3: case VKP_SH_MUL_MAT_CM3_128: case VKP_SH_MUL_MAT_CM4: case VKP_SH_MUL_MAT_CM4_KHR:
        case VKP_SH_FLASH_ATTN_CM: case VKP_SH_FLASH_ATTN_CM2:
            return 0;   /* a prefill: its stages are few and large */
        default:
            break;
        }
    return 1;
}

/* the counters (a word per stage and the flag: stages <= dispatches) and a host-visible word for the flag */
pyg_error *vkp_soft_setup(pyg_device *d, pyg_graph_plan *plan, int nd) {
    void *map = NULL;
    pyg_error *e = vkp_raw_device_buffer(d, ((uint64_t)nd + 2) * 4, &plan->ybuf, &plan->ymem, &map);
    if (!e) e = vkp_raw_host_buffer(d, 16, &plan->yhost, &plan->yhost_mem, &map);
    if (e) return e;
    plan->yflag = (volatile uint32_t *)map;
    plan->yflag[0] = 0;
    pthread_mutex_lock(&d->soft_lock);
    plan->soft_next = d->soft_plans;
    d->soft_plans = plan;
    __atomic_add_fetch(&d->n_soft, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&d->soft_lock);
    return NULL;
}

/* Every dispatch counts its workgroups on counter level + 1. Stage k > 0 goes without the barrier before it where
 * each of its dispatches can wait (soft_ok): they wait on counter k for every workgroup of stage k - 1 (whose own
 * dispatches waited for the stage before them, or followed a barrier: so all earlier stages are done too). */
void vkp_soft_words(const pyg_device *d, const dispatch *dps, int nd, const int *level, int nstage, uint32_t *params,
                    uint64_t pstride, unsigned char *hard) {
    uint64_t *tot = calloc((size_t)nstage + 1, sizeof *tot);
    for (int k = 0; k <= nstage; k++) hard[k] = k > 0;
    if (!tot) return;   /* (every stage keeps its barrier, and no dispatch waits) */
    for (int i = 0; i < nd; i++) tot[level[i]] += (uint64_t)dps[i].groups[0] * dps[i].groups[1] * dps[i].groups[2];
    for (int k = 1; k < nstage; k++) {
        int ok = tot[k - 1] > 0 && tot[k - 1] < UINT32_MAX;
        for (int i = 0; i < nd && ok; i++)
            if (level[i] == k) ok = soft_ok((int)d->opts.soft_sync, &dps[i], (const uint32_t *)((const char *)params + (size_t)i * pstride), dps, nd);
        hard[k] = (unsigned char)!ok;
    }
    for (int i = 0; i < nd; i++) {
        uint32_t *p = (uint32_t *)((char *)params + (size_t)i * pstride);
        int k = level[i];
        p[2] = k > 0 && !hard[k] ? (uint32_t)k : 0;
        p[3] = k > 0 && !hard[k] ? (uint32_t)tot[k - 1] + (d->opts.debug_soft_stall ? 1u : 0u) : 0;   /* (the test
                                                                                                      switch: never met) */
        p[18] = (uint32_t)k + 1;
    }
    free(tot);
}

/* after the run's closing barrier: the stall flag to the host */
void vkp_soft_record_end(pyg_device *d, pyg_graph_plan *plan) {
    VkBufferCopy c = { 0, 0, 4 };
    d->fn.vkCmdCopyBuffer(plan->cb, plan->ybuf, plan->yhost, 1, &c);
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    d->fn.vkCmdPipelineBarrier(plan->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

static pyg_error *stall_error(void) {
    return vkp_err(PYG_ERR_DEVICE, "soft_sync: a stage waited %u polls for the stage before it and went on without it, "
                   "so the results of that compute are wrong: this device does not run the workgroups of consecutive "
                   "dispatches side by side; set soft_sync=0", 1024u * 4096u);
}

/* before a compute: a finished earlier run whose wait gave up (the flag is cleared once reported) */
pyg_error *vkp_soft_check(pyg_graph_plan *plan) {
    if (!plan->yflag || plan->yflag[0] == 0) return NULL;
    plan->yflag[0] = 0;
    return stall_error();
}

/* after a host wait on the device: any live plan's flag */
pyg_error *vkp_soft_poll(pyg_device *d) {
    if (!__atomic_load_n(&d->n_soft, __ATOMIC_ACQUIRE)) return NULL;
    int stalled = 0;
    pthread_mutex_lock(&d->soft_lock);
    for (pyg_graph_plan *p = d->soft_plans; p; p = p->soft_next)
        if (p->yflag && p->yflag[0]) { p->yflag[0] = 0; stalled = 1; }
    pthread_mutex_unlock(&d->soft_lock);
    return stalled ? stall_error() : NULL;
}

void vkp_soft_destroy(pyg_device *d, pyg_graph_plan *plan) {
    if (plan->yflag) {
        pthread_mutex_lock(&d->soft_lock);
        for (pyg_graph_plan **p = &d->soft_plans; *p; p = &(*p)->soft_next)
            if (*p == plan) { *p = plan->soft_next; break; }
        __atomic_sub_fetch(&d->n_soft, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&d->soft_lock);
    }
    if (plan->ybuf) d->fn.vkDestroyBuffer(d->dev, plan->ybuf, NULL);
    if (plan->ymem) d->fn.vkFreeMemory(d->dev, plan->ymem, NULL);
    if (plan->yhost) d->fn.vkDestroyBuffer(d->dev, plan->yhost, NULL);
    if (plan->yhost_mem) d->fn.vkFreeMemory(d->dev, plan->yhost_mem, NULL);
}
