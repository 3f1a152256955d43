"""The test plugin's sanitizer: what it catches (a read on another stream without a wait, a host
write into a slot still being read, a plan destroyed before its sync, ...) and where it stays quiet;
plus the ordering rules beyond the queue/event basics. See tests/test_testdev.py for the plugin."""
import os
import shutil
import subprocess

import numpy as np
import pytest

from testdev_ctypes import (  # noqa: F401 (pytest fixtures: ctx, libdir, plugin_session)
    AddGraph, PYG_ERR_SANITIZER, QUIRK_MULTI_DEVICE_SYNC, QUIRK_NO_ASYNC_HOST_COPY, ROOT, ctx,
    libdir, plugin_session)


# ---------------------------------------------------------------- sanitizer

def test_sanitizer_catches_read_on_other_stream_without_wait(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 4096)
    x = np.ones(256, np.float32)
    y = np.zeros(128, np.float32)
    pg.call("stream_write_async", a, buf, 0, x.ctypes.data, x.nbytes)
    e = pg.error_of("stream_read_async", b, buf, 512, y.ctypes.data, y.nbytes)
    assert e.code == PYG_ERR_SANITIZER
    for part in ("buffer #", "bytes [512, 1024)", "read by stream", "pending write by stream",
                 "stream_write_async", "stream_read_async", "testdev:0"):
        assert part in e.msg, (part, e.msg)
    logged = pg.errors_logged()
    assert any("unordered access" in m for m in logged), logged
    assert "unordered access" in pg.sanitizer_report(ctx.d0)
    assert pg.sanitizer_report(ctx.d0) == ""  # reported once


def test_sanitizer_catches_compute_reading_unordered_input(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 50_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    g = AddGraph(ctx, ctx.d0, 8, 4)
    x = np.ones(32, np.float32)
    pg.call("stream_write_async", a, g.buf, g.off[0], x.ctypes.data, x.nbytes)
    e = pg.error_of("graph_plan_compute", g.plan, b)
    assert e.code == PYG_ERR_SANITIZER
    assert "node 'sum' (add) reads 'x'" in e.msg, e.msg
    pg.call("stream_synchronize", b)
    g.destroy()


def test_sanitizer_catches_host_reusing_async_write_source(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 200_000)
    s = ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 4096)
    x = np.arange(1024, dtype=np.float32)
    pg.call("stream_write_async", s, buf, 0, x.ctypes.data, x.nbytes)
    x[:] = 0  # the bug: the input array is reused before the stream passed the copy
    e = pg.error_of("stream_synchronize", s)
    assert e.code == PYG_ERR_SANITIZER
    assert "host memory changed before async write completed" in e.msg
    assert np.array_equal(pg.read(buf, 1024), np.zeros(1024, np.float32))  # what real hardware copies
    assert any("host memory changed" in m for m in pg.errors_logged())
    pg.call("stream_synchronize", s)  # reported once


def test_sanitizer_catches_host_read_of_pending_write(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    s = ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 256)
    x = np.ones(64, np.float32)
    pg.call("stream_write_async", s, buf, 0, x.ctypes.data, x.nbytes)
    y = np.zeros(64, np.float32)
    e = pg.error_of("buffer_read", buf, 0, y.ctypes.data, y.nbytes)
    assert e.code == PYG_ERR_SANITIZER and "by the host [buffer_read]" in e.msg, e.msg
    pg.call("stream_synchronize", s)
    pg.call("buffer_read", buf, 0, y.ctypes.data, y.nbytes)  # now ordered
    assert np.array_equal(x, y)


