"""Turns a planned graph (splits, copies, memory) into the command program a run executes.

The generator walks the run in host order and keeps, per byte range, the accesses each queue has
pending (a small vector-clock model of the queues). Before every command it adds the waits that
rule 3 of the contract (pyggml/sync.py) requires, made the way the sync policy says; each split's
input slot is driven through the state machine, so an illegal order raises SyncStateError here,
before anything runs. The program is then executed by _sched.pyx without the GIL.
"""
import numpy as np

from . import _abi_consts as _abi
from ._plan import base
from .sync import Slot

HOST = -1

# command kinds (mirrored in _sched.pyx)
WRITE, READ, COPY, LAUNCH, RECORD, WAIT, SYNC_EVENT, SYNC_STREAM, HOST_COPY = range(9)
KIND_NAME = ["write", "read", "copy", "launch", "record", "wait", "sync_event", "sync_stream", "host_copy"]


class Cmd:
    """One step of a program. Regions are (buffer key, lo, hi); host operands are
    ("fixed", key, off) for memory the scheduler owns or ("in", mb, j) / ("out", mb, j) for the
    arrays bound at each compute."""

    __slots__ = ("kind", "dev", "is_async", "dst", "src", "host", "size", "split", "event", "note", "mb",
                 "role", "split_index")

    def __init__(self, kind, dev, is_async=False, dst=None, src=None, host=None, size=0, split=None,
                 event=None, note="", mb=0, role="", split_index=None):
        self.kind, self.dev, self.is_async = kind, dev, is_async
        self.dst, self.src, self.host, self.size = dst, src, host, size
        self.split, self.event, self.note, self.mb = split, event, note, mb
        self.role = role                  # "input", "slot", "output", "stage" for copies; "" otherwise
        self.split_index = split_index    # the split a slot copy or launch belongs to

    @property
    def letter(self):
        if self.kind in (WRITE, READ, COPY):
            return "a" if self.is_async else "c"
        return {LAUNCH: "g", WAIT: "w", SYNC_EVENT: "s", SYNC_STREAM: "s"}.get(self.kind, "")

    def __repr__(self):
        bits = [KIND_NAME[self.kind], f"dev{self.dev}"]
        if self.kind in (WRITE, READ, COPY):
            bits.append("async" if self.is_async else "blocking")
        if self.kind == HOST_COPY:
            bits.append("out of pinned" if self.is_async else "into pinned")
        if self.split is not None:
            bits.append(f"split{self.split}")
        if self.event is not None:
            bits.append(f"ev{self.event}")
        if self.note:
            bits.append(self.note)
        return " ".join(bits)


class DevModel:
    """What the generator needs to know of a device."""

    def __init__(self, index, plugin, caps, quirks, host_memory, async_compute):
        self.index = index
        self.plugin = plugin
        self.caps = caps
        self.quirks = quirks
        self.host_memory = host_memory          # its buffers are host memory (the CPU)
        self.async_compute = async_compute


CAP_ASYNC_COMPUTE, CAP_EVENTS, CAP_PEER = _abi.CAP_ASYNC_COMPUTE, _abi.CAP_EVENTS, _abi.CAP_PEER_COPY
CAP_W_PINNED, CAP_W_PAGEABLE = _abi.CAP_ASYNC_WRITE_PINNED, _abi.CAP_ASYNC_WRITE_PAGEABLE
CAP_ASYNC_READ = _abi.CAP_ASYNC_READ
QUIRK_NO_ASYNC_HOST, QUIRK_MD_SYNC = _abi.QUIRK_NO_ASYNC_HOST_COPY, _abi.QUIRK_MULTI_DEVICE_SYNC
CAP_HOST_BUFFER, CAP_HOST_MEMORY = _abi.CAP_HOST_BUFFER, _abi.CAP_HOST_MEMORY


def _overlap(a, b):
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]


