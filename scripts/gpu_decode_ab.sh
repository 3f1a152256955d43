#!/usr/bin/env bash
# scripts/gpu_decode_ab.sh — decode variants A/B on one NVIDIA GPU, interleaved round by round so
# both see the same machine (issue 14): builds, runs the decode-launch tests, then for each round
# and each model each variant's tg128 (`pyggml bench -p 0 -n 128`, ours only). The summary gives
# per model and variant the median over rounds of the run medians, and q4_K's share of bandwidth
# against q4_0's (tg128 x file bytes) per variant.
#   one device call, kind nvidia-h200, timeout_s 600, from the repo root:
#   GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) AB_VARIANTS="new:glu_spread=8 old:glu_spread=1" \
#       bash scripts/gpu_decode_ab.sh
# Env: AB_VARIANTS (name:key=value[,key=value] ..., options of the cuda device), AB_MODELS
# (synth:1b:q4_0 synth:1b:q4_K synth:7b:q4_0; written in parallel while the build and tests run),
# AB_ROUNDS (3), AB_BUDGET_S (420: no run starts after it), AB_TESTS (test files; "" skips), AB_TEST_K
# (their -k expression);
# for a smoke run elsewhere AB_DEVICES (cuda:0,cpu) and AB_OPT_DEVICE (cuda: the device the options go to).
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=decode-ab GPU_BUDGET_S=${AB_BUDGET_S:-420}
. scripts/gpu_prelude.sh
VARIANTS=${AB_VARIANTS:-"new:glu_spread=8 old:glu_spread=1"}
MODELS=${AB_MODELS:-"synth:1b:q4_0 synth:1b:q4_K synth:7b:q4_0"}
ROUNDS=${AB_ROUNDS:-3}
DEVS=${AB_DEVICES:-cuda:0,cpu}
OPTDEV=${AB_OPT_DEVICE:-cuda}
TESTS=${AB_TESTS-tests/test_cuda_qkv_rope.py tests/test_cuda_build.py}
TEST_K=${AB_TEST_K-qkv or rope or fused or prequant or grouped or repacked or decode or glu}
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
say "commit $GPU_CHECK_COMMIT; $GPU; variants: $VARIANTS"
for m in $MODELS; do   # one writer per model, in parallel
    $PY -c "import sys; from pyggml.bench_model import resolve_model; print(sys.argv[1], resolve_model(sys.argv[1], quiet=True))" \
        "$m" >"$W/model-$(echo "$m" | tr ':' '_').log" 2>&1 &
done
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so >"$W/build.log" 2>&1 \
    || { say "build failed"; tail -30 "$W/build.log"; pack; exit 1; }
say "built"
TEST_RC=0
if [ -n "$TESTS" ]; then
    # shellcheck disable=SC2086
    timeout 200 $PY -m pytest -q -p no:cacheprovider -rfs $TESTS ${TEST_K:+-k "$TEST_K"} >"$W/pytest.log" 2>&1
    TEST_RC=$?
    say "tests rc=$TEST_RC: $(tail -1 "$W/pytest.log")"
    grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -20
fi
pack
wait   # the models
: >"$W/index.txt"
for r in $(seq 1 "$ROUNDS"); do
    for m in $MODELS; do
        for v in $VARIANTS; do
            [ "$(left)" -gt 15 ] || { say "out of time before round $r $m $v"; break 3; }
            name=${v%%:*} opts=${v#*:} d="$W/r$r-$(echo "$m" | tr ':' '_')-$name"
            args=()
            IFS=, read -ra kv <<<"$opts"
            for o in "${kv[@]}"; do args+=(-O "$OPTDEV:$o"); done
            mkdir -p "$d"
            timeout 90 $PY -m pyggml bench -m "$m" -d "$DEVS" -p 0 -n 128 -r 3 --no-peer "${args[@]}" -o "$d" >"$d.txt" 2>&1
            f=$(ls "$d"/model-*.json 2>/dev/null | head -1)
            t=$(grep -E "tg128" "$d.txt" | head -1 | awk -F'|' '{print $8}')
            say "round $r $m $name: tg128 $t"
            [ -n "$f" ] && echo "$r $m $name $f" >>"$W/index.txt"
        done
    done
    pack
done
$PY - "$W" "$GPU_CHECK_COMMIT" "$GPU" "$TEST_RC" "$VARIANTS" <<'EOF' | tee -a "$W/summary.log"
import json, os, statistics, sys, time
w, commit, gpu, test_rc, variants = sys.argv[1:6]
runs = {}
for line in open(os.path.join(w, "index.txt")):
    r, m, v, f = line.split()
    doc = json.load(open(f))["results"][0]
    tg = next(t["pyggml"]["median"] for t in doc["tests"] if t["test"] == "tg128")
    runs.setdefault(m, {}).setdefault(v, []).append({"round": int(r), "tg128": tg, "bytes": os.path.getsize(doc["model_file"])})
med = {m: {v: statistics.median(x["tg128"] for x in xs) for v, xs in vs.items()} for m, vs in runs.items()}
share = {}
qk = next((m for m in runs if m.endswith(":q4_K")), None)
q0 = qk and qk[:-len("q4_K")] + "q4_0"   # the same shape
if q0 in runs and qk in runs:
    for v in runs[qk]:
        if v in runs[q0]:
            b0, bk = runs[q0][v][0]["bytes"], runs[qk][v][0]["bytes"]
            share[v] = round(med[qk][v] * bk / (med[q0][v] * b0), 4)
out = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-decode-ab", "gpu": gpu, "commit": commit,
       "command": "bash scripts/gpu_decode_ab.sh", "variants": variants, "tests_rc": int(test_rc),
       "tg128_median_of_rounds": med, "bandwidth_share_q4_K_vs_q4_0": share, "runs": runs}
json.dump(out, open(os.path.join(w, "decode-ab-summary.json"), "w"), indent=1)
print(json.dumps({"tg128_median_of_rounds": med, "bandwidth_share_q4_K_vs_q4_0": share}, indent=1))
EOF
cp "$W/decode-ab-summary.json" "$OUTD/" 2>/dev/null
pack
