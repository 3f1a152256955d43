/* tests/plugins/testdev/sanitize.c — the ordering checker of the test device.
 *
 * Model: happens-before with vector clocks, decided when work is QUEUED, so the verdict does not
 * depend on how the threads happened to run.
 *   - Every stream is a timeline; its commands are numbered 1, 2, ... (seq) in queue order.
 *   - stream->clock[t] = the last command of timeline t ordered before the next command queued on
 *     the stream: its own previous commands (FIFO), whatever it waited for through
 *     stream_wait_event (a device wait joins the event's clock, taken at event_record), and
 *     whatever the host had waited for when it queued (host waits join into every later enqueue).
 *   - td.host[t] = what the host has waited for: stream_synchronize, event_synchronize, an
 *     event_query that said done, a copy that blocked, stream_destroy.
 *   - Every pending access is (range, read/write, stream t, seq). A new access by stream S is
 *     legal when every conflicting access (at least one of the two writes) of another stream T
 *     has seq <= S.clock[T]. A host access (blocking buffer_write/read/fill, buffer_free) is legal
 *     when seq <= host[T] for every conflicting one.
 *   - Host memory is tracked too: an async write reads its host source, an async read writes its
 *     host destination, until the stream passes it. What the host itself does to its memory cannot
 *     be seen; queue.c compares the source bytes at enqueue and at execution for that.
 * Records leave when the host has waited for them, or when a later ordered access of the same
 * range makes them redundant (transitivity of the clocks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testdev.h"

/* ---------------------------------------------------------------- clocks */

uint64_t td_clock_get(const td_clock *c, int i) {
    return (i >= 0 && i < c->n) ? c->v[i] : 0;
}

static int clock_grow(td_clock *c, int n) {
    if (n <= c->n) return 0;
    uint64_t *v = realloc(c->v, (size_t)n * sizeof *v);
    if (!v) return -1;
    memset(v + c->n, 0, (size_t)(n - c->n) * sizeof *v);
    c->v = v;
    c->n = n;
    return 0;
}

int td_clock_set(td_clock *c, int i, uint64_t seq) {
    if (clock_grow(c, i + 1)) return -1;
    c->v[i] = seq;
    return 0;
}

int td_clock_join(td_clock *dst, const td_clock *src) {
    if (clock_grow(dst, src->n)) return -1;
    for (int i = 0; i < src->n; i++)
        if (src->v[i] > dst->v[i]) dst->v[i] = src->v[i];
    return 0;
}

int td_clock_copy(td_clock *dst, const td_clock *src) {
    if (clock_grow(dst, src->n)) return -1;
    memcpy(dst->v, src->v, (size_t)src->n * sizeof *src->v);
    for (int i = src->n; i < dst->n; i++) dst->v[i] = 0;
    return 0;
}

void td_clock_free(td_clock *c) {
    free(c->v);
    c->v = NULL;
    c->n = 0;
}

/* ---------------------------------------------------------------- access lists */

const char *td_stream_label(int id, char *buf, size_t len) {
    if (id >= 0 && id < td.n_streams && td.streams[id])
        snprintf(buf, len, "stream %d (%s)", id, td.streams[id]->dev->label);
    else
        snprintf(buf, len, "stream %d", id);
    return buf;
}

static void range_text(const char *where, uint64_t lo, uint64_t hi, char *buf, size_t len) {
    if (!strncmp(where, "host memory", 11))
        snprintf(buf, len, "[0x%llx, 0x%llx)", (unsigned long long)lo, (unsigned long long)hi);
    else
        snprintf(buf, len, "[%llu, %llu)", (unsigned long long)lo, (unsigned long long)hi);
}

void td_san_prune(td_alist *l) {
    for (td_access **pp = &l->head; *pp;) {
        td_access *a = *pp;
        if (td_clock_get(&td.host, a->tl) >= a->seq) {
            *pp = a->next;
            free(a);
            l->n--;
        } else {
            pp = &a->next;
        }
    }
}

void td_san_clear(td_alist *l) {
    while (l->head) {
        td_access *a = l->head;
        l->head = a->next;
        free(a);
    }
    l->n = 0;
}

