# cython: language_level=3
"""The scheduler: assigns every node a device, splits the graph into runs of one device, plans
memory once per device, and generates the run's command program (copies, launches, events, waits)
under the sync contract of pyggml/sync.py. Recomputing reuses all of it: the program runs without
the GIL and without Python per node; only the input and output arrays are bound per call."""
import itertools
import json
import os
import threading
import time

import numpy as np

cimport cython
from libc.stdint cimport uint64_t, int64_t, uintptr_t, int32_t
from libc.stdlib cimport calloc, free
from libc.string cimport memset, strncpy
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC
from posix.unistd cimport usleep

from pyggml._abi cimport *
from pyggml._plugin cimport Device, check
from pyggml import _plugin
from pyggml._alloc import plan_arena, align_up
from pyggml import _program as P
from pyggml.errors import GraphError, ShapeError, TypeMismatchError, UnsupportedError, PyggmlError
from pyggml.graph import Graph, Tensor, FLAG_INPUT, FLAG_WEIGHT, FLAG_STATE, VIEW_OPS
from pyggml import ops as _ops

_graph_ids = itertools.count(1)

# At interpreter exit, vendor runtimes (cudart's static destructors) may be torn down before the
# garbage collector frees our handles; after atexit runs, handles are left to the process exit.
cdef bint _exiting = 0


def _at_exit():
    global _exiting
    _exiting = 1


import atexit as _atexit
_atexit.register(_at_exit)
POLICIES = ("strict", "relaxed", "events")

DEF K_WRITE = 0
DEF K_READ = 1
DEF K_COPY = 2
DEF K_LAUNCH = 3
DEF K_RECORD = 4
DEF K_WAIT = 5
DEF K_SYNC_EVENT = 6
DEF K_SYNC_STREAM = 7


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


@cython.no_gc_clear
cdef class DeviceBuffer:
    """One buffer of a device; freed when the object goes. (The plugin table pointer is kept as a
    C field: the garbage collector may clear Python fields before __dealloc__ runs.)"""

    def __dealloc__(self):
        if self.buf != NULL and self.api != NULL and not _exiting:
            self.api.buffer_free(self.buf)
            self.buf = NULL


