"""The GPU-like test plugin (tests/plugins/testdev): its queues, events, caps and sanitizer.

The plugin is built by a session fixture (tests/plugins/testdev/testdev_build.py, incremental, into
build/testdev), or taken from $PYGGML_TESTDEV_DIR when set (a folder holding libpyggml-testdev.so and
libpyggml-testdevb.so). Everything goes through ctypes against include/pyggml/plugin.h 1.0, so
these tests do not need the Python package.

Latencies here are large (0.2-0.4 s) only so that a queued copy is certainly still pending when
the test looks; no test asserts on elapsed time.
"""
import ctypes as C
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pyggml import _abi_consts as A
from testdev_ctypes import (  # noqa: F401 (pytest fixtures: ctx, libdir, plugin_session)
    AddGraph, Api, BufferInfo, CAP, DEFAULT_CAPS, DeviceProps, Graph, HostInfo, P, PYG_BUFFER_HOST,
    PYG_DEVICE_GPU, PYG_ERR_INVALID_ARGUMENT, PYG_ERR_OUT_OF_MEMORY, PYG_ERR_SANITIZER,
    PYG_ERR_UNSUPPORTED, PYG_LOG_ERROR, Plugin, ROOT, Tensor, ctx, libdir, plugin_session, vp)



def test_ctypes_mirror_matches_the_headers():
    """Every ctypes struct here has the headers' size and field offsets (through the generated cffi
    declarations, themselves checked against the compiler by tests/test_abi_consts.py)."""
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(A.CDEF)
    for cls, name in ((HostInfo, "pyg_host_info"), (DeviceProps, "pyg_device_props"), (BufferInfo, "pyg_buffer_info"),
                      (Tensor, "pyg_tensor"), (Graph, "pyg_graph"), (Api, "pyg_plugin_api")):
        assert C.sizeof(cls) == ffi.sizeof(name), name
        assert [(f, getattr(cls, f).offset) for f, _ in cls._fields_] == \
            [(f, ffi.offsetof(name, f)) for f, _ in ffi.typeof(name).fields], name


# ---------------------------------------------------------------- loading, devices, memory

def test_one_exported_symbol(libdir):
    if not shutil.which("nm"):
        pytest.skip("nm not installed")
    for name in ("testdev", "testdevb"):
        out = subprocess.run(["nm", "-D", "--defined-only", os.path.join(libdir, f"libpyggml-{name}.so")],
                             capture_output=True, text=True, check=True).stdout
        syms = [line.split()[-1] for line in out.splitlines() if line.strip()]
        assert syms == ["pyg_plugin_get_api"], syms


def test_table_and_two_gpu_like_devices(ctx):
    pg = ctx.pg
    api = pg.api
    assert (api.abi_major, api.abi_minor) == (1, 1)
    assert api.struct_size == C.sizeof(Api)
    assert api.name == b"testdev"
    assert api.device_count() == 2
    for i in range(2):
        p = pg.props(pg.device(i))
        assert p.type == PYG_DEVICE_GPU
        assert p.caps == DEFAULT_CAPS and p.quirks == 0
        assert not p.caps & CAP["HOST_MEMORY"]
    assert pg.error_of("device_get", 2, C.byref(vp())).code == PYG_ERR_INVALID_ARGUMENT


def test_memory_is_hidden_from_the_host(ctx):
    pg = ctx.pg
    b = ctx.buffer(ctx.d0, 1000)
    i = pg.info(b)
    assert i.size == 1000 and i.host_ptr is None and i.base is not None
    assert i.base % pg.props(ctx.d0).alignment == 0
    pinned = ctx.buffer(ctx.d0, 64, PYG_BUFFER_HOST)
    assert pg.info(pinned).host_ptr is not None
    # a test may declare host memory; then it must be told where
    pg.opt(ctx.d0, "caps", f"{DEFAULT_CAPS | CAP['HOST_MEMORY']:x}")
    assert pg.info(b).host_ptr == i.base


