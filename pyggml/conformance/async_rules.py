"""The asynchronous half of the ABI, checked on any plugin (REQUIREMENTS.md R13-R18).

Each check races large copies (many MiB) against queued work, many rounds, with a new byte
pattern every round, and compares every byte: a copy or compute that reads before a blocking copy
landed, or a synchronize that returns before the work it covers, leaves the previous round's
bytes behind, which the comparison counts. Real-hardware bugs of this kind show up with some
probability per round (CUDA's pageable cudaMemcpy on the legacy stream returns once the source
is staged, and a kernel queued on a non-blocking stream right after may read stale bytes); the
round count and size are chosen for the device type and can be raised (`pyggml check --async-mb
--async-rounds`). Values are small integers in float32, so "src + k" through k chained scale
nodes is exact.

Every check returns (rule, ok, detail) where ok is True, False or None (skipped: the detail says
why, e.g. a cap the plugin does not declare)."""
import time

import numpy as np

from .. import _abi_consts as A
from .abi import AbiCallError, Buffer, Plan, Table, device_handle, ffi

RULES = {
    "R13": "blocking write is complete when it returns",
    "R14": "blocking read sees the work the host waited for",
    "R15": "stream_synchronize covers the stream's queued work",
    "R16": "queued copies and computes run in queue order",
    "R17": "events order streams (same device and across devices)",
    "R18": "asynchronous errors surface at the next sync or query",
}


def defaults(dev):
    """(MiB per buffer, rounds, chain length) for a device: GPUs get tens of MiB and many rounds."""
    descr = (dev.description or "").lower()
    if "llvmpipe" in descr or "lavapipe" in descr:
        return 4, 3, 4
    if dev.kind == A.DEVICE_GPU:
        return 32, 20, 16
    return 8, 4, 4


# Host arrays that queued copies of a failed check may still touch: a plugin that breaks the
# ordering rules may write into them after the check moved on, so they are never freed.
_HELD_AFTER_FAILURE = []


