"""Helpers shared by the CUDA plugin's tests (test_cuda_build, test_cuda_blas, test_cuda_repack)."""
import numpy as np
import pytest


def cuda_device():
    """(pyggml, "cuda:N") of the first CUDA device; skips the test, with the loader's reasons, without one."""
    pg = pytest.importorskip("pyggml")
    for d in pg.devices():
        if str(d).startswith("cuda"):
            return pg, str(d)
    reasons = [str(f) for f in pg.failures()] if hasattr(pg, "failures") else []
    pytest.skip(f"no CUDA device here ({'; '.join(reasons) or 'cuda plugin not loaded'})")


def nmse(out, ref):
    """Normalized mean squared error of out against ref (float64)."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.sum((out - ref) ** 2) / max(np.sum(ref ** 2), 1e-300))
