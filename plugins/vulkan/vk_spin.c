/* plugins/vulkan/vk_spin.c — option barrier=spin (experimental): a plan with no command between its
 * stages. Stage k's dispatches wait in the shader (common.glsl's main) until counter k of the plan's
 * stage-counter buffer holds every workgroup of stage k-1, and each of their workgroups adds one to
 * counter k+1 when done (word 0: the error flag). A dispatch's three words of its parameter block
 * (VKP_SYNC_*) say which. What it rests on, beyond the Vulkan specification: the device starts the
 * workgroups of a queue's dispatches in submission order (a waiting workgroup never holds back one it
 * waits for) and an atomic count after a device-scope memory barrier makes the counted workgroup's
 * writes visible to a reader after its own barrier. Synchronization validation sees no dependency
 * between the stages (it does not model synchronization through shader atomics) and reports hazards.
 * A wait that polls VKP_SPIN_POLLS times gives up rather than hang the device: the flag is copied
 * back after the run, and the next host wait on the device (before anything reads the results) or
 * the plan's next compute fails with an error naming the option.
 * Counters are zeroed at the start of every run (vk_graph.c's fill before the first stage). */
#include "vk_plan.h"

/* The plan's counters (nstage + 1 words, device-local) and a host-visible word for the flag. */
pyg_error *vkp_spin_setup(pyg_device *d, pyg_graph_plan *plan, int nstage) {
    void *map = NULL;
    plan->ysize = ((uint64_t)nstage + 1) * 4;
    pyg_error *e = vkp_raw_device_buffer(d, plan->ysize < 16 ? 16 : plan->ysize, &plan->ybuf, &plan->ymem, &map);
    if (!e) e = vkp_raw_host_buffer(d, 16, &plan->yhost, &plan->yhost_mem, &map);
    if (e) return e;
    plan->yflag = (volatile uint32_t *)map;
    plan->yflag[0] = 0;
    pthread_mutex_lock(&d->spin_lock);
    plan->spin_next = d->spin_plans;
    d->spin_plans = plan;
    __atomic_add_fetch(&d->n_spin, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&d->spin_lock);
    return NULL;
}

static pyg_error *stall_error(void) {
    return vkp_err(PYG_ERR_DEVICE, "barrier=spin: a stage waited %u polls for the stage before it and went on "
                   "without it (the results of that compute are wrong): this device does not run the workgroups "
                   "of consecutive dispatches side by side; set barrier=memory", 1u << 22);
}

/* after a host wait: any live plan's flag (cleared once reported) */
pyg_error *vkp_spin_poll(pyg_device *d) {
    if (!__atomic_load_n(&d->n_spin, __ATOMIC_ACQUIRE)) return NULL;
    int stalled = 0;
    pthread_mutex_lock(&d->spin_lock);
    for (pyg_graph_plan *p = d->spin_plans; p; p = p->spin_next)
        if (p->yflag[0]) { p->yflag[0] = 0; stalled = 1; }
    pthread_mutex_unlock(&d->spin_lock);
    return stalled ? stall_error() : NULL;
}

/* dispatch i's words: stage `level` waits for `prev_total` workgroups on counter `level` (none for the
 * first stage; one more under debug_spin_stall) and counts itself on counter level + 1 */
void vkp_spin_words(const pyg_device *d, uint32_t *p, int level, uint32_t prev_total) {
    p[VKP_SYNC_WAIT] = level > 0 ? (uint32_t)level : 0;
    p[VKP_SYNC_TARGET] = level > 0 ? prev_total + (d->opts.debug_spin_stall ? 1u : 0u) : 0;
    p[VKP_SYNC_SIGNAL] = (uint32_t)level + 1;
}

/* after the run's closing barrier: the flag to the host */
void vkp_spin_record_end(pyg_device *d, pyg_graph_plan *plan) {
    VkBufferCopy c = { 0, 0, 4 };
    d->fn.vkCmdCopyBuffer(plan->cb, plan->ybuf, plan->yhost, 1, &c);
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_HOST_READ_BIT };
    d->fn.vkCmdPipelineBarrier(plan->cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

/* before a compute: a finished earlier run whose wait gave up */
pyg_error *vkp_spin_check(const pyg_graph_plan *plan) {
    if (!plan->yflag || plan->yflag[0] == 0) return NULL;
    plan->yflag[0] = 0;
    return stall_error();
}

void vkp_spin_destroy(pyg_device *d, pyg_graph_plan *plan) {
    if (plan->yflag) {
        pthread_mutex_lock(&d->spin_lock);
        for (pyg_graph_plan **p = &d->spin_plans; *p; p = &(*p)->spin_next)
            if (*p == plan) { *p = plan->spin_next; break; }
        __atomic_sub_fetch(&d->n_spin, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&d->spin_lock);
    }
    if (plan->ybuf) d->fn.vkDestroyBuffer(d->dev, plan->ybuf, NULL);
    if (plan->ymem) d->fn.vkFreeMemory(d->dev, plan->ymem, NULL);
    if (plan->yhost) d->fn.vkDestroyBuffer(d->dev, plan->yhost, NULL);
    if (plan->yhost_mem) d->fn.vkFreeMemory(d->dev, plan->yhost_mem, NULL);
}
