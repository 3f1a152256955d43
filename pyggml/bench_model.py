"""`pyggml bench -m MODEL.gguf`: a GGUF model benchmark with llama-bench conventions.

    pyggml bench -m model.gguf [-d cpu] [-t 2] [-r 5] [-p 512] [-n 128] [--attn flash|softmax]
    pyggml bench -m synth:tiny:q4_0          # a synthetic model, generated once and cached

pp<P>: prefill of P tokens from an empty context; tg<N>: N single-token decodes from an empty
context. One warm-up run, then `reps` timed runs; mean ± sd of tokens/s. Also measured: the load
(time and peak resident memory against the file size: weights go from the mmap to the device
buffers without a host copy), time to first token (cold: the first prefill after load, with its
planning; warm: a prefill of P tokens with its last-token logits read back), host
synchronizations and host time per decoded token (Scheduler.last_run), and the overall peak RSS.
When llama-cpp-python is importable, the same file runs through llama.cpp in the same process
with the same thread count and the table gains its figures and the ratios.
Results: a Markdown table on stdout, a JSON file under bench/results/ (machine and commit included).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import numpy as np

SYNTH_PREFIX = "synth:"


def cache_dir():
    d = os.environ.get("PYGGML_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "pyggml", "models")
    os.makedirs(d, exist_ok=True)
    return d


def resolve_model(spec, quiet=False):
    """A path, or "synth:SHAPE:WTYPE[:SEED]" -> the cached synthetic model's path (written once)."""
    if not spec.startswith(SYNTH_PREFIX):
        if not os.path.exists(spec):
            raise FileNotFoundError(f"model file {spec!r} does not exist")
        return spec
    from .synth import SHAPES, SYNTH_STREAM, WTYPES, write_synth_model
    parts = spec[len(SYNTH_PREFIX):].split(":")
    shape = parts[0] if parts and parts[0] else "tiny"
    wtype = parts[1] if len(parts) > 1 else "q4_0"
    seed = int(parts[2]) if len(parts) > 2 else 0
    if shape not in SHAPES or wtype not in WTYPES:
        raise ValueError(f"{spec!r}: synth:SHAPE:WTYPE with SHAPE in {sorted(SHAPES)}, WTYPE in {WTYPES}")
    path = os.path.join(cache_dir(), f"synth-{shape}-{wtype}-s{seed}-u{SYNTH_STREAM}.gguf")
    if not os.path.exists(path):
        if not quiet:
            print(f"writing {path} (cached for later runs)", file=sys.stderr)
        write_synth_model(path, shape, wtype, seed, progress=not quiet)
    return path


def _stats(vals):
    return {"mean": statistics.mean(vals), "sd": statistics.stdev(vals) if len(vals) > 1 else 0.0,
            "median": statistics.median(vals), "values": vals}


def _loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return None


