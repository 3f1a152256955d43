"""Graphs split across cpu + vulkan (lavapipe in CI) give the CPU-only results under every sync
policy and slot count, and the Vulkan plugin under the Khronos validation layer (sanitizer mode).

The kernels differ between the plugins, so results are compared by the conformance NMSE
thresholds (integer outputs exactly), not bitwise as test_multi.py does on the test plugin.

Sanitizer mode: with PYGGML_VULKAN_VALIDATION=1 in the environment the plugin creates its instance
with VK_LAYER_KHRONOS_validation, synchronization validation on and a debug-utils messenger that
records every error and hazard; `set_option("validation_check", "1")` fails with
pyg.SanitizerError carrying the messages recorded since the last check. The validation layer must
be chosen before vkCreateInstance, i.e. before the plugin is initialised, so the validated runs
happen in a child pytest process (test_suite_under_validation_layer) that re-runs this file and
the conformance cases on vulkan with the variable set; there, every test ends with a check."""
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance import CASES, nmse
from pyggml.conformance.runner import run_case

from _graphs import chain, random_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VALIDATING = os.environ.get("PYGGML_VULKAN_VALIDATION", "") not in ("", "0")
VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
_why = next((p.unavailable_reason for p in pg.plugins() if p.name == "vulkan"), None) or \
    "the Vulkan plugin is not built (needs glslc and the Vulkan headers: .ci/apt-vulkan.sh)"
pytestmark = pytest.mark.skipif(VK is None, reason=f"no Vulkan device loads here: {_why}")

POLICIES = ["strict", "relaxed", "events"]


def _devsets():
    return [[VK, "cpu"], ["cpu", VK], [VK]]


def _validation_errors():
    """Messages the validation layer reported since the last call ("" if none)."""
    try:
        pg.get_device(VK).set_option("validation_check", "1")
    except pg.SanitizerError as e:
        return str(e)
    return ""


@pytest.fixture(autouse=True)
def _clean_validation():
    """Under sanitizer mode every test must leave the validation layer silent."""
    if VK is None or not VALIDATING:
        yield
        return
    _validation_errors()
    yield
    report = _validation_errors()
    assert report == "", report


def _close(got, ref, case):
    for a, b in zip(got, ref):
        a, b = np.asarray(a), np.asarray(b)
        if case is not None and case.exact or a.dtype.kind in "iu":
            if not np.array_equal(a, b):
                return False
        elif not nmse(a, b) <= (case.thr if case is not None else 1e-7):
            return False
    return True


# ---------------------------------------------------------------- conformance cases, split

def _hop(outs, devset, policy):
    """Most cases are one op: an exact tail (x * 1 + 0) on the device other than the one the
    output was computed on makes the result cross devices. Returns (outputs, crosses)."""
    if len(devset) == 1:
        return outs, False
    plan = pg.Scheduler(devset, sync=policy).plan(outs)
    names = [line.split(": ")[1] for line in plan.describe()]
    new, crosses = [], False
    for o in outs:
        base = o
        while base.view_src is not None:
            base = base.view_src
        if o.type not in (pg.f32, pg.f16) or base.id not in plan.assign:
            new.append(o)
            continue
        where = str(plan.devices[plan.assign[base.id]])
        t = pg.scale(o, 1.0)
        t.pin = "cpu" if where.startswith("vulkan") else VK
        new.append(t)
        crosses = True
    return new, crosses


