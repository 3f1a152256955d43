/* plugins/vulkan/vk_stream.c — the Vulkan plugin's streams, events and buffers (the ABI table that
 * points here is in vk_plugin.c).
 *
 * Streams: every submission of a stream waits for the stream's previous timeline value and
 * signals the next one, so stream order is real ordering, not just submission order.
 * Events own a timeline semaphore; event_record signals it from the stream's queue position.
 * Copies from host memory are staged into host-visible buffers at call time, so the caller's
 * memory is never read after the call returns (both ASYNC_WRITE caps are safe). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "vk_internal.h"

/* ---------------------------------------------------------------- streams */

void vkp_full_barrier(pyg_device *d, VkCommandBuffer cb) {
    VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
        .srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
        .dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT };
    d->fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
                               VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

void vkp_queue_idle(pyg_device *d) {
    pthread_mutex_lock(&d->queue_lock);
    VkResult r = d->fn.vkQueueWaitIdle(d->queue);
    pthread_mutex_unlock(&d->queue_lock);
    if (r != VK_SUCCESS) vkp_log(PYG_LOG_ERROR, "vkQueueWaitIdle failed (VkResult %d)", (int)r);
}

/* Timeline semaphores come from / go back to a per-device free list (see free_sems). A recycled
 * semaphore keeps its counter; users start from its current value. */
static pyg_error *sem_get(pyg_device *d, VkSemaphore *out, uint64_t *value) {
    pthread_mutex_lock(&d->lock);
    VkSemaphore sem = d->n_free_sems ? d->free_sems[--d->n_free_sems] : VK_NULL_HANDLE;
    pthread_mutex_unlock(&d->lock);
    if (!sem) {
        VkSemaphoreTypeCreateInfo ti = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
            .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE, .initialValue = 0 };
        VkSemaphoreCreateInfo si = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti };
        VkResult r = d->fn.vkCreateSemaphore(d->dev, &si, NULL, &sem);
        if (r != VK_SUCCESS) return vkp_vk_err(r, "vkCreateSemaphore");
    }
    *value = 0;
    VkResult r = d->fn.vkGetSemaphoreCounterValue(d->dev, sem, value);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkGetSemaphoreCounterValue");
    *out = sem;
    return NULL;
}

static void sem_put(pyg_device *d, VkSemaphore sem) {
    pthread_mutex_lock(&d->lock);
    if (d->n_free_sems == d->cap_free_sems) {
        int cap = d->cap_free_sems ? 2 * d->cap_free_sems : 16;
        VkSemaphore *n = realloc(d->free_sems, (size_t)cap * sizeof *n);
        if (n) { d->free_sems = n; d->cap_free_sems = cap; }
    }
    if (d->n_free_sems < d->cap_free_sems) d->free_sems[d->n_free_sems++] = sem;
    /* else: leak it rather than destroy it */
    pthread_mutex_unlock(&d->lock);
}

pyg_error *vkp_stream_create_impl(pyg_device *d, pyg_stream **out) {
    pyg_stream *s = calloc(1, sizeof *s);
    if (!s) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "stream_create");
    s->dev = d;
    VkCommandPoolCreateInfo pi = { .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
        .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, .queueFamilyIndex = d->queue_family };
    VkResult r = d->fn.vkCreateCommandPool(d->dev, &pi, NULL, &s->pool);
    if (r != VK_SUCCESS) { free(s); return vkp_vk_err(r, "vkCreateCommandPool"); }
    pyg_error *e = sem_get(d, &s->timeline, &s->value);
    if (e) {
        d->fn.vkDestroyCommandPool(d->dev, s->pool, NULL);
        free(s);
        return e;
    }
    s->vid = vkp_val_stream_new();
    vkp_val_known(s->vid, s->value);
    s->open = -1;
    *out = s;
    return NULL;
}

static pyg_error *wait_value(pyg_device *d, VkSemaphore sem, uint64_t value) {
    if (value == 0) return NULL;
    VkSemaphoreWaitInfo wi = { .sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
        .pSemaphores = &sem, .pValues = &value };
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    VkResult r = d->fn.vkWaitSemaphores(d->dev, &wi, UINT64_MAX);
    if (VKP_PROF) { vkp_prof.waits++; vkp_prof.wait_ns += vkp_now_ns() - t0; }
    return r == VK_SUCCESS ? NULL : vkp_vk_err(r, "waiting for queued work (vkWaitSemaphores)");
}

