"""What memory bandwidth a Vulkan kernel reaches on vulkan:0, next to the same work on the CUDA plugin and
PyTorch in the same process: is the decode mat-vecs' ~1.2 TB/s on the H100 (against CUDA's 2.3-2.6) the
kernels' or the platform's?

    python3 scripts/vulkan_bandwidth.py --out DIR [--reps 20] [--gib 1.0]

Cases, each over one weight (uploaded once, larger than L2):
  argmax   argmax over rows of 4096 floats (GIB of f32): a read of every byte, one int per row written
  mv       a one-column q4_0 mat-vec with M = --mv-rows (65536), K = 4096 (151 MB of weights): Vulkan's kernels by device
           option set (mv3w: matvec=6, the default; rp: matvec_rp=1) and the CUDA plugin's default
  torch    torch.argmax(x, 1) and x.sum() on the same f32 bytes (CUDA events), the card's reference
GPU time per dispatch: Vulkan's timestamp queries (device option profile=1), the CUDA plugin's profile the same
way where it has one, else wall time over --reps back-to-back computes after a warm-up. Writes
vulkan-bandwidth-<time>.json into --out and prints GB/s per case."""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pyggml as pg                                   # noqa: E402
from pyggml._plugin import drain_log                  # noqa: E402
from vulkan_gemm_sweep import LogLines, warm_up        # noqa: E402

VK = "vulkan:0"
_SHADER = re.compile(r"profile shader: (\S+)\s+(\d+) dispatches\s+([\d.]+) us total")
VK_SETS = {"mv3w": {"matvec": "6", "matvec_rp": "0"}, "rp": {"matvec": "6", "matvec_rp": "1"}}


def vk_gpu_us(dev, sched, outs, feeds, reps, log, prefix):
    """median GPU us of the dispatches whose shader label starts with prefix, over reps computes"""
    out = []
    for _ in range(reps):
        dev.set_option("profile_report", "1")
        drain_log()
        log.lines.clear()
        sched.compute(outs, feeds)
        dev.set_option("profile_report", "1")
        drain_log()
        us = sum(float(m.group(3)) for m in map(_SHADER.search, log.lines) if m and m.group(1).startswith(prefix))
        if us > 0:
            out.append(us)
    return float(np.median(out)) if out else None


def wall_us(sched, outs, feeds, reps):
    warm_up(sched, outs, feeds, 0.5)
    t = time.perf_counter()
    for _ in range(reps):
        sched.compute(outs, feeds)
    return (time.perf_counter() - t) / reps * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--mv-rows", type=int, default=65536, help="M of the mat-vec (lavapipe binds at most 128 MiB)")
    a = ap.parse_args(argv)
    log = LogLines()
    dev = pg.get_device(VK)
    dev.set_option("profile", "1")
    res = {}
    rng = np.random.default_rng(0)
    rows = int(a.gib * 2**30 / 4 / 4096)
    xf = rng.standard_normal((rows, 4096)).astype(np.float32)
    blocks = pg.quantize(rng.standard_normal((a.mv_rows, 4096)).astype(np.float32), "q4_0")
    wbytes = np.asarray(blocks).nbytes
    feeds = {"v": rng.standard_normal((1, 4096)).astype(np.float32)}
    g = pg.Graph()
    am = pg.argmax(g.weight("x", xf))
    s = pg.Scheduler([VK])
    s.compute(am)
    warm_up(s, am, {}, 0.5)
    us = vk_gpu_us(dev, s, am, {}, a.reps, log, "rows_sg")
    res["vk_argmax"] = {"us": us, "gbs": xf.nbytes / us / 1e3 if us else None}
    s.close()
    g2 = pg.Graph()
    y = pg.mul_mat(g2.weight("w", blocks, type="q4_0", shape=(a.mv_rows, 4096)), g2.input("v", (1, 4096)))
    for name, opts in VK_SETS.items():
        for k, v in opts.items():
            dev.set_option(k, v)
        s = pg.Scheduler([VK])
        s.compute(y, feeds)
        warm_up(s, y, feeds, 0.5)
        us = vk_gpu_us(dev, s, y, feeds, a.reps, log, "mul_mat")
        res[f"vk_mv_{name}"] = {"us": us, "gbs": wbytes / us / 1e3 if us else None, "wall_us": wall_us(s, y, feeds, a.reps)}
        s.close()
    cuda = next((str(d) for d in pg.devices() if d.plugin.name == "cuda"), None)
    if cuda:
        s = pg.Scheduler([cuda])
        s.compute(y, feeds)
        res["cuda_mv"] = {"wall_us": wall_us(s, y, feeds, a.reps)}
        res["cuda_mv"]["gbs_wall"] = wbytes / res["cuda_mv"]["wall_us"] / 1e3
        s.close()
    try:
        import torch
        if torch.cuda.is_available():
            t = torch.from_numpy(xf).cuda()
            for name, fn in (("argmax", lambda: t.argmax(1)), ("sum", lambda: t.sum())):
                for _ in range(5):
                    fn()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(a.reps):
                    fn()
                e1.record()
                torch.cuda.synchronize()
                us = e0.elapsed_time(e1) * 1e3 / a.reps
                res[f"torch_{name}"] = {"us": us, "gbs": xf.nbytes / us / 1e3}
    except ImportError:
        pass
    for k, v in res.items():
        print(f"  {k:14s} " + " ".join(f"{kk} {vv:.1f}" for kk, vv in v.items() if isinstance(vv, float)), flush=True)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("vulkan-bandwidth-%Y%m%dT%H%M%S.json"))
    with open(path, "w") as f:
        json.dump({"kind": "vulkan-bandwidth", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": os.environ.get("GPU_VK_GPU", ""),
                   "commit": os.environ.get("GPU_VK_COMMIT", ""), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
                   "weight_f32_bytes": int(xf.nbytes), "weight_q4_0_bytes": int(wbytes), "results": res}, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
