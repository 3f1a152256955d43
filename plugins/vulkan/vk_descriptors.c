/* plugins/vulkan/vk_descriptors.c — a plan's descriptor pool and one descriptor set per dispatch (vk_graph.c builds the
 * dispatches). Bindings: 0..4 the tensor slots, except where the dispatch reads a copy instead (binding 0: its weight's
 * repacked copy, or gemm_dq's f16 copy in the plan's scratch; binding 1: gemm_b16's, mv_q8's or fold_norm's copy; binding 2:
 * mul_mat_vec_rpg's second repacked copy); 5 its parameter block; 6 its region of the plan's scratch or a fused add's
 * output; 7 mv_q8's int8 copy or an extra output, 8 and 9 extra outputs. Where nothing is bound, the dummy buffer is,
 * except that mul_mat_vec_rpe, whose module writes bindings 6 and 7, gets an output it writes anyway there. */
#include <stdlib.h>
#include "vk_plan.h"

/* *b: the bytes of tensor t in its buffer, from the binding alignment below t to the 4-byte word past it; refused
 * where that is more than one binding may span */
static pyg_error *tensor_range(const pyg_device *d, const pyg_tensor *t, uint64_t align, VkDescriptorBufferInfo *b) {
    const pyg_buffer *buf = NULL; uint64_t off = 0;
    vkp_resolve(t, &buf, &off);
    uint64_t lo = off & ~(align - 1);
    uint64_t hi = (off + pyg_tensor_nbytes(t) + 3) & ~3ull;
    if (hi > buf->alloc_size) hi = buf->alloc_size;
    if (hi - lo > d->max_range)
        return vkp_err(PYG_ERR_UNSUPPORTED, "tensor '%s' spans %llu bytes, more than maxStorageBufferRange (%llu): "
                       "tensors larger than one binding are refused, not split", t->name,
                       (unsigned long long)(hi - lo), (unsigned long long)d->max_range);
    *b = (VkDescriptorBufferInfo){ buf->buf, lo, hi - lo };
    return NULL;
}

