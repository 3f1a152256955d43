"""The prefill GEMM alone on vulkan:0, every mul_mat_cm4 configuration next to the current kernels
(scripts/gpu_vulkan_gemm.sh runs it on the H200; it runs anywhere with a Vulkan device).

    python3 scripts/vulkan_gemm_sweep.py --out DIR [--types q4_0 q4_K] [--shapes 2048x2048 ...] [--n 512]
                                         [--configs NAME ...] [--reps 5] [--budget 200] [--bench MODEL ...]

Per weight type and shape M x K (weights) times K x N (activations): the result of every kernel is
checked against the CPU plugin's (NMSE), and its GPU time is the median over --reps computes of the
plan's timestamp queries (device option profile=1; a scale and the GEMM per compute), so host work (the
input upload, the output read) is not in it: a scale by 1 runs first, so the plan's first interval,
which starts at the top of the submission with the input's upload, is the scale's, not the GEMM's. Kernels: "cm3" (gemm_v=3, the default; tile auto),
"cm3_128" (its 128 tile), then gemm_v=4 with each gemm_cfg the plugin lists (gemm=coopmat, so a
device without cooperative matrices refuses them: use --emulated to run the emulated builds). Prints
a TFLOPS table (configurations x shapes); --bench then runs pp512 of each model with the defaults and
with the configuration of the least total GPU time over the q4_0 shapes (pyggml.bench_model, the
code behind `pyggml bench`). Writes vulkan-gemm-sweep-<time>.json into --out after every shape, so a
run cut short keeps what it measured."""
import argparse
import json
import os
import re
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import pyggml as pg                                 # noqa: E402
from pyggml._plugin import drain_log                # noqa: E402
from pyggml.conformance.cases import nmse           # noqa: E402

VK = "vulkan:0"
SHAPES = ["2048x2048", "8192x2048", "2048x8192", "4096x4096", "11008x4096", "4096x11008"]   # M x K: 1b and 7b layers
DEFAULTS = {"gemm": "auto", "gemm_v": "0", "gemm_tile": "auto", "gemm_cfg": "auto", "debug_gemm_parts": "0", "cm_api": "auto", "cm_acc": "f16x4",
            "gemm_dq": "0", "gemm_b16": "0", "gemm_bg": "0", "gemm_lit": "0"}
PARTS = {1: "noload", 2: "nomma", 3: "mmaonly", 4: "smallk", 5: "mmajoin"}   # device option debug_gemm_parts
# --apis: the options of each; khr16 is the KHR build with each K step summed in f16 accumulators first
APIS = {"auto": {"cm_api": "auto"}, "nv": {"cm_api": "nv"}, "khr": {"cm_api": "khr", "cm_acc": "f32"},
        "khr16": {"cm_api": "khr", "cm_acc": "f16"},
        # khr16 with the weights dequantized to f16 rows by a dispatch before the GEMM (gemm_dq: the
        # time is both dispatches')
        "khr16dq": {"cm_api": "khr", "cm_acc": "f16", "gemm_dq": "1"}, "dq": {"cm_api": "auto", "gemm_dq": "1"},
        # khr16 with the activations converted to f16 rows first (gemm_b16; the time is both dispatches'),
        # and with both copies
        "khr16b16": {"cm_api": "khr", "cm_acc": "f16", "gemm_b16": "1"},
        # khr16b16 with the f16 sums spanning 2, 4 or 8 K steps (x2, x4, x8: cm_acc=f16x2, f16x4, f16x8)
        "khr16b16x2": {"cm_api": "khr", "cm_acc": "f16x2", "gemm_b16": "1"},
        "khr16b16x4": {"cm_api": "khr", "cm_acc": "f16x4", "gemm_b16": "1"},
        "khr16b16x8": {"cm_api": "khr", "cm_acc": "f16x8", "gemm_b16": "1"},
        # the default sums (x4) with the weights dequantized to f16 rows first (gemm_dq) and the activation copy
        "khr16dqb16x4": {"cm_api": "khr", "cm_acc": "f16x4", "gemm_dq": "1", "gemm_b16": "1"},
        "khr16dqb16": {"cm_api": "khr", "cm_acc": "f16", "gemm_dq": "1", "gemm_b16": "1"},
        # khr16b16 with the activation fragments loaded from the copy in global memory (gemm_bg)
        "khr16b16bg": {"cm_api": "khr", "cm_acc": "f16", "gemm_b16": "1", "gemm_bg": "1"},
        "khr16dqb16bg": {"cm_api": "khr", "cm_acc": "f16", "gemm_dq": "1", "gemm_b16": "1", "gemm_bg": "1"},
        # the default sums from the literal builds where vulkan.mk's CM4_LITS has the specialization (gemm_lit; the
        # kernel name ends in ' lit'), and f32 sums throughout (cm_acc=f32), both with the activation copy
        "khr16b16x4lit": {"cm_api": "khr", "cm_acc": "f16x4", "gemm_b16": "1", "gemm_lit": "1"},
        "khr32b16": {"cm_api": "khr", "cm_acc": "f32", "gemm_b16": "1"}}
