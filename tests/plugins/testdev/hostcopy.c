/* tests/plugins/testdev/hostcopy.c — the blocking host copies (buffer_write, buffer_read,
 * buffer_fill), modelled on the runtime the CUDA plugin builds them on.
 *
 * In the CUDA runtime a plain cudaMemcpy/cudaMemset runs on the device's *default queue* (the
 * legacy stream), which is not ordered with the non-blocking streams the plugin queues work on: a
 * host wait on such a stream does not cover it, and a kernel queued on one does not wait for it.
 * A copy from pageable host memory to the device returns once the source is staged, before the
 * bytes land; they land later, in default-queue order. A copy to the host, or a memset followed
 * by a default-queue sync, first waits for earlier default-queue work and returns when done.
 *
 * Option blocking_copies says how this plugin builds buffer_write on top of that:
 *   complete (default): the copy is done, for every queue, when buffer_write returns (the contract
 *            of plugin.h; the CUDA plugin since the fix: a copy on an internal stream, then a wait
 *            for that stream);
 *   staged:  the default-queue copy as it is (the CUDA plugin before the fix): the bytes land
 *            copy_latency_us after the host next waits for the default queue (a blocking copy
 *            does), or TD_HOLD_MAX_US after they were queued, whichever is first, and work queued
 *            on a stream meanwhile reads the old ones. (Landing after a fixed latency raced a
 *            stream copy of the same latency: a loaded CI machine saw the new bytes.) The
 *            sanitizer reports such a read (the landing is a pending write of the default queue,
 *            which no host wait on a stream covers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testdev.h"

/* Validate a buffer range; td.mu held. */
static pyg_error *check_range(const char *fn, pyg_buffer *b, uint64_t offset, uint64_t size) {
    if (!td_buffer_valid(b)) return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: not a live buffer of %s", fn, td_plugin_name);
    if (offset > b->size || size > b->size - offset)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: range [%llu, %llu) outside buffer #%d of %llu bytes", fn,
                        (unsigned long long)offset, (unsigned long long)(offset + size), b->id,
                        (unsigned long long)b->size);
    return NULL;
}

/* Host (blocking) access: the buffer range and the host range must not be pending on a stream
 * the host has not synchronized. Returns the violation error or NULL. td.mu held. */
static pyg_error *host_access(const char *fn, pyg_buffer *b, uint64_t off, uint64_t size, int buf_write,
                              const void *host, int host_write) {
    if (!td.sanitize || size == 0) return NULL;
    char where[128], msg[TD_MSG], msg2[TD_MSG];
    int bad = 0;
    td_buffer_where(b, where, sizeof where);
    if (td_san_check(&b->acc, where, off, off + size, buf_write, NULL, fn, msg, sizeof msg)) {
        td_san_violation(msg);
        bad = 1;
    }
    if (host) {
        pyg_buffer *hb = td_find_host_buffer(host, size);
        int bad2;
        if (hb) {
            char w2[128];
            td_buffer_where(hb, w2, sizeof w2);
            uint64_t lo = (uint64_t)((const uint8_t *)host - hb->base);
            bad2 = td_san_check(&hb->acc, w2, lo, lo + size, host_write, NULL, fn, msg2, sizeof msg2);
        } else {
            uint64_t lo = (uint64_t)(uintptr_t)host;
            bad2 = td_san_check(&td.hostmem, "host memory", lo, lo + size, host_write, NULL, fn, msg2, sizeof msg2);
        }
        if (bad2) {
            td_san_violation(msg2);
            if (!bad) memcpy(msg, msg2, sizeof msg);
            bad = 1;
        }
    }
    return bad ? td_error(PYG_ERR_SANITIZER, "%s", msg) : NULL;
}

/* The device's default queue (created on first use); td.mu held. */
static pyg_error *default_queue(pyg_device *d, pyg_stream **out) {
    if (!d->dflt) {
        pyg_error *e = td_stream_create_hidden(d, &d->dflt);
        if (e) return e;
    }
    *out = d->dflt;
    return NULL;
}

/* The host waits for the default queue of b's device (what a legacy-stream copy or sync does). */
static void drain_default(pyg_buffer *b) {
    if (b->dev->dflt) td_host_drain(b->dev->dflt);
}

/* buffer_write as CUDA's pageable cudaMemcpy: wait for earlier default-queue work, stage the
 * source, queue the landing on the default queue, return. td.mu held. */
static pyg_error *staged_write(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size, pyg_error *e) {
    pyg_stream *q;
    pyg_error *qe = default_queue(dst->dev, &q);
    if (qe) { td_error_free(e); return qe; }
    td_host_drain(q);
    td_cmd *c = calloc(1, sizeof *c);
    uint8_t *copy = malloc(size ? (size_t)size : 1);
    if (!c || !copy) { free(c); free(copy); td_error_free(e); return td_oom(); }
    memcpy(copy, src, (size_t)size);
    c->kind = TD_CMD_WRITE;
    c->latency_us = dst->dev->cfg.copy_latency_us;
    c->hold = 1;
    c->dst = dst->base + offset;
    c->src = copy;
    c->owned = copy;
    c->size = size;
    c->bufs[0] = dst;
    snprintf(c->what, sizeof c->what, "buffer_write of %llu bytes to buffer #%d (staged, landing on the default "
             "queue)", (unsigned long long)size, dst->id);
    td_req r;
    char where[128];
    td_buffer_where(dst, where, sizeof where);
    r.list = &dst->acc;
    r.where = where;
    r.lo = offset;
    r.hi = offset + size;
    r.write = 1;
    r.what = c->what;
    pyg_error *e2 = td_enqueue(q, c, &r, 1, 0);
    if (e2) {
        if (e) td_error_free(e2);
        else e = e2;
    }
    return e;
}

pyg_error *td_buffer_write(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) {
    td_lock();
    pyg_error *e = check_range("buffer_write", dst, offset, size);
    if (!e && size && !src) e = td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_write: src is NULL");
    if (e) { td_unlock(); return e; }
    e = host_access("buffer_write", dst, offset, size, 1, src, 0);
    if (size && dst->dev->cfg.blocking_copies == TD_BLOCKING_STAGED && !(dst->flags & PYG_BUFFER_HOST) &&
        !td_find_host_buffer(src, size)) {
        e = staged_write(dst, offset, src, size, e);
        td_unlock();
        return e;
    }
    drain_default(dst);
    td_unlock();
    if (size) memcpy(dst->base + offset, src, (size_t)size); /* done like the hardware would, race included */
    return e;
}

pyg_error *td_buffer_read(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) {
    td_lock();
    pyg_error *e = check_range("buffer_read", src, offset, size);
    if (!e && size && !dst) e = td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_read: dst is NULL");
    if (e) { td_unlock(); return e; }
    drain_default(src); /* a legacy-stream copy starts after the default queue's earlier work */
    e = host_access("buffer_read", src, offset, size, 0, dst, 1);
    td_unlock();
    if (size) memcpy(dst, src->base + offset, (size_t)size);
    return e;
}

pyg_error *td_buffer_fill(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size) {
    td_lock();
    pyg_error *e = check_range("buffer_fill", dst, offset, size);
    if (e) { td_unlock(); return e; }
    drain_default(dst);
    e = host_access("buffer_fill", dst, offset, size, 1, NULL, 0);
    td_unlock();
    if (size) memset(dst->base + offset, value, (size_t)size);
    return e;
}
