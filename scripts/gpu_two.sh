#!/usr/bin/env bash
# scripts/gpu_two.sh — issue 13 on a two-GPU machine (nvidia-h200-x2), in one device call of about
# 9 minutes: build; the pipeline/model-split tests and the CUDA op suite; the two-GPU probe
# (bench/two_gpu_probe.py: every micro-batch under strict/relaxed/events x n_copies 1/2/4 x 1/2 GPUs,
# the pipelining speed-up, the pre-fix race with write_sync=0); split-model benches of 1b and 7b
# q4_0 (pp4096, tg128) on one and two GPUs, a Perfetto trace of a two-GPU prefill, the MUSA shim on
# both GPUs; llama.cpp's llama-bench on the same files with its layer split when .peer was carried
# (bash ../shared/tools/llamacpp-peer.sh fetch; carry [".peer"]).
#
#   GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_two.sh
# Results: $OUT/two-gpu.tar.gz (all logs and JSON) plus the probe JSON and a summary log.
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=two-gpu GPU_BUDGET_S=${GPU_TWO_BUDGET:-560}
. scripts/gpu_prelude.sh

say "$(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tr '\n' ';') commit $GPU_CHECK_COMMIT"
nvidia-smi topo -m > "$W/topo.txt" 2>&1
if [ -x .peer/build.sh ] && [ ! -x "$HOME/llama-peer/bin/llama-bench" ]; then
    setsid bash .peer/build.sh > "$W/peer-build.log" 2>&1 < /dev/null &
    say "llama-bench build started in the background"
