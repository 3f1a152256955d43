/* plugins/cuda/plugin.cu — the ABI table of libpyggml-cuda.so: errors, devices, streams, events,
 * buffers and copies. Kernels and graph plans live in the other .cu files.
 *
 * The runtime (cudart) is linked statically and hidden by the version script; it opens the driver
 * (libcuda) on first use, so this library loads anywhere and plugin_init answers NO_DEVICE on a
 * machine without driver or GPU. Every entry that touches a device sets it current first (R11);
 * no C++ exception crosses the ABI (R5): entries that can throw are wrapped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <mutex>
#include "plugin_internal.h"
#include "gemm_blas.h"
#include "repack.h"

#ifndef PYG_CUDA_MIN_CC
#define PYG_CUDA_MIN_CC 90 /* lowest compute capability the build has code for (cuda.mk sets it) */
#endif
#define PYG_CUDA_VERSION "0.1.0"
#define PYG_CUDA_MAX_DEVICES 16
#define PYG_CUDA_ALIGNMENT 256

/* ---------------------------------------------------------------- errors and logging */

static const pyg_host_info *g_host;

static pyg_error g_oom_error = { PYG_ERR_OUT_OF_MEMORY, 1, { 0 } }; /* message: see err_message */

static pyg_error *verror(int32_t code, const char *fmt, va_list ap) {
    char buf[1024];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0) n = 0;
    if (n >= (int)sizeof buf) n = (int)sizeof buf - 1;
    pyg_error *e = (pyg_error *)malloc(sizeof(pyg_error) + (size_t)n + 16);
    if (!e) return &g_oom_error;
    e->code = code;
    e->is_static = 0;
    snprintf(e->msg, (size_t)n + 16, "%s: %s", PYG_GPU_PLUGIN_NAME, buf);
    return e;
}

pyg_error *pyg_cuda_error(int32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pyg_error *e = verror(code, fmt, ap);
    va_end(ap);
    return e;
}

pyg_error *pyg_cuda_gpu_error(gpuError_t err, const char *what) {
    if (err == gpuSuccess) return NULL;
    gpuGetLastError(); /* clear a non-sticky error so later calls don't see it */
    const int32_t code = err == gpuErrorMemoryAllocation ? PYG_ERR_OUT_OF_MEMORY : PYG_ERR_DEVICE;
    return pyg_cuda_error(code, "%s failed: %s (error %d)", what, gpuGetErrorString(err), (int)err);
}

void pyg_cuda_log(int32_t level, const char *fmt, ...) {
    if (!g_host || !g_host->log) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_host->log(g_host->log_user_data, level, PYG_GPU_PLUGIN_NAME, buf);
}

static int32_t err_code(const pyg_error *e) { return e ? e->code : PYG_OK; }
static const char *err_message(const pyg_error *e) {
    if (!e) return "";
    return e->is_static ? PYG_GPU_PLUGIN_NAME ": out of host memory" : e->msg;
}
static void err_destroy(pyg_error *e) {
    if (e && !e->is_static) free(e);
}

#define SET_DEVICE(dev)                                                    \
    do {                                                                   \
        gpuError_t se_ = gpuSetDevice((dev)->index);                       \
        if (se_ != gpuSuccess) return pyg_cuda_gpu_error(se_, PYG_GPU_API "SetDevice"); \
    } while (0)

#define GPU_TRY(call, what)                                                \
    do {                                                                   \
        gpuError_t ge_ = (call);                                           \
        if (ge_ != gpuSuccess) return pyg_cuda_gpu_error(ge_, what);       \
    } while (0)

/* ---------------------------------------------------------------- init and devices */

static std::mutex g_init_mutex;
static int g_init_done;
static int32_t g_init_code;
static char g_init_msg[512];
static int g_n_devices;
static pyg_device g_devices[PYG_CUDA_MAX_DEVICES];

