"""The cuBLAS prefill GEMM of the CUDA plugin (plugins/cuda/gemm_blas.cu).

Without a GPU (here and in CI): cuBLAS is never a link-time dependency of the plugin; the
host-side harness plugins/cuda/test/gemm_blas_host.cu checks the quant unit decoders the
dequantize-to-f16 kernel uses (against dequant_one), the per-node plans, whole nodes of every
weight type with the conversion kernels' element functions run as host loops and the GEMM done by
a fake libcublas (or a host model of our WMMA kernel), the search that opens libcublasLt beside
libcublas, and the fallbacks (not found, switched off).
With a CUDA device: mul_mat for N above the threshold for every weight type, broadcast batches
and a non-contiguous src1, against numpy, on whichever GEMM path the machine has.
"""
import contextlib
import os
import shutil
import subprocess

import numpy as np
import pytest

from _cuda import nmse as _nmse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "pyggml", "plugins", "libpyggml-cuda.so")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
CC = shutil.which("gcc") or shutil.which("cc")
TEST_DIR = os.path.join(ROOT, "plugins", "cuda", "test")

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: the CUDA plugin is not built here")


@needs_nvcc
def test_no_cublas_link_dependency():
    """cuBLAS is opened at run time: never NEEDED, and still exactly one exported symbol."""
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} missing: run `make plugins`")
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    assert "cublas" not in out.lower(), out
    names = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    assert [ln.split()[-1] for ln in names.splitlines() if ln.strip()] == ["pyg_plugin_get_api"]


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if NVCC is None or CC is None:
        pytest.skip("nvcc or a C compiler not found")
    d = tmp_path_factory.mktemp("gemm_blas")
    exe = str(d / "gemm_blas_host")
    r = subprocess.run([NVCC, "-O2", "-std=c++17", "-I", os.path.join(ROOT, "include"), "-I",
                        os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(TEST_DIR, "gemm_blas_host.cu"), "-ldl"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lib = d / "cuda" / "lib64"
    lib.mkdir(parents=True)
    src = os.path.join(TEST_DIR, "fake_cublas.c")
    r = subprocess.run([CC, "-shared", "-fPIC", "-DFAKE_LT", "-Wl,-soname,libcublasLt.so.13", "-o",
                        str(lib / "libcublasLt.so.13"), src], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CC, "-shared", "-fPIC", "-Wl,-soname,libcublas.so.13", "-O2", "-o", str(lib / "libcublas.so.13"),
                        src, str(lib / "libcublasLt.so.13")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe, str(lib / "libcublas.so.13")


def _run(exe, mode, *options, **env):
    """Run the harness in `mode` with device options ("blas=0", "blas_lib=PATH") and extra env."""
    return subprocess.run([exe, mode, *options], capture_output=True, text=True, env=dict(os.environ, **env),
                          timeout=120)


def test_unit_decoders_and_scale(harness):
    r = _run(harness[0], "decoders")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok decoder type") == 10 and "ok decoders" in r.stdout, r.stdout


def test_plans(harness):
    r = _run(harness[0], "plans")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok plans" in r.stdout


def test_gemm_calls_through_fake_cublas(harness):
    """Broadcast batches (folded into N or one call per sub-batch), strided weights, permuted src1,
    padded and strided dst: the GEMM arguments gemm_blas.cu computes give numpy's result. The fake
    library's libcublasLt dependency resolves only because gemm_blas.cu opens it from the same
    directory first (that directory is not on the loader path)."""
    exe, fake = harness
    r = _run(exe, "gemm", f"blas_lib={fake}")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok gemm ") == 7, r.stdout
    assert "through cuBLAS 13.0.99" in r.stdout and fake in r.stdout, r.stdout


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cublas", "wmma"])
def test_whole_nodes_on_the_host(harness, backend):
    """Every weight type through gemm_blas_launch with the conversion kernels' element functions run
    as host loops: plain, broadcast, transposed src1, transposed dst (staged), weights in chunks,
    K not a multiple of 32, activations of 1e6 and 1e-7 (the f16 scale) -- against double precision
    on the original weights. GEMM by the fake cuBLAS, or by the host model of our WMMA kernel
    (which also checks that kernel's alignment/padding requirements)."""
    exe, fake = harness
    if backend == "cublas":
        r = _run(exe, "pipeline", "blas_chunk_mb=1", f"blas_lib={fake}")
    else:
        r = _run(exe, "pipeline", "blas_chunk_mb=1", "blas=0", FAKE_MMA="1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok gemm ") == 45 and "ok pipeline" in r.stdout, r.stdout


def test_fallbacks_are_logged(harness):
    exe, fake = harness
    lib = f"blas_lib={fake}"
    r = _run(exe, "scratch", lib)
    assert r.returncode == 0 and int(r.stdout.split("scratch ")[1]) > 32 << 20, r.stdout
    r = _run(exe, "scratch", lib, "blas=0")
    assert "scratch 0" in r.stdout and "option blas=0" in r.stdout, r.stdout
    r = _run(exe, "scratch", "blas_lib=" + os.path.join(os.path.dirname(fake), "libcublas.so.99"))
    assert "scratch 0" in r.stdout and "cuBLAS not found" in r.stdout, r.stdout
    # without cuBLAS, our WMMA kernel takes the GEMM on the same converted operands (no workspace)
    r = _run(exe, "scratch", lib, "blas=0", FAKE_MMA="1")
    assert 0 < int(r.stdout.split("scratch ")[1]) < 32 << 20, r.stdout
    r = _run(exe, "scratch", lib, "blas_min_n=65")
    assert "scratch 0" in r.stdout, r.stdout   # N = 64 is below the threshold
    r = _run(exe, "scratch", "blas_min_n=zero")
    assert r.returncode == 2 and "blas_min_n" in r.stderr, r.stderr   # the option parser refuses it


# ---------------------------------------------------------------- on a CUDA device

@contextlib.contextmanager
def _options(dev, **opts):
    """Device options for plans created inside the block; the defaults again afterwards."""
    import pyggml as pg
    d = pg.get_device(dev)
    for k, v in opts.items():
        d.set_option(k, v)
    try:
        yield
    finally:
        for k in opts:
            d.set_option(k, _DEFAULTS[k])


_DEFAULTS = {"blas": 1, "blas_chunk_mb": 128, "mmq": 1}


@pytest.fixture(params=["cublas", "builtin"])
def cuda(request):
    """(pyggml, "cuda:N"), with prefill GEMMs through cuBLAS where it opens, or (option blas=0) our
    WMMA kernel on the converted operands (zero-padded K, f16 with the activation scale, bf16)."""
    pg = pytest.importorskip("pyggml")
    dev = next((str(d) for d in pg.devices() if str(d).startswith("cuda")), None)
    if dev is None:
        pytest.skip("no CUDA device here")
    # mmq=0: quantized weights too take the converted-operand GEMM here (the int8 GEMM over repacked
    # weights is tests/test_cuda_repack.py's)
    with _options(dev, blas=int(request.param == "cublas"), mmq=0):
        yield pg, dev



def _bf16(a):
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _weight(pg, g, rng, wtype, shape):
    """(graph weight, float64 values) of a [.., M, K] weight of wtype."""
    wf = rng.standard_normal(shape).astype(np.float32)
    if wtype in ("q4_0", "q4_1", "q8_0", "q4_K", "q6_K"):
        flat = wf.reshape(-1, shape[-1])
        blocks = pg.quantize(flat, wtype)
        wd = pg.dequantize(blocks, wtype, flat.shape).astype(np.float64).reshape(shape)
        return g.weight("w", blocks, type=wtype, shape=shape), wd
    if wtype == "bf16":
        bits = _bf16(wf)
        return g.weight("w", bits, type="bf16", shape=shape), (bits.astype(np.uint32) << 16).view(np.float32) \
            .astype(np.float64)
    wv = wf.astype(np.float16) if wtype == "f16" else wf
    return g.weight("w", wv), wv.astype(np.float64)


WTYPES = ["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_K", "q6_K"]


_SHAPES = [(n, 96, 512) for n in (32, 77, 512)] + [(45, 300, 256)]


@pytest.mark.parametrize("wtype", WTYPES)
@pytest.mark.parametrize("n,M,K", _SHAPES + [(40, 70, 67)])
def test_gemm_on_cuda(wtype, n, M, K, cuda):
    if K % 32 and wtype not in ("f32", "f16", "bf16"):
        pytest.skip("K must be a multiple of the block size")
    pg, dev = cuda
    rng = np.random.default_rng(n)
    g = pg.Graph()
    w, wd = _weight(pg, g, rng, wtype, (M, K))
    x = (rng.standard_normal((n, K)) * 3).astype(np.float32)
    xi = g.input("x", x.shape, pg.f32)
    out = pg.Scheduler([dev]).compute(pg.mul_mat(w, xi), {"x": x})
    ref = x.astype(np.float64) @ wd.T
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


@pytest.mark.parametrize("wtype", ["f16", "q4_K", "f32"])
def test_gemm_broadcast_and_noncontiguous_src1_on_cuda(wtype, cuda):
    """weights [2, M, K] against activations [2, 3*2, N, K] (r2 = 3, r3 = 2) given transposed
    (permute of [.., K, N] data), so src1's rows are strided."""
    pg, dev = cuda
    rng = np.random.default_rng(11)
    M, K, N = 64, 256, 48
    g = pg.Graph()
    w, wd = _weight(pg, g, rng, wtype, (2, M, K))
    xt = rng.standard_normal((2, 6, K, N)).astype(np.float32)
    xi = g.input("xt", xt.shape, pg.f32)
    x = pg.permute(xi, (0, 1, 3, 2))           # [2, 6, N, K], not contiguous
    out = pg.Scheduler([dev]).compute(pg.mul_mat(w, x), {"xt": xt})
    xv = np.swapaxes(xt, -1, -2).astype(np.float64)
    ref = np.empty((2, 6, N, M))
    for i3 in range(2):
        for i2 in range(6):
            ref[i3, i2] = xv[i3, i2] @ wd[i2 // 3].T
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


@pytest.mark.parametrize("scale", [1e6, 1e-6])
def test_gemm_extreme_activations_on_cuda(scale, cuda):
    """Activations far beyond f16's range (1e6) or deep in its subnormals (1e-6 * N(0,1)): the f16
    path scales them by a power of two into [2^14, 2^15)."""
    pg, dev = cuda
    rng = np.random.default_rng(5)
    M, K, N = 64, 256, 40
    g = pg.Graph()
    w, wd = _weight(pg, g, rng, "q8_0", (M, K))
    x = (rng.standard_normal((N, K)) * scale).astype(np.float32)
    xi = g.input("x", x.shape, pg.f32)
    out = pg.Scheduler([dev]).compute(pg.mul_mat(w, xi), {"x": x})
    ref = x.astype(np.float64) @ wd.T
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


def test_gemm_graph_replay_on_cuda(cuda):
    """The same plan four times (direct, captured, replayed twice) with new activations each time."""
    pg, dev = cuda
    rng = np.random.default_rng(9)
    M, K, N = 128, 256, 64
    g = pg.Graph()
    w, wd = _weight(pg, g, rng, "q4_0", (M, K))
    xi = g.input("x", (N, K), pg.f32)
    y = pg.mul_mat(w, xi)
    s = pg.Scheduler([dev])
    for i in range(4):
        x = rng.standard_normal((N, K)).astype(np.float32) * (10.0 ** i)
        out = s.compute(y, {"x": x})
        assert _nmse(out, x.astype(np.float64) @ wd.T) < 5e-4, f"compute #{i + 1}"


def test_gemm_weight_chunks_on_cuda(cuda):
    """Weights converted in chunks of 1 MiB (option blas_chunk_mb=1: 1024 rows of K = 512, the last
    chunk partial), with dim-2 weight batches and strided f16 rows."""
    pg, dev = cuda
    rng = np.random.default_rng(3)
    with _options(dev, blas_chunk_mb=1):
        for wtype, b2, B2 in (("q4_0", 1, 1), ("q6_K", 2, 4), ("f16", 1, 1)):
            M, K, N = 2500, 512, 64
            wf = rng.standard_normal((b2, M, K)).astype(np.float32)
            g = pg.Graph()
            if wtype == "f16":
                wd = wf.astype(np.float16)
                # rows with a stride (a view of a wider matrix): cuBLAS cannot read them in place
                wide = g.weight("wide", np.concatenate([wd, wd[..., :32]], axis=-1))
                w = pg.view(wide, (b2, M, K), strides=(M * (K + 32) * 2, (K + 32) * 2, 2))
                wd = wd.astype(np.float64)
            else:
                blocks = pg.quantize(wf.reshape(-1, K), wtype)
                wd = pg.dequantize(blocks, wtype, (b2 * M, K)).astype(np.float64).reshape(b2, M, K)
                w = g.weight("w", blocks, type=wtype, shape=(b2, M, K))
            x = rng.standard_normal((B2, N, K)).astype(np.float32)
            xi = g.input("x", x.shape, pg.f32)
            out = pg.Scheduler([dev]).compute(pg.mul_mat(w, xi), {"x": x})
            ref = np.stack([x[i].astype(np.float64) @ wd[i // (B2 // b2)].T for i in range(B2)])
            assert np.all(np.isfinite(out)), wtype
            assert _nmse(out, ref) < 5e-4, wtype
