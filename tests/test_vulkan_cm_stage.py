"""cm_stage: mul_mat_cm4's KHR build stages its result tiles in shared memory through a float array (cm_stage=float)
instead of the uvec4 one. The same arithmetic and the same bytes; what may differ is how the driver lays out the
accumulators (on the H100 f32 sums ran at ~30 TFLOPS in the GEMM and at the f16 rate in scripts/vk_cm_probe.c, which
stores them into float arrays). The GEMMs run where the device has VK_KHR_cooperative_matrix."""
import numpy as np
import pytest


def test_cm_stage_leaves_other_devices_alone():
    """Accepted everywhere; without the KHR extension (lavapipe) the kernel is the one cm_stage=uvec4 runs."""
    from test_vulkan_kernels import VK, _has_khr, _run
    if VK is None:
        pytest.skip("no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
    if _has_khr():
        pytest.skip("this device has VK_KHR_cooperative_matrix (test_cm_stage_same_bytes covers it)")
    e1, k1 = _run("q4_0", (256, 256), (96, 256), {"cm_stage": "float"}, seed=5)
    e0, k0 = _run("q4_0", (256, 256), (96, 256), {"cm_stage": "uvec4"}, seed=5)
    assert k1 == k0 and not any("fstage" in k for k in k1) and e1 == e0, (k0, k1)


def test_cm_stage_refuses_other_values():
    import pyggml as pg
    from test_vulkan_kernels import VK
    if VK is None:
        pytest.skip("no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
    with pytest.raises(pg.PyggmlError, match="cm_stage wants one of uvec4, float"):
        pg.get_device(VK).set_option("cm_stage", "half")


@pytest.mark.parametrize("acc", ["f16x4", "f32"])
@pytest.mark.parametrize("wdt,m", [("q4_0", 4096), ("q4_0", 2048), ("q4_K", 2048)])
def test_cm_stage_same_bytes(wdt, m, acc):
    """On VK_KHR_cooperative_matrix: the kernel name ends in ' fstage', the bytes are cm_stage=uvec4's and within the
    f16 operands of numpy."""
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
    try:
        fl, k1 = _compute(y, {"x": xv}, {"cm_stage": "float", "cm_acc": acc}, "mul_mat '")
        ref, k0 = _compute(y, {"x": xv}, {"cm_stage": "uvec4", "cm_acc": acc}, "mul_mat '")
    finally:
        pg.get_device(VK).set_option("cm_stage", "uvec4")
        pg.get_device(VK).set_option("cm_acc", "f16x4")
    assert len(k1) == 1 and k1[0].endswith(" fstage") and k1[0][:-len(" fstage")] == k0[0], (k0, k1)
    assert np.array_equal(np.asarray(fl), np.asarray(ref))
    assert nmse(np.asarray(fl).reshape(512, m), xv.astype(np.float64) @ w64.T) <= 5e-4
