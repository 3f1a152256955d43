"""rp_norm_in: a layer's q/k/v (mul_mat_vec_rpe) and gate/up (mul_mat_vec_rpg) mat-vecs on matvec_rp recompute the fused
norm they read, rms_norm(x [+ r]) * w, from its inputs (vk_norm_in.c, mul_mat_vec_rp.comp's norm-in), so they share the
norm dispatch's barrier stage. A graph fragment (the residual add, the norm and its weight, gate/up/swiglu) against
numpy and against rp_norm_in=off, in one stage; a synthetic LLaMA per weight type decodes to the same
logits (to the int8 mat-vecs' rounding) with fewer barriers; a mat-vec whose norm input a node between overwrites keeps
reading the norm's result."""
import re

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import debug_records, has_int8, run_steps
from test_vulkan_kernels import VALIDATING, VK, _decode_model, _rerun_under_validation, _validation_clean, _weight  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
ON = {"matvec_rp": "1", "rp_norm_in": "on", "norm_wg": "on", "fold_norm": "0"}     # (the norm on norm_mul_reg.comp's vec4 path)
OFF = {"matvec_rp": "1", "rp_norm_in": "off", "norm_wg": "on", "fold_norm": "0"}
EPS = 1e-5


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _barriers(records):
    """the barrier count of the smallest plan the plugin's debug log reported"""
    return min(int(re.search(r"(\d+) barriers", r).group(1)) for r in records if " barriers" in r)


def _ffn(wdt, k, m, add, seed):
    """h = x + r (or x), n = rms_norm(h) * w, then gate/up/swiglu of n; returns the build and numpy's results"""
    rng = np.random.default_rng(seed)

    def build():
        g = pg.Graph()
        x = g.input("x", (1, k))
        r = g.input("r", (1, k)) if add else None
        w = g.weight("nw", (1 + 0.1 * np.random.default_rng(seed + 1).standard_normal(k)).astype(np.float32))
        wg, _ = _weight(g, np.random.default_rng(seed + 2), wdt, (m, k), "wg")
        wu, _ = _weight(g, np.random.default_rng(seed + 3), wdt, (m, k), "wu")
        h = pg.add(x, r) if add else x
        n = pg.mul(pg.rms_norm(h, EPS), w)
        a, b = pg.mul_mat(wg, n), pg.mul_mat(wu, n)
        return [pg.swiglu(a, b)]
    (_, g64), (_, u64) = (_weight(pg.Graph(), np.random.default_rng(seed + s), wdt, (m, k), "w") for s in (2, 3))
    nw = (1 + 0.1 * np.random.default_rng(seed + 1).standard_normal(k)).astype(np.float64)
    feeds = [{"x": rng.standard_normal((1, k)).astype(np.float32), "r": rng.standard_normal((1, k)).astype(np.float32)}
             for _ in range(2)]
    if not add:
        for f in feeds:
            del f["r"]
    refs = []
    for f in feeds:
        h = f["x"].astype(np.float64) + (f["r"].astype(np.float64) if add else 0)
        n = h / np.sqrt((h * h).mean() + EPS) * nw
        a, b = n @ g64.T, n @ u64.T
        refs.append(a / (1 + np.exp(-a)) * b)
    return build, feeds, refs


@pytest.mark.parametrize("wdt", ["q4_0", "q4_1", "q4_K", "q6_K"])
@pytest.mark.parametrize("add", [True, False], ids=["add", "no-add"])
def test_norm_in_gate_up(wdt, add):
    """gate/up/swiglu of a layer norm (with the residual add before it or not), two steps of one plan: against numpy
    and against the same graph with rp_norm_in=off, one barrier fewer."""
    k, m = 512, 96
    build, feeds, refs = _ffn(wdt, k, m, add, 3 if add else 4)
    opts = {"matvec_rp_k": "1"}
    with debug_records() as rec_on:
        on, k_on = run_steps([VK], build, feeds, {**ON, **opts})
    with debug_records() as rec_off:
        off, _ = run_steps([VK], build, feeds, {**OFF, **opts})
    if has_int8():
        assert "mul_mat_vec_rpg" in k_on, k_on
        assert any("recomputes rms_norm" in r and "norm-in" in r for r in rec_on), rec_on
        assert (_barriers(rec_on), _barriers(rec_off)) == (0, 1)            # the norm and the mat-vecs: one stage
    for a, b, ref in zip(on, off, refs):
        assert nmse(np.asarray(a[0]).reshape(ref.shape), ref) <= 5e-4
        assert nmse(np.asarray(a[0]), np.asarray(b[0])) <= 5e-4            # the same int8 arithmetic, scaled at the end


@pytest.mark.parametrize("wdt,rows,lit", [("q4_0", "8", "0"), ("q4_K", "8", "0"), ("q4_0", "4", "0"), ("q4_0", "4", "1")])
def test_norm_in_model(tmp_path, wdt, rows, lit):
    """A synthetic LLaMA decodes with rp_norm_in=on to within the int8 mat-vecs' threshold of rp_norm_in=off, its
    q/k/v and gate/up recomputing their layer norms, with two barriers fewer per layer (rp_rows=4: q/k/v's
    workgroups of 4 rows recomputing it too)."""
    run = _decode_model(tmp_path, wdt, 31)
    opts = {"matvec_rp_k": "1", "rp_rows": rows, "rp_lit": lit}
    with debug_records() as rec_off:
        ref, _ = run({**OFF, **opts})
    with debug_records() as rec_on:
        got, kern = run({**ON, **opts})
    if has_int8():
        fused = [r for r in rec_on if "recomputes rms_norm" in r and "norm-in" in r]
        assert any("mul_mat_vec_rpg" in r for r in fused) and any("mul_mat_vec_rpe" in r for r in fused), fused
        assert _barriers(rec_on) <= _barriers(rec_off) - 2 * 2, (_barriers(rec_on), _barriers(rec_off))   # 2 layers
    for step, (a, b) in enumerate(zip(got, ref)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 5e-4, f"step {step}: NMSE {nmse(np.asarray(a), np.asarray(b)):.3g}"


def test_norm_in_auto_takes_narrow_rows():
    """auto (the default): rows up to 1024 wide (SmolLM2-135M's 576), not 2048 (a 1b-sized layer's)."""
    if not has_int8():
        pytest.skip("no integer dot product: matvec_rp does not apply here")
    for k, want in ((576, True), (1024, True), (2048, False)):
        build, feeds, _ = _ffn("q4_0", k, 64, True, 5)
        with debug_records() as rec:
            run_steps([VK], build, feeds[:1], {**ON, "rp_norm_in": "auto"})   # (the default)
        assert any("norm-in" in r for r in rec) == want, k


def test_norm_in_refused_where_the_arena_reused_the_inputs(tmp_path, monkeypatch):
    """Packed tightest (reuse lag 0) the arena puts later nodes' outputs on a norm's dead inputs before every
    projection has run: those projections keep reading the norm's result (fewer recompute), the logits the same to
    the int8 mat-vecs' rounding."""
    if not has_int8():
        pytest.skip("no integer dot product: matvec_rp does not apply here")
    import pyggml.scheduler
    run = _decode_model(tmp_path, "q4_0", 33)

    def fused(records):
        return sum("norm-in" in r for r in records)
    with debug_records() as r1:
        l1, _ = run(ON)
    monkeypatch.setattr(pyggml.scheduler, "REUSE_LAG", 0)
    with debug_records() as r0:
        l0, _ = run(ON)
    assert 0 < fused(r0) < fused(r1), (fused(r0), fused(r1))
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 5e-4