static void init_locked(void) {
    int count = 0;
    gpuError_t e = gpuGetDeviceCount(&count);
    if (e != gpuSuccess) {
        gpuGetLastError();
        g_init_code = PYG_ERR_NO_DEVICE;
        snprintf(g_init_msg, sizeof g_init_msg, "no usable %s driver or device: %s (%sGetDeviceCount error %d)%s%s",
                 PYG_GPU_RUNTIME, gpuGetErrorString(e), PYG_GPU_API, (int)e,
                 e == gpuErrorInsufficientDriver ? "; " PYG_GPU_DRIVER_HINT : "", PYG_GPU_BUILD_NOTE);
        return;
    }
    if (count <= 0) {
        g_init_code = PYG_ERR_NO_DEVICE;
        snprintf(g_init_msg, sizeof g_init_msg, "no %s device found%s", PYG_GPU_RUNTIME, PYG_GPU_BUILD_NOTE);
        return;
    }
    int skipped = 0;
    for (int i = 0; i < count && g_n_devices < PYG_CUDA_MAX_DEVICES; i++) {
        gpuDeviceProp p;
        if (gpuGetDeviceProperties(&p, i) != gpuSuccess) { gpuGetLastError(); skipped++; continue; }
#ifdef PYG_GPU_DEVICE_USABLE /* the vendor decides (HIP: the device's gfx arch is one the build has code for) */
        if (!PYG_GPU_DEVICE_USABLE(p)) {
            pyg_cuda_log(PYG_LOG_WARN, "device %d (%s, %s) skipped: built for %s", i, p.name, PYG_GPU_DEVICE_ARCH(p),
                         PYG_GPU_BUILT_ARCHS);
            skipped++;
            continue;
        }
#else
        if (p.major * 10 + p.minor < PYG_CUDA_MIN_CC) {
            pyg_cuda_log(PYG_LOG_WARN, "device %d (%s, compute %d.%d) skipped: built for compute >= %d.%d",
                         i, p.name, p.major, p.minor, PYG_CUDA_MIN_CC / 10, PYG_CUDA_MIN_CC % 10);
            skipped++;
            continue;
        }
#endif
        pyg_device *d = &g_devices[g_n_devices++];
        memset(d, 0, sizeof *d);
        d->index = i;
        d->n_sm = p.multiProcessorCount;
        d->cc_major = p.major;
        d->cc_minor = p.minor;
        d->memory_total = p.totalGlobalMem;
        d->opts = cuda_options_defaults;
        snprintf(d->description, sizeof d->description, "%s", p.name);
        /* pageable writes: cudaMemcpyAsync stages pageable memory before it returns, so the host may
         * reuse the source at once (safe, though not overlapped); pinned writes are truly async. */
        d->caps = PYG_CAP_ASYNC_COMPUTE | PYG_CAP_EVENTS | PYG_CAP_ASYNC_WRITE_PINNED |
                  PYG_CAP_ASYNC_WRITE_PAGEABLE | PYG_CAP_ASYNC_READ | PYG_CAP_GRAPH_CAPTURE |
                  PYG_CAP_HOST_BUFFER | PYG_CAP_MULTI_STREAM;
        pyg_cuda_log(PYG_LOG_INFO, "device %d: %s, compute %d.%d, %d SMs, %.1f GiB", i, p.name, p.major,
                     p.minor, p.multiProcessorCount, (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
    }
    /* peer access between every pair that supports it; cudaMemcpyPeerAsync works between any two
     * devices (without peer access the runtime stages it through the host, still queued on the
     * stream, never blocking the host), so every device of a multi-GPU machine declares peer copies */
    for (int a = 0; a < g_n_devices && g_n_devices > 1; a++) g_devices[a].caps |= PYG_CAP_PEER_COPY;
    for (int a = 0; a < g_n_devices; a++) {
        for (int b = 0; b < g_n_devices; b++) {
            if (a == b) continue;
            int can = 0;
            if (gpuDeviceCanAccessPeer(&can, g_devices[a].index, g_devices[b].index) != gpuSuccess) {
                gpuGetLastError();
                continue;
            }
            if (!can) continue;
            if (gpuSetDevice(g_devices[a].index) == gpuSuccess) {
                gpuError_t pe = gpuDeviceEnablePeerAccess(g_devices[b].index, 0);
                if (pe != gpuSuccess) gpuGetLastError(); /* already enabled is fine */
            }
        }
    }
    if (g_n_devices == 0) {
        g_init_code = PYG_ERR_NO_DEVICE;
#ifdef PYG_GPU_DEVICE_USABLE
        snprintf(g_init_msg, sizeof g_init_msg, "%d %s device(s) found but none usable (built for %s)", skipped,
                 PYG_GPU_RUNTIME, PYG_GPU_BUILT_ARCHS);
#else
        snprintf(g_init_msg, sizeof g_init_msg, "%d %s device(s) found but none usable (need compute >= %d.%d)",
                 skipped, PYG_GPU_RUNTIME, PYG_CUDA_MIN_CC / 10, PYG_CUDA_MIN_CC % 10);
#endif
        return;
    }
    g_init_code = PYG_OK;
}

static pyg_error *plugin_init(void) {
    try {
        std::lock_guard<std::mutex> lock(g_init_mutex);
        if (!g_init_done) {
            init_locked();
            g_init_done = 1;
        }
    } catch (...) {
        return pyg_cuda_error(PYG_ERR_INTERNAL, "plugin_init: unexpected exception");
    }
    if (g_init_code != PYG_OK) return pyg_cuda_error(g_init_code, "%s", g_init_msg);
    return NULL;
}

static int32_t device_count(void) { return g_init_code == PYG_OK && g_init_done ? g_n_devices : 0; }

static pyg_error *device_get(int32_t index, pyg_device **out) {
    if (!out) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_get: out is NULL");
    if (!g_init_done || g_init_code != PYG_OK)
        return pyg_cuda_error(PYG_ERR_NO_DEVICE, "device_get: plugin_init did not succeed");
    if (index < 0 || index >= g_n_devices)
        return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_get: index %d out of range (%d devices)", index,
                              g_n_devices);
    *out = &g_devices[index];
    return NULL;
}

static pyg_error *device_get_props(pyg_device *dev, pyg_device_props *props) {
    if (!dev || !props) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_get_props: NULL argument");
    pyg_device_props p;
    memset(&p, 0, sizeof p);
    p.struct_size = props->struct_size;
    p.name = PYG_GPU_PLUGIN_NAME;
    p.description = dev->description;
    p.type = PYG_DEVICE_GPU;
    p.caps = dev->caps;
    p.quirks = PYG_GPU_QUIRKS; /* vendor.h: none for CUDA; HIP and MUSA declare theirs */
    p.memory_total = dev->memory_total;
    p.alignment = PYG_CUDA_ALIGNMENT;
    p.max_alloc = 0;
    size_t n = props->struct_size < sizeof p ? (size_t)props->struct_size : sizeof p;
    if (n < sizeof(uint64_t)) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_get_props: struct_size too small");
    memcpy((char *)props + sizeof(uint64_t), (char *)&p + sizeof(uint64_t), n - sizeof(uint64_t));
    return NULL;
}

static pyg_error *device_memory(pyg_device *dev, uint64_t *free_bytes, uint64_t *total_bytes) {
    if (!dev) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_memory: dev is NULL");
    SET_DEVICE(dev);
    size_t f = 0, t = 0;
    GPU_TRY(gpuMemGetInfo(&f, &t), PYG_GPU_API "MemGetInfo");
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return NULL;
}

/* Options (options.h, README.md): the table in options.cu, plus blas_lib (process-wide, gemm_blas.cu).
 * They apply to plans created after the call. */
static std::mutex g_opts_mutex;

void pyg_cuda_device_options(const pyg_device *dev, cuda_options *out) {
    std::lock_guard<std::mutex> lock(g_opts_mutex);
    *out = dev ? dev->opts : cuda_options_defaults;
}

static pyg_error *device_set_option(pyg_device *dev, const char *key, const char *value) {
    if (!dev || !key || !value) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "device_set_option: NULL argument");
    char msg[700];
    int32_t st;
    try {
        if (strcmp(key, "blas_lib") == 0) {
            st = gemm_blas_set_library(value, msg, sizeof msg);
        } else {
            std::lock_guard<std::mutex> lock(g_opts_mutex);
            st = cuda_options_set(&dev->opts, key, value, msg, sizeof msg);
        }
    } catch (...) {
        return pyg_cuda_error(PYG_ERR_INTERNAL, "device_set_option: unexpected exception");
    }
    return st == PYG_OK ? NULL : pyg_cuda_error(st, "%s", msg);
}

