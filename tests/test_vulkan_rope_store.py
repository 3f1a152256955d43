"""fuse_rope=1: a rope and the set_rows that writes its result into a KV cache as one dispatch
(rope.comp's ROPE_STORE build, vk_rope_store.c), against the CPU plugin on the same graph: normal and
neox ropes, i32 and i64 indices, f16 and f32 caches, the rope's result still written (read by another
node here), three runs of one plan; where the pattern does not hold (the rope's result not the cache
write's source) the nodes stay apart. A synthetic LLaMA decodes to the same logits with it."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _model_logits, _options_logged, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def _graph(T, Hk, D, n_ctx, mode, itype, ctype, fused_src=True):
    g = pg.Graph()
    ki, vi = g.input("k", (T, Hk * D), pg.f32), g.input("v", (T, Hk * D), pg.f32)
    pi, ii = g.input("pos", (T,), pg.i32), g.input("idx", (T,), itype)
    kc, vc = g.state("kc", (n_ctx, Hk * D), ctype), g.state("vc", (n_ctx, Hk * D), ctype)
    kr = pg.rope(pg.reshape(pg.scale(ki, 0.5), (T, Hk, D)), pi, mode=mode)
    src = pg.reshape(kr, (T, Hk * D)) if fused_src else pg.scale(vi, 2.0)
    ks = pg.set_rows(kc, src, ii)
    vs = pg.set_rows(vc, vi, ii)
    return [pg.scale(kr, 1.0), pg.cont(ks, pg.f32), pg.cont(vs, pg.f32)]


@pytest.mark.parametrize("mode", ["normal", "neox"])
@pytest.mark.parametrize("itype,ctype", [("i64", "f16"), ("i32", "f32")])
@pytest.mark.parametrize("T,Hk,D", [(3, 2, 16), (1, 8, 128), (5, 4, 64)])
def test_rope_store(mode, itype, ctype, T, Hk, D):
    rng = np.random.default_rng(T * 100 + D)
    n_ctx = 12
    it, ct = getattr(pg, itype), getattr(pg, ctype)
    mode_id = pg.ROPE_NEOX if mode == "neox" else pg.ROPE_NORMAL
    feeds = {"k": rng.standard_normal((T, Hk * D)).astype(np.float32),
             "v": rng.standard_normal((T, Hk * D)).astype(np.float32),
             "pos": (np.arange(T) + 5).astype(np.int32),
             "idx": rng.permutation(n_ctx)[:T].astype(np.dtype(itype.replace("i", "int")))}
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want = pg.Scheduler([cpu]).compute(_graph(T, Hk, D, n_ctx, mode_id, it, ct), feeds)
    with _options_logged({"fuse_rope": "1"}, "rope '") as kernels:
        sched = pg.Scheduler([VK])
        outs = _graph(T, Hk, D, n_ctx, mode_id, it, ct)
        runs = [sched.compute(outs, feeds) for _ in range(3)]
    assert kernels == ["rope_store"], kernels
    for got in runs:
        for gv, wv in zip(got, want):
            assert gv.shape == wv.shape
            assert nmse(gv, wv) <= 1e-10, nmse(gv, wv)


def test_rope_store_needs_the_pattern():
    """The cache write's source is not the rope's result: rope and set_rows stay two dispatches."""
    with _options_logged({"fuse_rope": "1"}, "rope '") as kernels:
        pg.Scheduler([VK]).compute(_graph(2, 2, 16, 8, pg.ROPE_NORMAL, pg.i32, pg.f16, fused_src=False),
                                   {"k": np.ones((2, 32), np.float32), "v": np.ones((2, 32), np.float32),
                                    "pos": np.array([1, 2], np.int32), "idx": np.array([3, 4], np.int32)})
    assert kernels == []


def test_rope_store_model_decode(tmp_path):
    """A synthetic LLaMA decodes to the same logits with fuse_rope=1 as without, its graphs fused."""
    l1, k1 = _model_logits(tmp_path, {"fuse_rope": "1"}, "rope '", 5)
    l0, k0 = _model_logits(tmp_path, {"fuse_rope": "0"}, "rope '", 5)
    assert "rope_store" in k1 and not k0, (k1, k0)
    for a, b in zip(l1, l0):
        assert nmse(np.asarray(a), np.asarray(b)) <= 1e-10
