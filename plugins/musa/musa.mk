# Builds libpyggml-musa.so from the CUDA plugin's sources through plugins/musa/vendor_musa.h.
# Included by the top Makefile. Two ways, never both:
#  - mcc (MUSA SDK) found: the real build for Moore Threads GPUs (MUSA_ARCHS, default 21 22 = mp_21
#    MTT S80 / mp_22 MTT S4000). UNTESTED: no MUSA SDK on our machines; flags follow the SDK's docs.
#  - else nvcc found: the TEST build through plugins/musa/shim/ (musa* names mapped back onto CUDA),
#    for NVIDIA GPUs (MUSA_SHIM_ARCHS, default 90). It checks the mapping with a compiler and runs
#    the MUSA plugin's own behaviour (its name, its declared quirks) on an NVIDIA device.
#  - neither: adds nothing.
MUSA_MCC := $(shell command -v mcc 2>/dev/null || ls /usr/local/musa/bin/mcc 2>/dev/null)
MUSA_NVCC := $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
MUSA_SRCS := $(wildcard plugins/cuda/*.cu)
MUSA_OBJS := $(patsubst plugins/cuda/%.cu,build/musa/%.o,$(MUSA_SRCS))
MUSA_LIB := $(PLUGIN_DIR)/libpyggml-musa.so
MUSA_DEPS := $(wildcard plugins/cuda/*.h plugins/cuda/*.cuh plugins/musa/*.h plugins/musa/shim/*.h) $(PYG_HEADERS)

ifneq ($(MUSA_MCC),)
MUSA_ARCHS ?= 21 22
MUSA_ROOT := $(patsubst %/bin/mcc,%,$(MUSA_MCC))
MUSA_FLAGS := -x musa -O3 -std=c++17 $(foreach a,$(MUSA_ARCHS),--cuda-gpu-arch=mp_$(a)) -DPYG_GPU_MUSA \
	-DPYG_CUDA_MIN_CC=$(firstword $(MUSA_ARCHS)) -include plugins/musa/vendor_musa.h -Iinclude -Iplugins/cuda \
	-I$(MUSA_ROOT)/include \
	-fPIC -fvisibility=hidden -Wall -Wno-unused-function

build/musa/%.o: plugins/cuda/%.cu $(MUSA_DEPS)
	@mkdir -p build/musa
	$(MUSA_MCC) $(MUSA_FLAGS) -c -o $@ $<

$(MUSA_LIB): $(MUSA_OBJS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(MUSA_MCC) -shared -fPIC -o $@ $(MUSA_OBJS) -L$(MUSA_ROOT)/lib -lmusart $(PLUGIN_LDFLAGS) -lpthread

PLUGINS += $(MUSA_LIB)
else ifneq ($(MUSA_NVCC),)
MUSA_SHIM_ARCHS ?= 90
MUSA_GENCODE := $(foreach a,$(MUSA_SHIM_ARCHS),-gencode=arch=compute_$(a),code=[sm_$(a),compute_$(a)])
MUSA_NVCCFLAGS := -O3 -std=c++17 $(MUSA_GENCODE) -DPYG_GPU_MUSA -DPYG_MUSA_SHIM \
	-DPYG_CUDA_MIN_CC=$(firstword $(MUSA_SHIM_ARCHS)) -include plugins/musa/vendor_musa.h -Iinclude \
	-Iplugins/musa/shim -Iplugins/cuda \
	-Xcompiler -fPIC,-fvisibility=hidden,-Wall,-Wno-unused-function

build/musa/%.o: plugins/cuda/%.cu $(MUSA_DEPS)
	@mkdir -p build/musa
	$(MUSA_NVCC) $(MUSA_NVCCFLAGS) -c -o $@ $<

# as cuda.mk: cudart static and hidden, so the library loads without a driver
$(MUSA_LIB): $(MUSA_OBJS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(MUSA_NVCC) -shared $(MUSA_GENCODE) -cudart static -o $@ $(MUSA_OBJS) \
		-Xlinker --version-script=plugins/plugin.map -Xlinker --no-undefined -lrt -lpthread -ldl

PLUGINS += $(MUSA_LIB)
endif
