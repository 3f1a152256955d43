"""fold_nodes=1 (with fold_norm): the o / down mat-vec (mul_mat_vec_rpn) also writes the residual add's result, and the
norm's first fold-in reader (mul_mat_vec_rpg, _rpe) also writes the norm's result and its product with the weight, so
the add + norm dispatch is left out of the plan (mul_mat_vec_rp.comp's RP_NWR builds, vk_norm_in.c's fold_write).
Every node against the CPU plugin and against fold_nodes=0 over the fold shapes and weight types; one dispatch fewer
and the same barriers; the cases it must not take (a node reading the norm between it and its reader, the reader too
few invocations for the row, the norm's in-place product); a synthetic LLaMA's decode logits equal fold_nodes=0's
within rounding, with two dispatches per layer fewer; the whole file again under the validation layer."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import cpu_on_off, debug_records, decode_on_off, has_int8, run_steps, smallest_plan
from test_vulkan_kernels import VALIDATING, VK, _rerun_under_validation, _validation_clean  # noqa: F401
from test_vulkan_norm_fold import NAMES, _fragment, _feeds

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
BASE = {"matvec_rp": "1", "fold_norm": "1", "rp_norm_in": "off", "norm_wg": "on"}
ON = {**BASE, "fold_nodes": "1"}
OFF = {**BASE, "fold_nodes": "0"}
CPU = [d for d in pg.devices() if str(d).startswith("cpu")][0] if pg.devices() else None


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _took(records):
    return [r for r in records if "(fold_nodes)" in r]


# (M, K, F): 4 workgroups, many, K of two blocks per invocation, SmolLM2's width
@pytest.mark.parametrize("m,k,f", [(32, 256, 64), (2048, 512, 256), (256, 11008, 512), (576, 1024, 1536)])
@pytest.mark.parametrize("swap", [False, True])
def test_fold_nodes_fragment(m, k, f, swap):
    """Every node of the fragment against the CPU plugin; the mat-vecs and the add's sum bit for bit as fold_nodes=0's
    (the same arithmetic), the norm and its product within rounding of the norm dispatch's (the squares summed in another
    order); one dispatch fewer, as many barriers."""
    build = _fragment(m, k, f, m + k, swap=swap)
    feeds = [_feeds(m, k, s) for s in range(3)]
    want, (got, _, r1), (base, _, r0) = cpu_on_off(build, feeds, ON, OFF)
    if has_int8():
        assert len(_took(r1)) == 1 and not _took(r0), _took(r1)
        (n1, b1), (n0, b0) = smallest_plan(r1), smallest_plan(r0)
        assert n1 == n0 - 1 and b1 == b0, ((n1, b1), (n0, b0))
    for step in range(3):
        for name, gv, bv, wv in zip(NAMES, got[step], base[step], want[step]):
            assert gv.shape == wv.shape, name
            if name in ("norm", "norm * w"):   # (1 / rms from the squares summed in another order)
                assert nmse(gv, bv) < 1e-12, (name, step, nmse(gv, bv))
            else:   # the mat-vecs' own arithmetic, the add's sum
                assert np.array_equal(gv, bv), (name, step, nmse(gv, bv))
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))


@pytest.mark.parametrize("wdt,m,k,f", [("q4_1", 2048, 512, 256), ("q4_K", 2048, 512, 256), ("q6_K", 256, 4096, 768)])
def test_fold_nodes_other_readers(wdt, m, k, f):
    """Readers in q4_1, q4_K and q6_K write the norm's nodes too."""
    build = _fragment(m, k, f, 11, wdt=wdt)
    feeds = [_feeds(m, k, s) for s in range(2)]
    want, _ = run_steps([CPU], build, feeds)
    with debug_records() as r1:
        got, _ = run_steps([VK], build, feeds, ON)
    if has_int8():
        assert len(_took(r1)) == 1, r1
    for step in range(2):
        for name, gv, wv in zip(NAMES, got[step], want[step]):
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))


def _two_readers(m, k, f, seed, between=False):
    """x through wo (q4_0), + r, rms_norm, * nw, read by a q4_0 gate/up pair; `between`: a scale of the norm's product
    sits between the norm and the pair in the graph"""
    rng = np.random.default_rng(seed)
    wo = pg.quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_0")
    wg, wu = (pg.quantize(rng.standard_normal((f, m)).astype(np.float32), "q4_0") for _ in range(2))
    nw = (1.0 + 0.5 * rng.standard_normal(m)).astype(np.float32)

    def build():
        g = pg.Graph()
        x, r = g.input("x", (1, k), pg.f32), g.input("r", (1, m), pg.f32)
        y = pg.mul_mat(g.weight("wo", wo, type="q4_0", shape=(m, k)), x)
        a = pg.add(r, y)
        n = pg.rms_norm(a, 1e-5)
        h = pg.mul(n, g.weight("nw", nw))
        early = [pg.scale(h, 2.0)] if between else []
        gate = pg.mul_mat(g.weight("wg", wg, type="q4_0", shape=(f, m)), h)
        up = pg.mul_mat(g.weight("wu", wu, type="q4_0", shape=(f, m)), h)
        sw = pg.swiglu(gate, up)
        return early + [pg.scale(t, 1.0) for t in (n, h, y, a, gate, up, sw)]
    return build


def test_fold_nodes_not_past_a_reader():
    """A node reading the norm's product before its fold-in reader: the norm dispatch stays (it must have written the
    product first), and every result matches the CPU plugin; the same graph without that node is taken."""
    m, k, f = 256, 512, 256
    feeds = [_feeds(m, k, 0)]
    build = _two_readers(m, k, f, 3, between=True)
    want, _ = run_steps([CPU], build, feeds)
    with debug_records() as r1:
        got, _ = run_steps([VK], build, feeds, ON)
    with debug_records() as r2:
        run_steps([VK], _two_readers(m, k, f, 3), feeds, ON)
    assert not _took(r1), _took(r1)
    if has_int8():
        assert len(_took(r2)) == 1, r2
    for gv, wv in zip(got[0], want[0]):
        assert nmse(gv, wv) < 5e-4


def test_fold_nodes_option_off_is_the_default():
    """fold_nodes is 0 (on the H100 it was slower: the plugin's README): the defaults with fold_norm keep the norm
    dispatch of a fragment that fold_nodes=1 takes."""
    m, k, f = 2048, 512, 256
    build = _fragment(m, k, f, 4)
    feeds = [_feeds(m, k, 0)]
    with debug_records() as r1:
        run_steps([VK], build, feeds, ON)
    with debug_records() as r0:
        run_steps([VK], build, feeds, BASE)
    if has_int8():
        assert len(_took(r1)) == 1, r1
    assert not _took(r0), _took(r0)


def test_fold_nodes_model_logits(tmp_path):
    """A small synthetic LLaMA (2 layers) decodes with fold_nodes=1 to fold_nodes=0's logits within rounding. Of its add +
    norm dispatches, the three whose readers fold the norm in go (layer 0's ffn norm, layer 1's two; the last feeds the
    output layer, and layer 0's attention norm has no add), and the barriers stay."""
    (got, _, n_on), (ref, _, n_off) = decode_on_off(tmp_path, ON, OFF)
    for step, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), np.asarray(b)
        assert nmse(a, b) <= 1e-6, f"step {step}: NMSE {nmse(a, b):.3g}"
    if has_int8():
        assert n_on == (n_off[0] - 3, n_off[1]), (n_on, n_off)
