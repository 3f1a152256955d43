# scripts/gpu_prelude.sh — the common start of the device-call scripts (gpu_two.sh, gpu_ray.sh,
# gpu_one_split.sh), sourced from the repo root after the script set
#   GPU_TAG      the work folder's prefix and the results archive's name ($OUT/$GPU_TAG.tar.gz)
#   GPU_BUDGET_S the seconds the script plans with (left() counts down from it)
#   GPU_SUMMARY  the summary log's name in $OUT (default summary.log)
#   GPU_SAY      a prefix for say()'s lines (default none)
# It defines ROOT, T0, W (a fresh work folder), OUTD ($OUT, else bench/results/tmp), PY, and
# say (a timestamped line, also into $W/summary.log), pack (everything in $W into the archive, the
# summary beside it), left (seconds left of the budget) and install_wheels (the carried .whl/*.whl
# into /tmp/site, put on PYTHONPATH; its status is pip's). GPU_CHECK_COMMIT names the tree: the
# copy on the GPU machine may carry a stale .git.
ROOT=$(pwd)
T0=$(date +%s)
W=$(mktemp -d "/tmp/gpu-$GPU_TAG.XXXXXX")
OUTD=${OUT:-$ROOT/bench/results/tmp}
mkdir -p "$OUTD"
export PYTHONUNBUFFERED=1 GPU_CHECK_COMMIT=${GPU_CHECK_COMMIT:-unknown}
export PYGGML_MODEL_CACHE=${PYGGML_MODEL_CACHE:-$HOME/.cache/pyggml/models}
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
PY=${PYTHON:-python3}
say() { echo "== ${GPU_SAY:+$GPU_SAY }[$(( $(date +%s) - T0 ))s] $*" | tee -a "$W/summary.log"; }
pack() { tar czf "$OUTD/$GPU_TAG.tar.gz" -C "$W" . 2>/dev/null; cp "$W/summary.log" "$OUTD/${GPU_SUMMARY:-summary.log}" 2>/dev/null; true; }
left() { echo $(( GPU_BUDGET_S - ($(date +%s) - T0) )); }
install_wheels() {
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
