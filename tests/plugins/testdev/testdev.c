/* tests/plugins/testdev/testdev.c — the entry point, configuration, devices, buffers and the
 * blocking copies of the GPU-like test plugin. Streams, events and queued work are in queue.c,
 * graph plans in plan.c, the sanitizer in sanitize.c; testdev.h explains the model.
 *
 * Configuration. Environment variables are read once, in plugin_init; the same keys can be changed
 * at run time through device_set_option (per device unless marked global). PREFIX is
 * PYGGML_<NAME>_ with NAME the plugin name in upper case (PYGGML_TESTDEV_ for libpyggml-testdev.so,
 * PYGGML_TESTDEVB_ for a copy built or installed as libpyggml-testdevb.so).
 *
 *   option              env                        default
 *   n_devices (global)  PREFIX DEVICES             2 (1..8)
 *   copy_latency_us     PREFIX COPY_LATENCY_US     0      sleep before every queued copy
 *   launch_latency_us   PREFIX LAUNCH_LATENCY_US   0      sleep before every queued compute
 *   node_latency_us     PREFIX NODE_LATENCY_US     0      and this much more per node it computes
 *   blocking_copies     PREFIX BLOCKING_COPIES     how buffer_write is built: "complete" (done for
 *                                                  every queue on return) or "staged" (CUDA's
 *                                                  pageable cudaMemcpy: lands later, on the default
 *                                                  queue); see hostcopy.c
 *   pageable_async      PREFIX PAGEABLE_ASYNC      0 (CUDA): a queued read into ordinary host memory
 *                                                  blocks until done, a queued write from it of more
 *                                                  than staging_bytes until the stream reaches it
 *   staging_bytes       PREFIX STAGING_BYTES       1 MiB
 *   caps                PREFIX CAPS                hex, see TD_DEFAULT_CAPS
 *   quirks              PREFIX QUIRKS              hex, 0
 *   name, description   PREFIX NAME                props.name / props.description
 *   memory              PREFIX MEMORY              8 GiB  props.memory_total, allocations beyond fail
 *   alignment           PREFIX ALIGNMENT           256
 *   n_threads           PREFIX THREADS             1      kernel threads per compute
 *   kernels                                        "auto" or "reference"
 *   sanitize (global)   PYGGML_SANITIZE            0
 *   poison_reads (g.)                              1      sanitizer: async-read targets get 0xff at enqueue
 *   poison_alloc (g.)                              = sanitize: new buffers are filled with 0xff
 *   sanitize_check (g.)                            returns PYG_ERR_SANITIZER listing every violation
 *                                                  since the last check (then forgets them), or NULL
 *   trace (global)                                 0; 1: log each command as it ends, PYG_LOG_DEBUG
 *                                                  "trace stream=S device=D seq=N kind=K start_us=A
 *                                                  end_us=B what=..." (CLOCK_MONOTONIC), delivered
 *                                                  with the next host call
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "testdev.h"

#define TD_DEFAULT_CAPS (PYG_CAP_ASYNC_COMPUTE | PYG_CAP_EVENTS | PYG_CAP_ASYNC_WRITE_PINNED | \
                         PYG_CAP_ASYNC_WRITE_PAGEABLE | PYG_CAP_ASYNC_READ | PYG_CAP_PEER_COPY | \
                         PYG_CAP_HOST_BUFFER | PYG_CAP_MULTI_STREAM)

td_state td = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .cv = PTHREAD_COND_INITIALIZER,
    .poison_reads = 1,
};

const char *td_plugin_name = "testdev";
/* Every host that asked for the table gets the log (two loaders in one process, e.g. pyggml and a
 * ctypes test harness, share this library instance and its state). */
#define TD_MAX_HOSTS 8
static const pyg_host_info *g_hosts[TD_MAX_HOSTS];
static int g_n_hosts;
static pthread_mutex_t g_host_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_name_buf[64];
static char g_env_prefix[96];

/* ---------------------------------------------------------------- errors and log */

static pyg_error g_oom = { PYG_ERR_OUT_OF_MEMORY, 1 }; /* message: see error_message */

pyg_error *td_oom(void) { return &g_oom; }

