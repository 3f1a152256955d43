"""The decode mat-vec alone on vulkan:0: each kernel variant's GPU time and bandwidth per weight
shape of the 1b and 7b models (scripts/gpu_vulkan.sh runs it on the H200 with GPU_VK_MATVEC=1;
it runs anywhere with a Vulkan device).

    python3 scripts/vulkan_matvec_sweep.py --out DIR [--types q4_0] [--shapes 4096x4096 ...] [--reps 5]
                                           [--kernels mv3 mv3w mv4 ...]

Per shape M x K the graph holds C different weights (C * the weight bytes >= 160 MB, so the
H200's 50 MB L2 holds none of them from one compute to the next, as in a model's decode), each
times the same activation column (N = 1). Every result is checked against the CPU plugin's (NMSE);
the GPU time per dispatch is the median over --reps computes of the plan's timestamp queries
(device option profile=1), taken after half a second of computes (the H200 drops to its idle
clock within a second: the sweep at 9755fdb timed a down-clocked GPU), and GB/s is the weight
bytes over it. Even so, mat-vecs alone leave the H200 at 540-1215 MHz (20-40% utilization; its run at
e0d3980, gpu-vulkan-h200-20261204T2133/clocks.csv) where a decode runs at 1980: compare kernels within
one sweep, not its GB/s with the decode benches. Kernels are device option sets
(KERNELS below). Writes vulkan-matvec-sweep-<time>.json into --out after every shape and prints a
GB/s table (kernels x shapes)."""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pyggml as pg                                   # noqa: E402
from pyggml._plugin import drain_log                  # noqa: E402
from pyggml.conformance.cases import nmse             # noqa: E402
from vulkan_gemm_sweep import LogLines, dispatch_times, warm_up   # noqa: E402

VK = "vulkan:0"
SHAPES = ["2048x2048", "512x2048", "8192x2048", "2048x8192", "4096x4096", "11008x4096", "4096x11008"]
KERNELS = {"mv2": {"matvec": "2"}, "mv3": {"matvec": "3"}, "mv3i": {"matvec": "5"}, "mv3w": {"matvec": "6"},
           "mv4": {"matvec": "7"}, "mv4r8": {"matvec": "7", "matvec_rows": "1"},
           "mv4r32": {"matvec": "7", "matvec_rows": "4"}, "mv3wr8": {"matvec": "6", "matvec_rows": "1"},
           "mv3wr32": {"matvec": "6", "matvec_rows": "4"},
           # mul_mat_vec3w in parts (option debug_mv_parts, results wrong by design): without its activation
           # staging (zeros staged) / without its weight loads: what each costs of the whole
           "mv3w_nostage": {"matvec": "6", "debug_mv_parts": "1"}, "mv3w_noweights": {"matvec": "6", "debug_mv_parts": "2"},
           # mul_mat_vec3w with two units' weights in flight while the row is staged (matvec_ahead)
           "mv3w_ahead": {"matvec": "6", "matvec_ahead": "1"},
           # one-column q4_0 mat-vecs on the weights' repacked copy (matvec_rp: mul_mat_vec_rp)
           "mvrp": {"matvec": "6", "matvec_rp": "1"}}
DEFAULTS = {"matvec": "3", "matvec_rows": "2", "debug_mv_parts": "0", "matvec_ahead": "0", "matvec_rp": "0"}


def set_options(opts):
    dev = pg.get_device(VK)
    for k, v in {**DEFAULTS, **opts}.items():
        dev.set_option(k, v)


