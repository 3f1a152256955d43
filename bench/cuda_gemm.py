"""CUDA prefill GEMM throughput of pyggml's cuda plugin (mul_mat with N tokens), PyTorch f16 in the same run.

For each weight type and LLaMA-like shape (M, K) it builds one graph holding R independent
mul_mat(W, X) nodes (W: [M, K] weight, X: [N, K] f32, both resident on the device, so no upload
is timed); each node's output is read back only through a 16-float view, so a call is R GEMMs plus
one graph launch. Time per GEMM = (median wall time of Scheduler.compute - the call overhead of a
trivial graph) / R; the raw figure is kept too. Each path runs in its own process (each logs
its own choice of GEMM library once), set by device options: "blas" (cuBLAS, forced for every
N >= 9 with blas_min_n) and "builtin" (blas=0: the WMMA kernel for N >= 32, FFMA below).
The log line naming the GEMM path the plugin chose is recorded. A few output rows of every product
are checked against float64 numpy on the dequantized weights (NMSE, mul_mat's threshold is 5e-4).
PyTorch: torch.matmul in f16 on the same shapes, CUDA events.

    python3 bench/cuda_gemm.py [--types f16,q4_0,...] [--ntok 512] [--paths blas,builtin]
                                       [--shapes 2048x2048,...] [--out results.json]
Sweep N to place the cuBLAS threshold:  --ntok 16,32,64,128,512 --types q4_0,q4_K
"""
import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cuda_matvec import BLOCKS, timed  # noqa: E402  (block geometry; timing with the graph-capture call)

SHAPES = "2048x2048,8192x2048,2048x8192,32000x2048,4096x4096,11008x4096,4096x11008"   # M x K
TYPES = "f32,f16,bf16,q8_0,q4_0,q4_K,q6_K"