/* since 1.1: no per-stream options (yet) on CUDA/HIP/MUSA. */
static pyg_error *stream_set_option(pyg_stream *stream, const char *key, const char *value) {
    if (!stream || !key || !value) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_set_option: NULL argument");
    return pyg_cuda_error(PYG_ERR_UNSUPPORTED, "unknown stream option '%.64s' (none known)", key);
}

static int32_t device_supports_op(pyg_device *dev, const pyg_tensor *node) {
    try {
        return pyg_cuda_supports_op(dev, node);
    } catch (...) {
        return 0;
    }
}

/* ---------------------------------------------------------------- streams and events */

static pyg_error *stream_create(pyg_device *dev, uint32_t flags, pyg_stream **out) {
    if (!dev || !out) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_create: NULL argument");
    if (flags != PYG_STREAM_DEFAULT) return pyg_cuda_error(PYG_ERR_UNSUPPORTED, "stream_create: flags 0x%x", flags);
    SET_DEVICE(dev);
    pyg_stream *s = (pyg_stream *)calloc(1, sizeof *s);
    if (!s) return &g_oom_error;
    gpuError_t e = gpuStreamCreateWithFlags(&s->s, gpuStreamNonBlocking);
    if (e != gpuSuccess) { free(s); return pyg_cuda_gpu_error(e, PYG_GPU_API "StreamCreateWithFlags"); }
    s->dev = dev;
    *out = s;
    return NULL;
}