def one_shape(wtype, m, k, labels, reps, rng, log, warm_s=0.5):
    g = pg.Graph()
    blocks = pg.quantize(rng.standard_normal((m, k)).astype(np.float32), wtype)
    wbytes = np.asarray(blocks).nbytes
    copies = int(min(16, max(2, -(-160e6 // wbytes))))
    x = g.input("x", (1, k))
    ws = [g.weight(f"w{i}", blocks, type=wtype, shape=(m, k)) for i in range(copies)]   # the same bytes, C buffers
    ys = [pg.mul_mat(w, x) for w in ws]
    xv = rng.standard_normal((1, k)).astype(np.float32)
    ref = [np.asarray(r, np.float64) for r in pg.Scheduler(["cpu"]).compute(ys, {"x": xv})]
    res = {"copies": copies, "weight_bytes": int(wbytes)}
    dev = pg.get_device(VK)
    for label in labels:
        r = {}
        try:
            set_options(KERNELS[label])
            log.lines.clear()
            sched = pg.Scheduler([VK])
            out = sched.compute(ys, {"x": xv})
            drain_log()
            r["kernel"] = next((s.rsplit(": ", 1)[1] for s in log.lines if "mul_mat '" in s), "?")
            r["nmse"] = float(max(nmse(np.asarray(o), rf) for o, rf in zip(out, ref)))
            warm_up(sched, ys, {"x": xv}, warm_s)   # an idle H200 drops to 345 MHz within a second
            times = dispatch_times(dev, sched, ys, {"x": xv}, reps, log)
            sched.close()
            if times:
                r["us"] = round(float(np.median(times)), 2)
                r["gbs"] = round(wbytes / (r["us"] * 1e-6) / 1e9, 1)
        except Exception as e:   # one failing kernel must not lose the others
            r["error"] = f"{type(e).__name__}: {e}"[:300]
        res[label] = r
        bad = "" if r.get("nmse", 1) <= 5e-4 else "  <-- WRONG" if "nmse" in r else ""
        print(f"  {wtype} {m}x{k} {label:8s} {r.get('kernel', '')[:20]:20s} {r.get('us', float('nan')):8.2f} us "
              f"{r.get('gbs', float('nan')):8.1f} GB/s nmse {r.get('nmse', float('nan')):.2e}{bad} {r.get('error', '')}",
              flush=True)
    set_options({})
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", nargs="+", default=["q4_0"])
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="M x K of the weights")
    ap.add_argument("--kernels", nargs="+", default=["mv3", "mv3i", "mv3w", "mv4", "mv4r8", "mv4r32"], choices=sorted(KERNELS))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: shapes not started by then are skipped")
    a = ap.parse_args(argv)
    t0 = time.time()
    log = LogLines()
    pg.get_device(VK).set_option("profile", "1")
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("vulkan-matvec-sweep-%Y%m%dT%H%M%S.json"))
    doc = {"kind": "vulkan-matvec-sweep", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": os.environ.get("GPU_VK_GPU", ""),
           "commit": os.environ.get("GPU_VK_COMMIT", ""), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "device": str(pg.get_device(VK)), "kernels": {k: KERNELS[k] for k in a.kernels},
           "note": "us: median GPU time per mat-vec dispatch (timestamp queries, C weights per graph so none stays in L2); "
                   "gbs = weight bytes / us", "results": {}}
    rng = np.random.default_rng(0)
    for wtype in a.types:
        for s in a.shapes:
            if time.time() - t0 > a.budget:
                print(f"budget spent: {wtype} {s} skipped", flush=True)
                continue
            m, k = (int(v) for v in s.split("x"))
            doc["results"][f"{wtype} {s}"] = one_shape(wtype, m, k, a.kernels, a.reps, rng, log)
            json.dump(doc, open(path, "w"), indent=1)
    for wtype in a.types:
        shapes = [s for s in a.shapes if f"{wtype} {s}" in doc["results"]]
        print(f"\n{wtype} GB/s" + "".join(f"{s:>12s}" for s in shapes))
        for lab in a.kernels:
            cells = [doc["results"][f"{wtype} {s}"].get(lab, {}) for s in shapes]
            print(f"{lab:10s}" + "".join(f"{c['gbs']:>11.0f}{' ' if c.get('nmse', 1) <= 5e-4 else '!'}" if "gbs" in c
                                         else f"{'-':>12s}" for c in cells))
    doc["seconds"] = round(time.time() - t0, 1)
    json.dump(doc, open(path, "w"), indent=1)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
