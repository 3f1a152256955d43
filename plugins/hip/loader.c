/* plugins/hip/loader.c — libpyggml-hip.so: a small C front that always loads.
 *
 * The HIP build of the kernels (libpyghip-kernels.so, beside this library) must be linked against
 * libamdhip64: hipcc registers the kernels' fat binary with the runtime from a static constructor,
 * so that library cannot load where the HIP runtime is not installed. This front library needs
 * nothing but libc/libdl: plugin_init dlopens the kernels library (and with it libamdhip64), and
 * answers PYG_ERR_NO_DEVICE with the dynamic linker's reason when that fails. Every other entry
 * forwards to the kernels library's table (which sets the current device in every entry).
 *
 * Errors: the front's own errors start with PYG_HIP_FRONT_MAGIC; anything else is an error object of
 * the kernels library and goes back to its error functions.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pyggml/plugin.h"

#define PYG_HIP_FRONT_MAGIC 0x70796768697066ull /* "pyghipf"; the kernels' errors start with small ints */
#define KERNELS_LIB "libpyghip-kernels.so"

struct pyg_error { /* the front's layout; the kernels library's objects are never read through it */
    uint64_t magic;
    int32_t code;
    int32_t is_static;
    char msg[1];
};

static const pyg_host_info *g_host;
static const pyg_plugin_api *g_in;  /* the kernels library's table, after a successful load */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_tried;
static char g_load_msg[1024];
static pyg_error g_oom = { PYG_HIP_FRONT_MAGIC, PYG_ERR_OUT_OF_MEMORY, 1, { 0 } };

static pyg_error *front_error(int32_t code, const char *msg) {
    size_t n = strlen(msg);
    pyg_error *e = (pyg_error *)malloc(sizeof(pyg_error) + n + 8);
    if (!e) return &g_oom;
    e->magic = PYG_HIP_FRONT_MAGIC;
    e->code = code;
    e->is_static = 0;
    snprintf(e->msg, n + 8, "hip: %s", msg);
    return e;
}

static int is_front(const pyg_error *e) { return e && *(const uint64_t *)e == PYG_HIP_FRONT_MAGIC; }

static int32_t err_code(const pyg_error *e) {
    if (!e) return PYG_OK;
    if (is_front(e)) return e->code;
    return g_in ? g_in->error_code(e) : PYG_ERR_INTERNAL;
}

static const char *err_message(const pyg_error *e) {
    if (!e) return "";
    if (is_front(e)) return e->is_static ? "hip: out of host memory" : e->msg;
    return g_in ? g_in->error_message(e) : "hip: error of an unloaded library";
}

static void err_destroy(pyg_error *e) {
    if (!e) return;
    if (is_front(e)) {
        if (!e->is_static) free(e);
        return;
    }
    if (g_in) g_in->error_destroy(e);
}

static void load_locked(void) {
    Dl_info info;
    char path[4096];
    if (!dladdr((void *)&load_locked, &info) || !info.dli_fname) {
        snprintf(g_load_msg, sizeof g_load_msg, "cannot locate libpyggml-hip.so itself (dladdr failed)");
        return;
    }
    const char *slash = strrchr(info.dli_fname, '/');
    int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    snprintf(path, sizeof path, "%.*s/%s", dir_len, slash ? info.dli_fname : ".", KERNELS_LIB);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *why = dlerror();
        snprintf(g_load_msg, sizeof g_load_msg,
                 "cannot load the HIP kernels library: %.700s (it needs the HIP runtime libamdhip64.so.5, "
                 "e.g. Debian's libamdhip64-5)", why ? why : "unknown dlopen error");
        return;
    }
    pyg_plugin_get_api_fn get = (pyg_plugin_get_api_fn)dlsym(h, PYG_PLUGIN_ENTRY_NAME);
    const pyg_plugin_api *in = get ? get(g_host) : NULL;
    if (!in || in->abi_major != PYG_ABI_MAJOR || in->struct_size < sizeof(pyg_plugin_api)) {
        snprintf(g_load_msg, sizeof g_load_msg, "%.900s: no usable plugin table (ABI mismatch or missing entry)", path);
        return; /* never dlclose: plugins are never unloaded */
    }
    g_in = in;
}

static pyg_error *plugin_init(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_tried) {
        load_locked();
        g_tried = 1;
    }
    pthread_mutex_unlock(&g_lock);
    if (!g_in) return front_error(PYG_ERR_NO_DEVICE, g_load_msg);
    return g_in->plugin_init();
}

#define NOT_LOADED front_error(PYG_ERR_NO_DEVICE, "plugin_init did not succeed")