@pytest.mark.parametrize("i,case", list(enumerate(CASES)), ids=[c.name for c in CASES])
def test_split_cases_match_cpu(i, case):
    """Each case's nodes scattered over cpu and vulkan (unsupported ones fall back to cpu)."""
    policy = POLICIES[i % 3]
    devset = _devsets()[(i // 3) % 3]
    n_copies = 1 + i % 3
    outs, feeds, refs = case.build(np.random.default_rng(i))
    cpu = pg.Scheduler(["cpu"]).compute(outs, feeds)
    pick = random.Random(i)
    for t in outs[0].graph.tensors:
        if t.op:
            t.pin = pick.choice(devset)
    outs, crosses = _hop(outs, devset, policy)
    s = pg.Scheduler(devset, sync=policy, n_copies=n_copies)
    if crosses:
        assert s.plan(outs).n_splits >= 2
    got = s.compute(outs, feeds)
    what = f"{case.name}: {policy} {devset} n_copies={n_copies}"
    assert _close(got, cpu, case), what
    assert _close(got, refs, case), what
    again = s.compute(outs, feeds)              # the reused program
    assert _close(again, got, case), what
    s.close()


# ---------------------------------------------------------------- random multi-split graphs

@pytest.mark.parametrize("seed", range(12))
def test_random_graphs_match_cpu(seed):
    devset = [VK, "cpu"] if seed % 2 == 0 else ["cpu", VK]
    out, kv, feeds = random_graph(seed, devset)
    ref_s = pg.Scheduler(["cpu"])
    ref = ref_s.compute(out, feeds)
    s = pg.Scheduler(devset, sync=POLICIES[seed % 3], n_copies=1 + seed % 4)
    got = s.compute(out, feeds)
    assert s.plan(out).n_splits >= 1
    assert _close([got], [ref], None)
    if kv.graph.effects:                            # the graph wrote the state
        assert _close([s.read(kv)], [ref_s.read(kv)], None)
    for _ in range(2):                              # reused program, state written again
        assert _close([s.compute(out, feeds)], [ref_s.compute(out, feeds)], None)
    if kv.graph.effects:
        assert _close([s.read(kv)], [ref_s.read(kv)], None)
    s.close()


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("n_copies", [1, 3])
def test_chain_both_ways(policy, n_copies):
    """vulkan -> cpu and cpu -> vulkan, micro-batched: each batch gives the CPU-only result."""
    for devs in ([VK, "cpu"], ["cpu", VK]):
        y, _ = chain(devs)
        rng = np.random.default_rng(5)
        mbs = [{"x": rng.standard_normal((4, 32)).astype(np.float32)} for _ in range(4)]
        s = pg.Scheduler(devs, sync=policy, n_copies=n_copies)
        assert s.plan(y).n_splits == 2
        got = s.compute_batches(y, mbs)
        ref = pg.Scheduler(["cpu"])
        for r, f in zip(got, mbs):
            assert _close([r], [ref.compute(y, f)], None), (devs, policy, n_copies)
        assert s.last_run.micro_batches == 4
        s.close()


# ---------------------------------------------------------------- decode-shaped attention

_VK_DEFAULTS = {"fa_split": "auto", "fuse": "1", "norm_wg": "auto", "subgroups": "1"}


@pytest.fixture
def vk_option():
    """set(key, value): a device option of the Vulkan device for this test; defaults at teardown."""
    dev, touched = pg.get_device(VK), []

    def set_(key, value):
        dev.set_option(key, value)
        touched.append(key)
    yield set_
    for key in touched:
        dev.set_option(key, _VK_DEFAULTS[key])


@pytest.mark.parametrize("visible", [1, 37, 64, 65, 300])
@pytest.mark.parametrize("D,n_kv,n_q", [(64, 320, 1), (33, 333, 1), (64, 1000, 3), (64, 64, 1)])
@pytest.mark.parametrize("split", ["0", "1"])
def test_flash_attn_over_a_mostly_masked_cache(visible, D, n_kv, n_q, split, vk_option):
    """Decode attention spans the whole KV cache; the mask hides the cells not written yet. The
    kernel skips K reads of masked keys and whole masked 64-key chunks, and with few query rows
    splits the KV over workgroups (partials in plan scratch, then a combine pass): the result must
    not change (against float64 numpy), at chunk and split edges too, and where whole splits are
    masked out. Odd D takes the 16-bit K path. The device option fa_split forces the split on or
    off (by default it is off on CPU devices such as lavapipe, where it only adds overhead)."""
    vk_option("fa_split", "on" if split == "1" else "off")
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(visible * 100 + D + n_kv)
    visible = min(visible, n_kv)
    H, Hk = 4, 2
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    mv = np.full((1, 1, 8, n_kv), -np.inf, np.float16)
    mv[..., :visible] = 0
    mv[..., 1, :] = -np.inf                 # a query row that sees only the last key
    mv[..., 1, -1] = 0
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in
                  (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    y = pg.flash_attn_ext(q, k, v, m, scale=1 / np.sqrt(D))
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64),
                       mv.astype(np.float64), 1 / np.sqrt(D), 0.0, 0.0)
    got = pg.Scheduler([VK]).compute(y, {"q": qv, "k": kv, "v": vv, "m": mv})
    assert nmse(got, ref) <= 5e-4


@pytest.mark.parametrize("fuse,wg", [("0", "0"), ("1", "0"), ("1", "1")])
@pytest.mark.parametrize("wshape", [(48,), (3, 48), (1, 48), (700,)])
def test_rms_norm_mul_fusion(fuse, wg, wshape, vk_option, caplog):
    """rms_norm followed by a mul of its result runs as one dispatch that still writes both nodes
    (the norm is an output here too): both match float64, and the plan has one dispatch fewer.
    wg=1: the workgroup-per-row kernel GPUs use (device option norm_wg; auto is off on lavapipe)."""
    import logging
    from pyggml._plugin import drain_log
    vk_option("fuse", fuse)
    vk_option("norm_wg", "on" if wg == "1" else "off")
    rng = np.random.default_rng(len(wshape) + 7 * int(fuse))
    xv = rng.standard_normal((3, wshape[-1])).astype(np.float32)
    wv = rng.standard_normal(wshape).astype(np.float32)
    g = pg.Graph()
    x = g.input("x", xv.shape)
    w = g.input("w", wv.shape)
    nrm = pg.rms_norm(x, eps=1e-5)
    y = pg.mul(nrm, w)
    s = pg.Scheduler([VK], poison=True)
    with caplog.at_level(logging.DEBUG, logger="pyggml"):
        got_n, got_y = s.compute([nrm, y], {"x": xv, "w": wv})
        drain_log()
    ref_n = xv / np.sqrt(np.mean(xv.astype(np.float64) ** 2, axis=-1, keepdims=True) + 1e-5)
    assert nmse(got_n, ref_n) <= 1e-7
    assert nmse(got_y, ref_n * wv) <= 1e-7
    plans = [r.getMessage() for r in caplog.records if "plan for graph" in r.getMessage()]
    fused = fuse == "1"   # the subgroup kernel: lavapipe and GPUs have subgroup arithmetic
    assert plans and plans[-1].split(": ")[2].startswith("1 dispatches" if fused else "2 dispatches"), plans


# ---------------------------------------------------------------- run statistics

def _three_inputs():
    rng = np.random.default_rng(1)
    g = pg.Graph()
    ins = [g.input(n, (3, 16)) for n in "abc"]
    y = pg.rms_norm(pg.add(pg.mul(ins[0], ins[1]), ins[2]), eps=1e-5)
    return y, {n: rng.standard_normal((3, 16)).astype(np.float32) for n in "abc"}


def test_runstats_one_split():
    """vulkan alone: inputs are queued (a), one launch (g), one host sync (s) before the output
    is read. The plugin has no PYG_CAP_ASYNC_READ, so the read is a blocking copy (c)."""
    y, feeds = _three_inputs()
    pats = {}
    for policy in POLICIES:
        s = pg.Scheduler([VK], sync=policy)
        for _ in range(2):
            s.compute(y, feeds)
            lr = s.last_run
            pats[policy] = lr.sync_pattern
            assert lr.splits == 1
            assert [p["device"] for p in lr.per_split] == [VK]
            assert lr.per_split[0]["input_copies"] == 0
            assert lr.sync_pattern.count("g") == 1
        s.close()
    assert pats["strict"] == "cccgsc"                 # blocking writes, sync after the launch
    assert pats["relaxed"] == "aaagsc" and pats["events"] == "aaagsc"
    for policy in ("relaxed", "events"):
        assert pats[policy].count("s") == 1           # one host sync per run


def test_runstats_cpu_vulkan_split():
    """vulkan -> cpu: the intermediate comes back by a (blocking) read after one host sync."""
    y, feeds = chain([VK, "cpu"])
    ref = pg.Scheduler(["cpu"]).compute(y, feeds)
    for policy in POLICIES:
        s = pg.Scheduler([VK, "cpu"], sync=policy)
        assert _close([s.compute(y, feeds)], [ref], None)
        lr = s.last_run
        assert lr.splits == 2
        assert [p["device"] for p in lr.per_split] == [VK, "cpu:0"]
        assert lr.per_split[1]["input_copies"] == 1
        assert lr.per_split[1]["input_bytes"] == 4 * 32 * 4     # h (4, 32) f32: vulkan -> cpu
        assert lr.sync_pattern.count("g") == 2
        if policy == "strict":
            assert "a" not in lr.sync_pattern                  # every copy blocks
        else:   # the CPU split computes synchronously: one host sync, before vulkan memory is read
            assert lr.host_syncs == 1 and lr.sync_pattern.startswith("ag"), lr.sync_pattern
        assert "w" not in lr.sync_pattern                      # no device waits across plugins
        s.close()


# ---------------------------------------------------------------- profiling

_PROFILE_SCRIPT = """
import logging, numpy as np, pyggml as pg
from pyggml._plugin import drain_log
lines = []
class H(logging.Handler):
    def emit(self, r): lines.append(r.getMessage())
logging.getLogger("pyggml").addHandler(H()); logging.getLogger("pyggml").setLevel(logging.DEBUG)
g = pg.Graph(); x = g.input("x", (3, 64))
y = pg.silu(pg.rms_norm(x, eps=1e-5))
pg.get_device("VK").set_option("profile", "1")
s = pg.Scheduler(["VK"])
for _ in range(3):
    s.compute(y, {"x": np.ones((3, 64), np.float32)})
pg.get_device("VK").set_option("profile_report", "1"); drain_log()
print("\\n".join(l for l in lines if "profile" in l or "plan for graph" in l))
"""


def test_profile_report():
    """Device option profile=1: per-compute host counters (one submission per compute: the input
    write rides on the plan's; a device whose memory the host cannot map, such as the NVIDIA GPU,
    adds one submission per read-back for its staging copy, and one when the plan is made: the upload
    of its parameter blocks to device-local memory, params_dev=auto), GPU time per op from timestamps, and
    the plan's stages (the kernels between two barriers) at debug level."""
    import re
    env = dict(os.environ, PYTHONPATH=ROOT)   # a child: profiling is plugin-wide
    r = subprocess.run([sys.executable, "-c", _PROFILE_SCRIPT.replace("VK", VK)], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout
    m = re.search(r"(\d+) plan computes, (\d+) submits .*?(\d+) command buffers recorded .*?(\d+) reads "
                  r"\(\d+ bytes, (\d+) submits through a staging copy\)", out)
    assert m, out
    computes, submits, recorded, reads, staged = map(int, m.groups())
    assert computes == 3 and reads == 3 and staged in (0, 3), out
    uploads = 1 if staged else 0   # one plan; where memory maps, its parameters are written in place
    assert submits - staged - uploads == computes and recorded - staged - uploads == computes, out
    gpu = [l for l in out.splitlines() if "profile gpu:" in l and "dispatches" in l]
    assert any("rms_norm" in l for l in gpu) and any("silu" in l for l in gpu), out
    # the plan's stages at debug level: rms_norm, then silu reading it, one barrier between
    stages = re.findall(r"plan for graph \d+, stage (\d+): (.*)", out)
    plan = re.search(r"plan for graph \d+: (\d+) dispatches, (\d+) barriers", out)
    assert plan and len(stages) == int(plan.group(2)) + 1, out
    assert [int(k) for k, _ in stages] == list(range(len(stages))), out
    assert "rows_sg.rms_norm" in stages[0][1] or "norm" in stages[0][1], out
    assert "silu" in stages[-1][1], out


# ---------------------------------------------------------------- sanitizer mode

def _layer_present():
    dirs = os.environ.get("VK_LAYER_PATH", "").split(":") + [
        "/usr/share/vulkan/explicit_layer.d", "/usr/local/share/vulkan/explicit_layer.d",
        "/etc/vulkan/explicit_layer.d"]
    return any(os.path.exists(os.path.join(d, "VkLayer_khronos_validation.json")) for d in dirs if d)


@pytest.mark.slow
@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_suite_under_validation_layer():
    """Re-runs this file (minus this test) in a child process with PYGGML_VULKAN_VALIDATION=1:
    every test there ends with an empty validation report."""
    if not _layer_present():
        pytest.skip("VK_LAYER_KHRONOS_validation is not installed (.ci/apt-vulkan.sh: vulkan-validationlayers)")
    env = dict(os.environ, PYGGML_VULKAN_VALIDATION="1", PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                        os.path.abspath(__file__)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=1800)
    tail = (r.stdout + r.stderr)[-6000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and "failed" not in r.stdout, tail


@pytest.mark.skipif(not VALIDATING, reason="runs inside test_suite_under_validation_layer")
def test_validation_layer_is_active():
    """The check must be able to fail: an out-of-range binding is reported by the layer."""
    pg.get_device(VK).set_option("validation_selftest", "1")
    report = _validation_errors()
    assert "VUID" in report or "Validation" in report, report


@pytest.mark.skipif(not VALIDATING, reason="runs inside test_suite_under_validation_layer")
def test_conformance_on_vulkan_under_validation():
    s = pg.Scheduler([VK], poison=True)
    counts = {"pass": 0, "unsupported": 0}
    for i, case in enumerate(CASES):
        status, detail = run_case(case, s, seed=2000 + i)
        assert status in counts, f"{case.name}: {detail}"
        counts[status] += 1
        report = _validation_errors()
        assert report == "", f"{case.name}: {report}"
    assert counts["pass"] >= len(CASES) - 5, counts


def _graphs_for_drops():
    out = []
    for devs in ([VK, "cpu"], ["cpu", VK]):
        y, f = chain(devs)
        out.append((devs, y, f))
    for seed in range(4):
        devs = [VK, "cpu"] if seed % 2 == 0 else ["cpu", VK]
        y, _, f = random_graph(seed, devs)
        out.append((devs, y, f))
    return out


@pytest.mark.skipif(not VALIDATING, reason="runs inside test_suite_under_validation_layer")
@pytest.mark.parametrize("policy", POLICIES)
def test_dropped_scheduler_sync_is_caught(policy):
    """Every ordering the scheduler emits is dropped in turn (Scheduler._drop_sync = k).

    On one Vulkan device next to the CPU, all of them are HOST waits (a stream_synchronize
    before the host reads vulkan memory or reuses CPU memory); the validation layer cannot see
    those: it tracks the device side (commands and submissions), and on lavapipe the host reads
    mapped device memory with a memcpy. So sanitizer mode adds the plugin's own host-access
    checker (vk_validation.c): a blocking buffer_read/write/fill of a range that queued work
    touches, before the host observed that work complete, is a [PYGGML-HOST-ACCESS] violation
    -- decided logically, not by timing, so a dropped wait is caught even when the device
    happened to be done. Orderings the plugin makes redundant (the CPU reusing memory that an
    async write read: stream_write_async copies the source at call time; strict's extra syncs
    before device-only work) cannot race; for those the result must still be right."""
    caught = 0
    for devs, y, feeds in _graphs_for_drops():
        ref = pg.Scheduler(["cpu"]).compute(y, feeds)
        for k in range(16):
            bad = pg.Scheduler(devs, sync=policy, n_copies=2)
            bad._drop_sync = k  # a test switch: leave out that ordering
            dropped = bad.program(y).dropped
            if dropped is None:
                bad.close()
                break
            got = bad.compute(y, feeds)
            bad.close()
            report = _validation_errors()
            if report:
                assert "PYGGML-HOST-ACCESS" in report and "buffer_read" in report, report
                caught += 1
            else:
                assert "vulkan:0->" not in dropped and "output" not in dropped, \
                    f"{devs} {policy}: dropped '{dropped}' was not reported"
                assert _close([got], [ref], None), f"{devs} {policy}: dropped '{dropped}' went unreported"
    assert caught >= 6


@pytest.mark.skipif(not VALIDATING, reason="runs inside test_suite_under_validation_layer")
@pytest.mark.parametrize("key,value,hazard", [("debug_drop_barriers", "1", True), ("barrier", "debug_exec", True),
                                              ("barrier", "buffer", False), ("barrier", "sync2", False),
                                              ("barrier", "event", False)])
def test_dropped_barrier_is_caught_by_sync_validation(key, value, hazard):
    """The device-side counterpart: plans recorded without their compute barriers
    (debug_drop_barriers=1), or with execution dependencies that carry no memory dependency
    (barrier=debug_exec), give read-after-write hazards that synchronization validation reports;
    with the default barriers (only where a dependency exists), the buffer barriers, the
    synchronization2 ones or the events (barrier=event) the same graph is clean."""
    y, feeds = _three_inputs()
    dev = pg.get_device(VK)
    ok = pg.Scheduler([VK], sync="events")
    ok.compute(y, feeds)
    ok.close()
    assert _validation_errors() == ""
    try:
        dev.set_option(key, value)
    except pg.PyggmlError as e:   # sync2 on a device without VK_KHR_synchronization2
        pytest.skip(str(e))
    try:
        bad = pg.Scheduler([VK], sync="events")
        bad.compute(y, feeds)
        bad.close()
    finally:
        dev.set_option(key, "0" if key == "debug_drop_barriers" else "memory")
    report = _validation_errors()
    if hazard:
        assert "SYNC-HAZARD-READ-AFTER-WRITE" in report, report
    else:
        assert report == "", report
