"""The prefill attention's newer tensor-core builds: flash_attn_cm2 over KV splits (device option fa_cm_wgs;
flash_attn_cm2s.comp's partial records merged by flash_attn.comp's MODE 2) and the one-pass flash_attn_cm3 (fa_cm=3;
its op-level cases are test_vulkan_kernels.py's test_prefill_flash_attn). Every case against float64 numpy or the
unsplit kernel, on lavapipe through the emulated builds and on a GPU through the tensor cores."""
import pytest

import pyggml as pg
from test_vulkan_kernels import VK, _has_coopmat, prefill_fa_case

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (the vulkan plugin found none)")


@pytest.mark.parametrize("fa", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("D, n_q, n_kv, wgs, split", [
    (64, 70, 200, 64, True),     # 3 query blocks x 4 heads x 2 splits of 2 chunks (4 chunks: at most 2 splits)
    (64, 256, 256, 64, True),    # a square causal prefill: the first query blocks' later splits wholly masked
    (32, 17, 1000, 64, True),    # 16 chunks over 4 x 4 splits, a partial last chunk; one query block
    (64, 40, 300, 64, True),     # every case has a row that sees nothing: each split's record M = -inf, L = 0, output 0
    (64, 70, 200, 8, False),     # 12 workgroups already: no split under 8
    (64, 40, 64, 64, False),     # one chunk: nothing to split
    (128, 40, 300, 64, True)])   # D 128 (the emulated build past lavapipe's shared memory: flash_attn.comp)
def test_prefill_flash_attn_split(fa, D, n_q, n_kv, wgs, split):
    """fa_cm_wgs asks for about that many workgroups: splits of at least two 64-key chunks where the query blocks
    and heads alone give fewer, each writing its rows' (max, sum, sum times output) records, then the merge;
    flash_attn_cm2 unsplit where they do not (or fa_split is off)."""
    if fa == "coopmat" and not _has_coopmat():
        pytest.skip("no cooperative matrices on this device (the emulated case covers the kernel's logic)")
    emu = "_emu" if fa == "cm_emulated" else ""
    for fa_split in ("on", "off"):
        e, kernels = prefill_fa_case(D, n_q, n_kv, "f16", {"fa": fa, "fa_split": fa_split, "fa_cm_wgs": str(wgs), "fa_cm": "2"})
        assert e <= 5e-4, f"NMSE {e:.3g} ({kernels})"
        if fa == "cm_emulated" and D > 64 and not kernels[0].startswith("flash_attn_cm"):
            continue   # (the emulated build's shared memory past lavapipe's 32 KiB)
        want = "flash_attn_cm2s" if split and fa_split == "on" else "flash_attn_cm2"
        assert kernels == [want + emu], (kernels, fa_split)
    if split:   # the one-pass kernel (fa_cm=3, the default) hands a split to flash_attn_cm2s too
        e, kernels = prefill_fa_case(D, n_q, n_kv, "f16", {"fa": fa, "fa_split": "on", "fa_cm_wgs": str(wgs)})
        assert e <= 5e-4 and kernels in (["flash_attn_cm2s" + emu], ["flash_attn"], ["flash_attn_dec"]), (e, kernels)


def test_fa_cm_wgs_option_values():
    dev = pg.get_device(VK)
    for bad in ("-1", "x", "1048577"):
        with pytest.raises(pg.PyggmlError, match="fa_cm_wgs"):
            dev.set_option("fa_cm_wgs", bad)


def test_fa_cm_split_model_prefill(tmp_path):
    """A synthetic LLaMA's 200-token prefill (micro-batches of 128 and 64 tokens over 4 chunks of keys, then 8) with
    the prefill attention over KV splits, then three decode steps: the logits of the unsplit kernel. matvec=3 keeps
    the mat-vecs' activations in floats (the int8 ones move a rounding step on a 1e-11 change: test_fa_dec_model_decode)
    and gemm=tiled the GEMMs' (the tensor-core GEMMs round them to f16: 8e-7 on the H100), so the attention kernels
    alone set the difference."""
    from test_vulkan_kernels import _model_logits
    from pyggml.conformance.cases import nmse
    import numpy as np
    opts, run = {"fa": "cm_emulated", "fa_split": "on", "matvec": "3", "gemm": "tiled", "fa_cm": "2"}, dict(n_ctx=256, prompt=range(1, 201))
    l0, k0 = _model_logits(tmp_path, {**opts, "fa_cm_wgs": "0"}, "flash_attn '", 14, **run)
    l1, k1 = _model_logits(tmp_path, {**opts, "fa_cm_wgs": "64"}, "flash_attn '", 14, **run)
    assert "flash_attn_cm2_emu" in k0 and "flash_attn_cm2s_emu" not in k0, k0
    assert k1.count("flash_attn_cm2s_emu") == k0.count("flash_attn_cm2_emu") >= 2, k1   # each prefill batch's layers
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-8


def test_fa_cm3_model_prefill(tmp_path):
    """The same prefill and decode with the one-pass kernel (fa_cm=3) for every prefill batch: the logits of the
    two-pass one (fa_cm=2), to the float rounding of another summation order."""
    from test_vulkan_kernels import _model_logits
    from pyggml.conformance.cases import nmse
    import numpy as np
    opts = {"fa": "cm_emulated", "fa_split": "on", "fa_cm_wgs": "0", "matvec": "3", "gemm": "tiled"}
    run = dict(n_ctx=256, prompt=range(1, 201))
    l2, k2 = _model_logits(tmp_path, {**opts, "fa_cm": "2"}, "flash_attn '", 14, **run)
    l3, k3 = _model_logits(tmp_path, {**opts, "fa_cm": "3"}, "flash_attn '", 14, **run)
    assert k3.count("flash_attn_cm3_emu") == k2.count("flash_attn_cm2_emu") >= 2, (k2, k3)
    for a, b in zip(l3, l2):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-8
