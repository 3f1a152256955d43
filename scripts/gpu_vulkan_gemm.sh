#!/usr/bin/env bash
# scripts/gpu_vulkan_gemm.sh — the Vulkan prefill GEMM's configurations on the GPU machine (one H200,
# NVIDIA driver, no glslc, no network), in about 5 minutes (6 at most):
#   1. tests/test_vulkan_gemm_sweep.py on the tensor cores (gemm=coopmat): every mul_mat_cm4
#      configuration x every weight type against numpy (the emulated half is lavapipe's, skipped here);
#   2. scripts/vulkan_gemm_sweep.py: the GEMM alone for the 1b and 7b prefill shapes (M x K = 2048x2048,
#      8192x2048, 2048x8192, 4096x4096, 11008x4096, 4096x11008; N = 512; q4_0, q4_K, then f16 weights
#      as far as the budget goes: the pure f16 GEMM a dequantize-once path would run), every
#      configuration next to mul_mat_cm3 (the default) and its 128 tile, each result checked against
#      the CPU plugin, GPU time from timestamp queries: a TFLOPS table per type;
#   3. pp512 of synth:1b:q4_0 and synth:7b:q4_0 with the defaults and with the configuration of the
#      least total GPU time over the q4_0 shapes.
# Writes into $OUT (when set; else bench/results/tmp): summary.json (date, GPU, commit, command, the
# tables, the best configuration, pp512), vulkan-gemm-sweep-*.json, sweep.log, pytest.log and
# results.tar.gz with everything (6 files).
#
# Preparation, as for scripts/gpu_vulkan.sh (its header: the loader, glvnd and the validation layer as
# Debian packages in .gl/, and the plugin built here, where glslc is), from the repo root:
#   make pyggml/plugins/libpyggml-vulkan.so
#   cp pyggml/plugins/libpyggml-vulkan.so .gl/ && git rev-parse --short HEAD >.gl/COMMIT
# then through the device tool (nvidia-h200): command
#   "GPU_CHECK_COMMIT=<sha> bash scripts/gpu_vulkan_gemm.sh", carry [".gl"], timeout_s 420.
# Knobs: GPU_GEMM_TYPES ("q4_0 q4_K f16"), GPU_GEMM_SHAPES (the six above), GPU_GEMM_CONFIGS (default:
# every one the plugin lists), GPU_GEMM_REPS (5), GPU_GEMM_MODELS ("synth:1b:q4_0 synth:7b:q4_0"),
# GPU_GEMM_TESTS=0 (skip step 1), GPU_GEMM_TESTS_K (pytest -k, default "not cm_emulated"), GPU_GEMM_BUDGET_S (360),
# GPU_GEMM_EMULATED=1 (gemm=cm_emulated: a dry run of the plumbing on a machine without the extension),
# GPU_GEMM_PARTS="1 2 3 4" (each configuration also under debug_gemm_parts: the parts of a step timed alone),
# GPU_GEMM_APIS="nv khr" (each configuration under each cm_api: VK_NV_ / VK_KHR_cooperative_matrix).
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T_START=$(date +%s)
BUDGET=${GPU_GEMM_BUDGET_S:-360}
if [ -n "${OUT:-}" ]; then WORK=$(mktemp -d /tmp/gpu-vkgemm.XXXXXX); else OUT=$ROOT/bench/results/tmp; WORK=$OUT; fi
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
say() { echo "== gpu-vulkan-gemm [$(( $(date +%s) - T_START ))s]: $*"; }
pack() { [ "$WORK" != "$OUT" ] && { tar czf "$OUT/results.tar.gz" -C "$WORK" . 2>/dev/null; cp "$WORK"/*.json "$WORK"/*.log "$WORK"/*.csv "$OUT/" 2>/dev/null; }; return 0; }
left() { echo $(( BUDGET - ($(date +%s) - T_START) )); }

# 1-2. the Vulkan loader and the carried plugin from .gl/, the NVIDIA ICD, the extension and the CPU
#      plugin (the reference) built, the models written in the background
MODELS=${GPU_GEMM_MODELS:-"synth:1b:q4_0 synth:7b:q4_0"}
source scripts/gpu_vulkan_prelude.sh

# 3. every configuration on the tensor cores against numpy
TEST_RC=skipped; TEST_SUMMARY=
if [ "${GPU_GEMM_TESTS:-1}" != 0 ]; then
    say "tests/test_vulkan_gemm_sweep.py (coopmat: the tensor cores; cm_emulated)"
    timeout 100 $PY -X faulthandler -m pytest -q -rfEs -p no:cacheprovider tests/test_vulkan_gemm_sweep.py \
        -k "${GPU_GEMM_TESTS_K:-not cm_emulated}" >"$WORK/pytest.log" 2>&1
    TEST_RC=$?
    TEST_SUMMARY=$(tail -1 "$WORK/pytest.log")
    grep -E "^(FAILED|ERROR)" "$WORK/pytest.log" | head -30
    say "pytest rc=$TEST_RC: $TEST_SUMMARY"
    pack
fi

# 4. the GEMM alone, every configuration and shape; then pp512 with the best one
t0=$(date +%s); wait $PREP; say "models ready (waited $(( $(date +%s) - t0 ))s): $(tr '\n' ' ' <"$WORK/models.log" | tail -c 300)"
SWEEP_BUDGET=$(( $(left) - 110 > 60 ? $(left) - 110 : 60 ))
say "GEMM sweep (shapes not started within ${SWEEP_BUDGET}s are skipped), then pp512: $MODELS"
CFG_ARGS=(); [ -n "${GPU_GEMM_CONFIGS:-}" ] && CFG_ARGS=(--configs $GPU_GEMM_CONFIGS)
[ "${GPU_GEMM_EMULATED:-0}" = 1 ] && CFG_ARGS+=(--emulated)
[ -n "${GPU_GEMM_PARTS:-}" ] && CFG_ARGS+=(--parts $GPU_GEMM_PARTS)
[ -n "${GPU_GEMM_APIS:-}" ] && CFG_ARGS+=(--apis $GPU_GEMM_APIS)
timeout $(( $(left) > 90 ? $(left) : 90 )) $PY scripts/vulkan_gemm_sweep.py --out "$WORK" --types ${GPU_GEMM_TYPES:-q4_0 q4_K f16} \
    ${GPU_GEMM_SHAPES:+--shapes $GPU_GEMM_SHAPES} "${CFG_ARGS[@]}" --reps "${GPU_GEMM_REPS:-5}" --budget "$SWEEP_BUDGET" \
    --bench $MODELS 2>&1 | tee "$WORK/sweep.log"
SWEEP_RC=$?
pack

$PY - "$WORK/summary.json" <<EOF
import glob, json, sys, time
doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-vulkan-gemm", "gpu": """$GPU""", "commit": "$COMMIT",
       "vulkan_plugin_commit": "$SO_COMMIT", "command": "bash scripts/gpu_vulkan_gemm.sh", "seconds": $(( $(date +%s) - T_START )),
       "pytest_rc": "$TEST_RC", "pytest_summary": """$TEST_SUMMARY""", "sweep_rc": "$SWEEP_RC"}
for f in sorted(glob.glob("$WORK/vulkan-gemm-sweep-*.json")):
    s = json.load(open(f))
    doc["sweep_file"] = f.rsplit("/", 1)[1]
    doc["best_q4_0"] = s.get("best_q4_0")
    doc["pp512"] = s.get("pp512")
    doc["tflops"] = {shape: {k: r.get("tflops") for k, r in res.items() if isinstance(r, dict)} for shape, res in s["results"].items()}
log = open("$WORK/sweep.log").read()
doc["tables"] = log[log.find("\nq4_0, N ="):][:6000] if "\nq4_0, N =" in log else log[-3000:]
json.dump(doc, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: v for k, v in doc.items() if k not in ("tflops", "tables")}, indent=1)[:3000])
EOF
[ -n "${SMI:-}" ] && kill "$SMI" 2>/dev/null
pack
say "done"
[ "$SWEEP_RC" = 0 ] && { [ "$TEST_RC" = 0 ] || [ "$TEST_RC" = skipped ]; }
