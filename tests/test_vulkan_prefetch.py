"""prefetch_mb: a decode mat-vec's weights read into L2 in the stage before it by a dispatch that only reads
them (vk_prefetch.c, prefetch.comp). It changes no result: a synthetic LLaMA's logits are the same bytes with
and without it (and with the repacked copies of matvec_rp, which the prefetch then reads), the plans hold
prefetch dispatches, and everything stays clean under the validation layer's synchronization checks."""
import numpy as np
import pytest

import pyggml as pg
from test_vulkan_kernels import VALIDATING, VK, _compute, _decode_model, _rerun_under_validation, _validation_clean  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (every test ends clean)."""
    _rerun_under_validation(__file__)


def test_prefetch_single_graph():
    """x -> rms_norm * w -> two mat-vecs: the mat-vecs' stage follows the norm's, so one prefetch per weight
    joins the norm's stage (within the budget); the results are the same bytes."""
    rng = np.random.default_rng(1)
    k = 1024
    g = pg.Graph()
    x = g.input("x", (1, k))
    m = pg.mul(pg.rms_norm(x, 1e-6), g.weight("nw", rng.standard_normal(k).astype(np.float32)))
    w1 = g.weight("w1", pg.quantize(rng.standard_normal((1024, k)).astype(np.float32), "q4_0"), type="q4_0", shape=(1024, k))
    w2 = g.weight("w2", pg.quantize(rng.standard_normal((512, k)).astype(np.float32), "q8_0"), type="q8_0", shape=(512, k))
    ys = [pg.mul_mat(w1, m), pg.mul_mat(w2, m)]
    feeds = {"x": rng.standard_normal((1, k)).astype(np.float32)}
    ref, k0 = _compute(ys, feeds, {"fuse_norm_mv": "off"}, "prefetch")
    got, k1 = _compute(ys, feeds, {"fuse_norm_mv": "off", "prefetch_mb": "16"}, "prefetch")
    assert k0 == [] and k1 == ["2 prefetch dispatch(es), at most 16 MiB per stage"], (k0, k1)
    for a, b in zip(got, ref):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    # prefetch_mb=0 (the default): none
    got, k2 = _compute(ys, feeds, {"fuse_norm_mv": "off", "prefetch_mb": "0"}, "prefetch")
    assert k2 == []


@pytest.mark.parametrize("extra", [{}, {"matvec_rp": "1"}])
def test_prefetch_model_bytes(tmp_path, extra):
    """A small synthetic LLaMA's prefill and decode logits with prefetch_mb=32 are the same bytes as without."""
    run = _decode_model(tmp_path, "q4_0", 13)
    base = {"fuse_norm_mv": "off", **extra}
    ref, _ = run(base)
    got, _ = run({**base, "prefetch_mb": "32"})
    for step, (a, b) in enumerate(zip(got, ref)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"step {step}"
