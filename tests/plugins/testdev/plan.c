/* tests/plugins/testdev/plan.c — graph plans: validated like a GPU would need them, run with the
 * CPU plugin's kernels on the stream's worker thread.
 *
 * A device kernel can only reach its own device's memory (or pinned host buffers), so a node
 * whose operand lives on another device is refused at plan time: the scheduler forgot a copy.
 * Every tensor's data must be its buffer's base + offset. The byte ranges each node reads and
 * writes are worked out once here; the sanitizer checks them at every compute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testdev.h"

/* Bytes from the first to one past the last byte of t (exact for any strides). */
static uint64_t tensor_span(const pyg_tensor *t) {
    const pyg_type_traits *tr = pyg_type_get_traits(t->type);
    if (!tr || tr->block_size <= 0) return 0;
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (t->ne[i] < 1) return 0;
    if (t->ne[0] % tr->block_size) return 0;
    uint64_t last = (uint64_t)(t->ne[0] / tr->block_size - 1) * t->nb[0] + (uint64_t)tr->type_size;
    for (int i = 1; i < PYG_MAX_DIMS; i++) last += (uint64_t)(t->ne[i] - 1) * t->nb[i];
    return last;
}

static const char *tname(const pyg_tensor *t) {
    return t->name[0] ? t->name : "(unnamed)";
}

/* Check one tensor a node touches; td.mu held. */
static pyg_error *check_tensor(pyg_device *dev, const pyg_tensor *node, const pyg_tensor *t, uint64_t *span) {
    pyg_buffer *b = t->buffer;
    if (!b) return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: node '%s' (%s): tensor '%s' has no buffer",
                            tname(node), pyg_op_name(node->op), tname(t));
    if (!td_buffer_valid(b))
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: node '%s' (%s): tensor '%s' is in a buffer that is "
                        "not a live buffer of %s (another plugin's memory?)", tname(node), pyg_op_name(node->op),
                        tname(t), td_plugin_name);
    if (b->dev != dev && !(b->flags & PYG_BUFFER_HOST))
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: node '%s' (%s): tensor '%s' lives in buffer #%d on "
                        "%s, which %s cannot reach (copy it first)", tname(node), pyg_op_name(node->op), tname(t),
                        b->id, b->dev->label, dev->label);
    uint64_t n = tensor_span(t);
    if (!n) return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: tensor '%s': bad type %d or shape", tname(t), t->type);
    if (t->offset > b->size || n > b->size - t->offset)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: tensor '%s': bytes [%llu, %llu) outside buffer #%d "
                        "of %llu bytes", tname(t), (unsigned long long)t->offset,
                        (unsigned long long)(t->offset + n), b->id, (unsigned long long)b->size);
    if ((const uint8_t *)t->data != b->base + t->offset)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: tensor '%s': data %p is not buffer #%d base + "
                        "offset %llu", tname(t), t->data, b->id, (unsigned long long)t->offset);
    *span = n;
    return NULL;
}

static int add_range(pyg_graph_plan *p, int *cap, pyg_buffer *b, uint64_t lo, uint64_t hi, int write,
                     const char *what) {
    for (int i = 0; i < p->n_ranges; i++) {
        td_range *r = &p->ranges[i];
        if (r->buf == b && r->write == write && r->lo <= lo && r->hi >= hi) return 0; /* already there */
    }
    if (p->n_ranges == *cap) {
        int nc = *cap ? *cap * 2 : 32;
        td_range *v = realloc(p->ranges, (size_t)nc * sizeof *v);
        if (!v) return -1;
        p->ranges = v;
        *cap = nc;
    }
    td_range *r = &p->ranges[p->n_ranges++];
    r->buf = b;
    r->lo = lo;
    r->hi = hi;
    r->write = write;
    snprintf(r->what, sizeof r->what, "%s", what);
    return 0;
}

static void plan_free(pyg_graph_plan *p) {
    if (!p) return;
    cpu_plan_destroy(p->cp);
    pthread_mutex_destroy(&p->mu);
    free(p->ranges);
    free(p->bufs);
    free(p);
}

