"""The Vulkan plugin: build shape (R1, R2) and device bring-up on whatever Vulkan driver is here
(lavapipe in CI, via .ci/apt-vulkan.sh). The op semantics are checked by the lead's conformance
suite (tests/test_ops.py, parametrized over every device); the quantized weight types it does not
cover yet are checked here against numpy on the CPU plugin's dequantization."""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "pyggml", "plugins", "libpyggml-vulkan.so")

pytestmark = pytest.mark.skipif(
    not os.path.exists(LIB),
    reason="libpyggml-vulkan.so not built (needs glslc and the Vulkan headers: .ci/apt-vulkan.sh, then make plugins)")


def test_exports_exactly_one_symbol():  # R1
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    assert [line.split()[-1] for line in out.splitlines() if line.strip()] == ["pyg_plugin_get_api"]


def test_does_not_link_libvulkan():  # R2: the loader is dlopened in plugin_init
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    needed = [line for line in out.splitlines() if "(NEEDED)" in line]
    assert needed and not any("vulkan" in line for line in needed), needed


def test_without_a_driver_it_loads_and_says_why():  # R2
    code = ("import pyggml as pg, sys; p = pg.load_plugin(sys.argv[1]); "
            "print('REASON', p.unavailable_reason); print('NDEV', len(p.devices))")
    env = dict(os.environ, VK_ICD_FILENAMES="/nonexistent/icd.json", VK_DRIVER_FILES="/nonexistent/icd.json",
               PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", code, LIB], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "NDEV 0" in r.stdout
    reason = r.stdout.split("REASON", 1)[1].splitlines()[0].strip()
    assert reason not in ("", "None") and "vulkan" in reason.lower(), r.stdout


@pytest.fixture(scope="module")
def vk():
    import pyggml as pg
    p = pg.load_plugin(LIB)
    if not p.devices:
        pytest.skip(f"no Vulkan device here: {p.unavailable_reason}")
    return p


def test_devices_are_reported(vk):
    import pyggml as pg
    for d in vk.devices:
        assert str(d).startswith("vulkan:")
        assert d.description and d.description != "vulkan"
        assert d.alignment >= 16 and d.alignment & (d.alignment - 1) == 0
        assert d.max_alloc > 0
    assert any(str(d).startswith("vulkan:") for d in pg.devices())


def _nmse(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.sum((a - b) ** 2) / max(np.sum(b ** 2), 1e-30))


@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q8_0", "q4_K", "q6_K"])
@pytest.mark.parametrize("M,K,N", [(33, 256, 1), (70, 512, 3), (65, 256, 17), (130, 768, 70)])
def test_quantized_mul_mat_and_get_rows(vk, qtype, M, K, N):
    import pyggml as pg
    rng = np.random.default_rng(M * 1000 + N)
    w = rng.standard_normal((M, K)).astype(np.float32)
    blocks = pg.quantize(w, qtype)
    wref = pg.dequantize(blocks, qtype, (M, K)).astype(np.float64)
    dev = str(vk.devices[0])
    sched = pg.Scheduler([dev], poison=True)

    g = pg.Graph()
    x = g.input("x", (N, K))
    y = pg.mul_mat(g.weight("w", blocks, type=qtype, shape=(M, K)), x)
    xv = rng.standard_normal((N, K)).astype(np.float32)
    e = _nmse(sched.compute(y, {"x": xv}), xv.astype(np.float64) @ wref.T)
    assert e <= 5e-4, f"mul_mat {qtype} NMSE {e}"

    g2 = pg.Graph()
    idx = g2.input("i", (7,), pg.i32)
    r = pg.get_rows(g2.weight("w", blocks, type=qtype, shape=(M, K)), idx)
    iv = rng.integers(0, M, 7).astype(np.int32)
    e2 = _nmse(sched.compute(r, {"i": iv}), wref[iv])
    assert e2 <= 1e-7, f"get_rows {qtype} NMSE {e2}"


def test_chain_reuses_plan_with_new_inputs(vk):
    """A dependent chain (barriers between dispatches) computed twice with different inputs."""
    import pyggml as pg
    rng = np.random.default_rng(7)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    g = pg.Graph()
    x = g.input("x", (5, 64))
    y = pg.silu(pg.mul_mat(g.weight("w", w), pg.rms_norm(x, eps=1e-5)))
    y = pg.add(y, pg.scale(y, 0.5))
    sched = pg.Scheduler([str(vk.devices[0])], poison=True)
    for _ in range(2):
        xv = rng.standard_normal((5, 64)).astype(np.float32)
        xn = xv / np.sqrt(np.mean(xv.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5)
        h = xn @ w.T.astype(np.float64)
        h = h / (1 + np.exp(-h))
        assert _nmse(sched.compute(y, {"x": xv}), 1.5 * h) <= 5e-4


def test_tensor_larger_than_one_binding_is_refused(vk):
    """Tensors over maxStorageBufferRange are refused (supports_op 0), never silently truncated."""
    import pyggml as pg
    rows = (128 << 20) // (4 * 4096) + 1   # > 128 MiB of f32 (lavapipe's limit; larger on GPUs)
    g = pg.Graph()
    x = g.input("x", (rows, 4096))
    y = pg.silu(x)
    sched = pg.Scheduler([str(vk.devices[0])])
    try:
        sched.compute(y, {"x": np.zeros((rows, 4096), np.float32)})
    except pg.UnsupportedError as e:
        assert "silu" in str(e)
    except MemoryError:
        pytest.skip("not enough memory for the oversized input")
    else:
        pytest.skip("this device's maxStorageBufferRange covers the test tensor")


def test_c_smoke_events_barriers_and_quant_mat_vec(vk, tmp_path):
    """plugins/vulkan/tests/vk_smoke.c: event-ordered streams, barrier placement (counts from the
    plugin's debug log), mul_mat on random blocks of every weight type. Run twice: destroying a
    semaphore another submission waited on used to crash lavapipe later, intermittently."""
    exe = str(tmp_path / "vk_smoke")
    subprocess.run(["cc", "-O2", "-I", os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "plugins", "vulkan", "tests", "vk_smoke.c"), "-ldl", "-lm", "-o", exe],
                   check=True, capture_output=True, text=True)
    for _ in range(2):
        r = subprocess.run([exe, LIB], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, VK_SMOKE_SMALL="1"))
        assert r.returncode == 0 and "PASSED" in r.stdout, f"rc {r.returncode}\n{r.stdout}\n{r.stderr[-2000:]}"


def test_shared_memory_fallback_kernels(vk):
    """Devices without subgroup arithmetic get workgroup-reduction kernels (mat-vec, norms,
    soft_max, argmax); the device option subgroups=0 forces them so lavapipe checks them too."""
    from pyggml.conformance.runner import run_all
    dev = vk.devices[0]
    dev.set_option("subgroups", "0")
    try:
        fails = []
        c = run_all(dev, echo=lambda s: None if s.startswith("pass") else fails.append(s))
    finally:
        dev.set_option("subgroups", "1")
    assert c["fail"] == 0 and c["pass"] > 0, (c, fails[:20])
