"""Vulkan kernel choices (device options matvec, matvec_rows, gemm) on every weight type.

Each case runs on the Vulkan device with an option set and is checked against float64 numpy over
the dequantized weights; the plugin's debug log says which kernel each mul_mat got, so a test also
fails when the wanted kernel was not the one that ran. On lavapipe the cooperative-matrix GEMM is
absent: `gemm=coopmat` must be refused, `auto` must choose the tiled kernel (the GPU script runs the
same tests on the NVIDIA driver, where `auto` must choose mul_mat_cm)."""
import contextlib
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _scripts import load_script

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALIDATING = os.environ.get("PYGGML_VULKAN_VALIDATION", "") not in ("", "0")


@pytest.fixture(autouse=True)
def _validation_clean():
    """Under the validation layer (with synchronization validation) every test ends clean."""
    yield
    if VALIDATING and VK is not None:
        pg.get_device(VK).set_option("validation_check", "1")


def _rerun_under_validation(test_file):
    """Runs test_file in a child process with PYGGML_VULKAN_VALIDATION=1; every test must pass."""
    from test_vulkan_multi import _layer_present
    if not _layer_present():
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed (.ci/apt-vulkan.sh: vulkan-validationlayers)")
    env = dict(os.environ, PYGGML_VULKAN_VALIDATION="1", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", os.path.abspath(test_file)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    tail = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0 and " passed" in r.stdout and "failed" not in r.stdout, tail


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_kernels_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1."""
    _rerun_under_validation(__file__)

TYPES = ("f32", "f16", "bf16", "q4_0", "q8_0", "q4_K", "q6_K")


def _bf16_bits(a):
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _weight(g, rng, wdt, wshape, name="w"):
    """A weight tensor `name` of type wdt and its float64 value as the device sees it."""
    wf = rng.standard_normal(wshape).astype(np.float32)
    k = wshape[-1]
    if wdt == "f32":
        return g.weight(name, wf), wf.astype(np.float64)
    if wdt == "f16":
        h = wf.astype(np.float16)
        return g.weight(name, h), h.astype(np.float64)
    if wdt == "bf16":
        bits = _bf16_bits(wf)
        return g.weight(name, bits, type="bf16", shape=wshape), (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    flat = wf.reshape(-1, k)
    blocks = pg.quantize(flat, wdt)
    return (g.weight(name, blocks, type=wdt, shape=wshape),
            pg.dequantize(blocks, wdt, flat.shape).astype(np.float64).reshape(wshape))


# the Vulkan plugin's option defaults, as the bench script restores them before each variant (one table for both;
# test_vulkan_vs_cuda_variants.py checks that every key is an option the plugin knows)
VK_DEFAULTS = load_script("vulkan_vs_cuda").DEFAULTS


@contextlib.contextmanager
def _options_logged(options, what):
    """Device `options` set on VK for the block (then back to the defaults); yields the list that
    collects the kernels the plugin's debug log names for nodes whose log line contains `what`. Options that
    choose a mat-vec or a mat-vec fusion (matvec, fuse_glu, fuse_norm_mv, fuse_swiglu) without naming matvec_rp
    get matvec_rp=0: the repacked q4_0 mat-vec (the default) would otherwise take the nodes they are about. Options
    that do not name gemm_lit get gemm_lit=0."""
    dev = pg.get_device(VK)
    if "matvec_rp" not in options and any(k in options for k in ("matvec", "fuse_glu", "fuse_norm_mv", "fuse_swiglu")):
        options = {**options, "matvec_rp": "0"}
    if "gemm_lit" not in options:   # (the kernel names these tests expect are the specialized module's; the literal
        options = {**options, "gemm_lit": "0"}   # builds, the default, give its bytes: test_vulkan_gemm_lit.py)
    records, kernels = [], []

    class H(logging.Handler):
        def emit(self, r):
            records.append(r.getMessage())
    h = H(level=logging.DEBUG)
    log = logging.getLogger("pyggml")
    old = log.level
    log.addHandler(h)
    log.setLevel(logging.DEBUG)
    try:
        for key, value in options.items():
            dev.set_option(key, value)
        yield kernels
    finally:
        log.removeHandler(h)
        log.setLevel(old)
        for key, value in VK_DEFAULTS.items():
            dev.set_option(key, value)
        kernels.extend(m.rsplit(": ", 1)[1] for m in records if what in m)


def _compute(y, feeds, options, what):
    """y on VK with device `options` set (then back to the defaults); returns (result, the kernels
    the plugin's debug log named for nodes whose log line contains `what`)."""
    with _options_logged(options, what) as kernels:
        out = pg.Scheduler([VK], poison=True).compute(y, feeds)
    return out, kernels


def _model_logits(tmp_path, options, what, seed, n_ctx=32, prompt=(1, 2, 3, 4), wdt="q8_0"):
    """A synthetic LLaMA (2 layers, n_embd 256, n_ff 512: K multiples of 256) on VK with `options`:
    the logits of a prefill of `prompt` and three decode steps, and the kernels the debug log named
    for lines containing `what`."""
    import pyggml.models as models
    from pyggml.synth import write_synth_model
    path = str(tmp_path / f"m-{seed}-{wdt}.gguf")
    if not os.path.exists(path):
        write_synth_model(path, dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512), wdt,
                          seed=seed, progress=False)
    with _options_logged(options, what) as kernels:
        m = models.load(path, devices=[VK, "cpu"], n_ctx=n_ctx, progress=False)
        try:
            got = [m.prefill(list(prompt))] + [np.asarray(m.decode(tok)) for tok in (7, 8, 9)]
        finally:
            m.close()
    return got, kernels


def _run(wdt, wshape, xshape, options, x_offset=0, seed=0):
    """mul_mat(w, x) on VK with `options` set; returns (NMSE against numpy, kernels the log named)."""
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    w, w64 = _weight(g, rng, wdt, wshape)
    xv = rng.standard_normal(xshape).astype(np.float32)
    if x_offset:   # x as a view that starts x_offset floats into a wider input: rows not 16-byte aligned
        k = xshape[-1]
        wide = np.zeros(xshape[:-1] + (k + x_offset,), np.float32)
        wide[..., x_offset:] = xv
        xin = g.input("x", wide.shape)
        x = pg.view(xin, xshape, offset=4 * x_offset, strides=(4 * (k + x_offset),) * (len(xshape) > 1) + (4,))
        feeds = {"x": wide}
    else:
        x = g.input("x", xshape)
        feeds = {"x": xv}
    out, kernels = _compute(pg.mul_mat(w, x), feeds, options, "mul_mat '")
    wb = w64.reshape((1,) * (4 - w64.ndim) + w64.shape)
    xb = xv.astype(np.float64).reshape((1,) * (4 - xv.ndim) + xv.shape)
    wb = np.repeat(np.repeat(wb, xb.shape[0] // wb.shape[0], axis=0), xb.shape[1] // wb.shape[1], axis=1)
    ref = np.einsum("abnk,abmk->abnm", xb, wb).reshape(xv.shape[:-1] + (wshape[-2],))
    return nmse(np.asarray(out), ref), kernels


def _k(wdt):   # a K covering several blocks / units and, for the 32-element types, an odd count
    return 512 if wdt in ("q4_K", "q6_K") else 224


@pytest.mark.parametrize("wdt", TYPES)
@pytest.mark.parametrize("matvec,rows", [("1", "2"), ("2", "1"), ("2", "2"), ("2", "4")])
@pytest.mark.parametrize("n", [1, 3])
def test_matvec(wdt, matvec, rows, n):
    """Decode-sized N: mul_mat_vec2 (wide loads, 1/2/4 rows per subgroup; M = 37 leaves a partial
    row group) or the earlier mul_mat_vec."""
    e, kernels = _run(wdt, (37, _k(wdt)), (n, _k(wdt)), {"matvec": matvec, "matvec_rows": rows})
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec2" if matvec == "2" else "mul_mat_vec"]


@pytest.mark.parametrize("wdt", TYPES)
def test_matvec_batched(wdt):
    """Weights broadcast over the activations' batch axes (r2 = 3, r3 = 2) in mul_mat_vec2."""
    k = _k(wdt)
    e, kernels = _run(wdt, (2, 1, 20, k), (2, 6, 2, k), {"matvec": "2", "matvec_rows": "4"}, seed=3)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec2"]


@pytest.mark.parametrize("mv", ["5", "6"])
def test_matvec3i_q4_K_batched(mv):
    """The int8 mat-vecs on q4_K weights broadcast over the activations' batch axes (r2 = 3, r3 = 2)."""
    e, kernels = _run("q4_K", (2, 1, 20, 512), (2, 6, 2, 512), {"matvec": mv, "matvec_q4_K": "1"}, seed=12)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_kernels(mv), kernels
    e, kernels = _run("q4_K", (2, 1, 20, 512), (2, 6, 2, 512), {"matvec": mv}, seed=12)   # the default: off
    assert e <= 5e-4 and kernels == ["mul_mat_vec2"], (e, kernels)


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("m,k,n", [(37, 256, 1), (37, 256, 4), (2048, 2048, 1), (259, 4096, 2), (101, 5632, 1),
                                   (4096, 4096, 1), (1000, 11008, 3), (32000, 2048, 1)])
@pytest.mark.parametrize("rows", ["1", "2", "4"])
def test_matvec3(wdt, m, k, n, rows):
    """matvec=3: mul_mat_vec3 (activations staged in shared memory, 8/16/32 rows per workgroup, K in
    256-element units and chunks of 16/8/4 units) at the models' K (2048, 4096, 5632 and 11008:
    partial last chunks), M not a multiple of the rows, 32000 rows (the vocabulary), N up to 4."""
    e, kernels = _run(wdt, (m, k), (n, k), {"matvec": "3", "matvec_rows": rows}, seed=m + k + n)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec3"]


INT8_KERNEL = {"5": "mul_mat_vec3i", "6": "mul_mat_vec3w", "7": "mul_mat_vec4"}


def _int_dot_want(kernel):
    """The kernel lists an int8 mat-vec node may log on this device: just `kernel` where the device is
    known to have shaderIntegerDotProduct (lavapipe, the CI device, and NVIDIA's driver), else either
    it or mul_mat_vec3 (the int8 kernels run as matvec=3 without the feature)."""
    desc = pg.get_device(VK).description
    return [[kernel]] if "llvmpipe" in desc or "NVIDIA" in desc else [[kernel], ["mul_mat_vec3"]]


def _int_dot_kernels(matvec="5"):
    """What matvec=5 / 6 / 7 may run here: mul_mat_vec3i / mul_mat_vec3w / mul_mat_vec4 (_int_dot_want)."""
    return _int_dot_want(INT8_KERNEL[matvec])


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0", "q4_K"])
@pytest.mark.parametrize("m,k,n", [(37, 256, 1), (37, 256, 4), (2048, 2048, 1), (259, 4096, 2), (101, 5632, 1),
                                   (1000, 11008, 3), (32000, 2048, 1)])
@pytest.mark.parametrize("rows", ["1", "2", "4"])
@pytest.mark.parametrize("mv", ["5", "6"])
def test_matvec3i(mv, wdt, m, k, n, rows):
    """matvec=5: mul_mat_vec3i, mul_mat_vec3 with the chunk's activations quantized to int8 blocks of 32
    while staged and dotted by OpSDot; within the int8 activations' error of numpy (as the CUDA
    plugin's int8 mat-vec), at the models' K, partial chunks, M not a multiple of the rows, N up to 4.
    matvec=6: mul_mat_vec3w, the same with the whole row staged once and each invocation's units
    walked two at a time (an odd count of them, one, several). q4_K: a unit is one block of 256, each
    32-element sub-block's integer dot scaled by its 6-bit scale, its min times the block's sum
    (option matvec_q4_K=1: off by default until a GPU has timed it)."""
    e, kernels = _run(wdt, (m, k), (n, k), {"matvec": mv, "matvec_rows": rows, "matvec_q4_K": "1"}, seed=m + k + n)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_kernels(mv), kernels


@pytest.mark.parametrize("m,k,n", [(37, 256, 1), (37, 256, 4), (2048, 2048, 1), (259, 4096, 2), (101, 5632, 1),
                                   (8192, 2048, 1), (300, 8192, 1)])
@pytest.mark.parametrize("rows", ["1", "2", "4"])
def test_matvec4(m, k, n, rows):
    """matvec=7: mul_mat_vec4 (q4_0): each subgroup loads a chunk of consecutive units of the
    workgroup's rows with consecutive 16-byte words per lane, through its region of shared memory;
    chunks that span rows (K = 256: one unit a row), that end mid-row (K = 5632: 22 units), rows
    past M in the last workgroup, N up to 4, 8/16/32 rows per workgroup."""
    e, kernels = _run("q4_0", (m, k), (n, k), {"matvec": "7", "matvec_rows": rows}, seed=m + k + n)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_kernels("7"), kernels


def test_matvec4_batched():
    """mul_mat_vec4 with the weights broadcast over the activations' batch axes (r2 = 3, r3 = 2)."""
    e, kernels = _run("q4_0", (2, 1, 20, 512), (2, 6, 2, 512), {"matvec": "7"}, seed=11)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_kernels("7"), kernels


def test_matvec4_needs_rows_back_to_back():
    """Weight rows with a gap between them (a view of the first 256 columns of 512-column rows) are
    not one run of bytes: matvec=7 runs them as 6 (mul_mat_vec3w), q8_0 too."""
    rng = np.random.default_rng(21)
    for wdt in ("q4_0", "q8_0"):
        g = pg.Graph()
        w, w64 = _weight(g, rng, wdt, (40, 512))
        bb = {"q4_0": 18, "q8_0": 34}[wdt]          # bytes per block of 32
        wv = pg.view(w, (40, 256), strides=(512 // 32 * bb, bb))
        xv = rng.standard_normal((1, 256)).astype(np.float32)
        out, kernels = _compute(pg.mul_mat(wv, g.input("x", (1, 256))), {"x": xv}, {"matvec": "7"}, "mul_mat '")
        ref = xv.astype(np.float64) @ w64[:, :256].T
        assert nmse(np.asarray(out), ref) <= 5e-4
        assert kernels in _int_dot_kernels("6"), kernels


@pytest.mark.parametrize("k,kernel", [(16384, "mul_mat_vec3w"), (16640, "mul_mat_vec3i")])
def test_matvec3w_row_limit(k, kernel):
    """mul_mat_vec3w holds rows up to K = 16384 in shared memory (64 units); a longer row runs
    mul_mat_vec3i (matvec=6 runs as 5 there)."""
    e, kernels = _run("q4_0", (40, k), (1, k), {"matvec": "6"}, seed=k)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_want(kernel), kernels


@pytest.mark.parametrize("mv", ["5", "6"])
def test_matvec3i_quantizes_blocks_apart(mv):
    """Each block of 32 activations gets its own scale: rows whose weights lie in one block only see
    that block's activations, 1000 times smaller than another block's (a row-wide scale would round
    them to zero); an all-zero block divides by nothing."""
    rng = np.random.default_rng(5)
    wf = (rng.standard_normal((64, 512)) * 0.5).astype(np.float32)
    wf[:32, :96] = 0.0
    wf[:32, 128:] = 0.0                              # rows 0..31: block 3 (columns 96..127) only
    blocks = pg.quantize(wf, "q8_0")
    w64 = pg.dequantize(blocks, "q8_0", wf.shape).astype(np.float64)
    g = pg.Graph()
    w = g.weight("w", blocks, type="q8_0", shape=wf.shape)
    xv = rng.standard_normal((1, 512)).astype(np.float32)
    xv[0, 32:64] *= 1000.0
    xv[0, 160:192] = 0.0
    out, kernels = _compute(pg.mul_mat(w, g.input("x", (1, 512))), {"x": xv}, {"matvec": mv}, "mul_mat '")
    ref = xv.astype(np.float64) @ w64.T
    got = np.asarray(out)
    assert np.all(np.isfinite(got))
    assert nmse(got[:, :32], ref[:, :32]) <= 5e-4, nmse(got[:, :32], ref[:, :32])
    assert nmse(got[:, 32:], ref[:, 32:]) <= 5e-4, nmse(got[:, 32:], ref[:, 32:])
    assert kernels in _int_dot_kernels(mv), kernels


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("m,k,n", [(37, 256, 4), (259, 4096, 2), (101, 5632, 1), (1000, 11008, 3)])
@pytest.mark.parametrize("rows", ["2", "4"])
def test_matvec3p(wdt, m, k, n, rows):
    """matvec=4: mul_mat_vec3p, mul_mat_vec3 with the next chunk's weights loaded before this chunk's
    dot: one chunk, several (2 to 11 at 16 / 32 rows per workgroup), a partial last one."""
    e, kernels = _run(wdt, (m, k), (n, k), {"matvec": "4", "matvec_rows": rows}, seed=m + k + n)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec3p"]


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
def test_matvec3_batched(wdt):
    """mul_mat_vec3 with the weights broadcast over the activations' batch axes (r2 = 3, r3 = 2)."""
    e, kernels = _run(wdt, (2, 1, 20, 512), (2, 6, 2, 512), {"matvec": "3"}, seed=11)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec3"]


@pytest.mark.parametrize("wdt,k", [("q4_0", 224), ("q8_0", 288), ("q4_K", 512), ("f16", 256)])
def test_matvec3_falls_back(wdt, k):
    """matvec=3 on what mul_mat_vec3 does not cover (K not a multiple of 256, other types): mul_mat_vec2."""
    e, kernels = _run(wdt, (37, k), (1, k), {"matvec": "3"}, seed=13)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec2"]


def test_matvec3_unaligned_activations():
    """Activation rows not on 16 bytes: neither wide-load kernel; the earlier one runs."""
    e, kernels = _run("q4_0", (19, 256), (2, 256), {"matvec": "3"}, x_offset=1, seed=17)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec"]


@pytest.mark.parametrize("wdt", ["q4_0", "q4_K", "f32"])
def test_matvec_unaligned_activations(wdt):
    """Activation rows that do not start on 16 bytes are outside mul_mat_vec2's layout: the earlier
    kernel runs them (the choice is per node, the option only allows the new one)."""
    e, kernels = _run(wdt, (19, _k(wdt)), (2, _k(wdt)), {}, x_offset=1, seed=5)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec"]


def _has_coopmat():
    try:
        pg.get_device(VK).set_option("gemm", "coopmat")
    except pg.PyggmlError:
        return False
    pg.get_device(VK).set_option("gemm", "auto")
    return True


def test_gemm_option_values():
    dev = pg.get_device(VK)
    for bad in ("fast", "", "COOPMAT"):
        with pytest.raises(pg.PyggmlError, match="gemm"):
            dev.set_option("gemm", bad)
    for key, bad in (("matvec", "8"), ("matvec", "0"), ("matvec_rows", "3"), ("matvec_rows", "8"), ("gemm_tile", "32"), ("gemm_v", "5"), ("fa_v", "-1"), ("fa_v", "5"), ("fa_wgs", "10"), ("fa_dec_wgs", "8"), ("fa_cm", "4"), ("fa_cm", "0")):
        with pytest.raises(pg.PyggmlError, match=key):
            dev.set_option(key, bad)


def _has_khr():
    """The device and this build run mul_mat_cm4 on VK_KHR_cooperative_matrix (cm_api=khr accepted)."""
    dev = pg.get_device(VK)
    try:
        dev.set_option("cm_api", "khr")
    except pg.UnsupportedError:
        return False
    dev.set_option("cm_api", "auto")
    return True


@pytest.mark.parametrize("wdt", TYPES)
@pytest.mark.parametrize("gemm", ["auto", "tiled", "coopmat", "cm_emulated"])
def test_gemm(wdt, gemm):
    """Prefill-sized N: gemm=auto picks the cooperative-matrix GEMM where the device has it and the
    tiled one elsewhere; gemm=coopmat is refused, with the reason, on a device without it;
    cm_emulated runs the cooperative-matrix kernel's tiling, dequantization and stores with the
    matrix primitives in plain GLSL (f16-rounded operands as on the tensor cores)."""
    cm = _has_coopmat()
    if gemm == "coopmat" and not cm:
        with pytest.raises(pg.UnsupportedError, match="cooperative_matrix"):
            pg.get_device(VK).set_option("gemm", "coopmat")
        return
    k = _k(wdt)
    # M and N not multiples of the 64x64 tiles, two batch axes broadcast over the weights
    e, kernels = _run(wdt, (2, 1, 70, k), (2, 3, 37, k), {"gemm": gemm}, seed=7)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    # gemm_v=0, the default: mul_mat_cm4's KHR build with f16 step sums where the device has
    # VK_KHR_cooperative_matrix (the H200: 128 x 64 tiles for 37 tokens, one shared-memory stage in
    # its 48 KiB, the k-quants through gemm_dq's f16 copy, the activations through gemm_b16's), else
    # mul_mat_cm3 (the emulation: always cm3)
    dq = " dq" if wdt.endswith("_K") else ""
    coop = "mul_mat_cm4 128x64.k64.w2x2.s1 khr f16acc4" + dq + " b16" if _has_khr() else "mul_mat_cm3"
    want = {"tiled": "mul_mat", "cm_emulated": "mul_mat_cm3_emu"}.get(gemm, coop if cm else "mul_mat")
    assert kernels == [want]


@pytest.mark.parametrize("wdt", ["q4_0", "q4_K", "f16"])
@pytest.mark.parametrize("tile", ["64", "128"])
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("ver", ["1", "2", "3"])
def test_gemm_tiles(wdt, tile, gemm, ver):
    """The cooperative-matrix GEMM's two workgroup tiles (gemm_tile) in its three builds (gemm_v: 2 the
    pipelined one, 1 the earlier, 3 mul_mat_cm3: tiles as 16-byte words), emulated everywhere and on the tensor cores where the device has
    them: M and N one past a tile and well inside one, weights broadcast over a batch axis; K = 256
    is 8 steps, so both shared-memory stages are written and read several times."""
    if gemm == "coopmat" and not _has_coopmat():
        pytest.skip("no VK_NV_cooperative_matrix on this device (the emulated case covers the kernel's logic)")
    want = ("mul_mat_cm" + ("" if ver == "1" else ver) + ("" if tile == "64" else "128" if ver == "1" else "_128")
            + ("_emu" if gemm == "cm_emulated" else ""))
    for wshape, xshape in (((129, 256), (130, 256)), ((3, 40, 256), (2, 3, 100, 256))):
        e, kernels = _run(wdt, wshape, xshape, {"gemm": gemm, "gemm_tile": tile, "gemm_v": ver}, seed=13)
        assert e <= 5e-4, f"NMSE {e:.3g} {wshape} {xshape}"
        if ver != "1" and tile == "128" and gemm == "cm_emulated":   # 44 KiB of shared memory: not on lavapipe (32 KiB)
            assert kernels[0] in (want, "mul_mat")
        else:
            assert kernels == [want]


@pytest.mark.parametrize("wdt", TYPES)
@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("x_offset", [0, 1])
def test_gemm3_types(wdt, gemm, x_offset):
    """gemm_v=3 (mul_mat_cm3.comp) over every weight type it dequantizes (q4_0 through its nibble
    pairs, q8_0 and q4_K through 16-element registers, the rest element by element), with activation
    rows read as 16-byte words (x_offset 0) and word by word (a view one float in: rows off 16 bytes)."""
    if gemm == "coopmat" and not _has_coopmat():
        pytest.skip("no VK_NV_cooperative_matrix on this device (the emulated case covers the kernel's logic)")
    k = _k(wdt)
    shapes = ((70, k), (37, k)) if x_offset else ((2, 1, 70, k), (2, 3, 37, k))   # (the view helper is 2-D)
    e, kernels = _run(wdt, *shapes, {"gemm": gemm, "gemm_v": "3", "gemm_tile": "64"}, x_offset=x_offset, seed=5)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_cm3" + ("_emu" if gemm == "cm_emulated" else "")]


@pytest.mark.parametrize("gemm", ["cm_emulated", "auto"])
def test_gemm_strided_activations(gemm):
    """Activation rows with a padded stride (a view into a wider input) and N = 65: one token
    past a 64-token tile."""
    e, kernels = _run("q4_0", (64, 256), (65, 256), {"gemm": gemm}, x_offset=4, seed=11)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels[0].startswith("mul_mat")


# ---------------------------------------------------------------- prefill attention

def prefill_fa_case(D, n_q, n_kv, kv_type, opts, H=4, Hk=2):
    """A prefill-shaped flash attention on VK with `opts`: causal mask with the queries at the end of the cache, a
    row that sees nothing, ALiBi slopes, GQA (H heads over Hk K/V heads), f16 or f32 K/V, the mask f32 where n_kv is
    72 (else f16); returns (NMSE against float64 numpy, the kernels the log named)."""
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(D * 1000 + n_q + n_kv)
    max_bias = 2.0
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kvt = {"f16": np.float16, "f32": np.float32}[kv_type]
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    pos = np.arange(n_kv - n_q, n_kv)
    mdt = np.float32 if n_kv == 72 else np.float16   # an f32 mask once (read element by element)
    mv = np.where(np.arange(n_kv)[None, :] <= pos[:, None], 0.0, -np.inf).astype(mdt)[None, None]
    mv[..., 3, :] = -np.inf                  # a query row with every key masked: output 0
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D), max_bias=max_bias)
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64),
                       mv.astype(np.float64), 1 / np.sqrt(D), max_bias, 0.0)
    assert ref.shape == (1, n_q, H, D)
    ref[:, 3] = 0.0                          # no key: numpy's softmax is NaN, the kernels write 0
    got, kernels = _compute(y, {"q": qv, "k": kv, "v": vv, "m": mv}, opts, "flash_attn '")
    return nmse(got, ref), kernels


@pytest.mark.parametrize("fa_cm", [1, 2, 3])
@pytest.mark.parametrize("fa", ["cm_emulated", "coopmat", "auto", "scalar"])
@pytest.mark.parametrize("D,n_q,n_kv,kv_type", [(64, 70, 200, "f16"), (48, 16, 64, "f16"), (64, 33, 130, "f32"),
                                                (128, 40, 100, "f16"), (64, 40, 100, "f16"), (32, 17, 72, "f16"),
                                                (64, 256, 256, "f16")])
def test_prefill_flash_attn(fa, D, n_q, n_kv, kv_type, fa_cm):
    """Prefill-shaped attention (n_q >= 16): causal mask with the queries at the end of the cache,
    a row that sees nothing, ALiBi slopes, GQA (4 heads over 2 K/V heads), partial 32-query and
    64-key blocks, mask rows on 16-byte boundaries or not (n_kv 100: 200 bytes; 72: an f32 mask), a square
    causal prefill whose upper 32 x 64 blocks are skipped; against float64 numpy. fa=cm_emulated runs flash_attn_cm.comp with its matrix
    primitives in plain GLSL (where its shared memory fits the device: D <= 64 on lavapipe);
    fa=coopmat runs it on the tensor cores (refused without them); fa=auto runs flash_attn_cm
    where the device has cooperative matrices (the NVIDIA driver), else flash_attn.comp; fa=scalar
    runs flash_attn.comp (the KV split off). fa_cm=2 runs flash_attn_cm2.comp instead of flash_attn_cm.comp
    where K and V are f16 (16-byte rows), fa_cm=3 (the default) the one-pass flash_attn_cm3.comp there, the
    first build with f32 K/V."""
    if fa == "scalar" and fa_cm >= 2:
        pytest.skip("fa=scalar runs neither tensor-core build")
    if fa == "coopmat" and not _has_coopmat():
        with pytest.raises(pg.UnsupportedError, match="cooperative_matrix"):
            pg.get_device(VK).set_option("fa", "coopmat")
        return
    # scalar: flash_attn.comp itself, with the KV split off (where a GPU takes the split, fa_v=3's
    # flash_attn_dec.comp would run instead: test_fa_dec); the tensor-core builds unsplit (fa_cm_wgs=0: the KV
    # splits are tests/test_vulkan_fa_prefill.py's)
    opts = {"fa": fa, "fa_split": "off"} if fa == "scalar" else {"fa": fa, "fa_cm": str(fa_cm), "fa_cm_wgs": "0"}
    e, kernels = prefill_fa_case(D, n_q, n_kv, kv_type, opts)
    assert e <= 5e-4, f"NMSE {e:.3g} ({kernels})"
    cm = {2: "flash_attn_cm2", 3: "flash_attn_cm3"}.get(fa_cm, "flash_attn_cm") if kv_type == "f16" else "flash_attn_cm"
    if fa == "scalar" or (fa == "auto" and not _has_coopmat()):
        assert kernels == ["flash_attn"]
    elif fa in ("coopmat", "auto"):
        assert kernels == [cm]
    elif D <= 64:
        assert kernels == [cm + "_emu"]
    else:
        assert kernels[0] in (cm + "_emu", "flash_attn")


@pytest.mark.parametrize("fa", ["cm_emulated", "coopmat"])
def test_prefill_flash_attn_past_the_chunk_bits(fa):
    """flash_attn_cm2 keeps pass 1's verdict for the first 1024 chunks (65536 keys); past them pass 2
    reads the chunk flag again. A KV of 1030 chunks with fully masked chunks on both sides of that
    line (3, 1026, 1028): skipped either way, the result against float64 numpy."""
    from pyggml.conformance import reference as R
    if fa == "coopmat" and not _has_coopmat():
        pytest.skip("no VK_NV_cooperative_matrix on this device")
    if fa == "cm_emulated" and "llvmpipe" in pg.get_device(VK).description:
        pytest.skip("llvmpipe ends a loop after 65535 iterations of an invocation, and the emulated matrix "
                    "products' loops pass that beyond about 60 chunks (both builds: NaN from 64 / 100 chunks)")
    rng = np.random.default_rng(7)
    D, H, n_q, n_kv = 32, 2, 16, 1030 * 64 - 20
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, 1, n_kv, D)).astype(np.float16)
    vv = rng.standard_normal((1, 1, n_kv, D)).astype(np.float16)
    mv = np.zeros((1, 1, n_q, n_kv), np.float16)
    for c in (3, 1026, 1028):
        mv[..., 64 * c:64 * (c + 1)] = -np.inf
    mv[..., 5, 64 * 1029:] = -np.inf          # one row without the last chunk
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D))
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64),
                       mv.astype(np.float64), 1 / np.sqrt(D), 0.0, 0.0)
    got, kernels = _compute(y, {"q": qv, "k": kv, "v": vv, "m": mv}, {"fa": fa, "fa_cm": "2"}, "flash_attn '")
    assert kernels and kernels[0].startswith("flash_attn_cm2"), kernels
    assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