def test_errors_are_values(ctx):
    pg = ctx.pg
    assert pg.error_of("buffer_alloc", ctx.d0, 1 << 60, 0, C.byref(vp())).code == PYG_ERR_OUT_OF_MEMORY
    assert pg.error_of("device_set_option", ctx.d0, b"no_such_key", b"1").code == PYG_ERR_UNSUPPORTED
    assert pg.error_of("device_set_option", ctx.d0, b"caps", b"zz").code == PYG_ERR_INVALID_ARGUMENT
    b = ctx.buffer(ctx.d0, 16)
    buf = np.zeros(8, np.float32)
    assert pg.error_of("buffer_write", b, 0, buf.ctypes.data, 32).code == PYG_ERR_INVALID_ARGUMENT
    for name in ("stream_destroy", "event_destroy", "buffer_free", "graph_plan_destroy"):
        getattr(pg.api, name)(None)  # R6: NULL is a no-op
    pg.api.error_destroy(None)


def test_memory_limit_option(ctx):
    pg = ctx.pg
    pg.opt(ctx.d1, "memory", 1 << 20)
    try:
        free, total = C.c_uint64(), C.c_uint64()
        pg.call("device_memory", ctx.d1, C.byref(free), C.byref(total))
        assert total.value == 1 << 20
        ctx.buffer(ctx.d1, 600_000)
        pg.call("device_memory", ctx.d1, C.byref(free), C.byref(total))
        assert free.value == (1 << 20) - 600_000
        assert pg.error_of("buffer_alloc", ctx.d1, 600_000, 0, C.byref(vp())).code == PYG_ERR_OUT_OF_MEMORY
    finally:
        pg.opt(ctx.d1, "memory", 8 << 30)


# ---------------------------------------------------------------- queues and events

def test_async_write_then_read_round_trip_with_latency(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 300_000)
    s = ctx.stream(ctx.d0)
    b = ctx.buffer(ctx.d0, 4096)
    x = np.arange(1024, dtype=np.float32)
    y = np.zeros(1024, np.float32)
    pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
    ev = ctx.event(ctx.d0)
    pg.call("event_record", ev, s)
    done = C.c_int32(7)
    pg.call("event_query", ev, C.byref(done))
    assert done.value == 0, "the copy should still be queued behind 0.3 s of latency"
    pg.call("stream_read_async", s, b, 0, y.ctypes.data, y.nbytes)
    pg.call("stream_synchronize", s)
    pg.call("event_query", ev, C.byref(done))
    assert done.value == 1
    assert np.array_equal(x, y)
    assert pg.sanitizer_report(ctx.d0) == ""


def test_fresh_event_counts_as_completed(ctx):
    pg = ctx.pg
    ev = ctx.event(ctx.d0)
    done = C.c_int32(0)
    pg.call("event_query", ev, C.byref(done))
    assert done.value == 1
    pg.call("event_synchronize", ev)
    pg.call("stream_wait_event", ctx.stream(ctx.d1), ev)


def test_event_orders_two_streams(ctx):
    """A writes (slowly), records; B waits on the event and reads: B sees A's data."""
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 200_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 4096)
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    y = np.zeros_like(x)
    pg.call("stream_write_async", a, buf, 0, x.ctypes.data, x.nbytes)
    ev = ctx.event(ctx.d0)
    pg.call("event_record", ev, a)
    pg.call("stream_wait_event", b, ev)
    pg.call("stream_read_async", b, buf, 0, y.ctypes.data, y.nbytes)
    pg.call("stream_synchronize", b)
    assert np.array_equal(x, y)
    assert pg.sanitizer_report(ctx.d0) == ""
    assert pg.errors_logged() == []


def test_event_orders_across_devices_with_peer_copy(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    s0, s1 = ctx.stream(ctx.d0), ctx.stream(ctx.d1)
    b0, b1 = ctx.buffer(ctx.d0, 256), ctx.buffer(ctx.d1, 256)
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    pg.call("stream_write_async", s0, b0, 0, x.ctypes.data, x.nbytes)
    ev = ctx.event(ctx.d0)
    pg.call("event_record", ev, s0)
    pg.call("stream_wait_event", s1, ev)  # an event of another device may be waited on
    pg.call("stream_copy_async", s1, b1, 0, b0, 0, x.nbytes)
    pg.call("stream_read_async", s1, b1, 0, y.ctypes.data, y.nbytes)
    pg.call("stream_synchronize", s1)
    assert np.array_equal(x, y)
    assert pg.sanitizer_report(ctx.d0) == ""


def test_without_a_wait_the_other_stream_really_races(ctx):
    """Not ordered: B runs before A's slow copy lands and reads the old bytes (here: the fill)."""
    pg = ctx.pg
    pg.opt(ctx.d0, "sanitize", 0)
    pg.opt(ctx.d0, "copy_latency_us", 300_000)
    a = ctx.stream(ctx.d0)
    pg.opt(ctx.d0, "copy_latency_us", 0)  # latency is taken when a copy is queued
    b = ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 64)
    pg.call("buffer_fill", buf, 0, 0, 64)
    pg.opt(ctx.d0, "copy_latency_us", 300_000)
    x = np.ones(16, np.float32)
    pg.call("stream_write_async", a, buf, 0, x.ctypes.data, x.nbytes)
    pg.opt(ctx.d0, "copy_latency_us", 0)
    y = np.full(16, 5, np.float32)
    pg.call("stream_read_async", b, buf, 0, y.ctypes.data, y.nbytes)
    pg.call("stream_synchronize", b)
    assert np.array_equal(y, np.zeros(16, np.float32))
    pg.call("stream_synchronize", a)
    assert np.array_equal(pg.read(buf, 16), x)


