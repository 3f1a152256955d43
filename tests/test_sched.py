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
    # the CPU computed for a measurable time inside the plugin, and the split adds up
    assert 0 < run.backend_time_us <= run.total_time_us
    assert run.host_time_us == pytest.approx(run.total_time_us - run.backend_time_us, abs=1e-3)


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


def test_two_threads_on_one_scheduler_get_their_own_results():
    """compute from several threads is serialized: every thread gets the result of its own inputs
    (without the lock, one thread's inputs were overwritten by another's: 74% wrong results)."""
    import threading
    g = pg.Graph()
    y, w1, w2 = _mlp(g)
    s = pg.Scheduler("cpu")
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3, 64)).astype(np.float32) for _ in range(8)]
    want = [s.compute(y, {"x": x}) for x in xs]
    bad = []

    def worker(i):
        for r in range(40):
            j = (i + r) % len(xs)
            if not np.array_equal(s.compute(y, {"x": xs[j]}), want[j]):
                bad.append((i, r))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == []


def test_use_after_close_raises():
    g = pg.Graph()
    y, _, _ = _mlp(g)
    s = pg.Scheduler("cpu")
    s.compute(y, {"x": np.ones((3, 64), np.float32)})
    s.close()
    s.close()                                   # idempotent
    with pytest.raises(pg.ClosedError, match="closed"):
        s.compute(y, {"x": np.ones((3, 64), np.float32)})
    assert isinstance(pg.ClosedError("x"), pg.PyggmlError)


def test_feeds_are_checked_not_converted():
    g = pg.Graph()
    x = g.input("x", (4,), pg.i32)
    y = pg.add(pg.scale(g.input("f", (4,)), 2.0), g.input("h", (4,)))
    z = pg.get_rows(g.weight("w", np.arange(12, dtype=np.float32).reshape(6, 2)), x)
    s = pg.Scheduler("cpu")
    with pytest.raises(pg.GraphError, match="does not use.*'typo'"):
        s.compute(y, {"f": np.ones(4, np.float32), "h": np.ones(4, np.float32), "typo": 1})
    with pytest.raises(pg.TypeMismatchError, match="do not fit"):
        s.compute(z, {"x": np.array([0, 1, 2**32 + 1, 3], np.int64)})
    assert np.array_equal(s.compute(z, {"x": np.array([0, 1, 5, 3], np.int64)})[2], [10, 11])
    with pytest.raises(pg.TypeMismatchError, match="cannot take"):
        s.compute(z, {"x": np.array(["0", "1", "2", "3"])})
    with pytest.raises(pg.TypeMismatchError, match="cannot take"):
        s.compute(z, {"x": np.array([0.0, 1.5, 2.0, 3.0])})


@pytest.mark.parametrize("bad, match", [([], "at least one device"), (("cpu", "cpu"), "listed twice"),
                                        (5, "device spec")])
def test_bad_scheduler_arguments_are_config_errors(bad, match):
    with pytest.raises(pg.ConfigError, match=match) as e:
        pg.Scheduler(bad)
    assert isinstance(e.value, ValueError)


def test_bad_policy_and_env_override(monkeypatch):
    with pytest.raises(pg.ConfigError, match="not one of"):
        pg.Scheduler("cpu", sync="fast")
    with pytest.raises(pg.ConfigError, match="n_copies"):
        pg.Scheduler("cpu", n_copies=9)
    monkeypatch.setenv("PYGGML_SYNC", "strict")
    with pytest.warns(RuntimeWarning, match="overrides"):
        assert pg.Scheduler("cpu", sync="events").sync == "strict"
    assert pg.Scheduler("cpu").sync == "strict"
    monkeypatch.setenv("PYGGML_SYNC", "bogus")
    with pytest.raises(pg.ConfigError, match="PYGGML_SYNC"):
        pg.Scheduler("cpu")


def test_check_finite_names_the_output():
    g = pg.Graph()
    x = g.input("x", (4,))
    y = pg.scale(x, 2.0)
    s = pg.Scheduler("cpu", check_finite=True)
    assert np.array_equal(s.compute(y, {"x": np.ones(4, np.float32)}), [2, 2, 2, 2])
    with pytest.raises(pg.NonFiniteError, match="1 NaN and 1 Inf") as e:
        s.compute(y, {"x": np.array([1, np.nan, np.inf, 0], np.float32)})
    assert isinstance(e.value, FloatingPointError)
    plain = pg.Scheduler("cpu")                          # off by default: the values come back
    assert np.isnan(plain.compute(y, {"x": np.array([np.nan] * 4, np.float32)})).all()
