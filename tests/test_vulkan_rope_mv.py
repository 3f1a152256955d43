"""fuse_rope_mv=1: a decode layer's q, k and v mat-vecs on matvec_rp, each with the rope and/or the KV-cache write of
its result, as one dispatch (mul_mat_vec_rpe, vk_rope_mv.c). The layer fragment over three decode steps (other
positions and rows: rows written before stay) against the same graph with fuse_rope_mv=0, bit for bit (the same
mat-vec, rope.comp's arithmetic), and against the CPU plugin; partial ropes and YaRN, f32/f16/bf16 caches, i32/i64
indices. Neox ropes and frequency factors stay apart. A node between the mat-vec and the cache write that reads
the cache keeps the write in its place. A synthetic LLaMA decodes to the same logits with fewer dispatches."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from _vulkan_rp import check_model_on_off, debug_records, has_int8, run_steps
from test_vulkan_kernels import VALIDATING, VK, _rerun_under_validation, _validation_clean  # noqa: F401

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
H, HKV, D, K, N_CTX = 8, 2, 64, 512, 16
# (rp_norm_in=off: on the GPU its auto takes this model's 512-wide rows, and the norm it recomputes sums in another
# order than the norm's own dispatch, which the mat-vecs read with fuse_rope_mv=0: last-ulp differences, not what these
# tests are about)
ON = {"matvec_rp": "1", "fuse_rope_mv": "1", "rp_norm_in": "off"}
OFF = {"matvec_rp": "1", "fuse_rope_mv": "0", "rp_norm_in": "off"}


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation:
    every test ends clean)."""
    _rerun_under_validation(__file__)


def _layer(seed, itype, ctype, rope_kw):
    """q, k, v mat-vecs of one token, the ropes of q and k, the cache writes of k and v (llama.py's layer)."""
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    x = g.input("x", (1, K), pg.f32)
    pos, idx = g.input("pos", (1,), pg.i32), g.input("idx", (1,), itype)
    kc, vc = g.state("kc", (N_CTX, HKV * D), ctype), g.state("vc", (N_CTX, HKV * D), ctype)

    def weight(name, rows):
        blocks = pg.quantize((rng.standard_normal((rows, K)) * 0.3).astype(np.float32), "q4_0")
        return g.weight(name, blocks, type="q4_0", shape=(rows, K))
    q = pg.mul_mat(weight("wq", H * D), x)
    k = pg.mul_mat(weight("wk", HKV * D), x)
    v = pg.mul_mat(weight("wv", HKV * D), x)
    qr = pg.rope(pg.reshape(q, (1, H, D)), pos, **rope_kw)
    kr = pg.rope(pg.reshape(k, (1, HKV, D)), pos, **rope_kw)
    ks = pg.set_rows(kc, pg.reshape(kr, (1, HKV * D)), idx)
    vs = pg.set_rows(vc, v, idx)
    return [pg.scale(qr, 1.0), pg.cont(ks, pg.f32), pg.cont(vs, pg.f32), pg.scale(q, 1.0)]


def _feeds(step, itype):
    x = np.random.default_rng(100 + step).standard_normal((1, K)).astype(np.float32)
    return {"x": x, "pos": np.array([7 + 3 * step], np.int32), "idx": np.array([2 + step], itype)}


ROPES = {"plain": dict(mode=pg.ROPE_NORMAL, freq_base=10000.0),
         "partial": dict(mode=pg.ROPE_NORMAL, n_dims=48, freq_base=500000.0),
         "yarn": dict(mode=pg.ROPE_NORMAL, freq_base=10000.0, freq_scale=0.25, ext_factor=1.0, attn_factor=1.1,
                      n_ctx_orig=4096)}


@pytest.mark.parametrize("rope", sorted(ROPES))
@pytest.mark.parametrize("itype,ctype", [("i64", "f16"), ("i32", "f32"), ("i32", "bf16")])
@pytest.mark.parametrize("rows,lit", [("8", "0"), ("4", "0"), ("8", "1"), ("4", "1")])
def test_rope_mv_layer(rope, itype, ctype, rows, lit):
    it, ct = getattr(pg, itype), getattr(pg, ctype)
    inp = np.int64 if itype == "i64" else np.int32
    feeds = [_feeds(s, inp) for s in range(3)]
    build = lambda: _layer(5, it, ct, ROPES[rope])   # noqa: E731
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, k1 = run_steps([VK], build, feeds, {**ON, "rp_rows": rows, "rp_lit": lit})   # (rp_rows=4: rope pairs still in one
    # workgroup; rp_lit=1: the q4_0 builds with literal blocks per invocation)
    base, k0 = run_steps([VK], build, feeds, OFF)
    if has_int8():
        assert k1.count("mul_mat_vec_rpe") == 3 and "mul_mat_vec_rpe" not in k0, (k1, k0)
    for step in range(3):
        for name, gv, bv, wv in zip(("q roped", "K cache", "V cache", "q"), got[step], base[step], want[step]):
            assert gv.shape == wv.shape, name
            assert np.array_equal(gv, bv), f"{name}, step {step}: differs from fuse_rope_mv=0"
            assert nmse(gv, wv) < 5e-4, (name, step, nmse(gv, wv))
        for c in (got[step][1], got[step][2]):   # rows 2..2+step written, the others never
            assert np.all(c[3 + step:] == 0) and np.all(c[:2] == 0)
            assert np.all(np.any(c[2:3 + step] != 0, axis=1))