def test_fa_option_values():
    dev = pg.get_device(VK)
    for bad in ("tiled", "", "fast"):
        with pytest.raises(pg.PyggmlError, match="fa"):
            dev.set_option("fa", bad)
    if not _has_coopmat():
        with pytest.raises(pg.UnsupportedError, match="cooperative_matrix"):
            dev.set_option("fa", "coopmat")


# ---------------------------------------------------------------- fusions

@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("n0", [48, 700])
@pytest.mark.parametrize("wg", ["off", "on"])
def test_add_rms_norm_mul_fusion(rows, n0, wg):
    """add -> rms_norm -> mul(w) (a layer's residual add and the next norm) runs as one dispatch that
    writes all three nodes (binding 6 carries the add's output), in the subgroup-per-row and the
    workgroup-per-row (norm_wg=on, GPUs) kernels. Against float64 numpy; the plan log shows one
    dispatch."""
    rng = np.random.default_rng(rows * 1000 + n0)
    xv, yv = (rng.standard_normal((rows, n0)).astype(np.float32) for _ in range(2))
    wv = rng.standard_normal((n0,)).astype(np.float32)
    g = pg.Graph()
    x, y, w = g.input("x", xv.shape), g.input("y", yv.shape), g.input("w", wv.shape)
    a = pg.add(x, y)
    nrm = pg.rms_norm(a, eps=1e-5)
    m = pg.mul(nrm, w)
    got, plans = _compute([a, nrm, m], {"x": xv, "y": yv, "w": wv}, {"norm_wg": wg}, "plan for graph")
    s = xv.astype(np.float64) + yv
    ref_n = s / np.sqrt(np.mean(s ** 2, axis=-1, keepdims=True) + 1e-5)
    assert nmse(got[0], s) <= 1e-7 and nmse(got[1], ref_n) <= 1e-7 and nmse(got[2], ref_n * wv) <= 1e-7
    assert plans[-1].startswith("1 dispatches"), plans