class Generator:
    def __init__(self, devs, policy, n_devices_used, drop_sync=None, trace=False):
        self.trace = trace                                      # record an event after each queued command
        self.traced = []                                        # (command index, event id)
        self.devs = devs
        self.policy = policy
        self.multi = n_devices_used > 1
        self.cmds = []
        self.seq = {d.index: 0 for d in devs}                  # commands queued per stream
        self.clock = {o: {d.index: 0 for d in devs} for o in [HOST] + [d.index for d in devs]}
        self.pending = {}                                       # buffer key -> [(lo, hi, write, stream, seq)]
        self.events = []                                        # event id -> (stream, seq, clock snapshot)
        self.last_record = {d.index: None for d in devs}
        self.slots = []                                         # live Slot objects with their bookkeeping
        self.pinned_outs = []                                   # (event, pinned Mem, user array, size, note, mb)
        self.drop_sync = drop_sync                              # debug: index of an ordering to leave out
        self.n_orderings = 0
        self.dropped = None

    # ---------------------------------------------------------------- ordering

    def _synchronous(self, dev):
        return not self.devs[dev].async_compute

    def _emit(self, cmd):
        self.cmds.append(cmd)
        return cmd

    def _can_device_wait(self, obs, s):
        if self.policy != "events" or obs == HOST:
            return False
        a, b = self.devs[obs], self.devs[s]
        return a.plugin == b.plugin and (a.caps & CAP_EVENTS) and (b.caps & CAP_EVENTS) and a.async_compute

    def _host_done(self, s, upto, seen=None):
        """The host has seen stream s complete everything up to seq `upto`. Completion is
        transitive: what s had waited for before that point is complete too. `seen` is s's clock
        at that point (an event's snapshot); without it, upto must be s's last command (a stream
        wait), where s's current clock is that point."""
        if seen is None:
            assert upto >= self.seq[s], "a wait before the stream's last command needs its clock snapshot"
            seen = self.clock[s]
        for o in self.clock:
            self.clock[o][s] = max(self.clock[o][s], upto)
        for t, v in seen.items():
            for o in self.clock:
                self.clock[o][t] = max(self.clock[o][t], min(v, self.seq[t]))
        self._notify(HOST, s, upto)

    def _order(self, obs, s, upto, why):
        """Make observer `obs` (a stream or HOST) ordered after stream s's commands up to `upto`."""
        if self.clock[obs][s] >= upto:
            return
        idx = self.n_orderings
        self.n_orderings += 1
        drop = self.drop_sync is not None and idx == self.drop_sync
        if drop:        # leave it out, but generate the rest of the program as if it had happened
            self.dropped = f"ordering #{idx}: {why}"
        emit = (lambda cmd: None) if drop else self._emit
        if drop and self._can_device_wait(obs, s):
            self.clock[obs][s] = upto
            self._notify(obs, s, upto, device=True)
            return
        if self._can_device_wait(obs, s):
            ev = self._record(s)
            self._emit(Cmd(WAIT, obs, event=ev, note=why))
            snap = self.events[ev][2]
            self.clock[obs][s] = max(self.clock[obs][s], self.events[ev][1])
            for t, v in snap.items():
                self.clock[obs][t] = max(self.clock[obs][t], v)
            self._notify(obs, s, self.events[ev][1], device=True)
            return
        rec = self.last_record[s]
        if rec is not None and self.events[rec][1] >= upto:
            emit(Cmd(SYNC_EVENT, s, event=rec, note=why))
            self._host_done(s, self.events[rec][1], self.events[rec][2])
        else:
            emit(Cmd(SYNC_STREAM, s, note=why))
            self._host_done(s, self.seq[s])

    def _record(self, s):
        rec = self.last_record[s]
        if rec is not None and self.events[rec][1] == self.seq[s]:
            return rec
        ev = len(self.events)
        self.events.append((s, self.seq[s], dict(self.clock[s])))
        self.last_record[s] = ev
        self._emit(Cmd(RECORD, s, event=ev))
        for sl in self.slots:
            if sl["reader"] == s and sl["slot"].state == "launched" and sl["launch_seq"] <= self.seq[s]:
                sl["slot"].fire("record")
        return ev

    def _access(self, obs, region, write, why):
        """Order `obs` after every conflicting pending access of other queues to `region`."""
        for lo, hi, w, s, q in self.pending.get(region[0], ()):
            if s == obs or not (write or w) or not (lo < region[2] and region[1] < hi):
                continue
            self._order(obs, s, q, why)

    def _queued(self, s, regions):
        """Stream s queued a command touching `regions` [(region, write)]."""
        self.seq[s] += 1
        self.clock[s][s] = self.seq[s]
        for (key, lo, hi), w in regions:
            self.pending.setdefault(key, []).append((lo, hi, w, s, self.seq[s]))
        if self.trace and (self.devs[s].caps & CAP_EVENTS):
            at = len(self.cmds) - 1
            self.traced.append((at, self._record(s)))

    def _strict_after(self, s, why):
        if self.policy == "strict" and not self._synchronous(s):
            self._order(HOST, s, self.seq[s], why)

    # ---------------------------------------------------------------- slot bookkeeping

    def _notify(self, obs, s, upto, device=False):
        for sl in self.slots:
            slot = sl["slot"]
            if slot.state == "filling" and (obs == HOST or obs == sl["reader"]):
                if all(self.clock[sl["reader"]][cs] >= cq for cs, cq in sl["copies"]):
                    slot.fire("device_wait" if device else "host_sync")
            elif slot.state in ("launched", "recorded") and sl["reader"] == s and sl["launch_seq"] <= upto:
                if device:
                    if slot.state == "launched":
                        slot.fire("record")
                    slot.fire("device_wait")
                else:
                    slot.fire("host_sync")

    # ---------------------------------------------------------------- program pieces

    def host_write(self, dev, dst, host, size, src_region=None, note="", mb=0, role="input", split_index=None,
                   pinned=False):
        """Host memory -> a device region (user inputs, CPU memory to a device). `pinned`: the
        source is pinned host memory of the device's plugin."""
        d = self.devs[dev]
        async_ok = (not d.host_memory and d.async_compute and (d.caps & (CAP_W_PINNED if pinned else CAP_W_PAGEABLE))
                    and not (d.quirks & QUIRK_NO_ASYNC_HOST) and self.policy != "strict")
        if async_ok:
            self._access(dev, dst, True, f"{note}: slot free")
            if src_region is not None:
                self._access(dev, src_region, False, f"{note}: source written")
            self._emit(Cmd(WRITE, dev, True, dst=dst, host=host, size=size, note=note, mb=mb, role=role,
                          split_index=split_index))
            self._queued(dev, [(dst, True)] + ([(src_region, False)] if src_region else []))
            self._strict_after(dev, note)
            return True
        self._access(HOST, dst, True, f"{note}: destination idle")
        if src_region is not None:
            self._access(HOST, src_region, False, f"{note}: source written")
        self._emit(Cmd(WRITE, dev, False, dst=dst, host=host, size=size, note=note, mb=mb, role=role,
                      split_index=split_index))
        return False

    def host_read(self, dev, src, host, size, dst_region=None, note="", mb=0, role="output", split_index=None):
        """A device region -> host memory (outputs, device data into CPU memory)."""
        d = self.devs[dev]
        async_ok = (not d.host_memory and d.async_compute and (d.caps & CAP_ASYNC_READ)
                    and not (d.quirks & QUIRK_NO_ASYNC_HOST) and self.policy != "strict")
        if async_ok:
            self._access(dev, src, False, f"{note}: source written")
            if dst_region is not None:
                self._access(dev, dst_region, True, f"{note}: destination idle")
            self._emit(Cmd(READ, dev, True, src=src, host=host, size=size, note=note, mb=mb, role=role,
                          split_index=split_index))
            self._queued(dev, [(src, False)] + ([(dst_region, True)] if dst_region else []))
            self._strict_after(dev, note)
            return True
        self._access(HOST, src, False, f"{note}: source written")
        if dst_region is not None:
            self._access(HOST, dst_region, True, f"{note}: destination idle")
        self._emit(Cmd(READ, dev, False, src=src, host=host, size=size, note=note, mb=mb, role=role,
                      split_index=split_index))
        return False

    def peer_copy(self, src_dev, dst, src, size, note="", mb=0, split_index=None):
        """Same plugin, another device: queued on the source's stream (rule 5)."""
        self._access(src_dev, src, False, f"{note}: source written")
        self._access(src_dev, dst, True, f"{note}: slot free")
        self._emit(Cmd(COPY, src_dev, True, dst=dst, src=src, size=size, note=note, mb=mb, role="slot",
                       split_index=split_index))
        self._queued(src_dev, [(src, False), (dst, True)])
        self._strict_after(src_dev, note)

    def launch(self, dev, split, reads, writes, note="", mb=0):
        obs = HOST if self._synchronous(dev) else dev
        for r in reads:
            self._access(obs, r, False, f"{note}: input ready")
        for w in writes:
            self._access(obs, w, True, f"{note}: memory free")
        self._emit(Cmd(LAUNCH, dev, split=split, note=note, mb=mb, split_index=split[0]))
        if obs != HOST:
            self._queued(dev, [(r, False) for r in reads] + [(w, True) for w in writes])
            if self.multi and (self.devs[dev].quirks & QUIRK_MD_SYNC):
                self._order(HOST, dev, self.seq[dev], f"{note}: quirk multi-device sync")
            self._strict_after(dev, note)

    def host_copy_in(self, dev, user, pinned, size, note="", mb=0):
        """The host copies a user array into pinned memory right before the write that reads it,
        so the copy of micro-batch m + 1 overlaps the devices' work on m. (Each pinned range is
        written once per run and the previous run ended with its readers done: rule 8.)"""
        self._emit(Cmd(HOST_COPY, dev, False, host=(user, pinned), size=size, note=note, mb=mb, role="input"))

    def pinned_read_done(self, dev, pinned, user, size, note="", mb=0):
        """A queued read into pinned memory: an event after it, waited for at the end of the run
        (in micro-batch order, so early outputs are copied out while later ones still compute)."""
        ev = self._record(dev) if self.devs[dev].caps & CAP_EVENTS else None
        self.pinned_outs.append((dev, ev, pinned, user, size, note, mb))

    def finish(self):
        late = []
        for dev, ev, pinned, user, size, note, mb in self.pinned_outs:
            if ev is None:                       # no events: copied out after the end-of-run waits
                late.append((dev, pinned, user, size, note, mb))
                continue
            s, seq, _ = self.events[ev]
            if self.clock[HOST][s] < seq:
                self._emit(Cmd(SYNC_EVENT, s, event=ev, note=f"{note}: read done"))
                self._host_done(s, seq, self.events[ev][2])
            self._emit(Cmd(HOST_COPY, dev, True, host=(user, pinned), size=size, note=note, mb=mb, role="output"))
        self._finish_queues()
        for dev, pinned, user, size, note, mb in late:
            self._emit(Cmd(HOST_COPY, dev, True, host=(user, pinned), size=size, note=note, mb=mb, role="output"))

    def _finish_queues(self):
        """Rule 8: the host waits for every queue with pending work. A queue whose work another
        pending queue is already ordered after (it waited on its event) is covered by waiting for
        that one: decode over several devices ends with one host wait, on the last device."""
        while True:
            pending = [d.index for d in self.devs if self.clock[HOST][d.index] < self.seq[d.index]]
            if not pending:
                return
            covered = {d for d in pending for e in pending if e != d and self.clock[e][d] >= self.seq[d]}
            s = next(d for d in pending if d not in covered) if len(covered) < len(pending) else pending[0]
            self._order(HOST, s, self.seq[s], "end of run")

    # ---------------------------------------------------------------- slots

    def slot_copy(self, sl, stream, blocking):
        slot = sl["slot"]
        slot.fire("copy_blocking" if blocking else "copy_async")
        if not blocking:
            sl["copies"].append((stream, self.seq[stream]))

    def slot_launch(self, sl, dev):
        slot = sl["slot"]
        if slot.state == "filling":
            reader = sl["reader"]
            if all(cs == reader for cs, _ in sl["copies"]):
                slot.fire("device_wait")     # queued on the split's own queue: in order
        slot.fire("launch")
        if self._synchronous(dev):
            slot.fire("host_sync")           # a synchronous device is done when launch returns
        else:
            sl["launch_seq"] = self.seq[dev]

    def new_slot(self, name, reader):
        sl = {"slot": Slot(name), "reader": reader, "copies": [], "launch_seq": 0}
        self.slots.append(sl)
        return sl


