/* tests/plugins/testdev/queue.c — streams as worker threads, events, queued copies.
 *
 * A stream is a FIFO drained by its own worker thread. Queued calls return at once; the worker
 * sleeps the configured latency and only then copies, reading host memory at that time, so a
 * host that reuses a source too early gets wrong data, as on real hardware. An event is a point
 * in a FIFO: (stream, seq of its record command). stream_wait_event snapshots that point when it
 * is called, so a wait only ever refers to work already queued and can never deadlock; a
 * re-recorded event does not move a wait queued before. A failure on the worker is kept on the
 * stream and returned once, by the next call on that stream or its next synchronize; event_query
 * and event_synchronize on an event recorded on it report it too. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "testdev.h"

int td_stream_valid(const pyg_stream *s) {
    for (int i = 0; i < td.n_streams; i++)
        if (td.streams[i] == s) return !s->destroyed;
    return 0;
}

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_us(int64_t us) {
    if (us <= 0) return;
    struct timespec ts = { (time_t)(us / 1000000), (long)(us % 1000000) * 1000 };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {}
}

/* Run one copy or compute (td.mu NOT held). Returns NULL or an error for the stream. */
static pyg_error *run_cmd(pyg_stream *s, td_cmd *c, int *san) {
    pyg_error *e = NULL;
    *san = 0;
    if (c->serialize) pthread_mutex_lock(&s->dev->exec_mu);
    sleep_us(c->latency_us);
    switch (c->kind) {
    case TD_CMD_WRITE:
        if (c->snapshot && memcmp(c->snapshot, c->src, (size_t)c->size)) {
            uint64_t k = 0;
            while (k < c->size && c->snapshot[k] == c->src[k]) k++;
            char me[96];
            td_lock();
            td_stream_label(s->id, me, sizeof me);
            td_unlock();
            e = td_error(PYG_ERR_SANITIZER,
                         "host memory changed before async write completed: %s [%s, command %llu] reads %llu bytes "
                         "from host 0x%llx; byte %llu differs from what it held when the write was queued (the "
                         "host reused the source before synchronizing the stream)",
                         me, c->what, (unsigned long long)c->seq, (unsigned long long)c->size,
                         (unsigned long long)(uintptr_t)c->src, (unsigned long long)k);
            *san = 1;
        }
        memcpy(c->dst, c->src, (size_t)c->size); /* what the hardware would copy: today's bytes */
        break;
    case TD_CMD_READ:
        memcpy(c->dst, c->src, (size_t)c->size);
        break;
    case TD_CMD_COPY:
        memmove(c->dst, c->src, (size_t)c->size);
        break;
    case TD_CMD_COMPUTE: {
        char err[512] = "";
        int rc = td_plan_run(c->plan, err, sizeof err);
        if (rc) e = td_error(rc, "compute [%s, command %llu] failed: %s", c->what, (unsigned long long)c->seq, err);
        break;
    }
    default:
        break;
    }
    if (c->serialize) pthread_mutex_unlock(&s->dev->exec_mu);
    return e;
}

static void free_cmd(td_cmd *c) {
    free(c->snapshot);
    free(c->owned);
    free(c);
}

static void *worker(void *arg) {
    pyg_stream *s = arg;
    td_mark_worker();
    td_lock();
    for (;;) {
        while (!s->head && !s->quit) pthread_cond_wait(&td.cv, &td.mu);
        td_cmd *c = s->head;
        if (!c) break;
        pyg_error *e = NULL;
        int san = 0, trace = td.trace;
        int64_t t0 = trace ? now_us() : 0;
        if (c->hold) { /* a staged landing: late until the host asks for it (bounded) */
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += TD_HOLD_MAX_US / 1000000;
            int rc = 0;
            while (s->drain_target < c->seq && !s->quit && rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&td.cv, &td.mu, &until);
        }
        if (c->kind == TD_CMD_WAIT) {
            while (c->wait_stream->done < c->wait_seq) pthread_cond_wait(&td.cv, &td.mu);
        } else if (c->kind != TD_CMD_RECORD) {
            td_unlock();
            e = run_cmd(s, c, &san);
            td_lock();
        }
        if (e) {
            if (san) td_san_violation(td_error_msg(e));
            if (!s->err) s->err = e;
            else td_error_free(e);
        }
        if (trace) {
            static const char *const kinds[] = { "write", "read", "copy", "compute", "record", "wait" };
            td_log(PYG_LOG_DEBUG, "trace stream=%d device=%s seq=%llu kind=%s start_us=%lld end_us=%lld what=%s", s->id,
                   s->dev->label, (unsigned long long)c->seq, kinds[c->kind], (long long)t0, (long long)now_us(), c->what);
        }
        s->head = c->next;
        if (!s->head) s->tail = NULL;
        s->done = c->seq;
        for (int i = 0; i < 2; i++)
            if (c->bufs[i]) c->bufs[i]->inflight--;
        if (c->plan) {
            for (int i = 0; i < c->plan->n_bufs; i++) c->plan->bufs[i]->inflight--;
            c->plan->inflight--;
        }
        pthread_cond_broadcast(&td.cv);
        free_cmd(c);
    }
    td_unlock();
    return NULL;
}