def _decode_model(tmp_path, wdt, seed):
    """A small synthetic LLaMA (n_embd 512, n_ff 1536: K multiples of 256) in wdt, and a function of
    device options giving its logits (a 5-token prefill, four decode steps) and the kernels its
    mul_mat nodes ran."""
    import pyggml.models as models
    from pyggml.synth import write_synth_model
    path = str(tmp_path / f"m-{wdt}.gguf")
    write_synth_model(path, dict(n_embd=512, n_layer=2, n_head=8, n_head_kv=4, n_ff=1536, n_vocab=4096), wdt,
                      seed=seed, progress=False)

    def logits(options):
        with _options_logged(options, "mul_mat '") as kernels:
            m = models.load(path, devices=[VK, "cpu"], n_ctx=64, progress=False)
            try:
                got = [m.prefill([1, 2, 3, 4, 5])] + [m.decode(tok) for tok in (7, 8, 9, 10)]
            finally:
                m.close()
        return got, set(kernels)
    return logits


@pytest.mark.parametrize("wdt", ["q4_0", "q8_0"])
def test_matvec3_model_decode(wdt, tmp_path):
    """A small synthetic LLaMA (n_embd 512, n_ff 1536: K multiples of 256) decodes with matvec=3 to
    the logits matvec=2 gives (every step), and its decode graph ran mul_mat_vec3."""
    run = _decode_model(tmp_path, wdt, 3)

    def logits(matvec):
        return run({"matvec": matvec})
    new, k3 = logits("3")
    old, k2 = logits("2")
    assert "mul_mat_vec3" in k3 and "mul_mat_vec3" not in k2, (k3, k2)
    for step, (a, b) in enumerate(zip(new, old)):
        assert nmse(a, b) <= 1e-6, f"step {step}: NMSE {nmse(a, b):.3g}"
    for mv in ("5", "6", "7"):                       # int8 activations: within mul_mat's NMSE threshold
        i8, k5 = logits(mv)
        kmv = "6" if mv == "7" and wdt == "q8_0" else mv   # mul_mat_vec4 is q4_0's: q8_0 runs as 6
        assert any(k[0] in k5 for k in _int_dot_kernels(kmv)), k5
        for step, (a, b) in enumerate(zip(i8, old)):
            assert nmse(a, b) <= 5e-4, f"step {step}: NMSE {nmse(a, b):.3g} with matvec={mv}"


