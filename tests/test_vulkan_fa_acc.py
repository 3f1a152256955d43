"""fa_acc: flash_attn_cm3 (the one-pass prefill attention) with f16 accumulators on the tensor cores: pv16 sums each
64-key chunk's P V in f16 (the outputs stay f32 across chunks), f16 Q K^T too. On the NVIDIA driver products into f32
accumulators run at about 30 TFLOPS (coopmat.glsl). Against float64 numpy within the attention's threshold, as f32's
(causal masks with ALiBi and GQA, a row that sees nothing, f32 and f16 masks, D 32 to 128), different bytes from f32's
(the f16 sums ran: on lavapipe the emulated build rounds them after each 16-term product), the kernel named; a model's
prefill logits near f32's; the whole file under the validation layer. On lavapipe through the emulated build, on a
GPU through the tensor cores."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import VALIDATING, VK, _has_coopmat, _rerun_under_validation, prefill_fa_case
from test_vulkan_kernels import _validation_clean  # noqa: F401 (an autouse fixture)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
FAS = ["cm_emulated", "coopmat"]
NAMES = {"pv16": " pv16", "f16": " f16acc"}


def _skip_without(fa):
    if fa == "coopmat" and not _has_coopmat():
        pytest.skip("no cooperative matrices on this device (the emulated case covers the kernel's logic)")


def _opts(fa, acc):
    # fa_cm_wgs=0: on a GPU these few query blocks would otherwise take the KV split (flash_attn_cm2s), not cm3
    return {"fa": fa, "fa_cm": "3", "fa_cm_wgs": "0", "fa_acc": acc}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation)."""
    _rerun_under_validation(__file__)


@pytest.mark.parametrize("fa", FAS)
@pytest.mark.parametrize("acc", ["pv16", "f16"])
@pytest.mark.parametrize("D,n_q,n_kv", [(64, 70, 200), (64, 256, 256), (32, 17, 72), (128, 40, 100)])
def test_f16_sums(fa, acc, D, n_q, n_kv):
    """prefill_fa_case's causal cases: within 1e-5 NMSE of float64 numpy, the kernel flash_attn_cm3 with its suffix,
    and not f32's bytes."""
    _skip_without(fa)
    e0, k0 = prefill_fa_case(D, n_q, n_kv, "f16", _opts(fa, "f32"))
    if fa == "cm_emulated" and D > 64 and k0 == ["flash_attn"]:
        pytest.skip("the emulated build of D 128 does not fit this device's shared memory (lavapipe's 32 KiB)")
    e1, k1 = prefill_fa_case(D, n_q, n_kv, "f16", _opts(fa, acc))
    assert k1 and all(k.startswith("flash_attn_cm3") and k.endswith(NAMES[acc]) for k in k1), k1
    assert k0 and all(k == k0[0] and not k.endswith(("pv16", "f16acc")) for k in k0), k0
    # f32's meets the attention's 5e-4 with room (about 7e-8 here: the f16 inputs); the f16 sums stay within 1e-5 (about
    # 5e-7 on the emulated build; a wrong tile or scale gives 1e-2 and more)
    assert e0 <= 5e-4 and e1 <= 1e-5, (e1, e0)
    assert e1 != e0, (e1, e0)   # (the f16 sums ran)


def test_model_prefill(tmp_path):
    """A synthetic LLaMA's 40-token prefill and three decode steps on the emulated build with fa_acc=f16: the prefill
    logits within 1e-5 NMSE of fa_acc=f32's (its attention rounds to f16 where the f32 build does not), the decode
    steps (flash_attn_cm3 is the prefill's kernel alone) as near."""
    from test_vulkan_kernels import _model_logits
    opts, run = {"fa": "cm_emulated", "gemm": "tiled", "matvec": "3"}, dict(n_ctx=64, prompt=range(1, 41))
    l1, k1 = _model_logits(tmp_path, {**opts, "fa_acc": "f16"}, "flash_attn '", 21, **run)
    l0, k0 = _model_logits(tmp_path, {**opts, "fa_acc": "f32"}, "flash_attn '", 21, **run)
    assert any(k.startswith("flash_attn_cm3") and k.endswith(" f16acc") for k in k1), k1
    assert not any(k.endswith(" f16acc") for k in k0), k0
    assert not np.array_equal(np.asarray(l1[0]), np.asarray(l0[0]))
    for step, (a, b) in enumerate(zip(l1, l0)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-5, f"step {step}: NMSE {nmse(np.asarray(a), np.asarray(b)):.3g}"


def test_option_values():
    dev = pg.get_device(VK)
    for bad in ("f8", "2", ""):
        with pytest.raises(pg.PyggmlError, match="fa_acc"):
            dev.set_option("fa_acc", bad)
    dev.set_option("fa_acc", "f32")