static uint64_t completed(pyg_stream *s) {
    uint64_t v = 0;
    if (s->dev->fn.vkGetSemaphoreCounterValue(s->dev->dev, s->timeline, &v) != VK_SUCCESS) return 0;
    return v;
}

static pyg_error *flush(pyg_stream *s);

void vkp_stream_destroy_impl(pyg_stream *s) {
    if (!s) return;
    pyg_device *d = s->dev;
    pyg_error *e = flush(s);
    if (!e) e = wait_value(d, s->timeline, s->value);
    if (e) { vkp_log(PYG_LOG_ERROR, "stream_destroy: %s", vkp_error_text(e)); vkp_error_free(e); d->fn.vkDeviceWaitIdle(d->dev); }
    vkp_queue_idle(d);
    vkp_val_known(s->vid, s->value);
    for (int i = 0; i < s->n_stage; i++) {
        d->fn.vkDestroyBuffer(d->dev, s->stage[i].buf, NULL);
        d->fn.vkFreeMemory(d->dev, s->stage[i].mem, NULL);
    }
    d->fn.vkDestroyCommandPool(d->dev, s->pool, NULL);   /* frees its command buffers */
    sem_put(d, s->timeline);
    free(s->stage);
    free(s->cmds);
    free(s);
}

/* A command buffer of this stream that no pending submission uses, begun for one submission. */

static pyg_error *begin_cmd(pyg_stream *s, vkp_cmd **out) {
    pyg_device *d = s->dev;
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    uint64_t done = completed(s);
    vkp_cmd *c = NULL;
    for (int i = 0; i < s->n_cmds; i++)
        if (s->cmds[i].busy_until <= done) { c = &s->cmds[i]; break; }
    if (c) {
        d->fn.vkResetCommandBuffer(c->cb, 0);
    } else {
        vkp_cmd *n = realloc(s->cmds, (size_t)(s->n_cmds + 1) * sizeof *n);
        if (!n) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "command buffer list");
        s->cmds = n;
        c = &s->cmds[s->n_cmds];
        VkCommandBufferAllocateInfo ai = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
            .commandPool = s->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1 };
        VkResult r = d->fn.vkAllocateCommandBuffers(d->dev, &ai, &c->cb);
        if (r != VK_SUCCESS) return vkp_vk_err(r, "vkAllocateCommandBuffers");
        s->n_cmds++;
    }
    c->busy_until = UINT64_MAX;
    VkCommandBufferBeginInfo bi = { .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
        .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT };
    VkResult r = d->fn.vkBeginCommandBuffer(c->cb, &bi);
    if (VKP_PROF) { vkp_prof.recordings++; vkp_prof.record_ns += vkp_now_ns() - t0; }
    if (r != VK_SUCCESS) { c->busy_until = 0; return vkp_vk_err(r, "vkBeginCommandBuffer"); }
    *out = c;
    return NULL;
}

/* The stream's open command buffer (begun on first use). */
static pyg_error *open_cmd(pyg_stream *s, VkCommandBuffer *cb) {
    if (s->open < 0) {
        vkp_cmd *c;
        pyg_error *e = begin_cmd(s, &c);
        if (e) return e;
        s->open = (int)(c - s->cmds);
        s->open_bytes = 0;
        s->n_open_acc = 0;
    }
    *cb = s->cmds[s->open].cb;
    return NULL;
}

/* Before a copy in the open command buffer: a transfer barrier only when it touches bytes an
 * earlier copy since the last barrier wrote, or writes bytes one read. */