pyg_error *td_graph_plan_create(pyg_device *dev, const pyg_graph *g, pyg_graph_plan **out) {
    if (!td_device_valid(dev) || !g || !out)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: bad device, graph or out");
    *out = NULL;
    if (g->struct_size < offsetof(pyg_graph, nodes) + sizeof g->nodes || g->n_nodes < 0 || (g->n_nodes && !g->nodes))
        return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: malformed graph descriptor");
    pyg_graph_plan *p = calloc(1, sizeof *p);
    if (!p) return td_oom();
    pthread_mutex_init(&p->mu, NULL);
    p->dev = dev;
    p->graph = g;
    p->last_tl = -1;
    int cap = 0;
    pyg_error *e = NULL;
    td_lock();
    td_config cfg = dev->cfg;
    for (int i = 0; i < g->n_nodes && !e; i++) {
        const pyg_tensor *node = g->nodes[i];
        if (!node) { e = td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create: node %d is NULL", i); break; }
        if (node->op == PYG_OP_NONE || pyg_op_is_view(node->op)) continue;
        if (!cpu_supports_op(node)) {
            e = td_error(PYG_ERR_UNSUPPORTED, "graph_plan_create: node '%s' (%s) is not supported", tname(node),
                         pyg_op_name(node->op));
            break;
        }
        uint64_t n;
        char what[160];
        if ((e = check_tensor(dev, node, node, &n))) break;
        snprintf(what, sizeof what, "compute: node '%.60s' (%s) writes", tname(node), pyg_op_name(node->op));
        if (add_range(p, &cap, node->buffer, node->offset, node->offset + n, 1, what)) { e = td_oom(); break; }
        for (int j = 0; j < PYG_MAX_SRC && !e; j++) {
            const pyg_tensor *t = node->src[j];
            if (!t) continue;
            if ((e = check_tensor(dev, node, t, &n))) break;
            snprintf(what, sizeof what, "compute: node '%.60s' (%s) reads '%.60s'", tname(node), pyg_op_name(node->op), tname(t));
            if (add_range(p, &cap, t->buffer, t->offset, t->offset + n, 0, what)) e = td_oom();
        }
    }
    if (!e && p->n_ranges) {
        p->bufs = malloc((size_t)p->n_ranges * sizeof *p->bufs);
        if (!p->bufs) e = td_oom();
        for (int i = 0; !e && i < p->n_ranges; i++) {
            int seen = 0;
            for (int k = 0; k < p->n_bufs; k++) seen |= p->bufs[k] == p->ranges[i].buf;
            if (!seen) p->bufs[p->n_bufs++] = p->ranges[i].buf;
        }
    }
    td_unlock();
    if (e) { plan_free(p); return e; }
    cpu_options opt = { cfg.n_threads, cfg.reference, 0 };
    char err[512] = "";
    int rc = cpu_plan_create(g, &opt, &p->cp, err, sizeof err);
    if (rc) {
        p->cp = NULL;
        plan_free(p);
        return td_error(rc, "graph_plan_create: %s", err[0] ? err : "the CPU kernels refused the graph");
    }
    *out = p;
    return NULL;
}

void td_graph_plan_destroy(pyg_graph_plan *p) {
    if (!p) return;
    td_lock();
    if (td.sanitize && p->last_tl >= 0 && td_clock_get(&td.host, p->last_tl) < p->last_seq) {
        char msg[TD_MSG], who[96];
        snprintf(msg, sizeof msg, "graph_plan_destroy while its compute on %s (command %llu) was not synchronized "
                 "by the host", td_stream_label(p->last_tl, who, sizeof who), (unsigned long long)p->last_seq);
        td_san_violation(msg);
    }
    while (p->inflight > 0) pthread_cond_wait(&td.cv, &td.mu); /* never free what a worker runs */
    td_unlock();
    plan_free(p);
}

int td_plan_run(pyg_graph_plan *p, char *err, size_t errlen) {
    pthread_mutex_lock(&p->mu);
    int rc = cpu_plan_compute(p->cp, err, errlen);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

pyg_error *td_graph_plan_compute(pyg_graph_plan *p, pyg_stream *s) {
    if (!p) return td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: plan is NULL");
    td_lock();
    pyg_error *e = NULL;
    if (!td_stream_valid(s) || s->quit) e = td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: not a live stream");
    else if (s->dev != p->dev)
        e = td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: plan of %s on a stream of %s", p->dev->label, s->dev->label);
    for (int i = 0; !e && i < p->n_bufs; i++)
        if (!td_buffer_valid(p->bufs[i]))
            e = td_error(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: a buffer of the graph was freed after graph_plan_create");
    td_req *r = NULL;
    char (*where)[128] = NULL;
    td_cmd *c = NULL;
    if (!e && p->n_ranges) {
        r = calloc((size_t)p->n_ranges, sizeof *r);
        where = calloc((size_t)p->n_ranges, sizeof *where);
        if (!r || !where) e = td_oom();
    }
    if (!e && !(c = calloc(1, sizeof *c))) e = td_oom();
    if (e) {
        td_unlock();
        free(r);
        free(where);
        free(c);
        return e;
    }
    for (int i = 0; i < p->n_ranges; i++) {
        td_range *x = &p->ranges[i];
        td_buffer_where(x->buf, where[i], sizeof where[i]);
        r[i].list = &x->buf->acc;
        r[i].where = where[i];
        r[i].lo = x->lo;
        r[i].hi = x->hi;
        r[i].write = x->write;
        r[i].what = x->what;
    }
    c->kind = TD_CMD_COMPUTE;
    c->latency_us = s->dev->cfg.launch_latency_us + s->dev->cfg.node_latency_us * p->graph->n_nodes;
    c->plan = p;
    snprintf(c->what, sizeof c->what, "graph_plan_compute of graph %llu (%d nodes)", (unsigned long long)p->graph->id,
             p->graph->n_nodes);
    uint64_t before = s->enq;
    int blocking = !(s->dev->cfg.caps & PYG_CAP_ASYNC_COMPUTE);
    e = td_enqueue(s, c, r, p->n_ranges, blocking);
    if (s->enq != before) {
        s->last_compute = s->enq;
        p->last_tl = s->id;
        p->last_seq = s->enq;
    }
    td_unlock();
    free(r);
    free(where);
    return e;
}
