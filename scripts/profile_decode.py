"""Where a decode token's GPU time goes: runs decode steps of a (synthetic) model under
torch.profiler (CUPTI sees every kernel in the process, ours included) and prints the kernels by
total time. Needs PyTorch with CUDA (the GPU machine has it).

    python3 scripts/profile_decode.py [synth:1b:q4_0 | model.gguf] [--steps 32] [--devices cuda:0,cpu]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="synth:1b:q4_0")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--devices", default="cuda:0,cpu")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--prefill", type=int, default=0, help="profile prefills of this many tokens instead")
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from pyggml import bench_model, models
    path = bench_model.resolve_model(a.model) if hasattr(bench_model, "resolve_model") else a.model
    m = models.load(path, devices=a.devices.split(","), n_ctx=a.n_ctx, progress=False)
    m.prefill([1, 2, 3, 4])
    for i in range(4):
        m.decode(5 + i)
    if a.prefill:
        toks = [1 + i % 1000 for i in range(a.prefill)]
        m.reset() if hasattr(m, "reset") else None
        m.prefill(toks)                     # plan + warm
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(a.steps):
                if hasattr(m, "reset"):
                    m.reset()
                m.prefill(toks)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
        return
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(a.steps):
            m.decode(10 + i)
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
    print(m.sched.last_run)


if __name__ == "__main__":
    main()
