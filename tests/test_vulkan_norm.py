"""The fused layer norm's kernels (rms_norm -> mul(w), with the residual add before it or not) on the
Vulkan device: the subgroup-per-row kernel (norm_wg=off, lavapipe's default), the earlier
workgroup-per-row kernel (norm_wg=on norm_v=1) and the register kernel (norm_wg=on norm_v=2, GPUs'
default once a GPU run confirms it), at model widths, against float64 numpy. The plugin's debug log names the
kernel of each fused norm (and, for the register kernel, its vec4 or scalar path), so a case also
fails when the wanted kernel did not run."""
import os

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _compute, _rerun_under_validation, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
VALIDATING = os.environ.get("PYGGML_VULKAN_VALIDATION", "") not in ("", "0")
KERNELS = {"sg": ({"norm_wg": "off"}, "norm_mul"), "wg": ({"norm_wg": "on", "norm_v": "1"}, "norm_mul_wg"),
           "reg": ({"norm_wg": "on", "norm_v": "2"}, "norm_mul_reg")}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_norm_kernels_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1."""
    _rerun_under_validation(__file__)


def _ref(s, w, eps):
    n = s / np.sqrt(np.mean(s ** 2, axis=-1, keepdims=True) + eps)
    return n, n * w


@pytest.mark.parametrize("kernel", ["sg", "wg", "reg"])
@pytest.mark.parametrize("add", [False, True])
@pytest.mark.parametrize("rows", [1, 7, 64])
@pytest.mark.parametrize("n0", [4096, 5120, 4100, 4097])
def test_layer_norm_kernels(kernel, add, rows, n0):
    """[add ->] rms_norm -> mul(w) at model widths (4100: not a multiple of 256 or 1024; 4097: not
    of 4, the register kernel's scalar path), every node an output, eps from the graph."""
    options, name = KERNELS[kernel]
    eps = 1e-5 if rows != 7 else 1e-3
    rng = np.random.default_rng(rows * 10000 + n0 + add)
    xv, yv = (rng.standard_normal((rows, n0)).astype(np.float32) for _ in range(2))
    wv = rng.standard_normal((n0,)).astype(np.float32)
    g = pg.Graph()
    x, y, w = g.input("x", xv.shape), g.input("y", yv.shape), g.input("w", wv.shape)
    a = pg.add(x, y) if add else x
    nrm = pg.rms_norm(a, eps=eps)
    m = pg.mul(nrm, w)
    got, log = _compute([a, nrm, m] if add else [nrm, m], {"x": xv, "y": yv, "w": wv} if add else {"x": xv, "w": wv}, options,
                        "(fused with add)" if add else "(fused)")
    s = xv.astype(np.float64) + (yv if add else 0)
    ref_n, ref_m = _ref(s, wv, eps)
    if add:
        assert nmse(got[0], s) <= 1e-7
        got = got[1:]
    assert nmse(got[0], ref_n) <= 1e-7 and nmse(got[1], ref_m) <= 1e-7
    path = (" vec4" if n0 % 4 == 0 else " scalar") if kernel == "reg" else ""
    assert log == [name + path], log


@pytest.mark.parametrize("kernel", ["wg", "reg"])
def test_layer_norm_in_place_chain(kernel):
    """Only the last node is an output: the allocator may put the norm over the add and the mul over
    the norm (the same elements, read then written by one invocation); two layers' worth so a later
    add reads a fused dispatch's output."""
    options, name = KERNELS[kernel]
    rng = np.random.default_rng(11)
    n0, rows = 4096, 3
    xv, yv, zv = (rng.standard_normal((rows, n0)).astype(np.float32) for _ in range(3))
    w1, w2 = (rng.standard_normal((n0,)).astype(np.float32) for _ in range(2))
    g = pg.Graph()
    x, y, z = g.input("x", xv.shape), g.input("y", yv.shape), g.input("z", zv.shape)
    wa, wb = g.input("wa", w1.shape), g.input("wb", w2.shape)
    h = pg.mul(pg.rms_norm(pg.add(x, y), eps=1e-5), wa)
    out = pg.mul(pg.rms_norm(pg.add(h, z), eps=1e-5), wb)
    got, log = _compute(out, {"x": xv, "y": yv, "z": zv, "wa": w1, "wb": w2}, options, "rms_norm '")
    _, h64 = _ref(xv.astype(np.float64) + yv, w1, 1e-5)
    _, ref = _ref(h64 + zv, w2, 1e-5)
    assert nmse(got, ref) <= 1e-7
    assert log == [name + (" vec4" if kernel == "reg" else "")] * 2, log


@pytest.mark.parametrize("case", ["f16 weight", "broadcast weight", "unaligned weight"])
def test_layer_norm_register_kernel_scalar_path(case):
    """What the vec4 path cannot take goes element by element in the same kernel: an f16 weight, a
    weight narrower than the row (repeated along it), a weight that starts 4 bytes past a 16-byte
    line (a view into a wider input)."""
    rows, n0 = 5, 4096
    rng = np.random.default_rng(len(case))
    xv = rng.standard_normal((rows, n0)).astype(np.float32)
    wv = rng.standard_normal((1024 if case == "broadcast weight" else n0,)).astype(np.float32)
    if case == "f16 weight":
        wv = wv.astype(np.float16)
    g = pg.Graph()
    x = g.input("x", xv.shape)
    feeds = {"x": xv}
    if case == "unaligned weight":
        wide = np.concatenate([np.zeros(1, np.float32), wv])
        w = pg.view(g.input("w", wide.shape), (n0,), offset=4, strides=(4,))
        feeds["w"] = wide
    else:
        w = g.input("w", wv.shape, pg.dtype(wv.dtype))
        feeds["w"] = wv
    nrm = pg.rms_norm(x, eps=1e-5)
    m = pg.mul(nrm, w)
    got, log = _compute([nrm, m], feeds, KERNELS["reg"][0], "rms_norm '")
    wfull = np.tile(wv.astype(np.float64), n0 // wv.shape[0])
    ref_n, ref_m = _ref(xv.astype(np.float64), wfull, 1e-5)
    assert nmse(got[0], ref_n) <= 1e-7 and nmse(got[1], ref_m) <= 1e-7
    assert log == ["norm_mul_reg scalar"], log


def test_norm_v_option_values():
    dev = pg.get_device(VK)
    for bad in ("0", "3", "reg"):
        with pytest.raises(pg.PyggmlError, match="norm_v"):
            dev.set_option("norm_v", bad)
    dev.set_option("norm_v", "2")
