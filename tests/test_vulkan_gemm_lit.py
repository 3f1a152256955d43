"""gemm_lit: mul_mat_cm4's KHR build from builds whose specialization and workgroup size are literals, then spirv-opt
-O (vulkan.mk's CM4_LITS; scripts/glslang_khr.py --opt), where one has the GEMM's specialization: the auto
configurations with gemm_b16 and cm_acc=f16x4 on a 32-wide subgroup. The same arithmetic as the specialized module.
Here the modules are checked statically and their table against vk_matmul.c's rules (recomputed below); the GEMMs
run where the device has VK_KHR_cooperative_matrix (the H100/H200: scripts/gpu_vulkan.sh)."""
import os
import re

import numpy as np
import pytest

from test_vulkan_spirv import BUILD, instructions, read_spv_h

MK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins", "vulkan", "vulkan.mk")
OP_SPEC_CONSTANT, OP_SPEC_CONSTANT_OP = 50, 52
TY_F16, TY_Q4_0 = 1, 2


def _lits():
    """vulkan.mk's CM4_LITS: (name, specialization, invocations)."""
    text = open(MK).read().replace("\\\n", " ")   # (continuation lines joined)
    line = next(x for x in text.splitlines() if x.startswith("CM4_LITS :="))
    return [(n, int(s, 16), int(w)) for n, s, w in (e.split(":") for e in line.split(":=", 1)[1].split())]


def _spec(ty, bm, bn, bk, wm, wn, ks, st, pf, dq, b16=1, acc_steps_log2=2):
    """vk_matmul.c's gemm_cfg_spec and the flags vkp_mul_mat_setup adds (cm_acc=f16x4: bit 23, log2 4 << 27)."""
    lg = lambda v: v.bit_length() - 1   # noqa: E731
    s = ty | lg(bm // 32) << 8 | lg(bn // 32) << 10 | (bk == 64) << 12 | lg(wm) << 13 | lg(wn) << 15 | (st == 2) << 17
    return s | pf << 18 | (ks == 2) << 19 | 1 << 23 | acc_steps_log2 << 27 | dq << 24 | b16 << 25


def test_the_table_is_the_auto_configurations():
    """Each entry is one of the two auto configurations at N > 64 with the activation copy: 64x128.k64.w2x2 (one stage:
    its two exceed NVIDIA's 48 KiB) and 64x128.k64.w2x4.s1, for q4_0 read directly and for gemm_dq's f16 copy."""
    want = {"w2x2_q0": (_spec(TY_Q4_0, 64, 128, 64, 2, 2, 1, 1, 1, 0), 128),
            "w2x4_q0": (_spec(TY_Q4_0, 64, 128, 64, 2, 4, 1, 1, 1, 0), 256),
            "w2x2_dq": (_spec(TY_F16, 64, 128, 64, 2, 2, 1, 1, 1, 1), 128),
            "w2x4_dq": (_spec(TY_F16, 64, 128, 64, 2, 4, 1, 1, 1, 1), 256)}
    assert {n: (s, w) for n, s, w in _lits()} == want


def test_the_literal_modules_have_no_specialization():
    """Built (where glslang 13 is installed), each module has no specialization constant left and is smaller than the
    specialized one: spirv-opt folded and unrolled what the literals fixed."""
    generic = os.path.join(BUILD, "mul_mat_cm4_khr.spv.h")
    if not os.path.exists(generic):
        pytest.skip("build/vulkan not built (make plugins)")
    g = read_spv_h(generic)
    if len(g) <= 1:
        pytest.skip("no KHR build here (glslang 13 missing)")
    for name, _, _ in _lits():
        words = read_spv_h(os.path.join(BUILD, f"mul_mat_cm4_khr_{name}.spv.h"))
        ops = {op for op, _ in instructions(words)}
        assert OP_SPEC_CONSTANT not in ops and OP_SPEC_CONSTANT_OP not in ops, name
        assert len(words) < len(g) / 2, (name, len(words), len(g))


def test_the_generated_table_matches_vulkan_mk():
    path = os.path.join(BUILD, "cm4_lit.h")
    if not os.path.exists(path):
        pytest.skip("build/vulkan not built (make plugins)")
    rows = re.findall(r"\{ (0x[0-9a-f]+)u, (\d+)u, spv_mul_mat_cm4_khr_(\w+),", open(path).read())
    assert [(n, int(s, 16), int(w)) for s, w, n in rows] == _lits()


def test_gemm_lit_leaves_other_devices_alone():
    """Accepted everywhere; without the KHR extension (lavapipe) no literal build runs and the kernel is the one
    gemm_lit=0 runs."""
    from test_vulkan_kernels import VK, _has_khr, _run
    if VK is None:
        pytest.skip("no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
    if _has_khr():
        pytest.skip("this device has VK_KHR_cooperative_matrix (test_gemm_lit_same_bytes covers it)")
    e1, k1 = _run("q4_0", (256, 256), (96, 256), {"gemm_lit": "1"}, seed=5)
    e0, k0 = _run("q4_0", (256, 256), (96, 256), {"gemm_lit": "0"}, seed=5)
    assert k1 == k0 and not any(" lit" in k for k in k1) and e1 == e0, (k0, k1)


@pytest.mark.parametrize("wdt", ["q4_0", "q4_K"])
@pytest.mark.parametrize("m", [4096, 2048])
def test_gemm_lit_same_bytes(wdt, m):
    """On VK_KHR_cooperative_matrix: the auto configuration of M rows (w2x2 past 2048 and for q4_0 read directly, w2x4 up
    to 2048 for gemm_dq's f16 copy of q4_K) runs its literal
    build (kernel name ' lit'), with the bytes of the specialized module and within the f16 operands of numpy."""
    import pyggml as pg
    from pyggml.conformance.cases import nmse
    from test_vulkan_kernels import VK, _compute, _has_khr, _weight
    if VK is None or not _has_khr():
        pytest.skip("no VK_KHR_cooperative_matrix on this device")
    rng = np.random.default_rng(m)
    g = pg.Graph()
    w, w64 = _weight(g, rng, wdt, (m, 512))
    x = g.input("x", (512, 512))
    xv = rng.standard_normal((512, 512)).astype(np.float32)
    y = pg.mul_mat(w, x)
    lit, k1 = _compute(y, {"x": xv}, {"gemm_lit": "1"}, "mul_mat '")
    ref, k0 = _compute(y, {"x": xv}, {"gemm_lit": "0"}, "mul_mat '")
    assert len(k1) == 1 and k1[0].endswith(" lit") and k1[0][:-4] == k0[0], (k0, k1)
    assert np.array_equal(np.asarray(lit), np.asarray(ref))
    assert nmse(np.asarray(lit).reshape(512, m), xv.astype(np.float64) @ w64.T) <= 5e-4
