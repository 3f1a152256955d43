# cython: language_level=3
"""The scheduler's runtime, in C: device memory, streams and events, the devices' graph plans
built from tensor descriptors, and Program, a run's commands executed without the GIL.

Everything that decides (assignment, splits, memory layout, the command program under the sync
contract) is Python: pyggml/_plan.py and pyggml/_program.py; the public Scheduler is in
pyggml/scheduler.py."""
import itertools

import numpy as np

cimport cython
from libc.stdint cimport uint64_t, int64_t, uintptr_t, int32_t, uint8_t, uint32_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset, memcpy, strncpy
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from posix.unistd cimport usleep

from pyggml._abi cimport *
from pyggml._plugin cimport Device, check, stream_set_option
from pyggml import _plugin
from pyggml.errors import PyggmlError, ShapeError
from pyggml import _program as P

_graph_ids = itertools.count(1)

# At interpreter exit, vendor runtimes (cudart's static destructors) may be torn down before the
# garbage collector frees our handles; after atexit runs, handles are left to the process exit.
cdef bint _exiting = 0


def _at_exit():
    global _exiting
    _exiting = 1


import atexit as _atexit
_atexit.register(_at_exit)


def exiting():
    return bool(_exiting)


DEF K_WRITE = 0
DEF K_READ = 1
DEF K_COPY = 2
DEF K_LAUNCH = 3
DEF K_RECORD = 4
DEF K_WAIT = 5
DEF K_SYNC_EVENT = 6
DEF K_SYNC_STREAM = 7
DEF K_HOST_COPY = 8
assert (K_WRITE, K_READ, K_COPY, K_LAUNCH, K_RECORD, K_WAIT, K_SYNC_EVENT, K_SYNC_STREAM, K_HOST_COPY) == \
    (P.WRITE, P.READ, P.COPY, P.LAUNCH, P.RECORD, P.WAIT, P.SYNC_EVENT, P.SYNC_STREAM, P.HOST_COPY)


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


def now():
    """CLOCK_MONOTONIC seconds, the clock of the run timings."""
    return _now()


# ---------------------------------------------------------------- memory

@cython.no_gc_clear
cdef class DeviceBuffer:
    """One buffer of a device; freed when the object goes. (The plugin table pointer is kept as a
    C field: the garbage collector may clear Python fields before __dealloc__ runs.)"""

    def __dealloc__(self):
        if self.buf != NULL and self.api != NULL and not _exiting:
            self.api.buffer_free(self.buf)
            self.buf = NULL

    @property
    def host_visible(self):
        return self.host_ptr != NULL

    def write(self, uint64_t off, arr, what="write"):
        """Blocking write of a contiguous numpy array at `off`."""
        cdef uintptr_t src = arr.ctypes.data
        cdef uint64_t n = arr.nbytes
        cdef pyg_error *err
        with nogil:
            err = self.api.buffer_write(self.buf, off, <const void *>src, n)
        check(self.api, err, self.device.plugin.name, what)

    def read(self, uint64_t off, arr, what="read"):
        """Blocking read into a contiguous numpy array from `off`."""
        cdef uintptr_t dst = arr.ctypes.data
        cdef uint64_t n = arr.nbytes
        cdef pyg_error *err
        with nogil:
            err = self.api.buffer_read(self.buf, off, <void *>dst, n)
        check(self.api, err, self.device.plugin.name, what)

    def fill(self, uint64_t off, int value, uint64_t size, what="fill"):
        cdef pyg_error *err
        with nogil:
            err = self.api.buffer_fill(self.buf, off, <uint8_t>value, size)
        check(self.api, err, self.device.plugin.name, what)


def alloc_buffer(Device dev, uint64_t size, dict stats, str what, bint host=False):
    """A buffer of `size` bytes on dev (pinned host memory with host=True); counted in stats."""
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef pyg_buffer *buf = NULL
    cdef pyg_buffer_info info
    cdef const pyg_plugin_api *api = dev.plugin.api
    cdef uint32_t flags = PYG_BUFFER_HOST if host else 0
    check(api, api.buffer_alloc(dev.dev, size if size else 1, flags, &buf), dev.plugin.name,
          f"allocating {size} bytes for {what} on {dev}")
    b.device = dev
    b.api = api
    b.buf = buf
    b.size = size
    memset(&info, 0, sizeof(info))
    info.struct_size = sizeof(info)
    check(api, api.buffer_get_info(buf, &info), dev.plugin.name, "buffer_get_info")
    b.base = info.base
    b.host_ptr = info.host_ptr
    stats["buffer_allocs"] += 1
    stats["bytes_allocated"] += size
    return b


