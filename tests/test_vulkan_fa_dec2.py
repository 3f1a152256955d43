"""fa_v=4: decode attention on flash_attn_dec2.comp (vk_attn.c's vkp_fa_dec2_setup): a workgroup per query row, KV
head and split, the query heads that share the KV head together, D / 8 lanes per K/V row summing their dot products by
subgroup shuffles, each lane its own online softmax, the splits merged by the last workgroup of a row group. Against
float64 over grouped-query heads (1, 2, 4 and 8 per KV head), ALiBi, softcap, f16 and f32 masks, masked cells holding
NaN (never read), several query rows (one that sees a single key), splits from the least (2) to the most (256), three
runs of one plan (the row counters start at 0 each time); where its layout does not hold the node keeps fa_v=3's
kernels; fa_v=0 (the default) takes it where each query head has a KV head of its own; a synthetic LLaMA
decodes to flash_attn.comp's logits."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import (VALIDATING, VK, _model_logits, _options_logged, _rerun_under_validation,  # noqa: F401
                                 _validation_clean, fa_decode_case)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _subgroup():
    """The device's subgroup width where it can be told from its name (llvmpipe: its vector bits / 32), else 32."""
    desc = pg.get_device(VK).description
    if "llvmpipe" in desc and " bits)" in desc:
        return int(desc.rsplit(" bits)", 1)[0].rsplit(" ", 1)[1]) // 32
    return 32


def _attend(D, H, Hk, n_q, n_kv, softcap, mtype, options, seed, kv_type="f16", mask_heads=1):
    """test_vulkan_kernels.fa_decode_case's graph with `options`, three runs of one plan; returns (the runs, the float64
    reference, the kernels the log named)."""
    y, feeds, ref = fa_decode_case(D, H, Hk, n_q, n_kv, softcap, kv_type, mtype, mask_heads, seed)
    with _options_logged({"fa_split": "on", **options}, "flash_attn '") as kernels:
        sched = pg.Scheduler([VK], poison=True)
        runs = [sched.compute(y, feeds) for _ in range(3)]
    pg.get_device(VK).set_option("fa_dec_wgs", "512")
    return runs, ref, kernels


@pytest.mark.parametrize("D,H,Hk,n_q,n_kv,softcap,mtype,wgs", [
    (64, 8, 2, 1, 320, 0.0, "f16", "512"),      # 4 heads per KV head: 10 splits of 32 cells (at least 32)
    (64, 4, 4, 1, 40000, 0.0, "f16", "512"),    # one head per KV head, 128 splits of 313 cells
    (64, 4, 4, 1, 40000, 0.0, "f16", "65536"),  # the most splits: 255 of 157 cells (at most 256)
    (32, 4, 1, 3, 200, 30.0, "f16", "512"),     # softcap, three query rows (one sees one key), 4 lanes per row
    (32, 16, 2, 1, 700, 0.0, "f32", "512"),     # 8 heads per KV head, an f32 mask
    (64, 2, 2, 2, 130, 0.0, "f16", "16"),       # the least: 2 splits
    (64, 2, 1, 1, 2200, 0.0, "f16", "100"),     # 2 heads per KV head: 69 splits of 32 cells, not 100 of 22
    (128, 8, 2, 1, 2200, 0.0, "f16", "512"),    # 16 lanes per row (on narrower subgroups: flash_attn_dec)
    (256, 2, 2, 1, 300, 0.0, "f16", "512"),     # 32 lanes per row (on narrower subgroups: flash_attn_dec)
])
def test_fa_dec2(D, H, Hk, n_q, n_kv, softcap, mtype, wgs):
    runs, ref, kernels = _attend(D, H, Hk, n_q, n_kv, softcap, mtype, {"fa_v": "4", "fa_dec_wgs": wgs}, D + n_kv + n_q + H)
    want = "flash_attn_dec2" if D // 8 <= _subgroup() else "flash_attn_dec"
    assert set(kernels) == {want}, kernels
    for got in runs:
        assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


@pytest.mark.parametrize("case,kernel", [
    ("mask_per_head", "flash_attn_dec"),        # a mask plane per head: flash_attn_dec (fa_v=3's kernel)
    ("f32_kv", "flash_attn"),                   # f32 K/V: not its layout, nor flash_attn_dec's
    ("d48", "flash_attn"),                      # D = 48: not a power of two (nor flash_attn_dec's Dv)
])
def test_fa_dec2_falls_back(case, kernel):
    """Nodes outside flash_attn_dec2's layout keep fa_v=3's choice, with the same results."""
    args = dict(D=64, H=4, Hk=2, n_q=1, n_kv=300, softcap=0.0, mtype="f16")
    extra = {}
    if case == "mask_per_head":
        extra["mask_heads"] = 4
    elif case == "f32_kv":
        extra["kv_type"] = "f32"
    else:
        args["D"] = 48
    runs, ref, kernels = _attend(**args, options={"fa_v": "4"}, seed=11, **extra)
    assert set(kernels) == {kernel}, kernels
    for got in runs:
        assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


def test_fa_dec2_model_decode(tmp_path):
    """A synthetic LLaMA (4 heads over 2 KV heads, D 64) decodes with fa_v=4 (every layer's attention one
    flash_attn_dec2 dispatch over the cells filled so far) to the logits of flash_attn.comp's split and merge."""
    opts = {"fa_split": "on", "matvec": "3"}   # float mat-vec activations: the attention kernels alone differ
    l4, k4 = _model_logits(tmp_path, {**opts, "fa_v": "4"}, "flash_attn '", 9, n_ctx=160, prompt=range(1, 70))
    l1, k1 = _model_logits(tmp_path, {**opts, "fa_v": "1"}, "flash_attn '", 9, n_ctx=160, prompt=range(1, 70))
    assert "flash_attn_dec2" in k4 and "flash_attn_dec2" not in k1, (k4, k1)
    for a, b in zip(l4, l1):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-8


@pytest.mark.parametrize("H,Hk", [(4, 4), (8, 2)])
def test_fa_v_auto(H, Hk):
    """fa_v=0 (the default): flash_attn_dec2 where every query head has a KV head of its own, flash_attn_dec (fa_v=3's
    kernel) for grouped heads; the results the same either way."""
    runs, ref, kernels = _attend(64, H, Hk, 1, 300, 0.0, "f16", {"fa_v": "0"}, seed=H + Hk)
    want = "flash_attn_dec2" if H == Hk and 8 <= _subgroup() else "flash_attn_dec"
    assert set(kernels) == {want}, kernels
    for got in runs:
        assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


def test_fa_lit():
    """fa_lit=1: a node with D = 128 and one query head per KV head runs flash_attn_dec2's literal build
    (flash_attn_dec2_d128g1) where the subgroups are 32 wide (NVIDIA), with the bytes of the specialized module; on
    other widths the option changes nothing."""
    from _vulkan_rp import debug_records
    args = (128, 4, 4, 1, 2200, 0.0, "f16")
    with debug_records() as rec:
        lit, ref, k1 = _attend(*args, {"fa_v": "4", "fa_lit": "1"}, seed=7)
    base, _, k0 = _attend(*args, {"fa_v": "4", "fa_lit": "0"}, seed=7)
    used = any("flash_attn_dec2's literal build" in r for r in rec)
    assert k1 == k0 and used == (_subgroup() == 32 and k1 == ["flash_attn_dec2"] * len(k1)), (k0, k1, used)
    for a, b in zip(lit, base):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    assert nmse(lit[0], ref) <= 5e-4
