"""Configuration has one home per backend: device options (device_set_option), parsed by one table
per plugin (include/pyggml/options.h), documented in the plugin's README. Environment variables are
left only to the loader, the trace, the sync-policy override and Vulkan's sanitizer mode."""
import glob
import os
import re

import numpy as np
import pytest

import pyggml as pg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The environment variables shipped code may read, and why.
ALLOWED_ENV = {
    "PYGGML_PLUGIN_PATH": "loader search path",
    "PYGGML_PLUGINS": "loader filter",
    "PYGGML_PLUGINS_DISABLE": "loader filter",
    "PYGGML_TRACE": "the trace",
    "PYGGML_SYNC": "sync-policy override",
    "PYGGML_VULKAN_VALIDATION": "layers are fixed at vkCreateInstance, before any device option exists",
    "PYGGML_MODEL_CACHE": "where `pyggml bench` caches synthetic models (a path, not a switch)",
    "PYGGML_COMMIT": "the commit a benchmark JSON records (metadata, not a switch)",
}
_READ = re.compile(r"""(?:getenv|environ\.get|environ\[|environ\.setdefault)\(?\s*["'](PYGGML_\w+)""")


def _shipped_sources():
    for pattern in ("plugins/**/*.c", "plugins/**/*.cu", "plugins/**/*.cuh", "plugins/**/*.h", "pyggml/**/*.py",
                    "pyggml/**/*.pyx", "include/**/*.h"):
        yield from glob.glob(os.path.join(ROOT, pattern), recursive=True)


def test_no_environment_switches_in_shipped_code():
    found = {}
    for path in _shipped_sources():
        for name in _READ.findall(open(path, errors="replace").read()):
            if name not in ALLOWED_ENV:
                found.setdefault(name, []).append(os.path.relpath(path, ROOT))
    assert not found, f"environment switches outside the allowed set (make them device options): {found}"


def _device(name):
    p = next((p for p in pg.plugins() if p.name == name), None)
    if p is None or not p.available:
        pytest.skip(f"no usable {name} plugin here")
    return p.devices[0]


@pytest.mark.parametrize("plugin,key,good,bad", [
    ("cpu", "n_threads", "2", "0"), ("cpu", "kernels", "reference", "sse9"), ("cpu", "repack", "off", "maybe"),
    ("vulkan", "fuse", "0", "2"), ("vulkan", "fa_split", "on", "sometimes"), ("vulkan", "subgroups", "yes", "-1"),
])
def test_one_parser_per_plugin(plugin, key, good, bad):
    """Unknown keys: UnsupportedError naming the known ones; bad values: PluginError (invalid
    argument) naming the accepted form, the option keeping its value; good values are taken."""
    dev = _device(plugin)
    with pytest.raises(pg.UnsupportedError, match=rf"unknown option 'no_such_option'.*{key}"):
        dev.set_option("no_such_option", "1")
    with pytest.raises(pg.PluginError, match=key) as e:
        dev.set_option(key, bad)
    assert e.value.code == 1   # PYG_ERR_INVALID_ARGUMENT
    dev.set_option(key, good)
    defaults = {"n_threads": str(os.cpu_count() or 1), "kernels": "auto", "repack": "1", "fuse": "1",
                "fa_split": "auto", "subgroups": "1"}
    dev.set_option(key, defaults[key])


@pytest.mark.parametrize("plugin", ["cpu", "cuda", "vulkan"])
def test_every_option_is_documented(plugin):
    """Each key of a plugin's option table appears in its README's options section."""
    src = {"cpu": "plugins/cpu/plugin.c", "cuda": "plugins/cuda/options.cu", "vulkan": "plugins/vulkan/vk_plugin.c"}
    text = open(os.path.join(ROOT, src[plugin])).read()
    keys = re.findall(r"PYG_OPTION_(?:BOOL|INT|CHOICE)\(\w+, (\w+),", text)
    assert keys, f"no option table in {src[plugin]}"
    readme = open(os.path.join(ROOT, "plugins", plugin, "README.md")).read()
    missing = [k for k in keys if f"`{k}`" not in readme]
    assert not missing, f"plugins/{plugin}/README.md does not document {missing}"


def test_cpu_options_change_the_computation():
    """repack=0 and kernels=reference reach the kernels: a q4_0 decode mat-vec gives the same
    values within the dot kernels' float reordering (the reference kernels are scalar code)."""
    dev = _device("cpu")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 256)).astype(np.float32)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    g = pg.Graph()
    wt = g.weight("w", pg.quantize(w, "q4_0"), type="q4_0", shape=w.shape)
    y = pg.mul_mat(wt, g.input("x", x.shape))
    ref = pg.Scheduler(["cpu"]).compute(y, {"x": x})
    for key, value, default in (("repack", "0", "1"), ("kernels", "reference", "auto")):
        dev.set_option(key, value)
        try:
            got = pg.Scheduler(["cpu"]).compute(y, {"x": x})
        finally:
            dev.set_option(key, default)
        assert np.allclose(got, ref, rtol=1e-4, atol=1e-3), key


def test_cli_device_option_syntax():
    from pyggml.cli import apply_device_options
    with pytest.raises(pg.PyggmlError, match="DEVICE:KEY=VALUE"):
        apply_device_options(["cpu:n_threads"])
    with pytest.raises(pg.UnsupportedError):
        apply_device_options(["cpu:no_such_option=1"])
    apply_device_options(["cpu:n_threads=1", f"cpu:0:n_threads={os.cpu_count() or 1}"])


def test_plugins_do_not_import_pyggml():
    """Plugins depend on include/ alone: nothing under plugins/ imports the host package (benches
    and tools that drive pyggml live in bench/, scripts/ and tests/)."""
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True):
        if re.search(r"^\s*(import pyggml|from pyggml)", open(path).read(), re.M):
            offenders.append(os.path.relpath(path, ROOT))
    assert not offenders, offenders


def test_the_cuda_base_names_no_derived_build():
    """plugins/cuda/ names neither HIP nor MUSA headers; hip.mk / musa.mk inject theirs (-include)."""
    for path in glob.glob(os.path.join(ROOT, "plugins", "cuda", "*.*")):
        if path.endswith(".md"):
            continue
        text = open(path).read()
        assert "vendor_hip.h" not in text and "vendor_musa.h" not in text, path
        assert not re.search(r"defined\(PYG_GPU_(HIP|MUSA)\)", text), path
