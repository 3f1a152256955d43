"""`pyggml check`: every rule it reports is one it checked. The library rules (R1-R6) and the
asynchronous rules (R13-R18) on the plugins CI has (cpu, the test plugin with two devices,
vulkan on lavapipe, the numpy example), and the asynchronous checks against Python plugins with a
planted ordering bug of each kind, which each check must catch (a check that cannot fail is no
check)."""
import os
import queue
import subprocess
import sys
import threading
import time

import pytest

import pyggml as pg
import pyggml.plugin as P
from pyggml import _abi_consts as A
from pyggml.conformance import async_rules

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGINS = os.path.join(ROOT, "pyggml", "plugins")


def _check(path, *extra, env=None):
    r = subprocess.run([sys.executable, "-m", "pyggml", "check", "--no-ops", "--async-mb", "4", "--async-rounds", "3",
                        *extra, path], capture_output=True, text=True, cwd=ROOT, timeout=600,
                       env=dict(os.environ, **(env or {})))
    return r.returncode, r.stdout + r.stderr


@pytest.fixture(scope="module")
def testdev(tmp_path_factory):
    d = tmp_path_factory.mktemp("testdev")
    r = subprocess.run(["sh", os.path.join(ROOT, "tests", "plugins", "testdev", "build.sh"), str(d), "testdev"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"the test plugin does not build here: {r.stderr[-500:]}")
    return str(d / "libpyggml-testdev.so")


@pytest.mark.parametrize("name", ["cpu", "vulkan"])
def test_check_passes_on_shipped_plugins(name):
    path = os.path.join(PLUGINS, f"libpyggml-{name}.so")
    if not os.path.exists(path):
        pytest.skip(f"{path} not built here")
    rc, out = _check(path)
    assert rc == 0, out
    for rule in ("R1", "R2", "R3", "R4", "R6"):
        assert f"pass {rule} " in out, (rule, out)
    if "unavailable here" not in out:
        for rule in ("R5", "R13", "R14", "R15", "R16", "R17"):
            assert f"pass {rule} " in out, (rule, out)


def test_check_catches_the_staged_write_of_the_test_plugin(testdev):
    """The test plugin built as CUDA's pageable cudaMemcpy was (blocking_copies=staged: buffer_write
    returns once the source is staged, the bytes land later on a queue no stream waits for): R13
    fails with the stale floats counted, and only R13."""
    rc, out = _check(testdev, "-O", "blocking_copies=staged",
                     env={"PYGGML_TESTDEV_DEVICES": "1", "PYGGML_TESTDEV_COPY_LATENCY_US": "2000"})
    assert rc == 1 and "FAIL R13" in out and "stale bytes" in out, out
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("FAIL")] == ["R13"], out


@pytest.mark.slow
def test_check_on_the_test_plugin_two_devices(testdev):
    """Two devices with latency on copies and launches: events recorded on one and waited on the
    other, peer copies after the wait."""
    rc, out = _check(testdev, env={"PYGGML_TESTDEV_DEVICES": "2", "PYGGML_TESTDEV_COPY_LATENCY_US": "500",
                                   "PYGGML_TESTDEV_LAUNCH_LATENCY_US": "500"})
    assert rc == 0, out
    assert out.count("pass R17 ") == 4, out   # same device and across devices, on each device


# ---------------------------------------------------------------- planted bugs

class _AsyncDev(P.Device):
    """A correct asynchronous device: one worker thread per stream runs its work in order after a
    small delay; events are points in a stream; a wait queues a wait."""
    caps = A.CAP_ASYNC_COMPUTE | A.CAP_EVENTS | A.CAP_MULTI_STREAM
    type = A.DEVICE_ACCEL
    delay = 0.002

    def __init__(self):
        super().__init__()
        self.queues = {}

    def supports(self, node):
        return node.op == A.OP_SCALE and node.type == A.TYPE_F32

    def compute(self, node):
        node.array()[...] = node.src[0].array() * node.param_f32(0) + node.param_f32(1)

    def _q(self, stream):
        q = self.queues.get(id(stream))
        if q is None:
            q = self.queues[id(stream)] = queue.Queue()

            def worker():
                while True:
                    work = q.get()
                    time.sleep(self.delay)
                    work()
                    q.task_done()
            threading.Thread(target=worker, daemon=True).start()
        return q

    def enqueue(self, stream, work):
        self._q(stream).put(work)

    def synchronize(self, stream):
        self._q(stream).join()

    def record(self, event, stream):
        event.stream, done = stream, threading.Event()
        event.done = done
        self.enqueue(stream, done.set)

    def query(self, event):
        return event.done.is_set()

    def wait(self, stream, event):
        done = event.done
        self.enqueue(stream, done.wait)