cdef DeviceBuffer _alloc(Device dev, uint64_t size, dict stats, str what):
    cdef DeviceBuffer b = DeviceBuffer.__new__(DeviceBuffer)
    cdef pyg_buffer *buf = NULL
    cdef pyg_buffer_info info
    cdef const pyg_plugin_api *api = dev.plugin.api
    check(api, api.buffer_alloc(dev.dev, size if size else 1, 0, &buf), dev.plugin.name,
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


@cython.no_gc_clear
cdef class _Stream:
    cdef Device dev
    cdef const pyg_plugin_api *api
    cdef pyg_stream *s

    def __dealloc__(self):
        if self.s != NULL and self.api != NULL and not _exiting:
            with nogil:
                self.api.stream_destroy(self.s)


@cython.no_gc_clear
cdef class _Event:
    cdef Device dev
    cdef const pyg_plugin_api *api
    cdef pyg_event *e

    def __dealloc__(self):
        if self.e != NULL and self.api != NULL and not _exiting:
            self.api.event_destroy(self.e)


@cython.no_gc_clear
cdef class _Descs:
    """A C array of tensor descriptors and the node pointer list of one split (one slot)."""
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


cdef class Program:
    """A run's commands, executed in order without the GIL."""

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

    def _trace_events(self, double t0, list devices):
        """Chrome trace events of the last run: a host track and one track per device queue."""
        out = []
        cdef int i
        for i in range(self.n):
            if self.t_end[i] == 0:
                break
            out.append({"name": self.text[i], "ph": "X", "pid": 1, "tid": "host",
                        "ts": (self.t_start[i] - t0) * 1e6, "dur": max(0.05, (self.t_end[i] - self.t_start[i]) * 1e6)})
        prev = {}
        for i in range(self.n_watch):
            c = self.watch[i].cmd
            dev = devices[self.cmds[c].dev]
            done = self.watch[i].done
            if done == 0 or self.t_end[c] == 0:
                continue
            start = max(self.t_end[c], prev.get(dev, 0.0))
            prev[dev] = done
            out.append({"name": self.text[c], "ph": "X", "pid": 1, "tid": f"{dev} queue",
                        "ts": (start - t0) * 1e6, "dur": max(0.05, (done - start) * 1e6)})
        return out

    cdef int run(self, void **inputs, void **outputs, double *backend_s, int *failed_at) except -1:
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
                spent += _now() - t0
                if self.t_end != NULL:
                    self.t_end[i] = _now()
                if err != NULL:
                    break
                i += 1
        backend_s[0] = spent
        failed_at[0] = i
        if err != NULL:
            c = &self.cmds[i]
            # make sure nothing is left in flight before the error propagates
            self._drain()
            check(c.api, err, self.text[i].split(" ")[1] if i < len(self.text) else "?",
                  f"command {i} ({self.text[i]})")
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


class RunStats:
    """What one compute did: its sync pattern (c = blocking copy, a = queued copy, g = graph launch,
    w = device wait, s = host wait), host waits, copies, bytes, splits and devices, and the time
    the host spent outside the backends (host_time_us: the whole call minus the time inside plugin
    calls; a copy that blocks until the device finishes counts as backend time)."""

    __slots__ = ("sync_pattern", "host_syncs", "copies", "bytes_copied", "host_time_us", "backend_time_us",
                 "total_time_us", "splits", "devices", "policy", "micro_batches", "per_split")

    def __init__(self, pattern, copies, nbytes, total_s, backend_s, splits, devices, policy, n_mb):
        self.sync_pattern = pattern
        self.host_syncs = pattern.count("s")
        self.copies = copies
        self.bytes_copied = nbytes
        self.total_time_us = total_s * 1e6
        self.backend_time_us = backend_s * 1e6
        self.host_time_us = max(0.0, total_s - backend_s) * 1e6
        self.splits = splits
        self.devices = devices
        self.policy = policy
        self.micro_batches = n_mb
        self.per_split = []     # [{split, device, nodes, input_copies, input_bytes}] (all micro-batches)

    def __repr__(self):
        return (f"RunStats(pattern={self.sync_pattern!r}, host_syncs={self.host_syncs}, splits={self.splits}, "
                f"policy={self.policy}, host={self.host_time_us:.1f}us, total={self.total_time_us:.1f}us)")


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
    return t.op != 0 and t.op not in VIEW_OPS and t.view_src is None and t.is_contiguous()


def _out_array_spec(t):
    if t.type.np_dtype is not None:
        return t.type.np_dtype, t.shape
    if t.type.name == "bf16":
        return np.dtype(np.uint16), t.shape
    return np.dtype(np.uint8), t.shape[:-1] + (t.type.row_bytes(t.ne[0]),)


def _base(t):
    return t.view_src if t.view_src is not None else t


def _is_compute(t):
    return t.op != 0 and t.op not in VIEW_OPS


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


cdef bint _supports(Device dv, uintptr_t base, int i):
    cdef pyg_tensor *ct = <pyg_tensor *>base
    return dv.plugin.api.device_supports_op(dv.dev, &ct[i]) != 0


class _Mem:
    """Where a tensor's bytes are: a DeviceBuffer and an offset (plus a key for the sync model)."""
    __slots__ = ("buf", "off", "key")

    def __init__(self, buf, off, key):
        self.buf = buf
        self.off = off
        self.key = key


class Plan:
    """A graph made ready for a list of devices: assignment, splits, memory, device plans and
    (per number of micro-batches) the command program. Built once by Scheduler; reused."""

    def __init__(self):
        self.splits = []          # [(device index, [tensors])]
        self.assign = {}          # tensor id -> device index (compute nodes)
        self.programs = {}        # n_mb -> Program
        self.peak_bytes = {}      # device name -> arena bytes
        self.keep = []            # objects that must live as long as the plan

    @property
    def n_splits(self):
        return len(self.splits)

    def describe(self):
        """One line per split: device and op names (for docs, debugging and tests)."""
        return [f"split {i}: {self.devices[d]}: " + " ".join(t.op_name for t in ts)
                for i, (d, ts) in enumerate(self.splits)]


class Scheduler:
    """Runs graphs on one or more devices.

    `devices`: a device spec ("cpu", "cuda:0"), a Device, or a list of them in priority order; a
    node runs on its pinned device, else where its weights are pinned, else where its first input
    was computed, else on the first device that supports it (the CPU, if listed, is the fallback).
    `sync`: "strict", "relaxed" or "events" (default: "events"; `PYGGML_SYNC=strict` overrides).
    `n_copies`: input slots per split for pipelined micro-batches (1-4).
    `poison=True` fills compute memory with 0xFF before each run so unwritten outputs show as NaN.
    `debug_drop_sync=k` leaves out the k-th ordering of the program (a test switch: the sanitizer
    of the test plugin must then report the race)."""

    def __init__(self, devices=("cpu",), n_threads=None, poison=False, sync=None, n_copies=1,
                 debug_drop_sync=None):
        if isinstance(devices, (str, Device)):
            devices = [devices]
        self.devices = [_plugin.get_device(d) for d in devices]
        if not self.devices:
            raise ValueError("Scheduler needs at least one device")
        if len({str(d) for d in self.devices}) != len(self.devices):
            raise ValueError(f"devices listed twice: {[str(d) for d in self.devices]}")
        if n_threads is not None:
            for d in self.devices:
                if d.kind == 0:
                    d.set_option("n_threads", int(n_threads))
        env = os.environ.get("PYGGML_SYNC", "").strip()
        policy = env or sync or "events"
        if policy not in POLICIES:
            raise ValueError(f"sync policy {policy!r} is not one of {POLICIES}")
        self.sync = policy
        if not 1 <= int(n_copies) <= 4:
            raise ValueError(f"n_copies must be 1..4, got {n_copies}")
        self.n_copies = int(n_copies)
        self.poison = bool(poison)
        self.debug_drop_sync = debug_drop_sync
        self.trace_path = os.environ.get("PYGGML_TRACE") or None
        self._trace = []
        self.stats = {"plans": 0, "buffer_allocs": 0, "bytes_allocated": 0, "computes": 0, "programs": 0}
        self.last_run = None
        self._plans = {}
        self._leaf_mem = {}
        self._streams = {}
        self._hidden = {}

    def close(self):
        """Wait for every queue of this scheduler, then release plans and memory. Idempotent;
        also run when the scheduler is garbage-collected."""
        self._wait_queues()
        self._plans = {}
        self._leaf_mem = {}

    def _wait_queues(self):
        """Block until every stream of this scheduler is idle (errors are dropped: used on release)."""
        cdef _Stream st
        cdef pyg_error *err
        for st in (getattr(self, "_streams", None) or {}).values():
            if st.s != NULL:
                with nogil:
                    err = st.dev.plugin.api.stream_synchronize(st.s)
                if err != NULL:
                    st.dev.plugin.api.error_destroy(err)

    def forget(self, graph):
        """Release the plans and the weight/state memory this scheduler holds for `graph` (a Graph
        or one of its tensors), after waiting for its queues. Plans are otherwise kept for reuse
        until close(): a scheduler that runs many one-off graphs should forget each one."""
        if isinstance(graph, Tensor):
            uid = graph.graph.uid
        elif isinstance(graph, Graph):
            uid = graph.uid
        else:
            raise TypeError(f"forget: expected a Graph or a Tensor, got {type(graph).__name__}")
        self._wait_queues()
        for k in [k for k in self._plans if k[0] == uid]:
            del self._plans[k]
        for k in [k for k in self._leaf_mem if k[0] == uid]:
            del self._leaf_mem[k]

    def __del__(self):
        if _exiting:
            return
        try:
            self.close()
        except Exception:
            pass

    def upload(self, t, device=None):
        """Place a weight or state tensor on `device` (default: the first device) now, instead of
        at the first compute that needs it: a model loader uploads tensors one by one this way."""
        if not (t.flags & (FLAG_WEIGHT | FLAG_STATE)):
            raise GraphError(f"upload: {t!r} is not a weight or state tensor")
        d = self.devices[0] if device is None else _plugin.get_device(device)
        if str(d) not in [str(x) for x in self.devices]:
            raise GraphError(f"upload: {d} is not one of this scheduler's devices")
        self._leaf(d, t)

    # ---------------------------------------------------------------- public

    def compute(self, outputs, feeds=None):
        """Compute `outputs` (a Tensor or a list) with `feeds` {input name: array}; returns numpy
        array(s). A second call with the same outputs reuses everything: no planning, no allocation."""
        single = isinstance(outputs, Tensor)
        res = self._run(outputs, [feeds or {}])
        return res[0][0] if single else res[0]

    def compute_batches(self, outputs, feeds_list):
        """Pipelined run over micro-batches: the same graph once per feeds dict, queued so that
        micro-batch n+1 can run on one device while n runs on the next. Returns one result per
        micro-batch (each like compute's)."""
        single = isinstance(outputs, Tensor)
        if not feeds_list:
            raise GraphError("compute_batches: no micro-batches given")
        res = self._run(outputs, list(feeds_list))
        return [r[0] for r in res] if single else res

    def plan(self, outputs):
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        g = outs[0].graph
        key = (g.uid, tuple(o.id for o in outs), len(g.effects))
        p = self._plans.get(key)
        if p is None:
            p = self._build(outs)
            self._plans[key] = p
            self.stats["plans"] += 1
        return p

    def program(self, outputs, n_mb=1):
        """The command program for these outputs: .pattern and .text (one line per command)."""
        return self._program(self.plan(outputs), n_mb)

    def read(self, t):
        """Current contents of a state or weight tensor (from its home device)."""
        for d in self.devices:
            key = (t.graph.uid, t.id, str(d))
            if key in self._leaf_mem:
                break
        else:
            raise GraphError(f"read: {t!r} has no memory yet (compute a graph using it first)")
        m = self._leaf_mem[key]
        dt, shape = _out_array_spec(t)
        out = np.empty(shape, dt)
        cdef DeviceBuffer b = m.buf
        cdef Device dev = b.device
        cdef uintptr_t p = out.ctypes.data
        check(dev.plugin.api, dev.plugin.api.buffer_read(b.buf, m.off, <void *>p, out.nbytes), dev.plugin.name, "read")
        return out

    # ---------------------------------------------------------------- running

    def _run(self, outputs, feeds_list):
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        if not outs:
            raise GraphError("compute: no outputs given")
        t_start = time.perf_counter()
        plan = self.plan(outs)
        n_mb = len(feeds_list)
        cdef Program prog = self._program(plan, n_mb)
        keep = []
        n_in = len(plan.input_specs)
        n_out = len(plan.output_specs)
        cdef void **ins = <void **>calloc(max(1, n_in * n_mb), sizeof(void *))
        cdef void **outs_p = <void **>calloc(max(1, n_out * n_mb), sizeof(void *))
        cdef uintptr_t ptr
        cdef double backend_s = 0
        cdef int failed_at = 0
        results = []
        try:
            for mb, feeds in enumerate(feeds_list):
                for j, (name, t, shape) in enumerate(plan.input_specs):
                    a = self._feed(feeds, name, t, shape)
                    keep.append(a)
                    ptr = a.ctypes.data
                    ins[mb * n_in + j] = <void *>ptr
                row = []
                for j, (t, dt, shape) in enumerate(plan.output_specs):
                    r = np.empty(shape, dt)
                    ptr = r.ctypes.data
                    outs_p[mb * n_out + j] = <void *>ptr
                    row.append(r)
                results.append(row)
            if self.poison:
                self._poison(plan)
            poller = None
            if prog.n_watch:
                self._trace_reset(prog)
                poller = threading.Thread(target=prog._poll, daemon=True)
                poller.start()
            t_run = _now()
            try:
                prog.run(ins, outs_p, &backend_s, &failed_at)
            finally:
                if poller is not None:
                    poller.join(5.0)
                    prog.stop = 1
                    poller.join()
                    prog.stop = 0
                    self._trace_write(prog, t_run)
        finally:
            free(ins)
            free(outs_p)
        total = time.perf_counter() - t_start
        _plugin.drain_log()
        self.stats["computes"] += 1
        nbytes = sum(a.nbytes for a in keep) + sum(r.nbytes for row in results for r in row)
        self.last_run = RunStats(prog.pattern, prog.pattern.count("a") + prog.pattern.count("c"), nbytes, total,
                                 backend_s, plan.n_splits, [str(d) for d in plan.devices], self.sync, n_mb)
        self.last_run.per_split = prog.per_split
        return results

    def _trace_reset(self, Program prog):
        cdef int i
        for i in range(prog.n_watch):
            prog.watch[i].done = 0
        for i in range(prog.n):
            prog.t_start[i] = 0
            prog.t_end[i] = 0

    def _trace_write(self, Program prog, double t_run):
        """Append this run to the trace and rewrite PYGGML_TRACE (Chrome / Perfetto JSON)."""
        if not self._trace:
            self._t0 = t_run
        run = len({e.get("args", {}).get("run") for e in self._trace} - {None})
        evs = prog._trace_events(self._t0, [str(d) for d in self.devices])
        for e in evs:
            e["args"] = {"run": run}
        self._trace.extend(evs)
        tmp = self.trace_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"traceEvents": self._trace, "displayTimeUnit": "ms"}, f)
        os.replace(tmp, self.trace_path)

    def _feed(self, feeds, name, t, shape):
        if name not in feeds:
            raise GraphError(f"compute: no data fed for input {name!r} (shape {list(shape)}, {t.name}); "
                             f"feeds have {sorted(feeds)}")
        a = np.asarray(feeds[name])
        if a.shape != tuple(shape):
            raise ShapeError(f"compute: input {name!r} expects shape {list(shape)}, got {list(a.shape)}")
        if a.dtype != t.np_dtype:
            if not np.can_cast(a.dtype, t.np_dtype, "same_kind"):
                raise TypeMismatchError(f"compute: input {name!r} is {t.name}; cannot take {a.dtype} data")
            a = a.astype(t.np_dtype)
        return np.ascontiguousarray(a)

    def _poison(self, plan):
        cdef DeviceBuffer b
        for b in plan.scratch:
            check(b.device.plugin.api, b.device.plugin.api.buffer_fill(b.buf, 0, 0xFF, b.size),
                  b.device.plugin.name, "poison")

    # ---------------------------------------------------------------- planning

    def _stream(self, Device dev):
        cdef pyg_stream *s = NULL
        cdef _Stream st
        key = str(dev)
        if key not in self._streams:
            check(dev.plugin.api, dev.plugin.api.stream_create(dev.dev, 0, &s), dev.plugin.name, "stream_create")
            st = _Stream.__new__(_Stream)
            st.dev = dev
            st.api = dev.plugin.api
            st.s = s
            self._streams[key] = st
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
                h.pin = o.pin
                self._hidden[key] = h
            res.append(h)
        return res

    def _dev_index(self, spec):
        """Index of a pinned device among this scheduler's, or None when it is not one of them
        (a graph laid out for several GPUs still runs on a scheduler with fewer devices)."""
        names = [str(x) for x in self.devices]
        s = str(spec)
        if s in names:
            return names.index(s)
        if ":" not in s and s + ":0" in names:
            return names.index(s + ":0")
        return None

    def _assign(self, order, probe):
        """Device index for every compute node (rules in the class docstring)."""
        assign = {}
        state_home = {}
        for t in order:
            if not _is_compute(t):
                continue
            cands = []
            base = _base(t)
            forced = None
            if base is not t:
                # an in-place op (set_rows, cpy) runs where the memory it writes lives
                if base.flags & FLAG_STATE:
                    forced = state_home.get(base.id)
                    if forced is None and base.pin is not None:
                        forced = self._dev_index(base.pin)
                elif base.id in assign:
                    forced = assign[base.id]
            if forced is not None:
                if not probe(forced, t):
                    raise UnsupportedError(f"{t!r} writes memory on {self.devices[forced]}, which cannot compute it")
                assign[t.id] = forced
                if base.flags & FLAG_STATE:
                    state_home.setdefault(base.id, forced)
                continue
            pinned = self._dev_index(t.pin) if t.pin is not None else None
            if pinned is not None:
                d = pinned
                if not probe(d, t):
                    raise UnsupportedError(f"{t!r} is pinned to {self.devices[d]}, which cannot compute it")
                assign[t.id] = d
                if base is not t and base.flags & FLAG_STATE:
                    state_home.setdefault(base.id, d)
                continue
            for s in t.src:
                if s is not None and s.flags & FLAG_WEIGHT and s.pin is not None \
                        and self._dev_index(s.pin) is not None:
                    cands.append(self._dev_index(s.pin))
            s0 = t.src[0] if t.src else None
            if s0 is not None:
                b0 = _base(s0)
                if b0.id in assign:
                    cands.append(assign[b0.id])
            cands.extend(range(len(self.devices)))
            for d in cands:
                if probe(d, t):
                    assign[t.id] = d
                    break
            else:
                srcs = ", ".join(f"{s.type.name}{list(s.shape)}" for s in t.src if s is not None)
                raise UnsupportedError(f"no device of {[str(x) for x in self.devices]} can compute "
                                       f"{t.op_name} -> {t.type.name}{list(t.shape)} from ({srcs})")
            if base is not t and base.flags & FLAG_STATE:
                state_home.setdefault(base.id, assign[t.id])
        return assign

    def _build(self, outs):
        plan = Plan()
        plan.devices = self.devices
        readable = self._readable_outputs(outs)
        order = _collect(readable)
        plan.order = order
        step = {t.id: i for i, t in enumerate(order)}

        # --- assignment (supports_op probed on a descriptor without memory)
        cdef pyg_tensor *probe_ct = <pyg_tensor *>calloc(len(order), sizeof(pyg_tensor))
        index = {t.id: i for i, t in enumerate(order)}
        cdef Device dv
        try:
            for i, t in enumerate(order):
                _fill_desc(&probe_ct[i], t)
            for i, t in enumerate(order):
                for j, s in enumerate(t.src[:6]):
                    probe_ct[i].src[j] = &probe_ct[index[s.id]] if s is not None else NULL
                probe_ct[i].view_src = &probe_ct[index[t.view_src.id]] if t.view_src is not None else NULL
                probe_ct[i].view_offs = t.view_offs
            cache = {}
            base_addr = <uintptr_t>probe_ct

            def probe(d, t):
                key = (d, t.id)
                if key not in cache:
                    cache[key] = _supports(self.devices[d], base_addr, index[t.id])
                return cache[key]
            assign = self._assign(order, probe)
        finally:
            free(probe_ct)
        plan.assign = assign

        # --- memory homes: compute bases live where computed; states where first written/read
        home = {}
        for t in order:
            if _is_compute(t) and t.view_src is None:
                home[t.id] = assign[t.id]
        for t in order:
            if _is_compute(t):
                b = _base(t)
                if b.flags & FLAG_STATE and b.id not in home:
                    home[b.id] = assign[t.id]
        for t in order:
            if t.flags & FLAG_STATE and t.id not in home:
                users = [assign[u.id] for u in order if _is_compute(u) and any(s is not None and _base(s) is t for s in u.src)]
                pinned = self._dev_index(t.pin) if t.pin is not None else None
                home[t.id] = pinned if pinned is not None else (users[0] if users else 0)

        # --- splits: runs of compute nodes on one device
        splits = []
        for t in order:
            if not _is_compute(t):
                continue
            d = assign[t.id]
            if splits and splits[-1][0] == d:
                splits[-1][1].append(t)
            else:
                splits.append((d, [t]))
        plan.splits = splits
        used = sorted({d for d, _ in splits})
        plan.used = used

        # --- per split: sources by kind
        def src_closure(t):
            out = []
            for s in t.src:
                while s is not None:
                    out.append(s)
                    s = s.view_src if s.view_src is not None and s.view_src is not s else None
            return out

        foreign = []        # per split: ordered list of foreign bases
        inputs_on = {}      # (input id, device) -> True
        for si, (d, ts) in enumerate(splits):
            fl = []
            for t in ts:
                for s in src_closure(t) + ([_base(t)] if t.view_src is not None else []):
                    b = _base(s)
                    if b.flags & FLAG_WEIGHT:
                        continue
                    if b.flags & FLAG_INPUT:
                        inputs_on[(b.id, d)] = True
                        continue
                    if home.get(b.id) != d and b not in fl:
                        fl.append(b)
            foreign.append(fl)

        # --- arenas: per device, bases homed there (computed) + inputs instantiated there
        cdef Device dev
        plan.scratch = []
        mem = {}            # (tensor id, device) -> _Mem for local memory
        first_use = {}
        for si, (d, ts) in enumerate(splits):
            for b in foreign[si]:
                first_use.setdefault((b.id, home[b.id]), step[ts[0].id])
        readable_ids = {o.id for o in readable}
        for d in used:
            dev = self.devices[d]
            ids, sizes, first, last = [], [], [], []
            pos = {}
            for t in order:
                if (t.flags & FLAG_INPUT and (t.id, d) in inputs_on) or \
                        (_is_compute(t) and t.view_src is None and home.get(t.id) == d):
                    pos[t.id] = len(ids)
                    ids.append(t.id)
                    sizes.append(t.nbytes)
                    first.append(0 if t.flags & FLAG_INPUT else step[t.id])
                    last.append(len(order) + 1 if t.id in readable_ids else step[t.id])
            for si, (sd, ts) in enumerate(splits):
                for t in ts:
                    for s in src_closure(t):
                        b = _base(s)
                        if b.id in pos and (sd == d or b in foreign[si]):
                            k = pos[b.id]
                            last[k] = max(last[k], step[t.id])
            offsets, size = plan_arena(sizes, first, last, dev.alignment)
            plan.peak_bytes[str(dev)] = size
            if ids:
                buf = _alloc(dev, size, self.stats, f"graph memory on {dev}")
                plan.scratch.append(buf)
                for k, tid in enumerate(ids):
                    mem[(tid, d)] = _Mem(buf, offsets[k], ("arena", d))
        # slots for foreign bases: per device, per split, per copy
        slot_mem = {}
        for d in used:
            dev = self.devices[d]
            off = 0
            entries = []
            for si, (sd, ts) in enumerate(splits):
                if sd != d:
                    continue
                for b in foreign[si]:
                    for k in range(self.n_copies):
                        entries.append((si, b.id, k, off))
                        off = align_up(off + b.nbytes, dev.alignment)
            if entries:
                buf = _alloc(dev, off, self.stats, f"split input slots on {dev}")
                plan.scratch.append(buf)
                for si, bid, k, o in entries:
                    slot_mem[(si, bid, k)] = _Mem(buf, o, ("slots", d))
        # leaves: weights on every device that uses them, states on their home
        for si, (d, ts) in enumerate(splits):
            for t in ts:
                for s in src_closure(t) + [_base(t)]:
                    b = _base(s)
                    if b.flags & FLAG_WEIGHT and (b.id, d) not in mem:
                        mem[(b.id, d)] = self._leaf(self.devices[d], b)
        for t in order:
            if t.flags & FLAG_STATE:
                mem[(t.id, home[t.id])] = self._leaf(self.devices[home[t.id]], t)
        plan.mem = mem
        plan.slot_mem = slot_mem
        plan.home = home
        plan.foreign = foreign

        # --- per split and slot: descriptors and the device's graph plan
        plan.descs = {}
        for si, (d, ts) in enumerate(splits):
            for k in range(self.n_copies):
                plan.descs[(si, k)] = self._split_descs(plan, si, d, ts, k, src_closure)

        # --- host-facing specs
        ins = [t for t in order if t.flags & FLAG_INPUT]
        plan.input_specs = [(t.name, t.type, t.shape) for t in ins]
        plan.input_index = {t.id: j for j, t in enumerate(ins)}
        plan.readable = readable
        plan.output_specs = []
        for t in readable:
            dt, shape = _out_array_spec(t)
            plan.output_specs.append((t, dt, shape))
        plan.inputs_on = sorted(inputs_on, key=lambda x: (step[x[0]], x[1]))
        return plan

    def _locate(self, plan, t, d, si, k):
        """(DeviceBuffer, offset) of tensor t as split si (slot k) on device d sees it."""
        b = _base(t)
        extra = t.view_offs if t.view_src is not None else 0
        if b in plan.foreign[si]:
            m = plan.slot_mem[(si, b.id, k)]
        elif b.flags & FLAG_STATE:
            m = plan.mem[(b.id, plan.home[b.id])]
        else:
            m = plan.mem.get((b.id, d))
            if m is None:
                raise GraphError(f"plan: {t!r} has no memory on {self.devices[d]}")
        return m, extra

    def _split_descs(self, plan, si, d, ts, k, src_closure):
        cdef Device dev = self.devices[d]
        needed = []
        seen = set()
        for t in ts:
            for s in [t] + src_closure(t) + ([t.view_src] if t.view_src is not None else []):
                if s.id not in seen:
                    seen.add(s.id)
                    needed.append(s)
        needed.sort(key=lambda x: x.id)
        idx = {t.id: i for i, t in enumerate(needed)}
        cdef _Descs D = _Descs.__new__(_Descs)
        D.dev = dev
        D.api = dev.plugin.api
        D.ct = <pyg_tensor *>calloc(len(needed), sizeof(pyg_tensor))
        D.nodes = <pyg_tensor **>calloc(len(ts), sizeof(pyg_tensor *))
        if D.ct == NULL or D.nodes == NULL:
            raise MemoryError("plan: out of host memory")
        cdef DeviceBuffer buf
        cdef uint64_t off
        for i, t in enumerate(needed):
            _fill_desc(&D.ct[i], t)
            for j, s in enumerate(t.src[:6]):
                D.ct[i].src[j] = &D.ct[idx[s.id]] if (s is not None and s.id in idx) else NULL
            if t.view_src is not None and t.view_src.id in idx:
                D.ct[i].view_src = &D.ct[idx[t.view_src.id]]
            D.ct[i].view_offs = t.view_offs
            m, extra = self._locate(plan, t, d, si, k)
            buf = m.buf
            off = m.off + extra
            D.ct[i].buffer = buf.buf
            D.ct[i].offset = off
            D.ct[i].data = <void *>(<char *>buf.base + off) if buf.base != NULL else NULL
        for j, t in enumerate(ts):
            D.nodes[j] = &D.ct[idx[t.id]]
        D.graph.struct_size = sizeof(pyg_graph)
        D.graph.n_nodes = len(ts)
        D.graph.nodes = D.nodes
        D.graph.id = next(_graph_ids)
        check(dev.plugin.api, dev.plugin.api.graph_plan_create(dev.dev, &D.graph, &D.gplan), dev.plugin.name,
              f"graph_plan_create (split {si})")
        return D

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
        m = _Mem(b, 0, ("leaf", str(dev), t.id))
        self._leaf_mem[key] = m
        return m

    # ---------------------------------------------------------------- programs

    def _dev_models(self):
        out = []
        for i, d in enumerate(self.devices):
            out.append(P.DevModel(i, d.plugin.name, d.caps, d.quirks, bool(d.caps & (1 << 8)),
                                  bool(d.caps & 1)))
        return out

    def _program(self, plan, n_mb):
        key = (n_mb, self.trace_path is not None)
        prog = plan.programs.get(key)
        if prog is None:
            prog = self._make_program(plan, n_mb)
            plan.programs[key] = prog
            self.stats["programs"] += 1
        return prog

    def _region(self, m, t_bytes, extra=0):
        return (m.key, m.off + extra, m.off + extra + max(1, t_bytes))

    def _make_program(self, plan, n_mb):
        gen = P.Generator(self._dev_models(), self.sync, len(plan.used), self.debug_drop_sync,
                          trace=self.trace_path is not None)
        splits = plan.splits
        by_id = {t.id: t for t in plan.order}
        for mb in range(n_mb):
            k = mb % self.n_copies
            # user inputs, written where they are used
            for tid, d in plan.inputs_on:
                t = by_id[tid]
                m = plan.mem[(tid, d)]
                gen.host_write(d, self._region(m, t.nbytes), ("in", mb, plan.input_index[tid]), t.nbytes,
                               note=f"input {t.name}", mb=mb)
            for si, (d, ts) in enumerate(splits):
                slots = []
                for b in plan.foreign[si]:
                    hd = plan.home[b.id]
                    src_m = plan.mem[(b.id, hd)]
                    dst_m = plan.slot_mem[(si, b.id, k)]
                    src = self._region(src_m, b.nbytes)
                    dst = self._region(dst_m, b.nbytes)
                    sl = gen.new_slot(f"split {si} slot {k} <- {b.name or b.op_name}", d)
                    slots.append(sl)
                    note = f"split {si}: {b.name or b.op_name + '#' + str(b.id)} {self.devices[hd]}->{self.devices[d]}"
                    sdev, ddev = gen.devs[hd], gen.devs[d]
                    if sdev.plugin == ddev.plugin and sdev.async_compute and (sdev.caps & P.CAP_PEER) \
                            and not sdev.host_memory:
                        gen.peer_copy(hd, dst, src, b.nbytes, note=note, mb=mb)
                        gen.slot_copy(sl, hd, False)
                    elif ddev.host_memory:
                        is_async = gen.host_read(hd, src, ("fixed", dst_m), b.nbytes, dst_region=dst, note=note, mb=mb)
                        gen.slot_copy(sl, hd, not is_async)
                    elif sdev.host_memory:
                        is_async = gen.host_write(d, dst, ("fixed", src_m), b.nbytes, src_region=src, note=note, mb=mb)
                        gen.slot_copy(sl, d, not is_async)
                    else:
                        stage = np.empty(b.nbytes, np.uint8)
                        plan.keep.append(stage)
                        gen.host_read(hd, src, ("stage", stage), b.nbytes, note=note + " (via host)", mb=mb)
                        gen._order(P.HOST, hd, gen.seq[hd], note + ": staged")
                        gen.host_write(d, dst, ("stage", stage), b.nbytes, note=note + " (via host)", mb=mb)
                        gen._order(P.HOST, d, gen.seq[d], note + ": staged")
                        gen.slot_copy(sl, d, True)
                reads, writes = [], []
                seen = set()
                for t in ts:
                    for s in t.src:
                        if s is None:
                            continue
                        b = _base(s)
                        if b.id in seen:
                            continue
                        seen.add(b.id)
                        m, _ = self._locate(plan, b, d, si, k)
                        reads.append(self._region(m, b.nbytes))
                    b = _base(t)
                    m, _ = self._locate(plan, b, d, si, k)
                    writes.append(self._region(m, b.nbytes))
                gen.launch(d, (si, k), reads, writes, note=f"split {si} on {self.devices[d]}", mb=mb)
                for sl in slots:
                    gen.slot_launch(sl, d)
            for j, t in enumerate(plan.readable):
                d = plan.home[_base(t).id]
                m = plan.mem[(t.id, d)]
                gen.host_read(d, self._region(m, t.nbytes), ("out", mb, j), t.nbytes, note=f"output {j}", mb=mb)
        gen.finish()
        return self._materialize(plan, gen, n_mb)

    def _materialize(self, plan, gen, n_mb):
        cdef Program prog = Program.__new__(Program)
        cmds = gen.cmds
        prog.n = len(cmds)
        prog.cmds = <Cmd *>calloc(max(1, len(cmds)), sizeof(Cmd))
        prog.n_mb = n_mb
        prog.pattern = P.pattern(cmds)
        prog.text = [repr(x) for x in cmds]
        prog.dropped = gen.dropped
        per = {}
        for cm in cmds:
            if cm.kind in (P.WRITE, P.READ, P.COPY) and cm.note.startswith("split "):
                si = int(cm.note.split(":")[0].split()[1])
                acc = per.setdefault(si, [0, 0])
                acc[0] += 1
                acc[1] += cm.size
        prog.per_split = [{"split": si, "device": str(self.devices[d]), "nodes": len(ts),
                           "input_copies": per.get(si, [0, 0])[0], "input_bytes": per.get(si, [0, 0])[1]}
                          for si, (d, ts) in enumerate(plan.splits)]
        if gen.trace:
            prog.t_start = <double *>calloc(max(1, len(cmds)), sizeof(double))
            prog.t_end = <double *>calloc(max(1, len(cmds)), sizeof(double))
        events = []
        cdef Device dev
        cdef _Event ev
        cdef pyg_event *e
        for (s, seq, snap) in gen.events:
            dev = self.devices[s]
            e = NULL
            check(dev.plugin.api, dev.plugin.api.event_create(dev.dev, &e), dev.plugin.name, "event_create")
            ev = _Event.__new__(_Event)
            ev.dev = dev
            ev.api = dev.plugin.api
            ev.e = e
            events.append(ev)
        plan.keep.append(events)
        if gen.traced:
            prog.n_watch = len(gen.traced)
            prog.watch = <Watch *>calloc(len(gen.traced), sizeof(Watch))
            for i, (ci, eid) in enumerate(gen.traced):
                ev = events[eid]
                prog.watch[i].api = ev.api
                prog.watch[i].event = ev.e
                prog.watch[i].cmd = ci
                prog.watch[i].record = ci + 1
        n_in = len(plan.input_specs)
        n_out = len(plan.output_specs)
        # a region's key names one buffer: ("arena", d), ("slots", d) or ("leaf", device, tensor id)
        bufs = {m.key: m.buf for m in list(plan.mem.values()) + list(plan.slot_mem.values())}
        cdef Cmd *c
        cdef DeviceBuffer b
        cdef _Stream st
        cdef _Descs D
        cdef uintptr_t hp
        cdef uint64_t hoff
        for i, cm in enumerate(cmds):
            c = &prog.cmds[i]
            dev = self.devices[cm.dev]
            st = self._stream(dev)
            c.kind = cm.kind
            c.is_async = cm.is_async
            c.dev = cm.dev
            c.api = dev.plugin.api
            c.stream = st.s
            c.host_table = -1
            c.size = cm.size
            if cm.kind in (P.WRITE, P.READ):
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
                D = plan.descs[cm.split]
                c.plan = D.gplan
                c.synchronous = not (dev.caps & 1)
            elif cm.kind in (P.RECORD, P.WAIT, P.SYNC_EVENT):
                ev = events[cm.event]
                c.event = ev.e
        return prog
