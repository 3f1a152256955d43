#!/usr/bin/env bash
# scripts/gpu_ray.sh — issue 19 on nvidia-h200-x2, in one device call of about 6 minutes: a model
# as two pipeline stages, one per GPU, each a Ray actor (pyggml.dist; a local Ray cluster on the
# loopback, one raylet holding both GPUs, Ray giving each stage actor its own), against the
# in-process split over the same GPUs (`pyggml bench -d cuda:0,cuda:1`), measured in the same run:
# pp4096, tg128 and the per-token overhead of crossing the stages, on synth:7b:q4_0 and
# synth:1b:q4_0; also the logits of the two against each other (1b: a 512-token prefill, 8
# decodes) and the Ray tests (CPU, three raylets).
#
# Ray is not on the GPU image: first, here, `bash scripts/ray_wheels.sh` (fills .whl/, about
# 41 MB), then carry it:
#   run(command="GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_ray.sh",
#       kind="nvidia-h200-x2", carry=[".whl"])
# Results in $OUT: ray-gpu.tar.gz (every log and JSON), summary.log, the bench JSONs and
# logits.json (date, GPUs, commit and command are in each JSON).
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=ray-gpu GPU_BUDGET_S=${GPU_RAY_BUDGET:-345}
. scripts/gpu_prelude.sh

say "$(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tr '\n' ';') commit $GPU_CHECK_COMMIT"
if ! $PY -c "import ray" 2>/dev/null; then
    ls .whl/ray-*.whl >/dev/null 2>&1 || { say "no Ray: run bash scripts/ray_wheels.sh here and carry .whl"; pack; exit 1; }
    install_wheels > "$W/pip.log" 2>&1 || { say "wheel install failed"; tail -5 "$W/pip.log"; pack; exit 1; }
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}       # Ray's workers import this checkout's pyggml
say "ray $($PY -c 'import ray; print(ray.__version__)' 2>&1 | tail -1)"
touch .stamp-deps
for m in 7b 1b; do
    setsid $PY -c "from pyggml.bench_model import resolve_model; print(resolve_model('synth:$m:q4_0', quiet=True))" \
        > "$W/synth-$m.log" 2>&1 < /dev/null &
done
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cpu.so pyggml/plugins/libpyggml-cuda.so > "$W/build.log" 2>&1
say "build rc=$? ($(ls pyggml/plugins | tr '\n' ' '))"

say "tests (Ray on the CPU, stages)"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/test_dist_ray.py tests/test_model_stage.py > "$W/pytest.log" 2>&1
say "pytest rc=$?: $(tail -1 "$W/pytest.log")"
grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -10 | tee -a "$W/summary.log"
pack

wait_model() {  # the cached synthetic model's path, once written
    local f; f=$(ls "$PYGGML_MODEL_CACHE"/synth-"$1"-q4_0-*.gguf 2>/dev/null | head -1)
    while [ -z "$f" ] || pgrep -f "synth:$1:q4_0" >/dev/null; do
        sleep 2; [ "$(left)" -lt 60 ] && return 1
        f=$(ls "$PYGGML_MODEL_CACHE"/synth-"$1"-q4_0-*.gguf 2>/dev/null | head -1)
    done
    echo "$f"
}
bench() {  # bench NAME MODEL ARGS...
    local name=$1 model=$2; shift 2
    [ "$(left)" -lt 40 ] && { say "skipped $name: time"; return; }
    timeout "$(( $(left) - 20 ))" $PY -m pyggml bench -m "$model" -o "$W" "$@" > "$W/$name.log" 2>&1
    say "$name rc=$?"
    grep -E "^\| (one process|Ray)|^- (stages|per token|decode step)" "$W/$name.log" | tee -a "$W/summary.log"
    tail -3 "$W/$name.log" | grep -i error | tee -a "$W/summary.log"
}
M1=$(wait_model 1b) && {
    say "logits: Ray stages vs the in-process split (1b)"
    timeout 120 $PY - "$M1" "$W/logits.json" > "$W/logits.log" 2>&1 <<'PYEOF'
import json, subprocess, sys, time
import numpy as np
import pyggml.dist as dist
from pyggml import models
path, out = sys.argv[1], sys.argv[2]
toks = [int(t) for t in np.random.default_rng(0).integers(3, 32000, 520)]
m = models.load(path, devices=["cuda:0", "cuda:1"], n_ctx=1024, progress=False)
want = [m.prefill(toks[:512])] + [m.decode(t) for t in toks[512:]]
m.close()
c = dist.connect("local", n_nodes=1, num_cpus=4, num_gpus=2)
with dist.Pipeline(path, 2, devices=["cuda:0"], num_gpus=1, n_ctx=1024) as p:
    got = [p.prefill(toks[:512])] + [p.decode(t) for t in toks[512:]]
    info = [{k: i[k] for k in ("layers", "devices", "cuda_visible_devices", "weight_bytes")} for i in p.info]
c.shutdown()
res = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "model": path, "stages": info,
       "gpus": subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True).stdout.split("\n")[:2],
       "command": "scripts/gpu_ray.sh (logits)",
       "bitwise_equal": [bool(np.array_equal(g, w)) for g, w in zip(got, want)],
       "max_abs_diff": [float(np.abs(g - w).max()) for g, w in zip(got, want)],
       "argmax_equal": [int(g.argmax()) == int(w.argmax()) for g, w in zip(got, want)]}
json.dump(res, open(out, "w"), indent=1)
print(json.dumps({k: res[k] for k in ("stages", "bitwise_equal", "max_abs_diff")}))
PYEOF
    say "logits rc=$?: $(tail -1 "$W/logits.log" | cut -c1-400)"
    cp "$W/logits.json" "$OUTD/" 2>/dev/null
}
pack
M7=$(wait_model 7b) && bench 7b-ray2 "$M7" -d cuda:0,cuda:1 --ray local --stages 2 -r 3 -p 4096 -n 128
pack
[ -n "${M1:-}" ] && bench 1b-ray2 "$M1" -d cuda:0,cuda:1 --ray local --stages 2 -r 3 -p 4096 -n 128
cp "$W"/model-*.json "$OUTD/" 2>/dev/null
say "done"
pack