static void open_access(pyg_stream *s, VkBuffer buf, uint64_t lo, uint64_t hi, int write) {
    int hazard = s->n_open_acc == VKP_OPEN_ACC;
    for (int i = 0; i < s->n_open_acc && !hazard; i++)
        hazard = s->open_acc[i].buf == buf && s->open_acc[i].lo < hi && lo < s->open_acc[i].hi &&
                 (write || s->open_acc[i].write);
    if (hazard) {
        VkMemoryBarrier mb = { .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT };
        s->dev->fn.vkCmdPipelineBarrier(s->cmds[s->open].cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                                        0, 1, &mb, 0, NULL, 0, NULL);
        if (VKP_PROF) vkp_prof.commands++;
        s->n_open_acc = 0;
    }
    s->open_acc[s->n_open_acc].buf = buf;
    s->open_acc[s->n_open_acc].lo = lo;
    s->open_acc[s->n_open_acc].hi = hi;
    s->open_acc[s->n_open_acc++].write = write;
}

/* Submits the open command buffer (if any) on its own. */
static pyg_error *flush(pyg_stream *s) {
    return s->open >= 0 ? vkp_submit(s, VK_NULL_HANDLE) : NULL;
}

static pyg_error *submit_impl(pyg_stream *s, VkCommandBuffer cb, VkSemaphore extra_sem, uint64_t extra_val) {
    pyg_device *d = s->dev;
    VkSemaphore ws[VKP_MAX_WAITS + 1];
    uint64_t wv[VKP_MAX_WAITS + 1];
    VkPipelineStageFlags wst[VKP_MAX_WAITS + 1];
    uint32_t nw = 0;
    if (s->value > 0) { ws[nw] = s->timeline; wv[nw] = s->value; wst[nw++] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT; }
    for (int i = 0; i < s->n_waits; i++) { ws[nw] = s->wait_sem[i]; wv[nw] = s->wait_val[i]; wst[nw++] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT; }
    VkSemaphore ss[2] = { s->timeline, extra_sem };
    uint64_t sv[2] = { s->value + 1, extra_val };
    VkTimelineSemaphoreSubmitInfo ti = { .sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
        .waitSemaphoreValueCount = nw, .pWaitSemaphoreValues = wv,
        .signalSemaphoreValueCount = extra_sem ? 2 : 1, .pSignalSemaphoreValues = sv };
    VkCommandBuffer cbs[2];
    uint32_t ncb = 0;
    int open = s->open;
    if (open >= 0) {   /* the queued copies go first; the barrier orders them before what follows */
        s->open = -1;
        uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
        vkp_full_barrier(d, s->cmds[open].cb);
        VkResult re = d->fn.vkEndCommandBuffer(s->cmds[open].cb);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.record_ns += vkp_now_ns() - t0; }
        if (re != VK_SUCCESS) { s->cmds[open].busy_until = 0; return vkp_vk_err(re, "vkEndCommandBuffer"); }
        cbs[ncb++] = s->cmds[open].cb;
    }
    if (cb) cbs[ncb++] = cb;
    VkSubmitInfo si = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .pNext = &ti,
        .waitSemaphoreCount = nw, .pWaitSemaphores = ws, .pWaitDstStageMask = wst,
        .commandBufferCount = ncb, .pCommandBuffers = cbs,
        .signalSemaphoreCount = extra_sem ? 2 : 1, .pSignalSemaphores = ss };
    uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
    pthread_mutex_lock(&d->queue_lock);
    VkResult r = d->fn.vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
    pthread_mutex_unlock(&d->queue_lock);
    if (VKP_PROF) { vkp_prof.submits++; vkp_prof.submit_ns += vkp_now_ns() - t0; }
    if (r != VK_SUCCESS) {
        if (open >= 0) s->cmds[open].busy_until = 0;
        return vkp_vk_err(r, "vkQueueSubmit");
    }
    s->value++;
    s->n_waits = 0;
    if (open >= 0) s->cmds[open].busy_until = s->value;
    return NULL;
}

pyg_error *vkp_submit(pyg_stream *s, VkCommandBuffer cb) { return submit_impl(s, cb, VK_NULL_HANDLE, 0); }

