"""CPU plugin checks beyond the op conformance suite: conversions bit-exact with numpy/ggml over
many values, quantized weights in every mul_mat path, thread-count independence, and the AVX2
kernels against the scalar reference kernels on larger shapes.

    python3 -m pytest -q tests/test_cpu_extra.py"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import pyggml as pg  # noqa: E402

QUANTS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q6_K"]


@pytest.fixture
def cpu():
    d = pg.get_device("cpu")
    yield d
    d.set_option("kernels", "auto")
    d.set_option("n_threads", str(os.cpu_count() or 1))


def run(y, feeds=None, **kw):
    return pg.Scheduler(["cpu"], poison=True, **kw).compute(y, feeds or {})


def nmse(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    assert np.all(np.isfinite(a))
    return float(np.sum((a - b) ** 2) / np.sum(b * b))


# ---------------------------------------------------------------- conversions

def _edge_f32():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2 ** 32, 1 << 20, dtype=np.uint64).astype(np.uint32)
    # everything near the f16 range limits and the subnormal / rounding boundaries
    h = np.arange(0, 1 << 16, dtype=np.uint32)
    hv = h.astype(np.uint16).view(np.float16).astype(np.float32)
    fin = hv[np.isfinite(hv)]
    fb = fin.view(np.uint32).astype(np.int64)
    near = (np.concatenate([fb + d for d in (-1, 0, 1, 0xFFF, 0x1000, 0x1001)]) & 0xFFFFFFFF).astype(np.uint32)
    v = np.concatenate([bits, near]).view(np.float32)
    return np.concatenate([v, np.float32([65504, 65519.99, 65520, 1e-8, 5.96e-8, 2.98e-8, 2.9802322e-08, -0.0])])


def test_f32_to_f16_bit_exact():
    v = _edge_f32()
    v = v[~np.isnan(v)]
    g = pg.Graph()
    x = g.input("x", v.shape, pg.f32)
    out = run(pg.cont(x, pg.f16), {"x": v})
    with np.errstate(over="ignore"):
        ref = v.astype(np.float16)
    bad = np.nonzero(out.view(np.uint16) != ref.view(np.uint16))[0]
    assert bad.size == 0, f"{bad.size} mismatches, e.g. {v[bad[:5]]} -> {out[bad[:5]]} vs {ref[bad[:5]]}"


def test_f16_to_f32_all_values():
    h = np.arange(0, 1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    g = pg.Graph()
    x = g.input("x", h.shape, pg.f16)
    out = run(pg.cont(x, pg.f32), {"x": h})
    ref = h.astype(np.float32)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(out), nan)
    assert np.array_equal(out[~nan].view(np.uint32), ref[~nan].view(np.uint32))


def test_f32_to_bf16_ggml_rounding():
    v = _edge_f32()
    g = pg.Graph()
    x = g.input("x", v.shape, pg.f32)
    out = run(pg.cont(x, pg.bf16), {"x": v})
    u = v.view(np.uint32).astype(np.uint64)
    ref = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(v)
    ref[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    assert np.array_equal(out.view(np.uint16), ref)


# ---------------------------------------------------------------- quantized weights

def _qtypes():
    out = []
    for q in QUANTS:
        try:
            pg.quantize(np.zeros((1, 256), np.float32), q)
            out.append(q)
        except pg.PyggmlError:
            pass
    return out


@pytest.mark.parametrize("n", [1, 5, 130])   # vec_dot (q8 activations) and the packed GEMM (n >= 128)
@pytest.mark.parametrize("qt", _qtypes())
def test_mul_mat_quantized(qt, n, cpu):
    rng = np.random.default_rng(7)
    M, K = 37, 512
    w = rng.standard_normal((M, K)).astype(np.float32)
    blocks = pg.quantize(w, qt)
    wd = pg.dequantize(blocks, qt, (M, K)).astype(np.float64)
    x = rng.standard_normal((n, K)).astype(np.float32)
    ref = x.astype(np.float64) @ wd.T
    for kernels in ("auto", "reference"):
        cpu.set_option("kernels", kernels)
        g = pg.Graph()
        wt = g.weight("w", blocks, type=qt, shape=(M, K))
        xi = g.input("x", (n, K), pg.f32)
        out = run(pg.mul_mat(wt, xi), {"x": x})
        assert nmse(out, ref) < 5e-4, (kernels, nmse(out, ref))


KERNEL_PATHS = ["reference", "avx2", "avx512"]


def _use_kernels(cpu, path):
    """Select a kernel path; skip (with the plugin's reason) where this CPU lacks it."""
    try:
        cpu.set_option("kernels", path)
    except pg.PyggmlError as e:
        pytest.skip(f"kernels={path} not available here: {e}")


@pytest.mark.parametrize("M", [37, 64])   # 64: q4_0 weights also go through the 8-row repacked copy
@pytest.mark.parametrize("n", [1, 3, 6, 40])
@pytest.mark.parametrize("qt", ["q4_0", "q8_0", "q4_K", "q6_K", "q5_0", "q4_1"])
def test_mul_mat_quantized_every_path(qt, n, M, cpu):
    """Each kernel path (scalar reference, AVX2, AVX-512) against float64 of the dequantized
    weights and q8-rounded activations, and against the reference path (same quantized inputs,
    so the paths may differ only by float summation order). Odd block counts (K = 32*9*8*3)
    exercise the tails of the two-blocks-per-vector loops; M = 37 the row-group tails."""
    if qt not in _qtypes():
        pytest.skip(f"pyggml cannot quantize {qt}")
    rng = np.random.default_rng(13)
    K = 6912
    w = (rng.standard_normal((M, K)) * np.linspace(0.2, 3.0, K)).astype(np.float32)
    blocks = pg.quantize(w, qt)
    wd = pg.dequantize(blocks, qt, (M, K)).astype(np.float64)
    x = rng.standard_normal((n, K)).astype(np.float32)
    ref = x.astype(np.float64) @ wd.T
    outs = {}
    for path in KERNEL_PATHS:
        try:
            cpu.set_option("kernels", path)
        except pg.PyggmlError:
            continue
        g = pg.Graph()
        wt = g.weight("w", blocks, type=qt, shape=(M, K))
        xi = g.input("x", (n, K), pg.f32)
        outs[path] = run(pg.mul_mat(wt, xi), {"x": x})
        assert nmse(outs[path], ref) < 5e-4, (path, nmse(outs[path], ref))
    assert "reference" in outs
    for path, o in outs.items():
        assert nmse(o, outs["reference"]) < 1e-10, (path, nmse(o, outs["reference"]))


@pytest.mark.parametrize("path", KERNEL_PATHS)
@pytest.mark.parametrize("qt", ["q4_0", "q8_0", "q4_K", "q6_K"])
def test_mul_mat_quantized_path(qt, path, cpu):
    """One path at a time (so a CPU without AVX-512 shows the avx512 case as skipped, with the
    reason): decode (n=1) and a small batch, bit-identical whatever the thread count."""
    if qt not in _qtypes():
        pytest.skip(f"pyggml cannot quantize {qt}")
    _use_kernels(cpu, path)
    rng = np.random.default_rng(17)
    M, K = 72, 1024
    w = rng.standard_normal((M, K)).astype(np.float32)
    blocks = pg.quantize(w, qt)
    wd = pg.dequantize(blocks, qt, (M, K)).astype(np.float64)
    for n in (1, 7, 9):
        x = rng.standard_normal((n, K)).astype(np.float32)
        ref = x.astype(np.float64) @ wd.T
        outs = []
        for nt in ("1", "2", "3"):
            cpu.set_option("n_threads", nt)
            g = pg.Graph()
            wt = g.weight("w", blocks, type=qt, shape=(M, K))
            xi = g.input("x", (n, K), pg.f32)
            outs.append(run(pg.mul_mat(wt, xi), {"x": x}))
        for o in outs[1:]:
            assert np.array_equal(o, outs[0]), (path, n)
        assert nmse(outs[0], ref) < 5e-4, (path, n, nmse(outs[0], ref))


def test_kernels_option_values(cpu):
    cpu.set_option("kernels", "reference")
    cpu.set_option("kernels", "auto")
    with pytest.raises(pg.PyggmlError, match="auto"):
        cpu.set_option("kernels", "sse9")


@pytest.mark.parametrize("qt", _qtypes())
def test_get_rows_quantized(qt):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((9, 256)).astype(np.float32)
    blocks = pg.quantize(w, qt)
    wd = pg.dequantize(blocks, qt, (9, 256))
    idx = np.array([4, 0, 8, 4], np.int32)
    g = pg.Graph()
    wt = g.weight("w", blocks, type=qt, shape=(9, 256))
    ii = g.input("i", (4,), pg.i32)
    out = run(pg.get_rows(wt, ii), {"i": idx})
    assert np.array_equal(out, wd[idx])


# ---------------------------------------------------------------- threads and kernels

def test_gemm_independent_of_thread_count(cpu):
    rng = np.random.default_rng(5)
    w = rng.standard_normal((70, 300)).astype(np.float32)
    x = rng.standard_normal((45, 300)).astype(np.float32)
    outs = []
    for nt in ("1", "2", "3", "5"):
        cpu.set_option("n_threads", nt)
        g = pg.Graph()
        y = pg.mul_mat(g.weight("w", w), g.input("x", x.shape, pg.f32))
        outs.append(run(y, {"x": x}))
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])
    assert nmse(outs[0], x.astype(np.float64) @ w.T.astype(np.float64)) < 1e-12


