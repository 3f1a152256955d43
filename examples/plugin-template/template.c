/* examples/plugin-template/template.c — a complete pyggml plugin to start from.
 *
 * It builds against include/ alone (make), exports one symbol (template.map), and passes
 * `pyggml check` (make check). One device, "template:0", whose memory is ordinary host memory the
 * host may not touch directly (no PYG_CAP_HOST_MEMORY: the scheduler copies through buffer_write/
 * buffer_read, as it does for a GPU); streams run their work when it is queued (no
 * PYG_CAP_ASYNC_COMPUTE), so every ordering rule holds by construction. It computes f32 add, mul
 * (src1 broadcast over src0) and scale with any strides. Replace the ops, the memory and the
 * streams with your device's; keep the shape: errors as values, NULL-tolerant destroys, every
 * entry checking its handles.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pyggml/pyggml.h"
#include "pyggml/options.h"

#define TEMPLATE_ALIGN 64

/* ---------------------------------------------------------------- errors and log */

struct pyg_error {
    int32_t code;
    char msg[240];
};
static pyg_error g_oom = { PYG_ERR_OUT_OF_MEMORY, "template: out of host memory" }; /* never freed */
static const pyg_host_info *g_host;

static pyg_error *err(int32_t code, const char *fmt, ...) {
    pyg_error *e = malloc(sizeof *e);
    if (!e) return &g_oom;
    e->code = code;
    int n = snprintf(e->msg, sizeof e->msg, "template: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg + n, sizeof e->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return e;
}

static void log_msg(int32_t level, const char *msg) {
    if (g_host && g_host->log) g_host->log(g_host->log_user_data, level, "template", msg);
}

static int32_t error_code(const pyg_error *e) { return e ? e->code : PYG_OK; }
static const char *error_message(const pyg_error *e) { return e ? e->msg : ""; }
static void error_destroy(pyg_error *e) {
    if (e && e != &g_oom) free(e);
}

/* ---------------------------------------------------------------- device and options */

typedef struct settings {
    int64_t verbose;     /* 1: log every plan */
} settings;

static const pyg_option_def k_options[] = {
    PYG_OPTION_BOOL(settings, verbose, "log each plan created (default 0)"),
};

struct pyg_device {
    settings opts;
};
static pyg_device g_dev;

struct pyg_stream { pyg_device *dev; };
struct pyg_event { pyg_device *dev; };
struct pyg_buffer { pyg_device *dev; uint64_t size; void *mem; };
struct pyg_graph_plan { pyg_device *dev; const pyg_graph *graph; };

static pyg_error *plugin_init(void) { return NULL; }
static int32_t device_count(void) { return 1; }

static pyg_error *device_get(int32_t index, pyg_device **out) {
    if (!out || index != 0) return err(PYG_ERR_INVALID_ARGUMENT, "device_get: index %d (1 device)", index);
    *out = &g_dev;
    return NULL;
}

static pyg_error *device_get_props(pyg_device *dev, pyg_device_props *props) {
    if (dev != &g_dev || !props || props->struct_size < sizeof(uint64_t))
        return err(PYG_ERR_INVALID_ARGUMENT, "device_get_props: bad device or props");
    pyg_device_props p = {
        .struct_size = props->struct_size, .name = "template", .description = "template device (host memory)",
        .type = PYG_DEVICE_ACCEL, .caps = PYG_CAP_EVENTS, .quirks = 0, .memory_total = 0,
        .alignment = TEMPLATE_ALIGN, .max_alloc = 0,
    };
    /* fill only what the host's struct holds (an older host knows fewer fields) */
    memcpy(props, &p, props->struct_size < sizeof p ? (size_t)props->struct_size : sizeof p);
    return NULL;
}

static pyg_error *device_memory(pyg_device *dev, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (dev != &g_dev) return err(PYG_ERR_INVALID_ARGUMENT, "device_memory: bad device");
    if (free_bytes) *free_bytes = 0;   /* unknown */
    if (total_bytes) *total_bytes = 0;
    return NULL;
}

static pyg_error *device_set_option(pyg_device *dev, const char *key, const char *value) {
    if (dev != &g_dev) return err(PYG_ERR_INVALID_ARGUMENT, "device_set_option: bad device");
    char msg[200];
    int32_t st = pyg_option_set(k_options, PYG_OPTION_COUNT(k_options), &dev->opts, key, value, msg, sizeof msg);
    return st == PYG_OK ? NULL : err(st, "%s", msg);
}

/* ---------------------------------------------------------------- ops */

static int f32_plain(const pyg_tensor *t) { return t && t->type == PYG_TYPE_F32; }

static int32_t device_supports_op(pyg_device *dev, const pyg_tensor *n) {
    if (dev != &g_dev || !n) return 0;
    if (n->op == PYG_OP_NONE || pyg_op_is_view(n->op)) return 1;
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    if (!f32_plain(n) || !f32_plain(a)) return 0;
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (a->ne[i] != n->ne[i]) return 0;
    if (n->op == PYG_OP_SCALE) return 1;
    if (n->op != PYG_OP_ADD && n->op != PYG_OP_MUL) return 0;
    if (!f32_plain(b)) return 0;
    for (int i = 0; i < PYG_MAX_DIMS; i++)
        if (b->ne[i] < 1 || a->ne[i] % b->ne[i]) return 0;
    return 1;
}

/* The address of element (i0..i3) of t (its data, or its buffer's memory + offset). */
static float *at(const pyg_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    char *base = t->data ? (char *)t->data : (char *)t->buffer->mem + t->offset;
    return (float *)(base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

static void run_node(const pyg_tensor *n) {
    const pyg_tensor *a = n->src[0], *b = n->src[1];
    const float s = pyg_op_param_f32(n->op_params, 0), bias = pyg_op_param_f32(n->op_params, 1);
    for (int64_t i3 = 0; i3 < n->ne[3]; i3++)
        for (int64_t i2 = 0; i2 < n->ne[2]; i2++)
            for (int64_t i1 = 0; i1 < n->ne[1]; i1++)
                for (int64_t i0 = 0; i0 < n->ne[0]; i0++) {
                    const float x = *at(a, i0, i1, i2, i3);
                    float y;
                    if (n->op == PYG_OP_SCALE) {
                        y = x * s + bias;
                    } else {
                        const float z = *at(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
                        y = n->op == PYG_OP_ADD ? x + z : x * z;
                    }
                    *at(n, i0, i1, i2, i3) = y;
                }
}

/* ---------------------------------------------------------------- streams and events */

static pyg_error *stream_create(pyg_device *dev, uint32_t flags, pyg_stream **out) {
    if (dev != &g_dev || !out) return err(PYG_ERR_INVALID_ARGUMENT, "stream_create: bad device or out");
    (void)flags;
    pyg_stream *s = malloc(sizeof *s);
    if (!s) return &g_oom;
    s->dev = dev;
    *out = s;
    return NULL;
}
static void stream_destroy(pyg_stream *s) { free(s); }   /* free(NULL) is a no-op: R6 */
/* (1.1, optional) options of one stream: this device has none. */
static pyg_error *stream_set_option(pyg_stream *s, const char *key, const char *value) {
    (void)value;
    if (!s || !key) return err(PYG_ERR_INVALID_ARGUMENT, "stream_set_option: NULL argument");
    return err(PYG_ERR_UNSUPPORTED, "unknown stream option '%.64s' (none known)", key);
}
static pyg_error *stream_synchronize(pyg_stream *s) {
    return s ? NULL : err(PYG_ERR_INVALID_ARGUMENT, "stream_synchronize: NULL stream");
}
static pyg_error *stream_wait_event(pyg_stream *s, pyg_event *e) {
    return s && e ? NULL : err(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: NULL argument");
}
static pyg_error *event_create(pyg_device *dev, pyg_event **out) {
    if (dev != &g_dev || !out) return err(PYG_ERR_INVALID_ARGUMENT, "event_create: bad device or out");
    pyg_event *e = malloc(sizeof *e);
    if (!e) return &g_oom;
    e->dev = dev;
    *out = e;
    return NULL;
}
static void event_destroy(pyg_event *e) { free(e); }
static pyg_error *event_record(pyg_event *e, pyg_stream *s) {
    return e && s ? NULL : err(PYG_ERR_INVALID_ARGUMENT, "event_record: NULL argument");
}
static pyg_error *event_query(pyg_event *e, int32_t *done) {
    if (!e || !done) return err(PYG_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    *done = 1;   /* work ran when it was queued */
    return NULL;
}
static pyg_error *event_synchronize(pyg_event *e) {
    return e ? NULL : err(PYG_ERR_INVALID_ARGUMENT, "event_synchronize: NULL event");
}

/* ---------------------------------------------------------------- buffers and copies */

static pyg_error *buffer_alloc(pyg_device *dev, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (dev != &g_dev || !out) return err(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: bad device or out");
    if (flags != PYG_BUFFER_DEVICE) return err(PYG_ERR_UNSUPPORTED, "buffer_alloc: flags %u", flags);
    if (size > ((uint64_t)1 << 46)) return err(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes", (unsigned long long)size);
    pyg_buffer *b = malloc(sizeof *b);
    void *mem = NULL;
    if (!b || posix_memalign(&mem, TEMPLATE_ALIGN, size ? (size_t)size : 1) != 0) {
        free(b);
        return err(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes", (unsigned long long)size);
    }
    b->dev = dev;
    b->size = size;
    b->mem = mem;
    *out = b;
    return NULL;
}
static void buffer_free(pyg_buffer *b) {
    if (!b) return;
    free(b->mem);
    free(b);
}
static pyg_error *buffer_get_info(pyg_buffer *b, pyg_buffer_info *info) {
    if (!b || !info || info->struct_size < sizeof(uint64_t)) return err(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info");
    pyg_buffer_info i = { .struct_size = info->struct_size, .size = b->size, .base = b->mem, .host_ptr = NULL,
                          .flags = PYG_BUFFER_DEVICE };
    memcpy(info, &i, info->struct_size < sizeof i ? (size_t)info->struct_size : sizeof i);
    return NULL;
}
static pyg_error *range(const pyg_buffer *b, uint64_t off, uint64_t size, const char *what) {
    if (!b) return err(PYG_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
    if (off > b->size || size > b->size - off)
        return err(PYG_ERR_INVALID_ARGUMENT, "%s: range %llu+%llu beyond %llu bytes", what, (unsigned long long)off,
                   (unsigned long long)size, (unsigned long long)b->size);
    return NULL;
}
static pyg_error *buffer_write(pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    pyg_error *e = range(dst, off, size, "buffer_write");
    if (!e && size) memcpy((char *)dst->mem + off, src, (size_t)size);
    return e;
}
static pyg_error *buffer_read(pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    pyg_error *e = range(src, off, size, "buffer_read");
    if (!e && size) memcpy(dst, (char *)src->mem + off, (size_t)size);
    return e;
}
static pyg_error *buffer_fill(pyg_buffer *dst, uint64_t off, uint8_t value, uint64_t size) {
    pyg_error *e = range(dst, off, size, "buffer_fill");
    if (!e && size) memset((char *)dst->mem + off, value, (size_t)size);
    return e;
}
static pyg_error *stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t off, const void *src, uint64_t size) {
    return s ? buffer_write(dst, off, src, size) : err(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL stream");
}
static pyg_error *stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t off, void *dst, uint64_t size) {
    return s ? buffer_read(src, off, dst, size) : err(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL stream");
}
static pyg_error *stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t doff, pyg_buffer *src, uint64_t soff,
                                    uint64_t size) {
    pyg_error *e = s ? range(dst, doff, size, "stream_copy_async") : err(PYG_ERR_INVALID_ARGUMENT, "NULL stream");
    if (!e) e = range(src, soff, size, "stream_copy_async");
    if (!e && size) memmove((char *)dst->mem + doff, (char *)src->mem + soff, (size_t)size);
    return e;
}

/* ---------------------------------------------------------------- plans */

static pyg_error *graph_plan_create(pyg_device *dev, const pyg_graph *g, pyg_graph_plan **out) {
    if (dev != &g_dev || !g || !out || g->n_nodes < 0) return err(PYG_ERR_INVALID_ARGUMENT, "graph_plan_create");
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const pyg_tensor *n = g->nodes[i];
        if (!n || !device_supports_op(dev, n))
            return err(PYG_ERR_UNSUPPORTED, "node %d '%s': op %s", i, n ? n->name : "?", n ? pyg_op_name(n->op) : "?");
    }
    pyg_graph_plan *p = malloc(sizeof *p);
    if (!p) return &g_oom;
    p->dev = dev;
    p->graph = g;   /* the host keeps it alive and unchanged until graph_plan_destroy */
    if (dev->opts.verbose) {
        char msg[96];
        snprintf(msg, sizeof msg, "plan of %d nodes", g->n_nodes);
        log_msg(PYG_LOG_INFO, msg);
    }
    *out = p;
    return NULL;
}
static void graph_plan_destroy(pyg_graph_plan *p) { free(p); }
static pyg_error *graph_plan_compute(pyg_graph_plan *p, pyg_stream *s) {
    if (!p || !s || s->dev != p->dev) return err(PYG_ERR_INVALID_ARGUMENT, "graph_plan_compute: bad plan or stream");
    for (int32_t i = 0; i < p->graph->n_nodes; i++) {
        const pyg_tensor *n = p->graph->nodes[i];
        if (n->op != PYG_OP_NONE && !pyg_op_is_view(n->op)) run_node(n);
    }
    return NULL;
}

/* ---------------------------------------------------------------- the table and the one symbol */

static const pyg_plugin_api g_api = {
    /* .struct_size = */ sizeof(pyg_plugin_api),
    /* .abi_major = */ PYG_ABI_MAJOR,
    /* .abi_minor = */ PYG_ABI_MINOR,
    /* .reserved0 = */ 0,
    /* .name = */ "template",
    /* .version = */ "0.1.0",
    /* .error_code = */ error_code,
    /* .error_message = */ error_message,
    /* .error_destroy = */ error_destroy,
    /* .plugin_init = */ plugin_init,
    /* .device_count = */ device_count,
    /* .device_get = */ device_get,
    /* .device_get_props = */ device_get_props,
    /* .device_memory = */ device_memory,
    /* .device_set_option = */ device_set_option,
    /* .device_supports_op = */ device_supports_op,
    /* .stream_create = */ stream_create,
    /* .stream_destroy = */ stream_destroy,
    /* .stream_synchronize = */ stream_synchronize,
    /* .stream_wait_event = */ stream_wait_event,
    /* .event_create = */ event_create,
    /* .event_destroy = */ event_destroy,
    /* .event_record = */ event_record,
    /* .event_query = */ event_query,
    /* .event_synchronize = */ event_synchronize,
    /* .buffer_alloc = */ buffer_alloc,
    /* .buffer_free = */ buffer_free,
    /* .buffer_get_info = */ buffer_get_info,
    /* .buffer_write = */ buffer_write,
    /* .buffer_read = */ buffer_read,
    /* .buffer_fill = */ buffer_fill,
    /* .stream_write_async = */ stream_write_async,
    /* .stream_read_async = */ stream_read_async,
    /* .stream_copy_async = */ stream_copy_async,
    /* .graph_plan_create = */ graph_plan_create,
    /* .graph_plan_destroy = */ graph_plan_destroy,
    /* .graph_plan_compute = */ graph_plan_compute,
    /* .stream_set_option = */ stream_set_option,   /* since 1.1 */
};

/* R3: returns the table whatever the host's version (the host decides), and does nothing else
 * but remember where to log. */
PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    g_host = host;
    return &g_api;
}
