"""The CUDA plugin's repacked-weight paths (plugins/cuda/repack.cu: the decode mat-vec of mmv_rp.cuh and
the prefill int8 GEMM of mmq.cuh) and NaN in its int8 activations.

Without a GPU (here and in CI): plugins/cuda/test/rp_host.cu repacks random blocks with the kernel's
own job items and checks every weight, then runs the two kernel bodies on emulated thread blocks
against double-precision dots of the same int8 activations, NaN blocks included.
With a CUDA device: mul_mat on quantized weights through each path, chosen with the device options
repack / mmq (repack=0 is the block-reading path of before), against numpy: the int8 paths tightly,
against an emulation of their own activation quantization; the f16/cuBLAS path by NMSE. A NaN in an
activation block must give NaN outputs on every path (it used to vanish in the int8 quantizers)."""
import contextlib
import gc
import os
import shutil
import subprocess

import numpy as np
import pytest

from _cuda import cuda_device as _cuda, nmse as _nmse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)
QTYPES = ["q4_0", "q8_0", "q4_K", "q6_K"]
DEFAULTS = {"repack": "1", "mmq": "1", "pdl": "1", "mmv_nb": "0"}


@pytest.fixture(scope="module")
def rp_host(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found: the host harness is built with it")
    exe = str(tmp_path_factory.mktemp("rp_host") / "rp_host")
    r = subprocess.run([NVCC, "-std=c++17", "-O1", "-I", os.path.join(ROOT, "include"), "-I",
                        os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(ROOT, "plugins", "cuda", "test", "rp_host.cu"), "-lpthread"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.parametrize("qtype,type_id", [("q4_0", 2), ("q8_0", 8), ("q4_K", 12), ("q6_K", 14)])
def test_repacked_kernels_on_host(rp_host, qtype, type_id):
    r = subprocess.run([rp_host, str(type_id)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stderr.count("mat-vec K") == 4 and r.stderr.count("gate/up/swiglu") == 5, r.stderr
    assert r.stderr.count("q/k/v + rope + cache") == (6 if qtype == "q4_K" else 3), r.stderr  # q4_K: + q6_K v
    assert r.stderr.count("int8 GEMM") == 2, r.stderr


# ---------------------------------------------------------------- on a CUDA device

@contextlib.contextmanager
def _options(pg, dev, **opts):
    d = pg.get_device(dev)
    try:
        for k, v in opts.items():
            d.set_option(k, str(v))
        yield
    finally:
        for k, v in DEFAULTS.items():
            d.set_option(k, v)


def _blocks32(x):
    """(rows, K) -> (rows, K/32, 32) float32"""
    return np.asarray(x, np.float32).reshape(x.shape[0], -1, 32)


def _q8_matvec(x):
    """The mat-vec's activation quantizer (warp_quant_block), in float32 like the device: (q, d)."""
    b = _blocks32(x)
    amax = np.where(np.isnan(b), np.float32(np.inf), np.abs(b)).max(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(np.isfinite(amax), amax / np.float32(127), np.float32(np.nan)).astype(np.float32)
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        v = b * inv[..., None]
    q = np.where(np.isnan(v), 0, np.rint(v)).astype(np.int64)
    return q, d


def _q8_mmq(x):
    """The int8 GEMM's activation quantizer (mmq_block_scale): d rounded up to 21 significant bits."""
    b = _blocks32(x)
    amax = np.where(np.isnan(b), np.float32(np.inf), np.abs(b)).max(axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    u = d.view(np.uint32)
    fin = np.isfinite(d)
    d = np.where(fin, ((u + 7) & ~np.uint32(7)).view(np.float32), np.float32(np.nan)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = np.where((d > 0) & fin, np.float32(1) / d, np.float32(0)).astype(np.float32)
        v = b * inv[..., None]
    q = np.where(np.isnan(v), 0, np.rint(v)).astype(np.int64)
    return q, d


def _int8_reference(wd, q, d):
    """sum_k w[m, k] d[c, k/32] q[c, k] in float64, and the magnitude sum of |terms| (for tolerances)."""
    xq = (q * d[..., None].astype(np.float64)).reshape(q.shape[0], -1)
    with np.errstate(invalid="ignore"):
        return xq @ wd.T, np.abs(xq) @ np.abs(wd).T


def _weight(pg, rng, qtype, M, K, scale=1.0):
    blocks = pg.quantize((rng.standard_normal((M, K)) * scale).astype(np.float32), qtype)
    return blocks, pg.dequantize(blocks, qtype, (M, K)).astype(np.float64)


def _mul_mat_runs(pg, dev, qtype, blocks, M, K, x, **opts):
    """mul_mat(W, x) computed three times (direct, capture, replay) under the device options opts."""
    g = pg.Graph()
    w = g.weight("w", blocks, type=qtype, shape=(M, K))
    y = pg.mul_mat(w, g.input("x", x.shape, pg.f32))
    with _options(pg, dev, **opts):
        s = pg.Scheduler([dev])
        return [s.compute(y, {"x": x}) for _ in range(3)]


def test_device_options_are_checked():
    pg, dev = _cuda()
    d = pg.get_device(dev)
    for key in ("repack", "mmq", "pdl"):
        with pytest.raises(pg.PyggmlError, match=key):
            d.set_option(key, "2")
    with pytest.raises(pg.PyggmlError, match="mmv_nb"):
        d.set_option("mmv_nb", "3")
    with pytest.raises(pg.UnsupportedError, match="no_such"):
        d.set_option("no_such", "1")
    for k, v in DEFAULTS.items():
        d.set_option(k, v)


MATVEC_SHAPES = [(300, 512), (77, 5632), (130, 14336), (40, 24576), (9, 32768)]


@pytest.mark.parametrize("mode", ["repack", "blocks"])
@pytest.mark.parametrize("M,K", MATVEC_SHAPES, ids=[f"{m}x{k}" for m, k in MATVEC_SHAPES])
@pytest.mark.parametrize("qtype", QTYPES)
def test_decode_matvec(qtype, M, K, mode):
    """One activation column: the repacked mat-vec (K <= 24576; beyond it the block kernel) or, with
    repack=0, the block-reading one; both against the same int8 activations in float64. q6_K without
    the repack runs the float mat-vec (its default), checked by NMSE."""
    pg, dev = _cuda()
    rng = np.random.default_rng(M + K)
    blocks, wd = _weight(pg, rng, qtype, M, K)
    x = rng.standard_normal((1, K)).astype(np.float32)
    for out in _mul_mat_runs(pg, dev, qtype, blocks, M, K, x, repack=1 if mode == "repack" else 0):
        assert out.shape == (1, M) and np.all(np.isfinite(out))
        if qtype == "q6_K" and (mode == "blocks" or K > 24576):   # q6_K's float mat-vec
            assert _nmse(out, x.astype(np.float64) @ wd.T) < 5e-4
            continue
        ref, mag = _int8_reference(wd, *_q8_matvec(x))
        np.testing.assert_array_less(np.abs(out - ref), 1e-5 * mag + 1e-6)


GEMM_SHAPES = [(9, 1), (77, 3), (300, 1)]


@pytest.mark.parametrize("mode", ["mmq", "cublas"])
@pytest.mark.parametrize("N,B2", GEMM_SHAPES, ids=[f"{n}x{b}" for n, b in GEMM_SHAPES])
@pytest.mark.parametrize("qtype", QTYPES)
def test_prefill_gemm(qtype, N, B2, mode):
    """N > 8 columns (over B2 batches sharing the weight): the int8 GEMM against its own activation
    quantization in float64, tightly; with mmq=0 the dequantize + cuBLAS (or built-in) GEMM by NMSE.
    K = 480 for q4_0/q8_0 leaves a partial 128-wide k step."""
    pg, dev = _cuda()
    rng = np.random.default_rng(N * 7 + B2)
    M = 200
    K = 512 if qtype in ("q4_K", "q6_K") else 480
    blocks, wd = _weight(pg, rng, qtype, M, K)
    x = rng.standard_normal((B2, N, K)).astype(np.float32)
    x[:, 3] *= 1000.0                                      # one token with a much larger range
    for out in _mul_mat_runs(pg, dev, qtype, blocks, M, K, x, mmq=1 if mode == "mmq" else 0):
        assert out.shape == (B2, N, M) and np.all(np.isfinite(out))
        if mode == "mmq":
            ref, mag = _int8_reference(wd, *_q8_mmq(x.reshape(B2 * N, K)))
            np.testing.assert_array_less(np.abs(out.reshape(B2 * N, M) - ref), 2e-6 * mag + 1e-6)
        else:
            assert _nmse(out, np.einsum("bnk,mk->bnm", x.astype(np.float64), wd)) < 5e-4


@pytest.mark.parametrize("path", ["matvec-repack", "matvec-blocks", "matvec-2cols", "gemm-mmq", "gemm-cublas"])
@pytest.mark.parametrize("qtype", QTYPES)
def test_nan_activation_propagates(qtype, path):
    """A NaN in one activation block gives NaN in every output that reads it, as the f32 path does
    (before the fix the int8 quantizers dropped it: max(|x|) ignored NaN and the block became zeros);
    the other columns stay finite and right."""
    pg, dev = _cuda()
    rng = np.random.default_rng(5)
    M, K = 96, 512
    N = {"matvec-repack": 1, "matvec-blocks": 1, "matvec-2cols": 2}.get(path, 40)
    blocks, wd = _weight(pg, rng, qtype, M, K)
    x = rng.standard_normal((N, K)).astype(np.float32)
    x[N - 1, 70] = np.nan                                  # the last column, its third block
    opts = {"matvec-blocks": {"repack": 0}, "gemm-cublas": {"mmq": 0}}.get(path, {})
    for out in _mul_mat_runs(pg, dev, qtype, blocks, M, K, x, **opts):
        assert np.all(np.isnan(out[N - 1])), out[N - 1]
        if N > 1:
            assert np.all(np.isfinite(out[:N - 1]))
            assert _nmse(out[:N - 1], x[:N - 1].astype(np.float64) @ wd.T) < 5e-4


@pytest.mark.parametrize("qtype", ["q4_0", "q4_K"])
def test_nan_through_fused_decode_producers(qtype):
    """The decode fusions quantize inside the producer (add+rms_norm*w, swiglu): a NaN in the residual
    stream must reach the mat-vec outputs as NaN, not as zeros."""
    pg, dev = _cuda()
    rng = np.random.default_rng(8)
    n, f = 512, 768
    x = rng.standard_normal((1, n)).astype(np.float32)
    x[0, 100] = np.nan
    y = rng.standard_normal((1, n)).astype(np.float32)
    g = pg.Graph()
    xi, yi = g.input("x", x.shape, pg.f32), g.input("y", y.shape, pg.f32)
    h = pg.mul(pg.rms_norm(pg.add(xi, pg.silu(yi)), eps=1e-5), g.weight("nw", rng.standard_normal(n).astype(np.float32)))
    (bg, _), (bu, _), (bd, _) = (_weight(pg, rng, qtype, r, c) for r, c in ((f, n), (f, n), (n, f)))
    gate = pg.mul_mat(g.weight("g", bg, type=qtype, shape=(f, n)), h)
    up = pg.mul_mat(g.weight("u", bu, type=qtype, shape=(f, n)), h)
    out = pg.mul_mat(g.weight("d", bd, type=qtype, shape=(n, f)), pg.swiglu(gate, up))
    s = pg.Scheduler([dev])
    for _ in range(3):
        got = s.compute(out, {"x": x, "y": y})
        assert np.all(np.isnan(got)), got


@pytest.mark.parametrize("mode", ["repack", "blocks"])
@pytest.mark.parametrize("f,up_first", [(768, False), (768, True), (744, False)])
@pytest.mark.parametrize("qtype", QTYPES)
def test_gate_up_swiglu_launch(qtype, f, up_first, mode):
    """gate and up mat-vecs and their swiglu run as one launch over repacked weights (f % 32 == 0),
    whichever of the two comes first in the plan, which also writes the down mat-vec's int8
    activations; gate and up stay readable by other nodes (all four are outputs here). f = 744 and
    repack=0 take the separate launches."""
    pg, dev = _cuda()
    rng = np.random.default_rng(f)
    n = 512
    x = rng.standard_normal((1, n)).astype(np.float32)
    (bg, dg), (bu, du) = (_weight(pg, rng, qtype, r, c, 0.3) for r, c in ((f, n), (f, n)))
    if f % pg.dtype(qtype).block_size == 0:
        bd, dd = _weight(pg, rng, qtype, n, f, 0.3)
    else:                       # the down projection's K = f is no whole number of blocks: an f16 weight
        bd = (rng.standard_normal((n, f)) * 0.3).astype(np.float16)
        dd = bd.astype(np.float64)
    g = pg.Graph()
    xi = g.input("x", x.shape, pg.f32)
    h = pg.scale(xi, 1.0)
    if up_first:
        up = pg.mul_mat(g.weight("u", bu, type=qtype, shape=(f, n)), h)
        gate = pg.mul_mat(g.weight("g", bg, type=qtype, shape=(f, n)), h)
    else:
        gate = pg.mul_mat(g.weight("g", bg, type=qtype, shape=(f, n)), h)
        up = pg.mul_mat(g.weight("u", bu, type=qtype, shape=(f, n)), h)
    sw = pg.swiglu(gate, up)
    down = pg.mul_mat(g.weight("d", bd, type=qtype, shape=(n, f)) if bd.dtype == np.uint8 else g.weight("d", bd), sw)
    x64 = x.astype(np.float64)
    rg, ru = x64 @ dg.T, x64 @ du.T
    rs = rg / (1 + np.exp(-rg)) * ru
    with _options(pg, dev, repack=1 if mode == "repack" else 0):
        s = pg.Scheduler([dev])
        for _ in range(3):
            og, ou, osw, od = s.compute([gate, up, sw, down], {"x": x})
            assert _nmse(og, rg) < 5e-4 and _nmse(ou, ru) < 5e-4
            assert _nmse(osw, rs) < 2e-3
            np.testing.assert_allclose(osw, og / (1 + np.exp(-og.astype(np.float64))) * ou, rtol=1e-4, atol=1e-6)
            assert _nmse(od, rs @ dd.T) < 2e-3


@pytest.mark.parametrize("qtype", QTYPES)
def test_decode_and_prefill_plans_share_weights(qtype):
    """A model's decode (1 column) and prefill (64 columns) forwards read the same weights through two
    plans, which share one repacked copy: each stays right, in any order, over replays."""
    pg, dev = _cuda()
    rng = np.random.default_rng(9)
    M, K = 260, 1024
    blocks, wd = _weight(pg, rng, qtype, M, K)
    g = pg.Graph()
    w = g.weight("w", blocks, type=qtype, shape=(M, K))
    x1, x64 = g.input("x1", (1, K), pg.f32), g.input("x64", (64, K), pg.f32)
    y1, y64 = pg.mul_mat(w, x1), pg.mul_mat(w, x64)
    s = pg.Scheduler([dev])
    for i in range(3):
        a = rng.standard_normal((1, K)).astype(np.float32)
        b = rng.standard_normal((64, K)).astype(np.float32)
        o1 = s.compute(y1, {"x1": a})
        o64 = s.compute(y64, {"x64": b})
        assert _nmse(o1, a.astype(np.float64) @ wd.T) < 5e-4, i
        assert _nmse(o64, b.astype(np.float64) @ wd.T) < 5e-4, i


def test_new_weights_at_a_freed_address():
    """Graphs made one after another reuse device memory: a repacked copy made for an earlier weight
    must never be read for a later one at the same address."""
    pg, dev = _cuda()
    rng = np.random.default_rng(10)
    M, K = 128, 512
    x = rng.standard_normal((1, K)).astype(np.float32)
    for i in range(4):
        blocks, wd = _weight(pg, rng, "q4_0", M, K)
        g = pg.Graph()
        y = pg.mul_mat(g.weight("w", blocks, type="q4_0", shape=(M, K)), g.input("x", x.shape, pg.f32))
        s = pg.Scheduler([dev])
        out = s.compute(y, {"x": x})
        assert _nmse(out, x.astype(np.float64) @ wd.T) < 5e-4, i
        del s, g, y
        gc.collect()