def _trace(pg):
    out = []
    with pg._log_lock:
        for _lvl, _p, m in pg.logs:
            if m.startswith("trace "):
                out.append(dict(kv.split("=", 1) for kv in m.split(" ")[1:7]))
    return out


def test_trace_shows_two_devices_running_at_once_and_fifo_per_stream(ctx):
    """Structure, not speed: the two devices' computes overlap in time; one stream never does."""
    pg = ctx.pg
    pg.opt(ctx.d0, "trace", 1)
    try:
        for d in (ctx.d0, ctx.d1):
            pg.opt(d, "launch_latency_us", 150_000)
        s0, s1 = ctx.stream(ctx.d0), ctx.stream(ctx.d1)
        g0, g1 = AddGraph(ctx, ctx.d0, 4, 1), AddGraph(ctx, ctx.d1, 4, 1)
        for g in (g0, g1):
            pg.call("buffer_fill", g.buf, 0, 0, 16)
        pg.call("graph_plan_compute", g0.plan, s0)
        pg.call("graph_plan_compute", g0.plan, s0)
        pg.call("graph_plan_compute", g1.plan, s1)
        pg.call("stream_synchronize", s0)
        pg.call("stream_synchronize", s1)  # delivers the workers' trace lines
        tr = [t for t in _trace(pg) if t["kind"] == "compute"]
        a = sorted((int(t["start_us"]), int(t["end_us"])) for t in tr if t["device"] == "testdev:0")
        b = [(int(t["start_us"]), int(t["end_us"])) for t in tr if t["device"] == "testdev:1"]
        assert len(a) == 2 and len(b) == 1, tr
        assert a[0][1] <= a[1][0], "one stream runs its commands one after the other"
        assert b[0][0] < a[0][1] and a[0][0] < b[0][1], "two devices run at the same time"
        g0.destroy()
        g1.destroy()
    finally:
        pg.opt(ctx.d0, "trace", 0)


def test_waits_snapshot_the_event_and_never_deadlock(ctx):
    """Cross waits between two streams, and an event re-recorded after a wait was queued."""
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 50_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    ea, eb = ctx.event(ctx.d0), ctx.event(ctx.d0)
    buf = ctx.buffer(ctx.d0, 64)
    x = np.arange(16, dtype=np.float32)
    pg.call("stream_write_async", a, buf, 0, x.ctypes.data, x.nbytes)
    pg.call("event_record", ea, a)
    pg.call("event_record", eb, b)
    pg.call("stream_wait_event", b, ea)
    pg.call("stream_wait_event", a, eb)
    pg.call("event_record", ea, b)  # re-record: the wait already queued keeps its old point
    pg.call("stream_wait_event", a, ea)
    pg.call("stream_synchronize", a)
    pg.call("stream_synchronize", b)
    assert pg.sanitizer_report(ctx.d0) == ""


def test_missing_caps_are_enforced(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "caps", f"{DEFAULT_CAPS & ~CAP['EVENTS'] & ~CAP['PEER_COPY']:x}")
    assert pg.error_of("event_create", ctx.d0, C.byref(vp())).code == PYG_ERR_UNSUPPORTED
    s = ctx.stream(ctx.d0)
    b0, b1 = ctx.buffer(ctx.d0, 64), ctx.buffer(ctx.d1, 64)
    assert pg.error_of("stream_copy_async", s, b1, 0, b0, 0, 64).code == PYG_ERR_UNSUPPORTED
    ev1 = ctx.event(ctx.d1)
    assert pg.error_of("event_record", ev1, s).code == PYG_ERR_INVALID_ARGUMENT  # R11: wrong device


