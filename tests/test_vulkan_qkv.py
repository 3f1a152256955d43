"""fuse_qkv=1 (vk_qkv.c): a decode layer's q, k and v mat-vecs, each with its rope and/or KV-cache write
(fuse_rope_mv's three mul_mat_vec_rpe dispatches), as one mul_mat_vec_rpq dispatch. The layer over three decode
steps against fuse_qkv=0 bit for bit (the same sums in the same order) and against the CPU plugin, with grouped and
ungrouped heads, f32/f16/bf16 caches, i32/i64 indices and partial ropes; a product that something else reads keeps
the three dispatches; a synthetic LLaMA decodes to the same logits with two dispatches fewer per layer."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_model_on_off, has_int8, qkv_layer, run_steps
from test_vulkan_kernels import VALIDATING, VK, _rerun_under_validation, _validation_clean  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
H, D, K, N_CTX = 8, 64, 512, 16
# (rp_norm_in=off: on the GPU its auto takes the model's 512-wide rows, and the merge leaves norm-in dispatches alone)
ON = {"matvec_rp": "1", "fuse_rope_mv": "1", "fuse_qkv": "1", "rp_norm_in": "off"}
OFF = {"matvec_rp": "1", "fuse_rope_mv": "1", "fuse_qkv": "0", "rp_norm_in": "off"}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _layer(seed, hkv, itype, ctype, rope_kw, wtype="q4_0", extra=None):
    return qkv_layer(seed, (H, hkv, D, K, N_CTX), itype, ctype, rope_kw, wtype, extra)


def _feeds(step, itype):
    x = np.random.default_rng(100 + step).standard_normal((1, K)).astype(np.float32)
    return {"x": x, "pos": np.array([7 + 3 * step], np.int32), "idx": np.array([2 + step], itype)}


ROPES = {"plain": dict(mode=pg.ROPE_NORMAL, freq_base=10000.0),
         "partial": dict(mode=pg.ROPE_NORMAL, n_dims=48, freq_base=500000.0)}


def _three_ways(build, itype, steps=3):
    """build's outputs over `steps` decode steps on the CPU plugin, with fuse_qkv on and off, and the kernels
    each Vulkan run's debug log named for its mul_mat nodes"""
    feeds = [_feeds(s, itype) for s in range(steps)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, k1 = run_steps([VK], build, feeds, ON)
    base, k0 = run_steps([VK], build, feeds, OFF)
    return want, got, base, k1, k0


@pytest.mark.parametrize("rope", sorted(ROPES))
@pytest.mark.parametrize("hkv,itype,ctype,wtype", [(2, "i64", "f16", "q4_0"), (8, "i32", "f32", "q4_0"),
                                                   (2, "i32", "bf16", "q4_0"), (2, "i32", "f16", "q4_1")])
def test_qkv_layer(rope, hkv, itype, ctype, wtype):
    inp = np.int64 if itype == "i64" else np.int32
    build = lambda: _layer(5, hkv, getattr(pg, itype), getattr(pg, ctype), ROPES[rope], wtype)   # noqa: E731
    want, got, base, k1, k0 = _three_ways(build, inp)
    if has_int8():
        assert k1.count("mul_mat_vec_rpq") == 1 and "mul_mat_vec_rpq" not in k0, (k1, k0)
    for step in range(3):
        for name, gv, bv, wv in zip(("q roped", "K cache", "V cache"), got[step], base[step], want[step]):
            assert np.array_equal(gv, bv), f"{name}, step {step}: differs from fuse_qkv=0"
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))
        for c in (got[step][1], got[step][2]):   # rows 2..2+step written, the others never
            assert np.all(c[3 + step:] == 0) and np.all(c[:2] == 0)
            assert np.all(np.any(c[2:3 + step] != 0, axis=1))


@pytest.mark.parametrize("extra", ["k", "kr"])
def test_qkv_keeps_read_products(extra):
    """A graph output reads k's product or k's roped row, which the merged dispatch does not write: the three
    dispatches stay, and every output (that one too) matches the CPU plugin."""
    build = lambda: _layer(6, 2, pg.i32, pg.f16, ROPES["plain"], extra=extra)   # noqa: E731
    want, got, base, k1, _ = _three_ways(build, np.int32, steps=2)
    assert "mul_mat_vec_rpq" not in k1, k1
    if has_int8():
        assert k1.count("mul_mat_vec_rpe") == 3, k1
    for step in range(2):
        for gv, wv in zip(got[step], want[step]):
            assert nmse(gv, wv) < 5e-4, step


def test_qkv_model_logits(tmp_path):
    """A small synthetic LLaMA (2 layers) decodes to fuse_qkv=0's logits bit for bit, with every layer's q, k and
    v on one mul_mat_vec_rpq and two dispatches fewer per layer in its decode plan."""
    check_model_on_off(tmp_path, ON, OFF, "mul_mat_vec_rpq", 2 * 2)
