"""The CUDA prefill flash attention on tensor cores with an online softmax (plugins/cuda/fattn_mma.cuh,
device option fa_mma=2) without a GPU: its kernel body runs on emulated thread blocks whose mma.sync and
ldmatrix follow the PTX ISA's fragment layouts (plugins/cuda/test/simt_host.h), against a
double-precision attention (plugins/cuda/test/fattn_mma_host.cu: head sizes, grouped queries, partial
blocks and tiles, batches, causal masks at depth, holes, a row that sees nothing, softcap, ALiBi).
On a CUDA device (skipped without one): the op with each fa_mma setting (0 the FFMA kernel, 1 the
two-pass WMMA kernel, 2 this one, 3 this one with one barrier per tile for 64-wide heads) over prefill shapes at depth, and a model's prefill logits at depth
against the float64 reference."""
import contextlib
import os
import shutil
import subprocess

import numpy as np
import pytest

from _cuda import cuda_device as _cuda_device, depth_model as _depth_model, nmse as _nmse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def test_online_softmax_kernel_on_emulated_blocks(tmp_path):
    if NVCC is None:
        pytest.skip("nvcc not found: the host harness is built with it")
    exe = str(tmp_path / "fattn_mma_host")
    r = subprocess.run([NVCC, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "include"), "-I",
                        os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(ROOT, "plugins", "cuda", "test", "fattn_mma_host.cu"), "-lpthread"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("ok  ") == 12 and "FAIL" not in r.stderr, r.stderr


# ---------------------------------------------------------------- on a CUDA device

@contextlib.contextmanager
def _fa_mma(pg, dev, value):
    d = pg.get_device(dev)
    try:
        d.set_option("fa_mma", str(value))
        yield
    finally:
        d.set_option("fa_mma", "2")


def _mask(rng, kind, n_q, n_kv, dtype):
    m = np.zeros((1, 1, n_q, n_kv), np.float32)
    if kind.startswith("causal:"):                       # a cache at depth: query i sees cells <= depth + i
        depth = int(kind.split(":")[1])
        for i in range(n_q):
            m[0, 0, i, depth + i + 1:] = -np.inf
    elif kind.startswith("holes:"):
        m[rng.random(m.shape) < float(kind.split(":")[1])] = -np.inf
        m[..., 0] = 0.0
    return m.astype(dtype)


@pytest.mark.parametrize("fa_mma", [2, 1, 0])
@pytest.mark.parametrize("D,H,Hkv,n_q,n_kv,kind,mdtype", [
    (64, 32, 8, 512, 4608, "causal:4096", np.float16),     # the 1b layout, a ubatch at depth 4096
    (128, 32, 32, 512, 1024, "causal:512", np.float16),    # the 7b layout
    (64, 8, 2, 100, 300, "holes:0.6", np.float16),
    (128, 4, 4, 70, 200, "none", np.float16),
    (64, 4, 2, 48, 129, "causal:81", np.float32),          # f32 mask: fa_mma=2 leaves it to the others
])
def test_prefill_flash_attention_on_cuda(fa_mma, D, H, Hkv, n_q, n_kv, kind, mdtype):
    pg, dev = _cuda_device()
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(D + H + n_kv + n_q)
    kv_ = rng.standard_normal((2, 1, Hkv, n_kv, D)).astype(np.float16)
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    g = pg.Graph()
    q = g.input("q", qv.shape, pg.dtype(qv.dtype))
    k = g.input("k", kv_[0].shape, pg.dtype(np.float16))
    v = g.input("v", kv_[1].shape, pg.dtype(np.float16))
    feeds = {"q": qv, "k": kv_[0], "v": kv_[1]}
    mv = None
    if kind != "none":
        mv = _mask(rng, kind, n_q, n_kv, mdtype)
        m = g.input("m", mv.shape, pg.dtype(mv.dtype))
        feeds["m"] = mv
    else:
        m = None
    scale = 1.0 / np.sqrt(D)
    y = pg.flash_attn_ext(q, k, v, m, scale=scale)
    with _fa_mma(pg, dev, fa_mma):
        out = pg.Scheduler([dev]).compute(y, feeds)
    m64 = mv.astype(np.float64) if mv is not None else None
    ref = R.flash_attn(qv.astype(np.float64), kv_[0].astype(np.float64), kv_[1].astype(np.float64), m64, scale, 0.0, 0.0)
    assert np.isfinite(out).all()
    assert _nmse(out, ref) < 5e-4


@pytest.fixture(scope="module")
def depth_model(tmp_path_factory):
    return _depth_model(tmp_path_factory.mktemp("fattn_mma_model"), 12)


@pytest.mark.parametrize("fa_mma", [2, 1])
def test_model_prefill_at_depth_on_cuda(depth_model, fa_mma):
    """1000 tokens prefilled in ubatches of 256 (each at the depth of the ones before), then 40 more:
    the last logits of each against the float64 reference."""
    pg, dev = _cuda_device()
    import pyggml.models as models
    from test_llama import NMSE_LIMIT, nmse
    path, toks, ref = depth_model
    with _fa_mma(pg, dev, fa_mma):
        m = models.load(path, devices=[dev, "cpu"], n_ctx=1280, n_ubatch=256, progress=False)
        try:
            errs = [nmse(m.prefill(toks[:1000]), ref[999]), nmse(m.prefill(toks[1000:]), ref[1039])]
        finally:
            m.close()
    assert max(errs) < NMSE_LIMIT, ["%.1e" % e for e in errs]
