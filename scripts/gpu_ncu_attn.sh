#!/usr/bin/env bash
# scripts/gpu_ncu_attn.sh — what limits the decode layer's kernels and the attention at depth, on
# one NVIDIA GPU (issue 14), in about 5 minutes:
#   1. builds the extension and the cuda + cpu plugins; runs the CUDA test files (tests/test_cuda_*.py);
#   2. Nsight Compute, each kernel alone (ncu serializes launches, so these durations carry no PDL
#      overlap): one 1b q4_0 decode layer's kernels at depth 0; the decode flash attention at depth
#      4096 and 16384 (with the stall samples of its SASS at 16384, scripts/ncu_top.py); the prefill
#      flash attention of a 512-token chunk at depth 4096.
# Results: $OUT/ncu-attn.tar.gz and $OUT/summary.log (scripts/gpu_prelude.sh).
#   one device call, kind nvidia-h200, carry [".whl"] (gguf + pyyaml wheels, see install_wheels), timeout_s 600:
#   GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_ncu_attn.sh
# Env: NCU_ATTN_BUDGET_S (480): no phase starts after it; NCU_ATTN_TESTS (the test files; "" skips).
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=ncu-attn GPU_BUDGET_S=${NCU_ATTN_BUDGET_S:-480}
. scripts/gpu_prelude.sh
TESTS=${NCU_ATTN_TESTS-tests/test_cuda_qkv_rope.py tests/test_cuda_build.py tests/test_cuda_blas.py tests/test_cuda_repack.py tests/test_cuda_fattn_dec.py tests/test_cuda_fattn_mma.py}
say "commit $GPU_CHECK_COMMIT; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
[ -d .whl ] && { install_wheels || say "carried wheels did not install"; }   # gguf (the decoders' reference)
# no network there: the build's pip step is skipped when what it installs for the build is present
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
make -j16 ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so >"$W/build.log" 2>&1 \
    || { say "build failed"; tail -30 "$W/build.log"; pack; exit 1; }
say "built"
$PY -c "from pyggml import bench_model as b; b.resolve_model('synth:1b:q4_0', quiet=True)" >"$W/synth.log" 2>&1 &
SYNTH=$!
if [ -n "$TESTS" ]; then
    timeout 240 $PY -m pytest -q -p no:cacheprovider $TESTS >"$W/pytest.log" 2>&1
    say "tests rc=$? $(tail -1 "$W/pytest.log")"
    grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -20
fi
wait $SYNTH
pack
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { say "no ncu"; pack; exit 0; }
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats"
KEYS="^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Registers Per|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp|Block Limit|Grid Size|Dynamic Shared|Static Shared"
run_ncu() { # name timeout ncu-args... -- driver-args...
    local name=$1 t=$2; shift 2
    [ "$(left)" -gt "$t" ] || { say "$name: no time left"; return; }
    timeout "$t" "$NCU" "$@" >"$W/ncu-$name.txt" 2>&1
    say "$name rc=$?"
    grep -E "$KEYS" "$W/ncu-$name.txt" | head -80
    pack
}
# one decode layer at depth 0: launches 120.. of the decode kernels (past the first step and a half)
run_ncu decode-d0 90 --kernel-name "regex:k_fattn_dec|k_mvr|k_add_rms_mul" --launch-skip 120 --launch-count 8 $SECS \
    $PY scripts/ncu_driver.py synth:1b:q4_0 --steps 4
for d in 4096 16384; do
    run_ncu fattn-dec-d$d 90 --kernel-name "regex:k_fattn_dec" --launch-skip 16 --launch-count 1 $SECS \
        $PY scripts/ncu_driver.py synth:1b:q4_0 --depth $d --steps 2
done
if [ "$(left)" -gt 80 ]; then
    timeout 80 "$NCU" --kernel-name "regex:k_fattn_dec" --launch-skip 16 --launch-count 1 --section SourceCounters \
        --page source --print-source sass --csv $PY scripts/ncu_driver.py synth:1b:q4_0 --depth 16384 --steps 2 \
        >"$W/ncu-fattn-dec-d16384-sass.csv" 2>"$W/ncu-sass.err"
    $PY scripts/ncu_top.py <"$W/ncu-fattn-dec-d16384-sass.csv" >"$W/ncu-fattn-dec-d16384-top.txt" 2>&1
    say "sass stalls (fattn_dec d16384):"; head -30 "$W/ncu-fattn-dec-d16384-top.txt"
    pack
fi
# prefill: the depth-4096 context is 8 chunks x 16 layers of flash attention; then the 512 chunk's 3rd layer
run_ncu fattn-mma-d4096 90 --kernel-name "regex:k_fattn_mma" --launch-skip 130 --launch-count 1 $SECS \
    $PY scripts/ncu_driver.py synth:1b:q4_0 --depth 4096 --prefill 512
say "done"
pack