def pattern(cmds):
    return "".join(c.letter for c in cmds)


# ---------------------------------------------------------------- a plan's program

def region(m, nbytes, extra=0):
    """The byte range of a tensor of `nbytes` at memory m (+ extra) as the generator sees it."""
    return (m.key, m.off + extra, m.off + extra + max(1, nbytes))


def stages_host_io(d):
    """A device whose queued host copies are staged through pinned memory in pipelined runs: a
    queued read into ordinary host memory may block until done (CUDA does), which would hold the
    host until the micro-batch has left the last device."""
    return not d.host_memory and d.async_compute and bool(d.caps & CAP_HOST_BUFFER)


def generate(plan, devs, policy, n_mb, drop_sync=None, trace=False, pinned=None):
    """The command program of `n_mb` micro-batches of `plan` (see pyggml/_plan.py) under `policy`.
    Copy routes: a foreign base reaches a split's input slot by a copy on its source's queue when
    both devices are one plugin with peer copies (rule 5), by a read into host-memory devices, a
    write from them, and otherwise through a host staging array (two plugins). Returns the
    Generator holding the commands, events and traced commands. `pinned`: {("in", mb, j, device)
    or ("out", mb, j): Mem} pinned host memory that stands in for the user's arrays."""
    gen = Generator(devs, policy, len(plan.used), drop_sync, trace=trace)
    by_id = {t.id: t for t in plan.order}
    name = [str(d) for d in plan.devices]
    for mb in range(n_mb):
        k = mb % plan.n_copies
        for tid, d in plan.inputs_on:                 # user inputs, written where they are used
            t = by_id[tid]
            m = plan.mem[(tid, d)]
            j = plan.input_index[tid]
            pm = pinned.get(("in", mb, j, d)) if pinned else None
            if pm is not None:
                gen.host_copy_in(d, ("in", mb, j), pm, t.nbytes, note=f"input {t.name}", mb=mb)
            gen.host_write(d, region(m, t.nbytes), ("fixed", pm) if pm else ("in", mb, j), t.nbytes,
                           note=f"input {t.name}", mb=mb, pinned=pm is not None)
        for si, (d, ts) in enumerate(plan.splits):
            slots = []
            for b in plan.foreign[si]:
                hd = plan.home[b.id]
                src_m = plan.mem[(b.id, hd)]
                dst_m = plan.slot_mem[(si, b.id, k)]
                src, dst = region(src_m, b.nbytes), region(dst_m, b.nbytes)
                sl = gen.new_slot(f"split {si} slot {k} <- {b.name or b.op_name}", d)
                slots.append(sl)
                note = f"split {si}: {b.name or b.op_name + '#' + str(b.id)} {name[hd]}->{name[d]}"
                sdev, ddev = devs[hd], devs[d]
                meta = dict(note=note, mb=mb, split_index=si)
                if sdev.plugin == ddev.plugin and sdev.async_compute and (sdev.caps & CAP_PEER) \
                        and not sdev.host_memory:
                    gen.peer_copy(hd, dst, src, b.nbytes, **meta)
                    gen.slot_copy(sl, hd, False)
                elif ddev.host_memory:
                    is_async = gen.host_read(hd, src, ("fixed", dst_m), b.nbytes, dst_region=dst, role="slot", **meta)
                    gen.slot_copy(sl, hd, not is_async)
                elif sdev.host_memory:
                    is_async = gen.host_write(d, dst, ("fixed", src_m), b.nbytes, src_region=src, role="slot", **meta)
                    gen.slot_copy(sl, d, not is_async)
                else:
                    stage = np.empty(b.nbytes, np.uint8)
                    plan.keep.append(stage)
                    meta["note"] = note + " (via host)"
                    gen.host_read(hd, src, ("stage", stage), b.nbytes, role="stage", **meta)
                    gen._order(HOST, hd, gen.seq[hd], note + ": staged")
                    gen.host_write(d, dst, ("stage", stage), b.nbytes, role="slot", **meta)
                    gen._order(HOST, d, gen.seq[d], note + ": staged")
                    gen.slot_copy(sl, d, True)
            reads, writes = [], []
            seen = set()
            for t in ts:
                for s in t.src:
                    if s is None:
                        continue
                    b = base(s)
                    if b.id in seen:
                        continue
                    seen.add(b.id)
                    m, _ = plan.locate(b, d, si, k)
                    reads.append(region(m, b.nbytes))
                b = base(t)
                m, _ = plan.locate(b, d, si, k)
                writes.append(region(m, b.nbytes))
            gen.launch(d, (si, k), reads, writes, note=f"split {si} on {name[d]}", mb=mb)
            for sl in slots:
                gen.slot_launch(sl, d)
        for j, t in enumerate(plan.readable):
            d = plan.home[base(t).id]
            m = plan.mem[(t.id, d)]
            pm = pinned.get(("out", mb, j)) if pinned else None
            queued = gen.host_read(d, region(m, t.nbytes), ("fixed", pm) if pm else ("out", mb, j), t.nbytes,
                                   note=f"output {j}", mb=mb)
            if pm is not None:
                if queued:
                    gen.pinned_read_done(d, pm, ("out", mb, j), t.nbytes, note=f"output {j}", mb=mb)
                else:
                    gen._emit(Cmd(HOST_COPY, d, True, host=(("out", mb, j), pm), size=t.nbytes,
                                  note=f"output {j}", mb=mb, role="output"))
    gen.finish()
    return gen


def per_split_stats(plan, cmds):
    """Input copies and bytes per split, over all micro-batches, from the commands' fields."""
    acc = {}
    for c in cmds:
        if c.kind in (WRITE, READ, COPY) and c.role == "slot":
            a = acc.setdefault(c.split_index, [0, 0])
            a[0] += 1
            a[1] += c.size
    return [{"split": si, "device": str(plan.devices[d]), "nodes": len(ts),
             "input_copies": acc.get(si, [0, 0])[0], "input_bytes": acc.get(si, [0, 0])[1]}
            for si, (d, ts) in enumerate(plan.splits)]
