#!/usr/bin/env bash
# scripts/gpu_depth_bench.sh — decode and prefill at depth on one NVIDIA GPU, pyggml next to
# llama.cpp's llama-bench in the same call (issue 14 items 1, 2, 6). Finishes within 9 minutes on one
# H200, the llama-bench build included (DEPTH_BENCH_BUDGET_S, default 510 s: no phase starts after it,
# each phase is time-boxed).
#
#   # here, once: bash ../shared/tools/llamacpp-peer.sh fetch        (-> .peer, ignored by git)
#   # one device call, kind nvidia-h200, carry [".peer"], timeout_s 600, from the repo root:
#   GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_depth_bench.sh
#
# What it does (results are packed into $OUT after every phase, so a call cut short still returns
# what it measured):
#   0. starts .peer/build.sh in the background when llama-bench is not built yet (about 6 minutes on
#      16 cores; a warm machine keeps it under $HOME/llama-peer);
#   1. builds the extension and the cuda + cpu plugins (make -j); writes the synthetic models in the
#      background (1b q4_0, 7b q4_0, 1b q4_K; cached under ~/.cache/pyggml/models);
#   2. correctness first, on the GPU: the decode flash attention with each of fa_decode 0/1 x
#      fa_sparse 0/1 (the op over model-like K/V views, a model's logits at depth against float64:
#      tests/test_cuda_fattn_dec.py, also its host-emulated cases), the CUDA flash-attention paths
#      and the op suite's flash cases, the model at depth across extents (tests/test_llama_depth.py);
#      the prefill flash attention with fa_mma 0/1/2 and a model's prefill at depth
#      (tests/test_cuda_fattn_mma.py); if they fail, the benches run with -O cuda:fa_decode=0 -O
#      cuda:fa_mma=1 (the older kernels) and the summary says so;
#   3. while llama-bench still builds (these runs are marked during_peer_build in the summary: the
#      compile loads the CPU; with llama-bench built already they run after step 4, time left): tg128 at depth 0 with n_ctx 512 and 16896 (the n_ctx cost),
#      1b q4_0 tg128 at depth 0 and 4096, 1b q4_0 and q4_K tg128 interleaved twice (q4_K's share of
#      bandwidth against q4_0's: tg128 x file bytes), and under PyTorch's profiler (scripts/profile_decode.py) the
#      kernels of a 1b decode token at depth 0 and 4096 and of a 512-token prefill chunk at depth 4096;
#   4. once llama-bench is there (or at the latest when DEPTH_BENCH_PEER_WAIT_S, default 360 s, have
#      passed: then without the llama.cpp column; on a warm machine it is built already), the decode-at-depth table:
#      `pyggml bench --depth 0,4096,16384 -p 512 -n 128 --llama-bench PATH` for 1b q4_0, 7b q4_0 and
#      1b q4_K: tg128 and pp512 at each depth, both engines, ratios on medians; then pp4096 (the long
#      prompt) of 1b and 7b q4_0;
#   5. one summary JSON (date, GPU, commit, command, every figure, the table) in $OUT and bench/results/.
# Env: LLAMA_BENCH (default ~/llama-peer/bin/llama-bench), DEPTH_BENCH_REPS (3), DEPTH_BENCH_ATTN_TESTS
# (1; 0 leaves out the attention tests of step 2, for a change elsewhere), DEPTH_BENCH_BUDGET_S
# (510), DEPTH_BENCH_PEER_WAIT_S (360); for a smoke run elsewhere: DEPTH_BENCH_DEVICES (cuda:0,cpu),
# DEPTH_BENCH_SMALL / _LARGE (synth:1b / synth:7b), DEPTH_BENCH_DEPTHS (0,4096,16384), DEPTH_BENCH_MAKE
# (the make targets), DEPTH_BENCH_OPT_DEVICE (cuda: the device the -O options go to).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)
BUDGET=${DEPTH_BENCH_BUDGET_S:-510}
PEER_WAIT=${DEPTH_BENCH_PEER_WAIT_S:-360}
REPS=${DEPTH_BENCH_REPS:-3}
PY=${PYTHON:-python3}
LB=${LLAMA_BENCH:-$HOME/llama-peer/bin/llama-bench}
STAMP=$(date +%Y%m%dT%H%M%S)
DEV=${DEPTH_BENCH_DEVICES:-cuda:0,cpu}
OPTDEV=${DEPTH_BENCH_OPT_DEVICE:-cuda}
S=${DEPTH_BENCH_SMALL:-synth:1b}
L=${DEPTH_BENCH_LARGE:-synth:7b}
DEPTHS=${DEPTH_BENCH_DEPTHS:-0,4096,16384}
MAKE_TARGETS=${DEPTH_BENCH_MAKE:-ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so}
if [ -n "${OUT:-}" ]; then OUT_DIR=$(mktemp -d /tmp/depth-bench.XXXXXX); else OUT_DIR=$ROOT/bench/results/tmp-depth-$STAMP; fi
mkdir -p "$OUT_DIR" "$ROOT/bench/results"
export PYTHONUNBUFFERED=1
LOG=$OUT_DIR/depth.log
: >"$OUT_DIR/index.txt"
say() { echo "== depth-bench [$(( $(date +%s) - T0 ))s]: $*" | tee -a "$LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
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

# 0. the peer's build, in the background
PEER_BUILD=""
PEER_BUILD_S=0
if [ ! -x "$LB" ] && [ -x .peer/build.sh ]; then
    bash .peer/build.sh >"$OUT_DIR/peer-build.log" 2>&1 &
    PEER_BUILD=$!
fi
say "GPU: ${GPU:-none}; commit $COMMIT; llama-bench: $([ -x "$LB" ] && echo "$LB" || { [ -n "$PEER_BUILD" ] && echo "building (.peer/build.sh)" || echo "missing ($LB; carry .peer)"; })"
peer_building() { [ -n "$PEER_BUILD" ] && kill -0 "$PEER_BUILD" 2>/dev/null; }

# 1. build, models in the background
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
MODELS="$S:q4_0 $L:q4_0 $S:q4_K"
$PY -c "import sys; sys.path.insert(0, '.'); from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(m, resolve_model(m, quiet=True), flush=True)" $MODELS >"$OUT_DIR/models.log" 2>&1 &
PREP=$!
say "make $MAKE_TARGETS"
# shellcheck disable=SC2086
make -j"$(nproc)" $MAKE_TARGETS >"$OUT_DIR/build.log" 2>&1
BUILD_RC=$?
say "build rc=$BUILD_RC"
[ $BUILD_RC -eq 0 ] || { tail -30 "$OUT_DIR/build.log" | tee -a "$LOG"; pack; exit 1; }

# 2. correctness
say "tests: the decode flash attention (fa_decode x fa_sparse), the flash-attention paths, the model at depth"
TEST_RC=0
if [ "${DEPTH_BENCH_ATTN_TESTS:-1}" = 1 ]; then   # 0: a change that leaves the attention alone (about 160 s less)
timeout 200 $PY -m pytest -q -p no:cacheprovider -rfs tests/test_cuda_fattn_dec.py tests/test_cuda_fattn_mma.py tests/test_llama_depth.py \
    tests/test_ops.py tests/test_cuda_build.py -k "flash or fattn or depth or extent" >"$OUT_DIR/pytest.log" 2>&1
TEST_RC=$?
else
    echo "attention tests not run (DEPTH_BENCH_ATTN_TESTS=0)" >"$OUT_DIR/pytest.log"
fi
# the decode launches: q/k/v + ropes + cache writes, the fused and pre-quantizing producers, the repacked paths
timeout 150 $PY -m pytest -q -p no:cacheprovider -rfs tests/test_cuda_qkv_rope.py tests/test_cuda_repack.py \
    tests/test_cuda_build.py -k "qkv or rope or fused or prequant or grouped or repacked or decode" >>"$OUT_DIR/pytest.log" 2>&1
TEST_RC=$(( TEST_RC | $? ))
# the prefill GEMM path: the dequantizer to f16, cuBLAS and our WMMA kernel
timeout 100 $PY -m pytest -q -p no:cacheprovider -rfs tests/test_cuda_blas.py >>"$OUT_DIR/pytest.log" 2>&1
TEST_RC=$(( TEST_RC | $? ))
grep -E "^FAILED|^ERROR|passed|failed" "$OUT_DIR/pytest.log" | tail -15 | tee -a "$LOG"
TEST_SUMMARY=$(grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)|^attention tests not run" "$OUT_DIR/pytest.log" | tr '\n' ' ')
DEVOPT=()
if [ $TEST_RC -ne 0 ]; then
    DEVOPT=(-O "$OPTDEV:fa_decode=0" -O "$OPTDEV:fa_mma=1" -O "$OPTDEV:qkv_rope=0")
    say "TESTS FAILED (rc=$TEST_RC): the benches run with the older kernels (fa_decode=0, fa_mma=1, qkv_rope=0)"
fi
pack

bench() {   # name, timeout, model, args...: waits for the background writer to have written the model
    local name=$1 to=$2 model=$3
    shift 3
    while ! grep -q "^$model " "$OUT_DIR/models.log" 2>/dev/null && kill -0 $PREP 2>/dev/null && [ "$(left)" -gt 20 ]; do
        sleep 2
    done
    if [ "$(left)" -lt 20 ]; then say "skip $name: out of time"; return 0; fi
    [ "$to" -gt "$(left)" ] && to=$(left)
    local during=0
    peer_building && during=1
    say "bench $name: $*"
    mkdir -p "$OUT_DIR/$name"      # a folder per run: two runs in one second would write one file name
    timeout "$to" $PY -m pyggml bench -m "$model" -d "$DEV" -r "$REPS" -o "$OUT_DIR/$name" "$@" >"$OUT_DIR/$name.txt" 2>"$OUT_DIR/$name.err"
    local rc=$?
    grep -E "^\|" "$OUT_DIR/$name.txt" | tee -a "$LOG"
    [ $rc -eq 0 ] || { say "$name rc=$rc"; tail -5 "$OUT_DIR/$name.err" | tee -a "$LOG"; }
    local f
    f=$(grep -o "model-[^ /]*\.json" "$OUT_DIR/$name.txt" | tail -1)
    [ -n "$f" ] && echo "$name $name/$f $during" >>"$OUT_DIR/index.txt"
    pack
}

# 3. ours only: the n_ctx cost, the older kernels, the sparse path; while the peer builds when it
# does (marked in the summary), else after the table with the time left
D0=${DEPTHS%%,*}
DIAG_DONE=0
diagnostics() {
    DIAG_DONE=1
    bench 1b_q4_0_nctx512 40 $S:q4_0 -p 0 -n 128 --depth $D0 --n-ctx 512 --no-peer "${DEVOPT[@]}"
    bench 1b_q4_0_nctx16896 40 $S:q4_0 -p 0 -n 128 --depth $D0 --n-ctx 16896 --no-peer "${DEVOPT[@]}"
    bench 1b_q4_0_new 50 $S:q4_0 -p 0 -n 128 --depth 0,4096 --no-peer "${DEVOPT[@]}"
    for round in 1 2; do   # q4_K's share of bandwidth against q4_0's, runs interleaved (summary: bandwidth_share)
        bench share${round}_q4_0 30 $S:q4_0 -p 0 -n 128 --no-peer "${DEVOPT[@]}"
        bench share${round}_q4_K 30 $S:q4_K -p 0 -n 128 --no-peer "${DEVOPT[@]}"
    done
    if [ "$(left)" -gt 90 ] && $PY -c "import torch" 2>/dev/null; then   # where a token's / a chunk's GPU time goes
        say "profile: 1b q4_0 decode at depth 0 and 4096, prefill 512 at depth 4096 (scripts/profile_decode.py)"
        timeout 40 $PY scripts/profile_decode.py $S:q4_0 --steps 16 --devices "$DEV" >"$OUT_DIR/profile-decode-1b.txt" 2>&1
        timeout 40 $PY scripts/profile_decode.py $S:q4_0 --steps 16 --depth 4096 --devices "$DEV" >"$OUT_DIR/profile-decode-1b-d4096.txt" 2>&1
        timeout 60 $PY scripts/profile_decode.py $S:q4_0 --steps 4 --depth 4096 --prefill 512 --devices "$DEV" >"$OUT_DIR/profile-prefill-1b-d4096.txt" 2>&1
        for f in profile-decode-1b profile-decode-1b-d4096 profile-prefill-1b-d4096; do
            grep -E "^ *(void )?k_|nvjet|Memcpy" "$OUT_DIR/$f.txt" | head -12 | cut -c1-70,150-205 | tee -a "$LOG"
        done
        pack
    fi
}
peer_building && diagnostics
while peer_building && [ "$(elapsed)" -lt "$PEER_WAIT" ]; do sleep 3; done
if [ -n "$PEER_BUILD" ]; then
    if peer_building; then
        say "llama-bench still building after ${PEER_WAIT}s: the table runs without the llama.cpp column"
        kill "$PEER_BUILD" 2>/dev/null
    else
        wait "$PEER_BUILD"; say "peer build rc=$? (tail of its log:)"; tail -2 "$OUT_DIR/peer-build.log" | tee -a "$LOG"
    fi
    PEER_BUILD_S=$(elapsed)
fi
PEER=(--no-peer)
[ -x "$LB" ] && PEER=(--llama-bench "$LB")

# 4. the decode-at-depth table against llama-bench
bench 1b_q4_0_depth 110 $S:q4_0 -p 512 -n 128 --depth $DEPTHS "${PEER[@]}" "${DEVOPT[@]}"
bench 7b_q4_0_depth 150 $L:q4_0 -p 512 -n 128 --depth $DEPTHS "${PEER[@]}" "${DEVOPT[@]}"
bench 1b_q4_K_depth 110 $S:q4_K -p 512 -n 128 --depth $DEPTHS "${PEER[@]}" "${DEVOPT[@]}"
bench 1b_q4_0_pp4096 50 $S:q4_0 -p 4096 -n 0 "${PEER[@]}" "${DEVOPT[@]}"
bench 7b_q4_0_pp4096 70 $L:q4_0 -p 4096 -n 0 "${PEER[@]}" "${DEVOPT[@]}"
# with time left and not done yet: what the figures mean
[ $DIAG_DONE -eq 0 ] && [ "$(left)" -gt 60 ] && diagnostics

# 5. summary
SUMMARY=$OUT_DIR/depth-summary-$STAMP.json
$PY - "$OUT_DIR" "$SUMMARY" <<EOF
import json, os, sys, time
out_dir, path = sys.argv[1], sys.argv[2]
runs, table = {}, []
for line in open(os.path.join(out_dir, "index.txt")):
    name, f, during = line.split()
    doc = json.load(open(os.path.join(out_dir, f)))["results"][0]
    rows = {}
    for t in doc["tests"]:
        p, l = t["pyggml"], t["llama_cpp"]
        rows[t["test"]] = {"pyggml_median": p["median"] if p else None, "llama_cpp_median": l["median"] if l else None,
                           "ratio_median": t.get("ratio_median")}
        if name.endswith(("_depth", "_pp4096")):
            table.append({"model": name.rsplit("_", 1)[0], **{"test": t["test"]}, **rows[t["test"]]})
    runs[name] = {"file": f, "n_ctx": doc["n_ctx"], "device_options": doc.get("device_options"), "tests": rows,
                  "during_peer_build": during == "1", "peer": (doc.get("llama_cpp") or {}).get("command"),
                  "forwards": (doc.get("pyggml") or {}).get("forwards")}
# q4_K's share of bandwidth against q4_0's: tg128 x the file's bytes, q4_K over q4_0, per interleaved
# round (share1/share2) and from the table's two 1b runs
def tg_bytes(name):
    r = runs.get(name)
    tg = r and (r["tests"].get("tg128") or {}).get("pyggml_median")
    f = r and json.load(open(os.path.join(out_dir, r["file"])))["results"][0].get("model_file")
    return tg * os.path.getsize(f) if tg and f and os.path.exists(f) else None
share = {}
for a, b in (("share1_q4_0", "share1_q4_K"), ("share2_q4_0", "share2_q4_K"), ("1b_q4_0_depth", "1b_q4_K_depth")):
    x, y = tg_bytes(a), tg_bytes(b)
    if x and y:
        share[b] = round(y / x, 4)
summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-depth-bench", "gpu": """$GPU""",
           "commit": "$COMMIT", "command": "bash scripts/gpu_depth_bench.sh", "devices": "$DEV", "reps": $REPS,
           "tests_rc": $TEST_RC, "tests": """$TEST_SUMMARY""", "peer_ready_s": $PEER_BUILD_S,
           "benches_with_old_decode_kernels": $([ $TEST_RC -ne 0 ] && echo True || echo False),
           "decode_at_depth": table, "bandwidth_share_q4_K_vs_q4_0": share, "runs": runs}
json.dump(summary, open(path, "w"), indent=1)
print("| model | test | pyggml t/s | llama.cpp t/s | ratio |")
print("|---|---|---:|---:|---:|")
for r in table:
    ratio = f"{r['ratio_median']:.2f}x" if r["ratio_median"] else "-"
    lc = f"{r['llama_cpp_median']:.1f}" if r["llama_cpp_median"] else "-"
    print(f"| {r['model']} | {r['test']} | {r['pyggml_median'] or 0:.1f} | {lc} | {ratio} |")
print("q4_K's share of bandwidth against q4_0's (tg128 x file bytes):", share)
for name, r in runs.items():
    if name.endswith(("_depth", "_pp4096")):
        continue
    for t, v in r["tests"].items():
        print(f"{name:28s} {t:16s} pyggml {v['pyggml_median'] or 0:10.1f}" + (" (during the peer build)" if r["during_peer_build"] else ""))
EOF
cp "$SUMMARY" "$ROOT/bench/results/" 2>/dev/null
[ -n "${OUT:-}" ] && cp "$SUMMARY" "$OUT/"
say "done in $(elapsed)s: $SUMMARY"
pack
[ $TEST_RC -eq 0 ]
