"""Every configuration of the configurable cooperative-matrix GEMM (mul_mat_cm4.comp: gemm_v=4,
gemm_cfg=NAME) against float64 numpy, on every weight type it dequantizes.

Emulated (gemm=cm_emulated: the matrix primitives in plain GLSL) everywhere, on the tensor cores
(gemm=coopmat) where the device has VK_NV_cooperative_matrix (scripts/gpu_vulkan_gemm.sh runs this
file on the H200). Shapes are odd on purpose: M one past a 128-row tile, N not a multiple of any
tile, K = 7 blocks of 32 (a partial 64-element step), weights broadcast over a batch axis, weight rows
starting 2 bytes into a 32-bit word (q4_0, q8_0: 18- and 34-byte blocks; f16 through a view), and
activation rows off 16 bytes (the word-by-word path). The configurations are the plugin's own list
(the option's error message names them), so a configuration added in vk_matmul.c is tested here.

On lavapipe (32 KiB of shared memory) or NVIDIA (48 KiB) a configuration that needs more runs with one
shared-memory stage instead of two, and the kernel name the plugin logs says so (".s1"); everything else about its
tiling is what the GPU runs."""
import re

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import TYPES, VK, _compute, _has_coopmat, _has_khr, _k, _run, _weight

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def gemm_configs():
    """The configuration names the plugin accepts for gemm_cfg (besides auto), from its message."""
    if VK is None:
        return []
    with pytest.raises(pg.PyggmlError) as e:
        pg.get_device(VK).set_option("gemm_cfg", "no-such-configuration")
    words = re.search(r"wants one of (.*), got", str(e.value)).group(1).split(", ")
    assert words[0] == "auto"
    return words[1:]


CFGS = gemm_configs()


def shared_bytes(cfg):
    """mul_mat_cm4's shared memory for a configuration name (vk_matmul.c: gemm_cfg_shared)."""
    m = re.fullmatch(r"(\d+)x(\d+)\.k(\d+)\.w(\d+)x(\d+)(\.ks2)?(\.s1)?(\.np)?", cfg)
    assert m, cfg
    bm, bn, bk, wm, wn = (int(x) for x in m.groups()[:5])
    stages, ks = (1 if m.group(7) else 2), (2 if m.group(6) else 1)
    return stages * (bm + bn) * (bk + 8) * 2 + wm * wn * ks * 1024


def shared_limit():
    """The device's maxComputeSharedMemorySize, known per driver: lavapipe 32 KiB, NVIDIA 48 KiB."""
    desc = pg.get_device(VK).description.lower()
    for key, limit in (("llvmpipe", 32768), ("nvidia", 49152)):
        if key in desc:
            return limit
    pytest.skip(f"shared-memory limit of {desc!r} not known to this test (add it to shared_limit)")


def wanted(cfg, gemm):
    """The kernel names the debug log may give for cfg: itself, or on a device with less shared memory
    than two stages need (lavapipe: 32 KiB, NVIDIA: 48 KiB), the same with one stage."""
    # (khr: cm_api's KHR build, where the device has it; f16acc4: its cm_acc=f16x4, the default)
    names = {"mul_mat_cm4 " + cfg + s for s in ("", " khr", " khr f16acc4")}
    limit = shared_limit()
    if shared_bytes(cfg) > limit and ".s1" in cfg:   # (eight subgroups' staging on one k64 stage: past lavapipe's 32 KiB)
        return set()
    if shared_bytes(cfg) > limit:
        one = cfg.replace(".np", "") + ".s1" + (".np" if ".np" in cfg else "")
        names = {"mul_mat_cm4 " + one + s for s in ("", " khr", " khr f16acc4")} if shared_bytes(one) <= limit else set()
    return names


def _skip_without(gemm):
    if gemm == "coopmat" and not _has_coopmat():
        pytest.skip("no VK_NV_cooperative_matrix on this device (the emulated case covers the kernel's logic)")


def test_configurations_are_listed_and_named():
    """The plugin lists configurations, each name parses, and auto / a bad name / gemm_v=5 behave."""
    assert len(CFGS) >= 8, CFGS
    for c in CFGS:
        shared_bytes(c)
    dev = pg.get_device(VK)
    dev.set_option("gemm_v", "4")
    dev.set_option("gemm_cfg", "auto")
    with pytest.raises(pg.PyggmlError, match="gemm_v"):
        dev.set_option("gemm_v", "5")
    dev.set_option("gemm_v", "0")