/* ---------------------------------------------------------------- enqueue */

pyg_error *td_enqueue(pyg_stream *s, td_cmd *c, const td_req *reqs, int nreq, int blocking) {
    if (s->err) { /* an earlier asynchronous failure: report it, queue nothing */
        pyg_error *e = s->err;
        s->err = NULL;
        free_cmd(c);
        return e;
    }
    uint64_t seq = s->enq + 1;
    if (td_clock_join(&s->clock, &td.host) || td_clock_set(&s->clock, s->id, seq)) {
        free_cmd(c);
        return td_oom();
    }
    c->seq = seq;
    c->serialize = !(s->dev->cfg.caps & PYG_CAP_MULTI_STREAM);
    char *first = NULL;
    int n_bad = 0;
    if (td.sanitize) {
        char msg[TD_MSG];
        if (td_san_quirk_check(s, msg, sizeof msg)) {
            td_san_violation(msg);
            if (!first) first = strdup(msg);
            n_bad++;
        }
        for (int i = 0; i < nreq; i++) {
            if (td_san_check(reqs[i].list, reqs[i].where, reqs[i].lo, reqs[i].hi, reqs[i].write, s,
                             reqs[i].what, msg, sizeof msg)) {
                td_san_violation(msg);
                if (!first) first = strdup(msg);
                n_bad++;
            }
        }
        for (int i = 0; i < nreq; i++)
            td_san_add(reqs[i].list, reqs[i].lo, reqs[i].hi, reqs[i].write, s, seq, reqs[i].what);
    }
    for (int i = 0; i < 2; i++)
        if (c->bufs[i]) c->bufs[i]->inflight++;
    if (c->plan) {
        for (int i = 0; i < c->plan->n_bufs; i++) c->plan->bufs[i]->inflight++;
        c->plan->inflight++;
    }
    c->next = NULL;
    if (s->tail) s->tail->next = c; else s->head = c;
    s->tail = c;
    s->enq = seq;
    pthread_cond_broadcast(&td.cv);
    pyg_error *e = NULL;
    if (blocking) { /* the cap is missing: a blocking copy in stream order */
        td_clock snap = { 0 };
        int ok = td_clock_copy(&snap, &s->clock) == 0;
        while (s->done < seq) pthread_cond_wait(&td.cv, &td.mu);
        if (ok) td_clock_join(&td.host, &snap);
        td_clock_free(&snap);
        if (s->err) { e = s->err; s->err = NULL; }
    }
    if (n_bad) {
        if (e) td_error_free(e);
        e = td_error(PYG_ERR_SANITIZER, "%s%s", first ? first : "sanitizer violation",
                     n_bad > 1 ? " (and more: see the log)" : "");
    }
    free(first);
    return e;
}

/* ---------------------------------------------------------------- streams */

