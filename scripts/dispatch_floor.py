"""What one dependent node costs on a device: a chain of N nodes, each reading the one before, timed
at two lengths; the difference over the extra nodes is the cost of one node with the launch, the
barrier before it and its own work, with the submit, upload and read-back cancelled out.

    python3 scripts/dispatch_floor.py --out DIR [--devices vulkan:0 cuda:0] [--reps 15]
                                      [--vk-sets default params_dev=off ...]

Chains (--kinds; the first three by default): "scale" (y = 1.0001 * y on 2048 floats: a node with next
to no work), "rms_norm" (one row of 2048: a reduction) and "matvec" (y = W_i y, q4_0 2048 x 2048
weights, a distinct W_i per node: 64 or more of them, 151 MB or more, so the H200's 50 MB L2 keeps
few from one compute to the next, as in a decode). The decode's layer shapes, "name:K:Mkv" (K the
row width, Mkv the k and v rows; weights from a pool of distinct ones over 150 MB, used in turn):
"mv:K" y = W_i y (K x K); "qkv3:K:Mkv" the same with two more mat-vecs of Mkv rows reading y in its
stage, each stored into a state's row by set_rows (a layer's q, k and v: three dispatches in one
stage); "qkvcat:K:Mkv" one mat-vec of K + 2 Mkv rows whose first K are the next y (the three as one
dispatch); "addnorm:K" y = W_i h, x = x + y, h = rms_norm(x) * w (a mat-vec and the fused add+norm
after it: two stages). Each compute's
wall time is the median over --reps after warm-ups; the result is checked against the CPU plugin's.
Each --vk-sets entry (comma-separated Vulkan device options, or "default") runs the Vulkan devices
again under those options, from the plugin's defaults (vulkan_vs_cuda.DEFAULTS): debug_drop_barriers=1
shows what the barriers cost (its results race), profile=1 adds the GPU time per node from the
plans' timestamp queries (gpu_us_per_node). Writes dispatch-floor-<time>.json into --out."""
import argparse
import json
import logging
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pyggml as pg                                   # noqa: E402
from pyggml.conformance.cases import nmse             # noqa: E402
from vulkan_gemm_sweep import LogLines, profile_lines   # noqa: E402
from vulkan_vs_cuda import DEFAULTS as VK_DEFAULTS    # noqa: E402

K = 2048


def gpu_us_per_compute(dev, sched, out, feeds, reps, log):
    """The plans' timestamp total per compute (device option profile=1), from the profile report."""
    for line in profile_lines(dev, lambda: [sched.compute([out], feeds) for _ in range(reps)], log):
        m = re.search(r"profile gpu: total [0-9.]+ us, ([0-9.]+) us per plan compute", line)
        if m:
            return float(m.group(1))
    return float("nan")


def wall_us(sched, out, feeds, reps, warm_s=0.5):
    """Median wall time of a compute, after warm_s seconds of computes: a GPU idle between short bursts
    runs at low clocks (the H200 drops to 345 MHz from 1980 within a second; the floor figures before
    this warm-up, 8.6-11 us per dependent Vulkan node, were taken on such a GPU)."""
    t_end = time.time() + warm_s
    while time.time() < t_end:
        sched.compute([out], feeds)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        sched.compute([out], feeds)
        ts.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(ts))


