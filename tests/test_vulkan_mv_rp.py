"""matvec_rp: one-column q4_0 mat-vecs on a repacked copy of the weights (vk_repack.c, mul_mat_vec_rp.comp).
Each block's int8 dot and scales are mul_mat_vec3w's (the same quantization of the activations), only the
order of the float sums differs: results within rounding of matvec_rp=0 and within the quantization of numpy.
The copy is made once per weight and device, shared by the plans that read it, and made again when the host
writes the weight's buffer; what does not qualify (two columns, a weight that is an input) runs as before."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import debug_records, has_int8
from test_vulkan_kernels import (VALIDATING, VK, _compute, _decode_model, _options_logged, _rerun_under_validation,  # noqa: F401
                                 _validation_clean, _weight)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
RP = {"matvec_rp": "1", "fuse_norm_mv": "off"}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _graph(m, k, seed, n=1):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    w, w64 = _weight(g, rng, "q4_0", (m, k))
    x = g.input("x", (n, k))
    xv = rng.standard_normal((n, k)).astype(np.float32)
    return pg.mul_mat(w, x), {"x": xv}, xv.astype(np.float64) @ w64.T


# (M, K): one block per invocation (K <= 8192), two (11008: 192 invocations) and three (24576); rows not a
# multiple of 8 (the padded rows of the copy are zeros); K of a single block
# rows: rp_rows, the workgroup's rows (4: the same sums in the same order as 8, so the same bytes); lit: rp_lit, the
# builds with q4_0 and the blocks per invocation as literals (K up to 16384), the same arithmetic
@pytest.mark.parametrize("rows,lit", [("8", "0"), ("4", "0"), ("8", "1"), ("4", "1")])
@pytest.mark.parametrize("m,k", [(64, 256), (100, 4096), (40, 11008), (24, 24576), (13, 32), (8, 2048), (88, 512)])
def test_mv_rp_values(m, k, rows, lit):
    y, feeds, ref = _graph(m, k, seed=m + k)
    with debug_records() as rec:
        got, k1 = _compute(y, feeds, {**RP, "rp_rows": rows, "rp_lit": lit}, "mul_mat '")
    if has_int8():   # (the plan's line names the 4-row and the literal builds' choices)
        lines = [r for r in rec if "mul_mat '" in r]
        assert any("4 rows a workgroup" in r for r in lines) == (rows == "4"), lines
        assert any("literal build" in r for r in lines) == (lit == "1" and k <= 16384), lines
    if (rows, lit) != ("8", "0"):
        got8, _ = _compute(y, feeds, RP, "mul_mat '")
        assert np.array_equal(np.asarray(got), np.asarray(got8)), f"rp_rows={rows} rp_lit={lit} differs from the defaults"
    base, k0 = _compute(y, feeds, {"fuse_norm_mv": "off"}, "mul_mat '")
    if has_int8():
        assert k1 == ["mul_mat_vec_rp"] and "mul_mat_vec_rp" not in k0, (k0, k1)
    got = np.asarray(got).reshape(ref.shape)
    assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g} against numpy"
    if k % 256 == 0:   # (mul_mat_vec3w there: the same block dots, summed in another order)
        assert nmse(got, np.asarray(base).reshape(ref.shape)) <= 1e-10


def test_mv_rp_only_where_it_applies():
    """Two columns, and weights read through a view (not a leaf flagged WEIGHT), run the other mat-vecs."""
    y2, feeds2, ref2 = _graph(64, 512, seed=5, n=2)
    got, kern = _compute(y2, feeds2, RP, "mul_mat '")
    assert "mul_mat_vec_rp" not in kern, kern
    assert nmse(np.asarray(got).reshape(ref2.shape), ref2) <= 5e-4
    rng = np.random.default_rng(6)
    g = pg.Graph()
    w, w64 = _weight(g, rng, "q4_0", (128, 512))
    top = pg.view(w, (64, 512))
    x = g.input("x", (1, 512))
    xv = rng.standard_normal((1, 512)).astype(np.float32)
    got, kern = _compute(pg.mul_mat(top, x), {"x": xv}, RP, "mul_mat '")
    assert "mul_mat_vec_rp" not in kern, kern
    ref = xv.astype(np.float64) @ w64[:64].T
    assert nmse(np.asarray(got).reshape(ref.shape), ref) <= 5e-4


def test_mv_rp_copy_shared_and_remade():
    """Two plans reading one weight share one copy (one 'repack:' line in the debug log); after the host
    writes new weights into the weight's buffer the next compute reads a copy of the new ones."""
    if not has_int8():
        pytest.skip("no integer dot product: matvec_rp does not apply here")
    rng = np.random.default_rng(7)
    m, k = 72, 1024
    g = pg.Graph()
    w, w64 = _weight(g, rng, "q4_0", (m, k))
    x = g.input("x", (1, k))
    y1 = pg.mul_mat(w, x)
    y2 = pg.mul_mat(w, pg.scale(x, 2.0))
    xv = rng.standard_normal((1, k)).astype(np.float32)
    with debug_records() as records:
        with _options_logged(RP, "mul_mat '") as kernels, pg.Scheduler([VK], poison=True) as s:
            a = np.asarray(s.compute(y1, {"x": xv}))
            b = np.asarray(s.compute(y2, {"x": xv}))
            ref = xv.astype(np.float64) @ w64.T
            assert nmse(a.reshape(ref.shape), ref) <= 5e-4 and nmse(b.reshape(ref.shape), 2 * ref) <= 5e-4
            copies = [r for r in records if "repack: a copy of 'w'" in r]
            assert len(copies) == 1, copies
            new = rng.standard_normal((m, k)).astype(np.float32)
            nb = pg.quantize(new, "q4_0")
            s._leaf(pg.get_device(VK), w).buf.write(0, nb, "new weights")
            c = np.asarray(s.compute(y1, {"x": xv}))
            ref_new = xv.astype(np.float64) @ pg.dequantize(nb, "q4_0", (m, k)).astype(np.float64).T
            assert nmse(c.reshape(ref_new.shape), ref_new) <= 5e-4, "the copy was not made again after the write"
        assert kernels.count("mul_mat_vec_rp") == 2, kernels


