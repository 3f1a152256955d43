"""The CUDA decode flash attention (plugins/cuda/flash_attn_dec.cu) without a GPU: its kernel runs on
host fibers through plugins/cuda/test/vendor_emu.h (shuffles, barriers, the block counters of the
folded merge) and is checked against a double-precision reference by plugins/cuda/test/
fattn_dec_host.cpp, over head sizes, grouped-query widths, split counts (the multiprocessor count
sets them), masks with holes (hidden cells hold NaN, so reading one fails), the sparse path, softcap,
ALiBi, several query rows and batches, and the int8 activations it writes for the next mat-vec.
On a CUDA device (skipped without one) the kernel and the older split + merge kernels it replaces are
checked with each setting of the device options fa_decode and fa_sparse: the op over K/V views of a
model-like cache whose cells past the view hold NaN, and a model's logits at depth against the
float64 reference (the op suite's threshold, 5e-4)."""
import contextlib
import os
import shutil
import subprocess

import numpy as np
import pytest

from _cuda import cuda_device as _cuda_device, depth_model as _depth_model, nmse as _nmse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which("g++") or shutil.which("c++")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler")
    exe = str(tmp_path_factory.mktemp("fattn_dec") / "fattn_dec_host")
    r = subprocess.run([CXX, "-std=c++17", "-O2", "-include", os.path.join(ROOT, "plugins", "cuda", "test", "vendor_emu.h"),
                        "-I", os.path.join(ROOT, "include"),
                        "-I", os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(ROOT, "plugins", "cuda", "test", "fattn_dec_host.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _run(exe, *args):
    r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


# D, G, H_kv, n_q, B, n_kv, n_ctx, mask, sparse, n_sm, softcap, max_bias, quant, mask_f32
CASES = [
    (64, 4, 2, 1, 1, 300, 512, "prefix:250", 0, 132, 0, 0, 1, 0),     # the 1b layout, folded merge + int8
    (64, 4, 2, 1, 1, 40, 64, "prefix:33", 0, 132, 0, 0, 1, 0),        # one split: output written directly
    (128, 1, 4, 1, 1, 1000, 1024, "prefix:1000", 0, 132, 0, 0, 1, 0),  # the 7b layout, 64 splits
    (128, 1, 4, 1, 1, 1000, 1024, "prefix:700", 0, 7, 0, 0, 0, 0),     # a few long splits, masked tail
    (128, 2, 2, 1, 1, 512, 600, "holes:0.5", 0, 16, 0, 0, 0, 0),
    (128, 8, 1, 1, 1, 256, 256, "prefix:256", 0, 132, 0, 0, 1, 0),
    (256, 2, 2, 1, 1, 200, 256, "holes:0.3", 0, 8, 0, 0, 0, 0),
    (256, 8, 1, 1, 1, 96, 128, "prefix:90", 0, 132, 0, 0, 0, 1),
    (64, 1, 3, 1, 1, 129, 256, "none", 0, 132, 0, 0, 0, 0),
    (64, 2, 2, 3, 2, 300, 320, "prefix:280", 0, 16, 0, 0, 0, 0),      # query rows (causal) and batches
    (64, 4, 2, 2, 1, 100, 128, "empty", 0, 132, 0, 0, 0, 0),          # a row that sees nothing: zeros
    (128, 4, 2, 1, 1, 300, 300, "holes:0.2", 0, 132, 30.0, 8.0, 0, 0),  # softcap and ALiBi
    (64, 4, 2, 1, 1, 300, 512, "holes:0.9", 1, 132, 0, 0, 1, 0),      # sparse: compacted live cells
    (128, 1, 4, 1, 1, 4096, 4096, "holes:0.97", 1, 132, 0, 0, 0, 0),  # sparse at its 4096 bound
    (128, 2, 2, 2, 1, 700, 800, "prefix:600", 1, 16, 0, 4.0, 0, 1),
    (64, 4, 1, 1, 1, 4352, 4352, "holes:0.5", 1, 132, 0, 0, 0, 0),    # past 4096: the dense path
    (256, 4, 1, 1, 1, 70, 80, "holes:0.5", 1, 4, 10.0, 0, 1, 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "D{}-G{}-hkv{}-q{}-b{}-kv{}-{}-sp{}-sm{}".format(
    c[0], c[1], c[2], c[3], c[4], c[5], c[7], c[8], c[9]))
def test_decode_kernel_matches_the_reference(harness, case):
    rc, out = _run(harness, *case)
    assert rc == 0 and out.strip().endswith("ok"), out


def test_unsupported_shapes_are_left_to_the_other_kernels(harness):
    rc, out = _run(harness, 96, 2, 2, 1, 1, 100, 128, "none", 0, 132)     # D 96: not this kernel's
    assert rc == 3 and "not usable" in out
    rc, out = _run(harness, 64, 3, 2, 1, 1, 100, 128, "none", 0, 132)     # 3 heads per kv head
    assert rc == 3


# ---------------------------------------------------------------- on a CUDA device

# (fa_decode, fa_sparse, fa_split_cells); the defaults are (1, 0, 32); 16 and 64: other split counts
FA_OPTIONS = [(1, 0, 32), (1, 1, 32), (0, 0, 32), (0, 1, 32), (1, 0, 16), (1, 0, 64)]


@contextlib.contextmanager
def _fa_options(pg, dev, fa_decode, fa_sparse, split_cells=32):
    """The options for plans made inside the block (a new Scheduler per run makes new plans)."""
    d = pg.get_device(dev)
    try:
        d.set_option("fa_decode", str(fa_decode))
        d.set_option("fa_sparse", str(fa_sparse))
        d.set_option("fa_split_cells", str(split_cells))
        yield
    finally:
        d.set_option("fa_decode", "1")
        d.set_option("fa_sparse", "0")
        d.set_option("fa_split_cells", "32")


def _mask(rng, kind, n_q, n_kv):
    m = np.zeros((1, 1, n_q, n_kv), np.float32)
    if kind.startswith("prefix:"):                      # the filled cells, causal over the query rows
        p = int(kind.split(":")[1])
        for i in range(n_q):
            m[0, 0, i, p - n_q + 1 + i:] = -np.inf
    else:                                               # holes:F
        m[rng.random(m.shape) < float(kind.split(":")[1])] = -np.inf
        m[..., 0] = 0.0
    return m.astype(np.float16)


@pytest.mark.parametrize("fa_decode,fa_sparse,split_cells", FA_OPTIONS, ids=lambda v: str(v))
@pytest.mark.parametrize("D,H,Hkv,n_q,n_kv,n_ctx,kind", [
    (64, 32, 8, 1, 4096, 4352, "prefix:4000"),          # the 1b layout at depth
    (128, 32, 32, 1, 1024, 1280, "prefix:1000"),        # the 7b layout
    (128, 8, 2, 1, 3000, 3072, "holes:0.7"),            # holes: the sparse path's case
    (64, 8, 2, 4, 640, 768, "prefix:600"),              # several query rows
    (128, 4, 4, 1, 8192, 8192, "prefix:8100"),          # past the sparse path's 4096 cells
])
def test_decode_flash_attention_on_cuda(fa_decode, fa_sparse, split_cells, D, H, Hkv, n_q, n_kv, n_ctx, kind):
    pg, dev = _cuda_device()
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(D + H + n_kv)
    kc = rng.standard_normal((n_ctx, Hkv * D)).astype(np.float16)
    vc = rng.standard_normal((n_ctx, Hkv * D)).astype(np.float16)
    kc[n_kv:] = vc[n_kv:] = np.nan                      # past the view: never read
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    mv = _mask(rng, kind, n_q, n_kv)
    g = pg.Graph()
    q, ks, vs, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kc), ("v", vc), ("m", mv)))
    st = (n_kv * Hkv * D * 2, D * 2, Hkv * D * 2, 2)
    k, v = pg.view(ks, (1, Hkv, n_kv, D), st), pg.view(vs, (1, Hkv, n_kv, D), st)
    scale = 1.0 / np.sqrt(D)
    y = pg.flash_attn_ext(q, k, v, m, scale=scale)
    with _fa_options(pg, dev, fa_decode, fa_sparse, split_cells):
        out = pg.Scheduler([dev]).compute(y, {"q": qv, "k": kc, "v": vc, "m": mv})
    k64 = kc[:n_kv].astype(np.float64).reshape(n_kv, Hkv, D).transpose(1, 0, 2)[None]
    v64 = vc[:n_kv].astype(np.float64).reshape(n_kv, Hkv, D).transpose(1, 0, 2)[None]
    ref = R.flash_attn(qv.astype(np.float64), k64, v64, mv.astype(np.float64), scale, 0.0, 0.0)
    assert np.isfinite(out).all()
    assert _nmse(out, ref) < 5e-4


@pytest.fixture(scope="module")
def depth_model(tmp_path_factory):
    return _depth_model(tmp_path_factory.mktemp("fattn_model"), 11)


@pytest.mark.parametrize("fa_decode,fa_sparse,split_cells", FA_OPTIONS, ids=lambda v: str(v))
def test_model_decode_at_depth_on_cuda(depth_model, fa_decode, fa_sparse, split_cells):
    """The model prefilled to 1000 cells, then decoding across the next extent: every step's logits
    against the float64 reference, with each option setting (q/k weights of std 0.2: peaked
    attention; on the CPU this model stays under 7e-5)."""
    pg, dev = _cuda_device()
    import pyggml.models as models
    from test_llama import NMSE_LIMIT, nmse
    path, toks, ref = depth_model
    with _fa_options(pg, dev, fa_decode, fa_sparse, split_cells):
        m = models.load(path, devices=[dev, "cpu"], n_ctx=1280, progress=False)
        try:
            errs = [nmse(m.prefill(toks[:1000]), ref[999])]
            errs += [nmse(m.decode(t), ref[1000 + j]) for j, t in enumerate(toks[1000:])]   # extents 1024, 1280
            assert {k[2] for k in m._forwards if k[0] == 1} >= {1024, 1280}
        finally:
            m.close()
    assert max(errs) < NMSE_LIMIT, ["%.1e" % e for e in errs]
