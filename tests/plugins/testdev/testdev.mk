# tests/plugins/testdev/testdev.mk — builds the GPU-like test plugin. A test artifact: it is not
# in the top Makefile's PLUGINS and is never installed into pyggml/plugins/.
#
#   make -f tests/plugins/testdev/testdev.mk TESTDEV_OUT=/tmp/td TESTDEV_NAMES="testdev testdevb"
#
# Run from the repository root (build.sh does). It includes the top Makefile so the CPU kernels
# (plugins/cpu/*.c except plugin.c) are compiled with exactly the CPU plugin's flags, which keeps
# results bitwise equal. Each name gives a separate library, libpyggml-NAME.so, that is its own
# plugin (the name comes from the file name), so a test can load two independent instances.
include Makefile
.DEFAULT_GOAL := testdev

TESTDEV_OUT ?= build/testdev
TESTDEV_NAMES ?= testdev
TD_DIR := tests/plugins/testdev
TD_KERNEL_SRCS := $(filter-out plugins/cpu/plugin.c,$(CPU_SRCS))
TD_KERNEL_OBJS := $(patsubst plugins/cpu/%.c,$(TESTDEV_OUT)/obj/cpu/%.o,$(TD_KERNEL_SRCS))
TD_SRCS := $(filter-out $(TD_DIR)/stress.c,$(wildcard $(TD_DIR)/*.c))
TD_OBJS := $(patsubst $(TD_DIR)/%.c,$(TESTDEV_OUT)/obj/testdev/%.o,$(TD_SRCS))
TD_LIBS := $(foreach n,$(TESTDEV_NAMES),$(TESTDEV_OUT)/libpyggml-$(n).so)

.PHONY: testdev
testdev: $(TD_LIBS)

$(TESTDEV_OUT)/obj/cpu/%.o: plugins/cpu/%.c $(wildcard plugins/cpu/*.h) $(PYG_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CPU_CFLAGS) -c -o $@ $<

$(TESTDEV_OUT)/obj/testdev/%.o: $(TD_DIR)/%.c $(TD_DIR)/testdev.h plugins/cpu/cpu_compute.h $(PYG_HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CPU_CFLAGS) -D_GNU_SOURCE -I$(TD_DIR) -c -o $@ $<

$(TESTDEV_OUT)/libpyggml-%.so: $(TD_OBJS) $(TD_KERNEL_OBJS) plugins/plugin.map
	$(CC) -shared -o $@ $(TD_OBJS) $(TD_KERNEL_OBJS) $(PLUGIN_LDFLAGS) -lpthread -lm -ldl
