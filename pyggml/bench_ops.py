"""`pyggml bench --ops`: per-op throughput of a device, next to numpy measured in the same run.

llama-bench conventions: one warm-up, then `reps` timed runs; the table shows mean ± sd and the
median is what ratios use. mul_mat reports GFLOP/s (numpy: matmul on the same shapes, float32),
the memory-bound ops GB/s (bytes read + written)."""
import json
import os
import platform
import statistics
import subprocess
import time

import numpy as np

import pyggml as pg


def _time(fn, reps):
    fn()                                       # warm-up (plans, uploads, caches)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def _row(name, shape, unit, work, ts, peer_ts=None):
    med = statistics.median(ts)
    vals = [work / t for t in ts]
    r = {"op": name, "shape": shape, "unit": unit, "median": work / med, "mean": statistics.mean(vals),
         "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0, "times_s": ts}
    if peer_ts:
        pmed = statistics.median(peer_ts)
        r["numpy_median"] = work / pmed
        r["ratio_vs_numpy"] = pmed / med
    return r


def bench_ops(device="cpu", n_threads=None, reps=5, quick=False):
    sched = pg.Scheduler([device], n_threads=n_threads)
    rng = np.random.default_rng(0)
    rows = []

    mm_shapes = [(1, 4096, 4096), (512, 4096, 4096), (128, 2048, 2048)] if not quick else [(1, 1024, 1024), (64, 512, 512)]
    for n, m, k in mm_shapes:
        g = pg.Graph()
        wv = rng.standard_normal((m, k)).astype(np.float32)
        xv = rng.standard_normal((n, k)).astype(np.float32)
        w = g.weight("w", wv)
        x = g.input("x", (n, k))
        y = pg.mul_mat(w, x)
        ts = _time(lambda: sched.compute(y, {"x": xv}), reps)
        wt = np.ascontiguousarray(wv.T)
        pts = _time(lambda: xv @ wt, reps)
        rows.append(_row("mul_mat f32", f"{n}x{k} @ {k}x{m}", "GFLOP/s", 2.0 * n * m * k / 1e9, ts, pts))

    n, k = (512, 4096) if not quick else (64, 1024)
    xv = rng.standard_normal((n, k)).astype(np.float32)
    bv = rng.standard_normal((n, k)).astype(np.float32)
    nbytes = xv.nbytes
    for name, make, npfn, traffic in [
        ("rms_norm f32", lambda g, x: pg.rms_norm(x, eps=1e-5),
         lambda: xv / np.sqrt((xv * xv).mean(-1, keepdims=True) + 1e-5), 2 * nbytes),
        ("soft_max f32", lambda g, x: pg.soft_max(x),
         lambda: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(xv - xv.max(-1, keepdims=True))), 2 * nbytes),
        ("add f32", lambda g, x: pg.add(x, g.input("b", (n, k))), lambda: xv + bv, 3 * nbytes),
    ]:
        g = pg.Graph()
        x = g.input("x", (n, k))
        y = make(g, x)
        feeds = {"x": xv, "b": bv} if name.startswith("add") else {"x": xv}
        ts = _time(lambda: sched.compute(y, feeds), reps)
        pts = _time(npfn, reps)
        rows.append(_row(name, f"{n}x{k}", "GB/s", traffic / 1e9, ts, pts))
    return rows