def test_sanitizer_catches_async_read_target_reused_as_async_write_source(ctx):
    """Output read back on A, fed as input on B without any ordering: host memory is tracked."""
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 100_000)
    pg.opt(ctx.d0, "pageable_async", 1)      # a device whose reads into pageable memory are queued
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d1)
    b0, b1 = ctx.buffer(ctx.d0, 256), ctx.buffer(ctx.d1, 256)
    host = np.zeros(64, np.float32)
    pg.call("stream_read_async", a, b0, 0, host.ctypes.data, host.nbytes)
    e = pg.error_of("stream_write_async", b, b1, 0, host.ctypes.data, host.nbytes)
    assert e.code == PYG_ERR_SANITIZER and "host memory" in e.msg, e.msg


def test_sanitizer_quiet_for_properly_ordered_pipeline(ctx):
    """Upload on a copy stream, compute on another after an event, read back after another event,
    host sync, then reuse the input array for a second round: no report, right results."""
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 30_000)
    pg.opt(ctx.d0, "launch_latency_us", 30_000)
    up, comp = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    e_up, e_comp = ctx.event(ctx.d0), ctx.event(ctx.d0)
    g = AddGraph(ctx, ctx.d0, 8, 4)
    rng = np.random.default_rng(1)
    for _ in range(2):
        x = rng.standard_normal(32).astype(np.float32)
        y = rng.standard_normal(32).astype(np.float32)
        out = np.zeros(32, np.float32)
        pg.call("stream_write_async", up, g.buf, g.off[0], x.ctypes.data, x.nbytes)
        pg.call("stream_write_async", up, g.buf, g.off[1], y.ctypes.data, y.nbytes)
        pg.call("event_record", e_up, up)
        pg.call("stream_wait_event", comp, e_up)
        pg.call("graph_plan_compute", g.plan, comp)
        pg.call("event_record", e_comp, comp)
        pg.call("stream_wait_event", up, e_comp)
        pg.call("stream_read_async", up, g.buf, g.off[2], out.ctypes.data, out.nbytes)
        pg.call("stream_synchronize", up)
        assert np.array_equal(out, x + y)
    g.destroy()
    assert pg.sanitizer_report(ctx.d0) == ""
    assert pg.errors_logged() == []


def test_sanitizer_poisons_early_reads_of_async_read_targets(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 200_000)
    pg.opt(ctx.d0, "pageable_async", 1)      # a device whose reads into pageable memory are queued
    s = ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 64)
    x = np.arange(16, dtype=np.float32)
    pg.call("buffer_write", buf, 0, x.ctypes.data, x.nbytes)
    y = x.copy()  # yesterday's result, equal to today's: an early look would pass unnoticed
    pg.call("stream_read_async", s, buf, 0, y.ctypes.data, y.nbytes)
    assert np.isnan(y).all()  # what a host that forgot to sync would see
    pg.call("stream_synchronize", s)
    assert np.array_equal(x, y)