static pyg_error *get_staging(pyg_stream *s, uint64_t size, vkp_staging **out) {
    pyg_device *d = s->dev;
    uint64_t done = completed(s);
    int free_small = -1;
    for (int i = 0; i < s->n_stage; i++) {
        if (s->stage[i].busy_until > done) continue;
        if (s->stage[i].size >= size) { *out = &s->stage[i]; return NULL; }
        free_small = i;
    }
    uint64_t sz = 1 << 20;
    while (sz < size) sz <<= 1;
    vkp_staging st = { .size = sz };
    pyg_error *e = vkp_raw_buffer(d, sz, 1, &st.buf, &st.mem, &st.map, NULL);
    if (e) return e;
    if (free_small >= 0) {   /* replace an idle staging buffer that is too small */
        d->fn.vkDestroyBuffer(d->dev, s->stage[free_small].buf, NULL);
        d->fn.vkFreeMemory(d->dev, s->stage[free_small].mem, NULL);
        s->stage[free_small] = st;
        *out = &s->stage[free_small];
        return NULL;
    }
    vkp_staging *n = realloc(s->stage, (size_t)(s->n_stage + 1) * sizeof *n);
    if (!n) {
        d->fn.vkDestroyBuffer(d->dev, st.buf, NULL);
        d->fn.vkFreeMemory(d->dev, st.mem, NULL);
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "staging list");
    }
    s->stage = n;
    s->stage[s->n_stage] = st;
    *out = &s->stage[s->n_stage++];
    return NULL;
}

static pyg_error *check_range(const pyg_buffer *b, uint64_t off, uint64_t size, const char *what) {
    if (!b) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
    if (off > b->size || size > b->size - off)
        return vkp_err(PYG_ERR_INVALID_ARGUMENT, "%s: range [%llu, +%llu) outside buffer of %llu bytes", what,
                       (unsigned long long)off, (unsigned long long)size, (unsigned long long)b->size);
    return NULL;
}

#define STAGE_CHUNK (64ull << 20)

static pyg_error *write_async_impl(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    while (size > 0) {
        uint64_t n = size < STAGE_CHUNK ? size : STAGE_CHUNK;
        vkp_staging *st;
        pyg_error *e = get_staging(s, n, &st);
        if (e) return e;
        uint64_t t0 = VKP_PROF ? vkp_now_ns() : 0;
        memcpy(st->map, src, n);
        if (VKP_PROF) { vkp_prof.writes++; vkp_prof.write_bytes += n; vkp_prof.memcpy_ns += vkp_now_ns() - t0; }
        VkCommandBuffer cb;
        if ((e = open_cmd(s, &cb))) return e;
        t0 = VKP_PROF ? vkp_now_ns() : 0;
        open_access(s, dst->buf, off, off + n, 1);
        VkBufferCopy reg = { .srcOffset = 0, .dstOffset = off, .size = n };
        s->dev->fn.vkCmdCopyBuffer(cb, st->buf, dst->buf, 1, &reg);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.record_ns += vkp_now_ns() - t0; }
        st->busy_until = s->value + 1;   /* the submission that will carry the open buffer */
        vkp_val_queued(dst, off, off + n, 1, s->vid, s->value + 1);
        s->open_bytes += n;
        if (s->open_bytes >= VKP_OPEN_FLUSH && (e = flush(s))) return e;   /* large uploads stream */
        src = (const char *)src + n; off += n; size -= n;
    }
    return NULL;
}

static pyg_error *read_blocking_impl(pyg_stream *s, pyg_buffer *srcb, uint64_t off, void *dst, uint64_t size) {
    pyg_error *e = flush(s);
    if (!e) e = wait_value(s->dev, s->timeline, s->value);
    if (e) return e;
    vkp_val_known(s->vid, s->value);
    if (VKP_PROF) { vkp_prof.reads++; vkp_prof.read_bytes += size; }
    if (srcb->map) { memcpy(dst, (const char *)srcb->map + off, size); return NULL; }
    while (size > 0) {
        uint64_t n = size < STAGE_CHUNK ? size : STAGE_CHUNK;
        vkp_staging *st;
        if ((e = get_staging(s, n, &st))) return e;
        VkCommandBuffer cb;
        if ((e = open_cmd(s, &cb))) return e;
        VkBufferCopy reg = { .srcOffset = off, .dstOffset = 0, .size = n };
        s->dev->fn.vkCmdCopyBuffer(cb, srcb->buf, st->buf, 1, &reg);
        if (VKP_PROF) { vkp_prof.commands++; vkp_prof.staged_reads++; }
        if ((e = flush(s))) return e;
        st->busy_until = s->value;
        if ((e = wait_value(s->dev, s->timeline, s->value))) return e;
        memcpy(dst, st->map, n);
        dst = (char *)dst + n; off += n; size -= n;
    }
    return NULL;
}

