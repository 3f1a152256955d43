# cython: language_level=3, boundscheck=False, wraparound=False
"""The scheduler: plans a graph once (order, memory, device plan), then recomputes it with new
inputs without re-planning or re-allocating. The hot path (copies, launch, synchronize) runs
without the GIL and without Python per node."""
import itertools
import time

import numpy as np

from libc.stdint cimport uint64_t, int64_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset, strncpy
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from pyggml._abi cimport *
from pyggml._plugin cimport Plugin, Device, check
from pyggml import _plugin
from pyggml._alloc import plan_arena, align_up
from pyggml.errors import GraphError, ShapeError, TypeMismatchError, UnsupportedError
from pyggml.graph import Tensor, FLAG_INPUT, FLAG_OUTPUT, FLAG_WEIGHT, FLAG_STATE, OP, VIEW_OPS
from pyggml import ops as _ops

_graph_ids = itertools.count(1)


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef class DeviceBuffer:
    """One buffer of a device; freed when the object goes."""

    def __dealloc__(self):
        if self.buf != NULL and self.device is not None:
            self.device.plugin.api.buffer_free(self.buf)
            self.buf = NULL


cdef DeviceBuffer _alloc(Device dev, uint64_t size, dict stats, str what):
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef pyg_buffer *buf = NULL
    cdef pyg_buffer_info info
    cdef const pyg_plugin_api *api = dev.plugin.api
    check(api, api.buffer_alloc(dev.dev, size if size else 1, 0, &buf), dev.plugin.name,
          f"allocating {size} bytes for {what} on {dev}")
    b.device = dev
    b.buf = buf
    b.size = size
    memset(&info, 0, sizeof(info))
    info.struct_size = sizeof(info)
    check(api, api.buffer_get_info(buf, &info), dev.plugin.name, "buffer_get_info")
    b.base = info.base
    stats["buffer_allocs"] += 1
    stats["bytes_allocated"] += size
    return b


cdef class Plan:
    """A graph made ready for one device. Created by Scheduler; reused for every compute."""

    def __dealloc__(self):
        if self.gplan != NULL and self.device is not None:
            self.device.plugin.api.graph_plan_destroy(self.gplan)
        free(self.ct)
        free(self.nodes)
        free(self.inputs)
        free(self.outputs)

    cdef int run(self, char *pattern, int cap, double *backend_s) except -1:
        """Copies in, launch, host sync, copies out. Host pointers are already bound."""
        cdef const pyg_plugin_api *api = self.device.plugin.api
        cdef pyg_error *err = NULL
        cdef int i, k = 0
        cdef double t0, t1
        cdef str stage = "poison"
        with nogil:
            if self.poison and self.arena is not None:
                err = api.buffer_fill(self.arena.buf, 0, 0xFF, self.arena.size)
            i = 0
            while err == NULL and i < self.n_inputs:
                err = api.buffer_write(self.inputs[i].buf, self.inputs[i].off, self.inputs[i].host,
                                       self.inputs[i].size)
                if k < cap - 1:
                    pattern[k] = b'c'
                    k += 1
                i += 1
            t0 = _now()
            if err == NULL:
                err = api.graph_plan_compute(self.gplan, self.stream)
                if k < cap - 1:
                    pattern[k] = b'g'
                    k += 1
            if err == NULL:
                err = api.stream_synchronize(self.stream)
                if k < cap - 1:
                    pattern[k] = b's'
                    k += 1
            t1 = _now()
            i = 0
            while err == NULL and i < self.n_outputs:
                err = api.buffer_read(self.outputs[i].buf, self.outputs[i].off, self.outputs[i].host,
                                      self.outputs[i].size)
                if k < cap - 1:
                    pattern[k] = b'c'
                    k += 1
                i += 1
            pattern[k] = 0
        backend_s[0] = t1 - t0
        check(api, err, self.device.plugin.name, "compute")
        return 0


cdef _fill_desc(pyg_tensor *c, t, pyg_tensor *ct, dict index):
    c.type = t.type.id
    c.op = t.op
    for d in range(4):
        c.ne[d] = t.ne[d]
        c.nb[d] = t.nb[d]
    for j, v in enumerate(t.params[:16]):
        c.op_params[j] = v
    c.flags = t.flags
    for j, s in enumerate(t.src[:6]):
        c.src[j] = &ct[index[s.id]] if s is not None else NULL
    c.view_src = &ct[index[t.view_src.id]] if t.view_src is not None else NULL
    c.view_offs = t.view_offs
    nm = (t.name or f"{t.op_name}#{t.id}").encode()[:63]
    strncpy(c.name, nm, 63)


