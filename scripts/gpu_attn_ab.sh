#!/usr/bin/env bash
# scripts/gpu_attn_ab.sh — the attention kernels of issue 14 on one NVIDIA GPU, ours only (no
# llama.cpp build: scripts/gpu_depth_bench.sh is the same-call comparison): builds the extension and
# the cuda + cpu plugins, runs the flash-attention tests on the GPU (prefill: fa_mma 0/1/2/3 and a
# model's prefill at depth; decode: the split kernel with its folded merge, fa_decode 0/1/2), then
# benchmarks each kernel against its variant under measurement (-O cuda:fa_mma=2 and =3: pp512 at
# depth 0, 4096 and 16384 for 1b q4_0, at 0 and 16384 for 7b q4_0; -O cuda:fa_decode=1 and =2:
# tg128 at the same depths for 1b q4_0). About 5 minutes on one H200 (GPU_BUDGET_S, default 420).
#
#   one device call, kind nvidia-h200, from the repo root, timeout_s 600:
#   GPU_CHECK_COMMIT=<sha> bash scripts/gpu_attn_ab.sh
# Results: $OUT/attn-ab.tar.gz (every bench JSON, the pytest log, the profile) and $OUT/summary.log.
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
bench 1b_pp_fa2 60 -m synth:1b:q4_0 -p 512 -n 0 --depth 0,4096,16384 -O cuda:fa_mma=2
bench 1b_pp_fa3 60 -m synth:1b:q4_0 -p 512 -n 0 --depth 0,4096,16384 -O cuda:fa_mma=3
bench 1b_tg_dec1 60 -m synth:1b:q4_0 -p 0 -n 128 --depth 0,4096,16384 -O cuda:fa_decode=1
bench 1b_tg_dec2 60 -m synth:1b:q4_0 -p 0 -n 128 --depth 0,4096,16384 -O cuda:fa_decode=2
bench 7b_pp_fa2 70 -m synth:7b:q4_0 -p 512 -n 0 --depth 0,16384 -O cuda:fa_mma=2
bench 7b_pp_fa3 70 -m synth:7b:q4_0 -p 512 -n 0 --depth 0,16384 -O cuda:fa_mma=3
pack
say "done"
