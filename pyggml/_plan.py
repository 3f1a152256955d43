"""Planning: which device computes each node, how the graph splits into runs of one device, where
every tensor's bytes live. Pure Python, done once per graph and outputs; the scheduler
(pyggml/scheduler.py) then allocates what the plan asks for, makes the devices' graph plans
(pyggml/_sched.pyx) and generates command programs from it (pyggml/_program.py).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ._alloc import SMALL_LAG, align_up, plan_arena
from .errors import GraphError, TypeMismatchError, UnsupportedError
from .graph import FLAG_INPUT, FLAG_STATE, FLAG_WEIGHT, VIEW_OPS, Tensor


# ---------------------------------------------------------------- tensor helpers

def collect(outputs) -> List[Tensor]:
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


def base(t: Tensor) -> Tensor:
    """The tensor owning t's bytes (t itself unless t is a view)."""
    return t.view_src if t.view_src is not None else t


def is_compute(t: Tensor) -> bool:
    return t.op != 0 and t.op not in VIEW_OPS


def readable(t: Tensor) -> bool:
    """An output the host can read as it is (a contiguous, non-view result)."""
    return t.op != 0 and t.op not in VIEW_OPS and t.view_src is None and t.is_contiguous()


def out_array_spec(t: Tensor) -> Tuple[np.dtype, tuple]:
    """The numpy dtype and shape an output of t is returned as."""
    if t.type.np_dtype is not None:
        return t.type.np_dtype, t.shape
    if t.type.name == "bf16":
        return np.dtype(np.uint16), t.shape
    return np.dtype(np.uint8), t.shape[:-1] + (t.type.row_bytes(t.ne[0]),)


def src_closure(t: Tensor) -> List[Tensor]:
    """t's sources and, for each, the chain of tensors it views."""
    out = []
    for s in t.src:
        while s is not None:
            out.append(s)
            s = s.view_src if s.view_src is not None and s.view_src is not s else None
    return out


# ---------------------------------------------------------------- the plan

class Mem:
    """Where a tensor's bytes are: a DeviceBuffer and an offset, plus the key that names the
    buffer in the program generator's model ("arena", d) / ("slots", d) / ("leaf", device, id)."""
    __slots__ = ("buf", "off", "key")

    def __init__(self, buf, off: int, key: tuple):
        self.buf = buf
        self.off = off
        self.key = key


class Plan:
    """A graph made ready for a list of devices. Built once by Scheduler.plan(); reused by every
    compute of the same outputs. Every field is set by build_plan() / the scheduler's allocation."""

    def __init__(self, devices):
        self.devices = devices                       # the scheduler's Device list (indices below)
        self.order: List[Tensor] = []                # tensors in execution order
        self.readable: List[Tensor] = []             # the outputs as read (cont() where needed)
        self.assign: Dict[int, int] = {}             # compute node id -> device index
        self.home: Dict[int, int] = {}               # base tensor id -> device index of its memory
        self.splits: List[Tuple[int, List[Tensor]]] = []   # (device index, nodes) in run order
        self.used: List[int] = []                    # device indices with at least one split
        self.foreign: List[List[Tensor]] = []        # per split: bases it reads from another device
        self.inputs_on: List[Tuple[int, int]] = []   # (input id, device index) where an input is written
        self.arena: Dict[int, Tuple[List[int], List[int], int]] = {}  # device -> (ids, offsets, size)
        self.slot_entries: Dict[int, Tuple[list, int]] = {}   # device -> ([(split, id, slot, off)], size)
        self.n_copies = 1
        self.input_specs: List[tuple] = []           # (name, type, shape) per input, feed order
        self.input_index: Dict[int, int] = {}        # input tensor id -> feed position
        self.output_specs: List[tuple] = []          # (tensor, numpy dtype, shape) per output
        # filled when the scheduler allocates and prepares the devices
        self.mem: Dict[Tuple[int, int], Mem] = {}    # (tensor id, device) -> memory of local bases
        self.slot_mem: Dict[Tuple[int, int, int], Mem] = {}  # (split, base id, slot) -> input slot
        self.scratch: list = []                      # arena and slot DeviceBuffers (poisoned on request)
        self.descs: dict = {}                        # (split, slot) -> the device's graph plan
        self.programs: dict = {}                     # (n_mb, traced) -> Program
        self.peak_bytes: Dict[str, int] = {}         # device name -> arena bytes
        self.keep: list = []                         # objects that must live as long as the plan

    @property
    def n_splits(self) -> int:
        return len(self.splits)

    def describe(self) -> List[str]:
        """One line per split: device and op names (for docs, debugging and tests)."""
        return [f"split {i}: {self.devices[d]}: " + " ".join(t.op_name for t in ts)
                for i, (d, ts) in enumerate(self.splits)]

    def locate(self, t: Tensor, d: int, si: int, k: int) -> Tuple[Mem, int]:
        """(memory, extra offset) of tensor t as split si (input slot k) on device d sees it."""
        b = base(t)
        extra = t.view_offs if t.view_src is not None else 0
        if b in self.foreign[si]:
            m = self.slot_mem[(si, b.id, k)]
        elif b.flags & FLAG_STATE:
            m = self.mem[(b.id, self.home[b.id])]
        else:
            m = self.mem.get((b.id, d))
            if m is None:
                raise GraphError(f"plan: {t!r} has no memory on {self.devices[d]}")
        return m, extra

    def split_tensors(self, si: int) -> List[Tensor]:
        """Every tensor split si's device needs a descriptor for (nodes, sources, viewed bases)."""
        needed, seen = [], set()
        for t in self.splits[si][1]:
            for s in [t] + src_closure(t) + ([t.view_src] if t.view_src is not None else []):
                if s.id not in seen:
                    seen.add(s.id)
                    needed.append(s)
        needed.sort(key=lambda x: x.id)
        return needed


