"""One exception tree (issue 16): every error a user can trigger through the public API outside
the Scheduler derives from PyggmlError and from the builtin it stands for; inputs of the wrong kind
are errors, never conversions."""
import gc
import os
import threading

import numpy as np
import pytest

import pyggml as pg
import pyggml.models as models

from conftest import SMALL_SHAPE as SHAPE


@pytest.fixture(scope="module")
def small(small_gguf):
    return small_gguf


def raises(builtin, fn, *a, match=None, **kw):
    with pytest.raises(pg.PyggmlError, match=match) as ei:
        fn(*a, **kw)
    assert isinstance(ei.value, builtin), f"{type(ei.value).__name__} is not a {builtin.__name__}"
    return ei.value


@pytest.mark.parametrize("n_ctx,builtin", [(0, ValueError), (-5, ValueError), ("abc", TypeError),
                                           (3.9, TypeError), (None, TypeError), (2**40, ValueError)])
def test_load_n_ctx(small, n_ctx, builtin):
    raises(builtin, models.load, small, n_ctx=n_ctx, progress=False, match="n_ctx")


@pytest.mark.parametrize("kw,builtin", [(dict(attn="sparse"), ValueError), (dict(attn=None), ValueError),
                                        (dict(kv_type="q4_0"), ValueError), (dict(kv_type=16), ValueError),
                                        (dict(n_batch=0), ValueError), (dict(n_threads="2"), TypeError),
                                        (dict(devices=["cpu:x"]), ValueError), (dict(devices=[None]), TypeError)])
def test_load_arguments(small, kw, builtin):
    raises(builtin, models.load, small, progress=False, **kw)


def test_missing_model_file(tmp_path):
    e = raises(FileNotFoundError, models.load, str(tmp_path / "nope.gguf"), progress=False, match="nope.gguf")
    assert isinstance(e, models.ModelNotFoundError)
    raises(FileNotFoundError, pg.load, str(tmp_path), progress=False, match="directory")
    raises(TypeError, models.load, 42, progress=False)


@pytest.mark.parametrize("spec,builtin", [("cpu:x", ValueError), ("cpu:", ValueError), ("CPU", ValueError),
                                          ("cpu:0\n", ValueError), (3, TypeError), (None, TypeError)])
def test_device_specs(spec, builtin):
    raises(builtin, pg.get_device, spec)


def test_device_spec_out_of_range():
    raises(pg.DeviceUnavailableError, pg.get_device, "cpu:7", match="no device 7")


@pytest.fixture(scope="module")
def model(small):
    m = models.load(small, progress=False, n_ctx=32)
    yield m
    m.close()


@pytest.mark.parametrize("tok,builtin", [(None, TypeError), (3.9, TypeError), ("7", TypeError), (True, TypeError),
                                         (np.float32(2), TypeError), (-1, ValueError), (512, ValueError)])
def test_decode_wrong_tokens(model, tok, builtin):
    model.reset()
    raises(builtin, model.decode, tok)
    assert model.n_past == 0                       # nothing ran


def test_decode_accepts_numpy_ints(model):
    model.reset()
    a = model.decode(np.int64(5))
    model.reset()
    b = model.decode(5)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("toks,builtin", [(None, TypeError), ("17", TypeError), ([1.5, 2.0], TypeError),
                                          ([True, False], TypeError), ([], ValueError), ([[1, 2]], ValueError)])
def test_prefill_wrong_tokens(model, toks, builtin):
    model.reset()
    raises(builtin, model.prefill, toks)


def test_generate_wrong_n(model):
    model.reset()
    raises(TypeError, model.generate, [1, 2], 2.5)


def test_use_after_close(small):
    m = models.load(small, progress=False, n_ctx=16)
    m.close()
    m.close()                                       # idempotent
    for call in (lambda: m.decode(1), lambda: m.prefill([1, 2]), lambda: m.generate([1], 2), m.reset):
        raises(RuntimeError, call, match="closed")
    assert isinstance(pytest.raises(pg.ClosedError, m.decode, 1).value, pg.PyggmlError)


@pytest.mark.parametrize("shape,builtin", [((2.5, 3), TypeError), ((2, 3.0), TypeError), ((True, 2), TypeError),
                                           (("4",), TypeError), ((2**63,), ValueError), ((2**62, 4), ValueError),
                                           ((2**40, 2**40), ValueError), ((0, 2), ValueError), (None, TypeError)])
