"""The Scheduler: runs graphs on one or more devices.

It plans a graph once per set of outputs (pyggml/_plan.py: assignment, splits, memory), allocates
what the plan asks for and makes each device's graph plans (pyggml/_sched.pyx), generates the
command program of a run under the written sync contract (pyggml/_program.py, pyggml/sync.py) and
executes it without the GIL. A second compute of the same outputs reuses all of it: only the input
and output arrays are bound per call.

Thread safety: every public method holds the scheduler's lock, so calls from several threads are
serialized (a compute never sees another thread's half-written inputs); a scheduler is not
re-entrant from inside a plugin callback.
"""
from __future__ import annotations

import os
import threading
import time
import warnings
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from . import _plan, _plugin, _program as P, _trace
from . import _sched as R
from . import _abi_consts as A, ops as _ops
from ._alloc import REUSE_LAG
from .errors import ClosedError, ConfigError, GraphError, NonFiniteError, ShapeError, TypeMismatchError
from .graph import FLAG_STATE, FLAG_WEIGHT, Graph, Tensor

POLICIES = ("strict", "relaxed", "events")
CAP_ASYNC_COMPUTE, CAP_HOST_MEMORY = P.CAP_ASYNC_COMPUTE, P.CAP_HOST_MEMORY


def _nbytes(spec) -> int:
    """Bytes of an input spec (name, type, shape) or an output spec (tensor, dtype, shape)."""
    dt = spec[1].np_dtype if hasattr(spec[1], "np_dtype") else spec[1]
    return int(np.prod(spec[2], dtype=np.int64)) * np.dtype(dt).itemsize


class RunStats:
    """What one compute did: its sync pattern (c = blocking copy, a = queued copy, g = graph launch,
    w = device wait, s = host wait), host waits, copies, bytes, splits and devices, and the time
    the host spent outside the backends (host_time_us: the whole call minus the time inside plugin
    calls; a copy that blocks until the device finishes counts as backend time)."""

    __slots__ = ("sync_pattern", "host_syncs", "copies", "bytes_copied", "host_time_us", "backend_time_us",
                 "total_time_us", "splits", "devices", "policy", "micro_batches", "per_split")

    def __init__(self, pattern: str, copies: int, nbytes: int, total_s: float, backend_s: float, splits: int,
                 devices: List[str], policy: str, n_mb: int):
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
        self.per_split: List[dict] = []     # [{split, device, nodes, input_copies, input_bytes}] (all micro-batches)

    def __repr__(self):
        return (f"RunStats(pattern={self.sync_pattern!r}, host_syncs={self.host_syncs}, splits={self.splits}, "
                f"policy={self.policy}, host={self.host_time_us:.1f}us, total={self.total_time_us:.1f}us)")


def _policy(sync: Optional[str]) -> str:
    """The sync policy: the argument, else PYGGML_SYNC, else "events". PYGGML_SYNC set to another
    policy than an explicit argument still wins (it is the switch to the reference), with a warning."""
    env = os.environ.get("PYGGML_SYNC", "").strip()
    if env and env not in POLICIES:
        raise ConfigError(f"PYGGML_SYNC={env!r} is not one of {POLICIES}")
    if sync is not None and sync not in POLICIES:
        raise ConfigError(f"sync policy {sync!r} is not one of {POLICIES}")
    if env and sync is not None and env != sync:
        warnings.warn(f"PYGGML_SYNC={env} overrides sync={sync!r}", RuntimeWarning, stacklevel=3)
    return env or sync or "events"



def _read_after_split(splits, needed, readable) -> list:
    """Per split, the ids of its nodes whose bytes are read after the split's graph has run: the
    outputs the host reads (readable ones own their bytes: a view is read through a cont()) and
    what another split reads (a view there marks the node it views: view_src names the owner).
    Their descriptors carry PYG_TENSOR_FLAG_OUTPUT (include/pyggml/tensor.h), so a plugin that
    fuses nodes knows which intermediates must still be written."""
    node_ids = [{t.id for t in ts} for _, ts in splits]
    later = {o.id for o in readable}
    for j, ts in enumerate(needed):
        later.update(i for t in ts for i in (t.id, _plan.base(t).id) if i not in node_ids[j])
    return [ids & later for ids in node_ids]