_SHADER = re.compile(r"profile shader: (\S+)\s+(\d+) dispatches\s+([\d.]+) us total")


def plugin_configs():
    """gemm_cfg's values besides auto, from the plugin's message for a value it does not know."""
    try:
        pg.get_device(VK).set_option("gemm_cfg", "?")
    except pg.PyggmlError as e:
        return re.search(r"wants one of (.*), got", str(e)).group(1).split(", ")[1:]
    raise RuntimeError("gemm_cfg accepted '?'")


def kernels(configs, emulated, parts=(), apis=("auto",)):
    """(label, device options) of every kernel to time; with parts, each configuration also under the
    measurement switch debug_gemm_parts (a part of the step alone: results wrong by design); with
    several apis, each under each value of cm_api (labels end in @nv, @khr)."""
    gemm = "cm_emulated" if emulated else "coopmat"
    out = [("cm3", {"gemm": gemm, "gemm_v": "3"}), ("cm3_128", {"gemm": gemm, "gemm_v": "3", "gemm_tile": "128"})]
    for c in configs:
        for api in apis:
            at = f"@{api}" if len(apis) > 1 else ""
            base = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": c, **APIS[api]}
            out.append((c + at, base))
            out += [(f"{c}:{PARTS[p]}{at}", {**base, "debug_gemm_parts": str(p)}) for p in parts]
    return out


def set_options(opts):
    dev = pg.get_device(VK)
    for k, v in {**DEFAULTS, **opts}.items():
        dev.set_option(k, v)


def gpu_us(lines):
    """GPU time of the GEMM dispatches in the profile lines: (GEMM dispatches, us total), the us with
    the dequant.comp dispatches a gemm_dq GEMM runs first."""
    n, us = 0, 0.0
    for line in lines:
        m = _SHADER.search(line)
        if m and m.group(1).startswith("mul_mat"):
            n, us = n + int(m.group(2)), us + float(m.group(3))
        elif m and m.group(1).startswith("dequant"):
            us += float(m.group(3))
    return n, us


def profile_lines(dev, run, log):
    """The plugin's profile report (device option profile=1) of what run() does alone: the report
    of what came before is dropped first."""
    dev.set_option("profile_report", "1")   # report what came before, start over
    drain_log()
    log.lines.clear()
    run()
    dev.set_option("profile_report", "1")
    drain_log()
    return list(log.lines)


def dispatch_times(dev, sched, outputs, feeds, reps, log):
    """GPU us per mul_mat dispatch of each of `reps` computes (the plan's timestamp queries)."""
    times = []
    for _ in range(reps):
        nd, us = gpu_us(profile_lines(dev, lambda: sched.compute(outputs, feeds), log))
        if nd:
            times.append(us / nd)
    return times


class LogLines:
    """The pyggml logger's messages (the plugin's profile report and kernel choices) into a list."""
    def __init__(self):
        import logging
        self.lines = []
        outer = self

        class H(logging.Handler):
            def emit(self, r):
                outer.lines.append(r.getMessage())
        log = logging.getLogger("pyggml")
        log.addHandler(H(level=logging.DEBUG))
        log.setLevel(logging.DEBUG)


def warm_up(sched, outputs, feeds, seconds):
    """Computes back to back for `seconds`: a GPU left idle between short bursts runs at low clocks
    (the H200 at b2552c9: the same GEMM 4-5x slower a second into the sweep than right after the
    build), so every kernel is timed on a GPU that has been busy just before."""
    t_end = time.time() + seconds
    while time.time() < t_end:
        sched.compute(outputs, feeds)