static void stream_destroy(pyg_stream *s) {
    if (!s) return;
    if (gpuSetDevice(s->dev->index) == gpuSuccess) {
        gpuStreamSynchronize(s->s);
        gpuStreamDestroy(s->s);
    }
    gpuGetLastError();
    free(s);
}

static pyg_error *stream_synchronize(pyg_stream *s) {
    if (!s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_synchronize: NULL stream");
    SET_DEVICE(s->dev);
    GPU_TRY(gpuStreamSynchronize(s->s), PYG_GPU_API "StreamSynchronize");
    return NULL;
}

static pyg_error *stream_wait_event(pyg_stream *s, pyg_event *ev) {
    if (!s || !ev) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_wait_event: NULL argument");
    SET_DEVICE(s->dev); /* the waiting stream's device; the event may be another device's */
    GPU_TRY(gpuStreamWaitEvent(s->s, ev->e), PYG_GPU_API "StreamWaitEvent");
    return NULL;
}

static pyg_error *event_create(pyg_device *dev, pyg_event **out) {
    if (!dev || !out) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "event_create: NULL argument");
    SET_DEVICE(dev); /* events belong to the device current at creation */
    pyg_event *ev = (pyg_event *)calloc(1, sizeof *ev);
    if (!ev) return &g_oom_error;
    gpuError_t e = gpuEventCreateWithFlags(&ev->e, gpuEventDisableTiming);
    if (e != gpuSuccess) { free(ev); return pyg_cuda_gpu_error(e, PYG_GPU_API "EventCreateWithFlags"); }
    ev->dev = dev;
    *out = ev;
    return NULL;
}

static void event_destroy(pyg_event *ev) {
    if (!ev) return;
    if (gpuSetDevice(ev->dev->index) == gpuSuccess) gpuEventDestroy(ev->e);
    gpuGetLastError();
    free(ev);
}

static pyg_error *event_record(pyg_event *ev, pyg_stream *s) {
    if (!ev || !s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "event_record: NULL argument");
    if (ev->dev != s->dev)
        return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "event_record: event of device %d, stream of device %d",
                              ev->dev->index, s->dev->index);
    SET_DEVICE(ev->dev);
    GPU_TRY(gpuEventRecord(ev->e, s->s), PYG_GPU_API "EventRecord");
    return NULL;
}

static pyg_error *event_query(pyg_event *ev, int32_t *done) {
    if (!ev || !done) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "event_query: NULL argument");
    SET_DEVICE(ev->dev);
    gpuError_t e = gpuEventQuery(ev->e);
    if (e == gpuSuccess) { *done = 1; return NULL; }
    if (e == gpuErrorNotReady) { gpuGetLastError(); *done = 0; return NULL; }
    *done = 0;
    return pyg_cuda_gpu_error(e, PYG_GPU_API "EventQuery");
}

