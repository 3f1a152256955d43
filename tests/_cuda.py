"""Helpers shared by the CUDA plugin's tests (test_cuda_build, test_cuda_blas, test_cuda_repack, test_cuda_fattn_*)."""
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


def depth_model(tmp_dir, seed):
    """(path, 1040 tokens, their float64 logits) of a small model with 64-wide heads and two query
    heads per kv head (q/k weights of std 0.2: peaked attention), for the attention tests at depth."""
    import os
    from test_llama import _weights64, reference_logits, write_custom_model
    path = write_custom_model(os.path.join(str(tmp_dir), "c.gguf"), seed=seed, d=256, H=4, Hkv=2, ff=256, nv=300,
                              qk_std=0.2)
    toks = [int(t) for t in np.random.default_rng(seed).integers(0, 300, 1040)]
    meta, W = _weights64(path)
    return path, toks, reference_logits(meta, W, toks)
