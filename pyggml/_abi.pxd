# The C ABI of include/pyggml/, as Cython sees it. Mirrors plugin.h section by section; values and
# sizes come from the headers (cdef extern), never from copies here.
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t, uint64_t, uint8_t

cdef extern from "pyggml/pyggml.h" nogil:
    # ---- types.h
    ctypedef struct pyg_type_traits:
        const char *name
        int32_t block_size
        int32_t type_size
        int32_t is_quantized
    const pyg_type_traits *pyg_type_get_traits(int32_t type)

    # ---- tensor.h
    enum:
        PYG_MAX_DIMS
        PYG_MAX_SRC
        PYG_MAX_OP_PARAMS
        PYG_MAX_NAME
        PYG_TENSOR_FLAG_INPUT
        PYG_TENSOR_FLAG_OUTPUT
        PYG_TENSOR_FLAG_WEIGHT
        PYG_TENSOR_FLAG_STATE
    ctypedef struct pyg_buffer:
        pass
    ctypedef struct pyg_tensor:
        int32_t type
        int32_t op
        int64_t ne[PYG_MAX_DIMS]
        uint64_t nb[PYG_MAX_DIMS]
        int32_t op_params[PYG_MAX_OP_PARAMS]
        uint32_t flags
        pyg_tensor *src[PYG_MAX_SRC]
        pyg_tensor *view_src
        uint64_t view_offs
        pyg_buffer *buffer
        uint64_t offset
        void *data
        char name[PYG_MAX_NAME]
    ctypedef struct pyg_graph:
        uint64_t struct_size
        int32_t n_nodes
        pyg_tensor **nodes
        uint64_t id

    # ---- plugin.h
    enum:
        PYG_ABI_MAJOR
        PYG_ABI_MINOR
        PYG_ABI_MINOR_WINDOW
        PYG_OK
        PYG_ERR_INVALID_ARGUMENT
        PYG_ERR_UNSUPPORTED
        PYG_ERR_OUT_OF_MEMORY
        PYG_ERR_NO_DEVICE
        PYG_ERR_DEVICE
        PYG_ERR_ABI
        PYG_ERR_INTERNAL
        PYG_ERR_SANITIZER
    # caps, quirks and buffer flags (values come from the header when the C is compiled)
    enum:
        PYG_CAP_ASYNC_COMPUTE
        PYG_CAP_EVENTS
        PYG_CAP_ASYNC_WRITE_PINNED
        PYG_CAP_ASYNC_WRITE_PAGEABLE
        PYG_CAP_ASYNC_READ
        PYG_CAP_PEER_COPY
        PYG_CAP_GRAPH_CAPTURE
        PYG_CAP_HOST_BUFFER
        PYG_CAP_HOST_MEMORY
        PYG_CAP_MULTI_STREAM
        PYG_QUIRK_NO_ASYNC_HOST_COPY
        PYG_QUIRK_MULTI_DEVICE_SYNC
        PYG_BUFFER_DEVICE
        PYG_BUFFER_HOST
        PYG_LOG_DEBUG
        PYG_LOG_INFO
        PYG_LOG_WARN
        PYG_LOG_ERROR
        PYG_DEVICE_CPU
        PYG_DEVICE_GPU
    ctypedef struct pyg_error:
        pass
    ctypedef struct pyg_device:
        pass
    ctypedef struct pyg_stream:
        pass
    ctypedef struct pyg_event:
        pass
    ctypedef struct pyg_graph_plan:
        pass

    ctypedef struct pyg_host_info:
        uint64_t struct_size
        uint16_t abi_major
        uint16_t abi_minor
        void (*log)(void *user_data, int32_t level, const char *plugin, const char *msg) noexcept nogil
        void *log_user_data

    ctypedef struct pyg_device_props:
        uint64_t struct_size
        const char *name
        const char *description
        int32_t type
        uint64_t caps
        uint64_t quirks
        uint64_t memory_total
        uint64_t alignment
        uint64_t max_alloc

    ctypedef struct pyg_buffer_info:
        uint64_t struct_size
        uint64_t size
        void *base
        void *host_ptr
        uint32_t flags

    ctypedef struct pyg_plugin_api:
        uint64_t struct_size
        uint16_t abi_major
        uint16_t abi_minor
        const char *name
        const char *version
        int32_t (*error_code)(const pyg_error *err) noexcept nogil
        const char *(*error_message)(const pyg_error *err) noexcept nogil
        void (*error_destroy)(pyg_error *err) noexcept nogil
        pyg_error *(*plugin_init)() noexcept nogil
        int32_t (*device_count)() noexcept nogil
        pyg_error *(*device_get)(int32_t index, pyg_device **out) noexcept nogil
        pyg_error *(*device_get_props)(pyg_device *dev, pyg_device_props *props) noexcept nogil
        pyg_error *(*device_memory)(pyg_device *dev, uint64_t *free_bytes, uint64_t *total_bytes) noexcept nogil
        pyg_error *(*device_set_option)(pyg_device *dev, const char *key, const char *value) noexcept nogil
        int32_t (*device_supports_op)(pyg_device *dev, const pyg_tensor *node) noexcept nogil
        pyg_error *(*stream_create)(pyg_device *dev, uint32_t flags, pyg_stream **out) noexcept nogil
        void (*stream_destroy)(pyg_stream *stream) noexcept nogil
        pyg_error *(*stream_synchronize)(pyg_stream *stream) noexcept nogil
        pyg_error *(*stream_wait_event)(pyg_stream *stream, pyg_event *event) noexcept nogil
        pyg_error *(*event_create)(pyg_device *dev, pyg_event **out) noexcept nogil
        void (*event_destroy)(pyg_event *event) noexcept nogil
        pyg_error *(*event_record)(pyg_event *event, pyg_stream *stream) noexcept nogil
        pyg_error *(*event_query)(pyg_event *event, int32_t *done) noexcept nogil
        pyg_error *(*event_synchronize)(pyg_event *event) noexcept nogil
        pyg_error *(*buffer_alloc)(pyg_device *dev, uint64_t size, uint32_t flags, pyg_buffer **out) noexcept nogil
        void (*buffer_free)(pyg_buffer *buffer) noexcept nogil
        pyg_error *(*buffer_get_info)(pyg_buffer *buffer, pyg_buffer_info *info) noexcept nogil
        pyg_error *(*buffer_write)(pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) noexcept nogil
        pyg_error *(*buffer_read)(pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) noexcept nogil
        pyg_error *(*buffer_fill)(pyg_buffer *dst, uint64_t offset, uint8_t value, uint64_t size) noexcept nogil
        pyg_error *(*stream_write_async)(pyg_stream *stream, pyg_buffer *dst, uint64_t offset, const void *src, uint64_t size) noexcept nogil
        pyg_error *(*stream_read_async)(pyg_stream *stream, pyg_buffer *src, uint64_t offset, void *dst, uint64_t size) noexcept nogil
        pyg_error *(*stream_copy_async)(pyg_stream *stream, pyg_buffer *dst, uint64_t dst_offset, pyg_buffer *src, uint64_t src_offset, uint64_t size) noexcept nogil
        pyg_error *(*graph_plan_create)(pyg_device *dev, const pyg_graph *graph, pyg_graph_plan **out) noexcept nogil
        void (*graph_plan_destroy)(pyg_graph_plan *plan) noexcept nogil
        pyg_error *(*graph_plan_compute)(pyg_graph_plan *plan, pyg_stream *stream) noexcept nogil
        # since 1.1 (optional: check pyg_host_has_stream_set_option before calling)
        pyg_error *(*stream_set_option)(pyg_stream *stream, const char *key, const char *value) noexcept nogil

    ctypedef const pyg_plugin_api *(*pyg_plugin_get_api_fn)(const pyg_host_info *host) noexcept nogil