def bench_pyggml(path, devices, n_threads, reps, n_prompt, n_gen, attn="flash", echo=print, tensor_split=None,
                 trace=None, n_ubatch=512):
    import pyggml.models as models
    from .models.loader import reset_peak_rss, rss_bytes
    res = {"engine": "pyggml", "devices": devices, "attn": attn}
    file_size = os.path.getsize(path)
    import pyggml as pg
    pg.Scheduler(devices, n_threads=n_threads)      # plugins loaded and devices opened before the baseline
    gc.collect()
    base_rss, _ = rss_bytes()
    hwm_reset = reset_peak_rss()
    t0 = time.perf_counter()
    m = models.load(path, devices=devices, n_ctx=max(n_prompt, n_gen, 1), n_threads=n_threads, attn=attn,
                    tensor_split=tensor_split, trace=trace, n_batch=n_ubatch)
    if m.layer_devices:
        from .models.placement import summary
        res["layers"] = {d: [r.start, r.stop] for d, r in summary(m.layer_devices).items()}
    load_s = time.perf_counter() - t0
    cur, peak = rss_bytes()
    res["load"] = {"seconds": load_s, "file_bytes": file_size, "rss_before": base_rss, "rss_after": cur,
                   "peak_rss": peak if hwm_reset else None,
                   "peak_rss_over_baseline": (peak - base_rss) if hwm_reset else None,
                   "peak_over_baseline_minus_file": (peak - base_rss - file_size) if hwm_reset else None,
                   "timings": m.timings}
    hp = m.hp
    res["model"] = {"name": hp.name, "arch": hp.arch, "n_layer": hp.n_layer, "n_embd": hp.n_embd,
                    "n_head": hp.n_head, "n_head_kv": hp.n_head_kv, "n_ff": hp.n_ff, "n_vocab": hp.n_vocab,
                    "params": m.n_params, "weight_bytes": m.weight_bytes, "file_type": hp.file_type}
    rng = np.random.default_rng(0)
    prompt = rng.integers(3, hp.n_vocab, n_prompt).tolist() if n_prompt else []
    gen = rng.integers(3, hp.n_vocab, max(n_gen, 1)).tolist()

    if n_prompt:
        m.reset()
        t = time.perf_counter()
        m.prefill(prompt)
        res["ttft_cold_ms"] = (time.perf_counter() - t) * 1e3      # first prefill: plans and programs too
        ts = []
        for _ in range(reps):
            m.reset()
            t = time.perf_counter()
            m.prefill(prompt)
            ts.append(time.perf_counter() - t)
        res[f"pp{n_prompt}"] = _stats([n_prompt / x for x in ts])
        res["ttft_ms"] = _stats([x * 1e3 for x in ts])
        res["pp_host_syncs"] = m.sched.last_run.host_syncs

    if n_gen:
        def tg():
            m.reset()
            syncs, host_us, sched_us, wall = [], [], [], []
            t_all = time.perf_counter()
            for tok in gen[:n_gen]:
                t = time.perf_counter()
                m.decode(tok)
                wall.append(time.perf_counter() - t)
                lr = m.sched.last_run
                syncs.append(lr.host_syncs)
                host_us.append(lr.host_time_us)
                sched_us.append(lr.total_time_us)
            return time.perf_counter() - t_all, syncs, host_us, sched_us, wall
        tg()                                                        # warm-up
        plans = dict(m.sched.stats)
        ts, syncs, host_us, model_us = [], [], [], []
        for _ in range(reps):
            total, s, h, sc, w = tg()
            ts.append(total)
            syncs += s
            host_us += h
            model_us += [(wi * 1e6 - si) for wi, si in zip(w, sc)]
        res[f"tg{n_gen}"] = _stats([n_gen / x for x in ts])
        res["host_syncs_per_token"] = statistics.mean(syncs)
        res["sched_host_us_per_token"] = statistics.mean(host_us)      # scheduler time outside the backends
        res["model_host_us_per_token"] = statistics.mean(model_us)     # Model.decode's own Python around it
        res["decode_replans"] = m.sched.stats["plans"] - plans["plans"]
        res["decode_new_allocs"] = m.sched.stats["buffer_allocs"] - plans["buffer_allocs"]
        res["sync_pattern"] = m.sched.last_run.sync_pattern
    res["peak_rss"] = rss_bytes()[1]
    res["sched_stats"] = dict(m.sched.stats)
    res["memory"] = m.sched.memory_by_device()
    m.close()
    del m
    gc.collect()
    return res