@pytest.mark.parametrize("wdt", TYPES)
@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_every_configuration_and_type(gemm, cfg, wdt):
    """Batched with the weights broadcast (2 x 3 activation matrices over 2 weight matrices), M = 129
    (one past a 128 tile), N = 70, K of 7 blocks (32-element types) or 2 blocks (q4_K, q6_K)."""
    _skip_without(gemm)
    want = wanted(cfg, gemm)
    if not want:
        pytest.skip(f"{cfg} needs {shared_bytes(cfg)} bytes of shared memory even with one stage")
    k = _k(wdt)
    e, kernels = _run(wdt, (2, 1, 129, k), (2, 3, 70, k), {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": "0", "gemm_b16": "0"}, seed=21)
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"


@pytest.mark.parametrize("wdt", ["q4_0", "q4_K", "f16"])
@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_unaligned_activations(gemm, cfg, wdt):
    """Activation rows one float into a wider input (not 16-byte aligned: read word by word), N = 37."""
    _skip_without(gemm)
    want = wanted(cfg, gemm)
    if not want:
        pytest.skip(f"{cfg} needs {shared_bytes(cfg)} bytes of shared memory even with one stage")
    k = _k(wdt)
    e, kernels = _run(wdt, (70, k), (37, k), {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": "0", "gemm_b16": "0"}, x_offset=1, seed=22)
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"


@pytest.mark.parametrize("cfg", CFGS)
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_f16_weight_rows_off_a_word(gemm, cfg):
    """f16 weights as a view one element into wider rows: every other row starts 2 bytes into a
    32-bit word (the realigned raw words), M = 65, N = 66, K = 96."""
    _skip_without(gemm)
    want = wanted(cfg, gemm)
    if not want:
        pytest.skip(f"{cfg} needs {shared_bytes(cfg)} bytes of shared memory even with one stage")
    rng = np.random.default_rng(23)
    m, n, k = 65, 66, 96
    g = pg.Graph()
    wide = rng.standard_normal((m, k + 1)).astype(np.float16)
    win = g.weight("w", wide)
    w = pg.view(win, (m, k), offset=2, strides=(2 * (k + 1), 2))
    xv = rng.standard_normal((n, k)).astype(np.float32)
    x = g.input("x", (n, k))
    out, kernels = _compute(pg.mul_mat(w, x), {"x": xv}, {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": "0", "gemm_b16": "0"}, "mul_mat '")
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    ref = xv.astype(np.float64) @ wide[:, 1:].astype(np.float64).T
    assert kernels and kernels[0] in want, (kernels, want)
    assert nmse(np.asarray(out), ref) <= 5e-4


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0", "q4_K", "q6_K", "f16"])
@pytest.mark.parametrize("cfg", ["64x64.k32.w2x2", "64x64.k64.w2x2.ks2"])
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_gemm_dq(gemm, cfg, wdt):
    """gemm_dq=1: a quantized weight is dequantized into the plan's scratch as f16 rows (dequant.comp)
    and the GEMM reads the copy (kernel name ' dq'), two weight matrices broadcast over 2 x 3
    activation matrices, M = 129, N = 70; f16 weights and N < 32 keep the direct path; the plan has
    the extra dispatch and a barrier before the GEMM."""
    _skip_without(gemm)
    want = {n + " dq" for n in wanted(cfg, gemm)} if wdt != "f16" else wanted(cfg, gemm)
    if not want:
        pytest.skip(f"{cfg} needs {shared_bytes(cfg)} bytes of shared memory even with one stage")
    k = _k(wdt)
    opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": "1", "gemm_b16": "0"}
    e, kernels = _run(wdt, (2, 1, 129, k), (2, 3, 70, k), opts, seed=25)
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    e, kernels = _run(wdt, (129, k), (31, k), opts, seed=26)   # 31 tokens: no copy
    assert kernels and not kernels[0].endswith(" dq") and e <= 5e-4, (kernels, e)
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    if wdt == "q4_0":   # two GEMMs over one scratch region: dequant, GEMM, dequant, GEMM in four stages
        rng = np.random.default_rng(27)
        g = pg.Graph()
        ws = []
        for i, shape in enumerate(((96, 64), (64, 96))):
            blocks = pg.quantize(rng.standard_normal(shape).astype(np.float32), "q4_0")
            ws.append((g.weight(f"w{i}", blocks, type="q4_0", shape=shape),
                       np.asarray(pg.dequantize(blocks, "q4_0", shape), np.float64)))
        (w1, w1f), (w2, w2f) = ws
        xv = rng.standard_normal((40, 64)).astype(np.float32)
        x = g.input("x", (40, 64))
        y = pg.mul_mat(w2, pg.mul_mat(w1, x))
        out, plans = _compute(y, {"x": xv}, opts, "plan for graph")
        pg.get_device(VK).set_option("gemm_cfg", "auto")
        ref = (xv.astype(np.float64) @ w1f.T) @ w2f.T
        assert nmse(np.asarray(out), ref) <= 5e-4
        assert plans[-1].startswith("4 dispatches, 3 barriers"), plans


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_auto_configuration(gemm):
    """gemm_cfg=auto: 128 x 128 where that grid still has 512 workgroups, else 64 x 64; the KHR build
    (cm_api auto on a device with VK_KHR_cooperative_matrix) has its own rule: test_auto_configuration_khr."""
    _skip_without(gemm)
    if gemm == "coopmat" and _has_khr():
        pytest.skip("the KHR build's rule: test_auto_configuration_khr")
    rng = np.random.default_rng(24)
    for (m, n), tile in (((200, 40), "64x64"), ((64 * 128, 8 * 128), "128x128")):
        g = pg.Graph()
        w, _ = _weight(g, rng, "q4_0", (m, 32))
        x = g.input("x", (n, 32))
        _, kernels = _compute(pg.mul_mat(w, x), {"x": np.zeros((n, 32), np.float32)},
                              {"gemm": gemm, "gemm_v": "4"}, "mul_mat '")
        assert kernels and kernels[0].startswith("mul_mat_cm4 " + tile), kernels


@pytest.mark.parametrize("wdt, n, dq, b16, cfg", [
    ("q4_0", 70, "auto", "auto", "64x128.k64.w2x2 b16"), ("q4_0", 200, "auto", "auto", "64x128.k64.w2x2 b16"),
    ("q4_0", 70, "auto", "0", "128x64.k64.w2x2"), ("q4_0", 40, "auto", "auto", "128x64.k64.w2x2 b16"),
    ("f16", 200, "auto", "0", "64x128.k64.w2x2"), ("f16", 40, "auto", "0", "128x64.k64.w2x2"),
    ("q4_K", 70, "auto", "auto", "64x128.k64.w2x2 dq b16"), ("q4_K", 20, "auto", "auto", "128x64.k64.w2x2"),
    ("q4_K", 70, "0", "0", "128x64.k64.w2x2"), ("q6_K", 130, "auto", "auto", "64x128.k64.w2x2 dq b16"),
    ("q4_0", 70, "1", "0", "64x128.k64.w2x2 dq")])
def test_auto_configuration_khr(wdt, n, dq, b16, cfg):
    """On VK_KHR_cooperative_matrix (gemm and gemm_v auto, the defaults) mul_mat_cm4 takes K steps of
    64: past 64 tokens 64 weight rows x 128 tokens where an operand is 16-bit (an f16 weight,
    gemm_dq's copy, gemm_b16's activations), else 128 x 64; gemm_dq auto dequantizes the k-quants and
    gemm_b16 auto converts the activations, both from 32 tokens. Each against float64 numpy."""
    if not _has_khr():
        pytest.skip("no VK_KHR_cooperative_matrix on this device (lavapipe before Mesa 24.1)")
    name, _, tail = cfg.partition(" ")
    want = {k + (" " + tail if tail else "") for k in wanted(name, "coopmat")}
    k = _k(wdt)
    e, kernels = _run(wdt, (2, 1, 129, k), (2, 3, n, k), {"gemm_dq": dq, "gemm_b16": b16}, seed=28)
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"


@pytest.mark.parametrize("wdt, dq", [("q4_0", "0"), ("q4_0", "1"), ("q4_K", "1"), ("q6_K", "0"), ("f16", "0"), ("f32", "0")])
@pytest.mark.parametrize("cfg", ["64x64.k32.w2x2", "64x64.k64.w2x2.ks2"])
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_gemm_b16(gemm, cfg, wdt, dq):
    """gemm_b16=1: the f32 activations are converted into the plan's scratch as f16 rows (dequant.comp
    on f32) and the GEMM reads the copy (kernel name ' b16'; with gemm_dq also the weights' copy):
    2 x 3 activation matrices over 2 broadcast weight matrices, M = 129, N = 70; activation rows off
    16 bytes (the conversion reads any layout); N < 32 keeps the direct path."""
    _skip_without(gemm)
    tail = (" dq" if dq == "1" and wdt not in ("f16", "f32") else "") + " b16"
    want = {n + tail for n in wanted(cfg, gemm)}
    if not want:
        pytest.skip(f"{cfg} needs {shared_bytes(cfg)} bytes of shared memory even with one stage")
    k = _k(wdt)
    opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": dq, "gemm_b16": "1"}
    e, kernels = _run(wdt, (2, 1, 129, k), (2, 3, 70, k), opts, seed=29)
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    e, kernels = _run(wdt, (70, k), (37, k), opts, x_offset=1, seed=30)
    assert kernels and kernels[0] in want and e <= 5e-4, (kernels, e)
    e, kernels = _run(wdt, (129, k), (31, k), opts, seed=31)   # 31 tokens: no copy
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    assert kernels and not kernels[0].endswith(" b16") and e <= 5e-4, (kernels, e)


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_gemm_b16_shared_conversion(gemm):
    """Three GEMMs of the same activations (a layer's q, k, v) after one conversion, in one stage; a GEMM
    of their sum converts again once they have read the region: convert | q k v | add | add | convert | o,
    against float64 numpy."""
    _skip_without(gemm)
    rng = np.random.default_rng(32)
    g = pg.Graph()
    ws = []
    for i in range(4):
        blocks = pg.quantize(rng.standard_normal((64, 64)).astype(np.float32), "q4_0")
        ws.append((g.weight(f"w{i}", blocks, type="q4_0", shape=(64, 64)),
                   np.asarray(pg.dequantize(blocks, "q4_0", (64, 64)), np.float64)))
    xv = rng.standard_normal((40, 64)).astype(np.float32)
    x = g.input("x", (40, 64))
    q, k, v = (pg.mul_mat(w, x) for w, _ in ws[:3])
    y = pg.mul_mat(ws[3][0], pg.add(pg.add(q, k), v))
    opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "gemm_dq": "0", "gemm_b16": "1"}
    out, plans = _compute(y, {"x": xv}, opts, "plan for graph")
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    x64 = xv.astype(np.float64)
    ref = sum(x64 @ w.T for _, w in ws[:3]) @ ws[3][1].T
    assert nmse(np.asarray(out), ref) <= 5e-4
    assert plans[-1].startswith("8 dispatches, 5 barriers"), plans


def bg_name(cfg):
    """The kernel name gemm_bg gives cfg: its shared memory holds the weight tiles alone, so two stages
    fit where the activation tiles left room for one (vk_matmul.c: gemm_cfg_shared_bg)."""
    m = re.fullmatch(r"(\d+)x(\d+)\.k(\d+)\.w(\d+)x(\d+)(\.ks2)?", cfg)
    bm, bn, bk, wm, wn = (int(x) for x in m.groups()[:5])
    ks = 2 if m.group(6) else 1
    two = 2 * bm * (bk + 8) * 2 + wm * wn * ks * 1024 + 16
    return cfg if two <= shared_limit() else cfg + ".s1"


@pytest.mark.parametrize("wdt, dq", [("q4_0", "0"), ("q4_K", "1"), ("f16", "0")])
@pytest.mark.parametrize("cfg", ["64x64.k32.w2x2", "64x64.k64.w2x2.ks2", "128x64.k64.w2x2", "64x128.k64.w2x2",
                                 "128x128.k64.w2x4", "128x128.k64.w2x2"])
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_gemm_bg(gemm, cfg, wdt, dq):
    """gemm_bg=1 (with gemm_b16): the activation fragments are loaded from the f16 copy in global memory,
    whose rows the conversion pads with zeros to whole tiles (N = 70 and 37 against tiles of 64 and 128
    tokens, K = 224 against steps of 64: a half-empty last step), weights broadcast over 2 x 3
    activation matrices, activation rows off 16 bytes; against float64 numpy."""
    _skip_without(gemm)
    name = "mul_mat_cm4 " + bg_name(cfg)
    tail = (" dq" if dq == "1" else "") + " b16 bg"
    want = {name + s + tail for s in ("", " khr", " khr f16acc4")}
    k = _k(wdt)
    opts = {"gemm": gemm, "gemm_v": "4", "gemm_cfg": cfg, "gemm_dq": dq, "gemm_b16": "1", "gemm_bg": "1"}
    e, kernels = _run(wdt, (2, 1, 129, k), (2, 3, 70, k), opts, seed=33)
    assert kernels and kernels[0] in want, (kernels, want)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    e, kernels = _run(wdt, (70, k), (37, k), opts, x_offset=1, seed=34)
    pg.get_device(VK).set_option("gemm_cfg", "auto")
    assert kernels and kernels[0] in want and e <= 5e-4, (kernels, e)
