"""The prefill attention alone on vulkan:0: GPU time of one flash_attn_ext dispatch per shape and device
option set, from the plan's timestamp queries (device option profile=1), each result checked against the
CPU plugin's (NMSE).

    python3 scripts/vulkan_fa_probe.py [--shapes NQ,NKV,H,HKV,D[,causal] ...] [--variants "fa_cm=3" ...]
                                       [--reps 5] [--out DIR]

Shapes default to the synth models' pp512 attention (1b: 512 queries, 512 keys, 32 heads over 8 K/V heads,
D 64; 7b: 32 over 32, D 128), causal and unmasked, and the 1b one over 4096 keys at depth (the queries the
last 512 positions). A variant is a comma-separated list of key=value device options, set over the
defaults. Prints a line per (shape, variant) and writes vulkan-fa-probe-<time>.json into --out."""
import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import pyggml as pg                                 # noqa: E402
from pyggml.conformance.cases import nmse           # noqa: E402
from vulkan_gemm_sweep import LogLines, _SHADER, profile_lines, warm_up   # noqa: E402

VK = "vulkan:0"
DEFAULTS = {"fa": "auto", "fa_cm": "3"}   # every variant starts from these (the plugin's defaults)
SHAPES = ["512,512,32,8,64,1", "512,512,32,8,64,0", "512,512,32,32,128,1", "512,4096,32,8,64,1"]


def parse_shape(s):
    v = [int(x) for x in s.split(",")]
    return dict(nq=v[0], nkv=v[1], H=v[2], Hkv=v[3], D=v[4], causal=bool(v[5]) if len(v) > 5 else True)


def fa_us(lines):
    """(dispatches, us) of the flash_attn dispatches in a profile report, and the us of fa_span's fa_mask_span pass
    (once per plan and mask: a model's layers share it, so it is reported beside the attention, not in it)."""
    n, us, span = 0, 0.0, 0.0
    for line in lines:
        m = _SHADER.search(line)
        if m and m.group(1).startswith("flash_attn"):
            n, us = n + int(m.group(2)), us + float(m.group(3))
        elif m and m.group(1) == "fa_mask_span":
            span += float(m.group(3))
    return n, us, span


def one_shape(sh, variants, reps, rng, log):
    nq, nkv, H, Hkv, D = sh["nq"], sh["nkv"], sh["H"], sh["Hkv"], sh["D"]
    g = pg.Graph()
    q = g.input("q", (1, H, nq, D))
    k = g.weight("k", rng.standard_normal((1, Hkv, nkv, D)).astype(np.float16))
    v = g.weight("v", rng.standard_normal((1, Hkv, nkv, D)).astype(np.float16))
    mask = None
    if sh["causal"]:   # query i sits at position nkv - nq + i and sees keys up to it
        m = np.zeros((1, 1, nq, nkv), np.float16)
        for i in range(nq):
            m[0, 0, i, nkv - nq + i + 1:] = -np.inf
        mask = g.weight("m", m)
    qs = pg.scale(q, 1.0)   # the plan's first interval holds the upload (vulkan_gemm_sweep.py: one_shape)
    o = pg.flash_attn_ext(qs, k, v, mask, scale=1.0 / np.sqrt(D))
    feeds = {"q": rng.standard_normal((1, H, nq, D)).astype(np.float32)}
    ref = np.asarray(pg.Scheduler(["cpu"]).compute(o, feeds), np.float64)
    dev = pg.get_device(VK)
    res = {}
    for var in variants:
        r = {}
        kern = "?"
        opts = dict(kv.split("=", 1) for kv in var.split(",") if kv)
        try:
            for kk, vv in {**DEFAULTS, **opts}.items():
                dev.set_option(kk, vv)
            log.lines.clear()
            sched = pg.Scheduler([VK])
            out = np.asarray(sched.compute(o, feeds))
            r["nmse"] = float(nmse(out, ref))
            warm_up(sched, o, feeds, 0.5)
            times, spans = [], []
            for _ in range(reps):
                n, us, span = fa_us(profile_lines(dev, lambda: sched.compute(o, feeds), log))
                spans.append(span)
                kern = next((m.group(1) for m in map(_SHADER.search, log.lines) if m and m.group(1).startswith("flash_attn")), "?")
                if n:
                    times.append(us / n)
            r["kernel"] = kern
            sched.close()
            if times:
                r["us"] = round(float(np.median(times)), 1)
                r["us_all"] = [round(t, 1) for t in times]
                if any(spans):
                    r["span_us"] = round(float(np.median(spans)), 1)
        except Exception as e:   # one failing variant must not lose the others
            r["error"] = f"{type(e).__name__}: {e}"[:300]
        res[var] = r
        print(f"  fa nq={nq} nkv={nkv} H={H}/{Hkv} D={D} {'causal' if sh['causal'] else 'nomask'} "
              f"{var:28s} {r.get('kernel', ''):22s} {r.get('us', float('nan')):8.1f} us "
              f"nmse {r.get('nmse', float('nan')):.2e}" + (f" (+{r['span_us']} us fa_mask_span)" if "span_us" in r else "") +
              f" {r.get('error', '')}", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=SHAPES)
    ap.add_argument("--variants", nargs="+", default=["fa_cm=3", "fa_cm=2"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    pg.get_device(VK).set_option("profile", "1")
    log = LogLines()
    rng = np.random.default_rng(0)
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "variants": a.variants, "shapes": {}}
    for s in a.shapes:
        doc["shapes"][s] = one_shape(parse_shape(s), a.variants, a.reps, rng, log)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        p = os.path.join(a.out, f"vulkan-fa-probe-{time.strftime('%Y%m%dT%H%M%S')}.json")
        with open(p, "w") as f:
            json.dump(doc, f, indent=1)
        print("wrote", p)


if __name__ == "__main__":
    main()
