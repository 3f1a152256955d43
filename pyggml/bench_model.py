"""`pyggml bench -m MODEL.gguf`: a GGUF model benchmark with llama-bench conventions.

    pyggml bench -m model.gguf [-d cpu] [-t 2] [-r 5] [-p 512[,4096]] [-n 128] [--depth 0,4096,16384]
                 [--n-ctx N] [--attn flash|softmax] [-ts 1,1] [-ub 512] [--trace FILE]
                 [--llama-bench PATH] [--no-peer] [-O DEVICE:KEY=VALUE]
    pyggml bench -m synth:tiny:q4_0          # a synthetic model, generated once and cached

pp<P>: prefill of P tokens; tg<N>: N single-token decodes; with --depth D they run after a context
of D tokens (named like llama-bench: `pp512 @ d4096`, `tg128 @ d4096`; the depth prefill is not
timed). Every test: one warm-up run, then `reps` timed runs; mean ± sd of tokens/s, ratios on the
medians. The model loads once with n_ctx = max(D + max(P, N)) padded to 256 (or --n-ctx) and the
context goes back to its D depth tokens before each run (the cells past D are dropped, as
llama.cpp's eval drops the cells past n_tokens). With the in-process peer the two engines
alternate run by run (warm-ups first), so both see the same load on a shared machine. Also
measured: the load (time and peak resident memory against the file size: weights go from the mmap
to the device buffers without a host copy),
time to first token (cold: the first prefill after load, with its planning; warm: a prefill of P
tokens with its last-token logits read back), host synchronizations and host time per decoded token
(Scheduler.last_run), and the overall peak RSS.
The llama.cpp peer runs the same tests on the same file: on the CPU through llama-cpp-python in the
same process (same thread count and n_ctx, flash attention on) when it is importable; anywhere
through a llama-bench binary given with --llama-bench (`-fa 1`, `-ngl 99` for GPU devices, `-d` for
depth; its own n_ctx per test, as llama-bench sizes it).
Several devices: the layers split by free memory or -ts, prefill micro-batches of -ub tokens pipelined
over them; the layer ranges and each device's memory are reported. -O DEVICE:KEY=VALUE (the CLI's)
sets device options before anything runs; the JSON records them. --ray ADDRESS: the model as
pipeline stages (pyggml/dist/bench.py; one -p, one -n, no --depth).
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


def parse_counts(text, what):
    """"512,4096" -> [512, 4096] (each >= 0)."""
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not a comma-separated list of integers") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} needs one or more counts >= 0")
    return vals


def label(kind, n, depth):
    """llama-bench's test names: pp512, tg128, pp512 @ d4096."""
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def make_tests(prompts, gens, depths):
    """[(kind, n, depth)]: every pp then every tg, each at every depth (llama-bench's order)."""
    return [("pp", p, d) for p in prompts if p for d in depths] + [("tg", n, d) for n in gens if n for d in depths]