pyg_error *vkp_api_stream_create(pyg_device *d, uint32_t flags, pyg_stream **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_create: NULL argument");
    return vkp_stream_create_impl(d, out);
}
void vkp_api_stream_destroy(pyg_stream *s) { vkp_stream_destroy_impl(s); }
pyg_error *vkp_api_stream_synchronize(pyg_stream *s) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_synchronize: NULL stream");
    pyg_error *e = flush(s);
    if (!e) e = wait_value(s->dev, s->timeline, s->value);
    if (!e) vkp_val_known(s->vid, s->value);
    return e;
}

/* ---------------------------------------------------------------- events */

pyg_error *vkp_api_event_create(pyg_device *d, pyg_event **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_create: NULL argument");
    pyg_event *ev = calloc(1, sizeof *ev);
    if (!ev) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "event_create");
    ev->dev = d;
    ev->vid = -1;
    pyg_error *e = sem_get(d, &ev->sem, &ev->value);   /* value = current: a fresh event is complete */
    if (e) { free(ev); return e; }
    *out = ev;
    return NULL;
}

void vkp_api_event_destroy(pyg_event *ev) {
    if (!ev) return;
    pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);   /* a pending signal must not outlive it */
    if (!e) vkp_val_known(ev->vid, ev->vvalue);
    vkp_error_free(e);
    sem_put(ev->dev, ev->sem);
    free(ev);
}