def test_without_async_write_cap_the_copy_blocks(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "caps", f"{DEFAULT_CAPS & ~CAP['ASYNC_WRITE_PAGEABLE']:x}")
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    s = ctx.stream(ctx.d0)
    b = ctx.buffer(ctx.d0, 64)
    x = np.arange(16, dtype=np.float32)
    pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
    x[:] = -1  # legal now: the call returned after the copy
    assert np.array_equal(pg.read(b, 16), np.arange(16, dtype=np.float32))
    assert pg.sanitizer_report(ctx.d0) == ""


def test_two_instances_are_independent(libdir, plugin_session):
    other = Plugin(os.path.join(libdir, "libpyggml-testdevb.so"))
    assert other.api.name == b"testdevb"
    d = other.device(0)
    other.opt(d, "copy_latency_us", 1234)
    other.opt(d, "name", "second")
    assert other.props(d).name == b"second"
    assert plugin_session.props(plugin_session.device(0)).name == b"testdev"


def test_every_loader_gets_the_log(ctx, libdir):
    """A second host (pyggml next to a ctypes harness) asking for the same library gets logs too."""
    pg = ctx.pg
    got = []
    cb = HostInfo._fields_[4][1](lambda _u, level, _p, msg: got.append((level, msg.decode())))
    host2 = HostInfo(C.sizeof(HostInfo), 1, 0, 0, cb, None)
    lib = C.CDLL(os.path.join(libdir, "libpyggml-testdev.so"), mode=os.RTLD_NOW | os.RTLD_LOCAL)
    lib.pyg_plugin_get_api.restype = vp
    lib.pyg_plugin_get_api.argtypes = [P(HostInfo)]
    assert lib.pyg_plugin_get_api(C.byref(host2)) == C.addressof(pg.api)  # one instance, one table
    pg._keep_host2 = (cb, host2)  # the plugin keeps the pointer until process exit
    s = ctx.stream(ctx.d0)
    b = ctx.buffer(ctx.d0, 64)
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    x = np.ones(16, np.float32)
    pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
    pg.error_of("buffer_fill", b, 0, 0, 64)
    assert any(lvl == PYG_LOG_ERROR and "buffer_fill" in m for lvl, m in got), got
    assert any("buffer_fill" in m for m in pg.errors_logged())
    pg.call("stream_synchronize", s)


# ---------------------------------------------------------------- graphs on the CPU kernels

def test_compute_add_matches_numpy_bitwise(ctx):
    pg = ctx.pg
    pg.opt(ctx.d1, "launch_latency_us", 50_000)
    s = ctx.stream(ctx.d1)
    g = AddGraph(ctx, ctx.d1, 37, 5)
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal(185).astype(np.float32) for _ in range(2))
    pg.call("buffer_write", g.buf, g.off[0], x.ctypes.data, x.nbytes)
    pg.call("buffer_write", g.buf, g.off[1], y.ctypes.data, y.nbytes)
    assert pg.api.device_supports_op(ctx.d1, C.byref(g.t[2])) == 1
    pg.call("graph_plan_compute", g.plan, s)
    pg.call("stream_synchronize", s)
    out = pg.read(g.buf, 185, g.off[2])
    assert out.tobytes() == (x + y).tobytes()
    g.destroy()
    assert pg.sanitizer_report(ctx.d0) == ""


def test_plan_refuses_operand_on_another_device(ctx):
    pg = ctx.pg
    g = AddGraph(ctx, ctx.d0, 4, 1)
    other = ctx.buffer(ctx.d1, 64)
    g.t[1].buffer, g.t[1].offset, g.t[1].data = other, 0, pg.info(other).base
    plan = vp()
    e = pg.error_of("graph_plan_create", ctx.d0, C.byref(g.graph), C.byref(plan))
    assert e.code == PYG_ERR_INVALID_ARGUMENT and "testdev:1" in e.msg and "copy it first" in e.msg
    g.destroy()


# ---------------------------------------------------------------- through pyggml's scheduler

