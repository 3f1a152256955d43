"""The multi-device scheduler on the GPU-like test plugin (tests/plugins/testdev): results identical
to a CPU-only run under every policy, slot count and device set; the sanitizer catches a dropped
wait; sync patterns and declared quirks. Three independent copies of the test plugin are loaded:
tds (default caps), tdq (HIP/MUSA quirks declared), tdr (a second plugin: no peer path to tds)."""
import os
import random

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance import CASES

from _graphs import chain as _chain, random_graph as _random_graph
from testdev_ctypes import load_builder



tb = load_builder()


@pytest.fixture(scope="module")
def devs():
    d = tb.build_testdev(names=("tds", "tdq", "tdr"))
    os.environ["PYGGML_TDQ_QUIRKS"] = "3"          # no async host copies + multi-device syncs
    os.environ["PYGGML_TDR_DEVICES"] = "1"
    try:
        plugins = {n: pg.load_plugin(os.path.join(d, f"libpyggml-{n}.so")) for n in ("tds", "tdq", "tdr")}
    finally:
        os.environ.pop("PYGGML_TDQ_QUIRKS")
        os.environ.pop("PYGGML_TDR_DEVICES")
    for p in plugins.values():
        for dev in p.devices:
            dev.set_option("sanitize", "1")
            dev.set_option("copy_latency_us", "300")
            dev.set_option("launch_latency_us", "200")
            # the CPU plugin's thread count: kernels that split a reduction by thread (flash
            # attention's kv range) are bitwise identical only at the same count
            dev.set_option("n_threads", str(os.cpu_count()))
    assert plugins["tdq"].devices[0].quirks == 3
    yield plugins
    for p in plugins.values():
        assert tb.sanitizer_report(p.devices[0]) == ""


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")


DEVSETS = [["tds:0", "cpu"], ["tds:0", "tds:1", "cpu"], ["cpu", "tds:0"], ["tds:0", "tdr:0", "cpu"], ["tds:0"]]
POLICIES = ["strict", "relaxed", "events"]


