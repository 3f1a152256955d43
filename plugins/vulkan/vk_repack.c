/* plugins/vulkan/vk_repack.c — repacked copies of q4_0 (q4_1, q4_K, q6_K) weights for the decode mat-vec mul_mat_vec_rp.comp
 * (option matvec_rp), made on the GPU by repack.comp and shared by every plan of the device that
 * reads the same weight.
 *
 * Layout (the CUDA plugin's repack.cuh for q4_0), for M rows of K weights, rows padded to Mp (a
 * multiple of 8) with zeros:
 *   quants  row r at r * K/2 bytes: block u's 16 quant bytes at 16 u, as in ggml's block (byte i:
 *           weight i in the low nibble, i + 16 in the high one): every row starts on 16 bytes
 *   scales  from Mp * K/2: per group of 8 rows rg and block u, the 8 rows' f16 d at
 *           ((rg * K/32 + u) * 8 + s) * 2: one 16-byte word brings a block's scales for 8 rows
 * The same bytes as ggml's blocks (18 per 32 weights).
 * q4_1: the quants as q4_0's; per group of 8 rows and block two 16-byte words from Mp * K/2, at 16-byte word
 *   (rg * K/32 + u) * 2: the 8 rows' f16 d, then their f16 m (20 bytes per 32 weights, as ggml's).
 * q4_K (the CUDA plugin's layout too), K a multiple of 256:
 *   quants  row r at r * K/2 bytes: unit u (32 weights) is the 16 bytes 16 (u % 8) of super-block u / 8's 128
 *           quant bytes, unchanged (byte i: weight 64 g + 16 h + i in the low nibble, + 32 in the high one,
 *           g = (u % 8) / 2, h = u % 2: sub-blocks 2g and 2g + 1)
 *   scales  from Mp * K/2: per group of 8 rows rg and super-block sb, 160 bytes at (rg * K/256 + sb) * 160: the 8
 *           rows' (f16 d, f16 dmin) as 32-bit words, then per sub-block pair g 32 bytes at 32 + 32 g: for each
 *           row the bytes scale[2g], scale[2g + 1], min[2g], min[2g + 1] (the 6-bit values unpacked)
 * 148 bytes per 256 weights (ggml: 144).
 * q6_K (the CUDA plugin's layout), K a multiple of 256:
 *   quants  row r at r * K/2 bytes: unit u (32 weights, block u) as 16 bytes of the low 4 bits (byte i: weight i in the
 *           low nibble, i + 16 in the high one, as q4_0)
 *   high    from Mp * K/2: row r at r * K/4 bytes, 8 per unit: byte 4h + k holds the high 2 bits of weights
 *           16h + 4i + k at bits 2i
 *   scales  from Mp * 3K/4: per group of 8 rows and super-block, 144 bytes: the 8 rows' f16 d, then per unit j of
 *           the super-block 16 bytes: each row's int8 scales 2j, 2j + 1
 * 210 bytes per 256 weights, as ggml's.
 *
 * Staleness: every pyg_buffer carries a generation that each host write into it (buffer_write,
 * buffer_fill, stream_write_async, stream_copy_async's destination) raises; a copy records the
 * generation it was made from, and vkp_repack_ensure remakes it before a plan runs when they differ.
 * Only leaves flagged PYG_TENSOR_FLAG_WEIGHT in device (not host) buffers are repacked: a graph's own
 * nodes never write them, and no host pointer reaches their bytes past these entry points.
 * Ownership: an entry is shared, counted by the plans that hold it (vkp_repack_acquire, _release); the
 * last release destroys it. Entries live in one list per process, guarded by g_mu. */
#include <stdlib.h>
#include <string.h>
#include "vk_plan.h"