PYGGML_SCRIPT = r"""
import sys
import numpy as np
import pyggml as pg
try:
    p = pg.load_plugin(sys.argv[1])
    pg.get_device("cpu")
except pg.PyggmlError as e:
    print("SKIP", e)
    sys.exit(0)
assert p.name == "testdev" and [str(d) for d in p.devices][:2] == ["testdev:0", "testdev:1"]
dev = p.devices[1]
dev.set_option("sanitize", 1)
dev.set_option("launch_latency_us", 20000)
dev.set_option("copy_latency_us", 5000)
rng = np.random.default_rng(3)
g = pg.Graph()
x = g.input("x", (5, 64), pg.f32)
w = g.weight("w", rng.standard_normal((48, 64)).astype(np.float32))
y = pg.silu(pg.mul_mat(w, pg.rms_norm(x, eps=1e-5)))
for _ in range(2):
    xs = rng.standard_normal((5, 64)).astype(np.float32)
    got = pg.Scheduler([dev], poison=True).compute(y, {"x": xs})
    want = pg.Scheduler("cpu").compute(y, {"x": xs})
    assert got.tobytes() == want.tobytes(), "testdev and cpu differ"
try:
    dev.set_option("sanitize_check", "1")
except pg.SanitizerError as e:
    raise AssertionError(f"sanitizer report: {e}")
print("OK")
"""


def test_pyggml_scheduler_runs_on_testdev_bitwise_like_cpu(libdir):
    """pyggml's own scheduler on testdev:1 (sanitizer on, latency) equals the CPU plugin bit for bit.
    Run in a child process: the scheduler is a separate component, a crash there must not end this
    session."""
    try:
        import pyggml  # noqa: F401
    except ImportError as e:
        pytest.skip(f"pyggml is not importable (extensions not built?): {e}")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", PYGGML_SCRIPT, os.path.join(libdir, "libpyggml-testdev.so")],
                       capture_output=True, text=True, timeout=300, env=env)
    if r.stdout.startswith("SKIP"):
        pytest.skip(r.stdout.strip())
    assert r.returncode == 0 and "OK" in r.stdout, f"rc {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"


GIL_SCRIPT = r"""
import ctypes as C, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import testdev_ctypes as T
pg = T.Plugin(sys.argv[2])
d = pg.device(0)
pg.opt(d, "sanitize", 1)
pg.opt(d, "copy_latency_us", 100000)
s = pg.new("stream", d, 0)
b = pg.buffer(d, 4096)
x = np.arange(1024, dtype=np.float32)
pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
x[:] = 0  # the worker will find this and log it
pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
# a caller that keeps the GIL while it waits for the worker (Cython without nogil)
sync = C.PYFUNCTYPE(C.c_void_p, C.c_void_p)(C.cast(pg.api.stream_synchronize, C.c_void_p).value)
err = sync(s)
code = pg.api.error_code(err)
pg.api.error_destroy(err)
assert code == T.PYG_ERR_SANITIZER, code
assert any("host memory changed" in m for m in pg.errors_logged()), pg.logs
print("OK")
"""