# ---------------------------------------------------------------- streams and events

@cython.no_gc_clear
cdef class Stream:
    """A queue of a device, owned by one Scheduler."""
    cdef readonly Device dev
    cdef const pyg_plugin_api *api
    cdef pyg_stream *s

    def __dealloc__(self):
        if self.s != NULL and self.api != NULL and not _exiting:
            with nogil:
                self.api.stream_destroy(self.s)

    def synchronize(self, bint raise_errors=True):
        """Host wait for everything queued; with raise_errors=False errors are dropped (release)."""
        cdef pyg_error *err
        if self.s == NULL:
            return
        with nogil:
            err = self.api.stream_synchronize(self.s)
        if raise_errors:
            check(self.api, err, self.dev.plugin.name, f"stream_synchronize on {self.dev}")
        elif err != NULL:
            self.api.error_destroy(err)


def make_stream(Device dev, n_threads=None):
    """A new stream of `dev`; on a CPU device with `n_threads`, that stream's thread count (ABI 1.1
    stream_set_option: the scheduler's own, not the device's)."""
    cdef pyg_stream *s = NULL
    check(dev.plugin.api, dev.plugin.api.stream_create(dev.dev, 0, &s), dev.plugin.name, f"stream_create on {dev}")
    cdef Stream st = Stream.__new__(Stream)
    st.dev = dev
    st.api = dev.plugin.api
    st.s = s
    if n_threads is not None and dev.kind == PYG_DEVICE_CPU:
        stream_set_option(dev, s, "n_threads", str(int(n_threads)))
    return st


@cython.no_gc_clear
cdef class Event:
    cdef Device dev
    cdef const pyg_plugin_api *api
    cdef pyg_event *e

    def __dealloc__(self):
        if self.e != NULL and self.api != NULL and not _exiting:
            self.api.event_destroy(self.e)


def make_event(Device dev):
    cdef pyg_event *e = NULL
    check(dev.plugin.api, dev.plugin.api.event_create(dev.dev, &e), dev.plugin.name, f"event_create on {dev}")
    cdef Event ev = Event.__new__(Event)
    ev.dev = dev
    ev.api = dev.plugin.api
    ev.e = e
    return ev


# ---------------------------------------------------------------- descriptors and graph plans

cdef void _fill_desc(pyg_tensor *c, t):
    c.type = t.type.id
    c.op = t.op
    for d in range(4):
        c.ne[d] = t.ne[d]
        c.nb[d] = t.nb[d]
    for j, v in enumerate(t.params[:16]):
        c.op_params[j] = v
    c.flags = t.flags
    nm = (t.name or f"{t.op_name}#{t.id}").encode()[:63]
    strncpy(c.name, nm, 63)


cdef class SupportProbe:
    """Descriptors (without memory) of a whole graph, to ask each device's supports_op once per
    (device, node)."""
    cdef pyg_tensor *ct
    cdef dict index
    cdef dict cache
    cdef list devices

    def __cinit__(self, list order, list devices):
        self.ct = <pyg_tensor *>calloc(max(1, len(order)), sizeof(pyg_tensor))
        if self.ct == NULL:
            raise MemoryError("plan: out of host memory")
        self.index = {t.id: i for i, t in enumerate(order)}
        self.cache = {}
        self.devices = devices
        for i, t in enumerate(order):
            _fill_desc(&self.ct[i], t)
        for i, t in enumerate(order):
            for j, s in enumerate(t.src[:6]):
                self.ct[i].src[j] = &self.ct[self.index[s.id]] if s is not None else NULL
            self.ct[i].view_src = &self.ct[self.index[t.view_src.id]] if t.view_src is not None else NULL
            self.ct[i].view_offs = t.view_offs

    def __dealloc__(self):
        free(self.ct)

    def __call__(self, int d, t):
        key = (d, t.id)
        r = self.cache.get(key)
        if r is None:
            r = self._ask(d, self.index[t.id])
            self.cache[key] = r
        return r

    cdef bint _ask(self, int d, int i):
        cdef Device dv = self.devices[d]
        return dv.plugin.api.device_supports_op(dv.dev, &self.ct[i]) != 0


