"""Where a decode token's GPU time goes: runs decode steps of a (synthetic) model under
torch.profiler (CUPTI sees every kernel in the process, ours included) and prints the kernels by
total time. Needs PyTorch with CUDA (the GPU machine has it).

    python3 scripts/profile_decode.py [synth:1b:q4_0 | model.gguf] [--steps 32] [--devices cuda:0,cpu] [--depth 4096]

With --depth D the steps follow a context of D tokens; with --prefill N as well, each profiled
step re-prefills the D-token context before its N tokens, so the table holds both prefills.
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
    ap.add_argument("--depth", type=int, default=0, help="decode (or prefill) after a context of this many tokens")
    a = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile
    from pyggml import bench_model, models
    path = bench_model.resolve_model(a.model) if hasattr(bench_model, "resolve_model") else a.model
    n_ctx = max(a.n_ctx, a.depth + max(a.prefill, a.steps + 16) + 16)
    m = models.load(path, devices=a.devices.split(","), n_ctx=n_ctx, progress=False)
    ctx = [1 + i % 1000 for i in range(max(a.depth, 4))]
    m.prefill(ctx)
    for i in range(4):
        m.decode(5 + i)
    if a.prefill:
        toks = [1 + i % 1000 for i in range(a.prefill)]
        m.reset()
        if a.depth:
            m.prefill(ctx)
        m.prefill(toks)                     # plan + warm
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(a.steps):
                m.reset()
                if a.depth:
                    m.prefill(ctx)
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
