"""The single-device scheduler: planning once, reuse without allocation, memory sharing, errors."""
import numpy as np
import pytest

import pyggml as pg


def _mlp(g, K=64, M=48):
    rng = np.random.default_rng(0)
    x = g.input("x", (3, K))
    w1 = g.weight("w1", rng.standard_normal((M, K)).astype(np.float32))
    w2 = g.weight("w2", rng.standard_normal((K, M)).astype(np.float32))
    h = pg.silu(pg.mul_mat(w1, pg.rms_norm(x, eps=1e-5)))
    return pg.mul_mat(w2, h), w1.data, w2.data


def _ref(x, w1, w2):
    x = x.astype(np.float64)
    n = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5)
    h = n @ w1.T
    h = h / (1 + np.exp(-h))
    return h @ w2.T


def test_reuse_does_not_replan_or_allocate():
    g = pg.Graph()
    y, w1, w2 = _mlp(g)
    s = pg.Scheduler("cpu")
    rng = np.random.default_rng(1)
    x1 = rng.standard_normal((3, 64)).astype(np.float32)
    out1 = s.compute(y, {"x": x1})
    stats = dict(s.stats)
    assert stats["plans"] == 1 and stats["buffer_allocs"] >= 1
    for _ in range(3):
        x2 = rng.standard_normal((3, 64)).astype(np.float32)
        out2 = s.compute(y, {"x": x2})
        assert np.allclose(out2, _ref(x2, w1, w2), rtol=1e-3, atol=1e-3)
    assert s.stats["plans"] == stats["plans"]
    assert s.stats["buffer_allocs"] == stats["buffer_allocs"]
    assert s.stats["bytes_allocated"] == stats["bytes_allocated"]
    assert np.allclose(out1, _ref(x1, w1, w2), rtol=1e-3, atol=1e-3)
    run = s.last_run
    assert run.sync_pattern == "cgc" and run.host_syncs == 0    # the CPU is synchronous: no waits
    assert run.host_time_us >= 0 and run.backend_time_us >= 0


def test_memory_is_shared_between_dead_tensors():
    g = pg.Graph()
    x = g.input("x", (16, 256))
    t = x
    for _ in range(8):              # a chain: each intermediate dies after its user
        t = pg.scale(t, 1.01)
    s = pg.Scheduler("cpu")
    out = s.compute(t, {"x": np.ones((16, 256), np.float32)})
    assert np.allclose(out, 1.01 ** 8, rtol=1e-5)
    one = 16 * 256 * 4
    assert s.plan(t).peak_bytes["cpu:0"] <= 3 * one, "a chain of 8 ops should need about 3 live tensors"


def test_multiple_outputs_and_output_views():
    g = pg.Graph()
    x = g.input("x", (4, 5))
    a = pg.scale(x, 2.0)
    b = pg.transpose(a)             # a view as an output: read through a hidden copy
    s = pg.Scheduler("cpu")
    xv = np.arange(20, dtype=np.float32).reshape(4, 5)
    ra, rb = s.compute([a, b], {"x": xv})
    assert np.array_equal(ra, xv * 2) and np.array_equal(rb, (xv * 2).T)


def test_state_persists_across_computes():
    g = pg.Graph()
    kv = g.state("kv", (6, 4))
    rows = g.input("rows", (1, 4))
    idx = g.input("idx", (1,), pg.i32)
    w = pg.set_rows(kv, rows, idx)
    s = pg.Scheduler("cpu")
    for i in range(6):
        s.compute(w, {"rows": np.full((1, 4), i + 1, np.float32), "idx": np.array([i], np.int32)})
    assert np.array_equal(s.read(kv)[:, 0], np.arange(1, 7, dtype=np.float32))


