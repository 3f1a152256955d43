# Builds libpyggml-cuda.so with nvcc (included by the top Makefile). Without nvcc it adds nothing
# except the gpu-check target, which then says why it cannot run.
#   CUDA_ARCHS: compute capabilities to build SASS + PTX for, lowest first (default: 90, the H100/H200;
#               one arch keeps CI compile time short). e.g. make CUDA_ARCHS="80 90"
CUDA_NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifneq ($(CUDA_NVCC),)
CUDA_ARCHS ?= 90
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a),code=[sm_$(a),compute_$(a)])
CUDA_SRCS := $(wildcard plugins/cuda/*.cu)
CUDA_OBJS := $(patsubst plugins/cuda/%.cu,build/cuda/%.o,$(CUDA_SRCS))
CUDA_LIB := $(PLUGIN_DIR)/libpyggml-cuda.so
CUDA_NVCCFLAGS := -O3 -std=c++17 $(CUDA_GENCODE) -Iinclude -Iplugins/cuda \
	-Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wno-unused-function \
	-DPYG_CUDA_MIN_CC=$(firstword $(CUDA_ARCHS))

build/cuda/%.o: plugins/cuda/%.cu $(wildcard plugins/cuda/*.h plugins/cuda/*.cuh) $(PYG_HEADERS)
	@mkdir -p build/cuda
	$(CUDA_NVCC) $(CUDA_NVCCFLAGS) -c -o $@ $<

# cudart is linked statically and hidden by the version script: one exported symbol, and the
# library loads on machines without a driver (cudart opens libcuda itself at first use).
$(CUDA_LIB): $(CUDA_OBJS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(CUDA_NVCC) -shared $(CUDA_GENCODE) -cudart static -o $@ $(CUDA_OBJS) \
		-Xlinker --version-script=plugins/plugin.map -Xlinker --no-undefined -lrt -lpthread -ldl

PLUGINS += $(CUDA_LIB)
endif

# On a GPU machine: build everything, run the test suite and the CUDA mat-vec benchmark.
gpu-check:
	bash scripts/gpu_check.sh