pyg_error *vkp_api_event_record(pyg_event *ev, pyg_stream *s) {
    if (!ev || !s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_record: NULL argument");
    if (ev->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_record: event and stream on different devices");
    pyg_error *e = submit_impl(s, VK_NULL_HANDLE, ev->sem, ev->value + 1);
    if (!e) { ev->value++; ev->vid = s->vid; ev->vvalue = s->value; }
    return e;
}

pyg_error *vkp_api_event_query(pyg_event *ev, int32_t *done) {
    if (!ev || !done) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    uint64_t v = 0;
    VkResult r = ev->dev->fn.vkGetSemaphoreCounterValue(ev->dev->dev, ev->sem, &v);
    if (r != VK_SUCCESS) return vkp_vk_err(r, "vkGetSemaphoreCounterValue");
    *done = v >= ev->value;
    if (*done) vkp_val_known(ev->vid, ev->vvalue);
    return NULL;
}

pyg_error *vkp_api_event_synchronize(pyg_event *ev) {
    if (!ev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "event_synchronize: NULL event");
    pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);
    if (!e) vkp_val_known(ev->vid, ev->vvalue);
    return e;
}

pyg_error *vkp_api_stream_wait_event(pyg_stream *s, pyg_event *ev) {
    if (!s || !ev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: NULL argument");
    if (ev->value == 0) return NULL;
    if (ev->dev != s->dev) {   /* semaphores don't cross VkDevices: the host waits */
        pyg_error *e = wait_value(ev->dev, ev->sem, ev->value);
        if (!e) vkp_val_known(ev->vid, ev->vvalue);
        return e;
    }
    if (s->open >= 0) {   /* copies queued before the wait must not wait for the event */
        pyg_error *e = flush(s);
        if (e) return e;
    }
    for (int i = 0; i < s->n_waits; i++)
        if (s->wait_sem[i] == ev->sem) {
            if (s->wait_val[i] < ev->value) s->wait_val[i] = ev->value;
            vkp_val_dep(s->vid, s->value + 1, ev->vid, ev->vvalue);
            return NULL;
        }
    if (s->n_waits == VKP_MAX_WAITS) {   /* flush the waits into an empty submission */
        pyg_error *e = vkp_submit(s, VK_NULL_HANDLE);
        if (e) return e;
    }
    vkp_val_dep(s->vid, s->value + 1, ev->vid, ev->vvalue);   /* the next submission waits */
    s->wait_sem[s->n_waits] = ev->sem;
    s->wait_val[s->n_waits++] = ev->value;
    return NULL;
}

/* ---------------------------------------------------------------- buffers */

pyg_error *vkp_api_buffer_alloc(pyg_device *d, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (!d || !out) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: NULL argument");
    if (flags & ~PYG_BUFFER_HOST) return vkp_err(PYG_ERR_UNSUPPORTED, "buffer_alloc: unknown flags 0x%x", flags);
    if (size > d->max_alloc)
        return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer of %llu bytes exceeds maxMemoryAllocationSize (%llu)",
                       (unsigned long long)size, (unsigned long long)d->max_alloc);
    pyg_buffer *b = calloc(1, sizeof *b);
    if (!b) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc");
    uint64_t sz = (size + 255) & ~255ull;
    if (sz == 0) sz = 256;
    pyg_error *e = vkp_raw_buffer(d, sz, (flags & PYG_BUFFER_HOST) != 0, &b->buf, &b->mem, &b->map, NULL);
    if (e) { free(b); return e; }
    b->dev = d;
    b->size = size;
    b->alloc_size = sz;
    b->flags = flags;
    b->uid = vkp_buffer_new_uid();
    pthread_mutex_lock(&d->lock);
    d->allocated += sz;
    pthread_mutex_unlock(&d->lock);
    *out = b;
    return NULL;
}

void vkp_api_buffer_free(pyg_buffer *b) {
    if (!b) return;
    vkp_val_buffer_free(b);
    vkp_repack_buffer_freed(b);
    pyg_device *d = b->dev;
    d->fn.vkDestroyBuffer(d->dev, b->buf, NULL);
    d->fn.vkFreeMemory(d->dev, b->mem, NULL);
    pthread_mutex_lock(&d->lock);
    d->allocated -= b->alloc_size;
    pthread_mutex_unlock(&d->lock);
    free(b);
}

pyg_error *vkp_api_buffer_get_info(pyg_buffer *b, pyg_buffer_info *info) {
    if (!b || !info) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: NULL argument");
    pyg_buffer_info i = { .struct_size = info->struct_size, .size = b->size, .base = NULL,
        .host_ptr = (b->flags & PYG_BUFFER_HOST) ? b->map : NULL, .flags = b->flags };
    size_t n = info->struct_size < sizeof i ? (size_t)info->struct_size : sizeof i;
    memcpy(info, &i, n);
    return NULL;
}

pyg_error *vkp_api_buffer_write(pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    pyg_error *e = check_range(dst, off, size, "buffer_write");
    if (e) return e;
    if (size && !src) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_write: NULL source");
    vkp_val_host_access(dst, off, off + size, 1, "buffer_write");
    vkp_buffer_written(dst);
    if (dst->map) { memcpy((char *)dst->map + off, src, size); return NULL; }
    pyg_device *d = dst->dev;
    pthread_mutex_lock(&d->lock);
    e = write_async_impl(d->internal, dst, off, src, size);
    if (!e) e = flush(d->internal);
    if (!e) e = wait_value(d, d->internal->timeline, d->internal->value);
    if (!e) vkp_val_known(d->internal->vid, d->internal->value);
    pthread_mutex_unlock(&d->lock);
    return e;
}

pyg_error *vkp_api_buffer_read(pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    pyg_error *e = check_range(src, off, size, "buffer_read");
    if (e) return e;
    if (size && !dst) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "buffer_read: NULL destination");
    vkp_val_host_access(src, off, off + size, 0, "buffer_read");
    if (src->map) {
        if (VKP_PROF) { vkp_prof.reads++; vkp_prof.read_bytes += size; }
        memcpy(dst, (const char *)src->map + off, size);
        return NULL;
    }
    pyg_device *d = src->dev;
    pthread_mutex_lock(&d->lock);
    e = read_blocking_impl(d->internal, src, off, dst, size);
    pthread_mutex_unlock(&d->lock);
    return e;
}

