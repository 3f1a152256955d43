/* pyggml/plugin.h — the plugin ABI, version 1.1.
 *
 * A plugin is a shared library exporting exactly one symbol, PYG_PLUGIN_ENTRY_NAME:
 *
 *     const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host);
 *
 * It returns a pointer to a static, immutable function table that lives until the process
 * exits (plugins are never unloaded). The host accepts the table when abi_major equals its own
 * and abi_minor is at most its own plus PYG_ABI_MINOR_WINDOW; entries at or beyond the table's
 * struct_size count as absent. Every entry of the 1.0 table is mandatory (the host refuses a
 * table with one NULL); an entry a device cannot honour answers PYG_ERR_UNSUPPORTED or behaves as
 * documented without its cap bit. Entries appended later are marked (optional): NULL = absent. REQUIREMENTS.md beside this header lists, numbered, what every
 * plugin must do; CHANGELOG.md records each version. docs/plugin-guide.md walks through writing
 * one; examples/plugin-template/ is a complete plugin to start from.
 *
 * Names: the table's `name` is the plugin's name everywhere. A library is the file
 * libpyggml-NAME.so (the loader refuses a file named otherwise), its devices are "NAME:0",
 * "NAME:1" ..., and PYGGML_PLUGINS / PYGGML_PLUGINS_DISABLE list NAMEs.
 *
 * Layering (as ggml's reg -> device -> stream -> buffer): a plugin has devices; a device has
 * streams (ordered queues of work), events (points in a stream) and buffers (memory).
 *
 * Threads: entries may be called from any host thread, without Python's GIL. One stream is
 * driven by one host thread at a time; distinct streams may be driven concurrently.
 *
 * Errors are values: every fallible entry returns pyg_error* (NULL = success). The host reads
 * it with error_code/error_message and releases it with error_destroy. A plugin never aborts,
 * never lets a C++ exception cross the ABI, and never writes to stdout; it logs through
 * host->log (pyggml queues each line, cut to 479 bytes, and emits it through Python's "pyggml"
 * logger after the plugin call returns: PYG_LOG_DEBUG/INFO/WARN/ERROR become logging's
 * DEBUG/INFO/WARNING/ERROR; the callback never blocks, and may be called from any thread; the queue holds 128
 * lines between drains, and when full a DEBUG line gives way to a more severe one). Failures of asynchronous work
 * surface on the next event_query, event_synchronize or stream_synchronize of the stream that ran it.
 *
 * Only C types, no varargs, no struct returned by value: a table can be filled from any
 * language that can make C callbacks (cffi, ctypes).
 */
#ifndef PYGGML_PLUGIN_H
#define PYGGML_PLUGIN_H

#include <stdint.h>
#include <stddef.h>
#include "pyggml/types.h"
#include "pyggml/ops.h"
#include "pyggml/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYG_ABI_MAJOR 1
#define PYG_ABI_MINOR 1
/* A host speaking M.n accepts plugins built for M.k with k <= n + PYG_ABI_MINOR_WINDOW. */
#define PYG_ABI_MINOR_WINDOW 2

#define PYG_PLUGIN_ENTRY_NAME "pyg_plugin_get_api"

#if defined(_WIN32)
#define PYG_PLUGIN_EXPORT __declspec(dllexport)
#else
#define PYG_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- errors */

typedef enum pyg_status {
    PYG_OK = 0,
    PYG_ERR_INVALID_ARGUMENT = 1, /* bad handle, size, offset, shape or type from the caller */
    PYG_ERR_UNSUPPORTED = 2,      /* op, type, flag or entry the plugin does not implement */
    PYG_ERR_OUT_OF_MEMORY = 3,    /* an allocation on the device or host failed */
    PYG_ERR_NO_DEVICE = 4,        /* no driver, no runtime library, or no device: unusable here */
    PYG_ERR_DEVICE = 5,           /* the device or its runtime reported a failure */
    PYG_ERR_ABI = 6,              /* the host speaks an ABI version the plugin cannot serve */
    PYG_ERR_INTERNAL = 7,         /* a bug in the plugin */
    PYG_ERR_SANITIZER = 8,        /* a checking plugin saw an unordered access (see sanitizer mode) */
} pyg_status;

typedef struct pyg_error pyg_error; /* opaque; created by the plugin, released by the host through
                                       error_destroy (a plugin may hand out static error objects
                                       whose destroy is a no-op, e.g. for out-of-memory) */

