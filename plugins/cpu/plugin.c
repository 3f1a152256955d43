/* plugins/cpu/plugin.c — the CPU plugin's ABI table (include/pyggml/plugin.h, ABI 1.1).
 *
 * The only file that knows the table: devices, buffers (aligned host memory), streams and events
 * (trivial: every call has finished its work when it returns) and graph plans wrapping
 * cpu_compute.h. Errors are heap objects {code, message}; out-of-memory uses a static one. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pyggml/plugin.h"
#include "pyggml/options.h"
#include "cpu_compute.h"

#define CPU_PLUGIN_VERSION "0.1.0"
#define CPU_BUFFER_ALIGN 64

/* ------------------------------------------------------------------ errors */

struct pyg_error {
    int32_t code;
    int32_t is_static;
    char *message;
};

static pyg_error g_oom = { PYG_ERR_OUT_OF_MEMORY, 1, "cpu: out of memory" };
static pyg_error g_oom_msg = { PYG_ERR_OUT_OF_MEMORY, 1, "cpu: out of memory (while reporting an error)" };

static const pyg_host_info *g_host;

static void plugin_log(int32_t level, const char *msg) {
    if (g_host && g_host->log) g_host->log(g_host->log_user_data, level, "cpu", msg);
}

static pyg_error *make_error(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pyg_error *make_error(int32_t code, const char *fmt, ...) {
    pyg_error *e = malloc(sizeof *e);
    char *m = malloc(512);
    if (!e || !m) {
        free(e);
        free(m);
        return code == PYG_ERR_OUT_OF_MEMORY ? &g_oom : &g_oom_msg;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, 512, fmt, ap);
    va_end(ap);
    e->code = code;
    e->is_static = 0;
    e->message = m;
    return e;
}

static int32_t api_error_code(const pyg_error *err) { return err ? err->code : PYG_OK; }
static const char *api_error_message(const pyg_error *err) { return err ? err->message : ""; }
static void api_error_destroy(pyg_error *err) {
    if (!err || err->is_static) return;
    free(err->message);
    free(err);
}

/* ------------------------------------------------------------------ device */

struct pyg_device {
    pthread_mutex_t lock;        /* guards opt */
    cpu_options opt;
    char description[160];
    uint64_t memory_total;
};

static pyg_device g_dev = { .lock = PTHREAD_MUTEX_INITIALIZER };
static pthread_once_t g_init_once = PTHREAD_ONCE_INIT;

static void read_cpu_model(char *out, size_t n) {
    snprintf(out, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        size_t len = strcspn(c, "\n");
        while (len > 0 && c[len - 1] == ' ') len--;
        if (len >= n) len = n - 1;
        memcpy(out, c, len);
        out[len] = '\0';
        break;
    }
    fclose(f);
}

static void device_init_once(void) {
    char model[128];
    read_cpu_model(model, sizeof model);
    g_dev.opt.n_threads = cpu_default_threads();
    g_dev.opt.kernels = CPU_KERNELS_AUTO;
    snprintf(g_dev.description, sizeof g_dev.description, "%s (%d threads)", model, g_dev.opt.n_threads);
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    g_dev.memory_total = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz : 0;
}

static pyg_error *api_plugin_init(void) {
    pthread_once(&g_init_once, device_init_once);
    return NULL;
}

static int32_t api_device_count(void) { return 1; }

static pyg_error *api_device_get(int32_t index, pyg_device **out) {
    if (!out) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device_get: out is NULL");
    if (index != 0) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device index %d out of range (1 device)", index);
    pthread_once(&g_init_once, device_init_once);
    *out = &g_dev;
    return NULL;
}

static pyg_error *api_device_get_props(pyg_device *dev, pyg_device_props *props) {
    if (dev != &g_dev || !props) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device_get_props: bad device or props");
    if (props->struct_size < sizeof(uint64_t))
        return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device_get_props: struct_size %llu too small",
                          (unsigned long long)props->struct_size);
    pyg_device_props p = {
        .struct_size = props->struct_size,
        .name = "cpu",
        .description = g_dev.description,
        .type = PYG_DEVICE_CPU,
        .caps = PYG_CAP_HOST_MEMORY | PYG_CAP_EVENTS | PYG_CAP_HOST_BUFFER,
        .quirks = 0,
        .memory_total = g_dev.memory_total,
        .alignment = CPU_BUFFER_ALIGN,
        .max_alloc = 0,
    };
    size_t n = props->struct_size < sizeof p ? (size_t)props->struct_size : sizeof p;
    memcpy(props, &p, n);
    return NULL;
}

