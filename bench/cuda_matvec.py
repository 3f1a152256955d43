"""CUDA mat-vec (decode) bandwidth of pyggml's cuda plugin, with PyTorch measured in the same run.

A graph holds a chain of `pairs` (up, down) weight pairs, up = [14336 x 4096], down = [4096 x 14336]
(a LLaMA-7B-like FFN without the activation), applied to one token: x -> up1 x -> down1 (up1 x) ...
Every weight is its own device allocation and the chain is much larger than the L2 cache, so each
call streams all weights from HBM once. GB/s = weight bytes / wall time of one Scheduler.compute
(which includes the input upload, the graph launch and reading the output back: conservative); the
per-call overhead of a trivial graph is reported next to it. PyTorch: the same chain in f16 (cuBLAS
gemv), timed with CUDA events; PyTorch has no q4_K/q4_0 kernels, so for those the peer figure is
the f16 chain's GB/s (both are memory-bound: bytes/s is the comparable number). A device-to-device
copy through PyTorch gives the attainable bandwidth.

    python3 bench/cuda_matvec.py [--pairs 16] [--reps 10] [--out DIR] [--results bench/results]
                               [--option repack=0 ...]   (device options, e.g. the old kernels)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import pyggml as pg  # noqa: E402

# bytes per block, elements per block, offsets of the f16 scale fields
BLOCKS = {"q4_K": (144, 256, (0, 2)), "q4_0": (18, 32, (0,)), "q8_0": (34, 32, (0,)), "q6_K": (210, 256, (208,))}


def random_blocks(rng, qtype, rows, k):
    """Valid random blocks (finite, small scales): timing does not depend on the values."""
    size, bs, offs = BLOCKS[qtype]
    nb = rows * (k // bs)
    b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    for off in offs:
        b[:, off:off + 2] = np.full(nb, 1e-4, np.float16).view(np.uint8).reshape(nb, 2)
    return b.reshape(rows, -1)


def timed(fn, reps):
    fn()
    fn()   # 2nd call captures the CUDA graph
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return ts


def bench_pyggml(dev, wtype, k, m, pairs, reps, rng, ntok=1):
    g = pg.Graph()
    if wtype == "f16":
        up = (rng.standard_normal((m, k)) * 0.01).astype(np.float16)
        down = (rng.standard_normal((k, m)) * 0.01).astype(np.float16)
        wbytes = up.nbytes + down.nbytes
        mk = lambda name, arr, shape: g.weight(name, arr)  # noqa: E731
    else:
        up = random_blocks(rng, wtype, m, k)
        down = random_blocks(rng, wtype, k, m)
        wbytes = up.nbytes + down.nbytes
        mk = lambda name, arr, shape: g.weight(name, arr, type=wtype, shape=shape)  # noqa: E731
    x = g.input("x", (ntok, k), pg.f32)
    y = x
    for i in range(pairs):
        y = pg.mul_mat(mk(f"up{i}", up, (m, k)), y)
        y = pg.mul_mat(mk(f"down{i}", down, (k, m)), y)
    sched = pg.Scheduler([dev])
    xv = (rng.standard_normal((ntok, k)) * 0.1).astype(np.float32)
    ts = timed(lambda: sched.compute(y, {"x": xv}), reps)
    total = wbytes * pairs
    med = statistics.median(ts)
    if ntok > 1:
        flop = 2.0 * 2 * m * k * ntok * pairs
        return {"impl": "pyggml", "type": wtype, "shape": f"{pairs}x({m}x{k} + {k}x{m}) @ {ntok} tokens",
                "flop": flop, "median_s": med, "TFLOPs": flop / med / 1e12, "times_s": ts}
    return {"impl": "pyggml", "type": wtype, "shape": f"{pairs}x({m}x{k} + {k}x{m}) @ 1 token",
            "weight_bytes": total, "median_s": med, "GBps": total / med / 1e9,
            "GBps_mean": statistics.mean(total / t / 1e9 for t in ts),
            "GBps_sd": statistics.stdev(total / t / 1e9 for t in ts) if len(ts) > 1 else 0.0,
            "per_matvec_us": med / (2 * pairs) * 1e6, "times_s": ts}


def bench_overhead(dev, reps):
    g = pg.Graph()
    x = g.input("x", (1, 4096), pg.f32)
    y = pg.scale(x, 2.0)
    sched = pg.Scheduler([dev])
    xv = np.ones((1, 4096), np.float32)
    ts = timed(lambda: sched.compute(y, {"x": xv}), reps)
    return statistics.median(ts)


def _torch_chain_times(torch, k, m, pairs, reps, ntok):
    """CUDA-event times of `pairs` f16 up/down projections over ntok columns (after a warm-up)."""
    dev = torch.device("cuda")
    ups = [torch.randn(m, k, device=dev, dtype=torch.float16) * 0.01 for _ in range(pairs)]
    downs = [torch.randn(k, m, device=dev, dtype=torch.float16) * 0.01 for _ in range(pairs)]
    x = torch.randn(k, ntok, device=dev, dtype=torch.float16)

    def chain():
        y = x
        for u, d in zip(ups, downs):
            y = d @ (u @ y)
        return y
    chain()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        chain()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    del ups, downs
    torch.cuda.empty_cache()
    return ts


def bench_torch_gemm(k, m, pairs, reps, ntok):
    import torch
    ts = _torch_chain_times(torch, k, m, pairs, reps, ntok)
    flop = 2.0 * 2 * m * k * ntok * pairs
    med = statistics.median(ts)
    return {"impl": "torch", "type": "f16", "shape": f"{pairs}x({m}x{k} + {k}x{m}) @ {ntok} tokens", "flop": flop,
            "median_s": med, "TFLOPs": flop / med / 1e12, "times_s": ts}


def bench_torch(k, m, pairs, reps):
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.cuda.is_available():
        return None, None
    dev = torch.device("cuda")
    ts = _torch_chain_times(torch, k, m, pairs, reps, 1)
    total = 2 * m * k * 2 * pairs
    med = statistics.median(ts)
    res = {"impl": "torch", "type": "f16", "shape": f"{pairs}x({m}x{k} + {k}x{m}) @ 1 token",
           "weight_bytes": total, "median_s": med, "GBps": total / med / 1e9, "times_s": ts,
           "torch": torch.__version__}
    # attainable bandwidth: a device-to-device copy (read + write counted)
    a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        b.copy_(a)
    e1.record()
    torch.cuda.synchronize()
    copy_gbps = 2 * a.numel() * 10 / (e0.elapsed_time(e1) / 1e3) / 1e9
    del a, b
    torch.cuda.empty_cache()
    return res, copy_gbps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--types", default="q4_K,q4_0,q8_0,q6_K,f16")
    ap.add_argument("--gemm-types", default="q4_K,f16", help="prefill GEMM (--ntok tokens) for these; '' = none")
    ap.add_argument("--ntok", type=int, default=512)
    ap.add_argument("--out", default=None, help="also write the JSON here")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="device option set before the graphs are planned (repeatable), e.g. repack=0")
    ap.add_argument("--tag", default="", help="appended to the result file name")
    args = ap.parse_args(argv)
    k, m = 4096, 14336
    rng = np.random.default_rng(0)
    devs = [str(d) for d in pg.devices()]
    if args.device not in devs:
        print(f"cuda_matvec: {args.device} not available (devices: {devs}; failures: {pg.failures()})")
        return 2
    desc = next((getattr(d, "description", str(d)) for d in pg.devices() if str(d) == args.device), args.device)
    options = dict(o.split("=", 1) for o in args.option)
    for key, value in options.items():
        pg.get_device(args.device).set_option(key, value)
    rows = []
    overhead = bench_overhead(args.device, args.reps)
    for t in args.types.split(","):
        r = bench_pyggml(args.device, t, k, m, args.pairs, args.reps, rng)
        r["GBps_overhead_corrected"] = r["weight_bytes"] / max(r["median_s"] - overhead, 1e-9) / 1e9
        rows.append(r)
        print(f"pyggml {t:5s}: {r['GBps']:8.1f} GB/s ({r['per_matvec_us']:.1f} us per mat-vec, "
              f"{r['GBps_overhead_corrected']:.1f} GB/s without the {overhead * 1e6:.0f} us call overhead)", flush=True)
    tr, copy_gbps = bench_torch(k, m, args.pairs, args.reps)
    if tr:
        rows.append(tr)
        print(f"torch  f16  : {tr['GBps']:8.1f} GB/s; d2d copy {copy_gbps:.1f} GB/s", flush=True)
        for r in rows:
            if r["impl"] == "pyggml" and "GBps" in r:
                r["ratio_vs_torch_f16_GBps"] = r["GBps"] / tr["GBps"]
                r["fraction_of_copy_bw"] = r["GBps"] / copy_gbps
    if args.gemm_types:
        for t in args.gemm_types.split(","):
            r = bench_pyggml(args.device, t, k, m, 2, max(3, args.reps // 2), rng, ntok=args.ntok)
            rows.append(r)
            print(f"pyggml {t:5s} GEMM x{args.ntok}: {r['TFLOPs']:7.1f} TFLOP/s (wall, incl. upload/readback)", flush=True)
        if tr:
            gt = bench_torch_gemm(k, m, 2, max(3, args.reps // 2), args.ntok)
            rows.append(gt)
            print(f"torch  f16   GEMM x{args.ntok}: {gt['TFLOPs']:7.1f} TFLOP/s (CUDA events)", flush=True)
            for r in rows:
                if r["impl"] == "pyggml" and "TFLOPs" in r:
                    r["ratio_vs_torch_f16"] = r["TFLOPs"] / gt["TFLOPs"]
    commit = os.environ.get("GPU_CHECK_COMMIT")
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                    cwd=ROOT).stdout.strip() or None
        except OSError:
            commit = None
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "cuda-matvec", "device": args.device,
           "gpu": str(desc), "commit": commit, "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
           "call_overhead_s": overhead, "copy_GBps_torch": copy_gbps, "device_options": options,
           "method": "wall time of Scheduler.compute per call (upload x, graph launch, read y) for pyggml; "
                     "CUDA events for torch", "results": rows}
    stamp = time.strftime("%Y%m%dT%H%M%S")
    paths = []
    for d in filter(None, [args.results, args.out]):
        os.makedirs(d, exist_ok=True)
        p = os.path.join(d, f"cuda-matvec-{stamp}{'-' + args.tag if args.tag else ''}.json")
        with open(p, "w") as f:
            json.dump(doc, f, indent=1)
        paths.append(p)
    print("wrote", ", ".join(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
