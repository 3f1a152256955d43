#!/usr/bin/env bash
# scripts/gpu_attn_ab.sh — the attention kernels of issue 14 on one NVIDIA GPU, ours only (no
# llama.cpp build: scripts/gpu_depth_bench.sh is the same-call comparison): builds the extension and
# the cuda + cpu plugins, runs the flash-attention tests on the GPU (prefill: fa_mma 0/1/2 and a
# model's prefill at depth; decode: the split kernel with its folded merge, fa_decode 0/1), then
# benchmarks the defaults, and against them one variant when GPU_ATTN_VARIANT names its device
# option (e.g. cuda:fa_mma=1, the two-pass kernel): pp512 at depth 0, 4096 and 16384 for 1b q4_0, at 0 and 16384 for 7b q4_0, tg128
# at the same depths for 1b q4_0 with GPU_ATTN_TG=1 (the variants are prefill kernels); then, with time left, one launch of each attention kernel
# under Nsight Compute (throughput, occupancy, stall reasons; GPU_ATTN_NCU=0 skips it). About 6
# minutes on one H200 (GPU_BUDGET_S, default 420).
#
#   one device call, kind nvidia-h200, from the repo root, timeout_s 600:
#   GPU_CHECK_COMMIT=<sha> bash scripts/gpu_attn_ab.sh
# Results: $OUT/attn-ab.tar.gz (every bench JSON, the pytest log, the ncu reports) and $OUT/summary.log.
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=attn-ab GPU_BUDGET_S=${GPU_BUDGET_S:-420}
source scripts/gpu_prelude.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
say "GPU ${GPU:-none}; commit $GPU_CHECK_COMMIT"
$PY -c "import sys; sys.path.insert(0, '.'); from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(m, resolve_model(m, quiet=True), flush=True)" synth:1b:q4_0 synth:7b:q4_0 >"$W/models.log" 2>&1 &
PREP=$!
$PY -c "import numpy, Cython, pytest" 2>/dev/null && touch .stamp-deps   # no network there: the deps are installed
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-cpu.so >"$W/build.log" 2>&1 \
    || { say "build failed"; tail -30 "$W/build.log" | tee -a "$W/summary.log"; pack; exit 1; }
say "built"
timeout 150 $PY -m pytest -q -p no:cacheprovider -rfs tests/test_cuda_fattn_mma.py tests/test_cuda_fattn_dec.py \
    >"$W/pytest.log" 2>&1
say "tests rc=$?: $(tail -1 "$W/pytest.log")"
grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -10 | tee -a "$W/summary.log"
pack
wait $PREP
bench() {   # name, timeout, args...
    local name=$1 to=$2
    shift 2
    [ "$(left)" -lt 25 ] && { say "skip $name: out of time"; return; }
    [ "$to" -gt "$(left)" ] && to=$(left)
    mkdir -p "$W/$name"
    timeout "$to" $PY -m pyggml bench -d cuda:0,cpu -r 3 --no-peer -o "$W/$name" "$@" >"$W/$name.txt" 2>"$W/$name.err"
    say "$name rc=$?: $*"
    grep -E "^\| synth" "$W/$name.txt" | tee -a "$W/summary.log"
    pack
}
VAR=${GPU_ATTN_VARIANT:-}    # the device option of the variant compared with the defaults (none: defaults only)
bench 1b_pp 60 -m synth:1b:q4_0 -p 512 -n 0 --depth 0,4096,16384
[ -n "$VAR" ] && bench 1b_pp_var 60 -m synth:1b:q4_0 -p 512 -n 0 --depth 0,4096,16384 -O "$VAR"
[ "${GPU_ATTN_TG:-0}" != 0 ] && bench 1b_tg 60 -m synth:1b:q4_0 -p 0 -n 128 --depth 0,4096,16384
[ "${GPU_ATTN_TG:-0}" != 0 ] && [ -n "$VAR" ] && bench 1b_tg_var 60 -m synth:1b:q4_0 -p 0 -n 128 --depth 0,4096,16384 -O "$VAR"
bench 7b_pp 70 -m synth:7b:q4_0 -p 512 -n 0 --depth 0,16384
[ -n "$VAR" ] && bench 7b_pp_var 70 -m synth:7b:q4_0 -p 512 -n 0 --depth 0,16384 -O "$VAR"
[ "${GPU_ATTN_PP4096:-1}" != 0 ] && bench 1b_pp4096 90 -m synth:1b:q4_0 -p 4096 -n 0
# what limits the two attention kernels: one launch of each under Nsight Compute (GPU_ATTN_NCU=0
# skips), with the stall reasons per issued instruction; the prefill kernel's launch is the last
# chunk of the 8192-token context (launches 240-255: every tile live but the causal corner), the
# decode kernel's one of the decodes after it. The SASS of the attention kernels comes back too.
if [ "${GPU_ATTN_NCU:-1}" != 0 ] && command -v ncu >/dev/null && [ "$(left)" -gt 90 ]; then
    command -v cuobjdump >/dev/null && cuobjdump -sass build/cuda/flash_attn_mma.o >"$W/flash_attn_mma.sass" 2>&1
    for ks in k_fattn_mma2:245 k_fattn_dec:20; do
        k=${ks%%:*}
        timeout $(( $(left) / 2 )) ncu --kernel-name "regex:$k" --launch-skip "${ks##*:}" --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis \
            --section ComputeWorkloadAnalysis --section InstructionStats --section LaunchStats --section SchedulerStats \
            --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active" \
            $PY scripts/profile_decode.py synth:1b:q4_0 --depth 8192 --prefill 512 --steps 1 >"$W/ncu-$k.log" 2>&1
        say "ncu $k rc=$?"
        grep -E "Duration|Throughput|Occupancy|Registers Per|Block Limit|Issue|Spill|Warp Cycles|Eligible|Bank|Grid Size" \
            "$W/ncu-$k.log" | head -30 | tee -a "$W/summary.log"
        grep -E "issue_stalled|inst_executed_pipe" "$W/ncu-$k.log" | awk '$NF+0 > 0.05' | sort -k3 -g -r | head -24 | tee -a "$W/summary.log"
        pack
    done
fi
pack
say "done"