@cython.no_gc_clear
cdef class DeviceGraph:
    """The descriptors of one split (one input slot) and the device's graph plan made from them."""
    cdef pyg_tensor *ct
    cdef pyg_tensor **nodes
    cdef pyg_graph graph
    cdef pyg_graph_plan *gplan
    cdef Device dev
    cdef const pyg_plugin_api *api

    def __dealloc__(self):
        if self.gplan != NULL and self.api != NULL and not _exiting:
            self.api.graph_plan_destroy(self.gplan)
        free(self.ct)
        free(self.nodes)


def make_device_graph(Device dev, list needed, list nodes, locate, str what, read_after=()):
    """Descriptors for `needed` tensors (nodes among them) at the memory `locate(t)` gives as
    (DeviceBuffer, offset), and the device's graph plan over `nodes`. The ids in `read_after`
    (nodes whose bytes are read once the graph has run: by the host or another split) get
    PYG_TENSOR_FLAG_OUTPUT."""
    idx = {t.id: i for i, t in enumerate(needed)}
    cdef DeviceGraph D = DeviceGraph.__new__(DeviceGraph)
    D.dev = dev
    D.api = dev.plugin.api
    D.ct = <pyg_tensor *>calloc(max(1, len(needed)), sizeof(pyg_tensor))
    D.nodes = <pyg_tensor **>calloc(max(1, len(nodes)), sizeof(pyg_tensor *))
    if D.ct == NULL or D.nodes == NULL:
        raise MemoryError("plan: out of host memory")
    cdef DeviceBuffer buf
    cdef uint64_t off
    for i, t in enumerate(needed):
        _fill_desc(&D.ct[i], t)
        if t.id in read_after:
            D.ct[i].flags |= PYG_TENSOR_FLAG_OUTPUT
        for j, s in enumerate(t.src[:6]):
            D.ct[i].src[j] = &D.ct[idx[s.id]] if (s is not None and s.id in idx) else NULL
        if t.view_src is not None and t.view_src.id in idx:
            D.ct[i].view_src = &D.ct[idx[t.view_src.id]]
        D.ct[i].view_offs = t.view_offs
        buf, off = locate(t)
        D.ct[i].buffer = buf.buf
        D.ct[i].offset = off
        D.ct[i].data = <void *>(<char *>buf.base + off) if buf.base != NULL else NULL
    for j, t in enumerate(nodes):
        D.nodes[j] = &D.ct[idx[t.id]]
    D.graph.struct_size = sizeof(pyg_graph)
    D.graph.n_nodes = len(nodes)
    D.graph.nodes = D.nodes
    D.graph.id = next(_graph_ids)
    check(dev.plugin.api, dev.plugin.api.graph_plan_create(dev.dev, &D.graph, &D.gplan), dev.plugin.name,
          f"graph_plan_create ({what})")
    return D


# ---------------------------------------------------------------- programs