class RunStats:
    """What one compute did: its sync pattern (c = blocking copy, a = async copy, g = graph launch,
    w = device wait, s = host sync), host syncs, copies, bytes, and host vs backend time."""

    __slots__ = ("sync_pattern", "host_syncs", "copies", "bytes_copied", "host_time_us",
                 "backend_time_us", "total_time_us", "splits")

    def __init__(self, pattern, copies, nbytes, total_s, backend_s, splits=1):
        self.sync_pattern = pattern
        self.host_syncs = pattern.count("s")
        self.copies = copies
        self.bytes_copied = nbytes
        self.total_time_us = total_s * 1e6
        self.backend_time_us = backend_s * 1e6
        self.host_time_us = (total_s - backend_s) * 1e6
        self.splits = splits

    def __repr__(self):
        return (f"RunStats(pattern={self.sync_pattern!r}, host_syncs={self.host_syncs}, copies={self.copies}, "
                f"host={self.host_time_us:.1f}us, backend={self.backend_time_us:.1f}us)")


def _collect(outputs):
    """Tensors needed for `outputs` plus the graph's effects, in creation (= execution) order."""
    g = outputs[0].graph
    for o in outputs:
        if not isinstance(o, Tensor):
            raise TypeMismatchError(f"compute: outputs must be pyggml Tensors, got {type(o).__name__}")
        if o.graph is not g:
            raise GraphError("compute: outputs belong to different graphs")
    seen = set()
    stack = list(outputs) + list(g.effects)
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen.add(t.id)
        stack.extend(s for s in t.src if s is not None)
        if t.view_src is not None:
            stack.append(t.view_src)
    return [g.tensors[i] for i in sorted(seen)]


def _readable(t):
    """A tensor the host can read as is: computed here (not a view or leaf) and contiguous."""
    return t.op != 0 and t.op not in VIEW_OPS and t.view_src is None and t.is_contiguous()


def _out_array_spec(t):
    if t.type.np_dtype is not None:
        return t.type.np_dtype, t.shape
    if t.type.name == "bf16":
        return np.dtype(np.uint16), t.shape
    return np.dtype(np.uint8), t.shape[:-1] + (t.type.row_bytes(t.ne[0]),)


