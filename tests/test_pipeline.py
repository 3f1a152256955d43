"""Pipelined micro-batches (Scheduler.compute_batches) on the GPU-like test plugin, modelled on the
CUDA runtime (tests/plugins/testdev/hostcopy.c, queue.c): blocking copies on a default queue,
queued reads into ordinary host memory that block until done, large queued writes from it that
block until the stream reaches them.

The H200 showed `strict` returning wrong micro-batches (a blocking write that returned before its
bytes landed, unordered with the streams) and two GPUs pipelining nothing (each micro-batch's
output read blocked the host until the last GPU finished it). Both are reproduced here: every
micro-batch must equal the CPU's under every policy, slot count and device count, with the
sanitizer silent; and the devices' queues must overlap.
"""
import json
import os

import numpy as np
import pytest

import pyggml as pg
from testdev_ctypes import load_builder

tb = load_builder()

LAYERS = 6
ROWS, K = 520, 512          # an input of 1.0 MiB + : beyond the modelled staging buffer


@pytest.fixture(scope="module")
def tdp():
    """Three devices of a CUDA-like test plugin, sanitizer on, with queue latencies."""
    d = tb.build_testdev(names=("tdp",))
    os.environ["PYGGML_TDP_DEVICES"] = "3"
    try:
        p = pg.load_plugin(os.path.join(d, "libpyggml-tdp.so"))
    finally:
        os.environ.pop("PYGGML_TDP_DEVICES")
    for dev in p.devices:
        dev.set_option("sanitize", "1")
        dev.set_option("copy_latency_us", "2000")
        dev.set_option("launch_latency_us", "1000")
        dev.set_option("n_threads", str(os.cpu_count()))
    yield p
    assert tb.sanitizer_report(p.devices[0]) == ""


def _stack(devices):
    """LAYERS x (mul_mat -> silu -> rms_norm), the layers split into contiguous ranges over devices."""
    rng = np.random.default_rng(11)
    g = pg.Graph()
    x = g.input("x", (ROWS, K))
    h = x
    for i in range(LAYERS):
        with g.on(devices[i * len(devices) // LAYERS]):
            w = g.weight(f"w{i}", (rng.standard_normal((K, K)) / np.sqrt(K)).astype(np.float32))
            h = pg.rms_norm(pg.silu(pg.mul_mat(w, h)), eps=1e-5)
    return h


def _batches(n, seed=5):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((ROWS, K)).astype(np.float32)} for _ in range(n)]


@pytest.fixture(scope="module")
def reference():
    feeds = _batches(6)
    cpu = pg.Scheduler(["cpu"])
    y = _stack(["cpu"])
    out = [cpu.compute(y, f) for f in feeds]
    return feeds, out


@pytest.mark.parametrize("n_dev", [1, 2, 3])
@pytest.mark.parametrize("n_copies", [1, 2, 4])
@pytest.mark.parametrize("policy", ["strict", "relaxed", "events"])
def test_every_micro_batch_is_right(tdp, reference, policy, n_copies, n_dev):
    feeds, want = reference
    devices = [f"tdp:{i}" for i in range(n_dev)]
    s = pg.Scheduler(devices, sync=policy, n_copies=n_copies)
    y = _stack(devices)
    got = s.compute_batches(y, feeds)
    got += [s.compute(y, f) for f in feeds[:2]]     # single runs: the user's arrays, no staging
    want = list(want) + list(want[:2])
    report = tb.sanitizer_report(tdp.devices[0])
    wrong = [m for m in range(len(got)) if not np.array_equal(got[m], want[m])]
    s.close()
    assert report == "", report
    assert wrong == [], f"micro-batches {wrong} differ from the CPU's"


def _queue_spans(path):
    doc = json.loads(open(path).read())
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["name"].startswith("launch") and names[e["tid"]].endswith("queue"):
            spans[(names[e["tid"]].split()[0], e["args"]["mb"])] = (e["ts"], e["ts"] + e["dur"])
    return spans


def test_two_devices_overlap_micro_batches(tdp, tmp_path):
    """While tdp:1 computes micro-batch m, tdp:0 already computes m + 1: the host must not wait
    for a micro-batch's output before it queues the next one's input and launch."""
    for dev in tdp.devices:
        dev.set_option("launch_latency_us", "40000")
    try:
        path = tmp_path / "pipe.json"
        s = pg.Scheduler(["tdp:0", "tdp:1"], sync="events", n_copies=2, trace=str(path))
        y = _stack(["tdp:0", "tdp:1"])
        s.compute_batches(y, _batches(4))
        s.close()
    finally:
        for dev in tdp.devices:
            dev.set_option("launch_latency_us", "1000")
    spans = _queue_spans(path)
    for m in range(3):
        start_next, _ = spans[("tdp:0", m + 1)]
        _, end_this = spans[("tdp:1", m)]
        assert start_next < end_this, f"tdp:0 started micro-batch {m + 1} only after tdp:1 finished {m}"


def test_a_blocking_write_that_returns_before_landing_is_caught(tdp, reference):
    """blocking_copies=staged is the CUDA plugin before the fix (a pageable cudaMemcpy on the legacy
    stream, not waited for): the sanitizer reports the launch that reads the slot it writes, and
    without the sanitizer strict's results come out wrong, as they did on the H200. (Pipelined runs
    now write inputs from pinned staging, which such a copy completes before returning.)"""
    feeds, want = reference
    for dev in tdp.devices:
        dev.set_option("blocking_copies", "staged")
    try:
        s = pg.Scheduler(["tdp:0"], sync="strict")
        y = _stack(["tdp:0"])
        with pytest.raises(pg.SanitizerError, match="landing on the default queue"):
            s.compute(y, feeds[0])
        tb.sanitizer_report(tdp.devices[0])
        tdp.devices[0].set_option("sanitize", "0")
        got = [s.compute(y, f) for f in feeds]
        assert any(not np.array_equal(got[m], want[m]) for m in range(len(feeds)))
        s.close()
    finally:
        for dev in tdp.devices:
            dev.set_option("blocking_copies", "complete")
        tdp.devices[0].set_option("sanitize", "1")
        tb.sanitizer_report(tdp.devices[0])
