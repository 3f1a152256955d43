#!/usr/bin/env bash
# scripts/gpu_check.sh — on a machine with an NVIDIA GPU (no network needed): build the package and
# every plugin (`make all`: cuda, and the musa plugin's CUDA-shim test build), run the whole test suite
# (the op conformance suite covers every loadable plugin: cuda and the shim-built musa included; the
# musa one runs with its declared quirks), then the CUDA mat-vec bandwidth benchmark next to PyTorch.
# Results: logs and JSON under $OUT (when set; else bench/results/tmp), the benchmark JSON and a
# summary JSON also under bench/results/. Meant to finish in about 8 minutes.
#
#   make gpu-check                      # or: bash scripts/gpu_check.sh
#   GPU_CHECK_TESTS="tests/test_ops.py -k cuda" make gpu-check   # a subset
#   GPU_CHECK_MAKE="ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so"  # build less
#   GPU_CHECK_BENCH=0 make gpu-check    # tests only
#   GPU_CHECK_SANITIZER=1 make gpu-check  # also compute-sanitizer memcheck over the cuda op suite
#   GPU_CHECK_MODELS="synth:1b:q4_0 synth:7b:q4_0" make gpu-check      # model benches on cuda:0,cpu
#   GPU_CHECK_VULKAN_MODELS="synth:1b:q4_0" make gpu-check             # ... and on vulkan:0
#
# Vulkan on the GPU machine: it has the NVIDIA ICD but no Vulkan loader and no glslc. Bring the
# loader as Debian packages in .gl/ (see the device tool's README: `apt-get download libvulkan1 libglvnd0 libglx0 libgl1 libegl1 ...`
# into .gl, carried with the call) and a libpyggml-vulkan.so built on a machine with glslc
# (cp pyggml/plugins/libpyggml-vulkan.so .gl/): this script unpacks the packages, points the loader
# at the NVIDIA ICD and installs the library when make could not build one. At the end every result
# file is also packed into $OUT/results.tar.gz (the device tool returns at most 8 files).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# Under the device tool, $OUT returns at most 8 files: work in a scratch folder and keep $OUT to
# results.tar.gz (repacked after every phase, so a run cut short still returns what it measured)
# plus the logs worth reading at once.
if [ -n "${OUT:-}" ]; then OUT_DIR=$(mktemp -d /tmp/gpu-check.XXXXXX); else OUT_DIR=$ROOT/bench/results/tmp; fi
pack() {
    [ -n "${OUT:-}" ] || return 0
    tar czf "$OUT/results.tar.gz" -C "$OUT_DIR" . 2>/dev/null || true
    for f in pytest.log model.log; do [ -f "$OUT_DIR/$f" ] && cp "$OUT_DIR/$f" "$OUT/"; done
    return 0
}
RESULTS=$ROOT/bench/results
mkdir -p "$OUT_DIR" "$RESULTS"
PY=${PYTHON:-python3}
BENCH_OPT=""   # device options for the model benches (-O DEVICE:KEY=VALUE)
TESTS=${GPU_CHECK_TESTS:-tests}
STAMP=$(date +%Y%m%dT%H%M%S)
export PYTHONUNBUFFERED=1

say() { echo "== gpu-check: $*"; }

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
if ! command -v nvcc >/dev/null 2>&1; then say "nvcc not found: the CUDA plugin cannot be built here"; exit 2; fi
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
say "GPU: ${GPU:-none visible}; $(nvcc --version | tail -1); $($PY --version 2>&1)"
COMMIT=${GPU_CHECK_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}  # .git may not travel: pass GPU_CHECK_COMMIT=$(git rev-parse --short HEAD)
export GPU_CHECK_COMMIT=$COMMIT
DIRTY=$(git status --porcelain 2>/dev/null | grep -v '^??' | wc -l)