/* A new stream of dev with its worker; td.mu held. */
static pyg_error *stream_new(pyg_device *dev, int hidden, pyg_stream **out) {
    pyg_stream *s = calloc(1, sizeof *s);
    if (!s) return td_oom();
    s->dev = dev;
    s->hidden = hidden;
    if (td.n_streams == td.cap_streams) {
        int cap = td.cap_streams ? td.cap_streams * 2 : 16;
        pyg_stream **v = realloc(td.streams, (size_t)cap * sizeof *v);
        if (!v) { free(s); return td_oom(); }
        td.streams = v;
        td.cap_streams = cap;
    }
    s->id = td.n_streams;
    int rc = pthread_create(&s->thread, NULL, worker, s); /* it waits for td.mu before it runs */
    if (rc) {
        free(s);
        return td_error(PYG_ERR_DEVICE, "stream_create: cannot start a worker thread (%s)", strerror(rc));
    }
    s->thread_started = 1;
    td.streams[td.n_streams++] = s; /* kept after destroy: clocks and records name stream ids */
    *out = s;
    return NULL;
}

pyg_error *td_stream_create(pyg_device *dev, uint32_t flags, pyg_stream **out) {
    if (!td_device_valid(dev) || !out) return td_error(PYG_ERR_INVALID_ARGUMENT, "stream_create: bad device or out");
    *out = NULL;
    if (flags != PYG_STREAM_DEFAULT) return td_error(PYG_ERR_INVALID_ARGUMENT, "stream_create: unknown flags 0x%x", flags);
    td_lock();
    pyg_error *e = stream_new(dev, 0, out);
    td_unlock();
    return e;
}

pyg_error *td_stream_create_hidden(pyg_device *dev, pyg_stream **out) {
    return stream_new(dev, 1, out);
}

void td_host_drain(pyg_stream *s) {
    uint64_t target = s->enq;
    if (s->drain_target < target) {
        s->drain_target = target;
        pthread_cond_broadcast(&td.cv); /* wakes a held landing */
    }
    while (s->done < target) pthread_cond_wait(&td.cv, &td.mu);
    td_clock snap = { 0 };
    if (!td_clock_copy(&snap, &s->clock) && !td_clock_set(&snap, s->id, target)) td_clock_join(&td.host, &snap);
    td_clock_free(&snap);
}

void td_stream_destroy(pyg_stream *s) {
    if (!s) return;
    td_lock();
    if (!td_stream_valid(s) || s->quit) {
        td_unlock();
        td_log(PYG_LOG_ERROR, "stream_destroy: %p is not a live stream", (void *)s);
        return;
    }
    s->quit = 1; /* the worker drains the FIFO first */
    pthread_cond_broadcast(&td.cv);
    td_unlock();
    pthread_join(s->thread, NULL);
    td_lock();
    td_clock_set(&s->clock, s->id, s->enq);
    td_clock_join(&td.host, &s->clock);
    s->destroyed = 1;
    if (s->err) {
        td_log(PYG_LOG_ERROR, "stream_destroy: unreported failure: %s", td_error_msg(s->err));
        td_error_free(s->err);
        s->err = NULL;
    }
    td_unlock();
}

pyg_error *td_stream_synchronize(pyg_stream *s) {
    td_lock();
    if (!td_stream_valid(s) || s->quit) {
        td_unlock();
        return td_error(PYG_ERR_INVALID_ARGUMENT, "stream_synchronize: not a live stream");
    }
    uint64_t target = s->enq;
    td_clock snap = { 0 };
    pyg_error *e = NULL;
    if (td_clock_copy(&snap, &s->clock) || td_clock_set(&snap, s->id, target)) e = td_oom();
    while (s->done < target) pthread_cond_wait(&td.cv, &td.mu);
    if (!e) td_clock_join(&td.host, &snap);
    td_clock_free(&snap);
    if (s->err) {
        if (e) td_error_free(e);
        e = s->err;
        s->err = NULL;
    }
    td_unlock();
    return e;
}

/* ---------------------------------------------------------------- events */

static pyg_error *need_cap(pyg_device *d, uint64_t cap, const char *fn, const char *capname) {
    if (d->cfg.caps & cap) return NULL;
    return td_error(PYG_ERR_UNSUPPORTED, "%s on %s: the device does not declare %s", fn, d->label, capname);
}

pyg_error *td_event_create(pyg_device *dev, pyg_event **out) {
    if (!td_device_valid(dev) || !out) return td_error(PYG_ERR_INVALID_ARGUMENT, "event_create: bad device or out");
    *out = NULL;
    td_lock();
    pyg_error *e = need_cap(dev, PYG_CAP_EVENTS, "event_create", "PYG_CAP_EVENTS");
    td_unlock();
    if (e) return e;
    pyg_event *ev = calloc(1, sizeof *ev);
    if (!ev) return td_oom();
    ev->dev = dev;
    *out = ev;
    return NULL;
}

