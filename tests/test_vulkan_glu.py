"""fuse_glu=1: a = mul_mat(W_a, x), b = mul_mat(W_b, x) and swiglu(a, b) (a model's gate, up and their
swiglu) as one dispatch (mul_mat_vec3.comp's MV_GLU build, mul_mat_vec3g), against float64 numpy on
the dequantized weights: q4_0 and q8_0, K with one and several chunks, M not a multiple of the rows
per workgroup, N up to 4, a and b still written (read here by other nodes) or not read; where the
pattern does not hold (swiglu(b, a), a prefill) the nodes stay apart. A synthetic LLaMA decodes to the
same logits with it."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _model_logits, _options_logged, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def _quant(g, rng, name, wdt, shape):
    wf = rng.standard_normal(shape).astype(np.float32)
    blocks = pg.quantize(wf, wdt)
    return g.weight(name, blocks, type=wdt, shape=shape), pg.dequantize(blocks, wdt, shape).astype(np.float64)


def _silu(v):
    return v / (1.0 + np.exp(-v))


def _run(wdt, m, k, n, rows="2", outputs="all", order="ab", seed=0):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    wa, wa64 = _quant(g, rng, "wa", wdt, (m, k))
    wb, wb64 = _quant(g, rng, "wb", wdt, (m, k))
    xv = rng.standard_normal((n, k)).astype(np.float32)
    x = g.input("x", xv.shape)
    a, b = pg.mul_mat(wa, x), pg.mul_mat(wb, x)
    sw = pg.swiglu(a, b) if order == "ab" else pg.swiglu(b, a)
    # x read after the swiglu keeps the allocator from putting the swiglu's output on it (a fused
    # dispatch still reads x in some workgroups while others write: refused, outputs="swiglu")
    keep_x = [pg.scale(x, 1.0)] if outputs != "swiglu" else []
    outs = [sw] + ([pg.scale(a, 1.0), pg.scale(b, 1.0)] if outputs == "all" else []) + keep_x
    with _options_logged({"fuse_glu": "1", "matvec_rows": rows}, "swiglu '") as kernels:
        got = pg.Scheduler([VK], poison=True).compute(outs, {"x": xv})
    got = got if isinstance(got, list) else [got]
    ra, rb = xv.astype(np.float64) @ wa64.T, xv.astype(np.float64) @ wb64.T
    want = [_silu(ra) * rb if order == "ab" else _silu(rb) * ra] + ([ra, rb] if outputs == "all" else []) + \
        ([xv] if keep_x else [])
    return [nmse(gv, wv) for gv, wv in zip(got, want)], kernels


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("m,k,n,rows", [(37, 256, 1, "2"), (259, 4096, 2, "4"), (101, 1536, 4, "1"), (1000, 2816, 3, "2")])
@pytest.mark.parametrize("outputs", ["all", "sw_x"])
def test_glu(wdt, m, k, n, rows, outputs):
    errs, kernels = _run(wdt, m, k, n, rows, outputs, seed=m + k + n)
    assert kernels == ["mul_mat_vec3g"], kernels
    assert max(errs) <= 5e-4, errs


def test_glu_refused_where_swiglu_lands_on_x(monkeypatch):
    """Nothing reads x after the swiglu, so an arena packed tightest (reuse lag 0: what the host CPU
    gets; other devices wait two steps) puts the swiglu's output on x's bytes: one dispatch would
    read x in some workgroups after others wrote it there, so the nodes stay apart."""
    import pyggml.scheduler
    monkeypatch.setattr(pyggml.scheduler, "REUSE_LAG", 0)
    errs, kernels = _run("q4_0", 64, 512, 1, outputs="swiglu", seed=3)
    assert kernels == [], kernels
    assert max(errs) <= 5e-4, errs


@pytest.mark.parametrize("order,n", [("ba", 1), ("ab", 8)])
def test_glu_needs_the_pattern(order, n):
    errs, kernels = _run("q8_0", 64, 512, n, order=order, seed=7)
    assert kernels == [], kernels
    assert max(errs) <= 5e-4, errs


def test_glu_model_decode(tmp_path):
    """A synthetic LLaMA (q8_0; K multiples of 256) decodes to the same logits with fuse_glu=1 as with
    the float mat-vec it builds on (matvec=3; the default 6 quantizes activations to int8)."""
    l1, k1 = _model_logits(tmp_path, {"fuse_glu": "1", "matvec": "3"}, "swiglu '", 5)
    l0, k0 = _model_logits(tmp_path, {"fuse_glu": "0", "matvec": "3"}, "swiglu '", 5)
    assert k1.count("mul_mat_vec3g") >= 2 and not k0, (k1, k0)   # both layers' decode
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10
