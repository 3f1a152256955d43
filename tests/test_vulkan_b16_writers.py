"""The dispatches that write a gemm_b16 GEMM's f16 activations themselves, in place of dequant.comp's conversion:
swiglu8.comp (device option swiglu8: a prefill swiglu of contiguous f32 tensors 8 elements an invocation, and with
swiglu8=2, the default, the down projection's copy beside its result, the f32 result only where something else
reads it) and the fused layer norm's norm_mul_reg_b16 (option norm_b16: the q/k/v and gate/up GEMMs' copy, its
rms_norm output only where read). On lavapipe through the emulated GEMM; on a GPU through the tensor cores."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import VK, _compute, _model_logits, _options_logged
from test_vulkan_gemm_sweep import _skip_without

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (the vulkan plugin found none)")


def _silu_mul(a, b):
    a64 = a.astype(np.float64)
    return a64 / (1.0 + np.exp(-a64)) * b.astype(np.float64)


@pytest.mark.parametrize("shape, offset, want", [((3, 70, 64), 0, "swiglu8"), ((37, 96), 0, "swiglu8"),
                                                 ((5, 60), 0, None),      # rows of 60: not whole groups of 8
                                                 ((9, 64), 1, None)])     # a starts 4 bytes into a row: not on 16
def test_swiglu8_values(shape, offset, want):
    """swiglu8=1 takes contiguous f32 operands whose rows are whole groups of 8 on 16-byte boundaries and gives
    elementwise.comp's values (swiglu8=0) bit for bit; other layouts stay on elementwise.comp."""
    rng = np.random.default_rng(5)
    av = (3 * rng.standard_normal(shape)).astype(np.float32)
    bv = rng.standard_normal(shape).astype(np.float32)
    outs = {}
    for opt in ("0", "1"):
        g = pg.Graph()
        if offset:
            wide = np.zeros(shape[:-1] + (shape[-1] + offset,), np.float32)
            wide[..., offset:] = av
            ain = g.input("aw", wide.shape)
            a = pg.view(ain, shape, offset=4 * offset, strides=(4 * (shape[-1] + offset),) + (4,))
            feeds = {"aw": wide, "b": bv}
        else:
            a = g.input("a", shape)
            feeds = {"a": av, "b": bv}
        b = g.input("b", shape)
        out, kernels = _compute(pg.swiglu(a, b), feeds, {"swiglu8": opt}, "swiglu8 '")
        outs[opt] = np.asarray(out)
        if opt == "1":
            assert kernels == ([want] if want else []), kernels
        else:
            assert kernels == [], kernels
    assert nmse(outs["1"], _silu_mul(av, bv)) <= 1e-12
    assert np.array_equal(outs["1"].view(np.uint32), outs["0"].view(np.uint32))


