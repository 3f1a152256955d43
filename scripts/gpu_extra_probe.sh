#!/usr/bin/env bash
# scripts/gpu_extra_probe.sh — what a gpu-check call can add as GPU_CHECK_EXTRA while tuning the
# decode path: ncu's throughput/occupancy sections for one q4_0 and one q4_K mat-vec launch, and
# the per-kernel decode profile of a 7b model.
set -x
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
for t in ${PROBE_NCU_TYPES:-q4_0 q4_K}; do
  timeout 90 $NCU --kernel-name regex:k_mmvq --launch-skip 4 --launch-count 1 --section SpeedOfLight --section WarpStateStats --section Occupancy --section MemoryWorkloadAnalysis --section LaunchStats python3 bench/cuda_matvec.py --types $t --pairs 2 --reps 1 --gemm-types '' 2>&1 | grep -v "^pyggml\|^torch\|==PROF==" | grep -E "k_mmvq|Throughput|Duration|Registers|Achieved Occ|Theoretical Occ|Hit Rate|Warp Cycles Per Issued" | head -30
done
python3 scripts/profile_decode.py ${PROBE_MODEL:-synth:7b:q4_0} --steps 16 2>&1 | grep -E "^ *(void |k_|Self CUDA|RunStats)" | head -20