pyg_error *td_error(int32_t code, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    size_t n = strlen(buf);
    pyg_error *e = malloc(sizeof *e + n + 1);
    if (!e) return td_oom();
    e->code = code;
    e->is_static = 0;
    memcpy(e->msg, buf, n + 1);
    return e;
}

int32_t td_error_code(const pyg_error *e) { return e ? e->code : PYG_OK; }

const char *td_error_msg(const pyg_error *e) {
    if (!e) return "";
    if (e == &g_oom) return "out of memory";
    return e->msg;
}

void td_error_free(pyg_error *e) {
    if (e && !e->is_static) free(e);
}

typedef struct td_logmsg {
    int32_t level;
    struct td_logmsg *next;
    char text[];
} td_logmsg;

static __thread int t_locked;                 /* this thread holds td.mu */
static __thread int t_worker;                 /* a stream's worker: never calls the host */
static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static td_logmsg *g_log_head, **g_log_tail = &g_log_head;
static int g_log_pending; /* queued messages; read without the lock (atomic) */

static void deliver(int32_t level, const char *text) {
    pthread_mutex_lock(&g_host_mu);
    int n = g_n_hosts;
    pthread_mutex_unlock(&g_host_mu);
    for (int i = 0; i < n; i++) { /* entries are only ever appended */
        const pyg_host_info *h = g_hosts[i];
        if (h->struct_size >= offsetof(pyg_host_info, log_user_data) + sizeof(void *) && h->log)
            h->log(h->log_user_data, level, td_plugin_name, text);
    }
}

static void flush_logs(void) {
    for (;;) {
        pthread_mutex_lock(&g_log_mu);
        td_logmsg *m = g_log_head;
        if (m) {
            g_log_head = m->next;
            if (!g_log_head) g_log_tail = &g_log_head;
            __atomic_sub_fetch(&g_log_pending, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&g_log_mu);
        if (!m) return;
        deliver(m->level, m->text);
        free(m);
    }
}

void td_lock(void) {
    pthread_mutex_lock(&td.mu);
    t_locked = 1;
}

void td_unlock(void) {
    t_locked = 0;
    pthread_mutex_unlock(&td.mu);
    if (!t_worker && __atomic_load_n(&g_log_pending, __ATOMIC_ACQUIRE)) flush_logs();
}

/* A worker thread must not call host->log: the host may hold the lock its callback needs (the
 * GIL) while it waits for this very worker. Its messages go out with the next host call. */
void td_mark_worker(void) {
    t_worker = 1;
}

void td_log(int32_t level, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!t_locked && !t_worker) {
        flush_logs(); /* keep the order */
        deliver(level, buf);
        return;
    }
    size_t n = strlen(buf);
    td_logmsg *m = malloc(sizeof *m + n + 1);
    if (!m) return;
    m->level = level;
    m->next = NULL;
    memcpy(m->text, buf, n + 1);
    pthread_mutex_lock(&g_log_mu);
    *g_log_tail = m;
    g_log_tail = &m->next;
    __atomic_add_fetch(&g_log_pending, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_log_mu);
}

/* ---------------------------------------------------------------- configuration */

static const char *intern(const char *s) {
    char *p = strdup(s); /* never freed: props strings live until process exit */
    return p ? p : "";
}

static int parse_u64(const char *v, int base, uint64_t *out) {
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, base);
    if (errno || *end || v[0] == '-') return -1;
    *out = x;
    return 0;
}

static int parse_bool(const char *v, int *out) {
    if (!v) return -1;
    if (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "on")) { *out = 1; return 0; }
    if (!strcmp(v, "0") || !strcasecmp(v, "false") || !strcasecmp(v, "off") || !*v) { *out = 0; return 0; }
    return -1;
}