static pyg_error *api_device_memory(pyg_device *dev, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (dev != &g_dev) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device_memory: bad device");
    long av = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (free_bytes) *free_bytes = (av > 0 && psz > 0) ? (uint64_t)av * (uint64_t)psz : 0;
    if (total_bytes) *total_bytes = g_dev.memory_total;
    return NULL;
}

/* Options (README.md), parsed by one table over int64 settings; applied to plans at their next
 * compute (plans compare the device's generation). */
typedef struct cpu_settings {
    int64_t n_threads, kernels, repack;
} cpu_settings;

static const char *const k_kernel_words[] = { "auto", "reference", "avx2", "avx512", NULL }; /* CPU_KERNELS_* */

static const pyg_option_def k_options[] = {
    PYG_OPTION_INT(cpu_settings, n_threads, 1, 1024, "worker threads (default: online CPUs)"),
    PYG_OPTION_CHOICE(cpu_settings, kernels, k_kernel_words,
                      "auto; reference (scalar kernels only); avx2 / avx512 (at most that level)"),
    PYG_OPTION_BOOL(cpu_settings, repack, "decode q4_0/q4_K weights from a copy repacked 8 rows interleaved (default 1)"),
};

static pyg_error *api_device_set_option(pyg_device *dev, const char *key, const char *value) {
    if (dev != &g_dev || !key || !value)
        return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: device_set_option: bad device, key or value");
    char msg[512];
    pthread_mutex_lock(&g_dev.lock);
    cpu_settings s = { g_dev.opt.n_threads, g_dev.opt.kernels, !g_dev.opt.no_repack };
    int32_t st = pyg_option_set(k_options, PYG_OPTION_COUNT(k_options), &s, key, value, msg, sizeof msg);
    if (st == PYG_OK && s.kernels > cpu_kernels_available()) {
        st = PYG_ERR_UNSUPPORTED;
        snprintf(msg, sizeof msg, "kernels '%s': this CPU lacks %s", value,
                 s.kernels == CPU_KERNELS_AVX2 ? "AVX2+FMA+F16C" : "AVX-512 F/BW/VL/DQ");
    }
    if (st == PYG_OK) {
        g_dev.opt.n_threads = (int)s.n_threads;
        g_dev.opt.kernels = (int)s.kernels;
        g_dev.opt.no_repack = !s.repack;
    }
    pthread_mutex_unlock(&g_dev.lock);
    return st == PYG_OK ? NULL : make_error(st, "cpu: %s", msg);
}

static int32_t api_device_supports_op(pyg_device *dev, const pyg_tensor *node) {
    return dev == &g_dev && cpu_supports_op(node) ? 1 : 0;
}

/* ------------------------------------------------------------------ streams and events */

struct pyg_stream {
    pyg_device *dev;
    int n_threads;               /* stream_set_option "n_threads"; 0: the device's */
};
struct pyg_event {
    pyg_device *dev;
    int recorded;
};

