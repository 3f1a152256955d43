"""Vulkan next to CUDA in one run: model benchmarks and per-kernel GPU times (scripts/gpu_vulkan.sh).

    python3 scripts/vulkan_vs_cuda.py bench   --out DIR [--models synth:1b:q4_0 ...] [--reps 3]
    python3 scripts/vulkan_vs_cuda.py profile --out DIR [--models synth:1b:q4_0 ...] [--steps 32]

bench: pp512 / tg128 (pyggml.bench_model.bench_models, the code behind `pyggml bench`) on
cuda:0,cpu and on vulkan:0,cpu with the Vulkan kernel options of each variant (new: the defaults;
old: matvec=1 gemm=tiled fa=scalar norm_v=1, the kernels before issue 18; norm1: the earlier
workgroup layer norm; mv3r8 / mv3r32: mul_mat_vec3 with 8 / 32 rows per workgroup instead of 16;
rows1/rows4: mul_mat_vec2's rows per subgroup; tile64: the GEMM's smaller tile; fakd: fa_v=2,
flash_attn2; fadec: fa_v=3, flash_attn_dec.comp, the decode attention with its KV split's merge
folded in and every load of a chunk issued up front (the default since 7942149's H200 run); fa1:
fa_v=1, the flash_attn.comp split + merge it replaced; mv3p: matvec=4, mul_mat_vec3p, the mat-vec
with the next chunk's weights loaded ahead (no faster at 7942149); ropest: fuse_rope=1, the k rope
and its cache write as one dispatch (within 1%); glu: fuse_glu=1, gate, up and swiglu as one
dispatch (slower); next: fadec + mv3p + ropest + glu, for the
profile; mv3 norm2 facm gemm3: the defaults since 1a36ae3, kept as names),
and the Vulkan / CUDA ratios. The add+norm fusion follows the device option fuse (on by default).
profile: GPU time per kernel over `--steps` decode tokens and one 512-token prefill, CUDA kernels
through torch.profiler (CUPTI) and Vulkan shaders through the plugin's timestamp queries
(device option profile=1, set here before the models load), side by side per token; Vulkan once
per --variants entry (default: new only; key "vulkan" for new, "vulkan_<variant>" for the others).
Each writes one JSON file into --out and prints a summary."""
import argparse
import json
import logging
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = {"new": {}, "old": {"matvec": "1", "gemm": "tiled", "fa": "scalar", "norm_v": "1"},
            # the earlier workgroup-per-row layer norm (norm_mul_wg.comp; the default is norm_mul_reg.comp)
            "norm1": {"norm_v": "1"}, "norm2": {"norm_v": "2"},
            # the q4_0/q8_0 decode mat-vec with the activations staged in shared memory (mul_mat_vec3.comp)
            "mv3": {"matvec": "3"}, "mv3r8": {"matvec": "3", "matvec_rows": "1"}, "mv3r32": {"matvec": "3", "matvec_rows": "4"},
            "rows1": {"matvec_rows": "1"}, "rows4": {"matvec_rows": "4"}, "tile64": {"gemm_tile": "64"},
            "tile128": {"gemm_tile": "128"},
            # the coopmat GEMM as it ran at 74f8754 (earlier build, 128x128 from 128 tokens)
            "gemm1": {"gemm_v": "1", "gemm_tile": "128"},
            # cooperative-matrix flash attention (what fa=auto picks on such devices since 1a36ae3)
            "facm": {"fa": "coopmat"},
            # the coopmat GEMM with its tiles stored as 16-byte words (mul_mat_cm3.comp; the default since 1a36ae3)
            # decode attention by eight invocations per key, subgroup reductions (flash_attn2; H200 at 8ba9c65: tg unchanged)
            "fakd": {"fa_v": "2"},
            # decode attention with the merge in the split pass, loads issued up front (flash_attn_dec;
            # the default since the H200 run at 7942149); fa1 is the earlier flash_attn.comp split + merge
            "fadec": {"fa_v": "3"},
            "fa1": {"fa_v": "1"},
            # mul_mat_vec3 with the next chunk's weights loaded ahead (mul_mat_vec3p; H200 at 7942149: no faster)
            "mv3p": {"matvec": "4"},
            # mul_mat_vec3 on int8 activations with the integer dot product (mul_mat_vec3i; not yet on a GPU)
            "mv3i": {"matvec": "5"},
            # mul_mat_vec3i with 8 / 32 rows per workgroup instead of 16
            "mv3ir8": {"matvec": "5", "matvec_rows": "1"}, "mv3ir32": {"matvec": "5", "matvec_rows": "4"},
            # mul_mat_vec3i with the whole row staged once, no barrier in the loop (mul_mat_vec3w), 16 / 8 / 32 rows
            "mv3w": {"matvec": "6"}, "mv3wr8": {"matvec": "6", "matvec_rows": "1"}, "mv3wr32": {"matvec": "6", "matvec_rows": "4"},
            # q4_0 with coalesced weight loads through each subgroup's shared memory (mul_mat_vec4), 16 / 8 / 32 rows
            "mv4": {"matvec": "7"}, "mv4r8": {"matvec": "7", "matvec_rows": "1"}, "mv4r32": {"matvec": "7", "matvec_rows": "4"},
            # the k rope and its cache write as one dispatch (rope_store; H200 at 7942149: within 1%)
            "ropest": {"fuse_rope": "1"}, "rope0": {"fuse_rope": "0"},
            # plan parameter blocks in host-visible memory (the form before params_dev)
            "phost": {"params_dev": "off"},
            # dispatches recorded in graph order (the form before reorder)
            "ord0": {"reorder": "0"},
            # gate, up and their swiglu as one dispatch (mul_mat_vec3g; H200 at 7942149: slower)
            "glu": {"fuse_glu": "1"},
            # the barrier between stages: buffer barriers on what the previous stage wrote, the
            # synchronization2 barrier with storage accesses only, an execution dependency alone
            # (measurement only: no memory dependency)
            # the swiglu and the down projection apart (the form before mul_mat_vec3s)
            "sw0": {"fuse_swiglu": "0"},
            # mat-vecs that read a layer norm's result after it, not recomputing it beside it (before mul_mat_vec3n)
            "nm0": {"fuse_norm_mv": "off", "fuse_swiglu": "1"}, "fz0": {"fuse_norm_mv": "off", "fuse_swiglu": "0"},
            "nm1": {"fuse_norm_mv": "on"}, "sw1": {"fuse_swiglu": "1"}, "fz1": {"fuse_norm_mv": "on", "fuse_swiglu": "1"},
            # the same with 32 rows per mat-vec workgroup (half the workgroups, each staging the activation row)
            "fz1r32": {"fuse_norm_mv": "on", "fuse_swiglu": "1", "matvec_rows": "4"}, "fz0r32": {"matvec_rows": "4"},
            # the arena reusing bytes two steps after their last use (the form before fuse_norm_mv)
            "lag2": {"arena_lag": "2"},
            # the KV split of decode attention capped at fewer workgroups (longer splits, fewer partials to merge)
            "faw2k": {"fa_wgs": "2048"}, "faw1k": {"fa_wgs": "1024"}, "faw512": {"fa_wgs": "512"},
            # no barriers between stages at all: results wrong by design, the time a decode would take
            # if the stages cost nothing (measurement only)
            "nobar": {"debug_drop_barriers": "1"},
            # prefill attention's first tensor-core build (flash_attn_cm.comp; fa_cm=2, flash_attn_cm2.comp, the default)
            "facm1": {"fa_cm": "1"},
            # quantized GEMM weights dequantized to f16 in the plan's scratch first (gemm_dq)
            "gdq": {"gemm_dq": "1"}, "gdq0": {"gemm_dq": "0"},
            # mul_mat_cm4's auto configuration before 2026-12-05 (64x64 tiles, two k-groups; since then
            # 128x64 / 64x128 tiles with K steps of 64 on VK_KHR_cooperative_matrix)
            "cfg0": {"gemm_cfg": "64x64.k64.w2x2.ks2", "gemm_dq": "0"},
            # the GEMMs' f32 activations converted to f16 rows first (gemm_b16; auto, the default since
            # 2026-12-05, on VK_KHR_cooperative_matrix), and the GEMMs without it
            "b16": {"gemm_b16": "1"}, "b160": {"gemm_b16": "0"},
            # q4_K decode in the int8 mat-vecs (mul_mat_vec3w, the default matvec=6) instead of mul_mat_vec2
            "mvq4k": {"matvec_q4_K": "1"},
            # the GEMMs' activation fragments loaded from gemm_b16's copy in global memory (gemm_bg)
            "bg": {"gemm_bg": "1"},
            # the whole-row mat-vecs with two units' weights in flight while the row is staged (matvec_ahead)
            "mvahead": {"matvec_ahead": "1"},
            # the fused norms write their result's int8 blocks, the mat-vecs reading it stage them (mv_q8; fuse_norm_mv off:
            # 1b's q/k/v and gate/up take this path too); mvq8a with matvec_ahead as well
            "mvq8": {"mv_q8": "1", "fuse_norm_mv": "off"}, "mvq8a": {"mv_q8": "1", "fuse_norm_mv": "off", "matvec_ahead": "1"},
            # one-column q4_0 mat-vecs on the weights' repacked copy with gate/up/swiglu as one dispatch (matvec_rp; the default
            # since 2026-12-06, where fuse_norm_mv=auto then leaves them alone); rp0: without (the defaults before)
            "rp": {"matvec_rp": "1", "fuse_norm_mv": "off"}, "rp0": {"matvec_rp": "0"},
            # the q/k/v mat-vecs with their ropes and cache writes (fuse_rope_mv, the default): rpe0 without
            "rpe0": {"fuse_rope_mv": "0"},
            # the o and down mat-vecs writing the next norm's int8 input, its readers beside the norm (fold_norm, the default
            # since the H100 run at c28e222): fn1 with it, fn0 without; fused0 without it and without fuse_rope_mv
            "fn1": {"fold_norm": "1"}, "fn0": {"fold_norm": "0"}, "fused0": {"fold_norm": "0", "fuse_rope_mv": "0"},
            # with fold_norm, the o/down mat-vec writing the residual sum and the norm's first reader the norm's nodes, so the
            # add + norm dispatch is not run (fold_nodes): fnodes with it, fnodes0 without
            "fnodes": {"fold_nodes": "1"}, "fnodes0": {"fold_nodes": "0"},
            # decode attention on flash_attn_dec2 (fa_v=4: a workgroup per query row and KV head, subgroup shuffles), about
            # 512 (fad2), 1024 (fad2w1k) or 2048 (fad2w2k) workgroups; fad3: fa_v=3's flash_attn_dec
            "fad2": {"fa_v": "4"}, "fad2w1k": {"fa_v": "4", "fa_dec_wgs": "1024"}, "fad2w2k": {"fa_v": "4", "fa_dec_wgs": "2048"},
            "fad2w256": {"fa_v": "4", "fa_dec_wgs": "256"}, "fad3": {"fa_v": "3"},
            # q4_K / q6_K decode mat-vecs on the repacked copy (rpk1: matvec_rp_k=1) or not (rpk0: mul_mat_vec2; rpk1 the default since the H100 run at e960257)
            "rpk0": {"matvec_rp_k": "0"}, "rpk1": {"matvec_rp_k": "1"},
            # the q/k/v and gate/up mat-vecs on the repacked copies recompute the layer norm they read and share its stage
            # (rp_norm_in: nin on, nina auto = rows up to 1024, the default since the H100 run at c348471 + it; nin0 off)
            "nin": {"rp_norm_in": "on"}, "nina": {"rp_norm_in": "auto"}, "nin0": {"rp_norm_in": "off"},
            # the prefill GEMM's f16 sums over 1, 2, 4 or 8 K steps (acc1, acc2, acc4, acc8: cm_acc; f16x4 the default since the H100
            # sweep at 367278b)
            "acc1": {"cm_acc": "f16"},
            # eight-subgroup GEMM tiles on one k64 stage (gemm_cfg)
            "cks2": {"gemm_cfg": "64x128.k64.w2x2.ks2.s1"}, "cw24": {"gemm_cfg": "64x128.k64.w2x4.s1"},
            "cw42": {"gemm_cfg": "128x128.k64.w4x2.s1"}, "c13": {"gemm_cfg": "64x128.k64.w2x2"}, "acc2": {"cm_acc": "f16x2"}, "acc4": {"cm_acc": "f16x4"}, "acc8": {"cm_acc": "f16x8"},
            # the fused norms write their result's int8 blocks and the repacked mat-vecs read them (mv_q8 on matvec_rp)
            # (the default since the H100 run at 9a180cd: q8rp is new, q8off without it)
            "q8rp": {"mv_q8": "1"}, "q8off": {"mv_q8": "0"},
            "bbuf": {"barrier": "buffer"}, "bsync2": {"barrier": "sync2"}, "bexec": {"barrier": "debug_exec"}, "bevent": {"barrier": "event"},
            # the four above at once: their kernels are separate shaders in a profile (flash_attn_dec
            # against flash_attn.split + .merge, mul_mat_vec3p against mul_mat_vec3, rope_store
            # against rope + set_rows, mul_mat_vec3g against two mul_mat_vec3 + elementwise.swiglu)
            "next": {"fa_v": "3", "matvec": "4", "fuse_rope": "1", "fuse_glu": "1"},
            # the configurable GEMM (mul_mat_cm4) at 64x64 tiles, K steps of 32 and 64, and the latter on
            # VK_KHR_cooperative_matrix (H200 at 9a32d3d, clocks up: 28-33 TFLOPS each, the same as mul_mat_cm3)
            "cm4": {"gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2"}, "cm4k64": {"gemm_v": "4", "gemm_cfg": "64x64.k64.w2x2"},
            "cm4k64khr": {"gemm_v": "4", "gemm_cfg": "64x64.k64.w2x2", "cm_api": "khr"},
            # the defaults before b0da051's: mul_mat_cm3 on VK_NV_cooperative_matrix with f32 accumulators
            "gemm3": {"gemm_v": "3"}, "khr32": {"cm_acc": "f32"}}