def test_graph_shapes(shape, builtin):
    g = pg.Graph()
    raises(builtin, g.input, "x", shape)


def test_graph_bytes_overflow():
    """2^61 f32 elements fit int64 as a count but not as bytes."""
    g = pg.Graph()
    raises(ValueError, g.input, "x", (2**61,), match="bytes do not fit int64")


def test_op_arguments():
    g = pg.Graph()
    x = g.input("x", (4, 8))
    raises(TypeError, pg.reshape, x, (4.0, 8))
    raises(TypeError, pg.view, x, (2, 8), offset=1.5)
    raises(TypeError, pg.view, x, (2, 8), strides=(32.0, 4))
    raises(TypeError, pg.permute, x, (1.0, 0))
    raises(TypeError, g.input, None, (2,))
    h = g.input("h", (3, 2, 8))
    pos = g.input("pos", (3,), pg.i32)
    raises(TypeError, pg.rope, h, pos, n_dims=4.5)
    raises(TypeError, pg.rope, h, pos, mode=2.0)
    raises(ValueError, pg.rope, h, pos, n_ctx_orig=2**31)
    raises(TypeError, pg.add, x, 3)


def test_errors_module_tree():
    for exc, builtin in ((pg.ConfigError, ValueError), (pg.ClosedError, RuntimeError),
                         (pg.ConcurrentUseError, RuntimeError), (models.ModelNotFoundError, FileNotFoundError),
                         (pg.PluginNotFoundError, FileNotFoundError), (pg.TypeMismatchError, TypeError),
                         (pg.GGUFError, ValueError), (pg.DeviceOutOfMemory, MemoryError)):
        assert issubclass(exc, pg.PyggmlError) and issubclass(exc, builtin), exc


# ---------------------------------------------------------------- threads and resources

def test_model_refuses_a_second_thread(model):
    """Two threads on one Model used to corrupt its state (n_past 281 for 456 tokens); now the
    second thread gets ConcurrentUseError and the first finishes with the right n_past."""
    model.reset()
    inside, release = threading.Event(), threading.Event()
    real = model.sched.compute

    def slow_compute(*a, **kw):
        inside.set()
        release.wait(30)
        return real(*a, **kw)
    model.sched.compute = slow_compute
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("out", model.prefill([1, 2, 3])))
    t.start()
    try:
        assert inside.wait(30)
        for call in (lambda: model.decode(4), lambda: model.prefill([4]), model.reset, model.close):
            raises(RuntimeError, call, match="another thread")
    finally:
        release.set()
        t.join(30)
        del model.sched.compute
    assert res["out"].shape == (SHAPE["n_vocab"],)
    assert model.n_past == 3 and model.tokens == [1, 2, 3]


def test_model_from_many_threads_in_turn(model):
    """Calls from several threads that do not overlap all run, and the state adds up."""
    model.reset()
    lock = threading.Lock()
    errors = []

    def work(tok):
        try:
            with lock:
                model.decode(tok)
        except Exception as e:          # pragma: no cover - reported below
            errors.append(e)
    ts = [threading.Thread(target=work, args=(i + 1,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors and model.n_past == 8


def _maps_and_fds(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        mapped = sum(line.rstrip().endswith(real) for line in f)
    fds = sum(os.path.realpath(os.path.join("/proc/self/fd", fd)) == real for fd in os.listdir("/proc/self/fd")
              if os.path.exists(os.path.join("/proc/self/fd", fd)))
    return mapped, fds


def test_close_releases_mapping_and_fd_at_once(small, tmp_path):
    """Model.close() used to keep the mapping and the fd until garbage collection; with the
    collector off, both must be gone right after close()."""
    own = str(tmp_path / "own.gguf")               # not mapped by the module's other models
    with open(small, "rb") as f, open(own, "wb") as g:
        g.write(f.read())
    small = own
    gc.collect()
    gc.disable()
    try:
        m = models.load(small, progress=False, n_ctx=16)
        m.prefill([1, 2, 3])
        assert _maps_and_fds(small)[0] > 0
        m.close()
        assert _maps_and_fds(small) == (0, 0)
    finally:
        gc.enable()