def test_matvec3_q4_K_model_decode(tmp_path):
    """A small synthetic LLaMA in q4_K decodes with the int8 mat-vecs (matvec_q4_K=1; matvec=5, 6, the
    default, and 7, which runs q4_K as 6) to within mul_mat's NMSE threshold of the float mat-vec's
    logits (matvec=2, mul_mat_vec2), every step; matvec=3 keeps q4_K on mul_mat_vec2 (the float build
    has no q4_K), as does matvec_q4_K=0, the default."""
    run = _decode_model(tmp_path, "q4_K", 4)

    def logits(matvec, q4k="1"):
        return run({"matvec": matvec, "matvec_q4_K": q4k})
    old, k2 = logits("2")
    assert "mul_mat_vec2" in k2 and not any(k.startswith("mul_mat_vec3") for k in k2), k2
    _, k6 = logits("6", "0")   # the default: q4_K stays on mul_mat_vec2
    assert not any(k.startswith("mul_mat_vec3") for k in k6), k6
    _, k3 = logits("3")
    assert not any(k.startswith("mul_mat_vec3") for k in k3), k3
    for mv in ("5", "6", "7"):
        i8, k5 = logits(mv)
        assert any(k[0] in k5 for k in _int_dot_kernels("6" if mv == "7" else mv)), k5
        for step, (a, b) in enumerate(zip(i8, old)):
            assert nmse(a, b) <= 5e-4, f"step {step}: NMSE {nmse(a, b):.3g} with matvec={mv}"