/* ---------------------------------------------------------------- handles */

typedef struct pyg_device pyg_device;         /* owned by the plugin, lives until process exit */
typedef struct pyg_stream pyg_stream;         /* stream_create / stream_destroy */
typedef struct pyg_event pyg_event;           /* event_create / event_destroy */
typedef struct pyg_graph_plan pyg_graph_plan; /* graph_plan_create / graph_plan_destroy */
/* pyg_buffer is declared in tensor.h: buffer_alloc / buffer_free */

/* ---------------------------------------------------------------- host side */

/* Log levels for host_info.log. */
#define PYG_LOG_DEBUG 0
#define PYG_LOG_INFO 1
#define PYG_LOG_WARN 2
#define PYG_LOG_ERROR 3

/* What the host tells the plugin in the entry call. Host-owned; valid until process exit. */
typedef struct pyg_host_info {
    uint64_t struct_size;     /* sizeof(pyg_host_info) as the host knows it */
    uint16_t abi_major;       /* ABI version the host speaks */
    uint16_t abi_minor;
    uint32_t reserved0;
    /* (optional, may be NULL) message sink; `msg` is only valid during the call; thread-safe */
    void (*log)(void *user_data, int32_t level, const char *plugin, const char *msg);
    void *log_user_data;      /* passed back to log; host-owned */
} pyg_host_info;

/* ---------------------------------------------------------------- capabilities */

/* Device capability bits (pyg_device_props.caps). An optional entry may be called only when its
 * bit is set; a bit may be set only when the behaviour is guaranteed. */
#define PYG_CAP_ASYNC_COMPUTE      (1ull << 0) /* graph_plan_compute may return before the work ends */
#define PYG_CAP_EVENTS             (1ull << 1) /* events order work across streams of this plugin */
#define PYG_CAP_ASYNC_WRITE_PINNED (1ull << 2) /* stream_write_async from PYG_BUFFER_HOST memory is async and safe */
#define PYG_CAP_ASYNC_WRITE_PAGEABLE (1ull << 3) /* stream_write_async from ordinary host memory is safe
                                                    (host keeps it alive and unchanged until the stream passes) */
#define PYG_CAP_ASYNC_READ         (1ull << 4) /* stream_read_async is async */
#define PYG_CAP_PEER_COPY          (1ull << 5) /* stream_copy_async between two devices of this plugin */
#define PYG_CAP_GRAPH_CAPTURE      (1ull << 6) /* plans replay a captured device graph (CUDA graphs) */
#define PYG_CAP_HOST_BUFFER        (1ull << 7) /* buffer_alloc accepts PYG_BUFFER_HOST (pinned, host-visible) */
#define PYG_CAP_HOST_MEMORY        (1ull << 8) /* device buffers ARE host memory: buffer_get_info gives
                                                  host_ptr, and the host may read/write it directly once
                                                  the device's streams are synchronized (the CPU) */
#define PYG_CAP_MULTI_STREAM       (1ull << 9) /* more than one stream per device runs concurrently */

/* Quirk bits (pyg_device_props.quirks): declared limitations the scheduler honours.
 * The scheduler never looks at plugin or vendor names. */
#define PYG_QUIRK_NO_ASYNC_HOST_COPY   (1ull << 0) /* never use async writes from host memory,
                                                      whatever the caps say (HIP, MUSA) */
#define PYG_QUIRK_MULTI_DEVICE_SYNC    (1ull << 1) /* in runs with more than one device, synchronize
                                                      this device's stream after each split (HIP, MUSA) */

/* Device types. */
#define PYG_DEVICE_CPU 0
#define PYG_DEVICE_GPU 1
#define PYG_DEVICE_IGPU 2
#define PYG_DEVICE_ACCEL 3

/* Filled by device_get_props. The host sets struct_size; the plugin fills the fields that fit
 * in it. Strings are plugin-owned and live until process exit. */
