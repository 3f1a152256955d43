"""Helpers of scripts/gpu_cudak.sh (issue 14 items 3 and 4 on the GPU machine).

    python3 scripts/gpu_cudak.py models OUT_DIR DEADLINE_EPOCH MODEL...
        For each model (synth:SHAPE:WTYPE or a path), in order, while time is left: pp512 + tg128
        (n_ctx 512) and pp4096 (n_ctx 4096) on cuda:0,cpu, once with the new kernels (device options
        repack=1 mmq=1, the defaults) and once with the old ones (repack=0 mmq=0: ggml's blocks for the
        mat-vec, dequantize + cuBLAS for prefill); one JSON per model in OUT_DIR.
    python3 scripts/gpu_cudak.py summary OUT_DIR SUMMARY.json key=value...
        Collects the mat-vec/GEMM and model results of OUT_DIR into one JSON (with the llama.cpp
        figures of issue 14's table as anchors: not measured in this run).
"""
import glob
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = {"new": {"repack": "1", "mmq": "1", "pdl": "1"}, "old": {"repack": "0", "mmq": "0", "pdl": "1"}}
# issue 14's table (H200, llama.cpp ggml 0.25.3, flash attention on): anchors, not this run
LLAMA_CPP = {"synth:1b:q4_0": {"pp512": 48600, "tg128": 1107, "pp4096": 48600},
             "synth:7b:q4_0": {"pp512": 11900, "tg128": 361, "pp4096": 10200}}
RUNS = [(512, 128, 3), (4096, 0, 2)]   # (n_prompt, n_gen, reps): n_ctx = max of the two


def _median(d, key):
    v = d.get(key)
    return round(v["median"], 1) if isinstance(v, dict) and "median" in v else None


def models(out_dir, deadline, specs):
    import pyggml as pg
    from pyggml.bench_model import bench_models, default_n_ctx, make_tests, resolve_model
    dev = pg.get_device("cuda:0")
    for spec in specs:
        if time.time() > deadline - 45:
            print(f"models: no time left for {spec}", flush=True)
            continue
        try:
            path = resolve_model(spec, quiet=True)
        except Exception as e:  # noqa: BLE001 - reported, the others still run
            print(f"models: {spec}: {e}", flush=True)
            continue
        doc = {"model": spec, "file": path, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "variants": {},
               "options": VARIANTS}
        for name, opts in VARIANTS.items():
            for k, v in opts.items():
                dev.set_option(k, v)
            res = {}
            for n_prompt, n_gen, reps in RUNS:
                if time.time() > deadline - 20:
                    res[f"skipped p{n_prompt} n{n_gen}"] = "no time left"
                    continue
                t0 = time.time()
                try:
                    tests = make_tests([n_prompt], [n_gen], [0])
                    r, _ = bench_models(path, ["cuda:0", "cpu"], None, reps, tests, default_n_ctx(tests), peer=False)
                except Exception as e:  # noqa: BLE001
                    res[f"error p{n_prompt} n{n_gen}"] = f"{type(e).__name__}: {e}"
                    print(f"models: {spec} {name} p{n_prompt}: {type(e).__name__}: {e}", flush=True)
                    continue
                for key in (f"pp{n_prompt}", f"tg{n_gen}"):
                    if key in r:
                        res[key] = r[key]
                res.setdefault("runs", []).append({"n_prompt": n_prompt, "n_gen": n_gen, "seconds": time.time() - t0,
                                                   "load_s": (r.get("load") or {}).get("seconds"),
                                                   "host_syncs_per_token": r.get("host_syncs_per_token"),
                                                   "sched_stats": r.get("sched_stats")})
                print(f"models: {spec} {name}: " + ", ".join(f"{k} {_median(res, k)}" for k in res
                                                              if k.startswith(("pp", "tg"))), flush=True)
            doc["variants"][name] = res
        for k, v in VARIANTS["new"].items():
            dev.set_option(k, v)
        tag = spec.replace("synth:", "").replace(":", "-").replace("/", "_")
        with open(os.path.join(out_dir, f"cudak-model-{tag}.json"), "w") as f:
            json.dump(doc, f, indent=1)
    return 0


def summary(out_dir, dest, extra):
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "cudak-gpu"}
    doc.update(extra)
    mv = {}
    for p in sorted(glob.glob(os.path.join(out_dir, "cuda-matvec-*.json"))):
        d = json.load(open(p))
        tag = os.path.basename(p).rsplit("-", 1)[-1][:-5]
        rows = {}
        for r in d["results"]:
            if r["impl"] != "pyggml":
                continue
            if "GBps" in r:
                rows[f"{r['type']} mat-vec GB/s"] = round(r["GBps"], 1)
            else:
                rows[f"{r['type']} GEMM x512 TFLOP/s"] = round(r["TFLOPs"], 1)
        rows["d2d copy GB/s"] = round(d["copy_GBps_torch"], 1) if d.get("copy_GBps_torch") else None
        rows["options"] = d.get("device_options")
        rows["file"] = os.path.basename(p)
        mv[tag] = rows
    doc["matvec_gemm"] = mv
    table = {}
    for p in sorted(glob.glob(os.path.join(out_dir, "cudak-model-*.json"))):
        d = json.load(open(p))
        row = {}
        for name, res in d["variants"].items():
            for key in ("pp512", "tg128", "pp4096"):
                row[f"{key} {name}"] = _median(res, key)
        for key in ("pp512", "tg128", "pp4096"):
            new, old = row.get(f"{key} new"), row.get(f"{key} old")
            if new and old:
                row[f"{key} new/old"] = round(new / old, 3)
            anchor = LLAMA_CPP.get(d["model"], {}).get(key)
            if new and anchor:
                row[f"{key} new/llama.cpp (issue table)"] = round(new / anchor, 3)
        row["file"] = os.path.basename(p)
        table[d["model"]] = row
    doc["models_median_t_per_s"] = table
    doc["llama_cpp_anchors_from_issue_14"] = LLAMA_CPP
    with open(dest, "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc, indent=1))
    return 0


def main(argv):
    if len(argv) >= 3 and argv[0] == "models":
        return models(argv[1], float(argv[2]), argv[3:])
    if len(argv) >= 3 and argv[0] == "summary":
        return summary(argv[1], argv[2], dict(a.split("=", 1) for a in argv[3:]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