# ---------------------------------------------------------------- assignment

def assign_devices(order: List[Tensor], n_devices: int, dev_index: Callable[[object], Optional[int]],
                   probe: Callable[[int, Tensor], bool], names: List[str]) -> Dict[int, int]:
    """Device index for every compute node: an in-place op runs where the memory it writes lives;
    else its pin; else where a pinned weight of it lives; else where its first input was computed;
    else the first device (priority order) that supports it."""
    assign: Dict[int, int] = {}
    state_home: Dict[int, int] = {}
    for t in order:
        if not is_compute(t):
            continue
        b = base(t)
        forced = None
        if b is not t:
            if b.flags & FLAG_STATE:
                forced = state_home.get(b.id)
                if forced is None and b.pin is not None:
                    forced = dev_index(b.pin)
            elif b.id in assign:
                forced = assign[b.id]
        if forced is None and t.pin is not None:
            pinned = dev_index(t.pin)
            if pinned is not None:
                if probe(pinned, t):
                    forced = pinned
                elif not getattr(t, "pin_soft", False):
                    raise UnsupportedError(f"{t!r} is pinned to {names[pinned]}, which cannot compute it")
        elif forced is not None and not probe(forced, t):
            raise UnsupportedError(f"{t!r} writes memory on {names[forced]}, which cannot compute it")
        if forced is not None:
            assign[t.id] = forced
        else:
            cands = [dev_index(s.pin) for s in t.src
                     if s is not None and s.flags & FLAG_WEIGHT and s.pin is not None and dev_index(s.pin) is not None]
            s0 = t.src[0] if t.src else None
            if s0 is not None and base(s0).id in assign:
                cands.append(assign[base(s0).id])
            cands.extend(range(n_devices))
            for d in cands:
                if probe(d, t):
                    assign[t.id] = d
                    break
            else:
                srcs = ", ".join(f"{s.type.name}{list(s.shape)}" for s in t.src if s is not None)
                raise UnsupportedError(f"no device of {names} can compute "
                                       f"{t.op_name} -> {t.type.name}{list(t.shape)} from ({srcs})")
        if b is not t and b.flags & FLAG_STATE:
            state_home.setdefault(b.id, assign[t.id])
    return assign


# ---------------------------------------------------------------- layout