static pyg_error *event_synchronize(pyg_event *ev) {
    if (!ev) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "event_synchronize: NULL event");
    SET_DEVICE(ev->dev);
    GPU_TRY(gpuEventSynchronize(ev->e), PYG_GPU_API "EventSynchronize");
    return NULL;
}

/* ---------------------------------------------------------------- buffers and copies */

static pyg_error *buffer_alloc(pyg_device *dev, uint64_t size, uint32_t flags, pyg_buffer **out) {
    if (!dev || !out) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "buffer_alloc: NULL argument");
    if (flags & ~PYG_BUFFER_HOST) return pyg_cuda_error(PYG_ERR_UNSUPPORTED, "buffer_alloc: flags 0x%x", flags);
    SET_DEVICE(dev);
    pyg_buffer *b = (pyg_buffer *)calloc(1, sizeof *b);
    if (!b) return &g_oom_error;
    /* never hand out NULL; whole 4-byte words: the mat-vec reads a 2-byte aligned block as aligned
     * words, the last one up to 2 bytes past a tensor that ends the buffer */
    const uint64_t want = size ? (size + 3) / 4 * 4 : PYG_CUDA_ALIGNMENT;
    const size_t n = (size_t)want;
    if ((uint64_t)n != want || want < size) {
        free(b);
        return pyg_cuda_error(PYG_ERR_OUT_OF_MEMORY, "buffer_alloc: %llu bytes do not fit size_t",
                              (unsigned long long)size);
    }
    gpuError_t e = (flags & PYG_BUFFER_HOST) ? gpuHostAlloc(&b->ptr, n, gpuHostAllocDefault) : gpuMalloc(&b->ptr, n);
    if (e != gpuSuccess) {
        free(b);
        gpuGetLastError();
        const int32_t code = e == gpuErrorMemoryAllocation ? PYG_ERR_OUT_OF_MEMORY : PYG_ERR_DEVICE;
        return pyg_cuda_error(code, "buffer_alloc: %s of %llu bytes on device %d failed: %s",
                              (flags & PYG_BUFFER_HOST) ? PYG_GPU_API "HostAlloc" : PYG_GPU_API "Malloc", (unsigned long long)size,
                              dev->index, gpuGetErrorString(e));
    }
    b->dev = dev;
    b->size = size;
    b->flags = flags;
    *out = b;
    return NULL;
}

static void buffer_free(pyg_buffer *b) {
    if (!b) return;
    if (b->repacked) cuda_repack_invalidate(b, b->ptr, 0, b->size, 1);
    if (gpuSetDevice(b->dev->index) == gpuSuccess) {
        if (b->flags & PYG_BUFFER_HOST) gpuFreeHost(b->ptr);
        else gpuFree(b->ptr);
    }
    gpuGetLastError();
    free(b);
}

static pyg_error *buffer_get_info(pyg_buffer *b, pyg_buffer_info *info) {
    if (!b || !info) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: NULL argument");
    pyg_buffer_info i;
    memset(&i, 0, sizeof i);
    i.struct_size = info->struct_size;
    i.size = b->size;
    i.base = b->ptr; /* pinned host memory has the same address on the device (unified addressing) */
    i.host_ptr = (b->flags & PYG_BUFFER_HOST) ? b->ptr : NULL;
    i.flags = b->flags;
    size_t n = info->struct_size < sizeof i ? (size_t)info->struct_size : sizeof i;
    if (n < sizeof(uint64_t)) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "buffer_get_info: struct_size too small");
    memcpy((char *)info + sizeof(uint64_t), (char *)&i + sizeof(uint64_t), n - sizeof(uint64_t));
    return NULL;
}

static pyg_error *check_range(const pyg_buffer *b, uint64_t offset, uint64_t size, const char *what) {
    if (!b) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "%s: NULL buffer", what);
    if (offset > b->size || size > b->size - offset)
        return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "%s: range [%llu, +%llu) outside buffer of %llu bytes", what,
                              (unsigned long long)offset, (unsigned long long)size, (unsigned long long)b->size);
    return NULL;
}

