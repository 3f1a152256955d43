/* Host-side checks on a plugin table that need offsetof (not expressible in Cython). */
#ifndef PYGGML_ABI_CHECK_H
#define PYGGML_ABI_CHECK_H
#include <stddef.h>
#include "pyggml/plugin.h"

/* Bytes of the frozen prefix: a table shorter than this cannot even report its version. */
static inline size_t pyg_host_prefix_size(void) {
    return offsetof(pyg_plugin_api, error_destroy) + sizeof(void *);
}

/* Name of the first 1.0 entry that is absent (outside struct_size or NULL); NULL when complete. */
static inline const char *pyg_host_missing_1_0(const pyg_plugin_api *a) {
#define PYG_CHECK(e) if (!PYG_API_HAS(a, e)) return #e;
    PYG_CHECK(error_code) PYG_CHECK(error_message) PYG_CHECK(error_destroy)
    PYG_CHECK(plugin_init) PYG_CHECK(device_count) PYG_CHECK(device_get)
    PYG_CHECK(device_get_props) PYG_CHECK(device_memory) PYG_CHECK(device_set_option)
    PYG_CHECK(device_supports_op) PYG_CHECK(stream_create) PYG_CHECK(stream_destroy)
    PYG_CHECK(stream_synchronize) PYG_CHECK(stream_wait_event) PYG_CHECK(event_create)
    PYG_CHECK(event_destroy) PYG_CHECK(event_record) PYG_CHECK(event_query)
    PYG_CHECK(event_synchronize) PYG_CHECK(buffer_alloc) PYG_CHECK(buffer_free)
    PYG_CHECK(buffer_get_info) PYG_CHECK(buffer_write) PYG_CHECK(buffer_read)
    PYG_CHECK(buffer_fill) PYG_CHECK(stream_write_async) PYG_CHECK(stream_read_async)
    PYG_CHECK(stream_copy_async) PYG_CHECK(graph_plan_create) PYG_CHECK(graph_plan_destroy)
    PYG_CHECK(graph_plan_compute)
#undef PYG_CHECK
    return NULL;
}
/* 1 when the 1.1 entry stream_set_option is present (within struct_size and not NULL). */
static inline int pyg_host_has_stream_set_option(const pyg_plugin_api *a) {
    return PYG_API_HAS(a, stream_set_option);
}
#endif
