#!/usr/bin/env bash
# scripts/gpu_cudak.sh — issue 14 items 3 and 4 (CUDA weight repack, int8 prefill GEMM, NaN in the
# int8 quantizers) on the GPU machine, in about 8 minutes (no network needed):
#   1. build the package, the CUDA and CPU plugins (make -j);
#   2. tests: the repacked paths and NaN (tests/test_cuda_repack.py: host harness + GPU), the CUDA
#      build/blas tests and the CUDA op suite (tests/test_ops.py -k cuda);
#   3. mat-vec GB/s and prefill GEMM TFLOP/s (bench/cuda_matvec.py, 4096x14336 chains, N = 512)
#      three times in one call: new kernels, the new mat-vec without programmatic dependent launch,
#      and the old kernels (device options repack=0 mmq=0);
#   4. model benches: 1b/7b q4_0 and q4_K, pp512 + tg128 and pp4096, new and old kernels in the same
#      process (scripts/gpu_cudak.py models), as long as time is left;
#   5. with time left: ncu on one new mat-vec and one int8 GEMM launch; the kernels of a 1b pp4096
#      (scripts/profile_decode.py --prefill 4096) and the host's per-chunk mask cost.
# Everything goes to $OUT: cudak-summary.json (the table), pytest.log, and cudak-results.tar.gz with
# every JSON and log (repacked after each phase, so a call cut short still returns what it measured).
#
#   bash scripts/gpu_cudak.sh                        # through the device tool: OUT is set by it
#   CUDAK_MODELS="synth:1b:q4_0" bash scripts/gpu_cudak.sh       # fewer models
#   CUDAK_BUDGET_S=420 ...                            # seconds after which no new phase starts
#   CUDAK_COMMIT=$(git rev-parse --short HEAD) ...    # when .git does not travel
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T0=$(date +%s)
BUDGET=${CUDAK_BUDGET_S:-450}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
if [ -n "${OUT:-}" ]; then D=$(mktemp -d /tmp/cudak.XXXXXX); else OUT=$ROOT/bench/results/tmp; D=$OUT; fi
mkdir -p "$OUT" "$D"
elapsed() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
say() { echo "== cudak [$(elapsed)s]: $*"; }
pack() {
    tar czf "$OUT/cudak-results.tar.gz" -C "$D" . 2>/dev/null || true
    for f in pytest.log cudak-summary.json; do [ -f "$D/$f" ] && [ "$D" != "$OUT" ] && cp "$D/$f" "$OUT/"; done
    return 0
}

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
COMMIT=${CUDAK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export GPU_CHECK_COMMIT=$COMMIT
say "GPU: ${GPU:-none visible}; $(nvcc --version 2>/dev/null | tail -1); commit $COMMIT"

# ---- 1. build
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
t=$(date +%s)
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so >"$D/build.log" 2>&1
BUILD_RC=$?
BUILD_S=$(( $(date +%s) - t ))
say "build rc=$BUILD_RC in ${BUILD_S}s"
[ $BUILD_RC -ne 0 ] && tail -30 "$D/build.log"
$PY -m pyggml devices >"$D/devices.txt" 2>&1

# synthetic models, written in the background while the tests run
MODELS=${CUDAK_MODELS:-synth:1b:q4_0 synth:7b:q4_0 synth:1b:q4_K synth:7b:q4_K}
$PY -c "import sys; from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(m, resolve_model(m, quiet=True), flush=True)" $MODELS >"$D/models-prep.log" 2>&1 &
PREP=$!

# ---- 2. tests
t=$(date +%s)
timeout 200 $PY -X faulthandler -m pytest -q -rfE -p no:cacheprovider tests/test_cuda_repack.py tests/test_cuda_build.py \
    tests/test_cuda_blas.py tests/test_ops.py -k cuda >"$D/pytest.log" 2>&1
TEST_RC=$?
TEST_S=$(( $(date +%s) - t ))
TEST_SUMMARY=$(tail -1 "$D/pytest.log")
say "pytest rc=$TEST_RC in ${TEST_S}s: $TEST_SUMMARY"
grep -E "^(FAILED|ERROR)" "$D/pytest.log" | head -30
NEW_OK=1
if grep -qE "^(FAILED|ERROR).*test_cuda_repack" "$D/pytest.log"; then NEW_OK=0; say "the repacked paths failed tests: their figures below measure wrong answers"; fi
pack

# ---- 3. mat-vec and GEMM: new, new without PDL, old
BENCH="$PY bench/cuda_matvec.py --types q4_0,q4_K,q8_0,q6_K --reps 7 --out $D --results="
if [ "$(left)" -gt 150 ]; then
    say "mat-vec + GEMM bench (new)"
    timeout 100 $BENCH --gemm-types q4_0,q4_K,q8_0,q6_K --tag new 2>&1 | tee "$D/bench-new.log"
    say "mat-vec bench (new, pdl=0)"
    timeout 60 $BENCH --gemm-types "" --option pdl=0 --tag nopdl 2>&1 | tee "$D/bench-nopdl.log"
    say "mat-vec + GEMM bench (old: repack=0 mmq=0)"
    timeout 100 $BENCH --gemm-types q4_0,q4_K,q8_0,q6_K --option repack=0 --option mmq=0 --tag old 2>&1 | tee "$D/bench-old.log"
    pack
fi

# ---- 4. model benches
t=$(date +%s)
wait_left=$(( $(left) - 200 ))
if [ "$wait_left" -gt 0 ]; then
    # wait for the model files, but not past the point where no bench could run
    for _ in $(seq 1 "$wait_left"); do kill -0 $PREP 2>/dev/null || break; sleep 1; done
fi
say "models ready: $(tr '\n' ' ' <"$D/models-prep.log")"
timeout $(( $(left) > 30 ? $(left) : 30 )) $PY scripts/gpu_cudak.py models "$D" $(( T0 + BUDGET )) $MODELS 2>&1 \
    | tee "$D/models.log"
MODEL_RC=$?
pack

# ---- 5. what limits them (time permitting)
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ "$(left)" -gt 60 ]; then
    say "ncu: one repacked mat-vec (q4_0, 4096x14336) and one int8 GEMM (q4_0, N = 512)"
    for k in k_mvr k_mmq; do
        timeout 45 "$NCU" --kernel-name "regex:$k" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
            --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
            $PY bench/cuda_matvec.py --types q4_0 --gemm-types q4_0 --pairs 2 --reps 1 --results= \
            >"$D/ncu-$k.log" 2>&1
        grep -E "Duration|Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|L1/TEX Hit|L2 Hit" \
            "$D/ncu-$k.log" | head -16
    done
    pack