cdef class Program:
    """A run's commands, executed in order without the GIL. `info` holds each command's
    structured description (kind, device, plugin, note, split, micro-batch) for errors, statistics
    and the trace; `text` is its display form."""

    def __dealloc__(self):
        free(self.cmds)
        free(self.watch)
        free(self.t_start)
        free(self.t_end)

    def _poll(self):
        """Trace mode: watch the recorded events from a second thread and note when each completes."""
        cdef int i, left
        cdef int32_t done
        cdef pyg_error *e
        with nogil:
            left = self.n_watch
            while left > 0 and not self.stop:
                left = 0
                for i in range(self.n_watch):
                    if self.watch[i].done == 0 and self.t_end[self.watch[i].record] == 0:
                        left += 1
                    elif self.watch[i].done == 0:
                        done = 0
                        e = self.watch[i].api.event_query(self.watch[i].event, &done)
                        if e != NULL:
                            self.watch[i].api.error_destroy(e)
                            done = 1
                        if done:
                            self.watch[i].done = _now()
                        else:
                            left += 1
                usleep(20)

    def stop_poll(self, bint stop):
        self.stop = stop

    @property
    def traced(self):
        return self.t_start != NULL

    def timings(self):
        """(host [(cmd, start, end)], queues [(cmd, host seen done)]) of the last traced run."""
        host, queues = [], []
        cdef int i
        if self.t_start == NULL:
            return host, queues
        for i in range(self.n):
            if self.t_end[i] == 0:
                break
            host.append((i, self.t_start[i], self.t_end[i]))
        for i in range(self.n_watch):
            if self.watch[i].done != 0 and self.t_end[self.watch[i].cmd] != 0:
                queues.append((self.watch[i].cmd, self.watch[i].done))
        return host, queues

    def reset_timings(self):
        cdef int i
        if self.t_start == NULL:
            return
        for i in range(self.n_watch):
            self.watch[i].done = 0
        for i in range(self.n):
            self.t_start[i] = 0
            self.t_end[i] = 0

    def execute(self, list inputs, list outputs):
        """Run with `inputs` / `outputs` (contiguous numpy arrays, micro-batch major, as the
        program's host operands index them). Returns the seconds spent inside plugin calls."""
        cdef int n_in = len(inputs), n_out = len(outputs)
        cdef void **ins = <void **>calloc(max(1, n_in), sizeof(void *))
        cdef void **outs = <void **>calloc(max(1, n_out), sizeof(void *))
        cdef double backend_s = 0
        cdef uintptr_t p
        if ins == NULL or outs == NULL:
            free(ins)
            free(outs)
            raise MemoryError("compute: out of host memory")
        try:
            for j, a in enumerate(inputs):
                p = a.ctypes.data
                ins[j] = <void *>p
            for j, a in enumerate(outputs):
                p = a.ctypes.data
                outs[j] = <void *>p
            self._run(ins, outs, &backend_s)
        finally:
            free(ins)
            free(outs)
        return backend_s

    cdef int _run(self, void **inputs, void **outputs, double *backend_s) except -1:
        cdef pyg_error *err = NULL
        cdef int i = 0
        cdef Cmd *c
        cdef void *host
        cdef double t0, spent = 0
        with nogil:
            while i < self.n:
                c = &self.cmds[i]
                if self.t_start != NULL:
                    self.t_start[i] = _now()
                host = c.host
                if c.host_table == 0:
                    host = inputs[c.host_index]
                elif c.host_table == 1:
                    host = outputs[c.host_index]
                t0 = _now()
                if c.kind == K_WRITE:
                    if c.is_async:
                        err = c.api.stream_write_async(c.stream, c.buf, c.off, host, c.size)
                    else:
                        err = c.api.buffer_write(c.buf, c.off, host, c.size)
                elif c.kind == K_READ:
                    if c.is_async:
                        err = c.api.stream_read_async(c.stream, c.buf, c.off, host, c.size)
                    else:
                        err = c.api.buffer_read(c.buf, c.off, host, c.size)
                elif c.kind == K_COPY:
                    err = c.api.stream_copy_async(c.stream, c.buf, c.off, c.buf2, c.off2, c.size)
                elif c.kind == K_LAUNCH:
                    err = c.api.graph_plan_compute(c.plan, c.stream)
                elif c.kind == K_RECORD:
                    err = c.api.event_record(c.event, c.stream)
                elif c.kind == K_WAIT:
                    err = c.api.stream_wait_event(c.stream, c.event)
                elif c.kind == K_SYNC_EVENT:
                    err = c.api.event_synchronize(c.event)
                elif c.kind == K_SYNC_STREAM:
                    err = c.api.stream_synchronize(c.stream)
                elif c.kind == K_HOST_COPY:       # host work, not backend time
                    if c.is_async:
                        memcpy(host, c.host2, c.size)
                    else:
                        memcpy(c.host2, host, c.size)
                    t0 = _now()
                spent += _now() - t0
                if self.t_end != NULL:
                    self.t_end[i] = _now()
                if err != NULL:
                    break
                i += 1
        backend_s[0] = spent
        if err != NULL:
            c = &self.cmds[i]
            self._drain()     # nothing may be left in flight when the error propagates
            kind, dev, plugin, note = self.info[i][:4]
            check(c.api, err, plugin, f"{P.KIND_NAME[kind]} on {dev}" + (f" ({note})" if note else ""))
        return 0

    def _drain(self):
        cdef int i
        cdef pyg_error *e
        for i in range(self.n):
            if self.cmds[i].stream != NULL and self.cmds[i].kind != K_SYNC_EVENT:
                with nogil:
                    e = self.cmds[i].api.stream_synchronize(self.cmds[i].stream)
                if e != NULL:
                    self.cmds[i].api.error_destroy(e)