@pytest.mark.parametrize("ver", ["1", "2"])
@pytest.mark.parametrize("split", ["off", "on"])
@pytest.mark.parametrize("D,n_q,n_kv,kv_type,softcap", [(64, 1, 320, "f16", 0.0), (33, 2, 200, "f16", 0.0),
                                                         (128, 1, 130, "f32", 0.0), (64, 3, 100, "f16", 30.0)])
def test_fa_v(ver, split, D, n_q, n_kv, kv_type, softcap):
    """flash_attn.comp's two builds: one invocation per key (fa_v=1) and flash_attn2 (fa_v=2: strided
    eighths of the K row summed through shared memory, subgroup reductions), with and without the
    decode KV split: the
    16-bit K path (even D, f16), the element path (odd D, f32 K), softcap, ALiBi, GQA, masked keys
    (the cache past the visible cells; with several rows, one that sees one key) and a partial last chunk."""
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(D * 7 + n_kv + n_q)
    H, Hk, max_bias = 4, 2, 2.0
    visible = n_kv - 37
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kvt = {"f16": np.float16, "f32": np.float32}[kv_type]
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    mv = np.full((1, 1, n_q, n_kv), -np.inf, np.float16)
    mv[..., :visible] = 0
    if n_q > 1:                              # the last row sees only key 5
        mv[..., -1, :] = -np.inf
        mv[..., -1, 5] = 0
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D), max_bias=max_bias, logit_softcap=softcap)
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64),
                       mv.astype(np.float64), 1 / np.sqrt(D), max_bias, softcap)
    dev = pg.get_device(VK)
    dev.set_option("fa_split", split)
    try:
        got, kernels = _compute(y, {"q": qv, "k": kv, "v": vv, "m": mv}, {"fa_v": ver}, "flash_attn '")
    finally:
        dev.set_option("fa_split", "auto")
    assert kernels == ["flash_attn2" if ver == "2" else "flash_attn"]
    assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


