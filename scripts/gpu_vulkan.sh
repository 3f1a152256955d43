#!/usr/bin/env bash
# scripts/gpu_vulkan.sh — issue 18 on the GPU machine (NVIDIA driver, no glslc, no network): the
# Vulkan op suite and kernel tests on the NVIDIA driver, the same under the validation layer with
# synchronization validation, per-kernel GPU times of Vulkan next to CUDA, and the pp512 / tg128
# benchmarks of 1b/7b q4_0 and q4_K on Vulkan (the defaults and the variants under test) next to CUDA.
# Writes JSON into $OUT (when set; else bench/results/tmp) in about 4-5 minutes (8 at most): summary.json,
# the two vulkan-vs-cuda-*.json files, pytest logs, and everything packed into results.tar.gz.
#
# Preparation, on a machine with glslc (this repo's dev machine), from the repo root:
#   make pyggml/plugins/libpyggml-vulkan.so
#   echo /.gl/ >>.git/info/exclude; mkdir -p .gl /tmp/amd64/partial
#   o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
#   apt-get $o update; (cd .gl && apt-get $o download libvulkan1 vulkan-validationlayers \
#                       libglvnd0 libglx0 libgl1 libegl1 libopengl0 libgles2)
# (the NVIDIA ICD is libGLX_nvidia, which needs glvnd's dispatch libraries: without them the loader
# reports VK_ERROR_INCOMPATIBLE_DRIVER, "no Vulkan driver (ICD) installed")
#   cp pyggml/plugins/libpyggml-vulkan.so .gl/ && git rev-parse --short HEAD >.gl/COMMIT
# then through the device tool (nvidia-h200): command "GPU_CHECK_COMMIT=<sha> bash scripts/gpu_vulkan.sh", carry [".gl"],
# timeout_s 600. The .so must be built from the commit that runs (the script compares .gl/COMMIT
# with the tree's own when .git travels, and records both).
#
# Knobs: GPU_VK_MODELS (default: synth 1b and 7b, q4_0 and q4_K, and SmolLM2-135M's geometry in q4_1), GPU_VK_REPS (3),
# GPU_VK_VARIANTS ("new fa1": new = default device options (matvec=3, norm_v=2, gemm_v=3, fa=auto ->
# flash_attn_cm since 1a36ae3; fa_v=3, flash_attn_dec.comp, since the H200 run at 7942149), fa1 =
# fa_v=1 (the flash_attn.comp split + merge it replaced); also fadec = fa_v=3, mv3p = matvec=4
# (mul_mat_vec3p: no faster at 7942149), ropest = fuse_rope=1 (rope_store: within 1%), glu = fuse_glu=1
# (mul_mat_vec3g: slower), mv3r8 = mul_mat_vec3 with 8 rows per workgroup (no better),
# mv3 norm2 facm gemm3 (defaults), fakd = fa_v=2 (flash_attn2), gemm1, tile128, tile64,
# rows1, rows4, mv3r32, norm1, old = matvec=1 gemm=tiled fa=scalar norm_v=1; since 2026-12-05 cfg0 =
# mul_mat_cm4's earlier auto tile, b16 / b160 = gemm_b16 on / off, gdq / gdq0 = gemm_dq on / off, mvq4k =
# q4_K in the int8 mat-vecs: scripts/vulkan_vs_cuda.py lists them all),
# GPU_VK_PROFILE (1; 0 skips the per-kernel profile), GPU_VK_PROFILE_MODELS ("synth:1b:q4_0 synth:7b:q4_0"), GPU_VK_PROFILE_VARIANTS ("new next": next =
# fadec + mv3p + ropest + glu at once, whose kernels profile as separate shaders: flash_attn_dec
# against flash_attn.split + flash_attn.merge, mul_mat_vec3p against mul_mat_vec3, rope_store against
# rope + set_rows, mul_mat_vec3g against the gate/up mul_mat_vec3 + elementwise.swiglu),
# GPU_VK_TESTS=0 (skip the tests), GPU_VK_TEST_TIMEOUT (420 s), GPU_VK_TEST_FILES / GPU_VK_TEST_K (the test files and pytest -k: a
# shorter run than the whole suite's 3 minutes), GPU_VK_BENCH=0 (skip benches and profiles),
# GPU_VK_FAPROBE=1 (first the prefill attention alone: scripts/vulkan_fa_probe.py, GPU time per shape for each option
# set of GPU_VK_FAPROBE_VARIANTS, default "fa_cm=3 fa_cm=2"), GPU_VK_MATVEC=1 (first the decode mat-vecs alone: scripts/vulkan_matvec_sweep.py, GB/s per weight shape
# for GPU_VK_MATVEC_KERNELS), GPU_VK_FLOOR=1 (first what one dependent node costs on Vulkan and on
# CUDA: scripts/dispatch_floor.py; GPU_VK_FLOOR_SETS: Vulkan option sets to run it under, as its --vk-sets;
# GPU_VK_FLOOR_KINDS: its chains, as its --kinds, default its three; GPU_VK_FLOOR_ARGS: more of its arguments,
# e.g. --log-kernels --lengths 16 32),
# GPU_VK_STATS=1 (first the driver's statistics of every pipeline the GPU_VK_PROFILE_MODELS compile: registers,
# spills, as VK_KHR_pipeline_executable_properties gives them; scripts/vulkan_pipeline_stats.py),
# GPU_VK_CMPROBE=1 (first .gl/vk_cm_probe, built here by `make build/vk_cm_probe` and carried: the tensor cores' rate through
# VK_KHR_cooperative_matrix for f16 -> f32, f16 -> f16, int8 -> int32 and int8 scaled into f32 sums, f16 products into
# 16x16 and 16x8 f32 or f16 accumulators in several layouts, each checked; then run it with --nv by hand),
# GPU_VK_DEPTH=D (the benches also after D tokens of context: keys *_depth), GPU_VK_NPROMPT=N (the prompt's
# tokens, 512 by default: the keys still say pp512), GPU_VK_INTERLEAVE=1 (the benches round by
# round, each configuration once per round: a fairer A/B where clocks drift), GPU_VK_BANDWIDTH=1 (first
# scripts/vulkan_bandwidth.py: the bandwidth an argmax and a 151 MB mat-vec reach on Vulkan, CUDA and torch).
# Run on 2026-12-06 (H100; bench/results/gpu-vulkan-*-h100-20261206T0[79]*, …T1001): mv_q8, matvec_ahead and the
# repacked mat-vec alone are within noise; a read-only L2 prefetch was slower (removed); the platform streams at 3 TB/s
# (GPU_VK_BANDWIDTH=1); fewer stages per layer is what pays: gate/up/swiglu as one dispatch on the repacked copies
# (+4-7%) and the q/k/v mat-vecs with their ropes and cache writes (fuse_rope_mv, +3-6%) are defaults; the o/down
# mat-vecs writing the next norm's int8 input so its readers run beside it (fold_norm, +14-15%) too; flash_attn_dec issuing K and V
# with the mask (fa_dec_early) was slower at depth (removed). Variants run one after another spread as widely as these
# effects: use GPU_VK_INTERLEAVE=1 for an A/B of tg128, and not for pp512 ratios against CUDA: CUDA's pp512 between
# Vulkan runs is as slow as the first of its consecutive reps, about half the later ones (H100, 1b q4_0, every run of
# 2026-12-06: 44-60k interleaved, first reps 38-51k, later reps 84-90k t/s; e.g. gpu-vulkan-rprows-h100-20261206T1948/
# against gpu-vulkan-cm5-h100-20261206T1926/pp-20261206T1915/), which flatters Vulkan's ratio (0.60x against 0.39x).
# Next (four opt-in builds tested on lavapipe for the same bytes, not yet run on a GPU: rp_rows=4, rp_lit, fa_lit,
# gemm_lit), one call on the plugin built at <sha>:
#   GPU_CHECK_COMMIT=<sha> GPU_VK_TEST_FILES="tests/test_vulkan_gemm_lit.py tests/test_vulkan_mv_rp.py tests/test_vulkan_fa_dec2.py" \
#   GPU_VK_PROFILE=0 GPU_VK_INTERLEAVE=1 GPU_VK_MODELS="synth:1b:q4_0 synth:7b:q4_0" GPU_VK_REPS=3 GPU_VK_VARIANTS="new \
#   rp_rows=4 rp_rows=4,rp_lit=1 fa_lit=1 gemm_lit=1 rp_rows=4,rp_lit=1,fa_lit=1,gemm_lit=1" bash scripts/gpu_vulkan.sh
# then pp512 of the winners with consecutive reps (GPU_VK_INTERLEAVE unset).
# Run on 2026-12-07 (H100, gpu-vulkan-lits-h100-20261206T2354/): none of the four pays; all stay off. Then
# (gpu-vulkan-barriers-h100-20261207T0027/): with debug_drop_barriers=1 the decode runs at 1.28x / 1.17x of CUDA (1b / 7b):
# the stages' dependency is the gap. soft_sync (in-shader waits on stage counters: the CUDA plugin's programmatic
# dependent launch in Vulkan) gave the barriers' bytes on the H100 and no speed, and its coherent reads cost the default
# path 15-21% (gpu-vulkan-softsync-h100-20261207T0426/, gpu-vulkan-nocoh-h100-20261207T0443/): removed. The same call's GPU_VK_CMPROBE=1: f16 products at
# ~243 TFLOPS with f32 or f16 sums, int8 at ~481 TOPS, int8 scaled element by element into f32 sums ~154 (a q4_0 x int8
# GEMM's per-block scaling costs more than the int8 rate gains). f32 sums ran at the f16 rate in the probe (16x16, four
# per subgroup), where mul_mat_cm4's KHR build measured ~30 TFLOPS with them (16x8, many per subgroup).
# Run on 2026-12-07 (H100, gpu-vulkan-f32sums-h100-20261207T0610/, …T0735/): the probe's f32 sums stay at the f16 rate
# in every layout (16x8, 2x4 to 4x8 a subgroup, sizes by specialization, mul_mat_cm4's 2x8 on fragments loaded once:
# 610 TFLOPS, stored through uvec4, float or vec4 tiles, with VK_NV_cooperative_matrix enabled too), while the GEMM's run
# at 26-28 however staged and from the literal build: the slowness is the GEMM kernel's (255 registers at
# 64x128.k64.w2x2). The literal builds (gemm_lit) are the default since 48e570e (1b pp512 +5-6.5%, the GEMM +8-11%).
# Next (prefill): bisect between the probe and the GEMM: the probe plus mul_mat_cm4's weight and activation loads, or
# the GEMM without them (debug_gemm_parts=3 still compiles them), to find what makes f32 products run at 1/20 rate.
# Run on 2026-12-07 (H200, gpu-vulkan-splitk-h200-20261207T1748/): GPU_VK_FAPROBE=1 timed the prefill attention alone
# (fa_cm=4, the mask scanned first and K loaded a chunk ahead, was slower than cm3 and was removed), and gemm_splitk=256
# (a small grid's GEMM over two K splits: the 1b's down projection) gave 1b pp512 +7.1%: the default since 71e06a9.
# Run on 2026-12-08 (H100, gpu-vulkan-s52-h100-20261208T0004/): session 51's fold_nodes (tg128 7b -5%), splitk_last
# (1b pp512 -3.5%), gemm_splitk_steps=16 (within noise) and fa_span (the probe -10% on D 64, +61% on D 128; the models'
# pp512 -3 to -6%) all stay off. The prefill attention's products run at about 12 TFLOPS (1b), where products into f32
# accumulators are capped near 30 on this driver: fa_acc (f16 sums in flash_attn_cm3, pv16 or f16) is built and tested
# on lavapipe, not yet timed. Next, one call on the plugin built at <sha>:
#   GPU_CHECK_COMMIT=<sha> GPU_VK_TEST_TIMEOUT=120 GPU_VK_TEST_FILES="tests/test_vulkan_fa_acc.py" GPU_VK_TEST_K="" \
#   GPU_VK_FAPROBE=1 GPU_VK_FAPROBE_VARIANTS="fa_acc=f32 fa_acc=pv16 fa_acc=f16" GPU_VK_PROFILE=0 GPU_VK_REPS=3 \
#   GPU_VK_INTERLEAVE=1 GPU_VK_MODELS="synth:1b:q4_0 synth:7b:q4_0" GPU_VK_VARIANTS="new fa_acc=pv16 fa_acc=f16" \
#   bash scripts/gpu_vulkan.sh
# then the winner as the default, with consecutive reps for the pp512 ratios.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
T_START=$(date +%s)
if [ -n "${OUT:-}" ]; then WORK=$(mktemp -d /tmp/gpu-vk.XXXXXX); else OUT=$ROOT/bench/results/tmp; WORK=$OUT; fi
mkdir -p "$OUT" "$WORK"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
say() { echo "== gpu-vulkan [$(( $(date +%s) - T_START ))s]: $*"; }
pack() { [ "$WORK" != "$OUT" ] && { tar czf "$OUT/results.tar.gz" -C "$WORK" . 2>/dev/null; cp "$WORK"/*.json "$WORK"/clocks.csv "$OUT/" 2>/dev/null; }; return 0; }
left() { echo $(( 470 - ($(date +%s) - T_START) )); }   # seconds left of the 8-minute budget

# 1. Vulkan loader and validation layer from .gl/, the NVIDIA ICD, the carried plugin, the build of
#    the rest (ext, cpu; cuda below) and the models in the background: scripts/gpu_vulkan_prelude.sh
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
MODELS=${GPU_VK_MODELS:-"synth:1b:q4_0 synth:1b:q4_K synth:7b:q4_0 synth:7b:q4_K synth:smollm2:q4_1"}
source scripts/gpu_vulkan_prelude.sh
for lib in libGLdispatch.so.0 libGLX.so.0; do ldconfig -p | grep -q "$lib" || say "WARNING: $lib missing: carry libglvnd0/libglx0 in .gl (the NVIDIA ICD needs them)"; done
# 2. the CUDA plugin, for the comparisons
( make -j"$(nproc)" pyggml/plugins/libpyggml-cuda.so >>"$WORK/build.log" 2>&1; echo "cuda build rc=$?" >>"$WORK/build.log" ) &
CUDA_BUILD=$!
$PY - <<'EOF' 2>&1 | tee "$WORK/vulkan_device.txt"
import logging, pyggml as pg
from pyggml._plugin import drain_log
logging.basicConfig(level=logging.DEBUG, format="%(message)s")
d = pg.get_device("vulkan:0"); drain_log()
for v in ("coopmat", "auto"):
    try:
        d.set_option("gemm", v); print("gemm", v, "accepted")
    except pg.PyggmlError as e:
        print("gemm", v, "refused:", e)
EOF

# 3. tests on the NVIDIA driver: op suite, kernel choices (gemm=auto must pick mul_mat_cm here),
#    multi-device splits; the last two re-run themselves under VK_LAYER_KHRONOS_validation with
#    synchronization validation when the layer is installed (from .gl/)
TEST_RC=skipped; TEST_SUMMARY=
if [ "${GPU_VK_TESTS:-1}" != 0 ]; then
    say "vulkan tests (op suite, kernels, multi; validation re-runs inside)"
    timeout "${GPU_VK_TEST_TIMEOUT:-420}" $PY -X faulthandler -m pytest -q -rfEs -p no:cacheprovider ${GPU_VK_TEST_FILES:-tests/test_vulkan_kernels.py \
        tests/test_vulkan_multi.py tests/test_vulkan_build.py tests/test_vulkan_norm.py tests/test_vulkan_rope_store.py \
        tests/test_vulkan_glu.py tests/test_vulkan_mv_rp.py tests/test_vulkan_rope_mv.py tests/test_vulkan_norm_fold.py tests/test_ops.py} -k "${GPU_VK_TEST_K:-vulkan or VK or kernels or gemm or matvec}" \
        >"$WORK/pytest.log" 2>&1
    TEST_RC=$?
    TEST_SUMMARY=$(tail -1 "$WORK/pytest.log")
    grep -E "^(FAILED|ERROR)" "$WORK/pytest.log" | head -30
    cp "$WORK/pytest.log" "$OUT/" 2>/dev/null
    say "pytest rc=$TEST_RC: $TEST_SUMMARY"
    pack
fi

# 4. benches and per-kernel times (CUDA plugin and models needed)
wait $CUDA_BUILD; tail -1 "$WORK/build.log"
t0=$(date +%s); wait $PREP; say "models ready (waited $(( $(date +%s) - t0 ))s): $(tr '\n' ' ' <"$WORK/models.log" | tail -c 400)"
BENCH_RC=skipped; PROF_RC=skipped
if [ "${GPU_VK_BENCH:-1}" != 0 ]; then
    PROF_MODELS=${GPU_VK_PROFILE_MODELS:-"synth:1b:q4_0 synth:7b:q4_0"}
    if [ "${GPU_VK_FLOOR:-0}" != 0 ]; then   # what one dependent node costs, Vulkan and CUDA
        say "dispatch floor: chains of scale / mat-vec nodes"
        timeout 300 $PY scripts/dispatch_floor.py --out "$WORK" --vk-sets ${GPU_VK_FLOOR_SETS:-default} \
            --kinds ${GPU_VK_FLOOR_KINDS:-scale rms_norm matvec} ${GPU_VK_FLOOR_ARGS:-} 2>&1 | tee "$WORK/floor.log"
        pack
    fi
    if [ "${GPU_VK_STATS:-0}" != 0 ]; then   # the driver's statistics of the pipelines the models compile (registers, spills)
        say "pipeline statistics: scripts/vulkan_pipeline_stats.py ($PROF_MODELS)"
        timeout 120 $PY scripts/vulkan_pipeline_stats.py --out "$WORK" --models $PROF_MODELS 2>&1 | tee "$WORK/stats.log" | tail -60
        pack
    fi
    if [ "${GPU_VK_CMPROBE:-0}" != 0 ]; then   # the tensor cores' rate per operand type (KHR)
        if [ -x .gl/vk_cm_probe ]; then
            say "cooperative-matrix probe: .gl/vk_cm_probe (scripts/vk_cm_probe.c)"
            timeout 60 .gl/vk_cm_probe 2>&1 | tee "$WORK/cm_probe.log"
            pack
        else
            say "GPU_VK_CMPROBE=1 but no .gl/vk_cm_probe: build it here (make build/vk_cm_probe) and copy it into .gl/"
        fi
    fi
    if [ "${GPU_VK_FAPROBE:-0}" != 0 ]; then   # the prefill attention alone per shape and option set
        say "prefill attention probe: scripts/vulkan_fa_probe.py (${GPU_VK_FAPROBE_VARIANTS:-fa_cm=3 fa_cm=2})"
        timeout 120 $PY scripts/vulkan_fa_probe.py --out "$WORK" --variants ${GPU_VK_FAPROBE_VARIANTS:-fa_cm=3 fa_cm=2} 2>&1 | tee "$WORK/fa_probe.log"
        pack
    fi
    if [ "${GPU_VK_BANDWIDTH:-0}" != 0 ]; then   # what bandwidth a Vulkan kernel reaches: argmax, a big mat-vec, torch
        say "bandwidth probe: scripts/vulkan_bandwidth.py"
        timeout 120 $PY scripts/vulkan_bandwidth.py --out "$WORK" 2>&1 | tee "$WORK/bandwidth.log"
        pack
    fi
    if [ "${GPU_VK_MATVEC:-0}" != 0 ]; then   # the decode mat-vec kernels alone, GB/s per weight shape
        say "mat-vec sweep: ${GPU_VK_MATVEC_KERNELS:-mv3 mv3i mv3w mv4 mv4r8 mv4r32}"
        timeout $(( $(left) / 3 > 60 ? $(left) / 3 : 60 )) $PY scripts/vulkan_matvec_sweep.py --out "$WORK" \
            --kernels ${GPU_VK_MATVEC_KERNELS:-mv3 mv3i mv3w mv4 mv4r8 mv4r32} 2>&1 | tee "$WORK/matvec.log"
        pack
    fi
    if [ "${GPU_VK_PROFILE:-1}" != 0 ]; then   # GPU_VK_PROFILE=0: benches only
        say "per-kernel GPU times, Vulkan (${GPU_VK_PROFILE_VARIANTS:-new next}) next to CUDA: $PROF_MODELS"
        timeout $(( $(left) / 2 > 60 ? $(left) / 2 : 60 )) $PY scripts/vulkan_vs_cuda.py profile --out "$WORK" --models $PROF_MODELS \
            --steps 32 --variants ${GPU_VK_PROFILE_VARIANTS:-new mv3i} 2>&1 | tee "$WORK/profile.log"
        PROF_RC=$?
        pack
    fi
    say "pp512/tg128 benches, Vulkan (${GPU_VK_VARIANTS:-new fa1}) next to CUDA: $MODELS"
    timeout $(( $(left) > 60 ? $(left) : 60 )) $PY scripts/vulkan_vs_cuda.py bench --out "$WORK" --models $MODELS \
        --reps "${GPU_VK_REPS:-3}" --depth "${GPU_VK_DEPTH:-0}" --n-prompt "${GPU_VK_NPROMPT:-512}" $([ "${GPU_VK_INTERLEAVE:-0}" = 1 ] && echo --interleave) --variants ${GPU_VK_VARIANTS:-new mv3i} 2>&1 | tee "$WORK/bench.log"
    BENCH_RC=$?
    pack
fi

$PY - "$WORK/summary.json" <<EOF
import glob, json, sys, time
doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "kind": "gpu-vulkan", "gpu": """$GPU""", "commit": "$COMMIT",
       "vulkan_plugin_commit": "$SO_COMMIT", "command": "bash scripts/gpu_vulkan.sh", "seconds": $(( $(date +%s) - T_START )),
       "pytest_rc": "$TEST_RC", "pytest_summary": """$TEST_SUMMARY""", "profile_rc": "$PROF_RC", "bench_rc": "$BENCH_RC",
       "vulkan_device": open("$WORK/vulkan_device.txt").read()[-3000:]}
import os
doc["knobs"] = {k: v for k, v in os.environ.items() if k.startswith("GPU_VK_") or k == "GPU_CHECK_COMMIT"}   # what the command ran under
for f in sorted(glob.glob("$WORK/vulkan-vs-cuda-bench-*.json")):
    doc["bench"] = {r["model"]: {k: v for k, v in r.items() if k != "model"} for r in json.load(open(f))["rows"]}
    doc["bench_file"] = f.rsplit("/", 1)[1]
for f in sorted(glob.glob("$WORK/vulkan-vs-cuda-profile-*.json")):
    doc["profile_file"] = f.rsplit("/", 1)[1]
json.dump(doc, open(sys.argv[1], "w"), indent=1)
print(json.dumps({k: v for k, v in doc.items() if k != "vulkan_device"}, indent=1)[:6000])
EOF
[ -n "${SMI:-}" ] && kill "$SMI" 2>/dev/null
pack
say "done"
[ "$TEST_RC" = 0 ] || [ "$TEST_RC" = skipped ]