def build_plan(plan: Plan, order: List[Tensor], readable_outs: List[Tensor], assign: Dict[int, int],
               dev_index: Callable[[object], Optional[int]], alignments: List[int], n_copies: int,
               lags: Optional[List[int]] = None) -> Plan:
    """Homes, splits, cross-device inputs and the memory layout (offsets, sizes) of a plan."""
    plan.order = order
    plan.readable = readable_outs
    plan.assign = assign
    plan.n_copies = n_copies
    step = {t.id: i for i, t in enumerate(order)}

    # memory homes: compute bases live where computed; states where first written, else read
    home: Dict[int, int] = {}
    for t in order:
        if is_compute(t) and t.view_src is None:
            home[t.id] = assign[t.id]
    for t in order:
        if is_compute(t):
            b = base(t)
            if b.flags & FLAG_STATE and b.id not in home:
                home[b.id] = assign[t.id]
    for t in order:
        if t.flags & FLAG_STATE and t.id not in home:
            users = [assign[u.id] for u in order
                     if is_compute(u) and any(s is not None and base(s) is t for s in u.src)]
            pinned = dev_index(t.pin) if t.pin is not None else None
            home[t.id] = pinned if pinned is not None else (users[0] if users else 0)
    plan.home = home

    # splits: runs of compute nodes on one device
    splits: List[Tuple[int, List[Tensor]]] = []
    for t in order:
        if not is_compute(t):
            continue
        d = assign[t.id]
        if splits and splits[-1][0] == d:
            splits[-1][1].append(t)
        else:
            splits.append((d, [t]))
    plan.splits = splits
    plan.used = sorted({d for d, _ in splits})

    # per split: the bases computed (or kept) on another device, and where inputs are written
    foreign: List[List[Tensor]] = []
    inputs_on: Dict[Tuple[int, int], bool] = {}
    for si, (d, ts) in enumerate(splits):
        fl: List[Tensor] = []
        for t in ts:
            for s in src_closure(t) + ([base(t)] if t.view_src is not None else []):
                b = base(s)
                if b.flags & FLAG_WEIGHT:
                    continue
                if b.flags & FLAG_INPUT:
                    inputs_on[(b.id, d)] = True
                    continue
                if home.get(b.id) != d and b not in fl:
                    fl.append(b)
        foreign.append(fl)
    plan.foreign = foreign
    plan.inputs_on = sorted(inputs_on, key=lambda x: (step[x[0]], x[1]))

    # arenas: per device, the bases homed there (computed) and the inputs written there
    readable_ids = {o.id for o in readable_outs}
    for d in plan.used:
        ids, sizes, first, last = [], [], [], []
        pos = {}
        for t in order:
            if (t.flags & FLAG_INPUT and (t.id, d) in inputs_on) or \
                    (is_compute(t) and t.view_src is None and home.get(t.id) == d):
                pos[t.id] = len(ids)
                ids.append(t.id)
                sizes.append(t.nbytes)
                first.append(0 if t.flags & FLAG_INPUT else step[t.id])
                last.append(len(order) + 1 if t.id in readable_ids else step[t.id])
        for si, (sd, ts) in enumerate(splits):
            for t in ts:
                for s in src_closure(t):
                    b = base(s)
                    if b.id in pos and (sd == d or b in foreign[si]):
                        k = pos[b.id]
                        last[k] = max(last[k], step[t.id])
        lag = lags[d] if lags else 0
        offsets, size = plan_arena(sizes, first, last, alignments[d], lag, max(lag, SMALL_LAG) if lag else 0)
        plan.arena[d] = (ids, offsets, size)

    # input slots for foreign bases: per device, per split, per copy
    for d in plan.used:
        off = 0
        entries = []
        for si, (sd, ts) in enumerate(splits):
            if sd != d:
                continue
            for b in foreign[si]:
                for k in range(n_copies):
                    entries.append((si, b.id, k, off))
                    off = align_up(off + b.nbytes, alignments[d])
        if entries:
            plan.slot_entries[d] = (entries, off)

    # host-facing specs
    ins = [t for t in order if t.flags & FLAG_INPUT]
    plan.input_specs = [(t.name, t.type, t.shape) for t in ins]
    plan.input_index = {t.id: j for j, t in enumerate(ins)}
    plan.output_specs = []
    for t in readable_outs:
        dt, shape = out_array_spec(t)
        plan.output_specs.append((t, dt, shape))
    return plan


def leaves_needed(plan: Plan) -> List[Tuple[Tensor, int]]:
    """(leaf, device index) pairs the plan needs memory for: weights on every device that uses
    them, states on their home device."""
    out, seen = [], set()
    for d, ts in plan.splits:
        for t in ts:
            for s in src_closure(t) + [base(t)]:
                b = base(s)
                if b.flags & FLAG_WEIGHT and (b.id, d) not in seen:
                    seen.add((b.id, d))
                    out.append((b, d))
    for t in plan.order:
        if t.flags & FLAG_STATE and (t.id, plan.home[t.id]) not in seen:
            seen.add((t.id, plan.home[t.id]))
            out.append((t, plan.home[t.id]))
    return out
