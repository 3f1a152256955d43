#!/usr/bin/env bash
# scripts/gpu_one_split.sh — the part of issue 13 that one H200 can check (when no two-GPU machine is
# lent), in about 4 minutes: the pipeline / model-split / scheduler tests on cuda; `pyggml check`'s
# asynchronous rules on cuda and the musa shim; the probe (bench/two_gpu_probe.py) on cuda:0 alone and
# split over cuda:0 + musa:0 — two plugins on one GPU, so every boundary crossing is a real
# cross-plugin copy through the host and the shim's quirks (MULTI_DEVICE_SYNC, NO_ASYNC_HOST_COPY)
# are on the path; the 1b model split over cuda:0 + musa:0 and partially offloaded to the CPU
# (cuda:0,cpu) against cuda:0 alone: same greedy tokens, the per-split sync pattern, host syncs per
# token. Speed-ups need two GPUs (scripts/gpu_two.sh); the timings here are not quoted as such.
#
#   GPU_CHECK_COMMIT=$(git rev-parse --short HEAD) bash scripts/gpu_one_split.sh
# Results in $OUT: one-split.tar.gz (logs, probe JSON, check JSON) and one-split-summary.log.
set -u -o pipefail
cd "$(dirname "$0")/.."
GPU_TAG=one-split GPU_BUDGET_S=${GPU_ONE_BUDGET:-250} GPU_SUMMARY=one-split-summary.log GPU_SAY=one-split
. scripts/gpu_prelude.sh

say "$(nvidia-smi --query-gpu=index,name --format=csv,noheader | tr '\n' ';') commit $GPU_CHECK_COMMIT"
if ls .whl/*.whl >/dev/null 2>&1; then   # carried wheels (cffi for pyggml check)
    install_wheels
fi
touch .stamp-deps
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cpu.so pyggml/plugins/libpyggml-cuda.so pyggml/plugins/libpyggml-musa.so \
    > "$W/build.log" 2>&1 || { say "build failed"; tail -20 "$W/build.log"; pack; exit 1; }
say "build ok"
setsid $PY -c "from pyggml.bench_model import resolve_model; print(resolve_model('synth:1b:q4_0', quiet=True))" \
    > "$W/synth-1b.log" 2>&1 < /dev/null &

timeout 120 $PY -m pytest -q -p no:cacheprovider tests/test_pipeline.py tests/test_model_split.py tests/test_sched.py \
    -k "not vulkan and not hip" > "$W/pytest.log" 2>&1
say "pytest rc=$?: $(tail -1 "$W/pytest.log")"
grep -E "^(FAILED|ERROR)" "$W/pytest.log" | head -10 | tee -a "$W/summary.log"
pack

if $PY -c "import cffi" 2>/dev/null; then
    for p in cuda musa; do
        timeout 60 $PY -m pyggml check pyggml/plugins/libpyggml-$p.so --no-ops --async-rounds 6 \
            --json "$W/check-$p.json" > "$W/check-$p.log" 2>&1
        say "check $p rc=$?: $(grep -cE '^pass' "$W/check-$p.log") pass, $(grep -cE '^FAIL' "$W/check-$p.log") FAIL"
        grep -E "^FAIL" "$W/check-$p.log" | head -5 | tee -a "$W/summary.log"
    done
fi
pack

say "probe: cuda:0 alone and split over cuda:0 + musa:0"
timeout 100 $PY bench/two_gpu_probe.py --devices cuda:0,musa:0 --runs "${GPU_ONE_RUNS:-5}" --mbs 6 \
    --out "$W/probe-cuda-musa.json" 2>&1 | tee "$W/probe.log" | grep -E "wrong|speed-up" | tee -a "$W/summary.log"
pack

M1=$(tail -1 "$W/synth-1b.log")
while pgrep -f "synth:1b:q4_0" >/dev/null && [ "$(left)" -gt 40 ]; do sleep 2; M1=$(tail -1 "$W/synth-1b.log"); done
for devs in cuda:0 cuda:0,musa:0 cuda:0,cpu; do
    [ "$(left)" -lt 20 ] && { say "skipped $devs: time"; continue; }
    ts=(); [ "$devs" = cuda:0,cpu ] && ts=(-ts 14,2)
    n=$(echo "$devs" | tr ':,' '_-')
    timeout "$(( $(left) > 60 ? 60 : $(left) ))" $PY -m pyggml bench -m "$M1" -d "$devs" "${ts[@]}" -r 2 -p 1024 -n 32 \
        -o "$W" > "$W/bench-$n.log" 2>&1
    say "1b on $devs rc=$?"
    grep -E "layers|memory per device|host syncs per decoded|sync pattern|\| .*(pp|tg)[0-9]" "$W/bench-$n.log" | tee -a "$W/summary.log"
done
$PY - "$M1" <<'EOF' 2>&1 | tee -a "$W/summary.log"
# greedy tokens of the split model against one GPU, under every policy (the model tests' check, on hardware)
import sys, numpy as np, pyggml as pg
from pyggml import models
ref = None
for devs, ts in ((["cuda:0"], None), (["cuda:0", "musa:0"], None), (["cuda:0", "cpu"], [14, 2])):
    for sync in ("strict", "relaxed", "events"):
        m = models.load(sys.argv[1], devices=devs, tensor_split=ts, n_ctx=1200, sync=sync)
        prompt = list(range(1, 700))        # longer than n_ubatch: pipelined micro-batches
        logits = m.prefill(prompt)
        toks = [int(np.argmax(logits))]
        for _ in range(16):
            toks.append(int(np.argmax(m.decode(toks[-1]))))
        m.close()
        if ref is None:
            ref, ref_logits = toks, logits
        d = float(np.max(np.abs(logits - ref_logits)))
        print(f"tokens {'+'.join(devs):14s} {sync:8s} same={toks == ref} max|dlogits| {d:.3g}")
EOF
pack
say "done"
