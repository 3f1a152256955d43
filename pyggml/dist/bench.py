"""`pyggml bench -m MODEL --ray ADDRESS --stages N`: the model as N pipeline stages on Ray
(pyggml.dist.Pipeline) against the same model in one process (bench_model.bench_models, the peer
measured in the same run).

pp<P>: prefill of P tokens from an empty context (chunks of -ub tokens, n_copies in flight);
tg<N>: N single-token decodes from an empty context; mean ± sd of tokens/s over `reps` runs after a
warm-up. The per-token overhead of crossing stages is measured two ways: inside the run (a decode
step's wall time minus the time the stages spent in StageModel.run, i.e. Ray's hops driver -> stage
0 -> ... -> driver and the driver's own Python), and against the peer (the Ray decode step minus
the in-process one). `--ray local` starts a local cluster on the loopback: one raylet per stage on
the CPU, one raylet holding every GPU with -d cuda (Ray gives each stage actor its own GPU, seen
as cuda:0 inside it).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

from ..bench_model import _stats


def stage_devices(devices):
    """(devices inside each stage actor, GPUs per stage) for the devices given with -d: a GPU
    kind runs each stage on its own GPU (cuda:0 inside the actor), else the CPU."""
    gpu = [d for d in devices if not d.startswith("cpu")]
    if not gpu:
        return ["cpu"], 0
    return [gpu[0].split(":")[0] + ":0"], 1


def bench_ray(path, address, n_stages, devices, n_threads, reps, n_prompt, n_gen, n_ubatch=512, echo=print):
    """Measure the pipeline; returns the result dict (the cluster is left running for the caller)."""
    from . import Pipeline
    stage_devs, gpus = stage_devices(devices)
    res = {"engine": "pyggml.dist", "address": address, "stages": n_stages, "stage_devices": stage_devs,
           "gpus_per_stage": gpus}
    t0 = time.perf_counter()
    p = Pipeline(path, n_stages, devices=stage_devs, num_cpus=1 if n_threads is None else n_threads,
                 num_gpus=gpus, n_ctx=max(n_prompt + 1, n_gen + 1), n_threads=n_threads, n_batch=n_ubatch)
    try:
        res["load_s"] = time.perf_counter() - t0
        res["ranges"] = [list(r) for r in p.ranges]
        res["stage_info"] = [{k: i[k] for k in ("layers", "host", "node_id", "devices", "weight_bytes", "load_s",
                                                 "cuda_visible_devices", "memory")} for i in p.info]
        res["n_copies"] = p.n_copies
        rng = np.random.default_rng(0)
        nv = p.hp.n_vocab
        prompt = rng.integers(3, nv, n_prompt).tolist() if n_prompt else []
        gen = rng.integers(3, nv, max(n_gen, 1)).tolist()
        if n_prompt:
            t = time.perf_counter()
            p.prefill(prompt)
            res["ttft_cold_ms"] = (time.perf_counter() - t) * 1e3
            ts = []
            for _ in range(reps):
                p.reset()
                t = time.perf_counter()
                p.prefill(prompt)
                ts.append(time.perf_counter() - t)
            res[f"pp{n_prompt}"] = _stats([n_prompt / x for x in ts])
        if n_gen:
            def tg():
                p.reset()
                p.stage_stats(clear=True)
                t = time.perf_counter()
                for tok in gen[:n_gen]:
                    p.decode(tok)
                wall = time.perf_counter() - t
                busy = sum(s["busy_s"] for s in p.stage_stats())
                return wall, busy
            tg()                                          # warm-up: plans, programs, worker caches
            walls, busys = [], []
            for _ in range(reps):
                w, b = tg()
                walls.append(w)
                busys.append(b)
            res[f"tg{n_gen}"] = _stats([n_gen / w for w in walls])
            over = [(w - b) / n_gen * 1e6 for w, b in zip(walls, busys)]
            res["stage_busy_us_per_token"] = statistics.median([b / n_gen * 1e6 for b in busys])
            res["crossing_us_per_token"] = statistics.median(over)           # wall minus the stages' compute
            res["hops_per_token"] = n_stages + 1                            # driver -> s0 -> ... -> driver
            res["us_per_hop"] = res["crossing_us_per_token"] / (n_stages + 1)
    finally:
        p.close()
    return res


def print_table(ours, ray, n_prompt, n_gen, echo=print):
    echo("| engine | devices | test | t/s | vs one process |")
    echo("|---|---|---|---:|---:|")
    for test in (f"pp{n_prompt}" if n_prompt else None, f"tg{n_gen}" if n_gen else None):
        if test is None:
            continue
        if ours and test in ours:
            echo(f"| one process | {','.join(ours['devices'])} | {test} | {ours[test]['mean']:.2f} ± "
                 f"{ours[test]['sd']:.2f} | 1.00x |")
        if test in ray:
            ratio = f"{ray[test]['mean'] / ours[test]['mean']:.2f}x" if ours and test in ours else "-"
            echo(f"| Ray, {ray['stages']} stages | {ray['stage_devices'][0]} x{ray['stages']} | {test} | "
                 f"{ray[test]['mean']:.2f} ± {ray[test]['sd']:.2f} | {ratio} |")
    echo("")
    where = [f"{a}-{b - 1} on {i['host']} ({i['devices'][0]})" for (a, b), i in zip(ray["ranges"], ray["stage_info"])]
    echo(f"- stages (layers): {', '.join(where)}")
    if "crossing_us_per_token" in ray:
        echo(f"- per token: {ray['stage_busy_us_per_token']:.0f} us in the stages + {ray['crossing_us_per_token']:.0f} us "
             f"crossing them ({ray['hops_per_token']} Ray hops, {ray['us_per_hop']:.0f} us each)")
    if "overhead_us_per_token_vs_one_process" in ray:
        echo(f"- decode step through Ray minus the one-process step: "
             f"{ray['overhead_us_per_token_vs_one_process']:.0f} us per token")


def main(args, extra, path, devices, reps):
    """Entry from bench_model.main with --ray: one -p and one -n, no --depth."""
    from ..bench_model import _loadavg, bench_models, default_n_ctx, make_tests
    from ..errors import PyggmlError
    from . import connect
    if len(extra.n_prompt) > 1 or len(extra.n_gen) > 1 or extra.depth != [0]:
        print("pyggml bench --ray: one -p and one -n value, and no --depth", file=sys.stderr)
        return 2
    n_prompt, n_gen = extra.n_prompt[0], extra.n_gen[0]
    n_stages = extra.stages
    ours = None
    try:
        if not extra.no_peer:
            tests = make_tests([n_prompt], [n_gen], [0])
            ours = bench_models(path, devices, args.threads, reps, tests, default_n_ctx(tests), peer=False,
                                n_ubatch=extra.n_ubatch)[0]
        gpus = stage_devices(devices)[1]
        local = dict(n_nodes=1, num_cpus=n_stages * (args.threads or 1), num_gpus=n_stages) if gpus else \
            dict(n_nodes=n_stages, num_cpus=args.threads or 1)
        t = time.perf_counter()
        cluster = connect(extra.ray, **local) if extra.ray == "local" else connect(extra.ray)
        start_s = time.perf_counter() - t
        try:
            ray = bench_ray(path, extra.ray, n_stages, devices, args.threads, reps, n_prompt, n_gen,
                            n_ubatch=extra.n_ubatch)
        finally:
            if cluster is not None:
                cluster.shutdown()
        ray["cluster_start_s"] = start_s
        tg = f"tg{n_gen}"
        if ours and tg in ours and tg in ray:
            ray["overhead_us_per_token_vs_one_process"] = 1e6 / ray[tg]["mean"] - 1e6 / ours[tg]["mean"]
    except PyggmlError as e:
        print(f"pyggml bench: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print_table(ours, ray, n_prompt, n_gen)
    if args.output:
        from ..bench_ops import write_json
        row = {"model_file": os.path.abspath(path), "n_prompt": n_prompt, "n_gen": n_gen, "reps": reps,
               "n_ubatch": extra.n_ubatch, "loadavg": _loadavg(), "pyggml": ours, "ray": ray}
        for t in (f"pp{n_prompt}", f"tg{n_gen}"):
            if ours and t in ours and t in ray:
                row[f"ratio_{t}"] = ray[t]["mean"] / ours[t]["mean"]
        tag = "_".join(d.replace(":", "") for d in devices) + f"_ray{n_stages}"
        out = write_json([row], args.output, tag, args.threads, " ".join(sys.argv), kind="model")
        print(f"\nresults: {out}")
    return 0
