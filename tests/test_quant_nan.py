"""NaN/inf in quantized mul_mat on the CPU (issue 16): the f32 activations are quantized to
q8_0/q8_1/q8_K blocks first, and a max-abs search used to skip a NaN, so the output was finite.
Now a block with a NaN or an inf gets a NaN scale: every output of that row is NaN, as in the f32
path (an inf gives NaN where the f32 path gives inf or NaN; documented in quants_ref.c)."""
import numpy as np
import pytest

import pyggml as pg

TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"]     # the CPU mul_mat's
K, M = 512, 24


def _kernels():
    out = ["auto", "reference"]
    dev = pg.get_device("cpu")
    for k in ("avx2", "avx512"):
        try:
            dev.set_option("kernels", k)
            out.append(k)
        except pg.UnsupportedError:
            pass
    dev.set_option("kernels", "auto")
    return out


@pytest.fixture(scope="module")
def sched():
    s = pg.Scheduler("cpu", n_threads=2)
    yield s
    pg.get_device("cpu").set_option("kernels", "auto")
    s.close()


@pytest.mark.parametrize("kernels", _kernels())
@pytest.mark.parametrize("wtype", TYPES)
@pytest.mark.parametrize("n", [1, 3, 32])          # mat-vec, small batch, the GEMM paths
def test_non_finite_activation_propagates(sched, wtype, n, kernels):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((M, K)).astype(np.float32)
    g = pg.Graph()
    wt = g.weight("w", pg.quantize(w, wtype), type=wtype, shape=(M, K))
    x = g.input("x", (n, K))
    y = pg.mul_mat(wt, x)
    xv = rng.standard_normal((n, K)).astype(np.float32)
    rows = {0: np.nan}
    if n > 1:
        rows[n - 1] = np.inf
    if n > 2:
        rows[1] = -np.inf
    for r, v in rows.items():
        xv[r, (37 * (r + 1)) % K] = v
    pg.get_device("cpu").set_option("kernels", kernels)
    try:
        out = sched.compute(y, {"x": xv})
    finally:
        pg.get_device("cpu").set_option("kernels", "auto")
        sched.forget(g)
    assert np.all(np.isnan(out[0])), f"{wtype} {kernels} n={n}: a NaN input gave {out[0][:4]}"
    for r in range(n):
        if r in rows:
            assert not np.any(np.isfinite(out[r])), f"row {r} with {rows[r]} has finite outputs"
        else:
            assert np.all(np.isfinite(out[r])), f"row {r} without a non-finite input is not finite"


def test_f32_path_for_comparison(sched):
    g = pg.Graph()
    w = g.weight("w", np.ones((4, 64), np.float32))
    x = g.input("x", (2, 64))
    xv = np.ones((2, 64), np.float32)
    xv[0, 5] = np.nan
    out = sched.compute(pg.mul_mat(w, x), {"x": xv})
    assert np.all(np.isnan(out[0])) and np.all(out[1] == 64)


@pytest.mark.parametrize("wtype", ["q8_0", "q8_1"])
def test_quantize_marks_non_finite_blocks(wtype):
    x = np.ones((2, 64), np.float32)
    x[0, 40] = np.nan
    back = pg.dequantize(pg.quantize(x, wtype), wtype, x.shape)
    assert np.all(np.isnan(back[0, 32:]))
    assert np.allclose(back[0, :32], 1, rtol=1e-3) and np.allclose(back[1], 1, rtol=1e-3)
