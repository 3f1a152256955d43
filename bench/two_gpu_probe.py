"""The two-GPU probe of issue 13, on real devices: a stack of L layers (f16 4096x4096 mul_mat ->
silu -> rms_norm), its layers split into contiguous ranges over 1 or 2 devices, run by
Scheduler.compute_batches over M micro-batches of (512, 4096) f32, under strict / relaxed / events
x n_copies 1/2/4, R runs each; every micro-batch is compared bit for bit with the same device set's
`events` run with one input slot (on devices of one plugin that is also the one-device result; the
relative distance from one device is reported beside it). Then the pipelining speed-up (median time, events, n_copies 2: 2 devices against 1),
and, with the CUDA device option write_sync=0 (the plugin before the fix), single strict computes
that show the old race.

    python3 bench/two_gpu_probe.py --devices cuda:0,cuda:1 [--runs 20] [--out probe.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pyggml as pg  # noqa: E402


def _gpus():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True).stdout.strip().splitlines()
    except OSError:
        return []


def stack(devices, L, K):
    rng = np.random.default_rng(1)
    g = pg.Graph()
    x = g.input("x", (512, K))
    h = x
    for i in range(L):
        with g.on(devices[i * len(devices) // L]):
            w = g.weight(f"w{i}", (rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float16))
            h = pg.rms_norm(pg.silu(pg.mul_mat(w, h)), eps=1e-5)
    return h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default="cuda:0,cuda:1")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--mbs", type=int, default=8)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--trace", default=None, help="also write a Perfetto trace of 3 runs on all devices "
                                                  "(events, n_copies 2)")
    a = ap.parse_args()
    all_devs = a.devices.split(",")
    rng = np.random.default_rng(2)
    feeds = [{"x": rng.standard_normal((512, a.dim)).astype(np.float32)} for _ in range(a.mbs)]
    ref_s = pg.Scheduler(all_devs[:1], sync="events", n_copies=1)
    ref = ref_s.compute_batches(stack(all_devs[:1], a.layers, a.dim), feeds)
    ref_s.close()
    res = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "two-gpu-probe",
           "gpu": _gpus(),
           "commit": os.environ.get("GPU_CHECK_COMMIT", "?"), "command": " ".join(sys.argv),
           "layers": a.layers, "dim": a.dim, "micro_batches": a.mbs, "runs": a.runs, "cases": []}
    sets = [all_devs[:1]] + ([all_devs] if len(all_devs) > 1 else [])
    for devs in sets:
        y = stack(devs, a.layers, a.dim)
        # the same device set under events, one input slot: devices of different plugins may run
        # different kernels (the MUSA build has no cuBLAS), so a race shows as a difference from this
        # set's own reference; the distance from the one-device reference is reported beside it
        if devs == all_devs[:1]:
            set_ref = ref
        else:
            set_s = pg.Scheduler(devs, sync="events", n_copies=1)
            set_ref = set_s.compute_batches(y, feeds)
            set_s.close()
        rel_one = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) or 1.0)) for o, r in zip(set_ref, ref))
        for policy in ("strict", "relaxed", "events"):
            for n_copies in (1, 2, 4):
                s = pg.Scheduler(devs, sync=policy, n_copies=n_copies)
                wrong, times = [], []
                for _ in range(a.runs):
                    t = time.perf_counter()
                    out = s.compute_batches(y, feeds)
                    times.append(time.perf_counter() - t)
                    wrong.append(sum(not np.array_equal(o, r) for o, r in zip(out, set_ref)))
                case = {"devices": devs, "policy": policy, "n_copies": n_copies, "wrong_per_run": wrong,
                        "max_rel_vs_one_device": rel_one,
                        "median_s": statistics.median(times[1:] or times), "pattern": s.last_run.sync_pattern}
                res["cases"].append(case)
                print(f"{'+'.join(devs):14s} {policy:8s} n_copies={n_copies}: wrong micro-batches per run "
                      f"{sum(wrong)}/{a.runs * a.mbs}, median {case['median_s'] * 1e3:.1f} ms, "
                      f"max rel. distance from one device {rel_one:.2g}", flush=True)
                s.close()
    med = {(tuple(c["devices"]), c["policy"], c["n_copies"]): c["median_s"] for c in res["cases"]}
    if len(all_devs) > 1:
        for policy in ("strict", "relaxed", "events"):
            for n_copies in (1, 2, 4):
                one = med[(tuple(all_devs[:1]), policy, n_copies)]
                two = med[(tuple(all_devs), policy, n_copies)]
                res.setdefault("speedup_2_over_1", {})[f"{policy}/{n_copies}"] = one / two
        print("speed-up of 2 devices over 1:", {k: round(v, 2) for k, v in res["speedup_2_over_1"].items()})
    if a.trace:
        s = pg.Scheduler(all_devs, sync="events", n_copies=2, trace=a.trace)
        y = stack(all_devs, a.layers, a.dim)
        for _ in range(3):
            s.compute_batches(y, feeds)
        s.close()
    # the plugin before the fix: buffer_write not waited for; strict single computes from pageable arrays
    dev0 = pg.get_device(all_devs[0])
    for ws in ("0", "1"):
        try:
            dev0.set_option("write_sync", ws)
        except pg.UnsupportedError as e:
            print(f"write_sync unavailable: {e}")
            break
        s = pg.Scheduler(all_devs[:1], sync="strict")
        y = stack(all_devs[:1], a.layers, a.dim)
        wrong = 0
        for _ in range(a.runs):
            for f, r in zip(feeds, ref):
                wrong += not np.array_equal(s.compute(y, f), r)
        res[f"strict_single_write_sync_{ws}"] = {"wrong": wrong, "of": a.runs * len(feeds)}
        print(f"strict single computes, write_sync={ws}: {wrong}/{a.runs * len(feeds)} wrong", flush=True)
        s.close()
        dev0.set_option("write_sync", "1")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