@pytest.mark.parametrize("D,H,Hk,n_q,n_kv,softcap,kv_type,kernel,wgs", [
    (64, 4, 2, 1, 320, 0.0, "f16", "flash_attn_dec", "4096"),      # 5 splits of 64 keys
    (64, 1, 1, 1, 40000, 0.0, "f16", "flash_attn_dec", "4096"),    # 625 splits: merged 512 at a time
    (128, 32, 8, 4, 2200, 0.0, "f16", "flash_attn_dec", "1024"),   # fa_wgs 1024: 8 splits of 5 chunks
    (128, 32, 8, 4, 2200, 0.0, "f16", "flash_attn_dec", "64"),     # 2 splits (the least)
    (128, 32, 8, 4, 2200, 0.0, "f16", "flash_attn_dec", "4096"),   # 18 splits of 2 chunks, the last partial
    (32, 4, 4, 3, 200, 30.0, "f16", "flash_attn_dec", "4096"),     # softcap, a row that sees one key
    (48, 4, 2, 1, 150, 0.0, "f16", "flash_attn", "4096"),          # D a multiple of 16, Dv not a power of two
    (64, 4, 2, 1, 320, 0.0, "f32", "flash_attn", "4096")])         # f32 K/V: not its layout
def test_fa_dec(D, H, Hk, n_q, n_kv, softcap, kv_type, kernel, wgs):
    """fa_v=3: decode attention over the KV split with the merge in the last workgroup of a row
    (flash_attn_dec.comp), against float64: ALiBi, GQA, masked cells holding NaN (a masked key's V
    must not reach the sum), several runs of one plan (the row counters start at 0 each time); where
    its layout does not hold the node keeps flash_attn.comp."""
    y, feeds, ref = fa_decode_case(D, H, Hk, n_q, n_kv, softcap, kv_type, "f16", 1, D + n_kv + n_q)
    dev = pg.get_device(VK)
    dev.set_option("fa_split", "on")
    try:
        with _options_logged({"fa_v": "3", "fa_wgs": wgs}, "flash_attn '") as kernels:
            sched = pg.Scheduler([VK], poison=True)
            runs = [sched.compute(y, feeds) for _ in range(3)]
    finally:
        dev.set_option("fa_split", "auto")
    assert set(kernels) == {kernel}
    for got in runs:
        assert nmse(got, ref) <= 5e-4, f"NMSE {nmse(got, ref):.3g}"