def _q_and_v(seed, rope_kw):
    """q's mat-vec and rope, v's mat-vec and cache write"""
    rng = np.random.default_rng(seed)
    wq = pg.quantize(rng.standard_normal((H * D, K)).astype(np.float32), "q4_0")
    wv = pg.quantize(rng.standard_normal((HKV * D, K)).astype(np.float32), "q4_0")
    ff = (1.0 + rng.random(D // 2)).astype(np.float32)

    def build():
        g = pg.Graph()
        x = g.input("x", (1, K), pg.f32)
        pos, idx = g.input("pos", (1,), pg.i32), g.input("idx", (1,), pg.i32)
        vc = g.state("vc", (N_CTX, HKV * D), pg.f16)
        kw = dict(rope_kw)
        if kw.pop("ff", False):
            kw["freq_factors"] = g.weight("ff", ff)
        qr = pg.rope(pg.reshape(pg.mul_mat(g.weight("wq", wq, type="q4_0", shape=(H * D, K)), x), (1, H, D)), pos, **kw)
        vs = pg.set_rows(vc, pg.mul_mat(g.weight("wv", wv, type="q4_0", shape=(HKV * D, K)), x), idx)
        return [pg.scale(qr, 1.0), pg.cont(vs, pg.f32)]
    return build


@pytest.mark.parametrize("what", ["neox", "freq_factors"])
def test_rope_mv_leaves_what_it_does_not_take(what):
    """Neox pairs (i, i + n_dims / 2) lie in other workgroups, and frequency factors have no binding here: the
    rope stays a rope dispatch, while v's cache write (no rope) still joins its mat-vec. Results match the CPU
    plugin."""
    kw = dict(mode=pg.ROPE_NEOX) if what == "neox" else dict(mode=pg.ROPE_NORMAL, ff=True)
    build = _q_and_v(6, kw)
    feeds = [_feeds(s, np.int32) for s in range(2)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    got, kernels = run_steps([VK], build, feeds, ON)
    if has_int8():
        assert kernels.count("mul_mat_vec_rpe") == 1, kernels   # (each node's mul_mat_vec_rp line comes first)
    for step in range(2):
        for gv, wv in zip(got[step], want[step]):
            assert nmse(gv, wv) < 5e-4


def test_rope_mv_reader_between_keeps_the_write_in_place():
    """A node between the mat-vec and its cache write reads the cache (row 0, the row written): it must see the
    row as it was, so the write is not moved ahead of it. Two steps: the second reads the first's row."""
    M = HKV * D
    wv = pg.quantize(np.random.default_rng(8).standard_normal((M, K)).astype(np.float32), "q4_0")

    def build():
        g = pg.Graph()
        x = g.input("x", (1, K), pg.f32)
        idx = g.input("idx", (1,), pg.i32)
        vc = g.state("vc", (N_CTX, M), pg.f32)
        v = pg.mul_mat(g.weight("wv", wv, type="q4_0", shape=(M, K)), x)
        peek = pg.add(pg.view(vc, (1, M)), v)   # graph order: the mat-vec, this add, then the cache write
        vs = pg.set_rows(vc, v, idx)
        return [peek, pg.cont(vs, pg.f32)]
    feeds = [{"x": np.random.default_rng(20 + s).standard_normal((1, K)).astype(np.float32),
              "idx": np.array([0], np.int32)} for s in range(2)]
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    with debug_records() as records:
        got, kernels = run_steps([VK], build, feeds, ON)
    assert not any("+ set_rows: mul_mat_vec_rpe" in r for r in records), [r for r in records if "rpe" in r]
    for step in range(2):
        for gv, wv in zip(got[step], want[step]):
            assert nmse(gv, wv) < 5e-4, step
    # the second step's add saw the first step's row, not its own
    assert nmse(got[1][0] - got[1][1][:1], got[0][1][:1]) < 5e-4


def test_rope_mv_model_logits(tmp_path):
    """A small synthetic LLaMA (2 layers) decodes to fuse_rope_mv=0's logits bit for bit, with every layer's q, k
    and v on mul_mat_vec_rpe and three dispatches fewer per layer in its decode plan."""
    check_model_on_off(tmp_path, ON, OFF, "mul_mat_vec_rpe", 2 * 3)   # the rope, the rope_store and the set_rows of each layer