fi

# pp4096 on 1b: where a 512-token chunk's time goes at depth (GPU kernels by total time), and what the
# model's host side spends building each chunk's (512, 4096) f16 mask (llama.py _run)
if [ "$(left)" -gt 45 ]; then
    say "profile: 1b q4_0 prefill of 4096 tokens (n_ctx 4096), kernels by GPU time"
    timeout 60 $PY scripts/profile_decode.py synth:1b:q4_0 --prefill 4096 --n-ctx 4096 --steps 1 \
        >"$D/profile-pp4096.log" 2>&1
    head -30 "$D/profile-pp4096.log"
    $PY -c "
import time, numpy as np
cells, pos = np.arange(4096), np.arange(3584, 4096)
t = time.perf_counter()
for _ in range(10):
    m = np.where(cells[None, :] <= pos[:, None], np.float16(0), np.float16(-np.inf))
print('host mask of one 512-token chunk at n_ctx 4096: %.2f ms' % ((time.perf_counter() - t) * 100))" \
        2>&1 | tee "$D/host-mask.log"
    pack
fi

kill $PREP 2>/dev/null
$PY scripts/gpu_cudak.py summary "$D" "$D/cudak-summary.json" gpu="$GPU" commit="$COMMIT" \
    command="bash scripts/gpu_cudak.sh" build_rc="$BUILD_RC" build_s="$BUILD_S" pytest_rc="$TEST_RC" \
    pytest_s="$TEST_S" pytest_summary="$TEST_SUMMARY" new_paths_passed_tests="$NEW_OK" model_rc="$MODEL_RC" \
    models="$MODELS" seconds="$(elapsed)" >/dev/null
pack
say "done: $OUT/cudak-summary.json, $OUT/cudak-results.tar.gz"
[ $BUILD_RC -eq 0 ] && [ $TEST_RC -eq 0 ]