def test_mv_rp_model_logits(tmp_path):
    """A small synthetic LLaMA (n_embd 512, n_ff 1536) decodes with matvec_rp=1 to matvec_rp=0's logits
    within rounding at every step, its one-column q4_0 mat-vecs on mul_mat_vec_rp."""
    run = _decode_model(tmp_path, "q4_0", 11)
    ref, k0 = run({"fuse_norm_mv": "off"})
    got, k1 = run({**RP, "matvec_rp_k": "0"})   # (the q6_K output layer on mul_mat_vec2 both times: test_vulkan_mv_rp_k.py)
    if has_int8():
        assert "mul_mat_vec_rp" in k1 and "mul_mat_vec_rp" not in k0, (k0, k1)
    for step, (a, b) in enumerate(zip(got, ref)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10, f"step {step}"


@pytest.mark.parametrize("m,k", [(96, 512), (100, 4096), (40, 11008)])
def test_mv_rp_gate_up_swiglu(m, k):
    """gate = W_g x, up = W_u x and swiglu(gate, up) (a model's feed-forward in decode) run as one mul_mat_vec_rpg
    dispatch on both repacked copies: all three results within rounding of matvec_rp=0's, rows not a multiple
    of 8 included (4 rows of each weight per workgroup)."""
    rng = np.random.default_rng(m + k)
    g = pg.Graph()
    wg = g.weight("wg", pg.quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_0"), type="q4_0", shape=(m, k))
    wu = g.weight("wu", pg.quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_0"), type="q4_0", shape=(m, k))
    x = g.input("x", (1, k))
    gate, up = pg.mul_mat(wg, x), pg.mul_mat(wu, x)
    outs = [gate, up, pg.swiglu(gate, up)]
    feeds = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    ref, k0 = _compute(outs, feeds, {"fuse_norm_mv": "off"}, "mul_mat '")
    got, k1 = _compute(outs, feeds, RP, "mul_mat '")
    if has_int8():
        assert k1 == ["mul_mat_vec_rpg"] and "mul_mat_vec_rpg" not in k0, (k0, k1)
    for a, b in zip(got, ref):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10
    lit, _ = _compute(outs, feeds, {**RP, "rp_lit": "1"}, "mul_mat '")   # (rp_lit: the q4_0 builds, the same bytes)
    for a, b in zip(lit, got):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_mv_rp_threads():
    """Four threads, each with its own scheduler (its own weight buffers, so its own copies), build, compute and
    release plans on one device at once: the copies' shared list and their remaking stay consistent, and every
    result is right."""
    import threading
    m, k = 64, 1024
    y, feeds, ref = _graph(m, k, seed=21)
    errors = []

    def work():
        try:
            for _ in range(3):
                with pg.Scheduler([VK]) as s:
                    out = np.asarray(s.compute(y, feeds)).reshape(ref.shape)
                    assert nmse(out, ref) <= 5e-4
        except Exception as e:   # (reported below: a thread's assertion does not fail the test by itself)
            errors.append(repr(e))
    with _options_logged(RP, "mul_mat '") as kernels:
        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert not errors, errors
    if has_int8():
        assert kernels and set(kernels) == {"mul_mat_vec_rp"}, kernels