static void device_defaults(pyg_device *d, int index) {
    d->index = index;
    snprintf(d->label, sizeof d->label, "%s:%d", td_plugin_name, index);
    d->cfg.caps = TD_DEFAULT_CAPS;
    d->cfg.quirks = 0;
    d->cfg.copy_latency_us = 0;
    d->cfg.launch_latency_us = 0;
    d->cfg.node_latency_us = 0;
    d->cfg.blocking_copies = TD_BLOCKING_COMPLETE;
    d->cfg.pageable_async = 0;
    d->cfg.staging_bytes = 1ull << 20;
    d->cfg.memory_total = 8ull << 30;
    d->cfg.alignment = 256;
    d->cfg.n_threads = 1;
    d->cfg.reference = 0;
    d->cfg.name = td_plugin_name;
    char desc[128];
    snprintf(desc, sizeof desc, "pyggml test device %d (GPU-like: hidden memory, async queues)", index);
    d->cfg.description = intern(desc);
    d->allocated = 0;
    pthread_mutex_init(&d->exec_mu, NULL);
}

/* Apply one option to one device (or, for global keys, to the plugin). td.mu held. */
static pyg_error *apply_option(pyg_device *d, const char *key, const char *value) {
    uint64_t u;
    int b;
    if (!key || !value) return td_error(PYG_ERR_INVALID_ARGUMENT, "option key and value must not be NULL");
    if (!strcmp(key, "copy_latency_us") || !strcmp(key, "launch_latency_us") || !strcmp(key, "node_latency_us")) {
        if (parse_u64(value, 10, &u) || u > 60000000ull)
            return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: '%s' is not a number of microseconds (<= 60 s)", key, value);
        if (key[0] == 'c') d->cfg.copy_latency_us = (int64_t)u;
        else if (key[0] == 'n') d->cfg.node_latency_us = (int64_t)u;
        else d->cfg.launch_latency_us = (int64_t)u;
    } else if (!strcmp(key, "blocking_copies")) {
        if (!strcmp(value, "complete")) d->cfg.blocking_copies = TD_BLOCKING_COMPLETE;
        else if (!strcmp(value, "staged")) d->cfg.blocking_copies = TD_BLOCKING_STAGED;
        else return td_error(PYG_ERR_INVALID_ARGUMENT, "blocking_copies: '%s' is not complete or staged", value);
    } else if (!strcmp(key, "pageable_async")) {
        if (parse_bool(value, &b)) return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: '%s' is not 0 or 1", key, value);
        d->cfg.pageable_async = b;
    } else if (!strcmp(key, "staging_bytes")) {
        if (parse_u64(value, 0, &u)) return td_error(PYG_ERR_INVALID_ARGUMENT, "staging_bytes: '%s' is not a byte count", value);
        d->cfg.staging_bytes = u;
    } else if (!strcmp(key, "caps") || !strcmp(key, "quirks")) {
        if (parse_u64(value, 16, &u))
            return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: '%s' is not a hex mask", key, value);
        if (key[0] == 'c') d->cfg.caps = u; else d->cfg.quirks = u;
    } else if (!strcmp(key, "name")) {
        if (!*value) return td_error(PYG_ERR_INVALID_ARGUMENT, "name: empty");
        d->cfg.name = intern(value);
    } else if (!strcmp(key, "description")) {
        d->cfg.description = intern(value);
    } else if (!strcmp(key, "memory")) {
        if (parse_u64(value, 0, &u)) return td_error(PYG_ERR_INVALID_ARGUMENT, "memory: '%s' is not a byte count", value);
        d->cfg.memory_total = u;
    } else if (!strcmp(key, "alignment")) {
        if (parse_u64(value, 0, &u) || u == 0 || (u & (u - 1)) || u > 65536)
            return td_error(PYG_ERR_INVALID_ARGUMENT, "alignment: '%s' is not a power of two <= 65536", value);
        d->cfg.alignment = u;
    } else if (!strcmp(key, "n_threads")) {
        if (parse_u64(value, 10, &u) || u < 1 || u > 256)
            return td_error(PYG_ERR_INVALID_ARGUMENT, "n_threads: '%s' is not in 1..256", value);
        d->cfg.n_threads = (int)u;
    } else if (!strcmp(key, "kernels")) {
        if (!strcmp(value, "auto")) d->cfg.reference = 0;
        else if (!strcmp(value, "reference")) d->cfg.reference = 1;
        else return td_error(PYG_ERR_INVALID_ARGUMENT, "kernels: '%s' is not auto or reference", value);
    } else if (!strcmp(key, "n_devices")) {
        if (parse_u64(value, 10, &u) || u < 1 || u > TD_MAX_DEVICES)
            return td_error(PYG_ERR_INVALID_ARGUMENT, "n_devices: '%s' is not in 1..%d", value, TD_MAX_DEVICES);
        td.n_devices = (int)u;
    } else if (!strcmp(key, "sanitize") || !strcmp(key, "poison_reads") || !strcmp(key, "poison_alloc") ||
               !strcmp(key, "trace")) {
        if (parse_bool(value, &b)) return td_error(PYG_ERR_INVALID_ARGUMENT, "%s: '%s' is not 0 or 1", key, value);
        if (!strcmp(key, "sanitize")) td.sanitize = b;
        else if (!strcmp(key, "poison_reads")) td.poison_reads = b;
        else if (!strcmp(key, "trace")) td.trace = b;
        else td.poison_alloc = b;
    } else if (!strcmp(key, "sanitize_check")) {
        if (!td.violations) return NULL;
        pyg_error *e = td_error(PYG_ERR_SANITIZER, "%llu sanitizer violation(s):\n%s",
                                (unsigned long long)td.violations, td.report ? td.report : "");
        td.violations = 0;
        free(td.report);
        td.report = NULL;
        td.report_len = 0;
        return e;
    } else {
        return td_error(PYG_ERR_UNSUPPORTED, "%s: unknown option '%s'", td_plugin_name, key);
    }
    return NULL;
}

