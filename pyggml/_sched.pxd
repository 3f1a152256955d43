# Scheduler twins: the C records the hot path walks without the GIL.
from libc.stdint cimport uint64_t, int64_t
from pyggml._abi cimport pyg_buffer, pyg_tensor, pyg_graph, pyg_graph_plan, pyg_stream
from pyggml._plugin cimport Device

cdef struct Copy:
    pyg_buffer *buf     # device side
    uint64_t off
    void *host          # host side: numpy data, set per compute
    uint64_t size

cdef class DeviceBuffer:
    cdef readonly Device device
    cdef pyg_buffer *buf
    cdef readonly uint64_t size
    cdef void *base

cdef class Plan:
    cdef pyg_tensor *ct            # every tensor of the plan (host-owned descriptors)
    cdef int n_tensors
    cdef pyg_tensor **nodes        # the non-leaf ones, in execution order
    cdef pyg_graph graph
    cdef pyg_graph_plan *gplan
    cdef readonly Device device
    cdef pyg_stream *stream
    cdef readonly DeviceBuffer arena
    cdef Copy *inputs
    cdef int n_inputs
    cdef Copy *outputs
    cdef int n_outputs
    cdef readonly list input_specs     # (name, DType, shape)
    cdef readonly list output_specs    # (Tensor, numpy dtype, numpy shape)
    cdef readonly uint64_t peak_bytes
    cdef readonly int n_nodes
    cdef int poison
    cdef object stream_ref
    cdef int run(self, char *pattern, int cap, double *backend_s) except -1
