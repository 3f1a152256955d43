#!/usr/bin/env bash
# scripts/gpu_depth_bench.sh — decode and prefill at depth on one NVIDIA GPU, pyggml next to
# llama.cpp's llama-bench in the same call (issue 14 items 1, 2, 6). Meant to finish in 8 minutes.
#
#   # in one device call, from the repo root, .peer carried (../shared/tools/llamacpp-peer.sh fetch):
#   bash .peer/build.sh && GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_depth_bench.sh
#
# What it does, each phase time-boxed (results are packed into $OUT after every phase, so a call cut
# short still returns what it measured):
#   1. builds the extension and the cuda + cpu plugins (make -j); writes the synthetic models in the
#      background (1b q4_0, 7b q4_0, 1b q4_K, 1b q6_K; cached under ~/.cache/pyggml/models);
#   2. correctness first: the flash-attention op cases on cuda, the decode kernel's cases, the model
#      against the float64 reference at several depths (tests/test_llama_depth.py) on cuda; if the
#      decode-kernel tests fail, the benches run with -O cuda:fa_decode=0 (the older kernels) and
#      the summary says so;
#   3. `pyggml bench --depth 0,4096,16384 -p 512 -n 128 --llama-bench` for 1b and 7b q4_0: tg128 and
#      pp512 at each depth, both engines, ratios on medians;
#   4. what the figures mean: tg128 at depth 0 with n_ctx 512 (against the run above, whose n_ctx is
#      16896: the n_ctx cost), the older decode kernels (fa_decode=0) and the sparse path (fa_sparse=1)
#      on the same depths, 7b's older kernels too;
#   5. q4_K and q6_K 1b at depths 0 and 4096 against llama-bench;
#   6. one summary JSON (date, GPU, commit, commands, every figure) in $OUT and bench/results/.
# Env: LLAMA_BENCH (default ~/llama-peer/bin/llama-bench, built by .peer/build.sh; without it the
# llama.cpp column stays empty), DEPTH_BENCH_REPS (3), DEPTH_BENCH_BUDGET_S (460); for a smoke run
# elsewhere: DEPTH_BENCH_DEVICES (cuda:0,cpu), DEPTH_BENCH_SMALL / _LARGE (synth:1b / synth:7b),
# DEPTH_BENCH_DEPTHS (0,4096,16384).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)
BUDGET=${DEPTH_BENCH_BUDGET_S:-460}
REPS=${DEPTH_BENCH_REPS:-3}
PY=${PYTHON:-python3}
LB=${LLAMA_BENCH:-$HOME/llama-peer/bin/llama-bench}
STAMP=$(date +%Y%m%dT%H%M%S)
DEV=${DEPTH_BENCH_DEVICES:-cuda:0,cpu}
S=${DEPTH_BENCH_SMALL:-synth:1b}
L=${DEPTH_BENCH_LARGE:-synth:7b}
DEPTHS=${DEPTH_BENCH_DEPTHS:-0,4096,16384}
D2=${DEPTHS%,*}   # the depths but the last
if [ -n "${OUT:-}" ]; then OUT_DIR=$(mktemp -d /tmp/depth-bench.XXXXXX); else OUT_DIR=$ROOT/bench/results/tmp-depth-$STAMP; fi
mkdir -p "$OUT_DIR" "$ROOT/bench/results"
export PYTHONUNBUFFERED=1
LOG=$OUT_DIR/depth.log
say() { echo "== depth-bench [$(( $(date +%s) - T0 ))s]: $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
pack() {
    [ -n "${OUT:-}" ] || return 0
    tar czf "$OUT/depth-results.tar.gz" -C "$OUT_DIR" . 2>/dev/null || true
    cp "$LOG" "$OUT/" 2>/dev/null || true
    return 0
}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export GPU_CHECK_COMMIT=$COMMIT
say "GPU: ${GPU:-none}; commit $COMMIT; llama-bench: $([ -x "$LB" ] && echo "$LB" || echo "missing ($LB)")"

# 1. build, models in the background
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
MODELS="$S:q4_0 $L:q4_0 $S:q4_K $S:q6_K"
$PY -c "import sys; sys.path.insert(0, '.'); from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(m, resolve_model(m, quiet=True), flush=True)" $MODELS >"$OUT_DIR/models.log" 2>&1 &
PREP=$!
say "make (ext, cuda, cpu)"
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so >"$OUT_DIR/build.log" 2>&1
BUILD_RC=$?
say "build rc=$BUILD_RC"
[ $BUILD_RC -eq 0 ] || { tail -30 "$OUT_DIR/build.log" | tee -a "$LOG"; pack; exit 1; }

# 2. correctness
say "tests: flash attention on cuda, the decode kernel, the model at depth"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rf tests/test_cuda_fattn_dec.py tests/test_llama_depth.py \
    "tests/test_ops.py" "tests/test_cuda_build.py" -k "flash or fattn or depth or extent" >"$OUT_DIR/pytest.log" 2>&1
TEST_RC=$?
tail -15 "$OUT_DIR/pytest.log" | tee -a "$LOG"
DEVOPT=()
if [ $TEST_RC -ne 0 ]; then
    DEVOPT=(-O cuda:fa_decode=0)
    say "TESTS FAILED (rc=$TEST_RC): the benches run with the older decode kernels (fa_decode=0)"
fi
pack

PEER=(--no-peer)
[ -x "$LB" ] && PEER=(--llama-bench "$LB")
bench() {   # name, timeout, model, args...: waits for the background writer to have written the model
    local name=$1 to=$2 model=$3
    shift 3
    while ! grep -q "^$model " "$OUT_DIR/models.log" 2>/dev/null && kill -0 $PREP 2>/dev/null && [ "$(left)" -gt 20 ]; do
        sleep 2
    done
    if [ "$(left)" -lt 20 ]; then say "skip $name: out of time"; return 0; fi
    [ "$to" -gt "$(left)" ] && to=$(left)
    say "bench $name: $*"
    timeout "$to" $PY -m pyggml bench -m "$model" -d "$DEV" -r "$REPS" -o "$OUT_DIR" "$@" >"$OUT_DIR/$name.txt" 2>"$OUT_DIR/$name.err"
    local rc=$?
    grep -E "^\|" "$OUT_DIR/$name.txt" | tee -a "$LOG"
    [ $rc -eq 0 ] || { say "$name rc=$rc"; tail -5 "$OUT_DIR/$name.err" | tee -a "$LOG"; }
    local f
    f=$(grep -o "model-[^ ]*\.json" "$OUT_DIR/$name.txt" | tail -1)
    [ -n "$f" ] && echo "$name $f" >>"$OUT_DIR/index.txt"
    pack
}

# 3. depth against llama-bench
bench 1b_q4_0_depth 120 $S:q4_0 -p 512 -n 128 --depth $DEPTHS "${PEER[@]}" "${DEVOPT[@]}"
bench 7b_q4_0_depth 150 $L:q4_0 -p 512 -n 128 --depth $DEPTHS "${PEER[@]}" "${DEVOPT[@]}"
# 4. the n_ctx cost, the older kernels, the sparse path
bench 1b_q4_0_nctx512 40 $S:q4_0 -p 0 -n 128 --depth 0 --n-ctx 512 --no-peer "${DEVOPT[@]}"
bench 1b_q4_0_nctx16896 40 $S:q4_0 -p 0 -n 128 --depth 0 --n-ctx 16896 --no-peer "${DEVOPT[@]}"
bench 1b_q4_0_old_kernels 60 $S:q4_0 -p 0 -n 128 --depth $DEPTHS --no-peer -O cuda:fa_decode=0
if [ $TEST_RC -eq 0 ]; then
    bench 1b_q4_0_sparse_off 40 $S:q4_0 -p 0 -n 128 --depth 0,2048,3840 --no-peer
    bench 1b_q4_0_sparse_on 40 $S:q4_0 -p 0 -n 128 --depth 0,2048,3840 --no-peer -O cuda:fa_sparse=1
fi
bench 7b_q4_0_old_kernels 80 $L:q4_0 -p 0 -n 128 --depth $DEPTHS --no-peer -O cuda:fa_decode=0
# 5. q4_K, q6_K
bench 1b_q4_K_depth 80 $S:q4_K -p 512 -n 128 --depth $D2 "${PEER[@]}" "${DEVOPT[@]}"
bench 1b_q6_K_depth 80 $S:q6_K -p 512 -n 128 --depth $D2 "${PEER[@]}" "${DEVOPT[@]}"

# 6. summary
SUMMARY=$OUT_DIR/depth-summary-$STAMP.json
$PY - "$OUT_DIR" "$SUMMARY" <<EOF
import json, os, sys, time
out_dir, path = sys.argv[1], sys.argv[2]
runs = {}
for line in open(os.path.join(out_dir, "index.txt")) if os.path.exists(os.path.join(out_dir, "index.txt")) else []:
    name, f = line.split()
    doc = json.load(open(os.path.join(out_dir, f)))["results"][0]
    rows = {}
    for t in doc["tests"]:
        p, l = t["pyggml"], t["llama_cpp"]
        rows[t["test"]] = {"pyggml_median": p["median"] if p else None, "llama_cpp_median": l["median"] if l else None,
                           "ratio_median": t.get("ratio_median")}
    runs[name] = {"file": f, "n_ctx": doc["n_ctx"], "device_options": doc.get("device_options"), "tests": rows,
                  "peer": (doc.get("llama_cpp") or {}).get("command")}
summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-depth-bench", "gpu": """$GPU""",
           "commit": "$COMMIT", "command": "bash scripts/gpu_depth_bench.sh", "reps": $REPS,
           "tests_rc": $TEST_RC, "benches_with_old_decode_kernels": $([ $TEST_RC -ne 0 ] && echo True || echo False),
           "runs": runs}
json.dump(summary, open(path, "w"), indent=1)
for name, r in runs.items():
    for t, v in r["tests"].items():
        ratio = f"{v['ratio_median']:.2f}x" if v["ratio_median"] else "-"
        print(f"{name:24s} {t:18s} pyggml {v['pyggml_median'] or 0:10.1f}  llama.cpp {v['llama_cpp_median'] or 0:10.1f}  {ratio}")
EOF
cp "$SUMMARY" "$ROOT/bench/results/" 2>/dev/null
[ -n "${OUT:-}" ] && cp "$SUMMARY" "$OUT/"
say "done in $(( $(date +%s) - T0 ))s: $SUMMARY"
pack
[ $TEST_RC -eq 0 ]