static void apply_env(const char *suffix, const char *key, int all_devices) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", g_env_prefix, suffix);
    const char *v = getenv(name);
    if (!v) return;
    int n = all_devices ? TD_MAX_DEVICES : 1;
    for (int i = 0; i < n; i++) {
        pyg_error *e = apply_option(&td.devices[i], key, v);
        if (e) {
            td_log(PYG_LOG_WARN, "ignoring %s: %s", name, td_error_msg(e));
            td_error_free(e);
            return;
        }
    }
}

/* ---------------------------------------------------------------- plugin */

static pyg_error *api_plugin_init(void) {
    td_lock();
    if (!td.initialized) {
        for (int i = 0; i < TD_MAX_DEVICES; i++) device_defaults(&td.devices[i], i);
        td.n_devices = 2;
        const char *san = getenv("PYGGML_SANITIZE");
        if (san && parse_bool(san, &td.sanitize)) td.sanitize = 1;
        td.poison_alloc = td.sanitize;
        apply_env("DEVICES", "n_devices", 0);
        apply_env("COPY_LATENCY_US", "copy_latency_us", 1);
        apply_env("LAUNCH_LATENCY_US", "launch_latency_us", 1);
        apply_env("NODE_LATENCY_US", "node_latency_us", 1);
        apply_env("BLOCKING_COPIES", "blocking_copies", 1);
        apply_env("PAGEABLE_ASYNC", "pageable_async", 1);
        apply_env("STAGING_BYTES", "staging_bytes", 1);
        apply_env("CAPS", "caps", 1);
        apply_env("QUIRKS", "quirks", 1);
        apply_env("NAME", "name", 1);
        apply_env("MEMORY", "memory", 1);
        apply_env("ALIGNMENT", "alignment", 1);
        apply_env("THREADS", "n_threads", 1);
        td.initialized = 1;
        td_log(PYG_LOG_DEBUG, "%d devices, sanitizer %s", td.n_devices, td.sanitize ? "on" : "off");
    }
    td_unlock();
    return NULL;
}

static int32_t api_device_count(void) {
    td_lock();
    int n = td.initialized ? td.n_devices : 0;
    td_unlock();
    return n;
}

int td_device_valid(const pyg_device *d) {
    return d && d >= &td.devices[0] && d < &td.devices[TD_MAX_DEVICES] && td.initialized;
}