# the plugin's defaults (vk_options.c, vk_plugin.c), restored before each variant's options (and by the Vulkan tests after
# each test's options: tests/test_vulkan_kernels.py's VK_DEFAULTS): a variant may set only
# options listed here (_variant refuses others), or every variant after it would inherit its value. (Until 2026-12-07
# fa_cm_wgs, swiglu8, norm_b16 and gemm_lit were missing and fa_cm said 2: written-out variants of them leaked into the
# variants after them, and `new` ran fa_cm=2 once 3 was the default.)
DEFAULTS = {"reorder": "1", "params_dev": "auto", "fuse_rope": "1", "fuse_glu": "0", "fa_v": "0", "matvec": "6", "matvec_rows": "2", "gemm": "auto", "gemm_tile": "auto", "gemm_v": "0", "gemm_cfg": "auto", "cm_api": "auto", "cm_acc": "f16x4", "fa": "auto", "norm_v": "2", "barrier": "memory", "fuse_swiglu": "0", "fuse_norm_mv": "auto", "fa_wgs": "4096",
            "debug_drop_barriers": "0", "fa_cm": "3", "gemm_dq": "auto", "gemm_b16": "auto", "gemm_bg": "0", "matvec_q4_K": "0",
            "matvec_ahead": "0", "debug_mv_parts": "0", "mv_q8": "1", "matvec_rp": "1", "matvec_rp_k": "1", "fuse_rope_mv": "1", "fold_norm": "1", "fold_nodes": "0", "fa_dec_wgs": "512",
            "rp_norm_in": "auto", "fa_cm_wgs": "512", "fa_span": "0", "fa_acc": "f32", "swiglu8": "2", "norm_b16": "1", "gemm_lit": "1", "gemm_splitk": "256", "gemm_splitk_steps": "32", "splitk_last": "0", "fa_lit": "0", "rp_lit": "0",
            "rp_rows": "8", "fa_split": "auto", "fuse": "1", "norm_wg": "auto", "subgroups": "1", "debug_gemm_parts": "0"}