fi
if ls .whl/*.whl >/dev/null 2>&1; then   # carried wheels (cffi for pyggml check; ray for the Ray stages)
    install_wheels
fi
touch .stamp-deps
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cpu.so > "$W/build.log" 2>&1 || { say "build of the core failed"; tail -30 "$W/build.log"; pack; exit 1; }
for m in 7b 1b; do
    setsid $PY -c "from pyggml.bench_model import resolve_model; print(resolve_model('synth:$m:q4_0', quiet=True))" \
        > "$W/synth-$m.log" 2>&1 < /dev/null &
done
make -j"$(nproc)" pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-musa.so >> "$W/build.log" 2>&1
say "build rc=$? ($(ls pyggml/plugins | tr '\n' ' '))"
$PY -m pyggml devices | tee -a "$W/summary.log"

say "tests"
timeout 200 $PY -m pytest -q -p no:cacheprovider tests/test_pipeline.py tests/test_model_split.py tests/test_sched.py \
    tests/test_cuda_repack.py "tests/test_ops.py" -k "not vulkan and not hip and not musa" > "$W/pytest.log" 2>&1
say "pytest rc=$?: $(tail -1 "$W/pytest.log")"
grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -20 | tee -a "$W/summary.log"
KOPT=()     # the repacked mat-vec and int8 GEMM are the default; if their tests fail, bench the old kernels
if grep -qE "^(FAILED|ERROR) tests/test_cuda_repack" "$W/pytest.log"; then
    KOPT=(-O cuda:repack=0 -O cuda:mmq=0); say "repack/mmq tests failed: benches use repack=0 mmq=0"
fi
pack

if $PY -c "import cffi" 2>/dev/null; then
    say "pyggml check: asynchronous rules on cuda and musa (every GPU), and cuda with write_sync=0"
    for p in cuda musa; do
        timeout 90 $PY -m pyggml check pyggml/plugins/libpyggml-$p.so --no-ops --async-rounds 6 \
            --json "$W/check-$p.json" > "$W/check-$p.log" 2>&1
        say "check $p rc=$?: $(grep -cE '^pass' "$W/check-$p.log") pass, $(grep -cE '^FAIL' "$W/check-$p.log") FAIL"
        grep -E "^FAIL" "$W/check-$p.log" | head -5 | tee -a "$W/summary.log"
    done
    timeout 60 $PY -m pyggml check pyggml/plugins/libpyggml-cuda.so --no-ops --async-rounds 6 -O write_sync=0 \
        --json "$W/check-cuda-write_sync0.json" > "$W/check-cuda-write_sync0.log" 2>&1
    say "check cuda write_sync=0 rc=$?: $(grep -E '^(pass|FAIL) R13' "$W/check-cuda-write_sync0.log" | head -2 | tr '\n' ' ')"
fi
pack

say "two-GPU probe"
timeout 150 $PY bench/two_gpu_probe.py --devices cuda:0,cuda:1 --runs "${GPU_TWO_RUNS:-10}" --out "$W/probe.json" \
    --trace "$W/trace-probe-2gpu.json" \
    2>&1 | tee "$W/probe.log" | tail -25
cp "$W/probe.json" "$OUTD/" 2>/dev/null
$PY bench/trace_overlap.py "$W/trace-probe-2gpu.json" 2>&1 | tee "$W/overlap-probe.json" | tr -d '\n' | tee -a "$W/summary.log"; echo
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
    [ "$(left)" -lt 45 ] && { say "skipped $name: time"; return; }
    timeout "$(( $(left) - 30 ))" $PY -m pyggml bench -m "$model" -o "$W" "${KOPT[@]}" "$@" > "$W/$name.log" 2>&1
    say "$name rc=$?: $(grep -E '^\| .*(pp|tg)[0-9]' "$W/$name.log" | awk -F'|' '{printf "%s %s; ", $7, $8}')"
    grep -E "layers|memory per device|host syncs per decoded" "$W/$name.log" | tee -a "$W/summary.log"
}
M7=$(wait_model 7b) && {
    bench 7b-1gpu "$M7" -d cuda:0 -r 3 -p 4096 -n 128
    bench 7b-2gpu "$M7" -d cuda:0,cuda:1 -r 3 -p 4096 -n 128
    bench 7b-2gpu-ub256 "$M7" -d cuda:0,cuda:1 -r 3 -p 4096 -n 0 -ub 256
    bench 7b-1gpu-ub256 "$M7" -d cuda:0 -r 3 -p 4096 -n 0 -ub 256
    bench 7b-2gpu-trace "$M7" -d cuda:0,cuda:1 -r 1 -p 4096 -n 16 --trace "$W/trace-7b-2gpu-pp4096.json"
    cp "$W/trace-7b-2gpu-pp4096.json" "$OUTD/" 2>/dev/null
    $PY bench/trace_overlap.py "$W/trace-7b-2gpu-pp4096.json" 2>&1 | tee "$W/overlap-7b.json" | tr -d '\n' | tee -a "$W/summary.log"; echo
}
pack
M1=$(wait_model 1b) && {
    bench 1b-1gpu "$M1" -d cuda:0 -r 3 -p 4096 -n 128
    bench 1b-2gpu "$M1" -d cuda:0,cuda:1 -r 3 -p 4096 -n 128
    bench 1b-musa-2gpu "$M1" -d musa:0,musa:1 -r 2 -p 1024 -n 32
}
pack

LB=$HOME/llama-peer/bin/llama-bench
if [ -f .peer/build.sh ] && [ "${GPU_TWO_PEER:-1}" = 1 ]; then
    while pgrep -f "llama-peer" >/dev/null && [ ! -x "$LB" ] && [ "$(left)" -gt 70 ]; do sleep 3; done
    if [ -x "$LB" ]; then
        for m in ${M7:-} ${M1:-}; do
            n=$(basename "$m" .gguf)
            [ "$(left)" -lt 40 ] && break
            CUDA_VISIBLE_DEVICES=0 timeout "$(( $(left) - 20 ))" "$LB" -m "$m" -ngl 99 -fa 1 -p 4096 -n 128 -r 3 -o json \
                > "$W/llama-$n-1gpu.json" 2> "$W/llama-$n-1gpu.err"
            say "llama.cpp $n 1 GPU rc=$?"
            [ "$(left)" -lt 40 ] && break
            timeout "$(( $(left) - 20 ))" "$LB" -m "$m" -ngl 99 -fa 1 -sm layer -p 4096 -n 128 -r 3 -o json \
                > "$W/llama-$n-2gpu.json" 2> "$W/llama-$n-2gpu.err"
            say "llama.cpp $n 2 GPUs rc=$?"
            $PY - "$W/llama-$n-1gpu.json" "$W/llama-$n-2gpu.json" <<'EOF' | tee -a "$W/summary.log"
import json, sys
for p in sys.argv[1:]:
    try:
        rows = json.load(open(p))
    except Exception as e:
        print(p, "unreadable:", e); continue
    for r in rows:
        print(p.rsplit("/", 1)[-1], f"pp{r['n_prompt']} tg{r['n_gen']}: {r['avg_ts']:.1f} t/s")
EOF
        done
    else
        say "llama-bench not built in time: $(tail -3 "$W/peer-build.log" 2>/dev/null)"
    fi
fi
say "done"
pack