static pyg_error *api_device_get(int32_t index, pyg_device **out) {
    if (!out) return td_error(PYG_ERR_INVALID_ARGUMENT, "device_get: out is NULL");
    td_lock();
    int n = td.initialized ? td.n_devices : 0;
    td_unlock();
    if (index < 0 || index >= n)
        return td_error(PYG_ERR_INVALID_ARGUMENT, "device_get: index %d out of range (%d devices)", index, n);
    *out = &td.devices[index];
    return NULL;
}

static pyg_error *api_device_get_props(pyg_device *d, pyg_device_props *props) {
    if (!td_device_valid(d) || !props) return td_error(PYG_ERR_INVALID_ARGUMENT, "device_get_props: bad device or props");
    pyg_device_props p;
    memset(&p, 0, sizeof p);
    td_lock();
    p.name = d->cfg.name;
    p.description = d->cfg.description;
    p.type = PYG_DEVICE_GPU;
    p.caps = d->cfg.caps;
    p.quirks = d->cfg.quirks;
    p.memory_total = d->cfg.memory_total;
    p.alignment = d->cfg.alignment;
    p.max_alloc = 0;
    td_unlock();
    uint64_t n = props->struct_size < sizeof p ? props->struct_size : sizeof p;
    if (n > sizeof p.struct_size) memcpy((char *)props + sizeof p.struct_size, (char *)&p + sizeof p.struct_size, n - sizeof p.struct_size);
    return NULL;
}

static pyg_error *api_device_memory(pyg_device *d, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!td_device_valid(d)) return td_error(PYG_ERR_INVALID_ARGUMENT, "device_memory: bad device");
    td_lock();
    uint64_t total = d->cfg.memory_total, used = d->allocated;
    td_unlock();
    if (free_bytes) *free_bytes = used < total ? total - used : 0;
    if (total_bytes) *total_bytes = total;
    return NULL;
}

static pyg_error *api_device_set_option(pyg_device *d, const char *key, const char *value) {
    if (!td_device_valid(d)) return td_error(PYG_ERR_INVALID_ARGUMENT, "device_set_option: bad device");
    td_lock();
    pyg_error *e = apply_option(d, key, value);
    td_unlock();
    return e;
}

static int32_t api_device_supports_op(pyg_device *d, const pyg_tensor *node) {
    if (!td_device_valid(d) || !node) return 0;
    if (pyg_op_is_view(node->op) || node->op == PYG_OP_NONE) return 1;
    return cpu_supports_op(node) ? 1 : 0;
}

/* ---------------------------------------------------------------- buffers */

int td_buffer_valid(const pyg_buffer *b) {
    for (const pyg_buffer *x = td.buffers; x; x = x->next)
        if (x == b) return 1;
    return 0;
}

pyg_buffer *td_find_host_buffer(const void *p, uint64_t size) {
    const uint8_t *q = p;
    for (pyg_buffer *x = td.buffers; x; x = x->next)
        if ((x->flags & PYG_BUFFER_HOST) && q >= x->base && q <= x->base + x->size && size <= x->size - (uint64_t)(q - x->base))
            return x;
    return NULL;
}