class Scheduler:
    """Runs graphs on one or more devices.

    `devices`: a device spec ("cpu", "cuda:0"), a Device, or a list of them in priority order; a
    node runs on its pinned device, else where its weights are pinned, else where its first input
    was computed, else on the first device that supports it (the CPU, if listed, is the fallback).
    `sync`: "strict", "relaxed" or "events" (default "events"; PYGGML_SYNC overrides, with a
    warning when it contradicts this argument). `n_copies`: input slots per split for pipelined
    micro-batches (1-4). `poison=True` fills compute memory with 0xFF before each run so unwritten
    outputs show as NaN. `trace`: a Chrome/Perfetto trace file (default: PYGGML_TRACE) written when
    the scheduler closes, at exit, or on flush_trace(). `check_finite=True` (debugging) raises
    NonFiniteError when a float output holds NaN or Inf, naming the output and micro-batch."""

    def __init__(self, devices: Union[str, object, Sequence] = ("cpu",), n_threads: Optional[int] = None,
                 poison: bool = False, sync: Optional[str] = None, n_copies: int = 1,
                 trace: Optional[str] = None, check_finite: bool = False):
        self._lock = threading.RLock()
        self._closed = False
        self._streams: Dict[int, object] = {}
        self._plans: dict = {}
        self._leaf_mem: dict = {}
        self._trace = None
        if isinstance(devices, (str, _plugin.Device)):
            devices = [devices]
        try:
            devices = list(devices)
        except TypeError:
            raise ConfigError(f"devices must be a device spec or a list of them, got {type(devices).__name__}") from None
        if not devices:
            raise ConfigError("Scheduler needs at least one device")
        self.devices = [_plugin.get_device(d) for d in devices]
        if len({str(d) for d in self.devices}) != len(self.devices):
            raise ConfigError(f"devices listed twice: {[str(d) for d in self.devices]}")
        self.n_threads = None
        if n_threads is not None:
            if isinstance(n_threads, bool) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
                raise ConfigError(f"n_threads must be a positive integer, got {n_threads!r}")
            self.n_threads = int(n_threads)      # this scheduler's: set on its own CPU streams (ABI 1.1)
            for i, d in enumerate(self.devices):
                if d.kind == P._abi.DEVICE_CPU:
                    self._stream(i)              # now, so that a bad value fails here
        self.sync = _policy(sync)
        if isinstance(n_copies, bool) or not isinstance(n_copies, (int, np.integer)) or not 1 <= n_copies <= 4:
            raise ConfigError(f"n_copies must be an integer 1..4, got {n_copies!r}")
        self.n_copies = int(n_copies)
        self.poison = bool(poison)
        self.check_finite = bool(check_finite)
        self._drop_sync = None               # tests: leave out the k-th ordering (the sanitizer must see it)
        self.trace_path = trace or os.environ.get("PYGGML_TRACE") or None
        if self.trace_path:
            self._trace = _trace.open_trace(self.trace_path)
        self.stats = {"plans": 0, "buffer_allocs": 0, "bytes_allocated": 0, "computes": 0, "programs": 0}
        self.last_run: Optional[RunStats] = None
        self._hidden: dict = {}

    # ---------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Wait for every queue of this scheduler, then release plans and memory. Idempotent;
        also run when the scheduler is garbage-collected. Using it afterwards raises ClosedError."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return
        with lock:
            self._wait_queues()
            self._plans = {}
            self._leaf_mem = {}
            if self._trace is not None:
                _trace.release(self._trace)
                self._trace = None
            self._closed = True

    def __enter__(self) -> "Scheduler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if R.exiting():
            return
        try:
            self.close()
        except Exception:
            pass

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ClosedError(f"{what}: this Scheduler was closed")

    def _wait_queues(self) -> None:
        """Block until every stream of this scheduler is idle (errors dropped: used on release)."""
        for st in list(getattr(self, "_streams", {}).values()):
            st.synchronize(False)

    def flush_trace(self) -> None:
        """Write the trace file now (it is otherwise written at close and at exit)."""
        if self._trace is not None:
            self._trace.flush()

    def forget(self, graph: Union[Graph, Tensor]) -> None:
        """Release the plans and the weight/state memory this scheduler holds for `graph` (a Graph
        or one of its tensors), after waiting for its queues. Plans are otherwise kept for reuse
        until close(): a scheduler that runs many one-off graphs should forget each one."""
        if isinstance(graph, Tensor):
            uid = graph.graph.uid
        elif isinstance(graph, Graph):
            uid = graph.uid
        else:
            raise TypeMismatchError(f"forget: expected a Graph or a Tensor, got {type(graph).__name__}")
        with self._lock:
            self._wait_queues()
            for k in [k for k in self._plans if k[0] == uid]:
                del self._plans[k]
            for k in [k for k in self._leaf_mem if k[0] == uid]:
                del self._leaf_mem[k]

    # ---------------------------------------------------------------- public

    def upload(self, t: Tensor, device=None) -> None:
        """Place a weight or state tensor on `device` (default: the first device) now, instead of
        at the first compute that needs it: a model loader uploads tensors one by one this way."""
        if not isinstance(t, Tensor) or not (t.flags & (FLAG_WEIGHT | FLAG_STATE)):
            raise GraphError(f"upload: {t!r} is not a weight or state tensor")
        with self._lock:
            self._check_open("upload")
            d = self.devices[0] if device is None else _plugin.get_device(device)
            if str(d) not in [str(x) for x in self.devices]:
                raise GraphError(f"upload: {d} is not one of this scheduler's devices")
            self._leaf(d, t)

    def compute(self, outputs, feeds: Optional[dict] = None):
        """Compute `outputs` (a Tensor or a list) with `feeds` {input name: array}; returns numpy
        array(s). A second call with the same outputs reuses everything: no planning, no allocation."""
        single = isinstance(outputs, Tensor)
        res = self._run(outputs, [{} if feeds is None else feeds])
        return res[0][0] if single else res[0]

    def compute_batches(self, outputs, feeds_list: Sequence[dict]):
        """Pipelined run over micro-batches: the same graph once per feeds dict, queued so that
        micro-batch n+1 can run on one device while n runs on the next. Returns one result per
        micro-batch (each like compute's)."""
        single = isinstance(outputs, Tensor)
        if isinstance(feeds_list, dict) or not feeds_list:
            raise GraphError("compute_batches: give a non-empty list of feeds dicts (one per micro-batch)")
        res = self._run(outputs, list(feeds_list))
        return [r[0] for r in res] if single else res

    def plan(self, outputs) -> _plan.Plan:
        """The (cached) plan of these outputs: made on first use."""
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        if not outs:
            raise GraphError("compute: no outputs given")
        for o in outs:
            if not isinstance(o, Tensor):
                raise TypeMismatchError(f"compute: outputs must be pyggml Tensors, got {type(o).__name__}")
        with self._lock:
            self._check_open("plan")
            g = outs[0].graph
            key = (g.uid, tuple(o.id for o in outs), len(g.effects))
            p = self._plans.get(key)
            if p is None:
                p = self._build(outs)
                self._plans[key] = p
                self.stats["plans"] += 1
            return p

    def program(self, outputs, n_mb: int = 1):
        """The command program for these outputs: .pattern and .text (one line per command)."""
        with self._lock:
            return self._program(self.plan(outputs), n_mb)

    def memory_by_device(self) -> Dict[str, Dict[str, int]]:
        """{device: {"weights": bytes of weights and states, "graph": bytes of graph memory (the
        largest plan's arena and input slots)}} held by this scheduler."""
        out = {str(d): {"weights": 0, "graph": 0} for d in self.devices}
        with self._lock:
            for (_, _, dev), m in self._leaf_mem.items():
                out[dev]["weights"] += int(m.buf.size)
            for p in self._plans.values():
                per = {}
                for b in p.scratch:
                    per[str(b.device)] = per.get(str(b.device), 0) + int(b.size)
                for dev, n in per.items():
                    out[dev]["graph"] = max(out[dev]["graph"], n)
        return out

    def read(self, t: Tensor) -> np.ndarray:
        """Current contents of a state or weight tensor (from its home device)."""
        with self._lock:
            self._check_open("read")
            for d in self.devices:
                key = (t.graph.uid, t.id, str(d))
                if key in self._leaf_mem:
                    break
            else:
                raise GraphError(f"read: {t!r} has no memory yet (compute a graph using it first)")
            self._wait_queues()
            m = self._leaf_mem[key]
            dt, shape = _plan.out_array_spec(t)
            out = np.empty(shape, dt)
            m.buf.read(m.off, out, "read")
            return out

    # ---------------------------------------------------------------- running

    def _run(self, outputs, feeds_list):
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        if not outs:
            raise GraphError("compute: no outputs given")
        with self._lock:
            self._check_open("compute")
            t_start = time.perf_counter()
            plan = self.plan(outs)
            n_mb = len(feeds_list)
            prog = self._program(plan, n_mb)
            ins, outs_a, results = [], [], []
            for feeds in feeds_list:
                self._check_feeds(plan, feeds)
                for name, t, shape in plan.input_specs:
                    ins.append(self._feed(feeds, name, t, shape))
                row = [np.empty(shape, dt) for (_, dt, shape) in plan.output_specs]
                outs_a.extend(row)
                results.append(row)
            if self.poison:
                for b in plan.scratch:
                    b.fill(0, 0xFF, b.size, "poison")
            poller = None
            if prog.traced:
                prog.reset_timings()
                poller = threading.Thread(target=prog._poll, daemon=True)
                poller.start()
            try:
                backend_s = prog.execute(ins, outs_a)
            finally:
                if poller is not None:
                    poller.join(5.0)
                    prog.stop_poll(True)
                    poller.join()
                    prog.stop_poll(False)
                    self._trace.add_run(prog, [str(d) for d in self.devices],
                                        {str(d): not (d.caps & CAP_ASYNC_COMPUTE) for d in self.devices})
            total = time.perf_counter() - t_start
            _plugin.drain_log()
            if self.check_finite:
                self._check_finite(plan, results)
            self.stats["computes"] += 1
            nbytes = sum(a.nbytes for a in ins) + sum(a.nbytes for a in outs_a)
            self.last_run = RunStats(prog.pattern, prog.pattern.count("a") + prog.pattern.count("c"), nbytes, total,
                                     backend_s, plan.n_splits, [str(d) for d in plan.devices], self.sync, n_mb)
            self.last_run.per_split = prog.per_split
            return results

    @staticmethod
    def _check_finite(plan, results):
        for mb, row in enumerate(results):
            for (t, dt, _), r in zip(plan.output_specs, row):
                if dt.kind == "f" and not np.isfinite(r).all():
                    n_nan, n_inf = int(np.isnan(r).sum()), int(np.isinf(r).sum())
                    raise NonFiniteError(f"compute: output {t!r} of micro-batch {mb} has {n_nan} NaN and {n_inf} "
                                         f"Inf of {r.size} values (check_finite=True)")

    @staticmethod
    def _check_feeds(plan, feeds):
        if not isinstance(feeds, dict):
            raise TypeMismatchError(f"compute: feeds must be a dict {{input name: array}}, got {type(feeds).__name__}")
        known = {name for name, _, _ in plan.input_specs}
        extra = [k for k in feeds if k not in known]
        if extra:
            raise GraphError(f"compute: feeds name inputs the graph does not use: {sorted(map(str, extra))}; "
                             f"its inputs are {sorted(known)}")

    @staticmethod
    def _feed(feeds, name, t, shape):
        if name not in feeds:
            raise GraphError(f"compute: no data fed for input {name!r} (shape {list(shape)}, {t.name}); "
                             f"feeds have {sorted(feeds)}")
        a = np.asarray(feeds[name])
        if a.shape != tuple(shape):
            raise ShapeError(f"compute: input {name!r} expects shape {list(shape)}, got {list(a.shape)}")
        want = t.np_dtype
        if a.dtype != want:
            if a.dtype.kind not in "biuf" or not np.can_cast(a.dtype, want, "same_kind"):
                raise TypeMismatchError(f"compute: input {name!r} is {t.name}; cannot take {a.dtype} data")
            if want.kind in "iu" and a.size:
                info = np.iinfo(want)
                lo, hi = a.min(), a.max()
                if lo < info.min or hi > info.max:
                    raise TypeMismatchError(f"compute: input {name!r} is {t.name}; values [{lo}, {hi}] "
                                            f"do not fit it")
            a = a.astype(want)
        return np.ascontiguousarray(a)

    # ---------------------------------------------------------------- planning

    def _stream(self, d: int):
        st = self._streams.get(d)
        if st is None:
            st = self._streams[d] = R.make_stream(self.devices[d], self.n_threads)
        return st

    def _readable_outputs(self, outs):
        res = []
        for o in outs:
            if _plan.readable(o):
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

    def _dev_index(self, spec) -> Optional[int]:
        """Index of a pinned device among this scheduler's, or None when it is not one of them
        (a graph laid out for several GPUs still runs on a scheduler with fewer devices)."""
        names = [str(x) for x in self.devices]
        s = str(spec)
        if s in names:
            return names.index(s)
        if ":" not in s and s + ":0" in names:
            return names.index(s + ":0")
        return None

    def _build(self, outs):
        readable = self._readable_outputs(outs)
        order = _plan.collect(readable)
        names = [str(d) for d in self.devices]
        probe = R.SupportProbe(order, self.devices)
        assign = _plan.assign_devices(order, len(self.devices), self._dev_index, probe, names)
        del probe
        plan = _plan.Plan(self.devices)
        _plan.build_plan(plan, order, readable, assign, self._dev_index,
                         [int(d.alignment) for d in self.devices], self.n_copies,
                         [0 if d.kind == A.DEVICE_CPU else REUSE_LAG for d in self.devices])
        for d in plan.used:                       # arenas: computed bases and inputs
            ids, offsets, size = plan.arena[d]
            plan.peak_bytes[names[d]] = size
            if ids:
                buf = R.alloc_buffer(self.devices[d], size, self.stats, f"graph memory on {names[d]}")
                plan.scratch.append(buf)
                for tid, off in zip(ids, offsets):
                    plan.mem[(tid, d)] = _plan.Mem(buf, off, ("arena", d))
        for d, (entries, size) in plan.slot_entries.items():   # split input slots
            buf = R.alloc_buffer(self.devices[d], size, self.stats, f"split input slots on {names[d]}")
            plan.scratch.append(buf)
            for si, bid, k, off in entries:
                plan.slot_mem[(si, bid, k)] = _plan.Mem(buf, off, ("slots", d))
        for t, d in _plan.leaves_needed(plan):
            plan.mem[(t.id, d)] = self._leaf(self.devices[d], t)
        needed = [plan.split_tensors(si) for si in range(len(plan.splits))]
        read_after = _read_after_split(plan.splits, needed, readable)
        for si, (d, ts) in enumerate(plan.splits):
            for k in range(self.n_copies):
                def locate(t, d=d, si=si, k=k):
                    m, extra = plan.locate(t, d, si, k)
                    return m.buf, m.off + extra
                plan.descs[(si, k)] = R.make_device_graph(self.devices[d], needed[si], ts, locate, f"split {si}",
                                                          read_after[si])
        return plan

    def _leaf(self, dev, t: Tensor):
        key = (t.graph.uid, t.id, str(dev))
        m = self._leaf_mem.get(key)
        if m is not None:
            return m
        b = R.alloc_buffer(dev, t.nbytes, self.stats, f"{t!r}")
        if t.data is not None:
            arr = t.data
            if arr.nbytes != t.nbytes:
                raise ShapeError(f"{t!r}: data has {arr.nbytes} bytes, tensor needs {t.nbytes}")
            b.write(0, arr, f"uploading {t!r}")
        else:
            b.fill(0, 0, b.size, f"zeroing {t!r}")
        m = _plan.Mem(b, 0, ("leaf", str(dev), t.id))
        self._leaf_mem[key] = m
        return m

    # ---------------------------------------------------------------- programs

    def _dev_models(self):
        return [P.DevModel(i, d.plugin.name, d.caps, d.quirks, bool(d.caps & CAP_HOST_MEMORY),
                           bool(d.caps & CAP_ASYNC_COMPUTE)) for i, d in enumerate(self.devices)]

    def _pinned_io(self, plan, n_mb, devs):
        """Pinned host memory standing in for the user's arrays of a pipelined run (n_mb > 1) on
        devices that stage host copies (see _program.stages_host_io): {("in", mb, j, device) or
        ("out", mb, j): Mem} for generate(), whose program copies the arrays in and out itself."""
        if n_mb < 2:
            return {}
        layout = {}                               # device -> [(key, nbytes)]
        for mb in range(n_mb):
            for tid, d in plan.inputs_on:
                if P.stages_host_io(devs[d]):
                    j = plan.input_index[tid]
                    layout.setdefault(d, []).append((("in", mb, j, d), _nbytes(plan.input_specs[j])))
            for j, t in enumerate(plan.readable):
                d = plan.home[_plan.base(t).id]
                if P.stages_host_io(devs[d]):
                    layout.setdefault(d, []).append((("out", mb, j), _nbytes(plan.output_specs[j])))
        pinned = {}
        for d, items in layout.items():
            offs, size = [], 0
            for _, n in items:
                offs.append(size)
                size += (n + 255) // 256 * 256
            buf = R.alloc_buffer(self.devices[d], size, self.stats, f"pinned staging on {self.devices[d]}", host=True)
            plan.keep.append(buf)
            for (key, _), off in zip(items, offs):
                pinned[key] = _plan.Mem(buf, off, ("pinned", d))
        return pinned

    def _program(self, plan, n_mb):
        key = (n_mb, self._trace is not None)
        prog = plan.programs.get(key)
        if prog is None:
            devs = self._dev_models()
            pinned = self._pinned_io(plan, n_mb, devs)
            gen = P.generate(plan, devs, self.sync, n_mb, self._drop_sync, trace=self._trace is not None,
                             pinned=pinned)
            streams = {d: self._stream(d) for d in {c.dev for c in gen.cmds}}
            bufs = {m.key: m.buf for m in list(plan.mem.values()) + list(plan.slot_mem.values())}
            prog = R.materialize(gen, self.devices, streams, bufs, plan.descs, len(plan.input_specs),
                                 len(plan.output_specs))
            prog.per_split = P.per_split_stats(plan, gen.cmds)
            plan.programs[key] = prog
            self.stats["programs"] += 1
        return prog
