# pyggml — entry points: make (build), make test, make bench, make check-plugin PLUGIN=path.
PYTHON ?= python3
PLUGIN_DIR := pyggml/plugins
PYG_HEADERS := $(wildcard include/pyggml/*.h)
PLUGIN_CFLAGS := -g -fPIC -fvisibility=hidden -Iinclude -Wall -Wextra -Wno-unused-parameter
PLUGIN_LDFLAGS := -Wl,--version-script=plugins/plugin.map -Wl,--no-undefined
PLUGINS :=

.PHONY: all ext plugins deps test bench check-plugin clean gpu-check

all: ext plugins

# Each plugin folder brings its own rules; a plugin whose toolchain is missing adds nothing.
include $(wildcard plugins/*/*.mk)

plugins: $(PLUGINS)

deps: .stamp-deps
.stamp-deps: requirements.txt
	$(PYTHON) -m pip install -q -r requirements.txt
	@touch $@

ext: deps
	$(PYTHON) setup.py -q build_ext --inplace

test: all
	$(PYTHON) -m pytest -q tests

bench: all
	$(PYTHON) -m pyggml bench $(BENCH_ARGS)

check-plugin: all
	$(PYTHON) -m pyggml check $(PLUGIN)

clean:
	rm -rf build $(PLUGIN_DIR) pyggml/*.so pyggml/_*.c .stamp-*
