# scripts/gpu_vulkan_prelude.sh — the common start of the Vulkan device-call scripts (gpu_vulkan.sh,
# gpu_vulkan_gemm.sh), sourced from the repo root after the script set WORK (its work folder), PY,
# MODELS (synthetic models to write in the background) and say(). It unpacks the Debian packages
# carried in .gl/ (the Vulkan loader, glvnd: the NVIDIA ICD needs them), points the loader at the
# NVIDIA ICD, builds the extension and the CPU plugin (make -j), installs the carried
# .gl/libpyggml-vulkan.so (no glslc on the GPU machine; where glslc is, as in a dry run on the dev
# machine, it builds its own instead of overwriting it with the carried one), starts writing MODELS
# and defines COMMIT (GPU_CHECK_COMMIT, else .gl/COMMIT), SO_COMMIT (the carried plugin's), GPU
# (nvidia-smi's line; exported with COMMIT as GPU_VK_GPU / GPU_VK_COMMIT), PREP (the model
# writer's pid) and SMI (the pid of the clock logger writing $WORK/clocks.csv).
if [ -d .gl ] && ls .gl/*.deb >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && ! command -v glslc >/dev/null 2>&1; then   # the GPU machine only
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
COMMIT=${GPU_CHECK_COMMIT:-$(cat .gl/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}
SO_COMMIT=$(cat .gl/COMMIT 2>/dev/null || echo unknown)
GPU=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
export GPU_VK_COMMIT=$COMMIT GPU_VK_GPU=$GPU
# the GPU's clocks and load every 200 ms while the script runs; it ends by killing $SMI (clocks.csv: what a timing ran at)
command -v nvidia-smi >/dev/null 2>&1 && { nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw,clocks_throttle_reasons.active \
    --format=csv -lms 200 >"$WORK/clocks.csv" 2>&1 & SMI=$!; }
say "GPU: ${GPU:-none}; tree $COMMIT, carried vulkan plugin built at $SO_COMMIT; VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}"
[ "$COMMIT" != "$SO_COMMIT" ] && say "WARNING: the carried libpyggml-vulkan.so is not from this commit"
if $PY -c "import numpy, Cython, pytest" 2>/dev/null; then touch .stamp-deps; fi
make -j"$(nproc)" ext pyggml/plugins/libpyggml-cpu.so >"$WORK/build.log" 2>&1 || { tail -30 "$WORK/build.log"; }
if command -v glslc >/dev/null 2>&1; then   # a machine that builds its own (a dry run here): never the carried one
    make pyggml/plugins/libpyggml-vulkan.so >>"$WORK/build.log" 2>&1 || tail -30 "$WORK/build.log"
else
    mkdir -p pyggml/plugins && cp .gl/libpyggml-vulkan.so pyggml/plugins/ 2>/dev/null
fi
say "writing the synthetic models in the background: $MODELS"
$PY -c "import sys; from pyggml.bench_model import resolve_model
for m in sys.argv[1:]: print(resolve_model(m, quiet=True), flush=True)" $MODELS >"$WORK/models.log" 2>&1 &
PREP=$!
$PY -m pyggml devices 2>&1 | tee "$WORK/devices.txt"