def fa_decode_case(D, H, Hk, n_q, n_kv, softcap, kv_type, mtype, mask_heads, seed):
    """A decode attention graph over random q, K, V of kv_type (the last 37 cells NaN and masked; with several query
    rows the last sees key 5 alone; ALiBi), its mask of mtype with mask_heads planes: (y, feeds, the float64 result)."""
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(seed)
    visible, max_bias = n_kv - 37, 2.0
    kvt = {"f16": np.float16, "f32": np.float32}[kv_type]
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(kvt)
    kv[:, :, visible:] = np.nan
    vv[:, :, visible:] = np.nan
    mv = np.full((1, mask_heads, n_q, n_kv), -np.inf, {"f16": np.float16, "f32": np.float32}[mtype])
    mv[..., :visible] = 0
    if n_q > 1:
        mv[..., -1, :] = -np.inf
        mv[..., -1, 5] = 0
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D), max_bias=max_bias, logit_softcap=softcap)
    k64, v64 = (np.nan_to_num(a[:, :, :visible].astype(np.float64)) for a in (kv, vv))
    ref = R.flash_attn(qv.astype(np.float64), k64, v64, mv[..., :visible].astype(np.float64), 1 / np.sqrt(D), max_bias, softcap)
    return y, {"q": qv, "k": kv, "v": vv, "m": mv}, ref


