"""How much of a run the device queues of a pyggml trace were busy at the same time.

    python3 bench/trace_overlap.py trace.json [--run N]

Reads the Perfetto/Chrome JSON a Scheduler writes (trace= or PYGGML_TRACE), takes the launches on
each "<device> queue" track, and prints per queue its busy time and, for every pair of queues, the
time both were busy, over the span of the chosen run (default: the last one).
"""
from __future__ import annotations

import argparse
import json
import sys


def _union(iv):
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _intersect(x, y):
    i = j = 0
    total = 0.0
    while i < len(x) and j < len(y):
        lo, hi = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        total += max(0.0, hi - lo)
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return total


def overlap(doc, run=None):
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M"
             and e.get("name") == "thread_name"}
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    runs = sorted({e["args"].get("run", 0) for e in spans})
    run = runs[-1] if run is None else run
    spans = [e for e in spans if e["args"].get("run", 0) == run]
    t0 = min(e["ts"] for e in spans)
    t1 = max(e["ts"] + e["dur"] for e in spans)
    busy = {}
    for e in spans:
        track = names.get(e["tid"], str(e["tid"]))
        if track.endswith("queue") and e["name"].startswith("launch"):
            busy.setdefault(track, []).append((e["ts"], e["ts"] + e["dur"]))
    busy = {k: _union(v) for k, v in busy.items()}
    res = {"run": run, "span_us": t1 - t0,
           "busy_us": {k: sum(b - a for a, b in v) for k, v in busy.items()}, "both_busy_us": {}}
    keys = sorted(busy)
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            res["both_busy_us"][f"{a} & {b}"] = _intersect(busy[a], busy[b])
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--run", type=int, default=None)
    a = ap.parse_args(argv)
    r = overlap(json.load(open(a.trace)), a.run)
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