struct vkp_repack {
    struct vkp_repack *next;
    pyg_device *dev;
    const pyg_buffer *src;          /* the weight's buffer (its uid keys the entry; gen: staleness) */
    uint64_t src_uid, src_off, nb1;
    int64_t K, M, Mp;
    int type;
    uint64_t gen;                   /* the source generation the copy holds; UINT64_MAX: not made yet */
    int refs;
    VkBuffer buf; VkDeviceMemory mem; uint64_t size;
    VkBuffer pbuf; VkDeviceMemory pmem;   /* repack.comp's parameter block (host-visible) */
    VkDescriptorPool dpool; VkDescriptorSet set;
    VkCommandPool pool; VkCommandBuffer cb;   /* barrier, repack.comp, barrier: recorded once */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct vkp_repack *g_list;
static uint64_t g_uid;

uint64_t vkp_buffer_new_uid(void) { return __atomic_add_fetch(&g_uid, 1, __ATOMIC_RELAXED); }
void vkp_buffer_written(pyg_buffer *b) { if (b) __atomic_add_fetch(&b->gen, 1, __ATOMIC_RELEASE); }

/* a source row's bytes (ggml's blocks), and the copy's for Mp rows: the same, but q4_K's scale groups take 160 bytes per
 * 8 rows and super-block where the blocks hold 8 x 16 (the header) */
static uint64_t row_bytes(int type, uint64_t K) {
    const pyg_type_traits *tr = pyg_type_get_traits(type);
    return K / (uint64_t)tr->block_size * (uint64_t)tr->type_size;
}
static uint64_t copy_bytes(int type, uint64_t Mp, uint64_t K) {
    return Mp * row_bytes(type, K) + (type == PYG_TYPE_Q4_K ? Mp * (K / 256) * 4 : 0);
}

int vkp_repack_eligible(const pyg_device *d, const pyg_tensor *w) {
    const pyg_buffer *b = NULL; uint64_t off = 0;
    if (!w || w->op != PYG_OP_NONE || !(w->flags & PYG_TENSOR_FLAG_WEIGHT)) return 0;
    int kq = w->type == PYG_TYPE_Q4_K || w->type == PYG_TYPE_Q6_K;
    if (w->type != PYG_TYPE_Q4_0 && w->type != PYG_TYPE_Q4_1 && !(kq && d->opts.matvec_rp_k && w->ne[0] % 256 == 0)) return 0;
    if (w->ne[2] != 1 || w->ne[3] != 1 || w->ne[0] % 32 || w->ne[0] > 24576 || w->ne[1] < 1 || w->ne[1] > (1 << 24)) return 0;
    if (w->nb[0] != (uint64_t)pyg_type_get_traits(w->type)->type_size || w->nb[1] % 2 || !vkp_resolve(w, &b, &off) || off % 2 || b->dev != d ||
        (b->flags & PYG_BUFFER_HOST)) return 0;
    uint64_t Mp = ((uint64_t)w->ne[1] + 7) / 8 * 8;
    return copy_bytes(w->type, Mp, (uint64_t)w->ne[0]) <= d->max_range;
}

static void destroy(struct vkp_repack *r) {
    pyg_device *d = r->dev;
    if (r->pool) d->fn.vkDestroyCommandPool(d->dev, r->pool, NULL);
    if (r->dpool) d->fn.vkDestroyDescriptorPool(d->dev, r->dpool, NULL);
    if (r->pbuf) d->fn.vkDestroyBuffer(d->dev, r->pbuf, NULL);
    if (r->pmem) d->fn.vkFreeMemory(d->dev, r->pmem, NULL);
    if (r->buf) d->fn.vkDestroyBuffer(d->dev, r->buf, NULL);
    if (r->mem) d->fn.vkFreeMemory(d->dev, r->mem, NULL);
    if (r->size) {
        pthread_mutex_lock(&d->lock);
        d->allocated -= r->size;
        pthread_mutex_unlock(&d->lock);
    }
    free(r);
}

/* the copy's buffer, repack.comp's parameters and descriptor set, and its command buffer */
static pyg_error *make(pyg_device *d, const pyg_tensor *w, const pyg_buffer *b, uint64_t off, struct vkp_repack *r) {
    uint64_t align = vkp_dev_align(d), K = (uint64_t)w->ne[0], nblk = K / 32;
    uint64_t src_row = row_bytes(w->type, K);
    r->size = copy_bytes(w->type, (uint64_t)r->Mp, K);
    void *map = NULL;
    pyg_error *e = vkp_raw_device_buffer(d, r->size, &r->buf, &r->mem, &map);
    if (e) { r->size = 0; return e; }
    pthread_mutex_lock(&d->lock);
    d->allocated += r->size;
    pthread_mutex_unlock(&d->lock);
    uint32_t *p = NULL;
    if ((e = vkp_raw_host_buffer(d, VKP_PARAM_WORDS * 4, &r->pbuf, &r->pmem, (void **)&p))) return e;
    memset(p, 0, VKP_PARAM_WORDS * 4);
    uint64_t lo = off & ~(align - 1), hi = (off + (uint64_t)(w->ne[1] - 1) * w->nb[1] + src_row + 3) & ~3ull;
    if (hi > b->alloc_size) hi = b->alloc_size;
    p[0] = (uint32_t)(off - lo);
    p[1] = (uint32_t)w->type;
    for (int k = 0; k < 4; k++) { p[4 + k] = (uint32_t)w->ne[k]; p[8 + k] = (uint32_t)w->nb[k]; }
    uint64_t items = (uint64_t)r->Mp / 8 * nblk;
    p[96] = (uint32_t)items;
    p[97] = (uint32_t)r->Mp;
    uint32_t groups[3];
    vkp_fold_groups((items + 63) / 64, groups);

    VkDescriptorPoolSize ps[2] = { { .type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = VKP_NSET - 1 },
                                   { .type = VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER, .descriptorCount = 1 } };
    VkDescriptorPoolCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, .maxSets = 1, .poolSizeCount = 2, .pPoolSizes = ps };
    VkResult vr = d->fn.vkCreateDescriptorPool(d->dev, &pi, NULL, &r->dpool);
    if (vr != VK_SUCCESS) return vkp_vk_err(vr, "repack: vkCreateDescriptorPool");
    VkDescriptorSetAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, .descriptorPool = r->dpool,
        .descriptorSetCount = 1, .pSetLayouts = &d->dsl };
    if ((vr = d->fn.vkAllocateDescriptorSets(d->dev, &ai, &r->set)) != VK_SUCCESS) return vkp_vk_err(vr, "repack: vkAllocateDescriptorSets");
    VkDescriptorBufferInfo bi[VKP_NSET];
    for (int s = 0; s < VKP_NSET; s++) bi[s] = (VkDescriptorBufferInfo){ d->dummy, 0, VK_WHOLE_SIZE };
    bi[0] = (VkDescriptorBufferInfo){ b->buf, lo, hi - lo };
    bi[VKP_SLOT_DST] = (VkDescriptorBufferInfo){ r->buf, 0, r->size };
    bi[VKP_NBIND] = (VkDescriptorBufferInfo){ r->pbuf, 0, VKP_PARAM_WORDS * 4 };
    VkWriteDescriptorSet wd[4];
    for (int k = 0; k < 4; k++) {
        uint32_t first = k == 0 ? 0 : k == 1 ? VKP_NBIND : k == 2 ? VKP_BIND_SCRATCH : VKP_BIND_Q8;
        wd[k] = (VkWriteDescriptorSet){ .sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, .dstSet = r->set, .dstBinding = first,
            .descriptorCount = k == 0 ? VKP_NBIND : k == 3 ? VKP_NSET - VKP_BIND_Q8 : 1,
            .descriptorType = k == 1 ? VK_DESCRIPTOR_TYPE_UNIFORM_BUFFER : VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .pBufferInfo = &bi[first] };
    }
    d->fn.vkUpdateDescriptorSets(d->dev, 4, wd, 0, NULL);

    VkPipeline pipe;
    if ((e = vkp_get_pipeline(d, VKP_SH_REPACK, (uint32_t[2]){ (uint32_t)w->type, 1 }, &pipe))) return e;
    VkCommandPoolCreateInfo ci = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, .queueFamilyIndex = d->queue_family };
    if ((vr = d->fn.vkCreateCommandPool(d->dev, &ci, NULL, &r->pool)) != VK_SUCCESS) return vkp_vk_err(vr, "repack: vkCreateCommandPool");
    VkCommandBufferAllocateInfo cai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, .commandPool = r->pool,
        .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
    VkCommandBufferBeginInfo bgi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO };
    if ((vr = d->fn.vkAllocateCommandBuffers(d->dev, &cai, &r->cb)) != VK_SUCCESS ||
        (vr = d->fn.vkBeginCommandBuffer(r->cb, &bgi)) != VK_SUCCESS) return vkp_vk_err(vr, "repack: recording");
    vkp_full_barrier(d, r->cb);   /* after whatever wrote the weights */
    d->fn.vkCmdBindPipeline(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    d->fn.vkCmdBindDescriptorSets(r->cb, VK_PIPELINE_BIND_POINT_COMPUTE, d->layout, 0, 1, &r->set, 0, NULL);
    d->fn.vkCmdDispatch(r->cb, groups[0], groups[1], groups[2]);
    vkp_full_barrier(d, r->cb);   /* before the plans that read the copy */
    if ((vr = d->fn.vkEndCommandBuffer(r->cb)) != VK_SUCCESS) return vkp_vk_err(vr, "repack: vkEndCommandBuffer");
    return NULL;
}