typedef struct pyg_device_props {
    uint64_t struct_size;
    const char *name;          /* informational: the host names devices "<table name>:<index>"
                                  and does not read this; give the table's name */
    const char *description;   /* human readable: "AMD EPYC (2 threads)", "NVIDIA H200" */
    int32_t type;              /* PYG_DEVICE_* */
    int32_t reserved0;
    uint64_t caps;             /* PYG_CAP_* */
    uint64_t quirks;           /* PYG_QUIRK_* */
    uint64_t memory_total;     /* bytes; 0 = unknown */
    uint64_t alignment;        /* required alignment of tensor offsets inside a buffer (power of 2) */
    uint64_t max_alloc;        /* largest single buffer in bytes; 0 = no stated limit */
} pyg_device_props;

/* buffer_alloc flags */
#define PYG_BUFFER_DEVICE 0u        /* device memory (on the CPU: ordinary host memory) */
#define PYG_BUFFER_HOST   (1u << 0) /* pinned host memory the device can copy from quickly;
                                       needs PYG_CAP_HOST_BUFFER */

typedef struct pyg_buffer_info {
    uint64_t struct_size;
    uint64_t size;             /* bytes usable */
    void *base;                /* device address of byte 0, or NULL where the device has none */
    void *host_ptr;            /* host address of byte 0 when the host may touch the memory
                                  (PYG_CAP_HOST_MEMORY or PYG_BUFFER_HOST), else NULL */
    uint32_t flags;            /* the PYG_BUFFER_* it was allocated with */
    uint32_t reserved0;
} pyg_buffer_info;

/* stream_create flags */
#define PYG_STREAM_DEFAULT 0u

/* ---------------------------------------------------------------- the table */