class Scheduler:
    """Runs graphs on devices.

    `devices`: a device spec ("cpu", "cuda:0"), a Device, or a list of them in priority order
    (this version runs a graph on the first one). `n_threads` sets CPU devices' thread count.
    `poison=True` fills compute memory with 0xFF before each run (NaN for floats), so a kernel that
    leaves an output element unwritten is caught."""

    def __init__(self, devices=("cpu",), n_threads=None, poison=False):
        if isinstance(devices, (str, Device)):
            devices = [devices]
        self.devices = [_plugin.get_device(d) for d in devices]
        if not self.devices:
            raise ValueError("Scheduler needs at least one device")
        if n_threads is not None:
            for d in self.devices:
                if d.kind == 0:
                    d.set_option("n_threads", int(n_threads))
        self.poison = bool(poison)
        self.stats = {"plans": 0, "buffer_allocs": 0, "bytes_allocated": 0, "computes": 0}
        self.last_run = None
        self._plans = {}
        self._leaf_mem = {}     # (graph uid, tensor id, device name) -> (DeviceBuffer, offset)
        self._streams = {}
        self._hidden = {}       # (graph uid, tensor id) -> readable copy node

    # ---------------------------------------------------------------- public

    def compute(self, outputs, feeds=None):
        """Compute `outputs` (a Tensor or a list) with `feeds` {input name: array}; returns numpy
        array(s). A second call with the same outputs reuses the plan: no re-planning, no allocation."""
        single = isinstance(outputs, Tensor)
        outs = [outputs] if single else list(outputs)
        if not outs:
            raise GraphError("compute: no outputs given")
        t_start = time.perf_counter()
        plan = self.plan(outs)
        keep, results = self._bind(plan, feeds or {})
        cdef char pattern[256]
        cdef double backend_s = 0
        (<Plan>plan).run(pattern, 256, &backend_s)
        total = time.perf_counter() - t_start
        self.stats["computes"] += 1
        nbytes = sum(a.nbytes for a in keep) + sum(r.nbytes for r in results)
        self.last_run = RunStats(pattern.decode(), len(keep) + len(results), nbytes, total, backend_s)
        del keep
        return results[0] if single else results

    def plan(self, outputs):
        """The Plan for these outputs (built on first use, then cached)."""
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        g = outs[0].graph
        key = (g.uid, tuple(o.id for o in outs), len(g.effects))
        p = self._plans.get(key)
        if p is None:
            p = self._build(outs)
            self._plans[key] = p
            self.stats["plans"] += 1
        return p

    def read(self, t):
        """Current contents of a state or weight tensor on the scheduler's device."""
        key = (t.graph.uid, t.id, str(self.devices[0]))
        if key not in self._leaf_mem:
            raise GraphError(f"read: {t!r} has no memory on {self.devices[0]} yet (compute a graph using it first)")
        buf, off = self._leaf_mem[key]
        dt, shape = _out_array_spec(t)
        out = np.empty(shape, dt)
        cdef DeviceBuffer b = buf
        cdef Device dev = b.device
        cdef uintptr_t p = out.ctypes.data
        check(dev.plugin.api, dev.plugin.api.buffer_read(b.buf, off, <void *>p, out.nbytes), dev.plugin.name, "read")
        return out

    # ---------------------------------------------------------------- planning

    def _stream(self, Device dev):
        cdef pyg_stream *s = NULL
        key = str(dev)
        if key not in self._streams:
            check(dev.plugin.api, dev.plugin.api.stream_create(dev.dev, 0, &s), dev.plugin.name, "stream_create")
            self._streams[key] = _Stream.make(dev, <uintptr_t>s)
        return self._streams[key]

    def _readable_outputs(self, outs):
        res = []
        for o in outs:
            if _readable(o):
                res.append(o)
                continue
            key = (o.graph.uid, o.id)
            h = self._hidden.get(key)
            if h is None:
                h = _ops.cont(o)
                self._hidden[key] = h
            res.append(h)
        return res

    def _build(self, outs):
        cdef Device dev = self.devices[0]
        cdef const pyg_plugin_api *api = dev.plugin.api
        readable = self._readable_outputs(outs)
        order = _collect(readable)
        index = {t.id: i for i, t in enumerate(order)}
        cdef Plan p = Plan.__new__(Plan)
        p.device = dev
        p.poison = self.poison
        n = len(order)
        p.n_tensors = n
        p.ct = <pyg_tensor *>calloc(n if n else 1, sizeof(pyg_tensor))
        if p.ct == NULL:
            raise MemoryError("plan: out of host memory")

        # --- support check before any allocation
        cdef pyg_tensor *c
        for i, t in enumerate(order):
            _fill_desc(&p.ct[i], t, p.ct, index)
        for i, t in enumerate(order):
            if t.op != 0 and t.op not in VIEW_OPS:
                if not api.device_supports_op(dev.dev, &p.ct[i]):
                    srcs = ", ".join(f"{s.type.name}{list(s.shape)}" for s in t.src if s is not None)
                    raise UnsupportedError(f"{dev}: cannot compute {t.op_name} -> {t.type.name}{list(t.shape)} "
                                           f"from ({srcs})", plugin=dev.plugin.name)

        # --- lifetimes and arena offsets (inputs live from the start, outputs to the end)
        align = dev.alignment
        owner = {}
        for t in order:
            owner[t.id] = (t.view_src.id if t.view_src is not None else t.id)
        arena_ids, sizes, first, last = [], [], [], []
        pos = {}
        for step, t in enumerate(order):
            if t.view_src is None and not (t.flags & (FLAG_WEIGHT | FLAG_STATE)) and (t.op != 0 or t.flags & FLAG_INPUT):
                pos[t.id] = len(arena_ids)
                arena_ids.append(t.id)
                sizes.append(t.nbytes)
                first.append(0 if t.flags & FLAG_INPUT else step)
                last.append(step)
        for step, t in enumerate(order):
            for s in t.src:
                if s is not None:
                    o = owner[s.id]
                    if o in pos:
                        k = pos[o]
                        last[k] = max(last[k], step)
        out_ids = {o.id for o in readable}
        for t in readable:
            o = owner[t.id]
            if o in pos:
                last[pos[o]] = n + 1
        offsets, arena_size = plan_arena(sizes, first, last, align)
        p.peak_bytes = arena_size
        p.arena = _alloc(dev, arena_size, self.stats, "graph memory") if arena_ids else None

        # --- addresses
        mem = {}
        for k, tid in enumerate(arena_ids):
            mem[tid] = (p.arena, offsets[k])
        for t in order:
            if t.flags & (FLAG_WEIGHT | FLAG_STATE):
                mem[t.id] = self._leaf(dev, t)
        cdef DeviceBuffer b
        cdef uint64_t coff
        for i, t in enumerate(order):
            o = owner[t.id]
            if o not in mem:
                raise GraphError(f"plan: {t!r} has no memory (a leaf that is neither input, weight nor state?)")
            b, off = mem[o]
            coff = off + (t.view_offs if t.view_src is not None else 0)
            p.ct[i].buffer = b.buf
            p.ct[i].offset = coff
            p.ct[i].data = <void *>(<char *>b.base + coff) if b.base != NULL else NULL

        # --- node list and device plan
        node_idx = [i for i, t in enumerate(order) if t.op != 0]
        p.n_nodes = len(node_idx)
        p.nodes = <pyg_tensor **>calloc(len(node_idx) if node_idx else 1, sizeof(pyg_tensor *))
        for j, i in enumerate(node_idx):
            p.nodes[j] = &p.ct[i]
        p.graph.struct_size = sizeof(pyg_graph)
        p.graph.n_nodes = len(node_idx)
        p.graph.nodes = p.nodes
        p.graph.id = next(_graph_ids)
        check(api, api.graph_plan_create(dev.dev, &p.graph, &p.gplan), dev.plugin.name, "graph_plan_create")
        s = self._stream(dev)
        p.stream = <pyg_stream *><uintptr_t>s.handle
        p.stream_ref = s

        # --- host copies
        ins = [t for t in order if t.flags & FLAG_INPUT]
        p.n_inputs = len(ins)
        p.inputs = <Copy *>calloc(len(ins) if ins else 1, sizeof(Copy))
        p.input_specs = []
        for j, t in enumerate(ins):
            b, off = mem[t.id]
            p.inputs[j].buf = b.buf
            p.inputs[j].off = off
            p.inputs[j].size = t.nbytes
            p.input_specs.append((t.name, t.type, t.shape))
        p.n_outputs = len(readable)
        p.outputs = <Copy *>calloc(len(readable), sizeof(Copy))
        p.output_specs = []
        for j, t in enumerate(readable):
            b, off = mem[owner[t.id]]
            p.outputs[j].buf = b.buf
            p.outputs[j].off = off
            p.outputs[j].size = t.nbytes
            dt, shape = _out_array_spec(t)
            p.output_specs.append((t, dt, shape))
        return p

    def _leaf(self, Device dev, t):
        key = (t.graph.uid, t.id, str(dev))
        m = self._leaf_mem.get(key)
        if m is not None:
            return m
        cdef DeviceBuffer b = _alloc(dev, t.nbytes, self.stats, f"{t!r}")
        cdef const pyg_plugin_api *api = dev.plugin.api
        cdef uintptr_t src
        cdef pyg_error *err
        if t.data is not None:
            arr = t.data
            if arr.nbytes != t.nbytes:
                raise ShapeError(f"{t!r}: data has {arr.nbytes} bytes, tensor needs {t.nbytes}")
            src = arr.ctypes.data
            with nogil:
                err = api.buffer_write(b.buf, 0, <const void *>src, b.size)
            check(api, err, dev.plugin.name, f"uploading {t!r}")
        else:
            check(api, api.buffer_fill(b.buf, 0, 0, b.size), dev.plugin.name, f"zeroing {t!r}")
        self._leaf_mem[key] = (b, 0)
        return (b, 0)

    def _bind(self, Plan p, feeds):
        keep = []
        cdef int j
        cdef uintptr_t ptr
        for j, (name, t, shape) in enumerate(p.input_specs):
            if name not in feeds:
                raise GraphError(f"compute: no data fed for input {name!r} (shape {list(shape)}, {t.name}); "
                                 f"feeds have {sorted(feeds)}")
            a = feeds[name]
            a = np.asarray(a)
            if a.shape != tuple(shape):
                raise ShapeError(f"compute: input {name!r} expects shape {list(shape)}, got {list(a.shape)}")
            if a.dtype != t.np_dtype:
                if not np.can_cast(a.dtype, t.np_dtype, "same_kind"):
                    raise TypeMismatchError(f"compute: input {name!r} is {t.name}; cannot take {a.dtype} data")
                a = a.astype(t.np_dtype)
            a = np.ascontiguousarray(a)
            keep.append(a)
            ptr = a.ctypes.data
            p.inputs[j].host = <void *>ptr
        results = []
        for j, (t, dt, shape) in enumerate(p.output_specs):
            r = np.empty(shape, dt)
            ptr = r.ctypes.data
            p.outputs[j].host = <void *>ptr
            results.append(r)
        return keep, results


cdef class _Stream:
    cdef Device dev
    cdef pyg_stream *s

    @staticmethod
    cdef _Stream make(Device dev, uintptr_t handle):
        cdef _Stream st = _Stream.__new__(_Stream)
        st.dev = dev
        st.s = <pyg_stream *>handle
        return st

    @property
    def handle(self):
        return <uintptr_t>self.s

    def __dealloc__(self):
        if self.s != NULL:
            self.dev.plugin.api.stream_destroy(self.s)