def one_shape(wtype, m, k, n, kern, reps, rng, log, copies=8, warm_s=0.5):
    """Every kernel on one shape; returns {label: result}. The graph holds `copies` independent
    GEMMs of the same operands, summed (more GPU time per compute, against the host's upload and
    read-back: the GPU stays busy), and each kernel is timed after warm_s seconds of computes."""
    g = pg.Graph()
    wf = rng.standard_normal((m, k)).astype(np.float32)
    if wtype == "f16":   # a pure f16 x f16 GEMM: what a dequantize-once path would run
        w = g.weight("w", wf.astype(np.float16))
    else:
        w = g.weight("w", pg.quantize(wf, wtype), type=wtype, shape=(m, k))
    x = g.input("x", (n, k))
    # a scale by 1 ahead of the GEMM: the plan's first timestamp interval starts at the top of the
    # submission, so it also holds the input's upload (the copies ride on the same submission); the
    # scale's interval takes that, and the GEMM's is its own
    xs = pg.scale(x, 1.0)
    y1 = pg.mul_mat(w, xs)
    y = y1
    for _ in range(copies - 1):
        y = pg.add(y, pg.mul_mat(w, xs))
    xv = rng.standard_normal((n, k)).astype(np.float32)
    t0 = time.time()
    ref = np.asarray(pg.Scheduler(["cpu"]).compute(y1, {"x": xv}), np.float64) * copies
    res = {"cpu_ref_s": round(time.time() - t0, 2)}
    dev = pg.get_device(VK)
    for label, opts in kern:
        r = {}
        try:
            set_options(opts)
            log.lines.clear()
            sched = pg.Scheduler([VK])
            out = np.asarray(sched.compute(y, {"x": xv}))   # the plan (and its kernel choice), a warm-up
            drain_log()
            r["kernel"] = next((s.rsplit(": ", 1)[1] for s in log.lines if "mul_mat '" in s), "?")
            r["nmse"] = float(nmse(out, ref))
            warm_up(sched, y, {"x": xv}, warm_s)
            times = dispatch_times(dev, sched, y, {"x": xv}, reps, log)
            sched.close()
            if times:
                r["us"] = round(float(np.median(times)), 1)
                r["tflops"] = round(2.0 * m * n * k / (r["us"] * 1e-6) / 1e12, 2)
        except Exception as e:   # one failing kernel must not lose the others
            r["error"] = f"{type(e).__name__}: {e}"[:300]
        res[label] = r
        bad = "" if r.get("nmse", 1) <= 5e-4 or ":" in label else "  <-- WRONG" if "nmse" in r else ""
        print(f"  {wtype} {m}x{k} N={n} {label:24s} {r.get('kernel', '')[:34]:34s} "
              f"{r.get('us', float('nan')):9.1f} us {r.get('tflops', float('nan')):7.2f} TFLOPS "
              f"nmse {r.get('nmse', float('nan')):.2e}{bad} {r.get('error', '')}", flush=True)
    set_options({})
    return res


def table(results, labels, shapes):
    head = f"{'TFLOPS':26s}" + "".join(f"{s:>17s}" for s in shapes)
    rows = [head]
    for lab in labels:
        cells = []
        for s in shapes:
            r = results.get(s, {}).get(lab, {})
            ok = r.get("nmse", 1) <= 5e-4
            cells.append(f"{r['tflops']:>16.1f}{' ' if ok else '!'}" if "tflops" in r else f"{'-':>17s}")
        rows.append(f"{lab:26s}" + "".join(cells))
    return "\n".join(rows)


def best_config(results, labels, wtype="q4_0"):
    """The gemm_v=4 configuration with the least total GPU time over the wtype shapes, all correct."""
    best, best_t = None, None
    for lab in labels:
        rs = [v.get(lab, {}) for s, v in results.items() if s.startswith(wtype + " ")]
        if not rs or not all("us" in r and r.get("nmse", 1) <= 5e-4 for r in rs):
            continue
        t = sum(r["us"] for r in rs)
        if best_t is None or t < best_t:
            best, best_t = lab, t
    return best


