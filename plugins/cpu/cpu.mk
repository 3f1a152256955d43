# Builds libpyggml-cpu.so from every C file in plugins/cpu (included by the top Makefile).
CPU_SRCS := $(wildcard plugins/cpu/*.c)
CPU_LIB := $(PLUGIN_DIR)/libpyggml-cpu.so
CPU_CFLAGS := $(PLUGIN_CFLAGS) -std=gnu11 -O3 -Iplugins/cpu

$(CPU_LIB): $(CPU_SRCS) $(wildcard plugins/cpu/*.h) $(PYG_HEADERS) plugins/plugin.map
	@mkdir -p $(PLUGIN_DIR)
	$(CC) $(CPU_CFLAGS) -shared -o $@ $(CPU_SRCS) $(PLUGIN_LDFLAGS) -lpthread -lm

PLUGINS += $(CPU_LIB)
