"""Run timelines as Chrome / Perfetto trace JSON.

A Trace collects the timed runs of any number of schedulers and writes one file: at an explicit
flush(), when the last scheduler using it closes, and at interpreter exit — never once per compute
(rewriting the file each run made a traced run measure the tracer). Tracks: one process (the
integer pid), one thread track for the host and one per device queue, named by metadata events.

What is timed: every command's host call (start, end); for queues with events, the moment the host
saw an event recorded right after a queued command complete (so a queued command spans from the
end of its host call, or the end of the previous command on that queue, to that moment); for
devices without async compute (the CPU), a launch runs inside its host call, so that span is the
device's too.
"""
from __future__ import annotations

import atexit
import json
import os
import threading
from typing import Dict, List, Optional

from . import _program as P

_lock = threading.Lock()
_traces: Dict[str, "Trace"] = {}


class Trace:
    """One trace file; shared by every scheduler given the same path."""

    def __init__(self, path: str):
        self.path = path
        self.pid = os.getpid()
        self.events: List[dict] = []
        self.tids: Dict[str, int] = {}       # track name -> integer tid
        self.t0: Optional[float] = None
        self.runs = 0
        self.users = 0
        self.dirty = False
        self._mu = threading.Lock()

    def _tid(self, track: str) -> int:
        tid = self.tids.get(track)
        if tid is None:
            tid = self.tids[track] = len(self.tids) + 1
        return tid

    def add_run(self, prog, devices, host_memory) -> None:
        """Record the timings of prog's last run. devices: names by index; host_memory[i]: device i
        computes inside its host calls (no queue of its own)."""
        host, queues = prog.timings()
        if not host:
            return
        with self._mu:
            if self.t0 is None:
                self.t0 = host[0][1]
            t0 = self.t0
            run = self.runs
            self.runs += 1
            info = prog.info
            htid = self._tid("host")
            for i, start, end in host:
                kind, dev, plugin, note, split, mb = info[i]
                name = prog.text[i]
                args = {"run": run, "mb": mb}
                if split is not None:
                    args["split"] = split
                self.events.append({"name": name, "cat": P.KIND_NAME[kind], "ph": "X", "pid": self.pid,
                                    "tid": htid, "ts": (start - t0) * 1e6,
                                    "dur": max(0.05, (end - start) * 1e6), "args": args})
                if kind == P.LAUNCH and host_memory.get(dev):
                    self.events.append({"name": name, "cat": "compute", "ph": "X", "pid": self.pid,
                                        "tid": self._tid(f"{dev} queue"), "ts": (start - t0) * 1e6,
                                        "dur": max(0.05, (end - start) * 1e6), "args": args})
            ends = {i: e for i, _, e in host}
            prev: Dict[str, float] = {}
            for i, done in sorted(queues, key=lambda x: x[1]):
                kind, dev, plugin, note, split, mb = info[i]
                start = max(ends[i], prev.get(dev, 0.0))
                prev[dev] = done
                args = {"run": run, "mb": mb}
                if split is not None:
                    args["split"] = split
                self.events.append({"name": prog.text[i], "cat": P.KIND_NAME[kind], "ph": "X", "pid": self.pid,
                                    "tid": self._tid(f"{dev} queue"), "ts": (start - t0) * 1e6,
                                    "dur": max(0.05, (done - start) * 1e6), "args": args})
            self.dirty = True

    def document(self) -> dict:
        meta = [{"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0, "args": {"name": "pyggml"}}]
        for track, tid in self.tids.items():
            meta.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid, "args": {"name": track}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": self.pid, "tid": tid,
                         "args": {"sort_index": tid}})
        return {"traceEvents": meta + self.events, "displayTimeUnit": "ms"}

    def flush(self) -> None:
        """Write the file now (atomically: a temporary file renamed over it)."""
        with self._mu:
            if not self.dirty:
                return
            doc = self.document()
            self.dirty = False
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self.path)


def open_trace(path: str) -> Trace:
    """The process's Trace for `path` (one per file); its user count goes up by one."""
    key = os.path.abspath(path)
    with _lock:
        t = _traces.get(key)
        if t is None:
            t = _traces[key] = Trace(path)
        t.users += 1
        return t


def release(t: Trace) -> None:
    """A scheduler is done with t: write it once its last user is gone."""
    with _lock:
        t.users -= 1
        last = t.users <= 0
    if last:
        t.flush()


@atexit.register
def _flush_all() -> None:
    for t in list(_traces.values()):
        try:
            t.flush()
        except OSError:
            pass