def bench_pp(models, opts_by_name, reps):
    from pyggml.bench_model import bench_models, default_n_ctx, make_tests, resolve_model
    tests = make_tests([512], [], [0])
    out = {}
    for spec in models:
        path = resolve_model(spec, quiet=True)
        for name, opts in opts_by_name.items():
            try:
                set_options(opts)
                r, _ = bench_models(path, [VK, "cpu"], None, reps, tests, default_n_ctx(tests), peer=False)
                pp = r["pp512"]
                out[f"{spec} {name}"] = pp.get("median", pp.get("mean")) if isinstance(pp, dict) else pp
            except Exception as e:
                out[f"{spec} {name}"] = f"{type(e).__name__}: {e}"[:300]
            print(f"pp512 {spec} {name}: {out[f'{spec} {name}']}", flush=True)
    set_options({})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", nargs="+", default=["q4_0", "q4_K", "f16"],
                    help="weight types; f16 times the pure f16 GEMM (the case for dequantizing once per node)")
    ap.add_argument("--shapes", nargs="+", default=SHAPES, help="M x K of the weights")
    ap.add_argument("--n", type=int, default=512, help="tokens (activation rows)")
    ap.add_argument("--configs", nargs="+", help="gemm_cfg names (default: every one the plugin lists)")
    ap.add_argument("--parts", nargs="*", type=int, default=[], choices=sorted(PARTS),
                    help="each configuration also with debug_gemm_parts=P: 1 no global loads after the first step, "
                         "2 no products, 3 products alone, 4 the first 256 elements of K at every step")
    ap.add_argument("--apis", nargs="+", default=["auto"], choices=sorted(APIS),
                    help="cm_api values to time each configuration under (khr16: khr with cm_acc=f16; "
                         "...dq: with gemm_dq=1, the dequant dispatch's time counted in)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--copies", type=int, default=8, help="independent GEMMs per compute (summed)")
    ap.add_argument("--warm", type=float, default=0.5, help="seconds of computes before each kernel's timing")
    ap.add_argument("--budget", type=float, default=1e9, help="seconds: shapes not started by then are skipped")
    ap.add_argument("--emulated", action="store_true", help="gemm=cm_emulated (devices without the extension)")
    ap.add_argument("--bench", nargs="*", default=[], help="models for pp512 with the defaults and the best configuration")
    ap.add_argument("--bench-reps", type=int, default=2)
    a = ap.parse_args(argv)
    t_start = time.time()
    log = LogLines()
    pg.get_device(VK).set_option("profile", "1")   # timestamps in the plans created from here on
    kern = kernels(a.configs or plugin_configs(), a.emulated, a.parts, a.apis)
    labels = [lab for lab, _ in kern]
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("vulkan-gemm-sweep-%Y%m%dT%H%M%S.json"))
    doc = {"kind": "vulkan-gemm-sweep", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "gpu": os.environ.get("GPU_VK_GPU", ""),
           "commit": os.environ.get("GPU_VK_COMMIT", ""), "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "device": str(pg.get_device(VK)), "n": a.n, "reps": a.reps, "copies": a.copies, "warm_s": a.warm, "kernels": dict(kern),
           "note": "us: median over reps of the GPU time per GEMM dispatch (timestamp queries; copies GEMMs per compute, after warm seconds of computes); tflops = 2 M N K / us; "
                   "nmse against the CPU plugin's result", "results": {}}
    rng = np.random.default_rng(0)
    for wtype in a.types:
        for s in a.shapes:
            if time.time() - t_start > a.budget:
                print(f"budget spent: {wtype} {s} skipped", flush=True)
                continue
            m, k = (int(v) for v in s.split("x"))
            print(f"{wtype} M x K = {m} x {k}, N = {a.n}", flush=True)
            doc["results"][f"{wtype} {s}"] = one_shape(wtype, m, k, a.n, kern, a.reps, rng, log, a.copies, a.warm)
            json.dump(doc, open(path, "w"), indent=1)
    for wtype in a.types:
        if not any(key.startswith(wtype + " ") for key in doc["results"]):
            continue
        shapes = [s for s in a.shapes if f"{wtype} {s}" in doc["results"]]
        res = {s: doc["results"][f"{wtype} {s}"] for s in shapes}
        print(f"\n{wtype}, N = {a.n} ('!': NMSE above 5e-4)\n" + table(res, labels, shapes), flush=True)
    best = best_config(doc["results"], [lab for lab in labels[2:] if ":" not in lab])
    doc["best_q4_0"] = best
    print(f"\nbest gemm_v=4 configuration over the q4_0 shapes: {best}", flush=True)
    if a.bench:
        opts = {"default": {}}
        if best:
            opts[f"cm4 {best}"] = dict(kern)[best]
        doc["pp512"] = bench_pp(a.bench, opts, a.bench_reps)
    doc["seconds"] = round(time.time() - t_start, 1)
    json.dump(doc, open(path, "w"), indent=1)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