typedef struct pyg_plugin_api {
    /* ---- frozen prefix: never moves, in any 1.x or later version ---- */
    uint64_t struct_size;      /* sizeof(pyg_plugin_api) as the plugin was built */
    uint16_t abi_major;        /* version the plugin was built against */
    uint16_t abi_minor;
    uint32_t reserved0;
    const char *name;          /* "cpu", "cuda" ...: [a-z0-9_]+, static */
    const char *version;       /* the plugin's own version string, static */
    int32_t (*error_code)(const pyg_error *err);        /* pyg_status of err */
    const char *(*error_message)(const pyg_error *err); /* NUL-terminated, lives as long as err */
    void (*error_destroy)(pyg_error *err);              /* NULL is a no-op */

    /* ---- since 1.0 ---- */

    /* Probe the runtime (dlopen the vendor library, count devices). Called once, after the table
     * was accepted, before any other entry below. PYG_ERR_NO_DEVICE means "loads fine, nothing to
     * run on here" and its message says why (no driver, no device). */
    pyg_error *(*plugin_init)(void);
    int32_t (*device_count)(void);                      /* after a successful plugin_init */
    pyg_error *(*device_get)(int32_t index, pyg_device **out);
    pyg_error *(*device_get_props)(pyg_device *dev, pyg_device_props *props);
    pyg_error *(*device_memory)(pyg_device *dev, uint64_t *free_bytes, uint64_t *total_bytes);
    /* String options (keys the device does not know give PYG_ERR_UNSUPPORTED). The CPU plugin
     * knows "n_threads" and "kernels" ("auto", "reference"). Strings are borrowed for the call. */
    pyg_error *(*device_set_option)(pyg_device *dev, const char *key, const char *value);
    /* 1 when the device can compute `node` (its op, types, shapes and strides) with its operands in
     * its own memory; 0 otherwise. Pure; the node's buffers may still be NULL. */
    int32_t (*device_supports_op)(pyg_device *dev, const pyg_tensor *node);

    /* Streams: ordered queues of copies and computes. */
    pyg_error *(*stream_create)(pyg_device *dev, uint32_t flags, pyg_stream **out);
    void (*stream_destroy)(pyg_stream *stream);         /* waits for its work; NULL is a no-op */
    pyg_error *(*stream_synchronize)(pyg_stream *stream); /* host waits for all work queued so far */
    /* Device wait: work queued on `stream` after this call starts only after `event` completes.
     * The event may belong to another device of the same plugin. Needs PYG_CAP_EVENTS. */
    pyg_error *(*stream_wait_event)(pyg_stream *stream, pyg_event *event);

    /* Events: a point in a stream. A fresh event counts as completed. */
    pyg_error *(*event_create)(pyg_device *dev, pyg_event **out);
    void (*event_destroy)(pyg_event *event);            /* NULL is a no-op */
    pyg_error *(*event_record)(pyg_event *event, pyg_stream *stream); /* completes when the stream
                                                           passes this point */
    pyg_error *(*event_query)(pyg_event *event, int32_t *done);      /* no wait */
    pyg_error *(*event_synchronize)(pyg_event *event);  /* host waits */

    /* Buffers. Alignment of base is at least props.alignment. */
    pyg_error *(*buffer_alloc)(pyg_device *dev, uint64_t size, uint32_t flags, pyg_buffer **out);
    void (*buffer_free)(pyg_buffer *buffer);            /* no work may still use it; NULL no-op */
    pyg_error *(*buffer_get_info)(pyg_buffer *buffer, pyg_buffer_info *info);
    /* Blocking copies: return when done — for every stream of the device: work queued anywhere
     * after the call returns sees the bytes (a runtime whose plain copy returns before its bytes
     * land, like CUDA's pageable cudaMemcpy on the legacy stream, must be waited for inside the
     * call; REQUIREMENTS.md R13). The host guarantees no queued work touches the range. */
    pyg_error *(*buffer_write)(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size);
    pyg_error *(*buffer_read)(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size);
    pyg_error *(*buffer_fill)(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size);

    /* Queued copies: ordered on `stream`. Host memory must stay alive and unchanged (write) or
     * untouched (read) until the stream passes the copy. Where the matching cap is missing the
     * call still works but may block (it is then a blocking copy in stream order). With ordinary
     * (pageable) host memory a plugin may also block until the stream reaches the copy (CUDA does
     * for reads, and for writes larger than its staging buffer); PYG_BUFFER_HOST memory with
     * PYG_CAP_ASYNC_WRITE_PINNED / PYG_CAP_ASYNC_READ must not block. */
    pyg_error *(*stream_write_async)(pyg_stream *stream, pyg_buffer *dst, uint64_t offset,
                                     const void *src, uint64_t size);
    pyg_error *(*stream_read_async)(pyg_stream *stream, pyg_buffer *src, uint64_t offset,
                                    void *dst, uint64_t size);
    /* Device to device, both buffers of this plugin (another device's needs PYG_CAP_PEER_COPY). */
    pyg_error *(*stream_copy_async)(pyg_stream *stream, pyg_buffer *dst, uint64_t dst_offset,
                                    pyg_buffer *src, uint64_t src_offset, uint64_t size);

    /* Graphs. A plan is what the plugin derives once from a graph (kernel choice, scratch memory,
     * a captured device graph); the host keeps `graph` and its tensors alive and unchanged until
     * graph_plan_destroy, and changes only the data inside the tensors' buffers between computes.
     * Every node's buffer is a buffer of this plugin on `dev` (or host-visible to it). */
    pyg_error *(*graph_plan_create)(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out);
    void (*graph_plan_destroy)(pyg_graph_plan *plan);   /* NULL is a no-op; no compute in flight */
    /* Queue the plan's nodes on `stream` (a stream of the plan's device). Async where
     * PYG_CAP_ASYNC_COMPUTE is set; otherwise returns when done. */
    pyg_error *(*graph_plan_compute)(pyg_graph_plan *plan, pyg_stream *stream);

    /* ---- since 1.1 ---- */

    /* (optional) String options of one stream, for the work queued on it afterwards; the device's
     * options (device_set_option) stay the defaults of its other streams. The CPU plugin knows
     * "n_threads" (threads of the graph computes on this stream, 1..1024). Keys the
     * plugin does not know give PYG_ERR_UNSUPPORTED; a bad value PYG_ERR_INVALID_ARGUMENT. The
     * stream is driven by the calling thread (no work of it in flight on another); strings are
     * borrowed for the call. */
    pyg_error *(*stream_set_option)(pyg_stream *stream, const char *key, const char *value);
} pyg_plugin_api;

/* Offset of the first byte past an entry: the host treats `entry` as present only when
 * this is <= api->struct_size. */
#define PYG_API_HAS(api, entry) \
    ((api)->struct_size >= offsetof(pyg_plugin_api, entry) + sizeof((api)->entry) && (api)->entry != NULL)

/* The single exported symbol. Must not fail: it returns the plugin's table even when it cannot
 * serve host->abi_major (the host then reads the table's versions and reports the mismatch). */
typedef const pyg_plugin_api *(*pyg_plugin_get_api_fn)(const pyg_host_info *host);

#ifdef __cplusplus
}
#endif
#endif /* PYGGML_PLUGIN_H */
