/* A deliberately faulty plugin for the loader tests. Each -D selects one fault:
 *   BROKEN_NO_ENTRY     exports a differently named symbol instead of pyg_plugin_get_api
 *   BROKEN_ABI_MAJOR=N  claims ABI major N
 *   BROKEN_ABI_MINOR=N  claims ABI minor N (the table stays 1.0-shaped: stream_set_option absent)
 *   BROKEN_SHORT_TABLE  struct_size covers only the frozen prefix
 *   BROKEN_INIT_FAILS   plugin_init returns PYG_ERR_INTERNAL
 *   BROKEN_NO_DEVICE    plugin_init returns PYG_ERR_NO_DEVICE ("no widget driver")
 *   BROKEN_NAME="..."   plugin name
 *   BROKEN_SEGV_ENTRY   pyg_plugin_get_api writes through a NULL pointer (SIGSEGV)
 *   BROKEN_ABORT_CTOR   a library constructor calls abort() during dlopen (SIGABRT)
 *   BROKEN_HANG_INIT    plugin_init never returns
 * Everything else answers minimally (zero devices). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pyggml/plugin.h"

#ifndef BROKEN_NAME
#define BROKEN_NAME "broken"
#endif

struct pyg_error { int32_t code; char msg[128]; };

static pyg_error *mk(int32_t code, const char *msg) {
    pyg_error *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->code = code;
    strncpy(e->msg, msg, sizeof e->msg - 1);
    return e;
}
static int32_t err_code(const pyg_error *e) { return e->code; }
static const char *err_msg(const pyg_error *e) { return e->msg; }
static void err_destroy(pyg_error *e) { free(e); }

#ifdef BROKEN_ABORT_CTOR
__attribute__((constructor)) static void broken_ctor(void) { abort(); }
#endif

static pyg_error *init(void) {
#if defined(BROKEN_HANG_INIT)
    for (;;) pause();
#elif defined(BROKEN_INIT_FAILS)
    return mk(PYG_ERR_INTERNAL, "widget firmware checksum mismatch");
#elif defined(BROKEN_NO_DEVICE)
    return mk(PYG_ERR_NO_DEVICE, "no widget driver installed");
#else
    return NULL;
#endif
}
static int32_t count(void) { return 0; }
static pyg_error *unsupported(void) { return mk(PYG_ERR_UNSUPPORTED, "not implemented"); }
static pyg_error *dev_get(int32_t i, pyg_device **o) { (void)i; (void)o; return unsupported(); }
static pyg_error *props(pyg_device *d, pyg_device_props *p) { (void)d; (void)p; return unsupported(); }
static pyg_error *mem(pyg_device *d, uint64_t *f, uint64_t *t) { (void)d; (void)f; (void)t; return unsupported(); }
static pyg_error *opt(pyg_device *d, const char *k, const char *v) { (void)d; (void)k; (void)v; return unsupported(); }
static int32_t sup(pyg_device *d, const pyg_tensor *n) { (void)d; (void)n; return 0; }
static pyg_error *s_create(pyg_device *d, uint32_t f, pyg_stream **o) { (void)d; (void)f; (void)o; return unsupported(); }
static void s_destroy(pyg_stream *s) { (void)s; }
static pyg_error *s_sync(pyg_stream *s) { (void)s; return NULL; }
static pyg_error *s_wait(pyg_stream *s, pyg_event *e) { (void)s; (void)e; return NULL; }
static pyg_error *e_create(pyg_device *d, pyg_event **o) { (void)d; (void)o; return unsupported(); }
static void e_destroy(pyg_event *e) { (void)e; }
static pyg_error *e_record(pyg_event *e, pyg_stream *s) { (void)e; (void)s; return NULL; }
static pyg_error *e_query(pyg_event *e, int32_t *d) { (void)e; *d = 1; return NULL; }
static pyg_error *e_sync(pyg_event *e) { (void)e; return NULL; }
static pyg_error *b_alloc(pyg_device *d, uint64_t s, uint32_t f, pyg_buffer **o) { (void)d; (void)s; (void)f; (void)o; return unsupported(); }
static void b_free(pyg_buffer *b) { (void)b; }
static pyg_error *b_info(pyg_buffer *b, pyg_buffer_info *i) { (void)b; (void)i; return unsupported(); }
static pyg_error *b_write(pyg_buffer *b, uint64_t o, const void *s, uint64_t n) { (void)b; (void)o; (void)s; (void)n; return unsupported(); }
static pyg_error *b_read(pyg_buffer *b, uint64_t o, void *d, uint64_t n) { (void)b; (void)o; (void)d; (void)n; return unsupported(); }
static pyg_error *b_fill(pyg_buffer *b, uint64_t o, uint8_t v, uint64_t n) { (void)b; (void)o; (void)v; (void)n; return unsupported(); }
static pyg_error *w_async(pyg_stream *s, pyg_buffer *b, uint64_t o, const void *p, uint64_t n) { (void)s; (void)b; (void)o; (void)p; (void)n; return unsupported(); }
static pyg_error *r_async(pyg_stream *s, pyg_buffer *b, uint64_t o, void *p, uint64_t n) { (void)s; (void)b; (void)o; (void)p; (void)n; return unsupported(); }
static pyg_error *c_async(pyg_stream *s, pyg_buffer *d, uint64_t x, pyg_buffer *b, uint64_t y, uint64_t n) { (void)s; (void)d; (void)x; (void)b; (void)y; (void)n; return unsupported(); }
static pyg_error *p_create(pyg_device *d, const pyg_graph *g, pyg_graph_plan **o) { (void)d; (void)g; (void)o; return unsupported(); }
static void p_destroy(pyg_graph_plan *p) { (void)p; }
static pyg_error *p_compute(pyg_graph_plan *p, pyg_stream *s) { (void)p; (void)s; return unsupported(); }

static const pyg_plugin_api api = {
#ifdef BROKEN_SHORT_TABLE
    /* .struct_size = */ offsetof(pyg_plugin_api, plugin_init),
#else
    /* .struct_size = */ sizeof(pyg_plugin_api),
#endif
#ifdef BROKEN_ABI_MAJOR
    /* .abi_major = */ BROKEN_ABI_MAJOR,
#else
    /* .abi_major = */ PYG_ABI_MAJOR,
#endif
#ifdef BROKEN_ABI_MINOR
    /* .abi_minor = */ BROKEN_ABI_MINOR,
#else
    /* .abi_minor = */ PYG_ABI_MINOR,
#endif
    /* .reserved0 = */ 0,
    /* .name = */ BROKEN_NAME,
    /* .version = */ "0.0-test",
    err_code, err_msg, err_destroy,
    init, count, dev_get, props, mem, opt, sup,
    s_create, s_destroy, s_sync, s_wait,
    e_create, e_destroy, e_record, e_query, e_sync,
    b_alloc, b_free, b_info, b_write, b_read, b_fill,
    w_async, r_async, c_async,
    p_create, p_destroy, p_compute,
    NULL, /* stream_set_option (optional, since 1.1) */
};

#ifdef BROKEN_NO_ENTRY
PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api_v0(const pyg_host_info *host) {
#else
PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
#endif
    (void)host;
#ifdef BROKEN_SEGV_ENTRY
    *(volatile int *)(uintptr_t)host->struct_size = 0; /* host is valid: struct_size is small, so this faults */
#endif
    return &api;
}