pyg_error *vkp_api_buffer_fill(pyg_buffer *dst, uint64_t off, uint8_t value, uint64_t size) {
    pyg_error *e = check_range(dst, off, size, "buffer_fill");
    if (e) return e;
    if (dst->map) {   /* (the unmapped path checks in buffer_write) */
        vkp_val_host_access(dst, off, off + size, 1, "buffer_fill");
        vkp_buffer_written(dst);
        memset((char *)dst->map + off, value, size);
        return NULL;
    }
    uint64_t chunk = size < (4u << 20) ? size : (4u << 20);
    void *tmp = malloc(chunk ? chunk : 1);
    if (!tmp) return vkp_err(PYG_ERR_OUT_OF_MEMORY, "buffer_fill");
    memset(tmp, value, chunk);
    for (uint64_t done = 0; done < size && !e; done += chunk) {
        uint64_t n = size - done < chunk ? size - done : chunk;
        e = vkp_api_buffer_write(dst, off + done, tmp, n);
    }
    free(tmp);
    return e;
}

pyg_error *vkp_api_stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL stream");
    pyg_error *e = check_range(dst, off, size, "stream_write_async");
    if (e) return e;
    if (size && !src) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL source");
    if (dst->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: buffer of another device");
    vkp_buffer_written(dst);
    return write_async_impl(s, dst, off, src, size);
}

pyg_error *vkp_api_stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL stream");
    pyg_error *e = check_range(src, off, size, "stream_read_async");
    if (e) return e;
    if (size && !dst) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL destination");
    if (src->dev != s->dev) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: buffer of another device");
    return read_blocking_impl(s, src, off, dst, size);   /* no PYG_CAP_ASYNC_READ: blocks, in stream order */
}

pyg_error *vkp_api_stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t doff, pyg_buffer *src, uint64_t soff, uint64_t size) {
    if (!s) return vkp_err(PYG_ERR_INVALID_ARGUMENT, "stream_copy_async: NULL stream");
    pyg_error *e = check_range(dst, doff, size, "stream_copy_async (dst)");
    if (!e) e = check_range(src, soff, size, "stream_copy_async (src)");
    if (e) return e;
    if (dst->dev != s->dev || src->dev != s->dev)
        return vkp_err(PYG_ERR_UNSUPPORTED, "stream_copy_async between devices (no PYG_CAP_PEER_COPY)");
    if (size == 0) return NULL;
    VkCommandBuffer cb;
    if ((e = open_cmd(s, &cb))) return e;
    vkp_buffer_written(dst);
    open_access(s, src->buf, soff, soff + size, 0);
    open_access(s, dst->buf, doff, doff + size, 1);
    VkBufferCopy reg = { .srcOffset = soff, .dstOffset = doff, .size = size };
    s->dev->fn.vkCmdCopyBuffer(cb, src->buf, dst->buf, 1, &reg);
    if (VKP_PROF) vkp_prof.commands++;
    vkp_val_queued(src, soff, soff + size, 0, s->vid, s->value + 1);
    vkp_val_queued(dst, doff, doff + size, 1, s->vid, s->value + 1);
    return NULL;
}

/* ---------------------------------------------------------------- sanitizer mode */

/* Two unordered transfer writes to the same bytes: synchronization validation must report a
 * write-after-write hazard (shows that the check can fail). */
pyg_error *vkp_validation_selftest(pyg_device *d) {
    if (!vkp_validation_active()) return vkp_validation_check();
    pyg_buffer *b = NULL;
    pyg_error *e = vkp_api_buffer_alloc(d, 256, PYG_BUFFER_DEVICE, &b);
    if (e) return e;
    pthread_mutex_lock(&d->lock);
    pyg_stream *s = d->internal;
    VkCommandBuffer cb;
    if (!(e = open_cmd(s, &cb))) {
        d->fn.vkCmdFillBuffer(cb, b->buf, 0, 256, 1u);
        d->fn.vkCmdFillBuffer(cb, b->buf, 0, 256, 2u);   /* no barrier in between */
        e = flush(s);
    }
    if (!e) e = wait_value(d, s->timeline, s->value);
    pthread_mutex_unlock(&d->lock);
    vkp_api_buffer_free(b);
    return e;
}
