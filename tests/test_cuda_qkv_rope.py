"""A decode layer's q/k/v mat-vecs, its two ropes and its K/V cache writes as one CUDA launch
(plugins/cuda/qkv_rope.cu, mmv_rp.cuh's mvr_qkv_body).

Without a GPU the kernel body runs on emulated thread blocks in plugins/cuda/test/rp_host.cu
(tests/test_cuda_repack.py). Here, on a CUDA device: the layer fragment of a LLaMA decode step over
quantized weights, against the CPU plugin on the same graph, fused and with fuse=0, on direct
launches, capture and replay; with PyTorch's profiler (the GPU machine has it) also that the one
launch ran and the rope launches did not, and that neox pairs, which the kernel does not take, stay on
the rope kernels."""
import contextlib

import numpy as np
import pytest

from _cuda import cuda_device as _cuda_device, nmse as _nmse

T, H, HKV, D, K, N_CTX = 1, 8, 2, 64, 512, 16


@contextlib.contextmanager
def _fuse(pg, dev, on):
    d = pg.get_device(dev)
    d.set_option("fuse", "1" if on else "0")
    try:
        yield
    finally:
        d.set_option("fuse", "1")


def _build(pg, rng_seed, qtype, mode, itype, ctype, n_dims, keep=None):
    rng = np.random.default_rng(rng_seed)
    g = pg.Graph()
    x = g.input("x", (T, K), pg.f32)
    pos = g.input("pos", (T,), pg.i32)
    idx = g.input("idx", (T,), itype)
    kc, vc = g.state("kc", (N_CTX, HKV * D), ctype), g.state("vc", (N_CTX, HKV * D), ctype)

    qk_type, v_type = (qtype.split("+") * 2)[:2]   # "q4_K+q6_K": llama.cpp's Q4_K_M v beside q4_K q, k

    def weight(name, rows, t=qk_type):
        blocks = pg.quantize((rng.standard_normal((rows, K)) * 0.3).astype(np.float32), t)
        return g.weight(name, blocks, type=t, shape=(rows, K))

    h = pg.mul(pg.rms_norm(x, 1e-5), g.weight("nw", rng.standard_normal(K).astype(np.float32)))
    q = pg.mul_mat(weight("wq", H * D), h)
    k = pg.mul_mat(weight("wk", HKV * D), h)
    v = pg.mul_mat(weight("wv", HKV * D, v_type), h)
    kw = dict(n_dims=n_dims, mode=mode, freq_base=10000.0)
    q = pg.rope(pg.reshape(q, (T, H, D)), pos, **kw)
    k = pg.rope(pg.reshape(k, (T, HKV, D)), pos, **kw)
    ks = pg.set_rows(kc, pg.reshape(k, (T, HKV * D)), idx)
    vs = pg.set_rows(vc, v, idx)
    outs = [q, pg.cont(ks, pg.f32), pg.cont(vs, pg.f32)]
    if keep == "mat-vec":                            # a mat-vec output the launch would not write
        outs.append(v)
    elif keep == "view":                             # a view of one
        outs.append(pg.reshape(k, (T, HKV * D)))
    return outs


def _feeds(step, itype_np):
    x = np.random.default_rng(100 + step).standard_normal((T, K)).astype(np.float32)
    return {"x": x, "pos": np.array([7 + 3 * step], np.int32), "idx": np.array([2 + step], itype_np)}


CASES = [("q4_0", "normal", "i64", "f16", D), ("q4_K", "normal", "i32", "f16", D),
         ("q8_0", "normal", "i64", "f32", 48), ("q6_K", "normal", "i32", "f16", D),
         ("q4_K+q6_K", "normal", "i64", "f16", D),
         ("q4_0", "neox", "i64", "f16", D)]


@pytest.mark.parametrize("qtype,mode,itype,ctype,n_dims", CASES)
@pytest.mark.parametrize("fuse", [1, 0])
def test_qkv_rope_cache_launch_matches_cpu(qtype, mode, itype, ctype, n_dims, fuse):
    """The rotated q and both cache rows (three decode steps at other positions and rows, so rows
    written before stay) against the CPU plugin: within the int8 activations' error for q, f16
    rounding on top for the caches; rows no step wrote stay zero."""
    pg, dev = _cuda_device()
    mode_id = pg.ROPE_NEOX if mode == "neox" else pg.ROPE_NORMAL
    it, ct = getattr(pg, itype), getattr(pg, ctype)
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want_s, got_s = pg.Scheduler([cpu]), pg.Scheduler([dev])
    want_outs = _build(pg, 5, qtype, mode_id, it, ct, n_dims)
    with _fuse(pg, dev, fuse):
        got_outs = _build(pg, 5, qtype, mode_id, it, ct, n_dims)
        for step in range(3):                       # direct launches, capture, replay
            feeds = _feeds(step, np.int64 if itype == "i64" else np.int32)
            want = want_s.compute(want_outs, feeds)
            got = got_s.compute(got_outs, feeds)
            for name, gv, wv in zip(("q", "K cache", "V cache"), got, want):
                assert gv.shape == wv.shape, name
                assert np.all(np.isfinite(gv)), name
                assert _nmse(gv, wv) < 5e-4, (name, step, _nmse(gv, wv))
            for c in (got[1], got[2]):              # rows 2..2+step were written, the rest never
                assert np.all(c[2 + step + 1:] == 0) and np.all(c[:2] == 0)
                assert np.all(np.any(c[2:3 + step] != 0, axis=1))


