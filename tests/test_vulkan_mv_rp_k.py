"""matvec_rp_k: one-column q4_K and q6_K mat-vecs on a repacked copy too (vk_repack.c's layouts, mul_mat_vec_rp.comp's
k-quant paths): q4_K's unit activations quantized to int8 per 16 elements, dotted with the nibbles, scaled by the
unpacked 6-bit scales and mins; q6_K's per 32, dotted with the low nibbles and the high-bit plane's two bits, scaled by
the int8 scale of each 16. Against numpy within the quantization, rows not a multiple of 8 (zero rows in the copy), one to three
units per invocation; a gate/up pair with its swiglu (mul_mat_vec_rpg), the copy made again after a host write, and a
synthetic q4_K LLaMA whose decode takes the repacked mat-vecs and their q/k/v and gate/up fusions."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_gate_up_swiglu, debug_records, has_int8
from test_vulkan_kernels import (VALIDATING, VK, _compute, _decode_model, _options_logged, _rerun_under_validation,  # noqa: F401
                                 _validation_clean, _weight)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
RP = {"matvec_rp": "1", "matvec_rp_k": "1", "fuse_norm_mv": "off"}
OFF = {"matvec_rp": "1", "matvec_rp_k": "0", "fuse_norm_mv": "off"}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


# (M, K): one unit per invocation (K <= 8192), two (11008), three (24576); rows not a multiple of 8; one super-block
@pytest.mark.parametrize("wdt", ["q4_K", "q6_K"])
@pytest.mark.parametrize("m,k", [(64, 256), (100, 4096), (40, 11008), (24, 24576), (13, 512), (8, 2048)])
@pytest.mark.parametrize("rows", ["8", "4"])
def test_mv_rp_k_values(wdt, m, k, rows):
    rng = np.random.default_rng(m + k)
    g = pg.Graph()
    w, w64 = _weight(g, rng, wdt, (m, k))
    x = g.input("x", (1, k))
    xv = rng.standard_normal((1, k)).astype(np.float32)
    ref = xv.astype(np.float64) @ w64.T
    got, k1 = _compute(pg.mul_mat(w, x), {"x": xv}, {**RP, "rp_rows": rows}, "mul_mat '")
    base, k0 = _compute(pg.mul_mat(w, x), {"x": xv}, OFF, "mul_mat '")
    if rows != "8":   # (4 rows: the same sums in the same order as 8)
        got8, _ = _compute(pg.mul_mat(w, x), {"x": xv}, RP, "mul_mat '")
        assert np.array_equal(np.asarray(got), np.asarray(got8)), f"rp_rows={rows} differs from 8"
    if has_int8():
        assert k1 == ["mul_mat_vec_rp"] and "mul_mat_vec_rp" not in k0, (k0, k1)
    for out in (got, base):
        out = np.asarray(out).reshape(ref.shape)
        assert nmse(out, ref) <= 5e-4, f"NMSE {nmse(out, ref):.3g} against numpy"


@pytest.mark.parametrize("wdt", ["q4_K", "q6_K"])
@pytest.mark.parametrize("m,k", [(96, 512), (100, 4096), (40, 11008)])
def test_mv_rp_k_gate_up_swiglu(wdt, m, k):
    """A q4_K or q6_K gate/up pair and its swiglu as one mul_mat_vec_rpg dispatch, all three results against numpy."""
    check_gate_up_swiglu(wdt, m, k, m + k + 1, RP)


@pytest.mark.parametrize("wdt", ["q4_K", "q6_K"])
def test_mv_rp_k_copy_remade(wdt):
    """After the host writes new weights into the weight's buffer the next compute reads a copy of the new ones."""
    if not has_int8():
        pytest.skip("no integer dot product: matvec_rp does not apply here")
    rng = np.random.default_rng(17)
    m, k = 40, 1024
    g = pg.Graph()
    w, w64 = _weight(g, rng, wdt, (m, k))
    x = g.input("x", (1, k))
    y = pg.mul_mat(w, x)
    xv = rng.standard_normal((1, k)).astype(np.float32)
    with debug_records() as records:
        with _options_logged(RP, "mul_mat '"), pg.Scheduler([VK], poison=True) as s:
            a = np.asarray(s.compute(y, {"x": xv}))
            ref = xv.astype(np.float64) @ w64.T
            assert nmse(a.reshape(ref.shape), ref) <= 5e-4
            nb = pg.quantize(rng.standard_normal((m, k)).astype(np.float32), wdt)
            s._leaf(pg.get_device(VK), w).buf.write(0, nb, "new weights")
            c = np.asarray(s.compute(y, {"x": xv}))
            ref_new = xv.astype(np.float64) @ pg.dequantize(nb, wdt, (m, k)).astype(np.float64).T
            assert nmse(c.reshape(ref_new.shape), ref_new) <= 5e-4, "the copy was not made again after the write"
    assert any(f"repack: a copy of 'w' (40 x 1024 {wdt}" in r for r in records), records


def test_mv_rp_k_model_logits(tmp_path):
    """A small synthetic q4_K LLaMA (Q4_K_M's mix: q6_K v, down and output) decodes with matvec_rp_k=1 to within the
    int8 mat-vecs' threshold of the float mat-vec's logits, every one-column mat-vec on the repacked kernels (its q/k/v
    on mul_mat_vec_rpe, its gate/up on mul_mat_vec_rpg), none of one column left on mul_mat_vec2."""
    run = _decode_model(tmp_path, "q4_K", 13)
    ref, k0 = run({"matvec": "2", "matvec_rp": "0"})
    with debug_records() as records:
        got, k1 = run(RP)
    if has_int8():
        assert {"mul_mat_vec_rpe", "mul_mat_vec_rpg"} <= k1 and not any("rp" in k for k in k0), (k0, k1)
        left = [r for r in records if "N 1): mul_mat_vec2" in r]   # (the prefill's N = 4 chunks stay on mul_mat_vec2)
        assert not left, left
    for step, (a, b) in enumerate(zip(got, ref)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 5e-4, f"step {step}: NMSE {nmse(np.asarray(a), np.asarray(b)):.3g}"
