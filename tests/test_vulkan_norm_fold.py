"""fold_norm=1: a decode mat-vec on matvec_rp with the residual add, rms_norm and weight multiply after it (a layer's
o and down projections) as one dispatch, mul_mat_vec_rpn (vk_mv_epi.c): its last workgroup normalizes the row. Every
node's result (the product, the sum, the norm, the scaled norm) against the same graph with fold_norm=0 (the sum of
squares in another order: to rounding) and against the CPU plugin, over shapes with one and many workgroups and rows
not a multiple of 8, both operand orders of the add, three runs of one plan (the plan zeroes the workgroup counter
before each). What does not fit (the norm not the sum's first reader) stays apart. A synthetic LLaMA decodes to the
same logits with two dispatches fewer per layer."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_model_on_off, has_int8, run_steps
from test_vulkan_kernels import VALIDATING, VK, _rerun_under_validation, _validation_clean  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
# (rp_norm_in=off: on the GPU its auto takes the 512-wide test model's q/k/v and gate/up where fold_norm=0, which changes
# that plan's dispatch count; lavapipe keeps it off)
ON = {"matvec_rp": "1", "fold_norm": "1", "rp_norm_in": "off"}
OFF = {"matvec_rp": "1", "fold_norm": "0", "rp_norm_in": "off"}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _fragment(m, k, seed, swap=False, extra_reader=False):
    rng = np.random.default_rng(seed)
    wo = pg.quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_0")
    nw = (1.0 + 0.5 * rng.standard_normal(m)).astype(np.float32)

    def build():
        g = pg.Graph()
        x, r = g.input("x", (1, k), pg.f32), g.input("r", (1, m), pg.f32)
        y = pg.mul_mat(g.weight("wo", wo, type="q4_0", shape=(m, k)), x)
        a = pg.add(y, r) if swap else pg.add(r, y)
        outs = [pg.scale(y, 1.0), pg.scale(a, 1.0)] if extra_reader else []
        n = pg.rms_norm(a, 1e-5)
        h = pg.mul(n, g.weight("nw", nw))
        return outs + [pg.scale(n, 1.0), pg.scale(h, 1.0), pg.scale(y, 1.0), pg.scale(a, 1.0)]
    return build


def _feeds(m, k, step):
    rng = np.random.default_rng(50 + step)
    return {"x": rng.standard_normal((1, k)).astype(np.float32), "r": rng.standard_normal((1, m)).astype(np.float32)}


# (M, K): one workgroup (8 rows), rows not a multiple of 8, many workgroups, two blocks of K per invocation
@pytest.mark.parametrize("m,k", [(8, 256), (100, 1024), (2048, 512), (256, 11008)])
@pytest.mark.parametrize("swap", [False, True])
def test_norm_fold_fragment(m, k, swap):
    build = _fragment(m, k, m + k, swap)
    feeds = [_feeds(m, k, s) for s in range(3)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, k1 = run_steps([VK], build, feeds, ON)
    base, k0 = run_steps([VK], build, feeds, OFF)
    if has_int8():
        assert "mul_mat_vec_rpn" in k1 and "mul_mat_vec_rpn" not in k0, (k1, k0)
    for step in range(3):
        for name, gv, bv, wv in zip(("norm", "norm * w", "product", "sum"), got[step], base[step], want[step]):
            assert gv.shape == wv.shape, name
            assert nmse(gv, bv) <= 1e-12, (name, step, nmse(gv, bv))
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))


def test_norm_fold_needs_the_norm_first():
    """A node reading the sum before the norm does (here the graph's order puts a scale of it first): the add
    stays with the norm (add+norm_mul_reg), and the results match the CPU plugin."""
    m, k = 64, 256
    build = _fragment(m, k, 3, extra_reader=True)
    feeds = [_feeds(m, k, 0)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, kernels = run_steps([VK], build, feeds, ON)
    assert "mul_mat_vec_rpn" not in kernels, kernels
    for gv, wv in zip(got[0], want[0]):
        assert nmse(gv, wv) < 5e-4


def test_norm_fold_model_logits(tmp_path):
    """A small synthetic LLaMA (2 layers) decodes with fold_norm=1 to fold_norm=0's logits within rounding, its o
    and down projections on mul_mat_vec_rpn and two dispatches fewer per layer in its decode plan."""
    check_model_on_off(tmp_path, ON, OFF, "mul_mat_vec_rpn", 2 * 2, max_nmse=1e-10)