static pyg_error *buffer_write(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) {
    pyg_error *e = check_range(dst, offset, size, "buffer_write");
    if (e) return e;
    if (!size) return NULL;
    if (!src) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "buffer_write: NULL source");
    if (dst->repacked) cuda_repack_invalidate(dst, dst->ptr, offset, size, 0);
    if (dst->flags & PYG_BUFFER_HOST) { memcpy((char *)dst->ptr + offset, src, size); return NULL; }
    SET_DEVICE(dst->dev);
    GPU_TRY(gpuMemcpy((char *)dst->ptr + offset, src, size, gpuMemcpyHostToDevice), PYG_GPU_API "Memcpy (write)");
    /* From pageable memory the copy returns once the source is staged, before the bytes land,
     * and it runs on the legacy default stream, which our non-blocking streams do not wait for:
     * work queued right after could read the old bytes (the strict race seen on the H200). The
     * contract says a blocking copy is done when it returns: wait for the default stream. */
    if (dst->dev->opts.write_sync) GPU_TRY(gpuStreamSynchronize(0), PYG_GPU_API "StreamSynchronize (write)");
    return NULL;
}

static pyg_error *buffer_read(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) {
    pyg_error *e = check_range(src, offset, size, "buffer_read");
    if (e) return e;
    if (!size) return NULL;
    if (!dst) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "buffer_read: NULL destination");
    if (src->flags & PYG_BUFFER_HOST) { memcpy(dst, (char *)src->ptr + offset, size); return NULL; }
    SET_DEVICE(src->dev);
    GPU_TRY(gpuMemcpy(dst, (char *)src->ptr + offset, size, gpuMemcpyDeviceToHost), PYG_GPU_API "Memcpy (read)");
    return NULL;
}

static pyg_error *buffer_fill(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size) {
    pyg_error *e = check_range(dst, offset, size, "buffer_fill");
    if (e) return e;
    if (!size) return NULL;
    if (dst->repacked) cuda_repack_invalidate(dst, dst->ptr, offset, size, 0);
    if (dst->flags & PYG_BUFFER_HOST) { memset((char *)dst->ptr + offset, value, size); return NULL; }
    SET_DEVICE(dst->dev);
    GPU_TRY(gpuMemset((char *)dst->ptr + offset, value, size), PYG_GPU_API "Memset");
    GPU_TRY(gpuStreamSynchronize(0), PYG_GPU_API "StreamSynchronize (fill)"); /* blocking by contract */
    return NULL;
}