if [ -d .gl ] && ls .gl/*.deb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && ! ldconfig -p | grep -q "libvulkan.so.1 "; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
        export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    fi
    say "Vulkan loader unpacked from .gl/ (VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset})"
fi

# No registry there: when the Python requirements are importable, skip make's pip step.
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi

say "make all"
t0=$(date +%s)
make -k -j"$(nproc)" ${GPU_CHECK_MAKE:-all} >"$OUT_DIR/build.log" 2>&1   # -k: one broken plugin must not stop the rest
BUILD_RC=$?
BUILD_S=$(( $(date +%s) - t0 ))
tail -5 "$OUT_DIR/build.log"
say "build rc=$BUILD_RC in ${BUILD_S}s"
if [ $BUILD_RC -ne 0 ]; then tail -40 "$OUT_DIR/build.log"; fi
if [ ! -f pyggml/plugins/libpyggml-vulkan.so ] && [ -f .gl/libpyggml-vulkan.so ]; then
    cp .gl/libpyggml-vulkan.so pyggml/plugins/
    say "installed the carried libpyggml-vulkan.so (no glslc here)"
fi
$PY -m pyggml devices 2>&1 | tee "$OUT_DIR/devices.txt"

# Synthetic models the benches need, written in the background while the tests run (16 cores).
PREP_PID=
MODELS_ALL="${GPU_CHECK_MODELS:-} ${GPU_CHECK_VULKAN_MODELS:-}"
if [ -n "${MODELS_ALL// /}" ]; then
    say "writing synthetic models in the background: $MODELS_ALL"
    $PY -c "import sys; from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(resolve_model(m, quiet=True), flush=True)" $MODELS_ALL >"$OUT_DIR/models.log" 2>&1 &
    PREP_PID=$!
fi

say "pytest $TESTS"
t0=$(date +%s)
# shellcheck disable=SC2086
timeout 330 $PY -X faulthandler -m pytest -q -rA -p no:cacheprovider $TESTS >"$OUT_DIR/pytest.log" 2>&1
TEST_RC=$?
TEST_S=$(( $(date +%s) - t0 ))
grep -E "^(FAILED|ERROR)" "$OUT_DIR/pytest.log" | head -40
if grep -qE "^(FAILED|ERROR).*(grouped|fused)" "$OUT_DIR/pytest.log"; then
    BENCH_OPT="-O cuda:fuse=0"     # the benches must not measure a wrong answer
    say "fusion tests failed: model benches run with -O cuda:fuse=0"
fi
pack
TEST_SUMMARY=$(tail -1 "$OUT_DIR/pytest.log")
say "pytest rc=$TEST_RC in ${TEST_S}s: $TEST_SUMMARY"
if [ $TEST_RC -ge 128 ]; then   # a crash: where (faulthandler's stack), and which file alone reproduces it
    grep -A25 "Fatal Python error" "$OUT_DIR/pytest.log" | head -40
    for f in tests/test_*.py; do
        timeout 120 $PY -X faulthandler -m pytest -q -p no:cacheprovider "$f" >/dev/null 2>&1
        echo "   alone: $f rc=$?"
    done
fi
# the cuda share of the results (test ids and skip reasons carry the device name)
grep -E "^(PASSED|FAILED|SKIPPED|ERROR).*cuda" "$OUT_DIR/pytest.log" | awk '{print $1}' | sort | uniq -c \
    >"$OUT_DIR/cuda_ops.txt" || true
say "op suite on cuda: $(tr '\n' ' ' <"$OUT_DIR/cuda_ops.txt")"
# the musa plugin (built through plugins/musa/shim with nvcc: MUSA names mapped onto CUDA)
grep -E "^(PASSED|FAILED|SKIPPED|ERROR).*musa" "$OUT_DIR/pytest.log" | awk '{print $1}' | sort | uniq -c \
    >"$OUT_DIR/musa_ops.txt" || true
say "tests on musa (shim build): $(tr '\n' ' ' <"$OUT_DIR/musa_ops.txt")"
grep -E "^(musa|cuda)\+cpu relaxed:" "$OUT_DIR/pytest.log" || true
grep -E "^(PASSED|FAILED|SKIPPED|ERROR).*vulkan" "$OUT_DIR/pytest.log" | awk '{print $1}' | sort | uniq -c \
    >"$OUT_DIR/vulkan_ops.txt" || true
say "tests on vulkan: $(tr '\n' ' ' <"$OUT_DIR/vulkan_ops.txt")"

SAN_RC=skipped
if [ "${GPU_CHECK_SANITIZER:-0}" != 0 ] && command -v compute-sanitizer >/dev/null 2>&1; then
    say "compute-sanitizer memcheck over the cuda op suite"
    timeout 150 compute-sanitizer --tool memcheck --print-limit 5 --error-exitcode 9 \
        $PY -m pytest -q -x -p no:cacheprovider tests/test_ops.py tests/test_cuda_build.py -k cuda >"$OUT_DIR/sanitizer.log" 2>&1
    SAN_RC=$?
    grep -E "=========|passed|failed" "$OUT_DIR/sanitizer.log" | head -20
    say "sanitizer rc=$SAN_RC"
fi

BENCH_RC=skipped
BENCH_JSON=
if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
    say "CUDA mat-vec benchmark"
    timeout 180 $PY bench/cuda_matvec.py --out "$OUT_DIR" --results "$RESULTS" 2>&1 | tee "$OUT_DIR/bench.log"
    BENCH_RC=$?
    BENCH_JSON=$(grep -o "cuda-matvec-[0-9T]*\.json" "$OUT_DIR/bench.log" | head -1)
    pack
fi

if [ -n "$PREP_PID" ]; then
    t0=$(date +%s); wait $PREP_PID; say "synthetic models ready (waited $(( $(date +%s) - t0 ))s): $(tr '\n' ' ' <"$OUT_DIR/models.log")"
fi

# Model benchmark (llama-bench conventions) on the GPU: GPU_CHECK_MODELS lists synth:SHAPE:WTYPE
# or files; each runs with CUDA graphs on, and the first (every one with GPU_CHECK_GRAPHS_OFF=all)
# again with the device option graphs=0.
MODEL_RC=skipped
if [ -n "${GPU_CHECK_MODELS:-}" ]; then
    MODEL_RC=0
    first=1
    for m in $GPU_CHECK_MODELS; do
        say "model bench $m on cuda:0,cpu (CUDA graphs on)"
        # shellcheck disable=SC2086
        timeout 200 $PY -m pyggml bench $BENCH_OPT -m "$m" -d cuda:0,cpu -r 5 -o "$OUT_DIR" -p 512 -n 128 --no-peer 2>"$OUT_DIR/model-$first.err" \
            | tee -a "$OUT_DIR/model.log" || MODEL_RC=$?
        pack
        if [ $first = 1 ] || [ "${GPU_CHECK_GRAPHS_OFF:-first}" = all ]; then
            say "model bench $m on cuda:0,cpu (CUDA graphs off)"
            # shellcheck disable=SC2086
            timeout 120 $PY -m pyggml bench $BENCH_OPT -O cuda:graphs=0 -m "$m" -d cuda:0,cpu -r 3 -o "$OUT_DIR" -p 512 -n 128 --no-peer \
                2>>"$OUT_DIR/model-$first.err" | sed 's/^/[graphs off] /' | tee -a "$OUT_DIR/model.log" || MODEL_RC=$?
        fi
        first=0
    done
    tail -3 "$OUT_DIR"/model-*.err 2>/dev/null
fi
VK_MODEL_RC=skipped
if [ -n "${GPU_CHECK_VULKAN_MODELS:-}" ]; then
    VK_MODEL_RC=0
    for m in $GPU_CHECK_VULKAN_MODELS; do
        say "model bench $m on vulkan:0"
        timeout 200 $PY -m pyggml bench -m "$m" -d vulkan:0 -r 5 -o "$OUT_DIR" -p 512 -n 128 --no-peer 2>>"$OUT_DIR/model-vk.err" \
            | tee -a "$OUT_DIR/model.log" || VK_MODEL_RC=$?
        pack
    done
    tail -3 "$OUT_DIR/model-vk.err" 2>/dev/null
fi
if [ -n "${GPU_CHECK_EXTRA:-}" ]; then     # any further command (e.g. a GEMM benchmark), output kept
    say "extra: $GPU_CHECK_EXTRA"
    timeout 200 bash -c "$GPU_CHECK_EXTRA" 2>&1 | tee "$OUT_DIR/extra.log"
    pack
fi

SUMMARY="$RESULTS/gpu-check-$STAMP.json"
$PY - "$SUMMARY" <<EOF
import json, sys, time
doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-check", "gpu": """$GPU""",
       "commit": "$COMMIT", "uncommitted_tracked_changes": int("$DIRTY"), "command": "bash scripts/gpu_check.sh",
       "tests": "$TESTS", "build_rc": $BUILD_RC, "build_s": $BUILD_S, "pytest_rc": $TEST_RC,
       "pytest_s": $TEST_S, "pytest_summary": """$TEST_SUMMARY""",
       "cuda_results": [l.strip() for l in open("$OUT_DIR/cuda_ops.txt") if l.strip()],
       "musa_shim_results": [l.strip() for l in open("$OUT_DIR/musa_ops.txt") if l.strip()],
       "sanitizer_rc": "$SAN_RC", "bench_rc": "$BENCH_RC", "bench_json": "$BENCH_JSON",
       "vulkan_results": [l.strip() for l in open("$OUT_DIR/vulkan_ops.txt") if l.strip()],
       "model_bench_rc": "$MODEL_RC", "models": "${GPU_CHECK_MODELS:-}",
       "vulkan_model_bench_rc": "$VK_MODEL_RC", "vulkan_models": "${GPU_CHECK_VULKAN_MODELS:-}"}
json.dump(doc, open(sys.argv[1], "w"), indent=1)
print(json.dumps(doc, indent=1))
EOF
cp "$SUMMARY" "$OUT_DIR/" 2>/dev/null || true
[ -n "${OUT:-}" ] && cp "$SUMMARY" "$OUT/"
pack
[ $BUILD_RC -eq 0 ] && [ $TEST_RC -eq 0 ]