def _graph_ops(rng):
    g = pg.Graph()
    x = g.input("x", (6, 3, 1000), pg.f32)
    m = g.input("m", (3, 1000), pg.f32)
    h = pg.rms_norm(x, 1e-5)
    outs = [h, pg.norm(x, 1e-5), pg.silu(x), pg.gelu(x), pg.soft_max(x, m, 0.5, 4.0),
            pg.swiglu(x), pg.add(h, pg.scale(x, 0.5, 1.0)), pg.mul(x, m)]
    feeds = {"x": (rng.standard_normal((6, 3, 1000)) * 4).astype(np.float32),
             "m": rng.standard_normal((3, 1000)).astype(np.float32)}
    return outs, feeds


def test_simd_matches_reference(cpu):
    rng = np.random.default_rng(11)
    outs, feeds = _graph_ops(rng)
    cpu.set_option("kernels", "reference")
    ref = run(outs, feeds)
    cpu.set_option("kernels", "auto")
    fast = run(outs, feeds)
    for i, (a, b) in enumerate(zip(fast, ref)):
        assert nmse(a, b) < 1e-10, (outs[i], nmse(a, b))


def _bf16_bits(a):
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


@pytest.mark.parametrize("n", [1, 3, 24])
def test_mul_mat_bf16_weights(n, cpu):
    rng = np.random.default_rng(9)
    M, K = 19, 96
    wb = _bf16_bits(rng.standard_normal((M, K)))
    wd = (wb.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    x = rng.standard_normal((n, K)).astype(np.float32)
    ref = x.astype(np.float64) @ wd.T
    for kernels in ("auto", "reference"):
        cpu.set_option("kernels", kernels)
        g = pg.Graph()
        w = g.weight("w", wb, type="bf16", shape=(M, K))
        xi = g.input("x", (n, K), pg.f32)
        out = run(pg.mul_mat(w, xi), {"x": x})
        assert nmse(out, ref) < 1e-12, (kernels, nmse(out, ref))