def make_weight(rng, wtype, m, k):
    """(array for Graph.weight, kwargs, float64 dequantizer of a row subset)."""
    import pyggml as pg
    if wtype in BLOCKS:
        size, bs, offs = BLOCKS[wtype]
        nb = m * (k // bs)
        b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
        for off in offs:   # finite, realistic block scales
            b[:, off:off + 2] = (np.abs(rng.standard_normal(nb)) * 2e-3 + 1e-4).astype(np.float16) \
                .view(np.uint8).reshape(nb, 2)
        b = b.reshape(m, -1)
        return b, {"type": wtype, "shape": (m, k)}, \
            lambda rows: pg.dequantize(np.ascontiguousarray(b[rows]), wtype, (len(rows), k)).astype(np.float64)
    w = (rng.standard_normal((m, k)) * 0.02).astype(np.float32)
    if wtype == "f16":
        w = w.astype(np.float16)
        return w, {}, lambda rows: w[rows].astype(np.float64)
    if wtype == "bf16":
        u = w.view(np.uint32).astype(np.uint64)
        bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        return bits, {"type": "bf16", "shape": (m, k)}, \
            lambda rows: (bits[rows].astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return w, {}, lambda rows: w[rows].astype(np.float64)


def call_overhead(dev, reps):
    import pyggml as pg
    g = pg.Graph()
    x = g.weight("x", np.ones((1, 16), np.float32))
    y = pg.scale(x, 2.0)
    s = pg.Scheduler([dev])
    return statistics.median(timed(lambda: s.compute(y), reps))


def bench_one(dev, wtype, m, k, n, reps, rng, overhead, est_tflops=200.0):
    import pyggml as pg
    flop = 2.0 * m * n * k
    r = int(min(64, max(4, np.ceil(0.02 / (flop / (est_tflops * 1e12))))))
    arr, kw, deq = make_weight(rng, wtype, m, k)
    xv = rng.standard_normal((n, k)).astype(np.float32)
    g = pg.Graph()
    w = g.weight("w", arr, **kw)
    x = g.weight("x", xv)
    products = [pg.mul_mat(w, x) for _ in range(r)]
    views = [pg.view(p, (1, 16)) for p in products]
    check_rows = np.sort(rng.choice(m, size=min(m, 48), replace=False))
    s = pg.Scheduler([dev])
    full = s.compute(products[0])   # [n, m]: the check (one GEMM, read back once, not timed)
    ref = xv.astype(np.float64) @ deq(check_rows).T
    got = full[:, check_rows].astype(np.float64)
    nmse = float(np.sum((got - ref) ** 2) / max(np.sum(ref ** 2), 1e-300))
    ts = timed(lambda: s.compute(views), reps)
    med = statistics.median(ts)
    per = max(med - overhead, 1e-9) / r
    return {"impl": "pyggml", "type": wtype, "M": m, "K": k, "N": n, "gemms_per_call": r, "flop": flop,
            "median_call_s": med, "per_gemm_s": per, "TFLOPs": flop / per / 1e12,
            "TFLOPs_raw": flop * r / med / 1e12, "nmse": nmse, "nmse_ok": bool(np.isfinite(nmse) and nmse < 5e-4),
            "times_s": ts}


def bench_torch(m, k, n, reps):
    import torch
    dev = torch.device("cuda")
    w = torch.randn(m, k, device=dev, dtype=torch.float16) * 0.02
    x = torch.randn(n, k, device=dev, dtype=torch.float16)
    for _ in range(3):
        torch.matmul(x, w.t())
    torch.cuda.synchronize()
    iters = 20
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            torch.matmul(x, w.t())
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3 / iters)
    med = statistics.median(ts)
    flop = 2.0 * m * n * k
    del w, x
    torch.cuda.empty_cache()
    return {"impl": "torch", "type": "f16", "M": m, "K": k, "N": n, "flop": flop, "per_gemm_s": med,
            "TFLOPs": flop / med / 1e12, "torch": torch.__version__}


def worker(args):
    """One path in this process: results as JSON into args.worker_out."""
    import pyggml as pg
    msgs = []

    class Grab(logging.Handler):
        def emit(self, rec):
            text = rec.getMessage()
            if "mul_mat" in text or "cuBLAS" in text:
                msgs.append(text)
    lg = logging.getLogger("pyggml")
    lg.addHandler(Grab())
    lg.setLevel(logging.DEBUG)
    devs = [str(d) for d in pg.devices()]
    if args.device not in devs:
        json.dump({"error": f"{args.device} not available (devices: {devs}; failures: {pg.failures()})"},
                  open(args.worker_out, "w"))
        return 2
    dev = pg.get_device(args.device)
    if args.worker == "blas":
        dev.set_option("blas", 1)
        dev.set_option("blas_min_n", args.blas_min_n)
    else:
        dev.set_option("blas", 0)
    rng = np.random.default_rng(0)
    overhead = call_overhead(args.device, args.reps)
    rows = []
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.lower().split("x"))
        for n in (int(v) for v in args.ntok.split(",")):
            for t in args.types.split(","):
                try:
                    r = bench_one(args.device, t, m, k, n, args.reps, rng, overhead)
                except Exception as e:   # keep going: one failing type must not hide the others
                    r = {"impl": "pyggml", "type": t, "M": m, "K": k, "N": n, "error": f"{type(e).__name__}: {e}"}
                r["path"] = args.worker
                rows.append(r)
                if "error" in r:
                    print(f"[{args.worker:7s}] {t:5s} M={m:6d} K={k:6d} N={n:5d}: {r['error']}", flush=True)
                else:
                    print(f"[{args.worker:7s}] {t:5s} M={m:6d} K={k:6d} N={n:5d}: {r['TFLOPs']:7.1f} TFLOP/s "
                          f"({r['per_gemm_s'] * 1e6:8.1f} us/GEMM, raw {r['TFLOPs_raw']:6.1f}), "
                          f"nmse {r['nmse']:.1e}{'' if r['nmse_ok'] else '  <-- FAIL'}", flush=True)
    try:
        from pyggml import _plugin
        _plugin.drain_log()
    except Exception:
        pass
    used = "cuBLAS" if any("through cuBLAS" in m for m in msgs) else "built-in"
    for r in rows:
        r["gemm"] = used   # what the plugin said it uses for N >= its threshold
    json.dump({"path": args.worker, "gemm": used, "call_overhead_s": overhead, "log": msgs, "results": rows},
              open(args.worker_out, "w"))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--types", default=TYPES)
    ap.add_argument("--shapes", default=SHAPES, help="comma-separated MxK (weight rows x columns)")
    ap.add_argument("--ntok", default="512", help="N (tokens), comma-separated")
    ap.add_argument("--paths", default="blas,builtin", help="blas (cuBLAS) and/or builtin (device option blas=0)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--out", default=None, help="write the JSON here (a file path)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--blas-min-n", type=int, default=32, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "cuda-gemm", "device": args.device,
           "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "paths": {}, "results": []}
    try:
        doc["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=ROOT).stdout.strip() or None
    except OSError:
        doc["commit"] = None
    min_n = min(int(v) for v in args.ntok.split(","))
    for path in args.paths.split(","):
        if path not in ("blas", "builtin"):
            print(f"bench_gemm: unknown path {path!r} (blas, builtin)")
            return 2
        with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
            tmp = f.name
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, "--worker-out", tmp,
               "--device", args.device, "--types", args.types, "--shapes", args.shapes, "--ntok", args.ntok,
               "--reps", str(args.reps), "--blas-min-n", str(max(1, min(min_n, 32)))]
        rc = subprocess.run(cmd).returncode
        try:
            part = json.load(open(tmp))
        except (OSError, ValueError):
            part = {"error": f"worker for {path} exited with {rc} and wrote nothing"}
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        if "error" in part:
            print(f"bench_gemm: {path}: {part['error']}")
            doc["paths"][path] = {"error": part["error"]}
            continue
        doc["paths"][path] = {"gemm": part["gemm"], "call_overhead_s": part["call_overhead_s"], "log": part["log"]}
        if path == "blas" and part["gemm"] != "cuBLAS":
            print("bench_gemm: the 'blas' run did not get cuBLAS (see the plugin log above): its numbers are the "
                  "built-in kernel's")
        for line in part["log"]:
            print(f"[{path:7s}] plugin: {line}")
        doc["results"].extend(part["results"])

    torch_rows = {}
    if not args.no_torch:
        try:
            import torch
            ok = torch.cuda.is_available()
        except ImportError:
            ok = False
        if ok:
            for shape in args.shapes.split(","):
                m, k = (int(v) for v in shape.lower().split("x"))
                for n in (int(v) for v in args.ntok.split(",")):
                    t = bench_torch(m, k, n, args.reps)
                    torch_rows[(m, k, n)] = t
                    doc["results"].append(t)
                    print(f"[torch  ] f16   M={m:6d} K={k:6d} N={n:5d}: {t['TFLOPs']:7.1f} TFLOP/s "
                          f"({t['per_gemm_s'] * 1e6:8.1f} us/GEMM)", flush=True)
        else:
            print("bench_gemm: torch with CUDA not importable; no peer figures")
    for r in doc["results"]:
        t = torch_rows.get((r["M"], r["K"], r["N"]))
        if r["impl"] == "pyggml" and t and "TFLOPs" in r:
            r["ratio_vs_torch_f16"] = r["TFLOPs"] / t["TFLOPs"]

    # summary table: type x shape, one column per path (+ torch)
    paths = [p for p in args.paths.split(",") if "error" not in doc["paths"].get(p, {"error": 1})]
    print("\nTFLOP/s (overhead-corrected)  " + "  ".join(f"{p:>8s}" for p in paths) + "     torch")
    by = {(r.get("path"), r["type"], r["M"], r["K"], r["N"]): r for r in doc["results"] if r["impl"] == "pyggml"}
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.lower().split("x"))
        for n in (int(v) for v in args.ntok.split(",")):
            for t in args.types.split(","):
                cells = []
                for p in paths:
                    r = by.get((p, t, m, k, n))
                    cells.append(f"{r['TFLOPs']:8.1f}" if r and "TFLOPs" in r else f"{'err':>8s}")
                tr = torch_rows.get((m, k, n))
                print(f"{t:5s} {m:6d}x{k:<6d} N={n:<5d}  " + "  ".join(cells) +
                      (f"  {tr['TFLOPs']:8.1f}" if tr else ""))
    bad = [r for r in doc["results"] if r["impl"] == "pyggml" and ("error" in r or not r.get("nmse_ok", True))]
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote", args.out)
    if bad:
        print(f"bench_gemm: {len(bad)} result(s) failed (error or NMSE >= 5e-4)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
