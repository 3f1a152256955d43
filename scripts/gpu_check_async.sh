#!/usr/bin/env bash
# scripts/gpu_check_async.sh — the asynchronous rules of the plugin ABI (REQUIREMENTS.md R13-R18:
# blocking copies against queued work, stream_synchronize, queue order, events across streams and
# GPUs, asynchronous errors) on the cuda plugin and the musa shim build, on every GPU of the machine,
# in about 3 minutes (build ~1-1.5 min on 16 cores, then ~20 s per GPU and plugin run).
#
#   bash scripts/gpu_check_async.sh            # from the repository root, on the GPU machine
#   ASYNC_MB=64 ASYNC_ROUNDS=40 bash scripts/gpu_check_async.sh   # the defaults
#
# Each rule is a race run many rounds with tens of MiB per copy and every byte compared, so a
# plugin whose blocking buffer_write returns before its DMA lands (CUDA's pageable cudaMemcpy on
# the legacy stream, seen from a non-blocking stream) fails R13 with the count of stale floats.
# Then, as proof that the check sees that bug on this hardware, cuda once more with the device option
# write_sync=0 (the plugin before the fix): R13 must FAIL there (recorded as "write_sync_0_caught").
# Writes to $OUT (or bench/results/tmp): check-cuda.json, check-musa.json, check-cuda-write_sync0.json
# (every rule's line per device), async-summary.json (date, GPUs, commit, command, results), check.log.
# Exit status: 1 when a rule failed on cuda or musa as built (the write_sync=0 run is expected to fail).
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-bench/results/tmp}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
MB=${ASYNC_MB:-64}
ROUNDS=${ASYNC_ROUNDS:-40}
LOG="$OUT_DIR/check.log"
say() { echo "== gpu-check-async: $*" | tee -a "$LOG"; }

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
GPUS=$(nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | tr '\n' ';')
COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
say "GPUs: ${GPUS:-none visible}; commit $COMMIT; $MB MiB x $ROUNDS rounds"
if $PY -c "import numpy, Cython, pytest, cffi" 2>/dev/null; then touch .stamp-deps; fi

t0=$(date +%s)
make -k -j"$(nproc)" ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-musa.so >"$OUT_DIR/build.log" 2>&1
say "build rc=$? in $(( $(date +%s) - t0 ))s"

RC=0
RESULTS=""
for name in cuda musa; do
    lib=pyggml/plugins/libpyggml-$name.so
    if [ ! -f "$lib" ]; then say "$name: $lib not built (see build.log)"; RC=1; RESULTS="$RESULTS\"$name\": \"not built\","; continue; fi
    t1=$(date +%s)
    timeout 75 $PY -m pyggml check --no-ops --async-mb "$MB" --async-rounds "$ROUNDS" \
        --json "$OUT_DIR/check-$name.json" "$lib" 2>&1 | tee -a "$LOG"
    prc=${PIPESTATUS[0]}
    say "$name: rc=$prc in $(( $(date +%s) - t1 ))s"
    [ "$prc" = 0 ] || RC=1
    RESULTS="$RESULTS\"$name\": $prc,"
done
CAUGHT=skipped
if [ -f pyggml/plugins/libpyggml-cuda.so ]; then
    timeout 45 $PY -m pyggml check --no-ops --async-mb "$MB" --async-rounds "$ROUNDS" -O write_sync=0 \
        --json "$OUT_DIR/check-cuda-write_sync0.json" pyggml/plugins/libpyggml-cuda.so >"$OUT_DIR/write_sync0.log" 2>&1
    if grep -q "^FAIL R13" "$OUT_DIR/write_sync0.log"; then CAUGHT=true
    elif grep -q "unavailable here" "$OUT_DIR/write_sync0.log"; then CAUGHT=skipped
    else CAUGHT=false; fi
    grep -E "^(FAIL|pass) R13" "$OUT_DIR/write_sync0.log" | tee -a "$LOG"
    say "cuda with write_sync=0 (the pre-fix race): R13 caught it: $CAUGHT"
fi
cat >"$OUT_DIR/async-summary.json" <<JSON
{"date": "$(date -Iseconds)", "kind": "gpu-check-async", "gpus": "$GPUS", "commit": "$COMMIT",
 "command": "ASYNC_MB=$MB ASYNC_ROUNDS=$ROUNDS bash scripts/gpu_check_async.sh",
 "exit_status": {${RESULTS%,}}, "write_sync_0_caught": "$CAUGHT"}
JSON
say "done: exit $RC"
exit $RC