pyg_error *vkp_plan_descriptors(pyg_device *d, pyg_graph_plan *plan, const dispatch *dps, int nd, uint64_t pstride,
                                VkDescriptorSet **out) {
    pyg_error *e = NULL;
    const uint64_t align = vkp_dev_align(d);
    *out = NULL;
    if (nd > 0) {
        VkDescriptorPoolSize ps[2] = { { .type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = (uint32_t)nd * (VKP_NSET - 1) },
                                       { .type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, .descriptorCount = (uint32_t)nd } };
        VkDescriptorPoolCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
            .maxSets = (uint32_t)nd, .poolSizeCount = 2, .pPoolSizes = ps };
        VkResult r = d->fn.vkCreateDescriptorPool(d->dev, &pi, NULL, &plan->dpool);
        if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateDescriptorPool");
    }
    VkDescriptorSet *sets = calloc((size_t)(nd > 0 ? nd : 1), sizeof *sets);
    VkDescriptorSetLayout *layouts = calloc((size_t)(nd > 0 ? nd : 1), sizeof *layouts);
    VkDescriptorBufferInfo *bi = calloc((size_t)(nd > 0 ? nd : 1) * VKP_NSET, sizeof *bi);
    VkWriteDescriptorSet *wds = calloc((size_t)(nd > 0 ? nd : 1) * 4, sizeof *wds);   /* tensors, parameters, scratch, the int8 copy and extra outputs (7..9) */
    if (!sets || !layouts || !bi || !wds) {
        free(sets); free(layouts); free(bi); free(wds);
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "graph_plan_create");
    }
    if (nd > 0) {
        for (int i = 0; i < nd; i++) layouts[i] = d->dsl;
        VkDescriptorSetAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
            .descriptorPool = plan->dpool, .descriptorSetCount = (uint32_t)nd, .pSetLayouts = layouts };
        VkResult r = d->fn.vkAllocateDescriptorSets(d->dev, &ai, sets);
        if (r != VK_SUCCESS) e = vkp_vk_err(r, "vkAllocateDescriptorSets");
    }
    for (int i = 0; i < nd && !e; i++) {
        for (int s = 0; s < VKP_NBIND; s++) {
            VkDescriptorBufferInfo *b = &bi[i * VKP_NSET + s];
            const pyg_tensor *t = dps[i].slot[s];
            if (!t) { *b = (VkDescriptorBufferInfo){ d->dummy, 0, VK_WHOLE_SIZE }; continue; }
            if ((e = tensor_range(d, t, align, b))) break;
        }
        bi[i * VKP_NSET + VKP_NBIND] = (VkDescriptorBufferInfo){ plan->pbuf, (uint64_t)i * pstride, VKP_PARAM_WORDS * 4 };
        bi[i * VKP_NSET + VKP_BIND_SCRATCH] = dps[i].fa_split || dps[i].dq == 1 || dps[i].nfold == 1
            ? (VkDescriptorBufferInfo){ plan->sbuf, dps[i].scratch_off, dps[i].scratch_size }
            : (VkDescriptorBufferInfo){ d->dummy, 0, VK_WHOLE_SIZE };
        if (dps[i].ks)   /* gemm_splitk: the partials of splits 1.. (the GEMM writes them, splitk_add reads them) */
            bi[i * VKP_NSET + VKP_BIND_SCRATCH] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].ks_off, dps[i].ks_size };
        else if (vkp_is_cm4(dps[i].shader))
            bi[i * VKP_NSET + VKP_BIND_SCRATCH] = bi[i * VKP_NSET + VKP_SLOT_DST];   /* (its module writes binding 6; unsplit
            it never does, but for the validation layer every dispatch of it does: its result, which it writes anyway,
            not the dummy others of its stage would "write" too) */
        if (dps[i].span)   /* fa_span: the open chunks (fa_mask_span writes them, flash_attn_cm3 reads them) */
            bi[i * VKP_NSET + VKP_BIND_SCRATCH] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].span_off, dps[i].span_size };
        if (dps[i].dq == 2)   /* the GEMM's weights: the f16 copy */
            bi[i * VKP_NSET + 0] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].scratch_off, dps[i].scratch_size };
        if (dps[i].b16 == 1)
            bi[i * VKP_NSET + VKP_BIND_SCRATCH] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].b16_off, dps[i].b16_size };
        if (dps[i].b16 == 2)   /* the GEMM's activations: the f16 copy */
            bi[i * VKP_NSET + 1] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].b16_off, dps[i].b16_size };
        bi[i * VKP_NSET + VKP_BIND_Q8] = dps[i].q8 == 1 ? (VkDescriptorBufferInfo){ plan->sbuf, dps[i].q8_off, dps[i].q8_size }
                                                        : (VkDescriptorBufferInfo){ d->dummy, 0, VK_WHOLE_SIZE };
        if (dps[i].b16 == 1 && (dps[i].shader == VKP_SH_NORM_MUL_REG_B16 || dps[i].shader == VKP_SH_NORM_MUL_REG_ADD_B16))
            bi[i * VKP_NSET + VKP_BIND_Q8] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].b16_off, dps[i].b16_size };   /* (norm_b16: binding 7) */
        for (int x = VKP_BIND_X8; x < VKP_NSET; x++) bi[i * VKP_NSET + x] = (VkDescriptorBufferInfo){ d->dummy, 0, VK_WHOLE_SIZE };
        for (int k = 0; k < 2; k++) {   /* the mat-vec's weights: their repacked copies (mul_mat_vec_rpg: the second at binding 2) */
            const struct vkp_repack *r = k ? dps[i].rp2 : dps[i].rp;
            uint64_t rsz = 0;
            if (r) { VkBuffer rb = vkp_repack_buffer(r, &rsz); bi[i * VKP_NSET + 2 * k] = (VkDescriptorBufferInfo){ rb, 0, rsz }; }
        }
        if (dps[i].q8 == 2)   /* the mat-vec's activations: the norm's int8 copy (slot 1 still describes them) */
            bi[i * VKP_NSET + 1] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].q8_off, dps[i].q8_size };
        if (dps[i].nfold == 2)   /* fold_norm's reader: the mul_mat_vec_rpn's region */
            bi[i * VKP_NSET + 1] = (VkDescriptorBufferInfo){ plan->sbuf, dps[i].scratch_off, dps[i].scratch_size };
        if (dps[i].add_out && !e)   /* a fused add's (or rope's) output at binding 6 */
            e = tensor_range(d, dps[i].add_out, align, &bi[i * VKP_NSET + VKP_BIND_SCRATCH]);
        for (int x = 0; x < 3 && !e; x++)   /* extra outputs at bindings 7, 8, 9 */
            if (dps[i].xout[x]) e = tensor_range(d, dps[i].xout[x], align, &bi[i * VKP_NSET + VKP_BIND_Q8 + x]);
        if (e) break;
        if (dps[i].shader == VKP_SH_MUL_MAT_VEC_RPE) {   /* its module writes bindings 6 and 7 (for the validation layer, every
            dispatch of it does): the one it does not use aliases the other, which it writes anyway, not the dummy others read */
            if (!dps[i].xout[0]) bi[i * VKP_NSET + VKP_BIND_Q8] = bi[i * VKP_NSET + VKP_BIND_SCRATCH];
            else if (!dps[i].add_out) bi[i * VKP_NSET + VKP_BIND_SCRATCH] = bi[i * VKP_NSET + VKP_BIND_Q8];
        }
        for (int w = 0; w < 4; w++) {
            uint32_t first = w == 0 ? 0 : w == 1 ? VKP_NBIND : w == 2 ? VKP_BIND_SCRATCH : VKP_BIND_Q8;
            wds[4 * i + w] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = sets[i],
                .dstBinding = first, .descriptorCount = w == 0 ? VKP_NBIND : w == 3 ? VKP_NSET - VKP_BIND_Q8 : 1,
                .descriptorType = w == 1 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                .pBufferInfo = &bi[i * VKP_NSET + first] };
        }
    }
    if (!e && nd > 0) d->fn.vkUpdateDescriptorSets(d->dev, (uint32_t)nd * 4, wds, 0, NULL);
    if (VKP_PROF) vkp_prof.descriptor_updates += (uint64_t)nd;
    free(layouts); free(bi); free(wds);
    if (e) { free(sets); return e; }
    *out = sets;
    return NULL;
}