def bench_llama_cpp(path, n_threads, reps, n_prompt, n_gen):
    """The same measurements through llama-cpp-python (None when it is not importable)."""
    try:
        import llama_cpp
    except ImportError:
        return None
    from .models.loader import rss_bytes, reset_peak_rss
    res = {"engine": "llama.cpp", "version": getattr(llama_cpp, "__version__", "?")}
    base, _ = rss_bytes()
    ok = reset_peak_rss()
    t0 = time.perf_counter()
    kw = dict(model_path=path, n_ctx=max(n_prompt, n_gen, 1), n_batch=max(n_prompt, 1),
              n_threads=n_threads or os.cpu_count(), n_threads_batch=n_threads or os.cpu_count(),
              verbose=False, use_mmap=True)
    try:
        llm = llama_cpp.Llama(flash_attn=True, **kw)         # the same attention path as ours
        res["flash_attn"] = True
    except TypeError:                                       # a version without the switch
        llm = llama_cpp.Llama(**kw)
        res["flash_attn"] = None
    cur, peak = rss_bytes()
    res["load"] = {"seconds": time.perf_counter() - t0, "peak_rss_over_baseline": (peak - base) if ok else None,
                   "rss_after": cur}
    rng = np.random.default_rng(0)
    nv = llm.n_vocab()
    prompt = rng.integers(3, nv, n_prompt).tolist() if n_prompt else []
    gen = rng.integers(3, nv, max(n_gen, 1)).tolist()
    if n_prompt:
        ts = []
        for i in range(reps + 1):
            llm.reset()                 # n_tokens = 0: eval() then drops every cached cell
            t = time.perf_counter()
            llm.eval(prompt)
            if i:
                ts.append(time.perf_counter() - t)
        res[f"pp{n_prompt}"] = _stats([n_prompt / x for x in ts])
        res["ttft_ms"] = _stats([x * 1e3 for x in ts])
    if n_gen:
        ts = []
        for i in range(reps + 1):
            llm.reset()                 # n_tokens = 0: eval() then drops every cached cell
            t = time.perf_counter()
            for tok in gen[:n_gen]:
                llm.eval([tok])
            if i:
                ts.append(time.perf_counter() - t)
        res[f"tg{n_gen}"] = _stats([n_gen / x for x in ts])
    res["peak_rss"] = rss_bytes()[1]
    del llm
    gc.collect()
    return res


def _gb(x):
    return f"{x / 2**30:.2f} GiB" if x >= 2**30 else f"{x / 2**20:.1f} MiB"


def print_table(path, n_threads, ours, peer, n_prompt, n_gen, echo=print):
    mdl = ours["model"]
    size = _gb(mdl["weight_bytes"])
    params = f"{mdl['params'] / 1e9:.2f} B" if mdl["params"] >= 1e8 else f"{mdl['params'] / 1e6:.1f} M"
    name = os.path.basename(path)
    echo(f"| model | size | params | backend | threads | test | t/s | llama.cpp t/s | ratio |")
    echo("|---|---:|---:|---|---:|---|---:|---:|---:|")
    for test in [f"pp{n_prompt}" if n_prompt else None, f"tg{n_gen}" if n_gen else None]:
        if test is None or test not in ours:
            continue
        r = ours[test]
        if peer and test in peer:
            p = peer[test]
            pc, ratio = f"{p['mean']:.2f} ± {p['sd']:.2f}", f"{r['mean'] / p['mean']:.2f}x"
        else:
            pc, ratio = "-", "-"
        echo(f"| {name} | {size} | {params} | {','.join(ours['devices'])} | {n_threads or '-'} | {test} | "
             f"{r['mean']:.2f} ± {r['sd']:.2f} | {pc} | {ratio} |")
    echo("")
    ld = ours["load"]
    lines = [("load", f"{ld['seconds']:.2f} s ({ld['file_bytes'] / ld['seconds'] / 1e6:.0f} MB/s)")]
    if ld["peak_rss_over_baseline"] is not None:
        lines.append(("peak RSS during load (over baseline)",
                      f"{_gb(ld['peak_rss_over_baseline'])} for a {_gb(ld['file_bytes'])} file "
                      f"({ld['peak_rss_over_baseline'] / ld['file_bytes']:.3f}x; "
                      f"excess over file size {ld['peak_over_baseline_minus_file'] / 2**20:+.1f} MiB)"))
    if "ttft_ms" in ours:
        lines.append(("time to first token", f"{ours['ttft_ms']['mean']:.1f} ± {ours['ttft_ms']['sd']:.1f} ms "
                      f"(cold, with planning: {ours['ttft_cold_ms']:.1f} ms)"))
    if "host_syncs_per_token" in ours:
        lines.append(("host syncs per decoded token", f"{ours['host_syncs_per_token']:.2f} "
                      f"(pattern {ours['sync_pattern']!r})"))
        lines.append(("host time per token outside the backends",
                      f"{ours['sched_host_us_per_token']:.0f} us scheduler + {ours['model_host_us_per_token']:.0f} us "
                      f"Model.decode"))
        lines.append(("decode re-plans / new buffers", f"{ours['decode_replans']} / {ours['decode_new_allocs']}"))
    if "layers" in ours:
        lines.append(("layers", ", ".join(f"{d}: {a}-{b - 1}" for d, (a, b) in ours["layers"].items())))
    if "memory" in ours:
        lines.append(("memory per device", ", ".join(f"{d}: {_gb(v['weights'])} weights + {_gb(v['graph'])} graph"
                                                     for d, v in ours["memory"].items() if v["weights"] or v["graph"])))
    lines.append(("peak RSS (whole run)", _gb(ours["peak_rss"])))
    if peer:
        pl = peer["load"]
        lines.append(("llama.cpp load", f"{pl['seconds']:.2f} s, peak RSS over baseline "
                      f"{_gb(pl['peak_rss_over_baseline']) if pl['peak_rss_over_baseline'] is not None else '?'}"))
    elif peer is None:
        lines.append(("llama.cpp", "not measured (llama-cpp-python not importable; `make bench-llamacpp`)"))
    for k, v in lines:
        echo(f"- {k}: {v}")