int td_san_check(td_alist *l, const char *where, uint64_t lo, uint64_t hi, int write,
                 pyg_stream *s, const char *what, char *msg, size_t msglen) {
    if (lo >= hi) return 0;
    td_san_prune(l);
    for (td_access *a = l->head; a; a = a->next) {
        if (a->hi <= lo || a->lo >= hi) continue;          /* no overlap */
        if (!write && !a->write) continue;                 /* two reads never conflict */
        if (s && a->tl == s->id) continue;                 /* same queue: FIFO order */
        if (s && td_clock_get(&s->clock, a->tl) >= a->seq) continue; /* device or host wait */
        char me[96], other[96], r1[64], r2[64];
        td_stream_label(a->tl, other, sizeof other);
        range_text(where, lo, hi, r1, sizeof r1);
        range_text(where, a->lo, a->hi, r2, sizeof r2);
        if (s) {
            td_stream_label(s->id, me, sizeof me);
            snprintf(msg, msglen,
                     "unordered access to %s bytes %s: %s by %s [%s] conflicts with the pending %s by %s "
                     "[%s, command %llu, bytes %s]; %s has not waited on an event recorded after that "
                     "command, and the host has not synchronized it",
                     where, r1, write ? "write" : "read", me, what, a->write ? "write" : "read", other,
                     a->what, (unsigned long long)a->seq, r2, me);
        } else {
            snprintf(msg, msglen,
                     "unordered access to %s bytes %s: %s by the host [%s] conflicts with the pending %s by %s "
                     "[%s, command %llu, bytes %s]; the host has not synchronized that stream or an event "
                     "recorded after that command",
                     where, r1, write ? "write" : "read", what, a->write ? "write" : "read", other, a->what,
                     (unsigned long long)a->seq, r2);
        }
        return 1;
    }
    return 0;
}

void td_san_add(td_alist *l, uint64_t lo, uint64_t hi, int write, pyg_stream *s, uint64_t seq,
                const char *what) {
    if (lo >= hi) return;
    /* Drop records this one makes redundant: any later access that conflicts with them conflicts
     * with this one too and, being ordered after this one, is ordered after them. */
    for (td_access **pp = &l->head; *pp;) {
        td_access *a = *pp;
        int covered = a->lo >= lo && a->hi <= hi;
        int ordered = a->tl == s->id || td_clock_get(&s->clock, a->tl) >= a->seq;
        if (covered && ordered && (write || (!a->write && a->tl == s->id))) {
            *pp = a->next;
            free(a);
            l->n--;
        } else {
            pp = &a->next;
        }
    }
    td_access *a = malloc(sizeof *a);
    if (!a) {
        td_log(PYG_LOG_WARN, "sanitizer: out of memory, an access is not tracked");
        return;
    }
    a->lo = lo;
    a->hi = hi;
    a->write = write;
    a->tl = s->id;
    a->seq = seq;
    snprintf(a->what, sizeof a->what, "%s", what);
    a->next = l->head;
    l->head = a;
    l->n++;
}

void td_san_violation(const char *msg) {
    td.violations++;
    size_t n = strlen(msg);
    if (td.report_len + n + 2 < (1u << 20)) {
        char *r = realloc(td.report, td.report_len + n + 2);
        if (r) {
            memcpy(r + td.report_len, msg, n);
            r[td.report_len + n] = '\n';
            r[td.report_len + n + 1] = 0;
            td.report = r;
            td.report_len += n + 1;
        }
    }
    td_log(PYG_LOG_ERROR, "sanitizer: %s", msg);
}

/* PYG_QUIRK_MULTI_DEVICE_SYNC: a device with it needs a host sync of its stream after each split
 * before work goes to another device. */
int td_san_quirk_check(pyg_stream *s, char *msg, size_t msglen) {
    for (int i = 0; i < td.n_streams; i++) {
        pyg_stream *t = td.streams[i];
        if (!t || t == s || t->dev == s->dev || !(t->dev->cfg.quirks & PYG_QUIRK_MULTI_DEVICE_SYNC)) continue;
        if (t->last_compute == 0 || t->last_compute <= t->quirk_reported) continue;
        if (td_clock_get(&td.host, t->id) >= t->last_compute) continue;
        t->quirk_reported = t->last_compute;
        char a[96], b[96];
        snprintf(msg, msglen,
                 "%s declares PYG_QUIRK_MULTI_DEVICE_SYNC, but the compute queued on %s (command %llu) was "
                 "not synchronized by the host before work was queued on %s",
                 t->dev->label, td_stream_label(t->id, a, sizeof a), (unsigned long long)t->last_compute,
                 td_stream_label(s->id, b, sizeof b));
        return 1;
    }
    return 0;
}