static pyg_error *stream_write_async(pyg_stream *s, pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) {
    if (!s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL stream");
    pyg_error *e = check_range(dst, offset, size, "stream_write_async");
    if (e) return e;
    if (!size) return NULL;
    if (!src) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_write_async: NULL source");
    if (dst->repacked) cuda_repack_invalidate(dst, dst->ptr, offset, size, 0);
    SET_DEVICE(s->dev);
    GPU_TRY(gpuMemcpyAsync((char *)dst->ptr + offset, src, size, gpuMemcpyDefault, s->s), PYG_GPU_API "MemcpyAsync (write)");
    return NULL;
}

static pyg_error *stream_read_async(pyg_stream *s, pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) {
    if (!s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL stream");
    pyg_error *e = check_range(src, offset, size, "stream_read_async");
    if (e) return e;
    if (!size) return NULL;
    if (!dst) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_read_async: NULL destination");
    SET_DEVICE(s->dev);
    GPU_TRY(gpuMemcpyAsync(dst, (char *)src->ptr + offset, size, gpuMemcpyDefault, s->s), PYG_GPU_API "MemcpyAsync (read)");
    return NULL;
}

static pyg_error *stream_copy_async(pyg_stream *s, pyg_buffer *dst, uint64_t dst_offset, pyg_buffer *src,
                                    uint64_t src_offset, uint64_t size) {
    if (!s) return pyg_cuda_error(PYG_ERR_INVALID_ARGUMENT, "stream_copy_async: NULL stream");
    pyg_error *e = check_range(dst, dst_offset, size, "stream_copy_async (dst)");
    if (e) return e;
    e = check_range(src, src_offset, size, "stream_copy_async (src)");
    if (e) return e;
    if (!size) return NULL;
    if (dst->repacked) cuda_repack_invalidate(dst, dst->ptr, dst_offset, size, 0);
    SET_DEVICE(s->dev);
    char *d = (char *)dst->ptr + dst_offset;
    const char *p = (const char *)src->ptr + src_offset;
    const int host_side = (dst->flags | src->flags) & PYG_BUFFER_HOST;
    if (dst->dev == src->dev || host_side) {
        GPU_TRY(gpuMemcpyAsync(d, p, size, gpuMemcpyDefault, s->s), PYG_GPU_API "MemcpyAsync (copy)");
    } else {
        GPU_TRY(gpuMemcpyPeerAsync(d, dst->dev->index, p, src->dev->index, size, s->s), PYG_GPU_API "MemcpyPeerAsync");
    }
    return NULL;
}

/* ---------------------------------------------------------------- graph plans (graph.cu) */

static pyg_error *graph_plan_create(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out) {
    try {
        return pyg_cuda_plan_create(dev, graph, out);
    } catch (...) {
        return pyg_cuda_error(PYG_ERR_INTERNAL, "graph_plan_create: unexpected exception");
    }
}

static void graph_plan_destroy(pyg_graph_plan *plan) {
    try {
        pyg_cuda_plan_destroy(plan);
    } catch (...) {
    }
}

static pyg_error *graph_plan_compute(pyg_graph_plan *plan, pyg_stream *stream) {
    try {
        return pyg_cuda_plan_compute(plan, stream);
    } catch (...) {
        return pyg_cuda_error(PYG_ERR_INTERNAL, "graph_plan_compute: unexpected exception");
    }
}

/* ---------------------------------------------------------------- the table */

static const pyg_plugin_api g_api = {
    /* .struct_size        = */ sizeof(pyg_plugin_api),
    /* .abi_major          = */ PYG_ABI_MAJOR,
    /* .abi_minor          = */ PYG_ABI_MINOR,
    /* .reserved0          = */ 0,
    /* .name               = */ PYG_GPU_PLUGIN_NAME,
    /* .version            = */ PYG_CUDA_VERSION,
    /* .error_code         = */ err_code,
    /* .error_message      = */ err_message,
    /* .error_destroy      = */ err_destroy,
    /* .plugin_init        = */ plugin_init,
    /* .device_count       = */ device_count,
    /* .device_get         = */ device_get,
    /* .device_get_props   = */ device_get_props,
    /* .device_memory      = */ device_memory,
    /* .device_set_option  = */ device_set_option,
    /* .device_supports_op = */ device_supports_op,
    /* .stream_create      = */ stream_create,
    /* .stream_destroy     = */ stream_destroy,
    /* .stream_synchronize = */ stream_synchronize,
    /* .stream_wait_event  = */ stream_wait_event,
    /* .event_create       = */ event_create,
    /* .event_destroy      = */ event_destroy,
    /* .event_record       = */ event_record,
    /* .event_query        = */ event_query,
    /* .event_synchronize  = */ event_synchronize,
    /* .buffer_alloc       = */ buffer_alloc,
    /* .buffer_free        = */ buffer_free,
    /* .buffer_get_info    = */ buffer_get_info,
    /* .buffer_write       = */ buffer_write,
    /* .buffer_read        = */ buffer_read,
    /* .buffer_fill        = */ buffer_fill,
    /* .stream_write_async = */ stream_write_async,
    /* .stream_read_async  = */ stream_read_async,
    /* .stream_copy_async  = */ stream_copy_async,
    /* .graph_plan_create  = */ graph_plan_create,
    /* .graph_plan_destroy = */ graph_plan_destroy,
    /* .graph_plan_compute = */ graph_plan_compute,
    /* .stream_set_option  = */ stream_set_option,
};

extern "C" PYG_PLUGIN_EXPORT const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host) {
    if (host && host->struct_size >= offsetof(pyg_host_info, log_user_data) + sizeof(void *)) g_host = host;
    return &g_api;
}