def add_model_arguments(ap):
    """The model options of `pyggml bench` (used with -m)."""
    g = ap.add_argument_group("model benchmark (with -m)")
    g.add_argument("-p", "--n-prompt", type=int, default=512, metavar="N", help="prompt tokens for ppN (default 512)")
    g.add_argument("-n", "--n-gen", type=int, default=128, metavar="N", help="decoded tokens for tgN (default 128)")
    g.add_argument("--attn", default="flash", choices=("flash", "softmax"), help="attention graph (default flash)")
    g.add_argument("--no-peer", action="store_true", help="do not run llama.cpp even if importable")
    g.add_argument("-ts", "--tensor-split", default=None,
                   help="layer proportions per device, e.g. 1,1 (default: the GPUs by free memory)")
    g.add_argument("-ub", "--n-ubatch", type=int, default=512, help="prefill micro-batch (pipelined over devices)")
    g.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace of every run to this file")
    g.add_argument("--peer-only", action="store_true", help=argparse.SUPPRESS)
    g.add_argument("--ray", default=None, metavar="ADDRESS",
                   help="also run as pipeline stages on the Ray cluster at ADDRESS ('local' starts one): pyggml.dist")
    g.add_argument("--stages", type=int, default=2, help="pipeline stages with --ray")


def main(args):
    """Entry from `pyggml bench -m`: args has model, device, threads, reps, output and the options
    add_model_arguments declares."""
    extra = args
    try:
        path = resolve_model(args.model)
    except (FileNotFoundError, ValueError) as e:
        print(f"pyggml bench: {e}", file=sys.stderr)
        return 2
    devices = [d for d in str(args.device).split(",") if d]
    reps = max(1, int(args.reps))
    if extra.ray:
        from .dist.bench import main as ray_main
        return ray_main(args, extra, path, devices, reps)
    from .errors import PyggmlError
    try:
        ts = [float(x) for x in extra.tensor_split.split(",")] if extra.tensor_split else None
        ours = bench_pyggml(path, devices, args.threads, reps, extra.n_prompt, extra.n_gen, extra.attn,
                            tensor_split=ts, trace=extra.trace, n_ubatch=extra.n_ubatch)
    except PyggmlError as e:
        print(f"pyggml bench: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    peer = None
    if not extra.no_peer and all(d.startswith("cpu") for d in devices):
        peer = bench_llama_cpp(path, args.threads, reps, extra.n_prompt, extra.n_gen)
    else:
        peer = False
    print_table(path, args.threads, ours, peer, extra.n_prompt, extra.n_gen)
    if args.output:
        from .bench_ops import write_json
        row = {"model_file": os.path.abspath(path), "n_prompt": extra.n_prompt, "n_gen": extra.n_gen, "reps": reps,
               "loadavg": _loadavg(), "pyggml": ours, "llama_cpp": peer or None}
        if peer:
            for t in (f"pp{extra.n_prompt}", f"tg{extra.n_gen}"):
                if t in ours and t in peer:
                    row[f"ratio_{t}"] = ours[t]["mean"] / peer[t]["mean"]
        tag = "_".join(d.replace(":", "") for d in devices)      # a file name without ',' or ':'
        out = write_json([row], args.output, tag, args.threads, " ".join(sys.argv), kind="model")
        print(f"\nresults: {out}")
    return 0