def default_n_ctx(tests):
    """What the tests need (depth + tokens), padded to whole KV extents as the model pads them."""
    from .models.llama import KV_PAD
    need = max([d + n for _, n, d in tests] or [1])
    return -(-need // KV_PAD) * KV_PAD


def _tokens(n_vocab, tests):
    """The same token streams for both engines: depth, prompt and generated tokens."""
    rng = np.random.default_rng(0)
    n_depth = max([d for _, _, d in tests] or [0])
    n_p = max([n for k, n, _ in tests if k == "pp"] or [0])
    n_g = max([n for k, n, _ in tests if k == "tg"] or [1])
    return (rng.integers(3, n_vocab, n_depth).tolist(), rng.integers(3, n_vocab, n_p).tolist(),
            rng.integers(3, n_vocab, n_g).tolist())


class OursEngine:
    """pyggml on `devices`: load(), then run(kind, n, depth) -> seconds of one timed run."""

    def __init__(self, path, devices, n_threads, tests, n_ctx, attn="flash", tensor_split=None, trace=None,
                 n_ubatch=512):
        import pyggml.models as models
        from .models.loader import reset_peak_rss, rss_bytes
        self.res = res = {"engine": "pyggml", "devices": devices, "attn": attn, "n_ctx": n_ctx}
        file_size = os.path.getsize(path)
        import pyggml as pg
        pg.Scheduler(devices, n_threads=n_threads)      # plugins loaded and devices opened before the baseline
        gc.collect()
        base_rss, _ = rss_bytes()
        hwm_reset = reset_peak_rss()
        t0 = time.perf_counter()
        self.m = m = models.load(path, devices=devices, n_ctx=n_ctx, n_threads=n_threads, attn=attn,
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
        self.depth_toks, self.prompt, self.gen = _tokens(hp.n_vocab, tests)
        self.extra = {}          # test name -> per-run lists (host syncs, host times)

    def at_depth(self, d):
        """The context holds the first d depth tokens (cells past them are dropped, not recomputed)."""
        m = self.m
        if m.n_past >= d and m.tokens[:d] == self.depth_toks[:d]:
            m.n_past = d
            del m.tokens[d:]
        else:
            m.reset()
            if d:
                m.prefill(self.depth_toks[:d])

    def run(self, kind, n, d, timed):
        m = self.m
        self.at_depth(d)
        if timed and kind == "tg" and label(kind, n, d) not in self.extra:
            self.extra[label(kind, n, d)] = {"before": dict(m.sched.stats), "syncs": [], "host_us": [], "model_us": []}
        if kind == "pp":
            t = time.perf_counter()
            m.prefill(self.prompt[:n])
            dt = time.perf_counter() - t
            if d == 0 and "ttft_cold_ms" not in self.res:
                self.res["ttft_cold_ms"] = dt * 1e3      # the first prefill: plans and programs too
            return dt
        ex = self.extra.get(label(kind, n, d)) if timed else None
        t_all = time.perf_counter()
        for tok in self.gen[:n]:
            t = time.perf_counter()
            m.decode(tok)
            if ex is not None:
                lr = m.sched.last_run
                ex["syncs"].append(lr.host_syncs)
                ex["host_us"].append(lr.host_time_us)
                ex["model_us"].append((time.perf_counter() - t) * 1e6 - lr.total_time_us)
        dt = time.perf_counter() - t_all
        if ex is not None:
            ex["after"] = dict(m.sched.stats)
        return dt

    def finish(self, tests, times):
        """The result dict: stats per test (from `times`: test name -> seconds per timed run)."""
        from .models.loader import rss_bytes
        res, m = self.res, self.m
        for kind, n, d in tests:
            name = label(kind, n, d)
            if name not in times:
                continue
            st = res[name] = _stats([n / x for x in times[name]])
            if kind == "pp":
                st["ttft_ms"] = _stats([x * 1e3 for x in times[name]])
                if d == 0 and "ttft_ms" not in res:
                    res["ttft_ms"] = st["ttft_ms"]
                continue
            ex = self.extra[name]
            st["host_syncs_per_token"] = statistics.mean(ex["syncs"])
            st["sched_host_us_per_token"] = statistics.mean(ex["host_us"])   # scheduler time outside the backends
            st["model_host_us_per_token"] = statistics.mean(ex["model_us"])  # Model.decode's own Python around it
            st["sync_pattern"] = m.sched.last_run.sync_pattern
            # plans and buffers made during the timed runs (the warm-up built every forward): none expected
            st["decode_replans"] = ex["after"]["plans"] - ex["before"]["plans"]
            st["decode_new_allocs"] = ex["after"]["buffer_allocs"] - ex["before"]["buffer_allocs"]
            if "host_syncs_per_token" not in res:
                for k in ("host_syncs_per_token", "sched_host_us_per_token", "model_host_us_per_token", "sync_pattern",
                          "decode_replans", "decode_new_allocs"):
                    res[k] = st[k]
        res["forwards"] = sorted(f"T={k[0]}{' all' if k[1] else ''} n_kv={k[2]}" for k in m._forwards)
        res["peak_rss"] = rss_bytes()[1]
        res["sched_stats"] = dict(m.sched.stats)
        res["memory"] = m.sched.memory_by_device()
        m.close()
        self.m = None
        gc.collect()
        return res


class LlamaCppEngine:
    """llama.cpp through llama-cpp-python in this process (same threads, n_ctx, flash attention)."""

    def __init__(self, llama_cpp, path, n_threads, tests, n_ctx):
        from .models.loader import rss_bytes, reset_peak_rss
        self.res = res = {"engine": "llama.cpp", "via": "llama-cpp-python",
                          "version": getattr(llama_cpp, "__version__", "?"), "n_ctx": n_ctx}
        base, _ = rss_bytes()
        ok = reset_peak_rss()
        t0 = time.perf_counter()
        n_batch = max([512] + [n for k, n, _ in tests if k == "pp"])
        kw = dict(model_path=path, n_ctx=n_ctx, n_batch=n_batch,
                  n_threads=n_threads or os.cpu_count(), n_threads_batch=n_threads or os.cpu_count(),
                  verbose=False, use_mmap=True)
        try:
            self.llm = llama_cpp.Llama(flash_attn=True, **kw)         # the same attention path as ours
            res["flash_attn"] = True
        except TypeError:                                            # a version without the switch
            self.llm = llama_cpp.Llama(**kw)
            res["flash_attn"] = None
        cur, peak = rss_bytes()
        res["load"] = {"seconds": time.perf_counter() - t0, "peak_rss_over_baseline": (peak - base) if ok else None,
                       "rss_after": cur}
        self.depth_toks, self.prompt, self.gen = _tokens(self.llm.n_vocab(), tests)

    def at_depth(self, d):
        """llm.n_tokens = d: eval() drops the cells past it (the depth prefill once, untimed)."""
        llm = self.llm
        if llm.n_tokens >= d and list(llm.input_ids[:d]) == self.depth_toks[:d]:
            llm.n_tokens = d
        else:
            llm.reset()
            if d:
                llm.eval(self.depth_toks[:d])

    def run(self, kind, n, d, timed):
        self.at_depth(d)
        t = time.perf_counter()
        if kind == "pp":
            self.llm.eval(self.prompt[:n])
        else:
            for tok in self.gen[:n]:
                self.llm.eval([tok])
        return time.perf_counter() - t

    def finish(self, tests, times):
        from .models.loader import rss_bytes
        for kind, n, d in tests:
            name = label(kind, n, d)
            if name in times:
                self.res[name] = _stats([n / x for x in times[name]])
        self.res["peak_rss"] = rss_bytes()[1]
        self.llm = None
        gc.collect()
        return self.res


def run_interleaved(engines, tests, reps):
    """Every test: one warm-up run per engine, then `reps` rounds in which each engine runs once,
    so both see the same machine load (this machine is shared). Depth-0 pp tests come first (the
    first prefill after load is the cold time to first token). Returns per engine {test: [s]}."""
    times = [{} for _ in engines]
    for kind, n, d in sorted(tests, key=lambda t: (t[2] != 0, t[0] != "pp")):
        name = label(kind, n, d)
        for e in engines:
            e.run(kind, n, d, timed=False)
        for _ in range(reps):
            for e, tm in zip(engines, times):
                tm.setdefault(name, []).append(e.run(kind, n, d, timed=True))
    return times


def bench_models(path, devices, n_threads, reps, tests, n_ctx, attn="flash", peer=True, tensor_split=None,
                 trace=None, n_ubatch=512):
    """Ours, and llama.cpp through llama-cpp-python when `peer` and it is importable (CPU devices),
    interleaved. Returns (ours, peer result, None when not importable, or False when not asked)."""
    ours = OursEngine(path, devices, n_threads, tests, n_ctx, attn, tensor_split, trace, n_ubatch)
    engines = [ours]
    peer_res = False
    if peer:
        try:
            import llama_cpp
        except ImportError:
            llama_cpp = None
        peer_res = None
        if llama_cpp is not None:
            engines.append(LlamaCppEngine(llama_cpp, path, n_threads, tests, n_ctx))
    times = run_interleaved(engines, tests, reps)
    res = [e.finish(tests, t) for e, t in zip(engines, times)]
    return res[0], (res[1] if len(res) > 1 else peer_res)


def bench_llama_bench(exe, path, devices, n_threads, reps, tests):
    """The same tests through a llama-bench binary (-o json), its figures mapped to our test names."""
    import json
    import subprocess
    ps = sorted({n for k, n, _ in tests if k == "pp"})
    ns = sorted({n for k, n, _ in tests if k == "tg"})
    ds = sorted({d for _, _, d in tests})
    gpu = not all(d.startswith("cpu") for d in devices)
    cmd = [exe, "-m", path, "-p", ",".join(map(str, ps)) or "0", "-n", ",".join(map(str, ns)) or "0",
           "-d", ",".join(map(str, ds)), "-r", str(reps), "-fa", "1", "-o", "json", "-ngl", "99" if gpu else "0"]
    if n_threads:
        cmd += ["-t", str(n_threads)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()[-2000:]}")
    res = {"engine": "llama.cpp", "via": "llama-bench", "command": " ".join(cmd),
           "seconds": time.perf_counter() - t0}
    for row in json.loads(out.stdout):
        p, g, d = int(row.get("n_prompt", 0)), int(row.get("n_gen", 0)), int(row.get("n_depth", 0))
        name = label("pp", p, d) if p and not g else label("tg", g, d) if g and not p else None
        if name is None:
            continue
        vals = [float(x) for x in row.get("samples_ts") or [row["avg_ts"]]]
        res[name] = _stats(vals)
        res.setdefault("build", {k: row.get(k) for k in ("build_commit", "build_number", "backends", "gpu_info",
                                                         "cpu_info", "n_threads", "n_batch", "n_ubatch")})
    return res


def _gb(x):
    return f"{x / 2**30:.2f} GiB" if x >= 2**30 else f"{x / 2**20:.1f} MiB"


def paired_ratio(ours, peer):
    """Median of the per-round ratios of two interleaved runs (round i of both saw the same load), or
    None when the rounds do not pair (a peer run in another process: llama-bench)."""
    a, b = ours.get("values") or [], peer.get("values") or []
    if not a or len(a) != len(b) or not all(b):
        return None
    return statistics.median(x / y for x, y in zip(a, b))


def print_table(path, n_threads, ours, peer, tests, echo=print, paired=False):
    """The llama-bench-like table; with `paired` (the peer ran interleaved in this process) the ratio
    column adds the median of the per-round ratios, which a load change during the run moves less."""
    mdl = ours["model"]
    size = _gb(mdl["weight_bytes"])
    params = f"{mdl['params'] / 1e9:.2f} B" if mdl["params"] >= 1e8 else f"{mdl['params'] / 1e6:.1f} M"
    name = os.path.basename(path)
    echo("| model | size | params | backend | threads | test | t/s | llama.cpp t/s | ratio (medians"
         + ("; paired rounds" if paired else "") + ") |")
    echo("|---|---:|---:|---|---:|---|---:|---:|---:|")
    for test in [label(*t) for t in tests]:
        if test not in ours:
            continue
        r = ours[test]
        if peer and test in peer:
            p = peer[test]
            pc, ratio = f"{p['mean']:.2f} ± {p['sd']:.2f}", f"{r['median'] / p['median']:.2f}x"
            pr = paired_ratio(r, p) if paired else None
            if pr is not None:
                ratio += f"; {pr:.2f}x"
        else:
            pc, ratio = "-", "-"
        echo(f"| {name} | {size} | {params} | {','.join(ours['devices'])} | {n_threads or '-'} | {test} | "
             f"{r['mean']:.2f} ± {r['sd']:.2f} | {pc} | {ratio} |")
    echo("")
    ld = ours["load"]
    lines = [("load", f"{ld['seconds']:.2f} s ({ld['file_bytes'] / ld['seconds'] / 1e6:.0f} MB/s), n_ctx {ours['n_ctx']}")]
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
    lines.append(("forwards built (T, attended cells)", ", ".join(ours["forwards"])))
    if "layers" in ours:
        lines.append(("layers", ", ".join(f"{d}: {a}-{b - 1}" for d, (a, b) in ours["layers"].items())))
    if "memory" in ours:
        lines.append(("memory per device", ", ".join(f"{d}: {_gb(v['weights'])} weights + {_gb(v['graph'])} graph"
                                                     for d, v in ours["memory"].items() if v["weights"] or v["graph"])))
    lines.append(("peak RSS (whole run)", _gb(ours["peak_rss"])))
    if peer and "load" in peer:
        pl = peer["load"]
        lines.append(("llama.cpp load", f"{pl['seconds']:.2f} s, peak RSS over baseline "
                      f"{_gb(pl['peak_rss_over_baseline']) if pl['peak_rss_over_baseline'] is not None else '?'}"))
    elif peer:
        lines.append(("llama.cpp", f"through `{peer['command']}`"))
    elif peer is None:
        lines.append(("llama.cpp", "not measured (llama-cpp-python not importable; `make bench-llamacpp`, "
                                   "or --llama-bench PATH)"))
    for k, v in lines:
        echo(f"- {k}: {v}")


def add_model_arguments(ap):
    """The model options of `pyggml bench` (used with -m)."""
    g = ap.add_argument_group("model benchmark (with -m)")
    g.add_argument("-p", "--n-prompt", type=lambda x: parse_counts(x, "-p"), default=[512], metavar="N[,N..]",
                   help="prompt lengths for ppN, comma-separated (default 512; 0: no pp test)")
    g.add_argument("-n", "--n-gen", type=lambda x: parse_counts(x, "-n"), default=[128], metavar="N[,N..]",
                   help="decoded tokens for tgN, comma-separated (default 128; 0: no tg test)")
    g.add_argument("--depth", type=lambda x: parse_counts(x, "--depth"), default=[0], metavar="D[,D..]",
                   help="context depths the tests run after, comma-separated (llama-bench's -d; default 0)")
    g.add_argument("--n-ctx", type=int, default=None,
                   help="KV cache length (default: the largest depth + tokens of a test, padded to 256)")
    g.add_argument("--attn", default="flash", choices=("flash", "softmax"), help="attention graph (default flash)")
    g.add_argument("--llama-bench", default=None, metavar="PATH",
                   help="the llama.cpp peer through this llama-bench binary (any device)")
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
    tests = make_tests(extra.n_prompt, extra.n_gen, extra.depth)
    if not tests:
        print("pyggml bench: no tests (-p and -n are all 0)", file=sys.stderr)
        return 2
    n_ctx = extra.n_ctx or default_n_ctx(tests)
    if n_ctx < max(d + n for _, n, d in tests):
        print(f"pyggml bench: --n-ctx {n_ctx} is smaller than a test's depth + tokens", file=sys.stderr)
        return 2
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
    in_process_peer = not extra.no_peer and not extra.llama_bench and all(d.startswith("cpu") for d in devices)
    try:
        ts = [float(x) for x in extra.tensor_split.split(",")] if extra.tensor_split else None
        ours, peer = bench_models(path, devices, args.threads, reps, tests, n_ctx, extra.attn, in_process_peer,
                                  tensor_split=ts, trace=extra.trace, n_ubatch=extra.n_ubatch)
    except PyggmlError as e:
        print(f"pyggml bench: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if extra.llama_bench and not extra.no_peer:
        try:
            peer = bench_llama_bench(extra.llama_bench, path, devices, args.threads, reps, tests)
        except (OSError, RuntimeError, ValueError) as e:
            print(f"pyggml bench: the llama-bench peer failed: {e}", file=sys.stderr)
    interleaved = bool(in_process_peer and peer and not extra.llama_bench)
    print_table(path, args.threads, ours, peer, tests, paired=interleaved)
    if args.output:
        from .bench_ops import write_json
        rows = []
        for t in tests:
            name = label(*t)
            row = {"test": name, "kind": t[0], "n": t[1], "depth": t[2], "pyggml": ours.get(name),
                   "llama_cpp": peer.get(name) if peer else None}
            if row["pyggml"] and row["llama_cpp"]:
                row["ratio_median"] = row["pyggml"]["median"] / row["llama_cpp"]["median"]
                row["ratio_mean"] = row["pyggml"]["mean"] / row["llama_cpp"]["mean"]
                if interleaved:
                    row["ratio_paired_median"] = paired_ratio(row["pyggml"], row["llama_cpp"])
            rows.append(row)
        doc = {"model_file": os.path.abspath(path), "n_prompt": extra.n_prompt, "n_gen": extra.n_gen,
               "device_options": list(getattr(args, "option", None) or []),      # -O DEVICE:KEY=VALUE
               "depths": extra.depth, "n_ctx": n_ctx, "reps": reps, "loadavg": _loadavg(), "tests": rows,
               "pyggml": ours, "llama_cpp": peer or None}
        tag = "_".join(d.replace(":", "") for d in devices)      # a file name without ',' or ':'
        out = write_json([doc], args.output, tag, args.threads, " ".join(sys.argv), kind="model")
        print(f"\nresults: {out}")
    return 0
