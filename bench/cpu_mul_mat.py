"""MUL_MAT throughput of the CPU plugin against numpy's BLAS (same threads), f32 and f16 weights.

    python3 bench/cpu_mul_mat.py [--threads 2] [--reps 5]
Prints GFLOP/s (best of reps, after one warm-up) and the ratio plugin / numpy."""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cpu-time", action="store_true",
                    help="divide by process CPU time instead of wall time (fairer on a busy machine, 1 thread)")
    ap.add_argument("--shapes", default="512x4096x4096,128x4096x4096,32x4096x4096,1x4096x4096,1x4096x11008")
    a = ap.parse_args()
    clock = time.process_time if a.cpu_time else time.perf_counter
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    import numpy as np
    import pyggml as pg
    cpu = pg.get_device("cpu")
    cpu.set_option("n_threads", str(a.threads))
    rng = np.random.default_rng(0)
    print(f"{'shape NxKxM':>18} {'wtype':>5} {'pyggml GF/s':>12} {'numpy GF/s':>11} {'ratio':>6}")
    for s in a.shapes.split(","):
        N, K, M = map(int, s.split("x"))
        x = rng.standard_normal((N, K)).astype(np.float32)
        for wt in ("f32", "f16"):
            w = rng.standard_normal((M, K)).astype(np.float32 if wt == "f32" else np.float16)
            g = pg.Graph()
            xi = g.input("x", (N, K), pg.f32)
            wi = g.weight("w", w)
            y = pg.mul_mat(wi, xi)
            sched = pg.Scheduler(["cpu"])
            out = sched.compute(y, {"x": x})
            best = 1e9
            for _ in range(a.reps):
                t = clock()
                out = sched.compute(y, {"x": x})
                best = min(best, clock() - t)
            wf = w.astype(np.float32)
            ref = x @ wf.T
            err = float(np.sum((out - ref) ** 2) / np.sum(ref * ref))
            nb = 1e9
            for _ in range(a.reps):
                t = clock()
                x @ wf.T
                nb = min(nb, clock() - t)
            fl = 2.0 * N * K * M
            print(f"{s:>18} {wt:>5} {fl / best / 1e9:12.1f} {fl / nb / 1e9:11.1f} {nb / best:6.2f}  nmse {err:.1e}")


if __name__ == "__main__":
    main()