static pyg_error *api_buffer_alloc(pyg_device *d, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (!td_device_valid(d) || !out) return td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: bad device or out");
    *out = NULL;
    if (flags & ~PYG_BUFFER_HOST) return td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: unknown flags 0x%x", flags);
    int device_mem = !(flags & PYG_BUFFER_HOST);
    td_lock();
    td_config cfg = d->cfg;
    uint64_t used = d->allocated;
    int poison = td.poison_alloc;
    pyg_error *e = NULL;
    if (!device_mem && !(cfg.caps & PYG_CAP_HOST_BUFFER))
        e = td_error(PYG_ERR_UNSUPPORTED, "buffer_alloc: PYG_BUFFER_HOST without PYG_CAP_HOST_BUFFER on %s", d->label);
    else if (device_mem && (size > cfg.memory_total || used > cfg.memory_total - size))
        e = td_error(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes do not fit on %s (%llu of %llu in use)",
                     (unsigned long long)size, d->label, (unsigned long long)used,
                     (unsigned long long)cfg.memory_total);
    else if (size > (1ull << 46))
        e = td_error(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes", (unsigned long long)size);
    else if (device_mem)
        d->allocated += size; /* reserved now, so concurrent allocations cannot both fit */
    td_unlock();
    if (e) return e;
    pyg_buffer *b = calloc(1, sizeof *b);
    void *mem = NULL;
    size_t align = cfg.alignment < 64 ? 64 : (size_t)cfg.alignment;
    if (!b || posix_memalign(&mem, align, size ? (size_t)size : 1)) {
        free(b);
        if (device_mem) {
            td_lock();
            d->allocated -= size;
            td_unlock();
        }
        return td_error(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes on %s: malloc failed",
                        (unsigned long long)size, d->label);
    }
    b->magic = TD_BUFFER_MAGIC;
    b->dev = d;
    b->flags = flags;
    b->base = mem;
    b->size = size;
    if (poison) memset(mem, 0xff, (size_t)size); /* like cudaMalloc: never zeroed for you */
    td_lock();
    b->id = ++td.next_buffer_id;
    b->next = td.buffers;
    td.buffers = b;
    td_unlock();
    *out = b;
    return NULL;
}

void td_buffer_where(const pyg_buffer *b, char *buf, size_t len) {
    snprintf(buf, len, "%sbuffer #%d (%s, %llu bytes)", (b->flags & PYG_BUFFER_HOST) ? "pinned host " : "",
             b->id, b->dev->label, (unsigned long long)b->size);
}

static void api_buffer_free(pyg_buffer *b) {
    if (!b) return;
    td_lock();
    if (!td_buffer_valid(b)) {
        td_unlock();
        td_log(PYG_LOG_ERROR, "buffer_free: %p is not a live buffer of this plugin (double free?)", (void *)b);
        return;
    }
    if (td.sanitize) {
        char where[128], msg[TD_MSG];
        td_buffer_where(b, where, sizeof where);
        if (td_san_check(&b->acc, where, 0, b->size, 1, NULL, "buffer_free", msg, sizeof msg))
            td_san_violation(msg);
    }
    while (b->inflight > 0) pthread_cond_wait(&td.cv, &td.mu); /* never free memory a worker uses */
    for (pyg_buffer **pp = &td.buffers; *pp; pp = &(*pp)->next)
        if (*pp == b) { *pp = b->next; break; }
    if (!(b->flags & PYG_BUFFER_HOST)) b->dev->allocated -= b->size;
    td_san_clear(&b->acc);
    td_unlock();
    b->magic = 0;
    free(b->base);
    free(b);
}

static pyg_error *api_buffer_get_info(pyg_buffer *b, pyg_buffer_info *info) {
    if (!info) return td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: info is NULL");
    td_lock();
    int ok = td_buffer_valid(b);
    uint64_t caps = ok ? b->dev->cfg.caps : 0;
    td_unlock();
    if (!ok) return td_error(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: not a live buffer of %s", td_plugin_name);
    pyg_buffer_info i;
    memset(&i, 0, sizeof i);
    i.size = b->size;
    i.base = b->base;
    /* The device memory is hidden from the host, as on a discrete GPU: the host must copy. */
    i.host_ptr = ((b->flags & PYG_BUFFER_HOST) || (caps & PYG_CAP_HOST_MEMORY)) ? b->base : NULL;
    i.flags = b->flags;
    uint64_t n = info->struct_size < sizeof i ? info->struct_size : sizeof i;
    if (n > sizeof i.struct_size) memcpy((char *)info + sizeof i.struct_size, (char *)&i + sizeof i.struct_size, n - sizeof i.struct_size);
    return NULL;
}

/* since 1.1: a GPU-like device has no per-stream options; the handle is still checked. */
static pyg_error *api_stream_set_option(pyg_stream *s, const char *key, const char *value) {
    td_lock();
    int ok = td_stream_valid(s) && !s->quit;
    td_unlock();
    if (!ok || !key || !value) return td_error(PYG_ERR_INVALID_ARGUMENT, "stream_set_option: not a live stream, or NULL key/value");
    return td_error(PYG_ERR_UNSUPPORTED, "unknown stream option '%.64s' (none known)", key);
}

/* ---------------------------------------------------------------- the table */

static pyg_plugin_api g_api = {
    /* .struct_size = */ sizeof(pyg_plugin_api),
    /* .abi_major = */ PYG_ABI_MAJOR,
    /* .abi_minor = */ PYG_ABI_MINOR,
    /* .reserved0 = */ 0,
    /* .name = */ "testdev",
    /* .version = */ "0.1.0",
    /* .error_code = */ td_error_code,
    /* .error_message = */ td_error_msg,
    /* .error_destroy = */ td_error_free,
    /* .plugin_init = */ api_plugin_init,
    /* .device_count = */ api_device_count,
    /* .device_get = */ api_device_get,
    /* .device_get_props = */ api_device_get_props,
    /* .device_memory = */ api_device_memory,
    /* .device_set_option = */ api_device_set_option,
    /* .device_supports_op = */ api_device_supports_op,
    /* .stream_create = */ td_stream_create,
    /* .stream_destroy = */ td_stream_destroy,
    /* .stream_synchronize = */ td_stream_synchronize,
    /* .stream_wait_event = */ td_stream_wait_event,
    /* .event_create = */ td_event_create,
    /* .event_destroy = */ td_event_destroy,
    /* .event_record = */ td_event_record,
    /* .event_query = */ td_event_query,
    /* .event_synchronize = */ td_event_synchronize,
    /* .buffer_alloc = */ api_buffer_alloc,
    /* .buffer_free = */ api_buffer_free,
    /* .buffer_get_info = */ api_buffer_get_info,
    /* .buffer_write = */ td_buffer_write,
    /* .buffer_read = */ td_buffer_read,
    /* .buffer_fill = */ td_buffer_fill,
    /* .stream_write_async = */ td_stream_write_async,
    /* .stream_read_async = */ td_stream_read_async,
    /* .stream_copy_async = */ td_stream_copy_async,
    /* .graph_plan_create = */ td_graph_plan_create,
    /* .graph_plan_destroy = */ td_graph_plan_destroy,
    /* .graph_plan_compute = */ td_graph_plan_compute,
    /* .stream_set_option = */ api_stream_set_option,
};

/* The plugin name: -DTESTDEV_NAME="x" if given, else taken from the library's file name
 * (libpyggml-NAME.so), so one build copied under two names gives two independent plugins. */
static void resolve_name(void) {
#ifdef TESTDEV_NAME
    snprintf(g_name_buf, sizeof g_name_buf, "%s", TESTDEV_NAME);
#else
    Dl_info info;
    snprintf(g_name_buf, sizeof g_name_buf, "testdev");
    if (dladdr((void *)&resolve_name, &info) && info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        base = base ? base + 1 : info.dli_fname;
        const char *pre = "libpyggml-";
        const char *dot = strstr(base, ".so");
        if (!strncmp(base, pre, strlen(pre)) && dot && dot > base + strlen(pre)) {
            size_t n = (size_t)(dot - base) - strlen(pre);
            if (n >= sizeof g_name_buf) n = sizeof g_name_buf - 1;
            memcpy(g_name_buf, base + strlen(pre), n);
            g_name_buf[n] = 0;
        }
    }
#endif
    for (char *p = g_name_buf; *p; p++) { /* [a-z0-9_]+ (R4) */
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
        else if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))) *p = '_';
    }
    td_plugin_name = g_name_buf;
    int n = snprintf(g_env_prefix, sizeof g_env_prefix, "PYGGML_");
    for (const char *p = g_name_buf; *p && n < (int)sizeof g_env_prefix - 2; p++)
        g_env_prefix[n++] = (char)((*p >= 'a' && *p <= 'z') ? *p - 'a' + 'A' : *p);
    g_env_prefix[n++] = '_';
    g_env_prefix[n] = 0;
    g_api.name = td_plugin_name;
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    pthread_once(&g_once, resolve_name);
    if (host) {
        pthread_mutex_lock(&g_host_mu);
        int known = 0;
        for (int i = 0; i < g_n_hosts; i++) known |= g_hosts[i] == host;
        if (!known && g_n_hosts < TD_MAX_HOSTS) g_hosts[g_n_hosts++] = host;
        pthread_mutex_unlock(&g_host_mu);
    }
    return &g_api;
}