def test_sanitizer_checks_declared_quirks(ctx):
    pg = ctx.pg
    pg.opt(ctx.d1, "quirks", QUIRK_NO_ASYNC_HOST_COPY)
    s = ctx.stream(ctx.d1)
    b = ctx.buffer(ctx.d1, 64)
    x = np.ones(16, np.float32)
    e = pg.error_of("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
    assert e.code == PYG_ERR_SANITIZER and "PYG_QUIRK_NO_ASYNC_HOST_COPY" in e.msg
    pg.call("stream_synchronize", s)
    pg.call("buffer_write", b, 0, x.ctypes.data, x.nbytes)  # the honoured path is fine
    pg.sanitizer_report(ctx.d0)

    pg.opt(ctx.d1, "quirks", QUIRK_MULTI_DEVICE_SYNC)
    g = AddGraph(ctx, ctx.d1, 4, 1)
    s0 = ctx.stream(ctx.d0)
    b0 = ctx.buffer(ctx.d0, 64)
    pg.call("graph_plan_compute", g.plan, s)
    e = pg.error_of("stream_write_async", s0, b0, 0, x.ctypes.data, x.nbytes)
    assert "PYG_QUIRK_MULTI_DEVICE_SYNC" in e.msg
    pg.call("graph_plan_compute", g.plan, s)
    pg.call("stream_synchronize", s)  # the honoured path: sync after the split
    pg.call("stream_write_async", s0, b0, 0, x.ctypes.data, x.nbytes)
    pg.call("stream_synchronize", s0)
    g.destroy()


def test_sanitizer_catches_free_of_buffer_in_use(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 50_000)
    s = ctx.stream(ctx.d0)
    b = pg.buffer(ctx.d0, 64)
    x = np.ones(16, np.float32)
    pg.call("stream_write_async", s, b, 0, x.ctypes.data, x.nbytes)
    pg.api.buffer_free(b)  # waits for the copy (no crash), but it is a host-ordering bug
    assert "buffer_free" in pg.sanitizer_report(ctx.d0)


# ---------------------------------------------------------------- more ordering rules

def test_host_sync_orders_streams_without_events(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "copy_latency_us", 50_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    buf = ctx.buffer(ctx.d0, 256)
    x = np.arange(64, dtype=np.float32)
    y = np.zeros_like(x)
    pg.call("stream_write_async", a, buf, 0, x.ctypes.data, x.nbytes)
    pg.call("stream_synchronize", a)  # host wait: everything queued later is ordered after it
    pg.call("stream_read_async", b, buf, 0, y.ctypes.data, y.nbytes)
    pg.call("stream_synchronize", b)
    assert np.array_equal(x, y)
    assert pg.sanitizer_report(ctx.d0) == ""


def test_sanitizer_catches_slot_rewritten_while_still_read(ctx):
    """Write-after-read: B still reads the input slot when A uploads the next micro-batch."""
    pg = ctx.pg
    pg.opt(ctx.d0, "launch_latency_us", 100_000)
    a, b = ctx.stream(ctx.d0), ctx.stream(ctx.d0)
    g = AddGraph(ctx, ctx.d0, 8, 2)
    x = np.ones(16, np.float32)
    pg.call("stream_write_async", a, g.buf, g.off[0], x.ctypes.data, x.nbytes)
    ev = ctx.event(ctx.d0)
    pg.call("event_record", ev, a)
    pg.call("stream_wait_event", b, ev)
    pg.call("graph_plan_compute", g.plan, b)  # reads slot x for the next 0.1 s
    e = pg.error_of("stream_write_async", a, g.buf, g.off[0], x.ctypes.data, x.nbytes)
    assert e.code == PYG_ERR_SANITIZER
    assert "write by stream" in e.msg and "pending read by stream" in e.msg and "reads 'x'" in e.msg, e.msg
    pg.call("stream_synchronize", b)
    g.destroy()


def test_sanitizer_catches_plan_destroyed_before_sync(ctx):
    pg = ctx.pg
    pg.opt(ctx.d0, "launch_latency_us", 50_000)
    s = ctx.stream(ctx.d0)
    g = AddGraph(ctx, ctx.d0, 4, 1)
    pg.call("graph_plan_compute", g.plan, s)
    g.destroy()  # waits for the compute (no crash), but the host never synchronized it
    assert "graph_plan_destroy" in pg.sanitizer_report(ctx.d0)


def test_stress_from_several_host_threads(libdir, tmp_path):
    """Four host threads, two devices, events across threads, computes: data right, no report.
    (tests/plugins/testdev/stress.c; run it by hand under -fsanitize=thread for the locking.)"""
    if not shutil.which("cc"):
        pytest.skip("no C compiler")
    exe = str(tmp_path / "stress")
    subprocess.run(["cc", "-O1", "-I", os.path.join(ROOT, "include"),
                    os.path.join(ROOT, "tests", "plugins", "testdev", "stress.c"), "-o", exe, "-ldl", "-lpthread"],
                   check=True, capture_output=True, text=True)
    r = subprocess.run([exe, os.path.join(libdir, "libpyggml-testdev.so"), "100"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ok: 4 threads x 100 iterations" in r.stdout