def test_swiglu8_b16_model_prefill(tmp_path):
    """A synthetic LLaMA's 40-token prefill with gemm_b16=1: swiglu8=2 writes the down projections' f16
    activations beside its result (no conversion dispatch for them, and the f32 result, which nothing else reads,
    not written: the plan poisons what it does not write) and gives swiglu8=0's logits bit for bit (the same f16
    bytes), prefill and decode."""
    opts = {"gemm": "cm_emulated", "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "fa": "scalar", "gemm_dq": "0",
            "gemm_b16": "1"}
    l0, k0 = _model_logits(tmp_path, {**opts, "swiglu8": "0"}, "swiglu8 '", 13, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    l2, k2 = _model_logits(tmp_path, {**opts, "swiglu8": "2"}, "swiglu8 '", 13, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    assert not [k for k in k0 if k.startswith("swiglu8")], k0
    assert k2.count("swiglu8_b16") == 2, k2   # (the decode's swiglu is fused into its mat-vecs)   # one per layer, in the prefill plan
    for a, b in zip(l2, l0):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_swiglu8_b16_result_read(gemm):
    """The swiglu's f32 result is written too where the graph returns it, and the GEMM reads the f16 copy:
    y = W sw and sw itself against float64 numpy; one dispatch fewer than with swiglu8=1 (its conversion)."""
    _skip_without(gemm)
    rng = np.random.default_rng(11)
    g = pg.Graph()
    blocks = pg.quantize(rng.standard_normal((96, 128)).astype(np.float32), "q4_0")
    w = g.weight("w", blocks, type="q4_0", shape=(96, 128))
    w64 = np.asarray(pg.dequantize(blocks, "q4_0", (96, 128)), np.float64)
    av = rng.standard_normal((40, 128)).astype(np.float32)
    bv = rng.standard_normal((40, 128)).astype(np.float32)
    a, b = g.input("a", (40, 128)), g.input("b", (40, 128))
    sw = pg.swiglu(a, b)
    y = pg.mul_mat(w, sw)
    res = {}
    for opt in ("1", "2"):
        opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "gemm_dq": "0", "gemm_b16": "1", "swiglu8": opt}
        out, lines = _compute_plans([y, sw], {"a": av, "b": bv}, opts)
        res[opt] = (out, lines)
    ref_sw = _silu_mul(av, bv)
    for opt, ((yo, swo), lines) in res.items():
        assert nmse(np.asarray(swo), ref_sw) <= 1e-12, opt
        assert nmse(np.asarray(yo), ref_sw @ w64.T) <= 5e-4, opt
    kern2 = [m for m in res["2"][1] if "swiglu8 '" in m and m.endswith("swiglu8_b16")]
    assert kern2 and kern2[0].endswith("its f32 result too): swiglu8_b16"), kern2
    d1 = int(next(m for m in res["1"][1] if "plan for graph" in m).rsplit(": ", 1)[1].split()[0])
    d2 = int(next(m for m in res["2"][1] if "plan for graph" in m).rsplit(": ", 1)[1].split()[0])
    assert d2 == d1 - 1, (d1, d2)


def test_norm_b16_model_prefill(tmp_path):
    """A synthetic LLaMA's 40-token prefill with gemm_b16=1 on the register norms (norm_wg=on, norm_v=2): norm_b16=1
    writes the q/k/v and gate/up GEMMs' f16 activations from each layer's two norms (no conversion dispatch for
    them; their rms_norm outputs, which only the fused mul reads, not written: the plan poisons what it does not
    write) and gives norm_b16=0's logits bit for bit (the same f16 bytes), prefill and decode."""
    opts = {"gemm": "cm_emulated", "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "fa": "scalar", "gemm_dq": "0",
            "gemm_b16": "1", "norm_wg": "on", "norm_v": "2"}
    l0, k0 = _model_logits(tmp_path, {**opts, "norm_b16": "0"}, "rms_norm '", 15, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    l1, k1 = _model_logits(tmp_path, {**opts, "norm_b16": "1"}, "rms_norm '", 15, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    assert "norm_mul_reg_b16" not in k0, k0
    assert k1.count("norm_mul_reg_b16") == 4, k1   # two norms a layer, two layers, in the prefill plan
    for a, b in zip(l1, l0):
        assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("add", [False, True])
def test_norm_b16_outputs_read(gemm, add):
    """rms_norm(x [+ r]) * w feeding two GEMMs (q and k of one input): with norm_b16 the norm dispatch writes their
    f16 copy, one dispatch fewer than with norm_b16=0; the norm's own output, returned by the graph, is written
    too; every result against float64 numpy."""
    _skip_without(gemm)
    rng = np.random.default_rng(21 + add)
    g = pg.Graph()
    ws = []
    for i in range(2):
        blocks = pg.quantize(rng.standard_normal((64, 128)).astype(np.float32), "q4_0")
        ws.append((g.weight(f"w{i}", blocks, type="q4_0", shape=(64, 128)), np.asarray(pg.dequantize(blocks, "q4_0", (64, 128)), np.float64)))
    xv = rng.standard_normal((40, 128)).astype(np.float32)
    rv = rng.standard_normal((40, 128)).astype(np.float32)
    nw = (1 + 0.1 * rng.standard_normal(128)).astype(np.float32)
    x, r = g.input("x", (40, 128)), g.input("r", (40, 128))
    wn = g.weight("nw", nw)
    s = pg.add(x, r) if add else x
    nrm = pg.rms_norm(s, 1e-5)
    h = pg.mul(nrm, wn)
    ys = [pg.mul_mat(w, h) for w, _ in ws]
    res = {}
    for opt in ("0", "1"):
        opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "gemm_dq": "0", "gemm_b16": "1",
                "norm_wg": "on", "norm_v": "2", "norm_b16": opt}
        res[opt] = _compute_plans(ys + [nrm], {"x": xv, "r": rv} if add else {"x": xv}, opts)
    s64 = xv.astype(np.float64) + (rv if add else 0)
    n64 = s64 / np.sqrt(np.mean(s64 * s64, axis=1, keepdims=True) + 1e-5)
    for opt, (outs, lines) in res.items():
        assert nmse(np.asarray(outs[2]), n64) <= 1e-10, opt
        for (_, w64), y in zip(ws, outs[:2]):
            assert nmse(np.asarray(y), (n64 * nw) @ w64.T) <= 5e-4, opt
    k1 = [m for m in res["1"][1] if "rms_norm '" in m and m.endswith("norm_mul_reg_b16")]
    assert len(k1) == 1 and "its own output too" in k1[0], k1
    d = [int(next(m for m in res[o][1] if "plan for graph" in m).rsplit(": ", 1)[1].split()[0]) for o in ("0", "1")]
    assert d[1] == d[0] - 1, d


def _compute_plans(outs, feeds, options):
    """outs on VK with `options`; returns (results, every debug line the plugin logged)."""
    from _vulkan_rp import debug_records
    with debug_records() as lines, _options_logged(options, "\0"):
        out = pg.Scheduler([VK], poison=True).compute(outs, feeds)
    return out, list(lines)