void td_event_destroy(pyg_event *e) {
    if (!e) return;
    td_lock();
    td_clock_free(&e->clock);
    td_unlock();
    free(e);
}

pyg_error *td_event_record(pyg_event *ev, pyg_stream *s) {
    if (!ev) return td_error(PYG_ERR_INVALID_ARGUMENT, "event_record: event is NULL");
    td_lock();
    pyg_error *e = NULL;
    if (!td_stream_valid(s) || s->quit) e = td_error(PYG_ERR_INVALID_ARGUMENT, "event_record: not a live stream");
    else if (ev->dev != s->dev)
        e = td_error(PYG_ERR_INVALID_ARGUMENT, "event_record: event of %s recorded on a stream of %s "
                     "(R11: events are created and recorded on their own device)", ev->dev->label, s->dev->label);
    else e = need_cap(s->dev, PYG_CAP_EVENTS, "event_record", "PYG_CAP_EVENTS");
    if (e) { td_unlock(); return e; }
    td_cmd *c = calloc(1, sizeof *c);
    if (!c) { td_unlock(); return td_oom(); }
    c->kind = TD_CMD_RECORD;
    snprintf(c->what, sizeof c->what, "event_record");
    uint64_t before = s->enq;
    e = td_enqueue(s, c, NULL, 0, 0);
    if (s->enq != before) { /* queued (perhaps with a sanitizer verdict) */
        ev->stream = s;
        ev->seq = s->enq;
        if (td_clock_copy(&ev->clock, &s->clock) && !e) e = td_oom();
    }
    td_unlock();
    return e;
}

static int event_done(const pyg_event *ev) {
    return !ev->stream || ev->stream->done >= ev->seq;
}

/* The recording stream's pending failure, copied (the stream keeps its own for synchronize). */
static pyg_error *event_error(const pyg_event *ev) {
    if (!ev->stream || !ev->stream->err) return NULL;
    return td_error(td_error_code(ev->stream->err), "%s", td_error_msg(ev->stream->err));
}

