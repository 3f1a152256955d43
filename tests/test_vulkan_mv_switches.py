"""Two switches of the whole-row mat-vecs (mul_mat_vec3w/3n/3s). matvec_ahead=1 issues two units' weight
loads before the activation row is staged, not one: the same sums in the same order, so the same bytes
(against matvec_ahead=0 here, single mat-vecs and a model's decode through all three builds).
debug_mv_parts, mul_mat_vec3w's measurement switch: 1 stages zeros instead of reading and quantizing
the activation row, 2 skips the weight loads. Either way every dot product is zero: the results are
zeros, by design, and the whole mat-vec is back at 0. scripts/vulkan_matvec_sweep.py times the parts
(kernels mv3w_nostage, mv3w_noweights) to split a mat-vec's GPU time."""
import numpy as np
import pytest

import pyggml as pg
from test_vulkan_kernels import VALIDATING, VK, _compute, _decode_model, _int_dot_kernels, _run, _rerun_under_validation, _validation_clean, _weight  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


@pytest.mark.parametrize("parts", ["1", "2"])
@pytest.mark.parametrize("m,k", [(37, 256), (259, 4096)])
def test_mv_parts_give_zeros(parts, m, k):
    e, kernels = _run("q4_0", (m, k), (1, k), {"matvec": "6", "debug_mv_parts": parts}, seed=m + k)
    assert kernels in _int_dot_kernels("6"), kernels
    if kernels == ["mul_mat_vec3w"]:   # (a device without the integer dot product runs mul_mat_vec3: no switch)
        assert e == pytest.approx(1.0), f"NMSE {e:.3g}: the parts switch should leave zeros (NMSE 1)"
    e, kernels = _run("q4_0", (m, k), (1, k), {"matvec": "6"}, seed=m + k)   # the switch reset: the whole mat-vec
    assert e <= 5e-4, f"NMSE {e:.3g}"


def test_mv_parts_values():
    dev = pg.get_device(VK)
    for bad in ("3", "-1"):
        with pytest.raises(pg.PyggmlError, match="debug_mv_parts"):
            dev.set_option("debug_mv_parts", bad)
    dev.set_option("debug_mv_parts", "0")


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("m,k", [(37, 256), (259, 4096), (101, 5632), (1000, 11008), (40, 16384)])
@pytest.mark.parametrize("rows", ["1", "2", "4"])
def test_matvec_ahead_same_bytes(wdt, m, k, rows):
    """One unit per invocation or a fraction (K = 256), exactly two (4096 at 16 rows), an odd count
    (5632, 11008), many (16384): matvec_ahead=1 gives matvec_ahead=0's bytes."""
    rng = np.random.default_rng(m + k)
    g = pg.Graph()
    w, _ = _weight(g, rng, wdt, (m, k))
    y = pg.mul_mat(w, g.input("x", (1, k)))
    feeds = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    ref, k0 = _compute(y, feeds, {"matvec": "6", "matvec_rows": rows}, "mul_mat '")
    got, k1 = _compute(y, feeds, {"matvec": "6", "matvec_rows": rows, "matvec_ahead": "1"}, "mul_mat '")
    assert k0 == k1 and k1 in _int_dot_kernels("6"), (k0, k1)
    assert np.array_equal(np.asarray(got), np.asarray(ref))


def test_matvec_ahead_model_bytes(tmp_path):
    """A small synthetic LLaMA's prefill and decode logits with matvec_ahead=1 are matvec_ahead=0's byte
    for byte, through the norm-recomputing (mul_mat_vec3n), swiglu (mul_mat_vec3s) and plain builds."""
    run = _decode_model(tmp_path, "q4_0", 7)
    ref, k0 = run({"fuse_swiglu": "1", "fuse_norm_mv": "on", "norm_wg": "on"})
    got, k1 = run({"fuse_swiglu": "1", "fuse_norm_mv": "on", "norm_wg": "on", "matvec_ahead": "1"})
    assert k0 == k1, (k0, k1)
    if "mul_mat_vec3w" in k1:   # (a device without the integer dot product runs none of the three)
        assert {"mul_mat_vec3n", "mul_mat_vec3s"} <= k1, k1
    for step, (a, b) in enumerate(zip(got, ref)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"step {step}"
