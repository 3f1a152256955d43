"""Where a decode step's time goes on a Vulkan device.

    python3 scripts/vulkan_profile_decode.py -m synth:1b:q4_0 -n 32 [--profile]

Runs `-n` decodes (after an optional `-p` token prefill) on the model through the reused decode
graph and prints: wall time per token, the scheduler's RunStats split (host outside the plugins /
inside the plugins), and with --profile the plugin's own profile (device options profile=1 and
"profile_report"): submissions, command-buffer recordings, host waits, and GPU time per op from
timestamps written after every dispatch. Profiling waits for each plan's previous submission
before resubmitting it (to read its timestamps), so compare wall times with it off."""
import argparse
import logging
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="synth:tiny:q4_0")
    ap.add_argument("-d", "--device", default="vulkan:0")
    ap.add_argument("-p", "--prompt", type=int, default=0)
    ap.add_argument("-n", "--n-gen", type=int, default=32)
    ap.add_argument("-c", "--n-ctx", type=int, default=512)
    ap.add_argument("--attn", default="flash")
    ap.add_argument("--profile", action="store_true", help="the plugin's profile (device option profile=1)")
    a = ap.parse_args(argv)
    import numpy as np
    import pyggml as pg
    import pyggml.models as models
    from pyggml.bench_model import resolve_model
    lines = []

    class H(logging.Handler):
        def emit(self, rec):
            lines.append(rec.getMessage())
    logging.getLogger("pyggml").addHandler(H())
    logging.getLogger("pyggml").setLevel(logging.INFO)
    path = resolve_model(a.model)
    devs = a.device.split(",")
    profiling = a.profile
    if profiling:
        pg.get_device(devs[0]).set_option("profile", "1")   # before the plans exist
    m = models.load(path, devices=devs, n_ctx=a.n_ctx, attn=a.attn)
    vk = pg.get_device(devs[0])
    rng = np.random.default_rng(0)
    if a.prompt:
        m.prefill(rng.integers(3, m.hp.n_vocab, a.prompt).tolist())
    m.decode(5)                               # warm-up: first run of the decode program
    from pyggml._plugin import drain_log
    if profiling:
        vk.set_option("profile_report", "1")  # start counting here
    drain_log()
    lines.clear()
    wall, host, total = [], [], []
    for tok in rng.integers(3, m.hp.n_vocab, a.n_gen).tolist():
        t = time.perf_counter()
        m.decode(tok)
        wall.append((time.perf_counter() - t) * 1e6)
        lr = m.sched.last_run
        host.append(lr.host_time_us)
        total.append(lr.total_time_us)
    print(f"{a.model} on {a.device}: {a.n_gen} decodes, n_ctx {a.n_ctx}, pattern {m.sched.last_run.sync_pattern}")
    print(f"  wall per token        {statistics.mean(wall):10.1f} us  ({1e6 / statistics.mean(wall):.1f} t/s)")
    print(f"  scheduler, host       {statistics.mean(host):10.1f} us  (outside plugin calls)")
    print(f"  inside plugin calls   {statistics.mean(total) - statistics.mean(host):10.1f} us")
    if profiling:
        vk.set_option("profile_report", "1")
        drain_log()
        for line in lines:
            if "profile" in line:
                print("  " + line.split("profile", 1)[1].lstrip(": "))
    m.close()


if __name__ == "__main__":
    main()
