"""A model run for Nsight Compute to sample (scripts/gpu_ncu_attn.sh): load a model, prefill a
context of --depth tokens, then either decode --steps tokens or prefill --prefill tokens more.
ncu's --kernel-name / --launch-skip pick the launches; this script only makes them happen.

    ncu --kernel-name regex:k_fattn_dec --launch-skip 16 --launch-count 2 \
        python3 scripts/ncu_driver.py synth:1b:q4_0 --depth 16384 --steps 3
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="synth:1b:q4_0")
    ap.add_argument("--devices", default="cuda:0,cpu")
    ap.add_argument("--depth", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--prefill", type=int, default=0)
    ap.add_argument("-O", "--option", action="append", default=[], help="device option dev:key=value")
    a = ap.parse_args()
    from pyggml import bench_model, models
    path = bench_model.resolve_model(a.model) if hasattr(bench_model, "resolve_model") else a.model
    n_ctx = a.depth + max(a.prefill, a.steps) + 256
    from pyggml.cli import apply_device_options
    apply_device_options(a.option)
    m = models.load(path, devices=a.devices.split(","), n_ctx=n_ctx, progress=False)
    if a.depth:
        m.prefill([1 + i % 1000 for i in range(a.depth)])
    if a.prefill:
        m.prefill([1 + i % 1000 for i in range(a.prefill)])
    else:
        for i in range(a.steps):
            m.decode(10 + i)
    print("ran depth", a.depth, "steps", a.steps, "prefill", a.prefill)


if __name__ == "__main__":
    main()