struct vkp_repack *vkp_repack_acquire(pyg_device *d, const pyg_tensor *w, pyg_error **err) {
    *err = NULL;
    if (!vkp_repack_eligible(d, w)) return NULL;
    const pyg_buffer *b = NULL; uint64_t off = 0;
    vkp_resolve(w, &b, &off);
    pthread_mutex_lock(&g_mu);
    struct vkp_repack *r = g_list;
    for (; r; r = r->next)
        if (r->dev == d && r->src_uid == b->uid && r->src_off == off && r->type == (int)w->type && r->K == w->ne[0] &&
            r->M == w->ne[1] && r->nb1 == w->nb[1])
            break;
    if (r) {
        r->refs++;
        pthread_mutex_unlock(&g_mu);
        return r;
    }
    r = calloc(1, sizeof *r);
    if (!r) { pthread_mutex_unlock(&g_mu); *err = vkp_err(PYG_ERR_OUT_OF_MEMORY, "repack"); return NULL; }
    *r = (struct vkp_repack){ .dev = d, .src = b, .src_uid = b->uid, .src_off = off, .nb1 = w->nb[1], .K = w->ne[0],
                              .M = w->ne[1], .Mp = (w->ne[1] + 7) / 8 * 8, .type = (int)w->type, .gen = UINT64_MAX, .refs = 1 };
    pyg_error *e = make(d, w, b, off, r);
    if (e) {
        pthread_mutex_unlock(&g_mu);
        destroy(r);
        *err = e;
        return NULL;
    }
    r->next = g_list;
    g_list = r;
    pthread_mutex_unlock(&g_mu);
    vkp_log(PYG_LOG_DEBUG, "repack: a copy of '%s' (%lld x %lld %s, %llu bytes)", w->name, (long long)r->M, (long long)r->K,
            pyg_type_get_traits(w->type)->name, (unsigned long long)r->size);
    return r;
}

