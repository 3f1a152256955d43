"""Plugin isolation (issue 16): a faulty plugin must not take the host down. Each broken library
is built here (tests/plugins/broken/broken.c) or cut from the real CPU plugin; every scenario runs
in a child process with its own probe cache, so a regression fails the test instead of killing
pytest."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = ["tests/plugins/broken/broken.c"]
CPU = os.path.join(ROOT, "pyggml", "plugins", "libpyggml-cpu.so")


def run(code, tmp_path, plugin_path=None, timeout=120, use_cpu=False):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=ROOT)
    env.pop("PYGGML_PLUGIN_PATH", None)
    if plugin_path:
        env["PYGGML_PLUGIN_PATH"] = str(plugin_path)
    prelude = "import pyggml as pg, pyggml._probe as probe\nprobe.PROBE_TIMEOUT_S = 5\n"
    code = prelude + textwrap.dedent(code) + (_USE_CPU if use_cpu else "")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0, f"host process died or failed (status {out.returncode}):\n{out.stderr[-3000:]}"
    return out.stdout


def truncated_cpu(d, size=100_000):
    d.mkdir(exist_ok=True)
    p = d / "libpyggml-cpu.so"
    p.write_bytes(open(CPU, "rb").read()[:size])
    return p


_USE_CPU = """
import numpy as np
g = pg.Graph(); x = g.input("x", (2, 8))
out = pg.Scheduler("cpu").compute(pg.silu(x), {"x": np.ones((2, 8), np.float32)})
print("computed", float(out.sum()) > 0)
"""


def test_truncated_plugin_is_refused_before_dlopen(tmp_path):
    """The first 100 kB of libpyggml-cpu.so used to kill the host with SIGBUS inside dlopen."""
    if os.path.getsize(CPU) <= 200_000:
        pytest.skip("the CPU plugin is too small to cut")
    bad = truncated_cpu(tmp_path / "cut")
    out = run(f"""
        try:
            pg.load_plugin({str(bad)!r})
        except pg.PluginLoadError as e:
            print("refused:", e)
    """, tmp_path)
    assert "refused:" in out and "past the end of the file" in out


def test_corrupt_file_with_a_packaged_name_does_not_shadow(tmp_path):
    """A corrupt libpyggml-cpu.so first in the search path: discovery reports it and falls through
    to the packaged CPU plugin ('no plugin named cpu is loaded' before)."""
    bad = truncated_cpu(tmp_path / "cut")
    out = run("""
        print("devices", [str(d) for d in pg.devices()])
        print("failures", pg.failures())
    """, tmp_path, plugin_path=bad.parent, use_cpu=True)
    assert "devices ['cpu:0'" in out and "computed True" in out
    assert str(bad) in out and "truncated" in out
    cli = subprocess.run([sys.executable, "-m", "pyggml", "devices"], cwd=ROOT, capture_output=True, text=True,
                         env=dict(os.environ, PYGGML_PLUGIN_PATH=str(bad.parent), PYTHONPATH=ROOT,
                                  XDG_CACHE_HOME=str(tmp_path / "cache")), timeout=120)
    assert cli.returncode == 0 and "cpu:0" in cli.stdout and "(failed)" in cli.stdout, cli.stderr


@pytest.mark.parametrize("define,name,exc,why", [
    ("BROKEN_SEGV_ENTRY", "segv", "PluginLoadError", "crashed (SIGSEGV)"),
    ("BROKEN_ABORT_CTOR", "abortctor", "PluginLoadError", "crashed (SIGABRT)"),
    ("BROKEN_HANG_INIT", "hang", "PluginInitError", "hung"),
])
def test_crash_or_hang_marks_the_plugin_unusable(c_builder, tmp_path, define, name, exc, why):
    lib = c_builder(f"libpyggml-{name}.so", SRC, [define, f'BROKEN_NAME="{name}"'])
    t0 = time.monotonic()
    out = run(f"""
        import time
        for attempt in range(2):                 # the second answer comes from the verdict cache
            t = time.monotonic()
            try:
                pg.load_plugin({lib!r})
            except pg.PluginError as e:
                print(type(e).__name__, "|", e, "|", round(time.monotonic() - t, 2))
    """, tmp_path, use_cpu=True)
    lines = [l for l in out.splitlines() if "|" in l]
    assert len(lines) == 2 and all(l.startswith(exc) and why in l for l in lines), out
    assert float(lines[1].rsplit("|", 1)[1]) < 1.0, "the cached verdict was not used"
    assert "computed True" in out                # the host carries on
    assert time.monotonic() - t0 < 60
    cache = json.load(open(tmp_path / "cache" / "pyggml" / "plugin-probes.json"))
    assert any(k.startswith(os.path.realpath(lib) + "|") and not v["ok"] for k, v in cache.items())


def test_discovery_survives_a_crashing_plugin(c_builder, tmp_path):
    d = tmp_path / "plugins"
    d.mkdir()
    shutil.copy(c_builder("libpyggml-segv2.so", SRC, ["BROKEN_SEGV_ENTRY", 'BROKEN_NAME="segv2"']),
                d / "libpyggml-segv2.so")
    out = run("""
        print("plugins", sorted(p.name for p in pg.plugins()))
        print("failures", pg.failures())
    """, tmp_path, plugin_path=d, use_cpu=True)
    assert "'segv2'" not in out.splitlines()[0] and "SIGSEGV" in out and "computed True" in out


def test_rebuilt_plugin_is_probed_again(c_builder, tmp_path):
    """The verdict is keyed by path, size and mtime: a fixed plugin at the same path loads."""
    d = tmp_path / "p"
    d.mkdir()
    target = d / "libpyggml-phoenix.so"
    shutil.copy(c_builder("libpyggml-phoenix_bad.so", SRC, ["BROKEN_SEGV_ENTRY", 'BROKEN_NAME="phoenix"']), target)
    code = f"""
        try:
            print("available", pg.load_plugin({str(target)!r}).unavailable_reason)
        except pg.PluginError as e:
            print("error", e)
    """
    assert "SIGSEGV" in run(code, tmp_path)
    shutil.copy(c_builder("libpyggml-phoenix_ok.so", SRC, ["BROKEN_NO_DEVICE", 'BROKEN_NAME="phoenix"']), target)
    os.utime(target, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert "available no widget driver" in run(code, tmp_path)


def test_second_file_of_a_name_is_reported_as_shadowed(tmp_path):
    d = tmp_path / "copy"
    d.mkdir()
    shutil.copy(CPU, d / "libpyggml-cpu.so")
    out = run("""
        pg.discover()
        print("shadowed", pg.shadowed())
        print("used", pg.get_device("cpu").plugin.path)
    """, tmp_path, plugin_path=d)
    assert f"used {os.path.realpath(d / 'libpyggml-cpu.so')}" in out
    assert os.path.realpath(CPU) in out.splitlines()[0]


@pytest.mark.parametrize("offset,value,why", [(18, b"\x28\x00", "ELF machine 40"),      # ARM
                                              (4, b"\x01", "32-bit or foreign"),
                                              (16, b"\x02\x00", "not a shared object")])
def test_elf_header_checks(tmp_path, offset, value, why):
    data = bytearray(open(CPU, "rb").read())
    data[offset:offset + len(value)] = value
    p = tmp_path / "libpyggml-patched.so"
    p.write_bytes(bytes(data))
    from pyggml._probe import elf_problem
    assert why in (elf_problem(str(p)) or "")
    assert elf_problem(CPU) is None