static int32_t device_count(void) { return g_in ? g_in->device_count() : 0; }
static pyg_error *device_get(int32_t i, pyg_device **out) { return g_in ? g_in->device_get(i, out) : NOT_LOADED; }
static pyg_error *device_get_props(pyg_device *d, pyg_device_props *p) {
    return g_in ? g_in->device_get_props(d, p) : NOT_LOADED;
}
static pyg_error *device_memory(pyg_device *d, uint64_t *f, uint64_t *t) {
    return g_in ? g_in->device_memory(d, f, t) : NOT_LOADED;
}
static pyg_error *device_set_option(pyg_device *d, const char *k, const char *v) {
    return g_in ? g_in->device_set_option(d, k, v) : NOT_LOADED;
}
static int32_t device_supports_op(pyg_device *d, const pyg_tensor *n) {
    return g_in ? g_in->device_supports_op(d, n) : 0;
}
static pyg_error *stream_create(pyg_device *d, uint32_t f, pyg_stream **out) {
    return g_in ? g_in->stream_create(d, f, out) : NOT_LOADED;
}
static void stream_destroy(pyg_stream *s) { if (g_in) g_in->stream_destroy(s); }
static pyg_error *stream_synchronize(pyg_stream *s) { return g_in ? g_in->stream_synchronize(s) : NOT_LOADED; }
static pyg_error *stream_wait_event(pyg_stream *s, pyg_event *e) {
    return g_in ? g_in->stream_wait_event(s, e) : NOT_LOADED;
}
static pyg_error *event_create(pyg_device *d, pyg_event **out) { return g_in ? g_in->event_create(d, out) : NOT_LOADED; }
static void event_destroy(pyg_event *e) { if (g_in) g_in->event_destroy(e); }
static pyg_error *event_record(pyg_event *e, pyg_stream *s) { return g_in ? g_in->event_record(e, s) : NOT_LOADED; }
static pyg_error *event_query(pyg_event *e, int32_t *done) { return g_in ? g_in->event_query(e, done) : NOT_LOADED; }
static pyg_error *event_synchronize(pyg_event *e) { return g_in ? g_in->event_synchronize(e) : NOT_LOADED; }
static pyg_error *buffer_alloc(pyg_device *d, uint64_t size, uint32_t flags, pyg_buffer **out) {
    return g_in ? g_in->buffer_alloc(d, size, flags, out) : NOT_LOADED;
}
static void buffer_free(pyg_buffer *b) { if (g_in) g_in->buffer_free(b); }
static pyg_error *buffer_get_info(pyg_buffer *b, pyg_buffer_info *i) {
    return g_in ? g_in->buffer_get_info(b, i) : NOT_LOADED;
}
static pyg_error *buffer_write(pyg_buffer *b, uint64_t o, const void *src, uint64_t n) {
    return g_in ? g_in->buffer_write(b, o, src, n) : NOT_LOADED;
}
static pyg_error *buffer_read(pyg_buffer *b, uint64_t o, void *dst, uint64_t n) {
    return g_in ? g_in->buffer_read(b, o, dst, n) : NOT_LOADED;
}
static pyg_error *buffer_fill(pyg_buffer *b, uint64_t o, uint8_t v, uint64_t n) {
    return g_in ? g_in->buffer_fill(b, o, v, n) : NOT_LOADED;
}
static pyg_error *stream_write_async(pyg_stream *s, pyg_buffer *b, uint64_t o, const void *src, uint64_t n) {
    return g_in ? g_in->stream_write_async(s, b, o, src, n) : NOT_LOADED;
}
static pyg_error *stream_read_async(pyg_stream *s, pyg_buffer *b, uint64_t o, void *dst, uint64_t n) {
    return g_in ? g_in->stream_read_async(s, b, o, dst, n) : NOT_LOADED;
}
static pyg_error *stream_copy_async(pyg_stream *s, pyg_buffer *d, uint64_t doff, pyg_buffer *src, uint64_t soff,
                                    uint64_t n) {
    return g_in ? g_in->stream_copy_async(s, d, doff, src, soff, n) : NOT_LOADED;
}
static pyg_error *graph_plan_create(pyg_device *d, const pyg_graph *g, pyg_graph_plan **out) {
    return g_in ? g_in->graph_plan_create(d, g, out) : NOT_LOADED;
}
static void graph_plan_destroy(pyg_graph_plan *p) { if (g_in) g_in->graph_plan_destroy(p); }
static pyg_error *graph_plan_compute(pyg_graph_plan *p, pyg_stream *s) {
    return g_in ? g_in->graph_plan_compute(p, s) : NOT_LOADED;
}

/* since 1.1 */
static pyg_error *stream_set_option(pyg_stream *s, const char *key, const char *value) {
    if (!g_in) return NOT_LOADED;
    if (!PYG_API_HAS(g_in, stream_set_option))
        return front_error(PYG_ERR_UNSUPPORTED, "stream_set_option: the HIP kernels library predates ABI 1.1");
    return g_in->stream_set_option(s, key, value);
}

static const pyg_plugin_api g_api = {
    sizeof(pyg_plugin_api), PYG_ABI_MAJOR, PYG_ABI_MINOR, 0, "hip", "0.1.0",
    err_code, err_message, err_destroy,
    plugin_init, device_count, device_get, device_get_props, device_memory, device_set_option,
    device_supports_op, stream_create, stream_destroy, stream_synchronize, stream_wait_event,
    event_create, event_destroy, event_record, event_query, event_synchronize,
    buffer_alloc, buffer_free, buffer_get_info, buffer_write, buffer_read, buffer_fill,
    stream_write_async, stream_read_async, stream_copy_async,
    graph_plan_create, graph_plan_destroy, graph_plan_compute,
    stream_set_option,
};

PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    if (host && host->struct_size >= offsetof(pyg_host_info, log_user_data) + sizeof(void *)) g_host = host;
    return &g_api;
}
