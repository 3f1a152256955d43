"""REQUIREMENTS.md R1: every built plugin exports exactly one dynamic symbol."""
import glob
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = sorted(glob.glob(os.path.join(ROOT, "pyggml", "plugins", "libpyggml-*.so")))


def test_cpu_plugin_built():
    assert any(os.path.basename(p) == "libpyggml-cpu.so" for p in LIBS), "run `make plugins` first"


@pytest.mark.parametrize("lib", LIBS, ids=[os.path.basename(p) for p in LIBS])
def test_one_exported_symbol(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    syms = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert syms == ["pyg_plugin_get_api"], f"{os.path.basename(lib)} exports {syms}"
