"""mv_q8: a fused layer norm (norm_mul_reg.comp's vec4 path) writes its result's int8 blocks of 32 beside
it, and the q4_0/q8_0/q4_K mat-vecs that read the result stage that copy instead of quantizing it
(mul_mat_vec3q). The quantization is mul_mat_vec3w's on the same stored floats, so the results are its
bytes: single graphs with one to three readers, with and without the residual add, one to four columns;
and a synthetic LLaMA's prefill and decode logits. The repacked decode mat-vecs (q4_0, q4_1, q6_K) read the copy too,
also to the same bytes. A norm whose result no mat-vec reads writes no copy
(vk_fuse.c's q8_mv also refuses a reader when a dispatch since the norm wrote over the result).""" 
import numpy as np
import pytest

import pyggml as pg
from test_vulkan_kernels import VALIDATING, VK, _compute, _decode_model, _rerun_under_validation, _validation_clean, _weight  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
BASE = {"norm_wg": "on", "fuse_norm_mv": "off", "matvec": "6", "mv_q8": "0", "fold_norm": "0"}   # (the tests set mv_q8=1 against it)


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _has_int8():
    desc = pg.get_device(VK).description
    return "llvmpipe" in desc or "NVIDIA" in desc   # (devices known to have the integer dot product)


def _norm_mats(k, n, add, wdt, readers, seed):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    x = g.input("x", (n, k))
    h = pg.add(x, g.input("r", (n, k))) if add else x
    m = pg.mul(pg.rms_norm(h, 1e-6), g.weight("nw", rng.standard_normal(k).astype(np.float32)))
    ws = [g.weight(f"w{i}", pg.quantize(rng.standard_normal((96 + 32 * i, k)).astype(np.float32), wdt), type=wdt,
                   shape=(96 + 32 * i, k)) for i in range(readers)]
    outs = [pg.mul_mat(w, m) for w in ws] + [m]
    feeds = {"x": rng.standard_normal((n, k)).astype(np.float32)}
    if add:
        feeds["r"] = rng.standard_normal((n, k)).astype(np.float32)
    return outs, feeds


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("k,n,add,readers", [(256, 1, False, 1), (2048, 1, True, 2), (4096, 4, True, 3), (768, 2, False, 2)])
def test_mv_q8_same_bytes(wdt, k, n, add, readers):
    outs, feeds = _norm_mats(k, n, add, wdt, readers, seed=k + n)
    ref, k0 = _compute(outs, feeds, BASE, "mul_mat '")
    got, k1 = _compute(outs, feeds, {**BASE, "mv_q8": "1"}, "mul_mat '")
    if _has_int8():
        assert k1.count("mul_mat_vec3q") == readers and "mul_mat_vec3q" not in k0, (k0, k1)
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_mv_q8_only_for_the_norms_readers():
    """A mat-vec that reads something computed from the norm's result (here a scale of it), not the
    result itself, quantizes its own activations (mul_mat_vec3w), and the norm writes no int8 copy."""
    rng = np.random.default_rng(3)
    k = 512
    g = pg.Graph()
    x = g.input("x", (1, k))
    m = pg.mul(pg.rms_norm(x, 1e-6), g.weight("nw", rng.standard_normal(k).astype(np.float32)))
    w, _ = _weight(g, rng, "q4_0", (64, k))
    y1 = pg.mul_mat(w, pg.scale(m, 2.0))
    feeds = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    ref, k0 = _compute([y1, m], feeds, BASE, "mul_mat '")
    got, k1 = _compute([y1, m], feeds, {**BASE, "mv_q8": "1"}, "int8 copy")
    assert k1 == [], k1   # (no norm logged an int8 copy)
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_mv_q8_model_bytes(tmp_path):
    """A small synthetic LLaMA's prefill and decode logits with mv_q8=1 are mv_q8=0's byte for byte (both
    with fuse_norm_mv off), its q/k/v and gate/up mat-vecs on mul_mat_vec3q."""
    run = _decode_model(tmp_path, "q4_0", 9)
    ref, k0 = run(BASE)
    got, k1 = run({**BASE, "mv_q8": "1"})
    if _has_int8():
        assert "mul_mat_vec3q" in k1 and "mul_mat_vec3q" not in k0, (k0, k1)
    for step, (a, b) in enumerate(zip(got, ref)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"step {step}"


# the repacked mat-vecs (matvec_rp) read the copy themselves (mul_mat_vec_rp.comp's q8-in: vk_norm_in.c's q8_in), for
# the weight types whose activations they quantize per 32 as the copy is
RP = {"norm_wg": "on", "matvec_rp": "1", "matvec_rp_k": "1", "rp_norm_in": "off", "mv_q8": "0", "fold_norm": "0"}


@pytest.mark.parametrize("wdt", ["q4_0", "q4_1", "q6_K"])
@pytest.mark.parametrize("k,add,readers", [(256, False, 1), (2048, True, 2), (4096, True, 3)])
def test_rp_q8_same_bytes(wdt, k, add, readers):
    outs, feeds = _norm_mats(k, 1, add, wdt, readers, seed=k + readers)
    ref, k0 = _compute(outs, feeds, RP, "mul_mat '")
    got, k1 = _compute(outs, feeds, {**RP, "mv_q8": "1"}, "mul_mat '")
    if _has_int8():
        assert k1.count("mul_mat_vec_rp q8-in") == readers and not any("q8-in" in x for x in k0), (k0, k1)
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("wdt,extra", [("q4_0", {}), ("q4_1", {}), ("q4_0", {"rp_lit": "1", "rp_rows": "4"})])
def test_rp_q8_model_bytes(tmp_path, wdt, extra):
    """A small synthetic LLaMA's prefill and decode logits with mv_q8=1 are mv_q8=0's byte for byte on the repacked
    mat-vecs, its q/k/v (mul_mat_vec_rpe), gate/up (mul_mat_vec_rpg) and q6_K output reading the norms' int8 copies
    (also on the q4_0 builds with literal blocks per invocation and 4 rows a workgroup: rp_lit, rp_rows)."""
    run = _decode_model(tmp_path, wdt, 19)
    ref, k0 = run(RP)
    got, k1 = run({**RP, "mv_q8": "1", **extra})
    if _has_int8():
        want = {"mul_mat_vec_rpe q8-in", "mul_mat_vec_rpg q8-in", "mul_mat_vec_rp q8-in"}
        assert want <= k1 and not any("q8-in" in x for x in k0), (k0, k1)
    for step, (a, b) in enumerate(zip(got, ref)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"step {step}"
