"""Turns a planned graph (splits, copies, memory) into the command program a run executes.

The generator walks the run in host order and keeps, per byte range, the accesses each queue has
pending (a small vector-clock model of the queues). Before every command it adds the waits that
rule 3 of the contract (pyggml/sync.py) requires, made the way the sync policy says; each split's
input slot is driven through the state machine, so an illegal order raises SyncStateError here,
before anything runs. The program is then executed by _sched.pyx without the GIL.
"""
from .sync import Slot

HOST = -1

# command kinds (mirrored in _sched.pyx)
WRITE, READ, COPY, LAUNCH, RECORD, WAIT, SYNC_EVENT, SYNC_STREAM = range(8)
KIND_NAME = ["write", "read", "copy", "launch", "record", "wait", "sync_event", "sync_stream"]


class Cmd:
    """One step of a program. Regions are (buffer key, lo, hi); host operands are
    ("fixed", key, off) for memory the scheduler owns or ("in", mb, j) / ("out", mb, j) for the
    arrays bound at each compute."""

    __slots__ = ("kind", "dev", "is_async", "dst", "src", "host", "size", "split", "event", "note", "mb")

    def __init__(self, kind, dev, is_async=False, dst=None, src=None, host=None, size=0, split=None,
                 event=None, note="", mb=0):
        self.kind, self.dev, self.is_async = kind, dev, is_async
        self.dst, self.src, self.host, self.size = dst, src, host, size
        self.split, self.event, self.note, self.mb = split, event, note, mb

    @property
    def letter(self):
        if self.kind in (WRITE, READ, COPY):
            return "a" if self.is_async else "c"
        return {LAUNCH: "g", WAIT: "w", SYNC_EVENT: "s", SYNC_STREAM: "s"}.get(self.kind, "")

    def __repr__(self):
        bits = [KIND_NAME[self.kind], f"dev{self.dev}"]
        if self.kind in (WRITE, READ, COPY):
            bits.append("async" if self.is_async else "blocking")
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


CAP_ASYNC_COMPUTE, CAP_EVENTS, CAP_W_PINNED, CAP_W_PAGEABLE, CAP_ASYNC_READ, CAP_PEER = (1 << i for i in range(6))
QUIRK_NO_ASYNC_HOST, QUIRK_MD_SYNC = 1, 2


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

    def _host_done(self, s, upto):
        """The host has seen stream s complete everything up to seq `upto`."""
        for o in self.clock:
            self.clock[o][s] = max(self.clock[o][s], upto)
        # completion is transitive: what s had waited for is complete too
        for t, v in self.clock[s].items():
            for o in self.clock:
                self.clock[o][t] = max(self.clock[o][t], min(v, self.seq[t]))
        self._notify(HOST, s, upto)

    def _order(self, obs, s, upto, why):
        """Make observer `obs` (a stream or HOST) ordered after stream s's commands up to `upto`."""
        if self.clock[obs][s] >= upto:
            return
        idx = self.n_orderings
        self.n_orderings += 1
        if self.drop_sync is not None and idx == self.drop_sync:
            self.dropped = f"ordering #{idx}: {why}"
            # pretend it happened, so the rest of the program is generated as if it had
            if self._can_device_wait(obs, s):
                self.clock[obs][s] = upto
                self._notify(obs, s, upto, device=True)
            else:
                self._host_done(s, upto)
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
            self._emit(Cmd(SYNC_EVENT, s, event=rec, note=why))
            self._host_done(s, self.events[rec][1])
        else:
            self._emit(Cmd(SYNC_STREAM, s, note=why))
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

    def host_write(self, dev, dst, host, size, src_region=None, note="", mb=0):
        """Host memory -> a device region (user inputs, CPU memory to a device)."""
        d = self.devs[dev]
        async_ok = (not d.host_memory and d.async_compute and (d.caps & CAP_W_PAGEABLE)
                    and not (d.quirks & QUIRK_NO_ASYNC_HOST) and self.policy != "strict")
        if async_ok:
            self._access(dev, dst, True, f"{note}: slot free")
            if src_region is not None:
                self._access(dev, src_region, False, f"{note}: source written")
            self._emit(Cmd(WRITE, dev, True, dst=dst, host=host, size=size, note=note, mb=mb))
            self._queued(dev, [(dst, True)] + ([(src_region, False)] if src_region else []))
            self._strict_after(dev, note)
            return True
        self._access(HOST, dst, True, f"{note}: destination idle")
        if src_region is not None:
            self._access(HOST, src_region, False, f"{note}: source written")
        self._emit(Cmd(WRITE, dev, False, dst=dst, host=host, size=size, note=note, mb=mb))
        return False

    def host_read(self, dev, src, host, size, dst_region=None, note="", mb=0):
        """A device region -> host memory (outputs, device data into CPU memory)."""
        d = self.devs[dev]
        async_ok = (not d.host_memory and d.async_compute and (d.caps & CAP_ASYNC_READ)
                    and not (d.quirks & QUIRK_NO_ASYNC_HOST) and self.policy != "strict")
        if async_ok:
            self._access(dev, src, False, f"{note}: source written")
            if dst_region is not None:
                self._access(dev, dst_region, True, f"{note}: destination idle")
            self._emit(Cmd(READ, dev, True, src=src, host=host, size=size, note=note, mb=mb))
            self._queued(dev, [(src, False)] + ([(dst_region, True)] if dst_region else []))
            self._strict_after(dev, note)
            return True
        self._access(HOST, src, False, f"{note}: source written")
        if dst_region is not None:
            self._access(HOST, dst_region, True, f"{note}: destination idle")
        self._emit(Cmd(READ, dev, False, src=src, host=host, size=size, note=note, mb=mb))
        return False

    def peer_copy(self, src_dev, dst, src, size, note="", mb=0):
        """Same plugin, another device: queued on the source's stream (rule 5)."""
        self._access(src_dev, src, False, f"{note}: source written")
        self._access(src_dev, dst, True, f"{note}: slot free")
        self._emit(Cmd(COPY, src_dev, True, dst=dst, src=src, size=size, note=note, mb=mb))
        self._queued(src_dev, [(src, False), (dst, True)])
        self._strict_after(src_dev, note)

    def launch(self, dev, split, reads, writes, note="", mb=0):
        obs = HOST if self._synchronous(dev) else dev
        for r in reads:
            self._access(obs, r, False, f"{note}: input ready")
        for w in writes:
            self._access(obs, w, True, f"{note}: memory free")
        self._emit(Cmd(LAUNCH, dev, split=split, note=note, mb=mb))
        if obs != HOST:
            self._queued(dev, [(r, False) for r in reads] + [(w, True) for w in writes])
            if self.multi and (self.devs[dev].quirks & QUIRK_MD_SYNC):
                self._order(HOST, dev, self.seq[dev], f"{note}: quirk multi-device sync")
            self._strict_after(dev, note)

    def finish(self):
        """Rule 8: the host waits for every queue with pending work."""
        for d in self.devs:
            if self.clock[HOST][d.index] < self.seq[d.index]:
                self._order(HOST, d.index, self.seq[d.index], "end of run")

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
