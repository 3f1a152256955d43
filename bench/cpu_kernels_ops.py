"""Per-op timings of the CPU plugin, AVX2 kernels against the scalar reference kernels.

    python3 bench/cpu_kernels_ops.py [--threads 2]"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np  # noqa: E402
import pyggml as pg  # noqa: E402


def cases(rng):
    """(name, build(graph) -> (input tensor, op applied once), feeds): ops keep the shape, so a
    chain of n applications measures the op without the host's copies (see main)."""
    T, H, D, E = 512, 32, 128, 4096
    x2 = rng.standard_normal((T, E)).astype(np.float32)
    yield "rms_norm 512x4096", (T, E), lambda g, x: pg.rms_norm(x, 1e-5), {"x": x2}
    yield "silu 512x4096", (T, E), lambda g, x: pg.silu(x), {"x": x2}
    yield "gelu 512x4096", (T, E), lambda g, x: pg.gelu(x), {"x": x2}
    yield "swiglu(a, b) 512x4096", (T, E), lambda g, x: pg.swiglu(x, x), {"x": x2}
    yield "add 512x4096", (T, E), lambda g, x: pg.add(x, x), {"x": x2}
    mask = np.triu(np.full((T, T), -np.inf, np.float32), 1)
    yield "soft_max 32x512x512 mask", (H, T, T), \
        lambda g, x: pg.soft_max(x, g.by_name["m"] if "m" in g.by_name else g.input("m", (T, T), pg.f32), 0.088), \
        {"x": rng.standard_normal((H, T, T)).astype(np.float32), "m": mask}
    yield "rope neox 512x32x128", (T, H, D), \
        lambda g, x: pg.rope(x, g.by_name["p"] if "p" in g.by_name else g.input("p", (T,), pg.i32), D, mode=2), \
        {"x": rng.standard_normal((T, H, D)).astype(np.float32), "p": np.arange(T, dtype=np.int32)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    cpu = pg.get_device("cpu")
    cpu.set_option("n_threads", str(a.threads))
    rng = np.random.default_rng(0)
    print(f"{'op':>34} {'auto ms':>9} {'reference ms':>13} {'speed-up':>9}")
    for name, shape, op, feeds in cases(rng):
        res = {}
        for kernels in ("auto", "reference"):
            cpu.set_option("kernels", kernels)
            t_n = []
            for n in (1, 5):
                g = pg.Graph()
                y = g.input("x", shape, pg.f32)
                for _ in range(n):
                    y = op(g, y)
                s = pg.Scheduler(["cpu"])
                s.compute(y, feeds)
                best = 1e9
                for _ in range(a.reps):
                    t = time.perf_counter()
                    s.compute(y, feeds)
                    best = min(best, time.perf_counter() - t)
                t_n.append(best)
            res[kernels] = max(1e-9, (t_n[1] - t_n[0]) / 4)
        cpu.set_option("kernels", "auto")
        print(f"{name:>34} {res['auto'] * 1e3:9.2f} {res['reference'] * 1e3:13.2f} {res['reference'] / res['auto']:9.1f}")


if __name__ == "__main__":
    main()
