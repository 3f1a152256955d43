# Builds libpyggml-hip.so from the CUDA plugin's sources with hipcc (HIP_PLATFORM=amd), through
# plugins/hip/vendor_hip.h. Included by the top Makefile; without hipcc it adds nothing.
#   HIP_ARCHS: gfx targets (default gfx90a = MI200/CDNA2 wave64, gfx1030 = RDNA2 wave32).
#              e.g. make HIP_ARCHS="gfx90a gfx1030 gfx940"
# Debian 12: apt-get install hipcc libamdhip64-dev rocm-device-libs (.ci/apt-hip.sh). No GPU needed
# to build. Two libraries: libpyghip-kernels.so (the kernels and the ABI table, linked against
# libamdhip64.so.5, which hipcc's fat-binary registration needs at load time) and the plugin itself,
# libpyggml-hip.so (plugins/hip/loader.c, libc only), which dlopens the first in plugin_init: the
# plugin always loads and says NO_DEVICE with the reason where the HIP runtime is missing.
HIP_HIPCC := $(shell command -v hipcc 2>/dev/null)
ifneq ($(HIP_HIPCC),)
HIP_ARCHS ?= gfx90a gfx1030
HIP_SRCS := $(wildcard plugins/cuda/*.cu)
HIP_OBJS := $(patsubst plugins/cuda/%.cu,build/hip/%.o,$(HIP_SRCS))
HIP_LIB := $(PLUGIN_DIR)/libpyggml-hip.so
HIP_KERNELS_LIB := $(PLUGIN_DIR)/libpyghip-kernels.so
HIP_FLAGS := -x hip -O3 -std=c++17 $(foreach a,$(HIP_ARCHS),--offload-arch=$(a)) -DPYG_GPU_HIP \
	-DPYG_HIP_ARCHS='"$(HIP_ARCHS)"' -include plugins/hip/vendor_hip.h -Iinclude -Iplugins/cuda -fPIC -fvisibility=hidden \
	-Wall -Wno-unused-function -Wno-unused-result -Wno-unused-command-line-argument

build/hip/%.o: plugins/cuda/%.cu $(wildcard plugins/cuda/*.h plugins/cuda/*.cuh plugins/hip/*.h) $(PYG_HEADERS)
	@mkdir -p build/hip
	HIP_PLATFORM=amd $(HIP_HIPCC) $(HIP_FLAGS) -c -o $@ $<

$(HIP_KERNELS_LIB): $(HIP_OBJS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	HIP_PLATFORM=amd $(HIP_HIPCC) -shared -fPIC $(foreach a,$(HIP_ARCHS),--offload-arch=$(a)) -o $@ $(HIP_OBJS) \
		$(PLUGIN_LDFLAGS) -lpthread

$(HIP_LIB): plugins/hip/loader.c $(PYG_HEADERS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(CC) $(PLUGIN_CFLAGS) -O2 -shared -o $@ plugins/hip/loader.c $(PLUGIN_LDFLAGS) -ldl -lpthread

PLUGINS += $(HIP_KERNELS_LIB) $(HIP_LIB)
endif
