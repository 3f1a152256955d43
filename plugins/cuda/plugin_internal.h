/* plugins/cuda/plugin_internal.h — the handle structs and error helpers shared by plugin.cu (the
 * ABI table, devices, streams, events, buffers) and graph.cu (plans, supports_op). */
#ifndef PYG_CUDA_PLUGIN_INTERNAL_H
#define PYG_CUDA_PLUGIN_INTERNAL_H

#include "vendor.h"
#include "pyggml/pyggml.h"
#include "options.h"

struct pyg_error {
    int32_t code;
    int32_t is_static; /* 1: not freed by error_destroy (the out-of-memory fallback) */
    char msg[1];       /* NUL-terminated, allocated past the struct */
};

struct pyg_device {
    int index;                 /* runtime device ordinal */
    int n_sm;
    int cc_major, cc_minor;
    cuda_options opts;         /* device_set_option; read through pyg_cuda_device_options */
    uint64_t caps;
    uint64_t memory_total;
    char description[256];     /* "NVIDIA H200" */
};

struct pyg_stream {
    pyg_device *dev;
    gpuStream_t s;
};

struct pyg_event {
    pyg_device *dev;
    gpuEvent_t e;
};

struct pyg_buffer {
    pyg_device *dev;
    void *ptr;
    uint64_t size;
    uint32_t flags;
    int repacked;              /* 1: weights inside have repacked copies (repack.cu): writes invalidate them */
};

/* errors (plugin.cu) */
pyg_error *pyg_cuda_error(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
pyg_error *pyg_cuda_gpu_error(gpuError_t e, const char *what); /* NULL when e == gpuSuccess */
void pyg_cuda_log(int32_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A consistent copy of dev's options (device_set_option may run on another thread). */
void pyg_cuda_device_options(const pyg_device *dev, cuda_options *out);

/* graph plans and op support (graph.cu) */
int32_t pyg_cuda_supports_op(pyg_device *dev, const pyg_tensor *node);
pyg_error *pyg_cuda_plan_create(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out);
void pyg_cuda_plan_destroy(pyg_graph_plan *plan);
pyg_error *pyg_cuda_plan_compute(pyg_graph_plan *plan, pyg_stream *stream);

#endif