def test_fa_dec_model_decode(tmp_path):
    """A synthetic LLaMA decodes with fa_v=3 and the KV split on (every layer's attention one
    flash_attn_dec dispatch, the row counters zeroed at the start of each run of the plan) to the
    logits of flash_attn.comp's split and merge, step after step."""
    # matvec=3: float activations in the mat-vecs, so the attention kernels alone set the difference
    # (matvec=6 quantizes each row to int8: a 1e-11 change can move a rounding step, 6e-5 NMSE)
    l3, k3 = _model_logits(tmp_path, {"fa_v": "3", "fa_split": "on", "matvec": "3"}, "flash_attn '", 9, n_ctx=160, prompt=range(1, 70))
    l1, k1 = _model_logits(tmp_path, {"fa_v": "1", "fa_split": "on", "matvec": "3"}, "flash_attn '", 9, n_ctx=160, prompt=range(1, 70))
    assert "flash_attn_dec" in k3 and "flash_attn_dec" not in k1, (k3, k1)
    for a, b in zip(l3, l1):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-8


def test_gemm_dq_model_prefill(tmp_path):
    """A synthetic LLaMA's 40-token prefill with gemm_dq=1 (each quantized GEMM after a dequant.comp
    dispatch into the plan's scratch, one region shared by all of them) gives the logits of the
    direct path, then decodes on (mat-vecs: no copy)."""
    opts = {"gemm": "cm_emulated", "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "fa": "scalar"}
    l1, k1 = _model_logits(tmp_path, {**opts, "gemm_dq": "1"}, "mul_mat '", 11, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    l0, k0 = _model_logits(tmp_path, {**opts, "gemm_dq": "0"}, "mul_mat '", 11, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    assert any(k.endswith(" dq") for k in k1) and not any(k.endswith(" dq") for k in k0), (k1, k0)
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-6


def test_gemm_b16_model_prefill(tmp_path):
    """A synthetic LLaMA's 40-token prefill with gemm_b16=1 (the GEMMs' activations converted to f16 rows
    in the plan's scratch, one conversion for q/k/v and one for gate/up; with gemm_dq=1 the weights too;
    with gemm_bg=1 the activation fragments read from the copy, padded to whole tiles) gives the logits
    of the direct path, which rounds the activations to f16 the same way on their way into shared
    memory, then decodes on."""
    opts = {"gemm": "cm_emulated", "gemm_v": "4", "gemm_cfg": "64x64.k32.w2x2", "fa": "scalar"}
    l0, k0 = _model_logits(tmp_path, {**opts, "gemm_dq": "0"}, "mul_mat '", 12, n_ctx=64, prompt=range(1, 41), wdt="q4_0")
    for dq, bg in (("0", "0"), ("1", "0"), ("1", "1")):
        l1, k1 = _model_logits(tmp_path, {**opts, "gemm_dq": dq, "gemm_b16": "1", "gemm_bg": bg}, "mul_mat '", 12, n_ctx=64,
                               prompt=range(1, 41), wdt="q4_0")
        assert any(k.endswith(" b16" + (" bg" if bg == "1" else "")) for k in k1), k1
        assert not any(" b16" in k for k in k0), k0
        for a, b in zip(l1, l0):
            assert nmse(np.asarray(a), np.asarray(b)) <= 1e-6