def _set_vk(pg, opts):
    """Device options from the defaults; the key "arena_lag" sets the scheduler's arena reuse lag
    (pyggml/_alloc.py REUSE_LAG) instead, for schedulers made afterwards."""
    import pyggml._alloc
    import pyggml.scheduler
    dev = pg.get_device("vulkan:0")
    opts = {**DEFAULTS, **opts}
    pyggml.scheduler.REUSE_LAG = int(opts.pop("arena_lag", pyggml._alloc.REUSE_LAG))
    for k, v in opts.items():
        dev.set_option(k, v)


def _median(stats):
    return stats.get("median", stats.get("mean")) if isinstance(stats, dict) else stats


def _merge_rounds(results):
    """bench_models results of one rep each: per key, the stats over all rounds (values in round order)"""
    import statistics
    out = dict(results[0])
    for k, v in results[0].items():
        if isinstance(v, dict) and "values" in v:
            vals = [x for r in results for x in r[k]["values"]]
            out[k] = dict(v, values=vals, median=statistics.median(vals), mean=statistics.fmean(vals),
                          sd=statistics.stdev(vals) if len(vals) > 1 else 0.0)
    return out


def bench(a, save):
    import pyggml as pg
    from pyggml.bench_model import bench_models, default_n_ctx, make_tests, resolve_model
    tests = make_tests([a.n_prompt], [a.n_gen], [0] + ([a.depth] if a.depth else []))
    rows = []
    for spec in a.models:
        path = resolve_model(spec, quiet=True)
        row = {"model": spec}
        runs = [("cuda", "cuda:0,cpu", None)] + [(f"vulkan_{v}", "vulkan:0,cpu", v) for v in a.variants]
        got, secs = {}, {}
        if a.interleave:   # round by round, every configuration once per round: drifting clocks hit them alike
            for _ in range(a.reps):
                for name, devs, variant in runs:
                    if isinstance(got.get(name), Exception):
                        continue
                    t0 = time.time()
                    try:
                        _set_vk(pg, VARIANTS[variant] if variant else {})
                        got.setdefault(name, []).append(bench_models(path, devs.split(","), None, 1, tests, default_n_ctx(tests), peer=False)[0])
                    except Exception as e:
                        got[name] = e
                    secs[name] = secs.get(name, 0.0) + time.time() - t0
            got = {k: _merge_rounds(v) if isinstance(v, list) else v for k, v in got.items()}
        for name, devs, variant in runs:
            t0 = time.time()
            try:
                if name in got:
                    if isinstance(got[name], Exception):
                        raise got[name]
                    r = got[name]
                else:
                    if variant:
                        _set_vk(pg, VARIANTS[variant])
                    r, _ = bench_models(path, devs.split(","), None, a.reps, tests, default_n_ctx(tests), peer=False)
                pp, tg = r[f"pp{a.n_prompt}"], r[f"tg{a.n_gen}"]
                row[name] = {"pp512": _median(pp), "tg128": _median(tg), "pp512_stats": pp, "tg128_stats": tg,
                             "host_syncs_per_token": r.get("host_syncs_per_token"),
                             "decode_replans": r.get("decode_replans"), "seconds": round(secs.get(name, time.time() - t0), 1)}
                if a.depth:   # the same after a.depth tokens of context (keys tg128_depth, pp512_depth)
                    dp, dt = r[f"pp{a.n_prompt} @ d{a.depth}"], r[f"tg{a.n_gen} @ d{a.depth}"]
                    row[name].update({"depth": a.depth, "pp512_depth": _median(dp), "tg128_depth": _median(dt),
                                      "pp512_depth_stats": dp, "tg128_depth_stats": dt})
            except Exception as e:   # one failing configuration must not lose the others
                row[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{spec:16s} {name:14s} {row[name]}", flush=True)
        cu = row.get("cuda", {})
        for v in a.variants:
            vk = row.get(f"vulkan_{v}", {})
            if "pp512" in vk and "pp512" in cu:
                row[f"ratio_{v}"] = {"pp512": round(vk["pp512"] / cu["pp512"], 3), "tg128": round(vk["tg128"] / cu["tg128"], 3)}
                if "tg128_depth" in vk and "tg128_depth" in cu:
                    row[f"ratio_{v}"].update({"pp512_depth": round(vk["pp512_depth"] / cu["pp512_depth"], 3),
                                              "tg128_depth": round(vk["tg128_depth"] / cu["tg128_depth"], 3)})
        rows.append(row)
        _set_vk(pg, {})
        save({"kind": "vulkan-vs-cuda-bench", "reps": a.reps, "rows": rows, "partial": True})
    return {"kind": "vulkan-vs-cuda-bench", "reps": a.reps, "n_prompt": a.n_prompt, "n_gen": a.n_gen, "variants": {v: VARIANTS[v] for v in a.variants},
            "targets": {"tg128": 0.7, "pp512": 0.5}, "rows": rows}


def _cuda_kernels(run, steps):
    """GPU time per CUDA kernel name over `steps` calls of run(i), in us per call."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(steps):
            run(i)
        torch.cuda.synchronize()
    agg = {}
    for ev in prof.events():
        if getattr(ev, "device_type", None) != DeviceType.CUDA:
            continue
        t = ev.time_range.elapsed_us()
        n, tot = agg.get(ev.name, (0, 0.0))
        agg[ev.name] = (n + 1, tot + t)
    return {k: {"launches_per_call": n / steps, "us_per_call": round(tot / steps, 2)}
            for k, (n, tot) in sorted(agg.items(), key=lambda kv: -kv[1][1])}


_SHADER = re.compile(r"profile shader: (\S+)\s+(\d+) dispatches\s+([\d.]+) us total")


def _vk_shaders(pg, lines, run, steps):
    """GPU time per Vulkan shader label over `steps` calls of run(i), in us per call."""
    dev = pg.get_device("vulkan:0")
    from pyggml._plugin import drain_log
    dev.set_option("profile_report", "1")   # start counting here
    drain_log()
    lines.clear()
    for i in range(steps):
        run(i)
    dev.set_option("profile_report", "1")
    drain_log()
    out = {}
    for line in lines:
        mt = _SHADER.search(line)
        if mt:
            out[mt.group(1)] = {"dispatches_per_call": int(mt.group(2)) / steps,
                                "us_per_call": round(float(mt.group(3)) / steps, 2)}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["us_per_call"]))


def profile(a, save):
    import numpy as np
    import pyggml as pg
    import pyggml.models as models
    from pyggml.bench_model import resolve_model
    lines = []
    keep = logging.Handler()
    keep.emit = lambda rec: lines.append(rec.getMessage())
    logging.getLogger("pyggml").addHandler(keep)
    logging.getLogger("pyggml").setLevel(logging.INFO)
    pg.get_device("vulkan:0").set_option("profile", "1")   # timestamps in the plans created from here on
    res = []
    for spec in a.models:
        path = resolve_model(spec, quiet=True)
        entry = {"model": spec}
        runs = [("cuda", ["cuda:0", "cpu"], None)] + [("vulkan" if v == "new" else f"vulkan_{v}", ["vulkan:0", "cpu"], v)
                                                    for v in a.variants]
        for name, devs, variant in runs:
            try:
                if variant:
                    _set_vk(pg, VARIANTS[variant])
                m = models.load(path, devices=devs, n_ctx=640, progress=False)
                rng = np.random.default_rng(0)
                prompt = rng.integers(3, m.hp.n_vocab, 512).tolist()
                toks = rng.integers(3, m.hp.n_vocab, a.steps).tolist()

                def pre(i):
                    m.reset()
                    m.prefill(prompt)

                def dec(i):
                    m.decode(toks[i])
                pre(0)
                for t in toks[:4]:
                    m.decode(t)                 # plans and programs built before measuring
                m.reset()
                m.prefill(prompt[:64])
                def timed(run, n):
                    return _cuda_kernels(run, n) if variant is None else _vk_shaders(pg, lines, run, n)
                t0 = time.perf_counter()
                d = timed(dec, a.steps)
                wall_dec = (time.perf_counter() - t0) / a.steps * 1e6
                p = timed(pre, 2)
                entry[name] = {"decode_us_per_token_wall_profiled": round(wall_dec, 1),
                               "decode_gpu_us_per_token": round(sum(v["us_per_call"] for v in d.values()), 1),
                               "prefill512_gpu_us": round(sum(v["us_per_call"] for v in p.values()), 1),
                               "decode": d, "prefill512": p}
                m.close()
            except Exception as e:
                entry[name] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{spec} {name}: " + json.dumps({k: v for k, v in entry[name].items()
                                                     if k not in ("decode", "prefill512")}), flush=True)
            for phase in ("decode", "prefill512"):
                for k, v in list(entry[name].get(phase, {}).items())[:12]:
                    print(f"   {phase:10s} {v['us_per_call']:10.1f} us  {k[:90]}", flush=True)
        _set_vk(pg, {})
        res.append(entry)
        save({"kind": "vulkan-vs-cuda-kernels", "steps": a.steps, "models": res, "partial": True})
    return {"kind": "vulkan-vs-cuda-kernels", "steps": a.steps, "models": res,
            "note": "decode: GPU us per token (sum over kernels/shaders); prefill512: GPU us of one 512-token "
                    "prefill; Vulkan profiling waits for a plan's previous submission before resubmitting it, "
                    "so wall times with profiling on are not the bench figures"}


def _variant(v):
    """A --variants entry: a VARIANTS name, or options written out (rp_rows=4,rp_lit=1), added to VARIANTS."""
    if v in VARIANTS:
        return v
    if "=" not in v:
        raise argparse.ArgumentTypeError(f"unknown variant {v!r}: one of {', '.join(sorted(VARIANTS))}, or key=value[,...]")
    parts = v.split(",")
    bad = [kv for kv in parts if "=" not in kv or not kv.split("=", 1)[0]]
    if bad:
        raise argparse.ArgumentTypeError(f"variant {v!r}: {', '.join(map(repr, bad))} is not key=value")
    opts = dict(kv.split("=", 1) for kv in parts)
    unknown = [k for k in opts if k not in DEFAULTS and k != "arena_lag"]
    if unknown:
        raise argparse.ArgumentTypeError(f"variant {v!r}: {', '.join(map(repr, unknown))} has no default in DEFAULTS "
                                         "(scripts/vulkan_vs_cuda.py): the variants after it would inherit its value")
    VARIANTS[v] = opts
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("bench", "profile"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--models", nargs="+", default=["synth:1b:q4_0", "synth:1b:q4_K", "synth:7b:q4_0", "synth:7b:q4_K", "synth:smollm2:q4_1"])
    ap.add_argument("--variants", nargs="+", default=None, type=_variant,
                    help="Vulkan option sets: names from VARIANTS, or key=value[,key=value...] (default: bench new old, profile new)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--n-prompt", type=int, default=512, help="bench: prompt tokens (the keys say pp512 whatever it is)")
    ap.add_argument("--n-gen", type=int, default=128, help="bench: generated tokens (the keys say tg128 whatever it is)")
    ap.add_argument("--depth", type=int, default=0, help="bench: also pp and tg after this many tokens of context (keys *_depth)")
    ap.add_argument("--interleave", action="store_true",
                    help="bench: --reps rounds of one rep per configuration (CUDA, then each variant), medians over the rounds")
    a = ap.parse_args(argv)
    a.variants = a.variants or (["new", "old"] if a.mode == "bench" else ["new"])
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"vulkan-vs-cuda-{a.mode}-{time.strftime('%Y%m%dT%H%M%S')}.json")

    def save(doc):   # after every model, so a run cut short keeps what it measured
        doc.update(date=time.strftime("%Y-%m-%dT%H:%M:%S%z"), commit=os.environ.get("GPU_VK_COMMIT", "unknown"),
                   gpu=os.environ.get("GPU_VK_GPU", ""), command="python3 scripts/vulkan_vs_cuda.py " + " ".join(sys.argv[1:]))
        with open(path, "w") as f:
            json.dump(doc, f, indent=1)
    doc = bench(a, save) if a.mode == "bench" else profile(a, save)
    save(doc)
    print("wrote", path)
    if a.mode == "bench":
        for r in doc["rows"]:
            print(r["model"], {k: v for k, v in r.items() if k.startswith("ratio")})


if __name__ == "__main__":
    main()
