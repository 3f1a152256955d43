"""The CPU integer GEMM tiles of quantized prefill (8 weight rows x 4 or 8 activation rows): q4_0,
q8_0, q4_K and the q6_K panels, with the AVX2 tiles and (where the CPU has AVX512-VNNI) the VNNI
ones. Both against a float64 reference of the dequantized weights; the VNNI tiles give the AVX2
tiles' floats bit for bit (exact integer sums, the same float order)."""
import numpy as np
import pytest

import pyggml as pg

TYPES = ("q4_0", "q8_0", "q4_K", "q6_K")


def _mul_mat(kernels, Wq, name, shape, X):
    dev = pg.get_device("cpu")
    dev.set_option("kernels", kernels)
    try:
        g = pg.Graph()
        y = pg.mul_mat(g.weight("w", Wq, type=name, shape=shape), g.input("x", X.shape))
        return pg.Scheduler(["cpu"], n_threads=2).compute(y, {"x": X})
    finally:
        dev.set_option("kernels", "auto")


def _avx512():
    try:
        pg.get_device("cpu").set_option("kernels", "avx512")
    except pg.PyggmlError:
        return False
    pg.get_device("cpu").set_option("kernels", "auto")
    return True


@pytest.mark.parametrize("n", [8, 13, 40])
@pytest.mark.parametrize("name", TYPES)
def test_gemm_tiles_match_the_reference_and_each_other(name, n):
    K = 768 if name in ("q4_K", "q6_K") else 544
    rng = np.random.default_rng(n + K)
    W = (rng.standard_normal((67, K)) * np.exp(rng.standard_normal((67, 1)))).astype(np.float32)  # 8 panels + 3 rows
    Wq = pg.quantize(W, name)
    ref = None
    X = rng.standard_normal((n, K)).astype(np.float32)
    Wd = pg.dequantize(Wq, name, W.shape).astype(np.float64)
    ref = X.astype(np.float64) @ Wd.T
    got = {}
    for kernels in ("avx2", "avx512") if _avx512() else ("avx2",):
        try:
            out = _mul_mat(kernels, Wq, name, W.shape, X)
        except pg.PyggmlError as e:
            pytest.skip(f"kernels={kernels}: {e}")
        assert np.all(np.isfinite(out))
        nmse = float(np.sum((out - ref) ** 2) / np.sum(ref ** 2))
        assert nmse < 5e-4, f"{name} N={n} kernels={kernels}: NMSE {nmse:.3g}"
        got[kernels] = out
    if len(got) == 2:
        assert np.array_equal(got["avx2"], got["avx512"]), f"{name} N={n}: the VNNI tile differs from AVX2"
