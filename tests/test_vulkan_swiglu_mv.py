"""fuse_swiglu=1 (with matvec >= 6; off by default: slower on the H200 at 94b8fd9): sw = swiglu(a, b) and y = mul_mat(W, sw) (a model's
feed-forward down projection) as one dispatch (mul_mat_vec3.comp's MV_INT8 MV_WHOLE MV_SWIGLU build,
mul_mat_vec3s): the mat-vec computes silu(a) * b while it quantizes its activation row and its first
row group writes sw too. The same float operations as the elementwise swiglu, so y and sw are the
bytes of the two dispatches they replace; against float64 numpy on the dequantized weights: q4_0
and q8_0, K of one and several units, M not a multiple of the rows per workgroup, N up to 4. Where the
pattern does not hold the nodes stay apart; a synthetic LLaMA decodes to the same logits with one
barrier stage less per layer."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _model_logits, _options_logged, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def _silu(v):
    return v / (1.0 + np.exp(-v))


def _graph(wdt, m, k, n, seed, keep=True):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    wf = rng.standard_normal((m, k)).astype(np.float32)
    blocks = pg.quantize(wf, wdt)
    w = g.weight("w", blocks, type=wdt, shape=(m, k))
    a, b = g.input("a", (n, k)), g.input("b", (n, k))
    sw = pg.swiglu(a, b)
    outs = [pg.mul_mat(w, sw), sw]
    if keep:   # a and b read afterwards: the allocator keeps sw off their bytes
        outs += [pg.add(a, b)]
    feeds = {"a": rng.standard_normal((n, k)).astype(np.float32), "b": rng.standard_normal((n, k)).astype(np.float32)}
    return outs, feeds, pg.dequantize(blocks, wdt, (m, k)).astype(np.float64)


def _run(wdt, m, k, n, options, seed=0):
    outs, feeds, w64 = _graph(wdt, m, k, n, seed)
    with _options_logged({"fuse_swiglu": "1", "matvec_q4_K": "1", **options}, "swiglu '") as kernels:
        got = pg.Scheduler([VK], poison=True).compute(outs, feeds)
    return got, feeds, w64, kernels


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0", "q4_K"])
@pytest.mark.parametrize("m,k,n", [(37, 256, 1), (259, 4096, 2), (101, 1536, 4), (1000, 2816, 3)])
def test_swiglu_mv(wdt, m, k, n):
    got, feeds, w64, kernels = _run(wdt, m, k, n, {}, seed=m + k + n)
    assert kernels == ["mul_mat_vec3s"], kernels
    a, b = feeds["a"].astype(np.float64), feeds["b"].astype(np.float64)
    sw = _silu(a) * b
    assert nmse(got[1], sw) <= 1e-12, nmse(got[1], sw)
    assert nmse(got[0], sw @ w64.T) <= 5e-4, nmse(got[0], sw @ w64.T)
    ref, _, _, k0 = _run(wdt, m, k, n, {"fuse_swiglu": "0"}, seed=m + k + n)
    assert k0 == [], k0
    for x, y in zip(got, ref):   # the bytes of the two dispatches it replaces
        assert np.array_equal(x, y)


@pytest.mark.parametrize("options,k,n", [({"matvec": "3"}, 512, 1), ({}, 320, 1), ({}, 512, 8), ({"fuse_swiglu": "0"}, 512, 1)])
def test_swiglu_mv_needs_the_pattern(options, k, n):
    """The float mat-vec (matvec=3), K not a multiple of 256, a prefill (N > 4), the option off (its
    default): apart, still right."""
    got, feeds, w64, kernels = _run("q8_0", 48, k, n, options, seed=k + n)
    assert kernels == [], kernels
    sw = _silu(feeds["a"].astype(np.float64)) * feeds["b"].astype(np.float64)
    assert nmse(got[0], sw @ w64.T) <= 5e-4


def test_swiglu_mv_option_off_and_back():
    dev = pg.get_device(VK)
    with pytest.raises(pg.PyggmlError, match="fuse_swiglu"):
        dev.set_option("fuse_swiglu", "2")


def test_swiglu_mv_model_decode(tmp_path):
    """A synthetic LLaMA (q8_0) gives the same logits with fuse_swiglu=1 as without, prefill (4
    tokens: N <= 4 fuses too) and decode, each layer's down projection fused; each plan has one
    barrier per layer less."""
    l1, k1 = _model_logits(tmp_path, {"fuse_swiglu": "1"}, "swiglu '", 6)
    l0, k0 = _model_logits(tmp_path, {"fuse_swiglu": "0"}, "swiglu '", 6)
    assert k1.count("mul_mat_vec3s") >= 4 and not k0, (k1, k0)   # two layers, prefill and decode
    for a, b in zip(l1, l0):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    b1 = [int(p.split(" dispatches, ")[1].split(" ")[0]) for p in _plans(tmp_path, "1")]
    b0 = [int(p.split(" dispatches, ")[1].split(" ")[0]) for p in _plans(tmp_path, "0")]
    assert len(b1) == len(b0) and all(x == y - 2 for x, y in zip(b1, b0)), (b1, b0)


def _plans(tmp_path, fuse):
    import pyggml.models as models
    path = str(tmp_path / "m-6-q8_0.gguf")
    with _options_logged({"fuse_swiglu": fuse}, "plan for graph") as plans:
        m = models.load(path, devices=[VK, "cpu"], n_ctx=32, progress=False)
        try:
            m.prefill([1, 2, 3, 4])
            m.decode(7)
        finally:
            m.close()
    return plans