def _kernels(pg, dev, outs, feeds):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    s = pg.Scheduler([dev])
    for _ in range(3):
        s.compute(outs, feeds)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        s.compute(outs, feeds)
        torch.cuda.synchronize()
    return [e.key for e in prof.key_averages()]


@pytest.mark.parametrize("mode,qtype", [("normal", "q4_0"), ("neox", "q4_0"), ("normal", "q4_K+q6_K"),
                                        ("normal", "q6_K")])
def test_qkv_rope_cache_is_one_launch(mode, qtype):
    """Normal pairs: the q/k/v launch does the ropes and the cache writes (k_mvr_qkv runs, k_rope and
    k_rope_store_pair do not), also with a q6_K v beside q4_K q and k (a third of a Q4_K_M model's
    layers). Neox pairs (i, i + D/2) lie in other blocks of rows: the rope kernels run."""
    pg, dev = _cuda_device()
    mode_id = pg.ROPE_NEOX if mode == "neox" else pg.ROPE_NORMAL
    outs = _build(pg, 5, qtype, mode_id, pg.i64, pg.f16, D)
    names = " ".join(_kernels(pg, dev, outs, _feeds(0, np.int64)))
    if mode == "normal":
        assert "k_mvr_qkv" in names and "k_rope" not in names, names
    else:
        assert "k_mvr_qkv" not in names and "k_rope" in names, names


def _decode_with_and_without(pg, dev, path):
    """{qkv_rope: (logits of 4 decode steps, the kernel names of the last step)} for a model file:
    direct launches, capture, replay, then one step under PyTorch's profiler."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile
    from pyggml import models
    d = pg.get_device(dev)
    res = {}
    for on in (0, 1):
        d.set_option("qkv_rope", str(on))
        try:
            m = models.load(path, devices=[dev], n_ctx=64, progress=False)
            m.prefill([1, 5, 9, 13])
            out = [m.decode(20 + i) for i in range(3)]     # direct launches, capture, replay
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                out.append(m.decode(40))
                torch.cuda.synchronize()
            res[on] = (np.stack(out), " ".join(e.key for e in prof.key_averages()))
            del m
        finally:
            d.set_option("qkv_rope", "1")
    return res


def test_model_decode_uses_it_and_matches():
    """In a model's decode graph (the synthetic tiny LLaMA, q4_0, on the GPU) the pattern holds: the
    planner reuses the mat-vec outputs' bytes for later tensors, which must not count as reads. The
    logits match those with qkv_rope=0 (the separate rope and cache-write launches)."""
    pg, dev = _cuda_device()
    from pyggml.bench_model import resolve_model
    res = _decode_with_and_without(pg, dev, resolve_model("synth:tiny:q4_0", quiet=True))
    assert "k_mvr_qkv" in res[1][1] and "k_rope" not in res[1][1], res[1][1]
    assert "k_mvr_qkv" not in res[0][1] and "k_rope" in res[0][1], res[0][1]
    assert _nmse(res[1][0], res[0][0]) < 1e-6


@pytest.mark.parametrize("keep", ["mat-vec", "view"])
def test_outputs_on_the_intermediates_keep_the_separate_launches(keep):
    """A graph output on bytes the launch does not write (v's mat-vec output, a view of the k rope's
    output) keeps the separate launches, and every output matches the CPU plugin."""
    pg, dev = _cuda_device()
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    feeds = _feeds(0, np.int64)
    want = pg.Scheduler([cpu]).compute(_build(pg, 5, "q4_0", pg.ROPE_NORMAL, pg.i64, pg.f16, D, keep), feeds)
    outs = _build(pg, 5, "q4_0", pg.ROPE_NORMAL, pg.i64, pg.f16, D, keep)
    got = pg.Scheduler([dev]).compute(outs, feeds)
    for gv, wv in zip(got, want):
        assert gv.shape == wv.shape and _nmse(gv, wv) < 5e-4
    names = " ".join(_kernels(pg, dev, outs, feeds))
    assert "k_mvr_qkv" not in names, names


def test_q4_K_M_model_decode_joins_the_q6_K_layers(tmp_path):
    """A Q4_K_M mix (synth q4_K: llama.cpp's use_more_bits layers get a q6_K attn_v and ffn_down)
    decodes with the q/k/v launch in every layer: the mixed-type kernel (k_mvr_qkv<q4_K, q6_K>) runs,
    the rope kernels do not, and the logits match those with qkv_rope=0 (separate launches)."""
    pg, dev = _cuda_device()
    from pyggml.synth import plan_tensors, write_synth_model
    shape = dict(n_embd=256, n_layer=8, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512, n_ctx=256)
    types = {t.name: t.type for t in plan_tensors(shape, "q4_K")}
    assert types["blk.0.attn_v.weight"] == "q6_K" and types["blk.1.attn_v.weight"] == "q4_K", types
    path = str(tmp_path / "q4km.gguf")
    write_synth_model(path, shape=shape, wtype="q4_K", progress=False)
    res = _decode_with_and_without(pg, dev, path)
    assert "k_mvr_qkv<12, 14" in res[1][1] and "k_rope" not in res[1][1], res[1][1]
    assert "k_mvr_qkv" not in res[0][1], res[0][1]
    assert _nmse(res[1][0], res[0][0]) < 1e-6
