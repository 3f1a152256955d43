"""Decode-shape mat-vec of the CPU plugin as a fraction of the STREAM-style triad measured in the
same run, interleaved (triad, type, triad, type ...) so a noisy machine hits both alike.

    python3 bench/cpu_matvec.py [--threads 2] [--rounds 5] [--types q4_0,q8_0,q4_K,q6_K]
Prints, per type and shape, the median weight GB/s and median of per-round ratios to the triad,
plus the fixed cost of one compute (a 1x1 graph) and /proc/loadavg before and after."""
import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--types", default="q4_0,q8_0,q4_K,q6_K")
    ap.add_argument("--shapes", default="4096x4096,14336x4096")
    ap.add_argument("--kernels", default="auto")
    ap.add_argument("--best", action="store_true",
                    help="best of the reps (and best triad round) instead of medians: on a shared, "
                         "busy machine the fastest run is the one least disturbed")
    a = ap.parse_args()
    import numpy as np
    import pyggml as pg
    from pyggml.bench_ops import stream_triad
    cpu = pg.get_device("cpu")
    cpu.set_option("kernels", a.kernels)
    sched = pg.Scheduler(["cpu"], n_threads=a.threads)
    rng = np.random.default_rng(0)
    print("loadavg", open("/proc/loadavg").read().strip())
    g = pg.Graph()
    x1 = g.input("x", (1, 32), pg.f32)
    y1 = pg.mul_mat(g.weight("w", np.ones((1, 32), np.float32)), x1)
    xv1 = np.ones((1, 32), np.float32)
    for _ in range(10):
        sched.compute(y1, {"x": xv1})
    t0 = time.perf_counter()
    for _ in range(200):
        sched.compute(y1, {"x": xv1})
    print(f"fixed cost of one compute (1x32 mul_mat): {(time.perf_counter() - t0) / 200 * 1e6:.1f} us")
    cases = []
    for tname in a.types.split(","):
        t = pg.dtype(tname)
        for s in a.shapes.split(","):
            M, K = map(int, s.split("x"))
            wf = (rng.standard_normal((M, K)) * 0.02).astype(np.float32)
            g = pg.Graph()
            w = g.weight("w", pg.quantize(wf, t), type=t, shape=(M, K)) if t.is_quantized else g.weight("w", wf.astype(t.np_dtype))
            x = g.input("x", (1, K), pg.f32)
            cases.append((f"{tname} {M}x{K}", pg.mul_mat(w, x), {"x": rng.standard_normal((1, K)).astype(np.float32)},
                          t.row_bytes(K) * M))
    res = {c[0]: [] for c in cases}
    tri = []
    for r in range(a.rounds):
        bw, tts = stream_triad(a.threads, reps=3)
        if a.best:
            bw = 3 * (256 * 2**20) / min(tts) / 1e9
        tri.append(bw)
        for name, y, feeds, nbytes in cases:
            sched.compute(y, feeds)
            ts = []
            for _ in range(a.reps):
                t0 = time.perf_counter()
                sched.compute(y, feeds)
                ts.append(time.perf_counter() - t0)
            gbs = nbytes / (min(ts) if a.best else statistics.median(ts)) / 1e9
            res[name].append((gbs, gbs / bw))
    print(f"triad {'best' if a.best else 'median'} of reps, median of rounds {statistics.median(tri):.1f} GB/s (rounds: {', '.join(f'{b:.1f}' for b in tri)})")
    for name, v in res.items():
        print(f"{name:>18}: {statistics.median(g for g, _ in v):6.2f} GB/s  {statistics.median(q for _, q in v) * 100:5.0f}% of triad"
              f"  (rounds {' '.join(f'{q * 100:.0f}' for _, q in v)})")
    print("loadavg", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