pyg_error *td_event_query(pyg_event *ev, int32_t *done) {
    if (!ev || !done) return td_error(PYG_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    td_lock();
    *done = event_done(ev);
    if (*done) td_clock_join(&td.host, &ev->clock); /* the host saw it complete: ordered */
    pyg_error *e = event_error(ev);
    td_unlock();
    return e;
}

pyg_error *td_event_synchronize(pyg_event *ev) {
    if (!ev) return td_error(PYG_ERR_INVALID_ARGUMENT, "event_synchronize: event is NULL");
    td_lock();
    pyg_error *e = need_cap(ev->dev, PYG_CAP_EVENTS, "event_synchronize", "PYG_CAP_EVENTS");
    if (!e) {
        while (!event_done(ev)) pthread_cond_wait(&td.cv, &td.mu);
        td_clock_join(&td.host, &ev->clock);
        e = event_error(ev);
    }
    td_unlock();
    return e;
}

pyg_error *td_stream_wait_event(pyg_stream *s, pyg_event *ev) {
    if (!ev) return td_error(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: event is NULL");
    td_lock();
    pyg_error *e = NULL;
    if (!td_stream_valid(s) || s->quit) e = td_error(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: not a live stream");
    else e = need_cap(s->dev, PYG_CAP_EVENTS, "stream_wait_event", "PYG_CAP_EVENTS");
    if (e || !ev->stream) { td_unlock(); return e; } /* a fresh event is complete */
    td_cmd *c = calloc(1, sizeof *c);
    if (!c) {
        td_unlock();
        return td_oom();
    }
    c->kind = TD_CMD_WAIT;
    c->wait_stream = ev->stream; /* snapshot: later records of ev do not move this wait */
    c->wait_seq = ev->seq;
    snprintf(c->what, sizeof c->what, "stream_wait_event");
    uint64_t before = s->enq;
    e = td_enqueue(s, c, NULL, 0, 0);
    /* what comes after the wait is ordered after what the event's stream had done and seen */
    if (s->enq != before && td_clock_join(&s->clock, &ev->clock) && !e) e = td_oom();
    td_unlock();
    return e;
}

/* ---------------------------------------------------------------- queued copies */

/* A host range as an access: inside a pinned buffer of ours, or plain host memory. */
static void host_req(td_req *r, char *where, size_t wlen, const void *p, uint64_t size, int write, const char *what) {
    pyg_buffer *hb = td_find_host_buffer(p, size);
    if (hb) {
        td_buffer_where(hb, where, wlen);
        r->list = &hb->acc;
        r->lo = (uint64_t)((const uint8_t *)p - hb->base);
    } else {
        snprintf(where, wlen, "host memory");
        r->list = &td.hostmem;
        r->lo = (uint64_t)(uintptr_t)p;
    }
    r->where = where;
    r->hi = r->lo + size;
    r->write = write;
    r->what = what;
}

static void buf_req(td_req *r, char *where, size_t wlen, pyg_buffer *b, uint64_t off, uint64_t size, int write,
                    const char *what) {
    td_buffer_where(b, where, wlen);
    r->list = &b->acc;
    r->where = where;
    r->lo = off;
    r->hi = off + size;
    r->write = write;
    r->what = what;
}

static pyg_error *check_buf(const char *fn, pyg_stream *s, pyg_buffer *b, uint64_t off, uint64_t size, int local) {
    if (!td_buffer_valid(b)) return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: not a live buffer of %s", fn, td_plugin_name);
    if (off > b->size || size > b->size - off)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: range [%llu, %llu) outside buffer #%d of %llu bytes", fn,
                        (unsigned long long)off, (unsigned long long)(off + size), b->id, (unsigned long long)b->size);
    if (local && b->dev != s->dev && !(b->flags & PYG_BUFFER_HOST))
        return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: buffer #%d lives on %s, the stream on %s", fn, b->id,
                        b->dev->label, s->dev->label);
    return NULL;
}

static pyg_error *check_stream(const char *fn, pyg_stream *s) {
    if (!td_stream_valid(s) || s->quit) return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: not a live stream", fn);
    return NULL;
}

pyg_error *td_stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) {
    td_lock();
    pyg_error *e = check_stream("stream_write_async", s);
    if (!e) e = check_buf("stream_write_async", s, dst, offset, size, 1);
    if (!e && size && !src) e = td_error(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: src is NULL");
    if (e) { td_unlock(); return e; }
    int pinned = td_find_host_buffer(src, size) != NULL;
    uint64_t cap = pinned ? PYG_CAP_ASYNC_WRITE_PINNED : PYG_CAP_ASYNC_WRITE_PAGEABLE;
    /* CUDA stages ordinary host memory through a bounded buffer: a larger copy waits until the
     * stream reaches it (the host then runs in lockstep with the queue) */
    int blocking = !(s->dev->cfg.caps & cap) ||
                   (!pinned && !s->dev->cfg.pageable_async && size > s->dev->cfg.staging_bytes);
    td_cmd *c = calloc(1, sizeof *c);
    if (!c) { td_unlock(); return td_oom(); }
    c->kind = TD_CMD_WRITE;
    c->latency_us = s->dev->cfg.copy_latency_us;
    c->dst = dst->base + offset;
    c->src = src;
    c->size = size;
    c->bufs[0] = dst;
    snprintf(c->what, sizeof c->what, "stream_write_async of %llu bytes to buffer #%d", (unsigned long long)size, dst->id);
    if (td.sanitize && !blocking && size && size <= TD_SNAPSHOT_MAX) { /* to see the host reuse src early */
        c->snapshot = malloc((size_t)size);
        if (c->snapshot) memcpy(c->snapshot, src, (size_t)size);
    }
    int quirk = td.sanitize && (s->dev->cfg.quirks & PYG_QUIRK_NO_ASYNC_HOST_COPY);
    td_req r[2];
    char w0[128], w1[128];
    buf_req(&r[0], w0, sizeof w0, dst, offset, size, 1, c->what);
    host_req(&r[1], w1, sizeof w1, src, size, 0, c->what);
    e = td_enqueue(s, c, r, 2, blocking);
    if (quirk) {
        char msg[TD_MSG];
        snprintf(msg, sizeof msg, "stream_write_async from host memory on %s, which declares "
                 "PYG_QUIRK_NO_ASYNC_HOST_COPY (the scheduler must use a blocking buffer_write)", s->dev->label);
        td_san_violation(msg);
        if (!e) e = td_error(PYG_ERR_SANITIZER, "%s", msg);
    }
    td_unlock();
    return e;
}

/* Is any access still recorded on [lo, hi) of list l? */
static int range_pending(const td_alist *l, uint64_t lo, uint64_t hi) {
    for (const td_access *a = l->head; a; a = a->next)
        if (a->lo < hi && a->hi > lo) return 1;
    return 0;
}

pyg_error *td_stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) {
    td_lock();
    pyg_error *e = check_stream("stream_read_async", s);
    if (!e) e = check_buf("stream_read_async", s, src, offset, size, 1);
    if (!e && size && !dst) e = td_error(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: dst is NULL");
    if (e) { td_unlock(); return e; }
    /* CUDA: a queued read into ordinary (pageable) host memory returns only when it is done */
    int blocking = !(s->dev->cfg.caps & PYG_CAP_ASYNC_READ) ||
                   (!s->dev->cfg.pageable_async && !td_find_host_buffer(dst, size));
    td_cmd *c = calloc(1, sizeof *c);
    if (!c) { td_unlock(); return td_oom(); }
    c->kind = TD_CMD_READ;
    c->latency_us = s->dev->cfg.copy_latency_us;
    c->dst = dst;
    c->src = src->base + offset;
    c->size = size;
    c->bufs[0] = src;
    snprintf(c->what, sizeof c->what, "stream_read_async of %llu bytes from buffer #%d", (unsigned long long)size, src->id);
    td_req r[2];
    char w0[128], w1[128];
    buf_req(&r[0], w0, sizeof w0, src, offset, size, 0, c->what);
    host_req(&r[1], w1, sizeof w1, dst, size, 1, c->what);
    /* The host must not look before the stream passes: make an early look see garbage, not
     * yesterday's (possibly equal) result. Only when nothing queued still uses those bytes. */
    if (td.sanitize && td.poison_reads && !blocking && size) {
        td_san_prune(r[1].list);
        if (!range_pending(r[1].list, r[1].lo, r[1].hi)) memset(dst, 0xff, (size_t)size);
    }
    e = td_enqueue(s, c, r, 2, blocking);
    td_unlock();
    return e;
}

pyg_error *td_stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t dst_offset, pyg_buffer *src,
                                uint64_t src_offset, uint64_t size) {
    td_lock();
    pyg_error *e = check_stream("stream_copy_async", s);
    if (!e) e = check_buf("stream_copy_async", s, dst, dst_offset, size, 0);
    if (!e) e = check_buf("stream_copy_async", s, src, src_offset, size, 0);
    if (!e && dst->dev != s->dev && src->dev != s->dev && !(dst->flags & PYG_BUFFER_HOST) && !(src->flags & PYG_BUFFER_HOST))
        e = td_error(PYG_ERR_INVALID_ARGUMENT, "stream_copy_async: neither buffer #%d nor #%d lives on %s", dst->id,
                     src->id, s->dev->label);
    if (!e && dst->dev != src->dev && !((dst->flags | src->flags) & PYG_BUFFER_HOST))
        e = need_cap(s->dev, PYG_CAP_PEER_COPY, "stream_copy_async between devices", "PYG_CAP_PEER_COPY");
    if (e) { td_unlock(); return e; }
    td_cmd *c = calloc(1, sizeof *c);
    if (!c) { td_unlock(); return td_oom(); }
    c->kind = TD_CMD_COPY;
    c->latency_us = s->dev->cfg.copy_latency_us;
    c->dst = dst->base + dst_offset;
    c->src = src->base + src_offset;
    c->size = size;
    c->bufs[0] = dst;
    c->bufs[1] = src;
    snprintf(c->what, sizeof c->what, "stream_copy_async of %llu bytes, buffer #%d -> #%d", (unsigned long long)size,
             src->id, dst->id);
    td_req r[2];
    char w0[128], w1[128];
    buf_req(&r[0], w0, sizeof w0, src, src_offset, size, 0, c->what);
    buf_req(&r[1], w1, sizeof w1, dst, dst_offset, size, 1, c->what);
    e = td_enqueue(s, c, r, 2, 0); /* device copies are always queued */
    td_unlock();
    return e;
}