def layer_chain(kind, lengths, rng):
    """The graphs of a "name:K[:Mkv]" chain (the docstring's) for each length, and their feeds."""
    name, *dims = kind.split(":")
    Kw = int(dims[0])
    Mkv = int(dims[1]) if len(dims) > 1 else 0
    rows = Kw + 2 * Mkv if name == "qkvcat" else Kw
    pool = max(4, -(-150_000_000 // (rows * Kw * 18 // 32)))   # distinct weights over 150 MB
    pool = min(pool, max(lengths))
    mk = lambda m: pg.quantize((rng.standard_normal((m, Kw)) / np.sqrt(Kw)).astype(np.float32), "q4_0")
    main_w = [mk(rows) for _ in range(pool)]
    side_w = [(mk(Mkv), mk(Mkv)) for _ in range(pool)] if name == "qkv3" else []
    norm_w = (1.0 + 0.1 * rng.standard_normal((1, Kw))).astype(np.float32)
    graphs = {}
    for n in lengths:
        g = pg.Graph()
        ws = [g.weight(f"w{i}", main_w[i], type="q4_0", shape=(rows, Kw)) for i in range(pool)]
        sw = [(g.weight(f"k{i}", b[0], type="q4_0", shape=(Mkv, Kw)), g.weight(f"v{i}", b[1], type="q4_0", shape=(Mkv, Kw)))
              for i, b in enumerate(side_w)]
        y = g.input("x", (1, Kw))
        idx = g.input("idx", (1,), "i32") if name == "qkv3" else None
        nw = g.weight("nw", norm_w) if name == "addnorm" else None
        x = y
        for i in range(n):
            w = ws[i % pool]
            if name == "qkv3":
                for j, side in enumerate(sw[i % pool]):
                    c = g.state(f"c{j}.{i}", (4, Mkv))
                    pg.set_rows(c, pg.mul_mat(side, y), idx)
                y = pg.mul_mat(w, y)
            elif name == "qkvcat":
                y = pg.view(pg.mul_mat(w, y), (1, Kw))
            elif name == "addnorm":
                x = pg.add(x, pg.mul_mat(w, y))
                y = pg.mul(pg.rms_norm(x), nw)
            elif name == "mv":
                y = pg.mul_mat(w, y)
            else:
                raise SystemExit(f"dispatch_floor: unknown chain {kind!r}")
        graphs[n] = y
    feeds = {"x": rng.standard_normal((1, Kw)).astype(np.float32)}
    if name == "qkv3":
        feeds["idx"] = np.array([1], np.int32)
    return graphs, feeds


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", nargs="+", default=["vulkan:0", "cuda:0"])
    ap.add_argument("--lengths", nargs=2, type=int, default=[64, 128])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--kinds", nargs="+", default=["scale", "rms_norm", "matvec"], help="chains (the docstring's)")
    ap.add_argument("--log-kernels", action="store_true", help="print the plugins' debug lines naming each chain's kernels")
    ap.add_argument("--vk-sets", nargs="+", default=["default"], help="k=v[,k=v] Vulkan option sets, or default")
    a = ap.parse_args(argv)
    log = LogLines()
    rng = np.random.default_rng(0)
    n0, n1 = a.lengths
    blocks = [pg.quantize((rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32), "q4_0") for _ in range(n1)]
    xv = rng.standard_normal((1, K)).astype(np.float32)
    doc = {"kind": "dispatch-floor", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": os.environ.get("GPU_VK_GPU", ""),
           "commit": os.environ.get("GPU_VK_COMMIT", ""), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "lengths": [n0, n1], "note": "us_per_node = (wall(n1) - wall(n0)) / (n1 - n0), wall = median compute", "results": {}}
    for kind in a.kinds:
        graphs, feeds = {}, {"x": xv}
        if ":" in kind:
            graphs, feeds = layer_chain(kind, (n0, n1), rng)
        else:
            for n in (n0, n1):
                g = pg.Graph()
                ws = [g.weight(f"w{i}", blocks[i], type="q4_0", shape=(K, K)) for i in range(n)] if kind == "matvec" else []
                y = g.input("x", (1, K))
                for i in range(n):
                    y = (pg.scale(y, 1.0001) if kind == "scale" else pg.rms_norm(y) if kind == "rms_norm"
                         else pg.mul_mat(ws[i], y))
                graphs[n] = y
        ref = {n: np.asarray(pg.Scheduler(["cpu"]).compute([y], feeds)[0], np.float64) for n, y in graphs.items()}
        runs = [(dev, vs) for dev in a.devices for vs in (a.vk_sets if dev.startswith("vulkan") else ["default"])]
        for dev, vs in runs:
            r = {}
            label = dev if vs == "default" else f"{dev}[{vs}]"
            try:
                opts = {} if vs == "default" else dict(kv.split("=", 1) for kv in vs.split(","))
                base = {**VK_DEFAULTS, "profile": "0", "debug_drop_barriers": "0"} if dev.startswith("vulkan") else {}
                for k, v in {**base, **opts}.items():   # each set from the defaults, not from the set before
                    pg.get_device(dev).set_option(k, v)
                walls, gpus = {}, {}
                for n, y in graphs.items():
                    sched = pg.Scheduler([dev])
                    lg = logging.getLogger("pyggml")
                    seen = []
                    if a.log_kernels and n == n0:   # the plan's kernel choices, as its debug lines name them
                        h, old_level = logging.Handler(logging.DEBUG), lg.level
                        h.emit = lambda rec: seen.append(rec.getMessage())
                        lg.addHandler(h)
                        lg.setLevel(logging.DEBUG)
                    got = np.asarray(sched.compute([y], feeds)[0], np.float64)
                    if a.log_kernels and n == n0:
                        lg.removeHandler(h)
                        lg.setLevel(old_level)
                        for line in sorted(set(m for m in seen if "'" in m or "plan for" in m)):
                            print(f"  {kind} {label}: {line}", flush=True)
                    r[f"nmse_{n}"] = float(nmse(got, ref[n]))
                    walls[n] = wall_us(sched, y, feeds, a.reps)
                    if opts.get("profile") == "1":
                        gpus[n] = gpu_us_per_compute(pg.get_device(dev), sched, y, feeds, a.reps, log)
                    sched.close()
                r.update({f"wall_us_{n}": round(w, 1) for n, w in walls.items()})
                r["us_per_node"] = round((walls[n1] - walls[n0]) / (n1 - n0), 2)
                if gpus:
                    r["gpu_us_per_node"] = round((gpus[n1] - gpus[n0]) / (n1 - n0), 2)
                for k, v in base.items():   # leave the device at its defaults
                    pg.get_device(dev).set_option(k, v)
            except Exception as e:   # a missing device must not lose the other's figures
                r["error"] = f"{type(e).__name__}: {e}"[:300]
            doc["results"][f"{kind} {label}"] = r
            print(f"{kind:7s} {label:28s} {r.get('us_per_node', float('nan')):8.2f} us/node  {r}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("dispatch-floor-%Y%m%dT%H%M%S.json"))
    json.dump(doc, open(path, "w"), indent=1)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
