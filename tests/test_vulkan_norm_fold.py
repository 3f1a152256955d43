"""fold_norm=1: a layer's o and down projections (a decode mat-vec on matvec_rp whose result the graph adds to the
residual and normalizes next) as mul_mat_vec_rpn, which also writes the int8 blocks of (r + y) * w with a scale per 8
and the sums of squares per 8 into the plan's scratch; the norm's q4_0 / q4_1 readers (mul_mat_vec_rpg, _rpe) read
that region ("fold-in"), scale by 1 / rms themselves, and run beside the add + norm dispatch, a barrier stage fewer
(vk_mv_epi.c, vk_norm_in.c). Every node's result against the CPU plugin and against fold_norm=0, over shapes with one
and many workgroups, two blocks of K per invocation, both operand orders of the add, the readers' weight types (q4_0,
q4_1, q4_K, q6_K), three runs
of one plan; what does not fit stays apart; a synthetic LLaMA decodes to fold_norm=0's logits within rounding with
three barriers fewer."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_model_on_off, cpu_on_off, has_int8, run_steps, smallest_plan
from test_vulkan_kernels import VALIDATING, VK, _rerun_under_validation, _validation_clean  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
# (fold_nodes=0: the add + norm dispatch stays, as these counts expect; test_vulkan_fold_nodes.py takes it out.
# rp_norm_in=off: on the GPU its auto takes the 512-wide test model's q/k/v and gate/up where fold_norm=0, which changes
# that plan; lavapipe keeps it off. norm_wg=on: the register norm, whose readers take the copy, which GPUs run and lavapipe not)
ON = {"matvec_rp": "1", "fold_norm": "1", "rp_norm_in": "off", "norm_wg": "on", "fold_nodes": "0"}
OFF = {"matvec_rp": "1", "fold_norm": "0", "rp_norm_in": "off", "norm_wg": "on", "fold_nodes": "0"}
NAMES = ("norm", "norm * w", "product", "sum", "gate", "up", "swiglu")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _fragment(m, k, f, seed, wdt="q4_0", swap=False, extra_reader=False):
    """x (k) through wo (m x k, q4_0), plus r, rms_norm, times nw; then gate/up (f x m, wdt) and their swiglu"""
    rng = np.random.default_rng(seed)
    wo = pg.quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_0")
    wg, wu = (rng.standard_normal((f, m)).astype(np.float32) for _ in range(2))
    if wdt != "f16":
        wg, wu = pg.quantize(wg, wdt), pg.quantize(wu, wdt)
    nw = (1.0 + 0.5 * rng.standard_normal(m)).astype(np.float32)

    def build():
        g = pg.Graph()
        x, r = g.input("x", (1, k), pg.f32), g.input("r", (1, m), pg.f32)
        y = pg.mul_mat(g.weight("wo", wo, type="q4_0", shape=(m, k)), x)
        a = pg.add(y, r) if swap else pg.add(r, y)
        outs = [pg.scale(y, 1.0), pg.scale(a, 1.0)] if extra_reader else []
        n = pg.rms_norm(a, 1e-5)
        h = pg.mul(n, g.weight("nw", nw))
        gate = pg.mul_mat(g.weight("wg", wg.astype(np.float16)) if wdt == "f16" else g.weight("wg", wg, type=wdt, shape=(f, m)), h)
        up = pg.mul_mat(g.weight("wu", wu.astype(np.float16)) if wdt == "f16" else g.weight("wu", wu, type=wdt, shape=(f, m)), h)
        sw = pg.swiglu(gate, up)
        return outs + [pg.scale(t, 1.0) for t in (n, h, y, a, gate, up, sw)]
    return build


def _feeds(m, k, step):
    rng = np.random.default_rng(50 + step)
    return {"x": rng.standard_normal((1, k)).astype(np.float32), "r": rng.standard_normal((1, m)).astype(np.float32)}


# (M, K, F): one unit of 32 (4 workgroups), many workgroups, K of two blocks per invocation, SmolLM2's width
@pytest.mark.parametrize("m,k,f", [(32, 256, 64), (2048, 512, 256), (256, 11008, 512), (576, 1024, 1536)])
@pytest.mark.parametrize("swap", [False, True])
def test_norm_fold_fragment(m, k, f, swap):
    build = _fragment(m, k, f, m + k, swap=swap)
    feeds = [_feeds(m, k, s) for s in range(3)]
    want, (got, k1, r1), (base, k0, r0) = cpu_on_off(build, feeds, ON, OFF)
    if has_int8():
        assert "mul_mat_vec_rpn" in k1 and "mul_mat_vec_rpg fold-in" in k1, k1
        assert "mul_mat_vec_rpn" not in k0 and "mul_mat_vec_rpg fold-in" not in k0, k0
        (n1, b1), (n0, b0) = smallest_plan(r1), smallest_plan(r0)
        assert n1 == n0 and b1 == b0 - 1, ((n1, b1), (n0, b0))
    for step in range(3):
        for name, gv, bv, wv in zip(NAMES, got[step], base[step], want[step]):
            assert gv.shape == wv.shape, name
            if name in ("norm", "norm * w", "product", "sum"):   # the same dispatches' arithmetic as without
                assert np.array_equal(gv, bv), (name, step, nmse(gv, bv))
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))


@pytest.mark.parametrize("wdt,m,k,f", [("q4_1", 2048, 512, 256), ("q4_1", 576, 1024, 1536), ("q4_K", 2048, 512, 256),
                                       ("q4_K", 256, 11008, 512), ("q6_K", 2048, 512, 256), ("q6_K", 256, 4096, 768)])
def test_norm_fold_other_readers(wdt, m, k, f):
    """gate and up in q4_1 (w = d q + m: the sums of the quants enter), q4_K (16-element halves, two scales of the copy
    each) and q6_K read the copy too."""
    build = _fragment(m, k, f, 7, wdt=wdt)
    feeds = [_feeds(m, k, s) for s in range(2)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, k1 = run_steps([VK], build, feeds, ON)
    if has_int8():
        assert "mul_mat_vec_rpg fold-in" in k1, k1
    for step in range(2):
        for name, gv, wv in zip(NAMES, got[step], want[step]):
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))


@pytest.mark.parametrize("m", [48, 64])
def test_norm_fold_readers_it_does_not_serve(m):
    """M = 48 (not a multiple of 32): the mat-vec stays mul_mat_vec_rp; M = 64 with f16 gate and up: it writes the copy,
    which nothing reads (the readers read the norm's result). Both against the CPU plugin."""
    k, f = 256, 64
    build = _fragment(m, k, f, 5, wdt="f16")
    feeds = [_feeds(m, k, 0)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, kernels = run_steps([VK], build, feeds, ON)
    assert ("mul_mat_vec_rpn" in kernels) == (m == 64 and has_int8()) and not any("fold-in" in k for k in kernels), kernels
    for name, gv, wv in zip(NAMES, got[0], want[0]):
        assert nmse(gv, wv) < 5e-4, name


def test_norm_fold_needs_the_register_norm():
    """norm_wg=off (lavapipe's default: the norm on norm_mul.comp, whose result the readers read): the o projection
    stays mul_mat_vec_rp, since nothing would read what mul_mat_vec_rpn writes."""
    m, k, f = 64, 256, 64
    build = _fragment(m, k, f, 9)
    feeds = [_feeds(m, k, 0)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, kernels = run_steps([VK], build, feeds, {**ON, "norm_wg": "off"})
    assert "mul_mat_vec_rpn" not in kernels and not any("fold-in" in k for k in kernels), kernels
    for name, gv, wv in zip(NAMES, got[0], want[0]):
        assert nmse(gv, wv) < 5e-4, name


def test_norm_fold_needs_the_add_first():
    """A node reading the product before the add does (here the graph's order puts a scale of it first): the mat-vec
    stays mul_mat_vec_rp, and the results match the CPU plugin."""
    m, k, f = 64, 256, 64
    build = _fragment(m, k, f, 3, extra_reader=True)
    feeds = [_feeds(m, k, 0)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, kernels = run_steps([VK], build, feeds, ON)
    assert "mul_mat_vec_rpn" not in kernels, kernels
    for gv, wv in zip(got[0], want[0]):
        assert nmse(gv, wv) < 5e-4


def test_norm_fold_model_logits(tmp_path):
    """A small synthetic LLaMA (2 layers) decodes with fold_norm=1 to fold_norm=0's logits within the int8 mat-vecs'
    rounding: its o and down projections on mul_mat_vec_rpn, as many dispatches, and three barriers fewer in its decode
    plan (the last down projection's norm feeds the output layer, which reads the norm's result)."""
    check_model_on_off(tmp_path, ON, OFF, "mul_mat_vec_rpn", 0, max_nmse=5e-4, fewer_barriers=3)