def stream_triad(n_threads=2, mib=256, reps=5):
    """STREAM-style triad a = b + s*c over `mib` MiB arrays on n_threads threads (numpy releases
    the GIL; the product goes through a cache-sized temporary so memory sees only the triad's
    reads and writes). Returns GB/s counting 3 arrays moved (b, c read; a written)."""
    import threading
    n = mib * 2**20 // 4
    a = np.empty(n, np.float32)
    b = np.random.default_rng(0).random(n, dtype=np.float32)
    c = np.random.default_rng(1).random(n, dtype=np.float32)
    chunk = 1 << 16

    def work(lo, hi):
        tmp = np.empty(chunk, np.float32)
        for i in range(lo, hi, chunk):
            j = min(i + chunk, hi)
            t = tmp[: j - i]
            np.multiply(c[i:j], 3.0, out=t)
            np.add(b[i:j], t, out=a[i:j])

    def run():
        parts = [(k * n // n_threads, (k + 1) * n // n_threads) for k in range(n_threads)]
        ts = [threading.Thread(target=work, args=p) for p in parts]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    ts = _time(run, reps)
    return 3 * a.nbytes / statistics.median(ts) / 1e9, ts


def bench_quant(device="cpu", n_threads=None, reps=5, quick=False, types=("f32", "f16", "q8_0", "q4_0", "q4_K", "q6_K")):
    """Mat-vec (decode) GB/s of weight bytes and mat-mat (prefill, batch 512) GFLOP/s per weight type."""
    sched = pg.Scheduler([device], n_threads=n_threads)
    rng = np.random.default_rng(0)
    rows = []
    K = 4096 if not quick else 1024
    mv_shapes = [(4096, K), (14336, K)] if not quick else [(1024, K)]
    for tname in types:
        t = pg.dtype(tname)
        for M, Kk in mv_shapes:
            wf = (rng.standard_normal((M, Kk)) * 0.02).astype(np.float32)
            g = pg.Graph()
            if t.is_quantized:
                w = g.weight("w", pg.quantize(wf, t), type=t, shape=(M, Kk))
            else:
                w = g.weight("w", wf.astype(t.np_dtype))
            wbytes = t.row_bytes(Kk) * M
            del wf
            for N, label in ((1, "mat-vec"),) + (((512 if not quick else 64), "mat-mat"),) * (M == mv_shapes[0][0]):
                x = g.input(f"x{N}", (N, Kk))
                y = pg.mul_mat(w, x)
                xv = rng.standard_normal((N, Kk)).astype(np.float32)
                ts = _time(lambda: sched.compute(y, {f"x{N}": xv}), reps)
                if label == "mat-vec":
                    rows.append(_row(f"mul_mat {tname} {label}", f"{M}x{Kk}", "GB/s", wbytes / 1e9, ts))
                else:
                    rows.append(_row(f"mul_mat {tname} {label}", f"{N}x{Kk} @ {Kk}x{M}", "GFLOP/s",
                                     2.0 * N * M * Kk / 1e9, ts))
    return rows


def machine_info():
    info = {"machine": platform.machine(), "python": platform.python_version(), "cpus": os.cpu_count()}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    # a copy of the tree on another machine may carry a stale .git: the caller's word comes first
    info["commit"] = os.environ.get("PYGGML_COMMIT") or os.environ.get("GPU_CHECK_COMMIT")
    if not info["commit"]:
        try:
            info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                            cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip() or None
        except OSError:
            info["commit"] = None
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=10).stdout.strip().splitlines()
        if gpu:
            info["gpu"] = gpu[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def print_table(rows, echo=print, bandwidth=None):
    bw = f" | vs triad ({bandwidth:.1f} GB/s)" if bandwidth else ""
    echo("| op | shape | pyggml (mean ± sd) | median | numpy | ratio" + bw + " |")
    echo("|---|---|---:|---:|---:|---:|" + ("---:|" if bandwidth else ""))
    for r in rows:
        peer = f"{r['numpy_median']:.2f} {r['unit']}" if "numpy_median" in r else "-"
        ratio = f"{r['ratio_vs_numpy']:.2f}x" if "ratio_vs_numpy" in r else "-"
        frac = ""
        if bandwidth:
            frac = f" | {r['median'] / bandwidth * 100:.0f}%" if r["unit"] == "GB/s" and "mat-vec" in r["op"] else " | -"
        echo(f"| {r['op']} | {r['shape']} | {r['mean']:.2f} ± {r['sd']:.2f} {r['unit']} | {r['median']:.2f} | "
             f"{peer} | {ratio}{frac} |")


def write_json(rows, out_dir, device, n_threads, command, kind="ops"):
    os.makedirs(out_dir, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    path = os.path.join(out_dir, f"{kind}-{device.replace(':', '')}-{stamp}.json")
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": kind, "device": device, "n_threads": n_threads,
           "command": command, **machine_info(), "results": rows}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, path)
    return path
