# Scheduler runtime twins: the C records the hot path walks without the GIL.
from libc.stdint cimport uint64_t, int64_t, int32_t
from pyggml._abi cimport pyg_buffer, pyg_tensor, pyg_graph, pyg_graph_plan, pyg_stream, pyg_event, pyg_plugin_api
from pyggml._plugin cimport Device

# One step of a run's program (see _program.py for how programs are made).
cdef struct Cmd:
    int32_t kind            # WRITE, READ, COPY, LAUNCH, RECORD, WAIT, SYNC_EVENT, SYNC_STREAM, HOST_COPY
    int32_t is_async
    int32_t dev             # index into the plan's devices
    int32_t host_table      # -1: `host` is a fixed pointer; 0: inputs table; 1: outputs table
    int32_t host_index      # index into that table
    int32_t synchronous     # LAUNCH on a device that finishes before returning (counts as backend time)
    const pyg_plugin_api *api
    pyg_stream *stream
    pyg_event *event
    pyg_graph_plan *plan
    pyg_buffer *buf         # device side (destination of COPY)
    uint64_t off
    pyg_buffer *buf2        # source of COPY
    uint64_t off2
    void *host
    void *host2             # HOST_COPY: the pinned side (is_async 0: user -> pinned, 1: pinned -> user)
    uint64_t size

cdef class DeviceBuffer:
    cdef readonly Device device
    cdef const pyg_plugin_api *api
    cdef pyg_buffer *buf
    cdef readonly uint64_t size
    cdef void *base
    cdef void *host_ptr

# Trace mode: an event recorded after a queued command, and when the host saw it complete.
cdef struct Watch:
    const pyg_plugin_api *api
    pyg_event *event
    int32_t cmd             # the traced command
    int32_t record          # the RECORD command of its event (the event is fresh until that ran)
    double done

cdef class Program:
    cdef Cmd *cmds
    cdef readonly int n
    cdef Watch *watch
    cdef int n_watch
    cdef double *t_start
    cdef double *t_end
    cdef int stop
    cdef readonly str pattern
    cdef readonly list text
    cdef readonly list info
    cdef readonly object dropped
    cdef public list per_split
    cdef public list keep
    cdef int _run(self, void **inputs, void **outputs, double *backend_s) except -1
