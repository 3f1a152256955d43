/* plugins/vulkan/vk_barrier.c — what a plan records between two of its stages (option barrier; the
 * stages themselves are vk_graph.c's: dispatches with no byte range in conflict share one). */
#include <stdlib.h>
#include "vk_plan.h"

/* The barrier between two stages (option barrier), after the dispatches order[k0..k1) of the previous
 * one: a global memory barrier (compute writes before, compute reads and writes after); buffer
 * barriers on each buffer that stage wrote (the writes of earlier stages were made visible by the
 * barriers before it: their destination scope is every later command); the synchronization2
 * barrier with storage accesses only; or, to measure what the memory dependency costs, an
 * execution dependency alone (not a valid order for the data: sync validation reports it). */
pyg_error *vkp_stage_barrier(pyg_device *d, pyg_graph_plan *plan, const range *rg, const unsigned char *rgw, const int *nrg,
                             int rpd, const int *order, int k0, int k1) {
    const VkPipelineStageFlags cs = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT;
    plan->n_barriers++;
    if (d->opts.barrier == VKP_BARRIER_SYNC2 && d->barrier2) {
        VkMemoryBarrier2KHR mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER_2_KHR,
            .srcStageMask = VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT_KHR, .srcAccessMask = VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT_KHR,
            .dstStageMask = VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT_KHR,
            .dstAccessMask = VK_ACCESS_2_SHADER_STORAGE_READ_BIT_KHR | VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT_KHR };
        VkDependencyInfoKHR di = { .sType = VK_STRUCTURE_TYPE_DEPENDENCY_INFO_KHR, .memoryBarrierCount = 1, .pMemoryBarriers = &mb };
        d->barrier2(plan->cb, &di);
        return NULL;
    }
    if (d->opts.barrier == VKP_BARRIER_EVENT && plan->n_barriers <= plan->n_events) {
        VkEvent ev = plan->events[plan->n_barriers - 1];
        VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT, .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
        d->fn.vkCmdSetEvent(plan->cb, ev, cs);
        d->fn.vkCmdWaitEvents(plan->cb, 1, &ev, cs, cs, 1, &mb, 0, NULL, 0, NULL);
        return NULL;
    }
    if (d->opts.barrier == VKP_BARRIER_DEBUG_EXEC) {
        d->fn.vkCmdPipelineBarrier(plan->cb, cs, cs, 0, 0, NULL, 0, NULL, 0, NULL);
        return NULL;
    }
    if (d->opts.barrier == VKP_BARRIER_BUFFER) {
        int cap = 0;
        for (int k = k0; k < k1; k++) cap += nrg[order[k]];
        VkBufferMemoryBarrier *bb = calloc((size_t)(cap > 0 ? cap : 1), sizeof *bb);
        if (!bb) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "plan barriers");
        int nb = 0;
        for (int k = k0; k < k1; k++) {
            const range *m = rg + (size_t)order[k] * rpd; const unsigned char *w = rgw + (size_t)order[k] * rpd;
            for (int a = 0; a < nrg[order[k]]; a++) {
                if (!w[a]) continue;
                VkBuffer vb = m[a].buf == (const pyg_buffer *)(void *)plan ? plan->sbuf : m[a].buf->buf;
                int seen = 0;
                for (int b = 0; b < nb && !seen; b++) seen = bb[b].buffer == vb;
                if (seen) continue;
                bb[nb++] = (VkBufferMemoryBarrier){ .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
                    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT, .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                    .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED, .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                    .buffer = vb, .offset = 0, .size = VK_WHOLE_SIZE };
            }
        }
        d->fn.vkCmdPipelineBarrier(plan->cb, cs, cs, 0, 0, NULL, (uint32_t)nb, bb, 0, NULL);
        free(bb);
        return NULL;
    }
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT, .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT };
    d->fn.vkCmdPipelineBarrier(plan->cb, cs, cs, 0, 1, &mb, 0, NULL, 0, NULL);
    return NULL;
}