_LATE = []   # the planted bugs' late work (timers), joined by the test that planted them


def _later(fn):
    t = threading.Timer(0.02, fn)
    _LATE.append(t)
    t.start()


def _join_late():
    """Let the planted bugs' late work finish inside the test that planted it (its exceptions, on
    buffers the check freed, then count against that test, whose filter expects them)."""
    while _LATE:
        _LATE.pop().join(5)


class _EarlyWrite(_AsyncDev):
    """buffer_write returns while its bytes are still on the way (CUDA's pageable cudaMemcpy on the
    legacy stream, seen from a non-blocking stream)."""

    def write(self, buf, offset, data):
        staged = data.copy()
        _later(lambda: super(_EarlyWrite, self).write(buf, offset, staged))


class _SyncReturnsEarly(_AsyncDev):
    def synchronize(self, stream):
        pass


class _WaitIgnored(_AsyncDev):
    def wait(self, stream, event):
        pass


class _FaultNeverReported(_AsyncDev):
    def set_option(self, key, value):
        if key == "debug_async_fault":
            return                                   # accepted, never injected
        super().set_option(key, value)


class _ComputeDetached(_AsyncDev):
    """A compute that returns from its queue slot before it ran: work queued after it overtakes it."""

    def compute(self, node):
        _later(lambda: super(_ComputeDetached, self).compute(node))


def _load(dev_cls):
    backend = type(f"{dev_cls.__name__}Backend", (P.Backend,),
                   {"name": "planted" + dev_cls.__name__.lower().replace("_", ""), "init": lambda self: [dev_cls()]})
    return P.load(backend()).devices[0]


def _results(dev_cls):
    return {r.split()[0]: (ok, detail) for r, ok, detail in async_rules.check_device(_load(dev_cls), 1, 3)}


def test_a_correct_asynchronous_device_passes():
    res = _results(_AsyncDev)
    for rule in ("R13", "R14", "R15", "R16", "R17", "R18"):
        assert res[rule][0] is True, (rule, res[rule])


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the planted bugs' late work
@pytest.mark.parametrize("dev_cls,rule", [
    (_EarlyWrite, "R13"),             # a copy queued after buffer_write reads stale bytes
    (_SyncReturnsEarly, "R15"),       # stream_synchronize returns before the queued read landed
    (_WaitIgnored, "R17"),            # the second stream does not wait for the event
    (_FaultNeverReported, "R18"),
    (_ComputeDetached, "R16"),        # a copy queued after a compute reads before the compute ran
])
def test_each_async_check_catches_its_bug(dev_cls, rule):
    try:
        res = _results(dev_cls)
    finally:
        _join_late()
    assert res[rule][0] is False, (rule, res)


def test_check_exit_status_fails_on_a_failed_rule(tmp_path):
    """The command exits 1 when any rule fails: a plugin file with the early-write bug."""
    src = tmp_path / "early.py"
    src.write_text(
        "import threading, time\nimport pyggml.plugin as P\nfrom pyggml import _abi_consts as A\n"
        "class D(P.Device):\n"
        "    def supports(self, n): return n.op == A.OP_SCALE and n.type == A.TYPE_F32\n"
        "    def compute(self, n): n.array()[...] = n.src[0].array() * n.param_f32(0) + n.param_f32(1)\n"
        "    def write(self, buf, off, data):\n"
        "        staged = data.copy()\n"
        "        threading.Timer(0.02, lambda: P.Device.write(self, buf, off, staged)).start()\n"
        "class B(P.Backend):\n    name = 'early'\n    def init(self): return [D()]\n")
    rc, out = _check(str(src))
    assert rc == 1 and "FAIL R13" in out, out


def test_file_name_must_be_the_table_name(c_builder):
    """PYGGML_PLUGINS filters files by name before loading them and device specs use the table's
    name: the two must agree (R4), or the loader refuses the library and says how to name it."""
    lib = c_builder("libpyggml-notwidget.so", ["tests/plugins/broken/broken.c"], ['BROKEN_NAME="widget"'])
    with pytest.raises(pg.PluginLoadError, match="name the file libpyggml-widget.so"):
        pg.load_plugin(lib)
