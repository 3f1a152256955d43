"""What the Vulkan driver says about the pipelines a model's prefill and decode compile (device option pipeline_stats:
VK_KHR_pipeline_executable_properties), per model, as JSON (scripts/gpu_vulkan.sh runs it with GPU_VK_STATS=1).

    python3 scripts/vulkan_pipeline_stats.py --out DIR [--models synth:1b:q4_0 ...] [--options key=value ...]

The option is set before anything compiles (a fresh process: the device's pipeline cache keeps what was made before),
then each model is loaded on vulkan:0, prefills 512 tokens and decodes 4. Every "pipeline ..." line the plugin logs is
kept, with the first model that compiled it. Statistics names and units are the driver's (NVIDIA's include the register
count and the local memory a kernel spills to): this script does not interpret them. A device without the extension
refuses the option: the script says so and exits 2. Writes vulkan-pipeline-stats-<time>.json into --out and prints
each line."""
import argparse
import json
import logging
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LINE = re.compile(r"^(?:vulkan: )?pipeline (\S+) \(spec (0x[0-9a-f]+), (0x[0-9a-f]+)\) (.*?), subgroup (\d+): (.*)$")


def parse(line):
    """The fields of one plugin line (as pyggml's log gives it, "vulkan: pipeline ..."), or None: shader, spec, executable, subgroup size, {statistic: value text}."""
    m = LINE.match(line)
    if not m:
        return None
    stats = {}
    for part in m.group(6).split(", "):
        k, _, v = part.partition("=")
        if k:
            stats[k] = v
    return {"shader": m.group(1), "spec": [m.group(2), m.group(3)], "executable": m.group(4),
            "subgroup": int(m.group(5)), "stats": stats}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", nargs="+", default=["synth:1b:q4_0", "synth:7b:q4_0"])
    ap.add_argument("--options", nargs="*", default=[], help="vulkan:0 device options as key=value, set first")
    a = ap.parse_args(argv)
    import numpy as np
    import pyggml as pg
    import pyggml.models as models
    from pyggml.bench_model import resolve_model
    from pyggml._plugin import drain_log
    from pyggml.errors import PyggmlError
    lines = []
    keep = logging.Handler()
    keep.emit = lambda rec: lines.append(rec.getMessage())
    logging.getLogger("pyggml").addHandler(keep)
    logging.getLogger("pyggml").setLevel(logging.INFO)
    dev = pg.get_device("vulkan:0")
    for kv in a.options:
        k, sep, v = kv.partition("=")
        if not sep:
            ap.error(f"--options: '{kv}' is not key=value")
        dev.set_option(k, v)
    try:
        dev.set_option("pipeline_stats", "1")
    except PyggmlError as e:
        print(f"vulkan_pipeline_stats: {e}", file=sys.stderr)
        return 2
    doc = {"kind": "vulkan-pipeline-stats", "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "device": dev.description,
           "options": a.options, "models": {}}
    seen = set()
    for spec in a.models:
        path = resolve_model(spec, quiet=True)
        m = models.load(path, devices=["vulkan:0", "cpu"], n_ctx=640, progress=False)
        rng = np.random.default_rng(0)
        m.prefill(rng.integers(3, m.hp.n_vocab, 512).tolist())
        for t in rng.integers(3, m.hp.n_vocab, 4).tolist():
            m.decode(t)
        m.close()
        drain_log()
        got = []
        for line in lines:
            p = parse(line)
            if p and line not in seen:
                seen.add(line)
                got.append(p)
                print(f"{spec}: {line}", flush=True)
        lines.clear()
        doc["models"][spec] = got
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, time.strftime("vulkan-pipeline-stats-%Y%m%dT%H%M%S.json"))
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {path}: {sum(len(v) for v in doc['models'].values())} pipeline executables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
