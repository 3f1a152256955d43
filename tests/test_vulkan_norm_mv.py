"""fuse_norm_mv=on (with matvec >= 6; auto, the default, where the row is at most 2048 wide: H200 at
38f1ca1 tg128 1b q4_0 701 against 673 t/s, 7b, rows of 4096, 237 against 253): a mat-vec that reads a fused norm's result
m = rms_norm(x [+ r]) * w (a layer's q/k/v or gate/up projection) recomputes m's column from x, r and
w (mul_mat_vec3.comp's MV_INT8 MV_WHOLE MV_NORM build, mul_mat_vec3n) instead of reading it, so it
runs beside the norm dispatch -- which still writes every node -- not one barrier stage after it. It
quantizes (x + r) * w and scales its dot by 1 / rms (int8 blocks are scale-free), so its results are
the unfused plan's to rounding (NMSE <= 1e-10; the int8 activations' own error is ~3e-5 against
float64 numpy, checked too). The fusion is made behind norm_mul_reg.comp's vec4 path (norm_wg on: GPUs
by default, forced here on lavapipe). Where the arena reused the norm's inputs before the mat-vec
runs, or the pattern does not hold, the mat-vec reads m as before."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _model_logits, _options_logged, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
EPS = 1e-5


def _graph(wdt, m, k, n, add, seed):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    ws, w64 = [], []
    for name in ("wq", "wk"):
        wf = rng.standard_normal((m, k)).astype(np.float32)
        blocks = pg.quantize(wf, wdt)
        ws.append(g.weight(name, blocks, type=wdt, shape=(m, k)))
        w64.append(pg.dequantize(blocks, wdt, (m, k)).astype(np.float64))
    gv = (1.0 + 0.1 * rng.standard_normal(k)).astype(np.float32)
    gw = g.weight("g", gv)
    x, r = g.input("x", (n, k)), g.input("r", (n, k))
    h = pg.add(x, r) if add else x
    mm = pg.mul(pg.rms_norm(h, EPS), gw)
    outs = [pg.mul_mat(ws[0], mm), pg.mul_mat(ws[1], mm), mm] + ([h] if add else [pg.scale(r, 1.0)])
    feeds = {"x": rng.standard_normal((n, k)).astype(np.float32), "r": rng.standard_normal((n, k)).astype(np.float32)}
    return outs, feeds, w64, gv.astype(np.float64)


def _run(wdt, m, k, n, add, options, seed=0):
    outs, feeds, w64, gv = _graph(wdt, m, k, n, add, seed)
    with _options_logged({"norm_wg": "on", "fuse_norm_mv": "on", "matvec_q4_K": "1", **options}, "mul_mat '") as kernels:
        got = pg.Scheduler([VK], poison=True).compute(outs, feeds)
    h = feeds["x"].astype(np.float64) + (feeds["r"].astype(np.float64) if add else 0.0)
    m64 = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + EPS) * gv
    return got, [m64 @ w64[0].T, m64 @ w64[1].T, m64], kernels


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0", "q4_K"])
@pytest.mark.parametrize("m,k,n", [(37, 256, 1), (259, 2048, 2), (101, 1536, 4), (64, 8192, 3)])
@pytest.mark.parametrize("add", [True, False])
def test_norm_mv(wdt, m, k, n, add):
    got, want, kernels = _run(wdt, m, k, n, add, {}, seed=m + k + n + add)
    assert kernels == ["mul_mat_vec3n"] * 2, kernels
    for gv, wv, tol in zip(got, want, (5e-4, 5e-4, 1e-10)):
        assert nmse(gv, wv) <= tol, nmse(gv, wv)
    ref, _, k0 = _run(wdt, m, k, n, add, {"fuse_norm_mv": "off"}, seed=m + k + n + add)
    assert "mul_mat_vec3n" not in k0, k0
    for a, b in zip(got, ref):   # the unfused plan's results to rounding (lavapipe: NMSE ~1e-14)
        assert nmse(a, b) <= 1e-10, nmse(a, b)
    assert np.array_equal(got[2], ref[2])   # the norm dispatch's own output


@pytest.mark.parametrize("options,k,n", [({"matvec": "3"}, 512, 1), ({}, 8448, 1), ({}, 512, 8), ({"norm_wg": "off"}, 512, 1),
                                         ({"fuse_norm_mv": "off"}, 512, 1)])
def test_norm_mv_needs_the_pattern(options, k, n):
    """The float mat-vec, a row wider than the register norm kernel's 8192, a prefill (N > 4), the
    subgroup-per-row norm kernel (lavapipe's default), the option off: the mat-vecs read m, still
    right."""
    got, want, kernels = _run("q8_0", 48, k, n, True, options, seed=k + n)
    assert "mul_mat_vec3n" not in kernels, kernels
    assert nmse(got[0], want[0]) <= 5e-4


def test_norm_mv_shares_the_norms_stage():
    """With the fusion the norm and both mat-vecs are one barrier stage: no barrier in the plan of
    norm -> two mat-vecs (the unfused plan has one)."""
    bars = {}
    for f in ("on", "off"):
        outs, feeds, _, _ = _graph("q4_0", 64, 512, 1, True, 3)
        with _options_logged({"norm_wg": "on", "fuse_norm_mv": f}, "plan for graph") as plans:
            pg.Scheduler([VK]).compute(outs[:2], feeds)
        bars[f] = int(plans[-1].split(" dispatches, ")[1].split(" ")[0])
    assert bars == {"on": 0, "off": 1}, bars


def test_norm_mv_refused_where_the_arena_reused_the_inputs(tmp_path, monkeypatch):
    """Packed tightest (reuse lag 0) the arena puts later nodes' outputs on a norm's dead inputs
    before every projection has run: those projections read m (fewer fusions), the logits the same
    to rounding."""
    import pyggml.scheduler
    l1, k1 = _model_logits(tmp_path, {"norm_wg": "on", "fuse_norm_mv": "on"}, "mul_mat '", 8)
    monkeypatch.setattr(pyggml.scheduler, "REUSE_LAG", 0)
    l0, k0 = _model_logits(tmp_path, {"norm_wg": "on", "fuse_norm_mv": "on"}, "mul_mat '", 8)
    assert 0 < k0.count("mul_mat_vec3n") < k1.count("mul_mat_vec3n"), (k0, k1)
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10, nmse(np.asarray(a), np.asarray(b))


def test_norm_mv_model_decode(tmp_path):
    """A synthetic LLaMA (q8_0): the logits of fuse_norm_mv=1 are those without to rounding; fused in the 4-token
    prefill and in decode: five projections per layer that read a norm (two layers) and the output
    projection behind the final norm, 11 per plan."""
    l1, k1 = _model_logits(tmp_path, {"norm_wg": "on", "fuse_norm_mv": "on"}, "mul_mat '", 9)
    l0, k0 = _model_logits(tmp_path, {"norm_wg": "on", "fuse_norm_mv": "off"}, "mul_mat '", 9)
    assert k1.count("mul_mat_vec3n") == 22 and "mul_mat_vec3n" not in k0, (k1, k0)
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10, nmse(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("k,fused", [(2048, True), (4096, False)])
def test_norm_mv_auto_by_row_width(k, fused):
    """auto (the default) fuses rows up to 2048 wide: every workgroup stages x, r and w, which on the
    H200 cost more than the barrier saved at 4096 (7b) and less at 2048 (1b)."""
    # (mv_q8 off: with it, the unfused reader at 4096 stages the norm's int8 copy, mul_mat_vec3q)
    got, want, kernels = _run("q4_0", 64, k, 1, True, {"fuse_norm_mv": "auto", "mv_q8": "0"}, seed=k)
    assert kernels == (["mul_mat_vec3n"] * 2 if fused else ["mul_mat_vec3w"] * 2), kernels
    assert nmse(got[0], want[0]) <= 5e-4
