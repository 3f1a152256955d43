# pyggml — entry points: make (build), make test, make bench, make check-plugin PLUGIN=path.
#
# Python: $(SYS_PYTHON) (python3) when pip may install into it; an externally managed system Python
# (PEP 668, e.g. Debian's, where pip refuses) gets a project virtual environment in $(VENV), made on
# first use. PYTHON=/path/to/python overrides both.
SYS_PYTHON ?= python3
VENV ?= .venv
PY_MANAGED := $(shell $(SYS_PYTHON) -c 'import os, sys, sysconfig; print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))' 2>/dev/null)
ifeq ($(PY_MANAGED),1)
PYTHON ?= $(VENV)/bin/python
PY_ENV := $(VENV)/bin/python
# as if activated: tests and tools that start `python3` or `pyggml` get the venv's
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)
else
PYTHON ?= $(SYS_PYTHON)
PY_ENV :=
endif
PLUGIN_DIR := pyggml/plugins
PYG_HEADERS := $(wildcard include/pyggml/*.h)
PLUGIN_CFLAGS := -g -fPIC -fvisibility=hidden -Iinclude -Wall -Wextra -Wno-unused-parameter
PLUGIN_LDFLAGS := -Wl,--version-script=plugins/plugin.map -Wl,--no-undefined
PLUGINS :=

.PHONY: all ext plugins deps test test-c fuzz bench bench-ops bench-ops-pytest bench-llamacpp check-plugin clean distclean gpu-check

all: ext plugins

# Each plugin folder brings its own rules; a plugin whose toolchain is missing adds nothing.
include $(wildcard plugins/*/*.mk)

plugins: $(PLUGINS)

# The project venv: with the venv module (Debian: python3-venv), else without pip but seeing the
# system's pip (Debian: python3-pip), which then installs into the venv.
$(VENV)/bin/python:
	@$(SYS_PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  $(SYS_PYTHON) -m venv --without-pip --system-site-packages $(VENV) && $@ -m pip --version >/dev/null; } || \
	  { rm -rf $(VENV); echo "pyggml: $(SYS_PYTHON) refuses pip installs and cannot make a virtual environment;" \
	    "install python3-venv (Debian/Ubuntu: apt-get install python3-venv python3-dev), or run make PYTHON=..." >&2; exit 1; }
	@echo "pyggml: $(SYS_PYTHON) is externally managed (PEP 668): using the project venv $(VENV)"

deps: .stamp-deps
.stamp-deps: requirements.txt $(PY_ENV)
	@$(PYTHON) -c 'import os, sys, sysconfig; h = os.path.join(sysconfig.get_paths()["include"], "Python.h"); os.path.exists(h) or sys.exit("pyggml: " + h + " is missing: install the Python headers (Debian/Ubuntu: apt-get install python3-dev)")'
	$(PYTHON) -m pip install -q -r requirements.txt
	@touch $@

# The ABI's constants and declarations for Python, generated from the headers (one source of truth).
pyggml/_abi_consts.py: $(PYG_HEADERS) scripts/gen_abi.py
	$(PYTHON) scripts/gen_abi.py

ext: deps pyggml/_abi_consts.py
	$(PYTHON) setup.py -q build_ext --inplace --no-cpu-plugin

# The plugins' own C tests (no Python), then the Python suite. Markers: gpu, slow, llamacpp
# (e.g. make test PYTEST_ARGS="-m 'not slow'").
test: all test-c
	$(PYTHON) -m pytest -q --strict-markers $(PYTEST_ARGS) tests

test-c: all
	$(MAKE) -f plugins/cpu/tests/Makefile check kernels

# Bounded coverage-guided fuzzing of the GGUF reader and the loader's checks (atheris, installed on
# first use) from the committed seed corpus; new inputs go to a scratch folder. CI runs it.
FUZZ_SECONDS ?= 180
fuzz: ext
	$(PYTHON) -c "import atheris" 2>/dev/null || $(PYTHON) -m pip install -q atheris
	@d=$$(mktemp -d); trap 'rm -rf "$$d"' EXIT; \
	$(PYTHON) tests/fuzz/fuzz_gguf.py -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
		-print_final_stats=1 "$$d" tests/fuzz/corpus

MODEL ?=
DEVICES ?= cpu
THREADS ?=
BENCH_MODEL_ARGS = -d $(DEVICES) $(if $(THREADS),-t $(THREADS))

# The main job: a synthetic tiny LLaMA (generated once, cached) on the CPU, then the op benchmark.
bench: all
	$(PYTHON) -m pyggml bench -m $(or $(MODEL),synth:tiny:q4_0) $(BENCH_MODEL_ARGS) $(BENCH_ARGS)
	$(PYTHON) -m pyggml bench $(if $(THREADS),-t $(THREADS))

bench-ops: all
	$(PYTHON) -m pyggml bench $(if $(THREADS),-t $(THREADS)) $(BENCH_ARGS)

# The op micro-benchmarks on pytest-benchmark, numpy beside each op; JSON into bench/results.
# Compare with a saved run: BENCH_ARGS="--benchmark-compare=0001" (see bench/test_ops_bench.py).
bench-ops-pytest: all
	$(PYTHON) -m pytest -q bench/test_ops_bench.py --device $(DEVICES) \
		--benchmark-json bench/results/ops-bench-$(shell date +%Y%m%dT%H%M%S).json $(BENCH_ARGS)

# llama.cpp side by side: builds llama-cpp-python once (5-20 min), then the same model run
bench-llamacpp: all
	$(PYTHON) -c "import llama_cpp" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" $(PYTHON) -m pip install llama-cpp-python
	$(PYTHON) -m pyggml bench -m $(or $(MODEL),synth:tiny:q4_0) -d cpu $(if $(THREADS),-t $(THREADS)) $(BENCH_ARGS)

check-plugin: all
	$(PYTHON) -m pyggml check $(PLUGIN)

clean:
	rm -rf build $(PLUGIN_DIR) pyggml/*.so pyggml/_*.c .stamp-*

distclean: clean
	rm -rf $(VENV) dist *.egg-info