def test_worker_never_calls_the_host_log_while_the_host_waits_holding_the_gil(libdir):
    """Regression: a worker that delivered its log itself needed the GIL, held by a host thread
    waiting in stream_synchronize for that worker: a deadlock. Child process, so a hang times out."""
    r = subprocess.run([sys.executable, "-c", GIL_SCRIPT, os.path.dirname(os.path.abspath(__file__)),
                        os.path.join(libdir, "libpyggml-testdev.so")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, f"{r.stdout}\n{r.stderr[-3000:]}"


ENV_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import testdev_ctypes as T
pg = T.Plugin(sys.argv[2])
assert pg.api.name == b"testdevb", pg.api.name
assert pg.api.device_count() == 3, pg.api.device_count()
p = pg.props(pg.device(2))
assert p.caps == 0x1b and p.quirks == 0x2 and p.name == b"envdev" and p.memory_total == 1 << 20, (p.caps, p.quirks, p.name)
import numpy as np
d = pg.device(0)
pg.opt(d, "copy_latency_us", 100000)
s = pg.new("stream", d, 0)
b = pg.buffer(d, 64)
x = np.ones(16, np.float32)
pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
e = pg.error_of("buffer_read", b, 0, x.ctypes.data, x.nbytes)   # PYGGML_SANITIZE=1 turned the checks on
assert e.code == T.PYG_ERR_SANITIZER, e
print("OK")
"""


def test_configuration_from_the_environment(libdir):
    """PYGGML_<NAME>_* at plugin_init (here the testdevb instance, so PYGGML_TESTDEVB_*)."""
    env = dict(os.environ, PYGGML_SANITIZE="1", PYGGML_TESTDEVB_DEVICES="3", PYGGML_TESTDEVB_CAPS="1b",
               PYGGML_TESTDEVB_QUIRKS="2", PYGGML_TESTDEVB_NAME="envdev", PYGGML_TESTDEVB_MEMORY=str(1 << 20),
               PYGGML_TESTDEV_DEVICES="5")  # another instance's prefix: ignored
    r = subprocess.run([sys.executable, "-c", ENV_SCRIPT, os.path.dirname(os.path.abspath(__file__)),
                        os.path.join(libdir, "libpyggml-testdevb.so")], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, f"{r.stdout}\n{r.stderr[-3000:]}"


def test_pageable_host_copies_block_like_cuda(ctx):
    """The CUDA runtime's pageable semantics (pageable_async=0, the default): a queued read into
    ordinary host memory returns when done; a queued write from it larger than staging_bytes
    returns only once the stream reached it; into or from pinned memory both stay queued."""
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 200_000)
    pg.opt(ctx.d0, "staging_bytes", 64)
    s = ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 256)
    x = np.arange(64, dtype=np.float32)
    pg.call("buffer_write", buf, 0, x.ctypes.data, x.nbytes)
    y = np.zeros(64, np.float32)
    pg.call("stream_read_async", s, buf, 0, y.ctypes.data, y.nbytes)
    assert np.array_equal(x, y), "a pageable read returns when it is done"
    pinned = ctx.buffer(ctx.d0, 256, flags=1)                            # PYG_BUFFER_HOST
    ev = ctx.event(ctx.d0)

    def done():
        d = C.c_int32(0)
        pg.call("event_query", ev, C.byref(d))
        return bool(d.value)

    pg.call("stream_read_async", s, buf, 0, pg.info(pinned).host_ptr, 256)
    pg.call("event_record", ev, s)                                        # after the pinned read
    assert not done(), "a read into pinned memory stays queued"
    x2 = -x
    pg.call("stream_write_async", s, buf, 0, x2.ctypes.data, x2.nbytes)   # 256 > staging_bytes
    # deterministic, not timed: the write returned once the stream reached it, so the read and the
    # event queued before it are complete
    assert done(), "a large pageable write returns only when the stream reached it"
    x2[:] = 7                                       # the source was consumed when the call returned
    pg.call("stream_synchronize", s)
    pg.call("buffer_read", buf, 0, y.ctypes.data, y.nbytes)
    assert np.array_equal(y, -x)


def test_staged_blocking_write_lands_late_on_the_default_queue(ctx):
    """blocking_copies=staged (CUDA's pageable cudaMemcpy, not waited for): buffer_write returns
    before the bytes land; a compute queued at once reads the old bytes and the sanitizer names the
    default queue's pending write; a later blocking read waits for the default queue."""
    pg = ctx.pg
    pg.opt(ctx.d0, "blocking_copies", "staged")
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    s = ctx.stream(ctx.d0)
    g = AddGraph(ctx, ctx.d0, 8, 4)
    x = np.ones(32, np.float32)
    pg.call("buffer_write", g.buf, g.off[0], x.ctypes.data, x.nbytes)
    pg.call("buffer_write", g.buf, g.off[1], x.ctypes.data, x.nbytes)
    e = pg.error_of("graph_plan_compute", g.plan, s)
    assert e.code == PYG_ERR_SANITIZER and "landing on the default queue" in e.msg, e.msg
    pg.call("stream_synchronize", s)
    out = np.zeros(32, np.float32)
    pg.call("buffer_read", g.buf, g.off[2], out.ctypes.data, out.nbytes)
    assert not np.array_equal(out, 2 * x), "the compute ran before the staged bytes landed"
    back = np.zeros(32, np.float32)
    pg.call("buffer_read", g.buf, g.off[0], back.ctypes.data, back.nbytes)
    assert np.array_equal(back, x), "a blocking read waits for the default queue"
    pg.sanitizer_report(ctx.d0)