@pytest.mark.parametrize("i,case", list(enumerate(CASES)), ids=[c.name for c in CASES])
def test_split_ops_match_cpu_bitwise(i, case, devs):
    policy = POLICIES[i % 3]
    devset = DEVSETS[(i // 3) % len(DEVSETS)]
    n_copies = 1 + i % 4
    rng = np.random.default_rng(i)
    outs, feeds, _ = case.build(rng)
    ref = pg.Scheduler(["cpu"]).compute(outs, feeds)
    pick = random.Random(i)
    for t in outs[0].graph.tensors:            # scatter the nodes over the devices
        if t.op:
            t.pin = pick.choice(devset)
    s = pg.Scheduler(devset, sync=policy, n_copies=n_copies)
    got = s.compute(outs, feeds)
    assert all(_same(a, b) for a, b in zip(got, ref)), f"{case.name}: {policy} {devset} n_copies={n_copies}"
    assert tb.sanitizer_report(devs["tds"].devices[0]) == ""


@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_match_cpu_bitwise(seed, devs):
    devset = DEVSETS[seed % len(DEVSETS)]
    out, kv, feeds = _random_graph(seed, devset)
    ref_s = pg.Scheduler(["cpu"])
    ref = ref_s.compute(out, feeds)
    s = pg.Scheduler(devset, sync=POLICIES[seed % 3], n_copies=1 + seed % 4)
    got = s.compute(out, feeds)
    assert _same(got, ref)
    if kv.graph.effects:                            # the graph wrote the state
        assert _same(s.read(kv), ref_s.read(kv))
    again = s.compute(out, feeds)                   # reused program, state written again
    assert _same(again, ref_s.compute(out, feeds))


def test_dropped_device_wait_is_caught_by_the_sanitizer(devs):
    y, feeds = _chain(["tds:0", "tds:1"])
    ok = pg.Scheduler(["tds:0", "tds:1"], sync="events")
    ref = ok.compute(y, feeds)
    assert "w" in ok.last_run.sync_pattern
    assert tb.sanitizer_report(devs["tds"].devices[0]) == ""
    bad = pg.Scheduler(["tds:0", "tds:1"], sync="events")
    bad._drop_sync = 0  # a test switch: leave out that ordering
    assert "input ready" in bad.program(y).dropped
    with pytest.raises(pg.SanitizerError, match="unordered access"):
        bad.compute(y, feeds)
    bad.close()
    assert "unordered access" in tb.sanitizer_report(devs["tds"].devices[0])
    assert _same(ok.compute(y, feeds), ref)


def _no_input_split_graph():
    """cpu: a = x @ wa.T; tds:0: b = silu(a) (a reaches tds by an async write from CPU memory);
    cpu: c = rms_norm(w) -- a split with no inputs, whose output reuses a's bytes in the CPU arena;
    tds:0: d = add(b, c)."""
    rng = np.random.default_rng(3)
    g = pg.Graph()
    x = g.input("x", (64, 16))
    wa = g.weight("wa", rng.standard_normal((64, 16)).astype(np.float32))
    w = g.weight("w", rng.standard_normal((64, 64)).astype(np.float32))
    with g.on("cpu"):
        a = pg.mul_mat(wa, x)
    with g.on("tds:0"):
        b = pg.silu(a)
    with g.on("cpu"):
        c = pg.rms_norm(w, eps=1e-5)
    with g.on("tds:0"):
        d = pg.add(b, c)
    return d, {"x": rng.standard_normal((64, 16)).astype(np.float32)}


@pytest.mark.parametrize("policy", ["relaxed", "events"])
def test_split_without_inputs_is_ordered(policy, devs):
    d, feeds = _no_input_split_graph()
    ref = pg.Scheduler(["cpu"]).compute(d, feeds)
    devs["tds"].devices[0].set_option("copy_latency_us", "20000")
    try:
        s = pg.Scheduler(["tds:0", "cpu"], sync=policy)
        plan = s.plan(d)
        assert [line.split(": ")[1] for line in plan.describe()] == ["cpu:0", "tds:0", "cpu:0", "tds:0"]
        assert plan.peak_bytes["cpu:0"] <= (64 * 16 + 64 * 64) * 4, "c should reuse a's bytes"
        assert _same(s.compute(d, feeds), ref)
        assert tb.sanitizer_report(devs["tds"].devices[0]) == ""
        text = s.program(d).text
        k = next(i for i, line in enumerate(text) if "split 2 on cpu:0" in line and line.startswith("sync"))
        n_before = sum(1 for line in text[:k] if line.startswith(("sync", "wait")))
        bad = pg.Scheduler(["tds:0", "cpu"], sync=policy)
        bad._drop_sync = n_before  # a test switch: leave out that ordering
        assert "split 2" in bad.program(d).dropped
        with pytest.raises(pg.SanitizerError, match="changed before async write completed"):
            bad.compute(d, feeds)
        bad.close()
        tb.sanitizer_report(devs["tds"].devices[0])
    finally:
        devs["tds"].devices[0].set_option("copy_latency_us", "300")


def test_relaxed_one_host_sync_per_split(devs):
    rng = np.random.default_rng(1)
    g = pg.Graph()
    ins = [g.input(n, (3, 16)) for n in "abc"]
    y = pg.rms_norm(pg.add(pg.mul(ins[0], ins[1]), ins[2]), eps=1e-5)
    feeds = {n: rng.standard_normal((3, 16)).astype(np.float32) for n in "abc"}
    s = pg.Scheduler(["tds:0"], sync="relaxed")
    s.compute(y, feeds)
    assert s.last_run.sync_pattern == "aaagas" and s.last_run.host_syncs == 1 == s.last_run.splits
    y2, feeds2 = _chain(["tds:0", "tds:1"])
    s2 = pg.Scheduler(["tds:0", "tds:1"], sync="relaxed")
    s2.compute(y2, feeds2)
    assert s2.last_run.splits == 2 and s2.last_run.host_syncs == 2
    assert "w" not in s2.last_run.sync_pattern


def test_events_no_host_sync_between_micro_batches(devs):
    y, _ = _chain(["tds:0", "tds:1"])
    rng = np.random.default_rng(2)
    mbs = [{"x": rng.standard_normal((4, 32)).astype(np.float32)} for _ in range(6)]
    for n_copies in (1, 2, 4):
        s = pg.Scheduler(["tds:0", "tds:1"], sync="events", n_copies=n_copies)
        got = s.compute_batches(y, mbs)
        ref_s = pg.Scheduler(["cpu"])
        for r, f in zip(got, mbs):
            assert _same(r, ref_s.compute(y, f))
        pat = s.last_run.sync_pattern
        assert "s" not in pat[: pat.rindex("g")], pat     # host waits only after the last launch
        assert pat.count("g") == 12


def test_quirks_disable_async_host_copies_and_add_split_syncs(devs):
    y, feeds = _chain(["tdq:0", "tdq:1"])
    ref = pg.Scheduler(["cpu"]).compute(y, feeds)
    s = pg.Scheduler(["tdq:0", "tdq:1"], sync="events")
    assert _same(s.compute(y, feeds), ref)
    text = s.program(y).text
    host_copies = [l for l in text if l.startswith(("write", "read"))]
    assert host_copies and all("blocking" in l for l in host_copies)
    launches = [i for i, l in enumerate(text) if l.startswith("launch")]
    assert all(text[i + 1].startswith("sync") and "quirk" in text[i + 1] for i in launches[:-1])
    # one device: the multi-device quirk does not apply
    one = pg.Scheduler(["tdq:0"], sync="events")
    y1, f1 = _chain(["tdq:0"])
    one.compute(y1, f1)
    assert not any("quirk" in l for l in one.program(y1).text)
    # the same graph on the quirk-free copy queues its host copies
    s2 = pg.Scheduler(["tds:0", "tds:1"], sync="events")
    y2, f2 = _chain(["tds:0", "tds:1"])
    s2.compute(y2, f2)
    assert any(l.startswith("write") and "async" in l for l in s2.program(y2).text)


def test_cross_plugin_copies_go_through_the_host(devs):
    y, feeds = _chain(["tds:0", "tdr:0"])
    ref = pg.Scheduler(["cpu"]).compute(y, feeds)
    s = pg.Scheduler(["tds:0", "tdr:0"], sync="events")
    assert _same(s.compute(y, feeds), ref)
    assert any("via host" in l for l in s.program(y).text)
    assert not any(l.startswith("wait") for l in s.program(y).text)


def test_pins_to_absent_devices_are_ignored(devs):
    y, feeds = _chain(["tds:0", "tds:1"])
    s = pg.Scheduler(["cpu"])
    assert s.plan(y).n_splits == 1
    s.compute(y, feeds)


def _tracks(doc):
    """{track name: [complete events]} of a trace document, with its integer tids resolved."""
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    out = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
            out.setdefault(names[e["tid"]], []).append(e)
    return out


def test_trace_file_has_host_and_queue_tracks(devs, tmp_path, monkeypatch):
    import json
    path = tmp_path / "trace.json"
    monkeypatch.setenv("PYGGML_TRACE", str(path))
    y, _ = _chain(["tds:0", "tds:1"])
    rng = np.random.default_rng(4)
    s = pg.Scheduler(["tds:0", "tds:1"], sync="events", n_copies=2)
    s.compute_batches(y, [{"x": rng.standard_normal((4, 32)).astype(np.float32)} for _ in range(3)])
    assert not path.exists(), "the trace is written at close, at exit or on flush, not after every compute"
    n_cmds = len(s.program(y, 3).text)
    s.close()
    tracks = _tracks(json.loads(path.read_text()))
    assert {"host", "tds:0 queue", "tds:1 queue"} <= set(tracks)
    launches = [e for n in ("tds:0 queue", "tds:1 queue") for e in tracks[n] if e["name"].startswith("launch")]
    assert len(launches) == 6 and all(e["dur"] > 0 for e in launches)
    assert len(tracks["host"]) == n_cmds


def test_trace_has_a_cpu_track_and_flushes_on_demand(tmp_path):
    import json
    path = tmp_path / "cpu.json"
    y, feeds = _chain(["cpu"])
    s = pg.Scheduler(["cpu"], trace=str(path))
    for _ in range(3):
        s.compute(y, feeds)
    s.flush_trace()
    tracks = _tracks(json.loads(path.read_text()))
    assert len([e for e in tracks["cpu:0 queue"] if e["name"].startswith("launch")]) == 3
    assert {e["args"]["run"] for e in tracks["host"]} == {0, 1, 2}
    s.close()


def test_per_split_copies_and_bytes(devs):
    y, feeds = _chain(["tds:0", "tds:1"])
    s = pg.Scheduler(["tds:0", "tds:1"], sync="events")
    s.compute(y, feeds)
    per = s.last_run.per_split
    assert [p["device"] for p in per] == ["tds:0", "tds:1"]
    assert per[0]["input_copies"] == 0 and per[1]["input_copies"] == 1
    assert per[1]["input_bytes"] == 4 * 32 * 4          # h: (4, 32) f32 moved tds:0 -> tds:1