def materialize(gen, list devices, dict streams, dict bufs, dict graphs, int n_in, int n_out):
    """The C program of a Generator's commands. streams: device index -> Stream; bufs: region key
    -> DeviceBuffer; graphs: (split, slot) -> DeviceGraph."""
    cmds = gen.cmds
    cdef Program prog = Program.__new__(Program)
    prog.n = len(cmds)
    prog.cmds = <Cmd *>calloc(max(1, len(cmds)), sizeof(Cmd))
    if prog.cmds == NULL:
        raise MemoryError("program: out of host memory")
    prog.pattern = P.pattern(cmds)
    prog.text = [repr(x) for x in cmds]
    prog.info = [(x.kind, str(devices[x.dev]), devices[x.dev].plugin.name, x.note, x.split_index, x.mb)
                 for x in cmds]
    prog.dropped = gen.dropped
    if gen.trace:
        prog.t_start = <double *>calloc(max(1, len(cmds)), sizeof(double))
        prog.t_end = <double *>calloc(max(1, len(cmds)), sizeof(double))
    events = [make_event(devices[s]) for (s, seq, snap) in gen.events]
    prog.keep = [events]
    cdef Event ev
    if gen.traced:
        prog.n_watch = len(gen.traced)
        prog.watch = <Watch *>calloc(len(gen.traced), sizeof(Watch))
        for i, (ci, eid) in enumerate(gen.traced):
            ev = events[eid]
            prog.watch[i].api = ev.api
            prog.watch[i].event = ev.e
            prog.watch[i].cmd = ci
            prog.watch[i].record = ci + 1
    cdef Cmd *c
    cdef Device dev
    cdef DeviceBuffer b
    cdef Stream st
    cdef DeviceGraph D
    cdef uintptr_t hp
    cdef uint64_t hoff
    for i, cm in enumerate(cmds):
        c = &prog.cmds[i]
        dev = devices[cm.dev]
        st = streams[cm.dev]
        c.kind = cm.kind
        c.is_async = cm.is_async
        c.dev = cm.dev
        c.api = dev.plugin.api
        c.stream = st.s
        c.host_table = -1
        c.size = cm.size
        if cm.kind == P.HOST_COPY:
            user, pm = cm.host
            c.host_table = 0 if user[0] == "in" else 1
            c.host_index = user[1] * (n_in if user[0] == "in" else n_out) + user[2]
            b = pm.buf
            if b.host_ptr == NULL:
                raise PyggmlError(f"internal: host copy through {b.device}, whose memory is not host-visible")
            hoff = pm.off
            c.host2 = <void *>(<char *>b.host_ptr + <uint64_t>hoff)
        elif cm.kind in (P.WRITE, P.READ):
            region = cm.dst if cm.kind == P.WRITE else cm.src
            b = bufs[region[0]]
            c.buf = b.buf
            c.off = region[1]
            kind = cm.host[0]
            if kind == "in":
                c.host_table = 0
                c.host_index = cm.host[1] * n_in + cm.host[2]
            elif kind == "out":
                c.host_table = 1
                c.host_index = cm.host[1] * n_out + cm.host[2]
            elif kind == "fixed":
                b = cm.host[1].buf
                if b.host_ptr == NULL:
                    raise PyggmlError(f"internal: host copy through {b.device}, whose memory is not host-visible")
                hoff = cm.host[1].off
                c.host = <void *>(<char *>b.host_ptr + <uint64_t>hoff)
            else:
                hp = cm.host[1].ctypes.data
                c.host = <void *>hp
        elif cm.kind == P.COPY:
            b = bufs[cm.dst[0]]
            c.buf = b.buf
            c.off = cm.dst[1]
            b = bufs[cm.src[0]]
            c.buf2 = b.buf
            c.off2 = cm.src[1]
        elif cm.kind == P.LAUNCH:
            D = graphs[cm.split]
            c.plan = D.gplan
            c.synchronous = not (dev.caps & PYG_CAP_ASYNC_COMPUTE)
        elif cm.kind in (P.RECORD, P.WAIT, P.SYNC_EVENT):
            ev = events[cm.event]
            c.event = ev.e
    return prog


def __getattr__(name):
    """pyggml._sched.Scheduler / Plan / RunStats: they live in pyggml.scheduler now."""
    if name in ("Scheduler", "RunStats"):
        from pyggml import scheduler
        return getattr(scheduler, name)
    if name == "Plan":
        from pyggml import _plan
        return _plan.Plan
    raise AttributeError(f"module 'pyggml._sched' has no attribute {name!r}")
