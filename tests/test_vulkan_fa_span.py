"""fa_span=1: flash_attn_cm3 (the one-pass prefill attention) walks each 32-row query block's key chunks from the first
to the last one with an unmasked key, which fa_mask_span.comp finds once per plan and mask (vk_attn.c's vkp_fa_span).
The chunks outside hold -inf terms alone, so the result is fa_span=0's byte for byte: causal masks with the queries at
the end of the cache (prefill_fa_case), a sliding window (the first chunks closed too), masks of one plane per head, a
block that sees nothing; one pass for all of a model's layers; the whole file again under the validation layer. On
lavapipe through the emulated build, on a GPU through the tensor cores."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance import reference as R
from pyggml.conformance.cases import nmse
from _vulkan_rp import debug_records
from test_vulkan_kernels import VALIDATING, VK, _compute, _has_coopmat, _rerun_under_validation, prefill_fa_case
from test_vulkan_kernels import _validation_clean  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
FAS = ["cm_emulated", "coopmat"]


def _skip_without(fa):
    if fa == "coopmat" and not _has_coopmat():
        pytest.skip("no cooperative matrices on this device (the emulated case covers the kernel's logic)")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation)."""
    _rerun_under_validation(__file__)


@pytest.mark.parametrize("fa", FAS)
@pytest.mark.parametrize("D,n_q,n_kv", [(64, 70, 200), (64, 256, 256), (32, 17, 72), (64, 40, 100)])
def test_causal_cases(fa, D, n_q, n_kv):
    """prefill_fa_case's causal masks (a row that sees nothing, ALiBi, GQA, f32 and f16 masks, rows off 16 bytes):
    within float64 numpy's threshold, and the fa_mask_span pass in the kernels. (fa_cm_wgs=0 in every case here: on a
    GPU these few query blocks would otherwise take the KV split, flash_attn_cm2s, which fa_span leaves alone.)"""
    _skip_without(fa)
    e1, k1 = prefill_fa_case(D, n_q, n_kv, "f16", {"fa": fa, "fa_span": "1", "fa_cm_wgs": "0"})
    e0, k0 = prefill_fa_case(D, n_q, n_kv, "f16", {"fa": fa, "fa_span": "0", "fa_cm_wgs": "0"})
    assert e1 <= 5e-4 and e0 <= 5e-4, (e1, e0)
    assert e1 == e0, (e1, e0)   # (the same sums: only wholly masked chunks are left out)
    assert k1 == k0 and k1[0].startswith("flash_attn_cm3"), (k1, k0)


def _window_case(D, n_q, n_kv, window, planes, opts, seed=0):
    """A prefill attention whose query i (at position n_kv - n_q + i) sees keys (pos - window, pos], head h's mask plane
    shifted by 8 h keys where the mask has a plane per head (4 heads over 2 K/V heads); the output and float64 numpy's"""
    rng = np.random.default_rng(seed)
    H, Hk = 4, 2
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    pos = np.arange(n_kv - n_q, n_kv)
    keys = np.arange(n_kv)[None, :]
    mv = np.stack([np.where((keys <= pos[:, None] - 8 * h) & (keys > pos[:, None] - window - 8 * h), 0.0, -np.inf)
                   for h in range(planes)]).astype(np.float16)[None]
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D))
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64),
                       np.broadcast_to(mv, (1, H, n_q, n_kv)).astype(np.float64) if planes > 1 else mv.astype(np.float64),
                       1 / np.sqrt(D), 0.0, 0.0)
    ref = np.nan_to_num(ref)   # (rows that see nothing: the kernels write 0)
    with debug_records() as records:
        got, kernels = _compute(y, {"q": qv, "k": kv, "v": vv, "m": mv}, opts, "flash_attn '")
    return np.asarray(got), ref, kernels, records


@pytest.mark.parametrize("fa", FAS)
@pytest.mark.parametrize("planes", [1, 4])
def test_sliding_window(fa, planes):
    """A window of 100 keys over 400 (the first chunks of the later blocks closed as well as the last ones), one mask
    plane or one per head: fa_span=0's bytes, within numpy's threshold, one fa_mask_span pass."""
    _skip_without(fa)
    got1, ref, k1, r1 = _window_case(64, 96, 400, 100, planes, {"fa": fa, "fa_span": "1", "fa_cm_wgs": "0"})
    got0, _, k0, r0 = _window_case(64, 96, 400, 100, planes, {"fa": fa, "fa_span": "0", "fa_cm_wgs": "0"})
    assert k1 == k0 and k1[0].startswith("flash_attn_cm3"), (k1, k0)
    assert sum("fa_mask_span" in r for r in r1) == 1 and not any("fa_mask_span" in r for r in r0)
    assert np.array_equal(got1, got0)
    assert nmse(got1, ref) <= 5e-4


@pytest.mark.parametrize("fa", FAS)
def test_a_block_that_sees_nothing(fa):
    """Every key masked for the first 40 queries (two whole blocks and part of a third): their outputs 0, the rest
    as fa_span=0's."""
    _skip_without(fa)
    got1, ref, _, _ = _window_case(64, 96, 200, 100, 1, {"fa": fa, "fa_span": "1", "fa_cm_wgs": "0"}, seed=3)
    assert nmse(got1, ref) <= 5e-4


def test_one_pass_for_the_model(tmp_path):
    """A synthetic LLaMA's 40-token prefill and decode with fa_span=1: fa_span=0's logits byte for byte, and one
    fa_mask_span pass in the prefill plan (its two layers share the mask)."""
    from test_vulkan_kernels import _model_logits
    opts, run = {"fa": "cm_emulated", "gemm": "tiled", "matvec": "3"}, dict(n_ctx=64, prompt=range(1, 41))
    with debug_records() as r1:
        l1, k1 = _model_logits(tmp_path, {**opts, "fa_span": "1"}, "flash_attn '", 21, **run)
    l0, k0 = _model_logits(tmp_path, {**opts, "fa_span": "0"}, "flash_attn '", 21, **run)
    assert any(k.startswith("flash_attn_cm3") for k in k1), k1
    assert sum("fa_mask_span" in r for r in r1) == 1, [r for r in r1 if "fa_mask_span" in r]
    for a, b in zip(l1, l0):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_option_values():
    dev = pg.get_device(VK)
    for bad in ("2", "x"):
        with pytest.raises(pg.PyggmlError, match="fa_span"):
            dev.set_option("fa_span", bad)
