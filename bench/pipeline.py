"""Pipeline-parallel prefill on the GPU-like test plugin: the same layer stack on 1 device vs split
over 2 devices with micro-batches, with injected latency (the plugin sleeps `node_latency_us` per
node it computes and `copy_latency_us` per queued copy). Reports the median wall time of 5 runs
after a warm-up, the speed-up, and writes a Chrome/Perfetto trace of one 2-device run showing the
overlap. Not a test: timing is measured here, never asserted.

    python3 bench/pipeline.py [--micro-batches 16] [--layers 8] [--node-us 1000] [--copy-us 200]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "plugins", "testdev"))
import pyggml as pg  # noqa: E402
import testdev_build as tb  # noqa: E402


def build(n_layers, width, rng):
    g = pg.Graph("pipeline")
    x = g.input("x", (16, width))
    h = x
    for layer in range(n_layers):
        with g.on(f"tdp:{0 if layer < n_layers // 2 else 1}"):
            w = g.weight(f"w{layer}", (rng.standard_normal((width, width)) * 0.1).astype(np.float32))
            h = pg.rms_norm(pg.silu(pg.mul_mat(w, h)), eps=1e-5)
    return h


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--micro-batches", type=int, default=16)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--node-us", type=int, default=1000)
    ap.add_argument("--copy-us", type=int, default=200)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args(argv)
    lib = tb.build_testdev(names=("tdp",))
    p = pg.load_plugin(os.path.join(lib, "libpyggml-tdp.so"))
    for d in p.devices:
        d.set_option("node_latency_us", str(a.node_us))
        d.set_option("copy_latency_us", str(a.copy_us))
    rng = np.random.default_rng(0)
    y = build(a.layers, 64, rng)
    mbs = [{"x": rng.standard_normal((16, 64)).astype(np.float32)} for _ in range(a.micro_batches)]
    rows = {}
    results = {}
    for label, devs, n_copies in (("1 device", ["tdp:0"], 1), ("2 devices, pipelined", ["tdp:0", "tdp:1"], 2)):
        s = pg.Scheduler(devs, sync="events", n_copies=n_copies)
        out = s.compute_batches(y, mbs)          # warm-up: plan, upload, program
        times = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            out = s.compute_batches(y, mbs)
            times.append(time.perf_counter() - t0)
        results[label] = out
        rows[label] = {"median_s": statistics.median(times), "times_s": times, "pattern": s.last_run.sync_pattern,
                       "host_syncs": s.last_run.host_syncs, "splits_per_micro_batch": s.last_run.splits}
    for r1, r2 in zip(results["1 device"], results["2 devices, pipelined"]):
        assert np.array_equal(r1, r2), "pipelined results differ from the 1-device run"
    one, two = rows["1 device"]["median_s"], rows["2 devices, pipelined"]["median_s"]
    print(f"| run | median | host syncs |\n|---|---:|---:|")
    for k, r in rows.items():
        print(f"| {k} | {r['median_s'] * 1e3:.1f} ms | {r['host_syncs']} |")
    print(f"\nspeed-up 2 devices vs 1: {one / two:.2f}x "
          f"({a.micro_batches} micro-batches, {a.layers} layers, {a.node_us} us/node, {a.copy_us} us/copy)")
    # one traced run for the timeline
    trace = os.path.join(a.out, "pipeline-trace.json")
    os.makedirs(a.out, exist_ok=True)
    os.environ["PYGGML_TRACE"] = trace
    s = pg.Scheduler(["tdp:0", "tdp:1"], sync="events", n_copies=2)
    s.compute_batches(y, mbs)
    os.environ.pop("PYGGML_TRACE")
    ev = json.load(open(trace))["traceEvents"]
    q0 = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == "tdp:0 queue" and e["name"].startswith("launch")]
    q1 = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["tid"] == "tdp:1 queue" and e["name"].startswith("launch")]
    overlap = sum(max(0.0, min(b0, b1) - max(a0, a1)) for a0, b0 in q0 for a1, b1 in q1)
    print(f"trace: {trace} ({len(ev)} events); the two queues' launches overlap for {overlap / 1e3:.1f} ms")
    from pyggml.bench_ops import machine_info
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "pipeline", "command": " ".join(sys.argv),
           **machine_info(), "args": vars(a), "runs": rows, "speedup": one / two, "trace_overlap_ms": overlap / 1e3}
    path = os.path.join(a.out, f"pipeline-{time.strftime('%Y%m%dT%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"results: {path}")


if __name__ == "__main__":
    main()
