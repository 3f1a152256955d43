"""The loader's errors, each triggered by a real broken library built here."""
import os
import subprocess
import sys

import pytest

import pyggml as pg

SRC = ["tests/plugins/broken/broken.c"]


def test_missing_file(tmp_path):
    with pytest.raises(pg.PluginNotFoundError, match="not found"):
        pg.load_plugin(tmp_path / "libpyggml-nothere.so")


def test_not_a_shared_library(tmp_path):
    p = tmp_path / "libpyggml-text.so"
    p.write_text("this is not an ELF file\n")
    with pytest.raises(pg.PluginLoadError, match="cannot be loaded as a shared library"):
        pg.load_plugin(p)


def test_no_entry_symbol(c_builder):
    lib = c_builder("libpyggml-noentry.so", SRC, ["BROKEN_NO_ENTRY", 'BROKEN_NAME="noentry"'])
    with pytest.raises(pg.MissingEntryPointError, match="pyg_plugin_get_api"):
        pg.load_plugin(lib)


def test_wrong_abi_major(c_builder):
    lib = c_builder("libpyggml-abi2.so", SRC, ["BROKEN_ABI_MAJOR=2", 'BROKEN_NAME="abi2"'])
    with pytest.raises(pg.AbiMismatchError, match=r"built for ABI 2\.\d+.*speaks 1\.1") as ei:
        pg.load_plugin(lib)
    assert ei.value.plugin == "abi2"


@pytest.mark.parametrize("minor,ok", [(0, True), (3, True), (4, False)])
def test_minor_version_window(c_builder, minor, ok):
    """ABI 1.1 host: a 1.0 plugin (no stream_set_option) loads, newer minors up to 1.3 too."""
    name = f"minor{minor}"
    lib = c_builder(f"libpyggml-{name}.so", SRC, [f"BROKEN_ABI_MINOR={minor}", "BROKEN_NO_DEVICE",
                                                  f'BROKEN_NAME="{name}"'])
    if ok:
        assert pg.load_plugin(lib).abi_minor == minor
    else:
        with pytest.raises(pg.AbiMismatchError, match=r"built for ABI 1\.4.*minor up to 3"):
            pg.load_plugin(lib)


def test_short_table(c_builder):
    lib = c_builder("libpyggml-short.so", SRC, ["BROKEN_SHORT_TABLE", 'BROKEN_NAME="short"'])
    with pytest.raises(pg.AbiMismatchError, match="lacks the ABI 1.0 entry 'plugin_init'"):
        pg.load_plugin(lib)


def test_init_error(c_builder):
    lib = c_builder("libpyggml-initfail.so", SRC, ["BROKEN_INIT_FAILS", 'BROKEN_NAME="initfail"'])
    with pytest.raises(pg.PluginInitError, match="widget firmware checksum mismatch") as ei:
        pg.load_plugin(lib)
    assert ei.value.plugin == "initfail"


def test_no_device_is_not_an_error(c_builder):
    lib = c_builder("libpyggml-nodev.so", SRC, ["BROKEN_NO_DEVICE", 'BROKEN_NAME="nodev"'])
    p = pg.load_plugin(lib)
    assert not p.available
    assert "no widget driver" in p.unavailable_reason
    assert p.devices == []
    with pytest.raises(pg.DeviceUnavailableError, match="no widget driver"):
        pg.get_device("nodev")
    assert pg.load_plugin(lib) is p          # loaded once per process


def test_exception_tree():
    for exc in (pg.PluginError, pg.AbiMismatchError, pg.DeviceOutOfMemory, pg.ShapeError, pg.SyncStateError,
                pg.GGUFError, pg.UnsupportedError):
        assert issubclass(exc, pg.PyggmlError)
    assert issubclass(pg.DeviceOutOfMemory, MemoryError)
    assert issubclass(pg.ShapeError, ValueError)


def test_search_path_and_filters(c_builder, tmp_path):
    """PYGGML_PLUGIN_PATH comes before the package folder; PYGGML_PLUGINS_DISABLE filters by name.
    Run in a child process: discovery happens once per process."""
    lib = c_builder("libpyggml-envplug.so", SRC, ["BROKEN_NO_DEVICE", 'BROKEN_NAME="envplug"'])
    code = ("import pyggml as pg; ps = {p.name: p for p in pg.plugins()}; "
            "print(sorted(ps)); print(ps['envplug'].unavailable_reason if 'envplug' in ps else '-')")
    env = dict(os.environ, PYGGML_PLUGIN_PATH=os.path.dirname(lib))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    assert "'envplug'" in out.stdout and "no widget driver" in out.stdout
    env["PYGGML_PLUGINS_DISABLE"] = "envplug"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    assert "'envplug'" not in out.stdout
    env.pop("PYGGML_PLUGINS_DISABLE")
    env["PYGGML_PLUGINS"] = "envplug"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[0] == "['envplug']"