struct vkp_repack *vkp_repack_get(pyg_device *d, const pyg_tensor *w, const char *node) {
    pyg_error *e = NULL;
    struct vkp_repack *r = vkp_repack_acquire(d, w, &e);
    if (e) {
        vkp_log(PYG_LOG_WARN, "mul_mat '%s': no repacked copy of '%s' (%s); the other mat-vec runs", node, w->name, vkp_error_text(e));
        vkp_error_free(e);
    }
    return r;
}

void vkp_repack_release(struct vkp_repack *r) {
    if (!r) return;
    pthread_mutex_lock(&g_mu);
    int last = --r->refs == 0;
    if (last)
        for (struct vkp_repack **pp = &g_list; *pp; pp = &(*pp)->next)
            if (*pp == r) { *pp = r->next; break; }
    pthread_mutex_unlock(&g_mu);
    if (last) {
        vkp_queue_idle(r->dev);   /* (no submission still reads it) */
        destroy(r);
    }
}

void vkp_repack_buffer_freed(const pyg_buffer *b) {
    pthread_mutex_lock(&g_mu);
    for (struct vkp_repack *r = g_list; r; r = r->next)
        if (r->src == b) __atomic_store_n(&r->src, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_mu);
}

VkBuffer vkp_repack_buffer(const struct vkp_repack *r, uint64_t *size) { *size = r->size; return r->buf; }

/* is r's copy not that of its weight's current bytes (or its buffer gone)? (lock-free: gen and src are atomic) */
static int stale(const struct vkp_repack *r) {
    const pyg_buffer *b = __atomic_load_n(&r->src, __ATOMIC_ACQUIRE);
    return !b || __atomic_load_n(&r->gen, __ATOMIC_ACQUIRE) != __atomic_load_n(&b->gen, __ATOMIC_ACQUIRE);
}

pyg_error *vkp_repack_ensure(struct vkp_repack *const *list, int n, pyg_stream *s) {
    pyg_error *e = NULL;
    int any = 0;
    for (int i = 0; i < n && !any; i++) any = stale(list[i]);   /* (every decode step: no lock when all are current) */
    if (!any) return NULL;
    pthread_mutex_lock(&g_mu);   /* (held across the wait: a plan on another stream must not run on a copy being made) */
    int queued = 0;
    for (int i = 0; i < n && !e; i++) {
        struct vkp_repack *r = list[i];
        if (!r->src) { e = vkp_err(PYG_ERR_INVALID_ARGUMENT, "repack: the buffer of a repacked weight was freed while a plan reading it lives"); break; }
        uint64_t g = __atomic_load_n(&r->src->gen, __ATOMIC_ACQUIRE);
        if (r->gen == g) continue;
        if ((e = vkp_submit(s, r->cb))) break;
        vkp_val_queued((pyg_buffer *)r->src, r->src_off, r->src_off + (uint64_t)(r->M - 1) * r->nb1 +
                       row_bytes(r->type, (uint64_t)r->K), 0,
                       s->vid, s->value);
        __atomic_store_n(&r->gen, g, __ATOMIC_RELEASE);
        queued = 1;
    }
    if (queued && !e) e = vkp_api_stream_synchronize(s);
    if (e) for (int i = 0; i < n; i++) __atomic_store_n(&list[i]->gen, UINT64_MAX, __ATOMIC_RELEASE);   /* (made again next time) */
    pthread_mutex_unlock(&g_mu);
    return e;
}