class _Rig:
    """Buffers, streams and plans for one device's checks; closed by close()."""

    def __init__(self, dev, mib, chain):
        self.dev, self.t = dev, Table(dev.plugin)
        self.h = device_handle(dev)
        self.n = max(1024, (mib << 20) // 4 // 1024 * 1024)      # floats per buffer
        self.size = self.n * 4
        self.bufs, self.streams, self.events, self.plans = [], [], [], []
        self.A, self.B, self.C, self.D, self.T = (self.buffer() for _ in range(5))
        self.s1, self.s2 = self.stream(), self.stream()
        self.chain = chain
        self.hold, self.failed = [], False
        self.plan = self.keep_plan(Plan.make(self.t, self.h, self.A, self.C, self.T, self.n, chain))

    def buffer(self, dev=None):
        b = Buffer(self.t, device_handle(dev) if dev else self.h, self.size)
        self.bufs.append(b)
        return b

    def stream(self, dev=None):
        s = self.t.out("stream_create", "pyg_stream *", device_handle(dev) if dev else self.h, A.STREAM_DEFAULT)
        self.streams.append(s)
        return s

    def event(self, dev=None):
        e = self.t.out("event_create", "pyg_event *", device_handle(dev) if dev else self.h)
        self.events.append(e)
        return e

    def keep_plan(self, plan):
        if plan is not None:
            self.plans.append(plan)
        return plan

    def write(self, buf, arr):
        self.t("buffer_write", buf.handle, 0, ffi.cast("void *", arr.ctypes.data), arr.nbytes)

    def read(self, buf):
        out = np.empty(self.n, np.float32)
        self.t("buffer_read", buf.handle, 0, ffi.cast("void *", out.ctypes.data), out.nbytes)
        return out

    def copy(self, stream, dst, src):
        self.t("stream_copy_async", stream, dst.handle, 0, src.handle, 0, self.size)

    def pattern(self, rnd):
        """Round `rnd`'s bytes: small integers, different from every other round's at every element."""
        a = (np.arange(self.n, dtype=np.int64) % 1000 + 1000 * (rnd + 1)).astype(np.float32)
        self.hold.append(a)
        return a

    def host(self):
        a = np.zeros(self.n, np.float32)
        self.hold.append(a)
        return a

    def close(self):
        if self.failed:
            _HELD_AFTER_FAILURE.extend(self.hold)
        for s in self.streams:                     # streams wait for their work when destroyed
            self.t.api.stream_destroy(s)
        for p in self.plans:
            p.destroy()
        for e in self.events:
            self.t.api.event_destroy(e)
        for b in self.bufs:
            b.free()


def _diff(got, want):
    bad = np.flatnonzero(got != want)
    if not bad.size:
        return None
    i = int(bad[0])
    return f"{bad.size} of {want.size} floats wrong (first at byte {4 * i}: {got[i]:g}, want {want[i]:g})"


def _rounds(fn, rounds):
    """Run fn(round) for each round; the first failure's (round, message), or None."""
    for r in range(rounds):
        msg = fn(r)
        if msg:
            return f"round {r + 1} of {rounds}: {msg}"
    return None


def check_device(dev, mib=None, rounds=None, echo=None):
    """Every async rule on one device; a list of (rule, ok, detail)."""
    d_mib, d_rounds, chain = defaults(dev)
    mib, rounds = mib or d_mib, rounds or d_rounds
    out = []
    t0 = time.perf_counter()
    try:
        rig = _Rig(dev, mib, chain)
    except AbiCallError as e:
        return [(f"R13-R18 async rules ({dev})", False, f"cannot set up {mib} MiB buffers and two streams: {e}")]
    try:
        for fn in (_r13, _r14, _r15_r16, _r17_same_device, _r17_across_devices, _r18):
            for rule, ok, detail in fn(rig, rounds):
                rig.failed |= ok is False
                out.append((f"{rule} {RULES[rule]} ({dev})", ok, detail))
                if echo:
                    echo(out[-1])
    except AbiCallError as e:
        rig.failed = True
        out.append((f"R13-R18 async rules ({dev})", False, f"an entry failed: {e}"))
    finally:
        rig.close()
    out.append((f"async rules ({dev})", True, f"{mib} MiB buffers, {rounds} rounds, {time.perf_counter() - t0:.1f} s"))
    return out


def _r13(rig, rounds):
    """buffer_write, then at once a copy (and a compute) queued on a stream reads what it wrote."""
    def one(r):
        want = rig.pattern(r)
        rig.write(rig.A, want)
        rig.copy(rig.s1, rig.B, rig.A)
        if rig.plan:
            rig.plan.compute(rig.s1)
        rig.t("stream_synchronize", rig.s1)
        msg = _diff(rig.read(rig.B), want)
        if msg:
            return "a copy queued right after buffer_write read stale bytes: " + msg
        msg = rig.plan and _diff(rig.read(rig.C), want + rig.chain)
        return msg and "a compute queued right after buffer_write read stale bytes: " + msg
    fail = _rounds(one, rounds)
    what = f"{rig.size >> 20} MiB write, then a queued copy" + (" and a compute" if rig.plan else "")
    yield "R13", fail is None, fail or what


def _r14(rig, rounds):
    """Queued work, an event recorded after it, event_synchronize: buffer_read sees the result."""
    ev = rig.event()

    def one(r):
        want = rig.pattern(r)          # written by the queue itself: R14 judges the read, not a write
        rig.t("stream_write_async", rig.s1, rig.A.handle, 0, ffi.cast("void *", want.ctypes.data), rig.size)
        if rig.plan:
            rig.plan.compute(rig.s1)
            dst, exp = rig.C, want + rig.chain
        else:
            rig.copy(rig.s1, rig.T, rig.A)
            rig.copy(rig.s1, rig.C, rig.T)
            dst, exp = rig.C, want
        rig.t("event_record", ev, rig.s1)
        rig.t("event_synchronize", ev)
        msg = _diff(rig.read(dst), exp)
        return msg and "buffer_read after event_synchronize: " + msg
    fail = _rounds(one, rounds)
    yield "R14", fail is None, fail or "event_synchronize, then buffer_read"


def _r15_r16(rig, rounds):
    """On one stream: write_async, compute, copy, read_async; stream_synchronize; the host array
    holds the result at once (R15) and the device buffers hold what queue order gives (R16)."""
    r15 = r16 = None

    def one(r):
        nonlocal r15, r16
        src = rig.pattern(r)
        host = rig.host()
        rig.t("stream_write_async", rig.s1, rig.A.handle, 0, ffi.cast("void *", src.ctypes.data), rig.size)
        mid, exp = rig.A, src
        if rig.plan:
            rig.plan.compute(rig.s1)
            mid, exp = rig.C, src + rig.chain
        rig.copy(rig.s1, rig.D, mid)
        rig.t("stream_read_async", rig.s1, rig.D.handle, 0, ffi.cast("void *", host.ctypes.data), rig.size)
        rig.t("stream_synchronize", rig.s1)
        early = _diff(host, exp)                       # read before anything else touches it
        _drain(rig, rig.s1)                            # by an event too, in case the sync lied
        order = _diff(rig.read(rig.D), exp)
        if order:
            r16 = f"round {r + 1}: write_async -> compute -> copy out of order: {order}"
        elif early:
            r15 = f"round {r + 1}: stream_read_async's bytes not in host memory when stream_synchronize returned: {early}"
        return r15 or r16
    _rounds(one, rounds)
    chain = "write_async, compute, copy, read_async" if rig.plan else "write_async, copy, read_async"
    yield "R15", r15 is None if r16 is None else None, r15 or ("not judged: the queue order failed" if r16 else
                                                             f"{chain}, then stream_synchronize")
    yield "R16", r16 is None, r16 or chain


def _drain(rig, stream, timeout=60.0):
    """Wait for `stream` through an event (record, then query until done), not stream_synchronize."""
    ev = rig.event()
    rig.t("event_record", ev, stream)
    t_end = time.perf_counter() + timeout
    while not rig.t.out("event_query", "int32_t", ev):
        if time.perf_counter() > t_end:
            raise AbiCallError("event_query", -1, f"an event did not complete within {timeout:.0f} s")
        time.sleep(0.0005)


def _r17_same_device(rig, rounds):
    if not rig.dev.caps & A.CAP_EVENTS:
        yield "R17", None, "skipped: no PYG_CAP_EVENTS (events need not order streams)"
        return
    ev = rig.event()

    def one(r):
        src = rig.pattern(r)
        rig.t("stream_write_async", rig.s1, rig.A.handle, 0, ffi.cast("void *", src.ctypes.data), rig.size)
        exp = src
        if rig.plan:
            rig.plan.compute(rig.s1)                  # A -> C, a chain of nodes: long
            mid, exp = rig.C, src + rig.chain
        else:
            rig.copy(rig.s1, rig.C, rig.A)
            mid = rig.C
        rig.t("event_record", ev, rig.s1)
        rig.t("stream_wait_event", rig.s2, ev)
        rig.copy(rig.s2, rig.D, mid)                  # must wait for s1's work
        rig.t("stream_synchronize", rig.s2)
        msg = _diff(rig.read(rig.D), exp)
        rig.t("stream_synchronize", rig.s1)           # src stays alive until s1 passed the write
        return msg and "a copy on stream 2 after stream_wait_event read before stream 1's work ended: " + msg
    fail = _rounds(one, rounds)
    yield "R17", fail is None, fail or "stream 1: write_async + compute, record; stream 2: wait, copy"


def _r17_across_devices(rig, rounds):
    devs = [d for d in rig.dev.plugin.devices if d is not rig.dev]
    if not devs:
        return
    if not rig.dev.caps & A.CAP_EVENTS:
        return
    other = devs[0]
    s_other = rig.stream(other)
    e0, e1 = rig.event(), rig.event(other)
    peer = bool(other.caps & A.CAP_PEER_COPY)
    dst = rig.buffer(other) if peer else None

    def one(r):
        src = rig.pattern(r)
        rig.write(rig.A, src)
        exp = src
        if rig.plan:
            rig.plan.compute(rig.s1)
            mid, exp = rig.C, src + rig.chain
        else:
            rig.copy(rig.s1, rig.C, rig.A)
            mid = rig.C
        rig.t("event_record", e0, rig.s1)
        rig.t("stream_wait_event", s_other, e0)
        if peer:
            rig.copy(s_other, dst, mid)
        rig.t("event_record", e1, s_other)
        while True:                                   # e1 may complete only after e0
            d1 = rig.t.out("event_query", "int32_t", e1)
            d0 = rig.t.out("event_query", "int32_t", e0)
            if d1 and not d0:
                return f"{other}'s event recorded after waiting on {rig.dev}'s completed first"
            if d1:
                break
        if peer:
            msg = _diff(rig.read(dst), exp)
            if msg:
                return f"peer copy on {other} after the wait read before {rig.dev}'s work ended: {msg}"
        rig.t("stream_synchronize", rig.s1)
        return None
    fail = _rounds(one, rounds)
    yield "R17", fail is None, fail or f"{rig.dev} record, {other} wait" + (" + peer copy" if peer else "")


def _r18(rig, rounds):
    """Through the optional test hook: device option debug_async_fault=1 makes the next queued
    compute fail asynchronously. The error must surface at the next synchronize, once."""
    if rig.plan is None:
        yield "R18", None, "skipped: the device does not support the check's scale node"
        return
    code, msg = rig.t.take("device_set_option", rig.h, b"debug_async_fault", b"1")
    if code == A.ERR_UNSUPPORTED:
        yield "R18", None, "skipped: no debug_async_fault option (REQUIREMENTS.md R18: optional test hook)"
        return
    if code != A.OK:
        yield "R18", False, f"device_set_option debug_async_fault=1: error {code}: {msg}"
        return
    queued = rig.t.take("graph_plan_compute", rig.plan.handle, rig.s1)
    first = queued if queued[0] != A.OK else rig.t.take("stream_synchronize", rig.s1)
    second = rig.t.take("stream_synchronize", rig.s1)
    if first[0] == A.OK:
        yield "R18", False, "an injected asynchronous failure was never reported"
    elif second[0] != A.OK:
        yield "R18", False, f"the failure was reported twice (second: error {second[0]}: {second[1]})"
    else:
        rig.plan.compute(rig.s1)                      # the stream keeps working
        rig.t("stream_synchronize", rig.s1)
        where = "by graph_plan_compute itself" if queued[0] != A.OK else "at the next stream_synchronize"
        yield "R18", True, f"injected failure reported {where} (error {first[0]}), once"