static pyg_error *api_stream_create(pyg_device *dev, uint32_t flags, pyg_stream **out) {
    if (dev != &g_dev || !out) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_create: bad device or out");
    if (flags != PYG_STREAM_DEFAULT)
        return make_error(PYG_ERR_UNSUPPORTED, "cpu: stream_create: unknown flags 0x%x", flags);
    pyg_stream *s = calloc(1, sizeof *s);
    if (!s) return &g_oom;
    s->dev = dev;
    *out = s;
    return NULL;
}
static void api_stream_destroy(pyg_stream *stream) { free(stream); }
/* Per-stream thread count: each Scheduler owns its stream, so its n_threads is its own. The
 * stream's driving thread is the only one reading it (graph_plan_compute), no lock needed. Parsed
 * by the same kind of table as the device's options. */
typedef struct cpu_stream_settings {
    int64_t n_threads;
} cpu_stream_settings;

static const pyg_option_def k_stream_options[] = {
    PYG_OPTION_INT(cpu_stream_settings, n_threads, 1, 1024, "worker threads of this stream's computes"),
};

static pyg_error *api_stream_set_option(pyg_stream *stream, const char *key, const char *value) {
    if (!stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_set_option: NULL stream");
    char msg[300];
    cpu_stream_settings s = { stream->n_threads };
    int32_t st = pyg_option_set(k_stream_options, PYG_OPTION_COUNT(k_stream_options), &s, key, value, msg, sizeof msg);
    if (st != PYG_OK) return make_error(st, "cpu: stream %s", msg);
    stream->n_threads = (int)s.n_threads;
    return NULL;
}
static pyg_error *api_stream_synchronize(pyg_stream *stream) {
    if (!stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_synchronize: NULL stream");
    return NULL;
}
static pyg_error *api_stream_wait_event(pyg_stream *stream, pyg_event *event) {
    if (!stream || !event) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_wait_event: NULL stream or event");
    return NULL; /* the event's work finished before event_record returned */
}
static pyg_error *api_event_create(pyg_device *dev, pyg_event **out) {
    if (dev != &g_dev || !out) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: event_create: bad device or out");
    pyg_event *e = calloc(1, sizeof *e);
    if (!e) return &g_oom;
    e->dev = dev;
    *out = e;
    return NULL;
}
static void api_event_destroy(pyg_event *event) { free(event); }
static pyg_error *api_event_record(pyg_event *event, pyg_stream *stream) {
    if (!event || !stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: event_record: NULL event or stream");
    event->recorded = 1;
    return NULL;
}
static pyg_error *api_event_query(pyg_event *event, int32_t *done) {
    if (!event || !done) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: event_query: NULL event or done");
    *done = 1;
    return NULL;
}
static pyg_error *api_event_synchronize(pyg_event *event) {
    if (!event) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: event_synchronize: NULL event");
    return NULL;
}

/* ------------------------------------------------------------------ buffers */

struct pyg_buffer {
    void *base;
    uint64_t size;
    uint32_t flags;
};

static pyg_error *api_buffer_alloc(pyg_device *dev, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (dev != &g_dev || !out) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: buffer_alloc: bad device or out");
    if (flags & ~PYG_BUFFER_HOST) return make_error(PYG_ERR_UNSUPPORTED, "cpu: buffer_alloc: unknown flags 0x%x", flags);
    *out = NULL;
    if (size > (uint64_t)PTRDIFF_MAX - CPU_BUFFER_ALIGN)
        return make_error(PYG_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %llu bytes", (unsigned long long)size);
    size_t alloc = (size_t)((size + CPU_BUFFER_ALIGN - 1) & ~(uint64_t)(CPU_BUFFER_ALIGN - 1));
    if (alloc == 0) alloc = CPU_BUFFER_ALIGN;
    pyg_buffer *b = malloc(sizeof *b);
    void *p = NULL;
    if (!b || posix_memalign(&p, CPU_BUFFER_ALIGN, alloc) != 0 || !p) {
        free(b);
        return make_error(PYG_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %llu bytes", (unsigned long long)size);
    }
    b->base = p;
    b->size = size;
    b->flags = flags;
    *out = b;
    return NULL;
}

static void api_buffer_free(pyg_buffer *buffer) {
    if (!buffer) return;
    free(buffer->base);
    free(buffer);
}

static pyg_error *api_buffer_get_info(pyg_buffer *buffer, pyg_buffer_info *info) {
    if (!buffer || !info) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: buffer_get_info: NULL buffer or info");
    pyg_buffer_info i = {
        .struct_size = info->struct_size,
        .size = buffer->size,
        .base = buffer->base,
        .host_ptr = buffer->base,
        .flags = buffer->flags,
    };
    size_t n = info->struct_size < sizeof i ? (size_t)info->struct_size : sizeof i;
    memcpy(info, &i, n);
    return NULL;
}

static pyg_error *check_range(const char *what, const pyg_buffer *b, uint64_t offset, uint64_t size) {
    if (!b) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: %s: NULL buffer", what);
    if (offset > b->size || size > b->size - offset)
        return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: %s: range [%llu, +%llu) outside the buffer of %llu bytes",
                          what, (unsigned long long)offset, (unsigned long long)size, (unsigned long long)b->size);
    return NULL;
}

static pyg_error *api_buffer_write(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) {
    pyg_error *e = check_range("buffer_write", dst, offset, size);
    if (e) return e;
    if (size && !src) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: buffer_write: NULL source");
    if (size) memcpy((char *)dst->base + offset, src, (size_t)size);
    return NULL;
}
static pyg_error *api_buffer_read(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) {
    pyg_error *e = check_range("buffer_read", src, offset, size);
    if (e) return e;
    if (size && !dst) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: buffer_read: NULL destination");
    if (size) memcpy(dst, (const char *)src->base + offset, (size_t)size);
    return NULL;
}
static pyg_error *api_buffer_fill(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size) {
    pyg_error *e = check_range("buffer_fill", dst, offset, size);
    if (e) return e;
    if (size) memset((char *)dst->base + offset, value, (size_t)size);
    return NULL;
}

static pyg_error *api_stream_write_async(pyg_stream *stream, pyg_buffer *dst, uint64_t offset, const void *src,
                                         uint64_t size) {
    if (!stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_write_async: NULL stream");
    return api_buffer_write(dst, offset, src, size);
}
static pyg_error *api_stream_read_async(pyg_stream *stream, pyg_buffer *src, uint64_t offset, void *dst,
                                        uint64_t size) {
    if (!stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_read_async: NULL stream");
    return api_buffer_read(src, offset, dst, size);
}
static pyg_error *api_stream_copy_async(pyg_stream *stream, pyg_buffer *dst, uint64_t dst_offset, pyg_buffer *src,
                                        uint64_t src_offset, uint64_t size) {
    if (!stream) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: stream_copy_async: NULL stream");
    pyg_error *e = check_range("stream_copy_async (dst)", dst, dst_offset, size);
    if (!e) e = check_range("stream_copy_async (src)", src, src_offset, size);
    if (e) return e;
    if (size) memmove((char *)dst->base + dst_offset, (const char *)src->base + src_offset, (size_t)size);
    return NULL;
}

/* ------------------------------------------------------------------ graph plans */

struct pyg_graph_plan {
    cpu_plan *plan;
    cpu_options opt;        /* options the plan is sized for */
};

/* The device's options, with the stream's thread count over them when it has one. */
static void current_options(cpu_options *opt, const pyg_stream *stream) {
    pthread_mutex_lock(&g_dev.lock);
    *opt = g_dev.opt;
    pthread_mutex_unlock(&g_dev.lock);
    if (stream && stream->n_threads > 0) opt->n_threads = stream->n_threads;
}

static pyg_error *api_graph_plan_create(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out) {
    if (dev != &g_dev || !graph || !out)
        return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: graph_plan_create: bad device, graph or out");
    *out = NULL;
    pyg_graph_plan *gp = calloc(1, sizeof *gp);
    if (!gp) return &g_oom;
    current_options(&gp->opt, NULL);
    char err[512] = "";
    int rc = cpu_plan_create(graph, &gp->opt, &gp->plan, err, sizeof err);
    if (rc) {
        free(gp);
        return make_error(rc, "%s", err);
    }
    *out = gp;
    return NULL;
}

static void api_graph_plan_destroy(pyg_graph_plan *plan) {
    if (!plan) return;
    cpu_plan_destroy(plan->plan);
    free(plan);
}

static pyg_error *api_graph_plan_compute(pyg_graph_plan *plan, pyg_stream *stream) {
    if (!plan) return make_error(PYG_ERR_INVALID_ARGUMENT, "cpu: graph_plan_compute: NULL plan");
    /* synchronous: any stream of the device (or none) orders the same; the stream only brings
     * its thread count */
    char err[512] = "";
    cpu_options opt;
    current_options(&opt, stream);
    if (opt.n_threads != plan->opt.n_threads || opt.kernels != plan->opt.kernels || opt.no_repack != plan->opt.no_repack) {
        int rc = cpu_plan_set_options(plan->plan, &opt, err, sizeof err);
        if (rc) return make_error(rc, "%s", err);
        plan->opt = opt;
    }
    int rc = cpu_plan_compute(plan->plan, err, sizeof err);
    if (rc) {
        plugin_log(PYG_LOG_DEBUG, err);
        return make_error(rc, "%s", err);
    }
    return NULL;
}

/* ------------------------------------------------------------------ the table */

static const pyg_plugin_api g_api = {
    /* .struct_size = */ sizeof(pyg_plugin_api),
    /* .abi_major = */ PYG_ABI_MAJOR,
    /* .abi_minor = */ PYG_ABI_MINOR,
    /* .reserved0 = */ 0,
    /* .name = */ "cpu",
    /* .version = */ CPU_PLUGIN_VERSION,
    /* .error_code = */ api_error_code,
    /* .error_message = */ api_error_message,
    /* .error_destroy = */ api_error_destroy,
    /* .plugin_init = */ api_plugin_init,
    /* .device_count = */ api_device_count,
    /* .device_get = */ api_device_get,
    /* .device_get_props = */ api_device_get_props,
    /* .device_memory = */ api_device_memory,
    /* .device_set_option = */ api_device_set_option,
    /* .device_supports_op = */ api_device_supports_op,
    /* .stream_create = */ api_stream_create,
    /* .stream_destroy = */ api_stream_destroy,
    /* .stream_synchronize = */ api_stream_synchronize,
    /* .stream_wait_event = */ api_stream_wait_event,
    /* .event_create = */ api_event_create,
    /* .event_destroy = */ api_event_destroy,
    /* .event_record = */ api_event_record,
    /* .event_query = */ api_event_query,
    /* .event_synchronize = */ api_event_synchronize,
    /* .buffer_alloc = */ api_buffer_alloc,
    /* .buffer_free = */ api_buffer_free,
    /* .buffer_get_info = */ api_buffer_get_info,
    /* .buffer_write = */ api_buffer_write,
    /* .buffer_read = */ api_buffer_read,
    /* .buffer_fill = */ api_buffer_fill,
    /* .stream_write_async = */ api_stream_write_async,
    /* .stream_read_async = */ api_stream_read_async,
    /* .stream_copy_async = */ api_stream_copy_async,
    /* .graph_plan_create = */ api_graph_plan_create,
    /* .graph_plan_destroy = */ api_graph_plan_destroy,
    /* .graph_plan_compute = */ api_graph_plan_compute,
    /* .stream_set_option = */ api_stream_set_option,
};

PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    if (host && host->struct_size >= offsetof(pyg_host_info, log_user_data) + sizeof(void *)) g_host = host;
    return &g_api;
}