@pytest.mark.parametrize("build,exc,msg", [
    (lambda g: pg.add(g.input("a", (3, 4)), g.input("b", (3, 5))), pg.ShapeError, r"\[3, 5\].*\[3, 4\]"),
    (lambda g: pg.mul_mat(g.input("w", (4, 8)), g.input("x", (2, 7))), pg.ShapeError, "inner dimensions"),
    (lambda g: pg.rms_norm(g.input("i", (4,), pg.i32)), pg.TypeMismatchError, "i32"),
    (lambda g: pg.reshape(g.input("a", (3, 4)), (5, 3)), pg.ShapeError, "cannot reshape"),
    (lambda g: pg.permute(g.input("a", (3, 4)), (0, 0)), pg.ShapeError, "permutation"),
    (lambda g: pg.view(g.input("a", (3, 4)), (4, 4)), pg.ShapeError, "past the"),
    (lambda g: g.input("q", (4, 32), "q4_K"), pg.TypeMismatchError, "plain types"),
    (lambda g: g.input("u", (4,), "q9_Z"), pg.UnknownTypeError, "q9_Z"),
    (lambda g: g.input("z", (0, 3)), pg.ShapeError, ">= 1"),
])
def test_build_errors_name_the_shapes(build, exc, msg):
    with pytest.raises(exc, match=msg):
        build(pg.Graph())


def test_feed_errors():
    g = pg.Graph()
    x = g.input("x", (2, 3))
    y = pg.scale(x, 2.0)
    s = pg.Scheduler("cpu")
    with pytest.raises(pg.GraphError, match="no data fed for input 'x'"):
        s.compute(y, {})
    with pytest.raises(pg.ShapeError, match=r"expects shape \[2, 3\], got \[3, 2\]"):
        s.compute(y, {"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(pg.TypeMismatchError, match="cannot take complex"):
        s.compute(y, {"x": np.zeros((2, 3), np.complex64)})
    out = s.compute(y, {"x": np.ones((2, 3), np.float64)})      # same-kind cast is fine
    assert out.dtype == np.float32 and np.all(out == 2)


def test_mixing_graphs_is_an_error():
    a = pg.Graph().input("a", (2,))
    b = pg.Graph().input("b", (2,))
    with pytest.raises(pg.GraphError, match="different graphs"):
        pg.add(a, b)


def test_out_of_memory_is_an_exception():
    g = pg.Graph()
    big = g.state("big", (2 ** 45,), pg.f32)           # 128 TiB
    y = pg.scale(big, 1.0)
    with pytest.raises(pg.DeviceOutOfMemory) as ei:
        pg.Scheduler("cpu").compute(y)
    assert ei.value.plugin == "cpu"


def test_unknown_option_is_rejected():
    dev = pg.get_device("cpu")
    with pytest.raises(pg.UnsupportedError, match="no_such_option"):
        dev.set_option("no_such_option", "1")


def test_forget_releases_a_graphs_plans_and_weights():
    rng = np.random.default_rng(2)
    g = pg.Graph()
    w = g.weight("w", rng.standard_normal((8, 16)).astype(np.float32))
    x = g.input("x", (2, 16))
    y = pg.mul_mat(w, x)
    s = pg.Scheduler(["cpu"])
    feeds = {"x": rng.standard_normal((2, 16)).astype(np.float32)}
    ref = s.compute(y, feeds)
    other = pg.Graph()
    z = pg.scale(other.input("x", (3,)), 2.0)
    s.compute(z, {"x": np.ones(3, np.float32)})
    assert len(s._plans) == 2 and s._leaf_mem
    s.forget(g)
    assert len(s._plans) == 1 and not s._leaf_mem     # the other graph's plan stays
    np.testing.assert_array_equal(s.compute(y, feeds), ref)   # planned and uploaded again
    s.forget(y)                                       # a tensor names its graph too
    assert len(s._plans) == 1


def test_forget_rejects_what_is_not_a_graph():
    with pytest.raises(TypeError, match="Graph or a Tensor"):
        pg.Scheduler(["cpu"]).forget("graph")
