"""Threads: n_threads belongs to each Scheduler (ABI 1.1 stream_set_option), and a Model refuses
to be driven by two threads at once instead of corrupting its state."""
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import pyggml as pg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Run in a fresh process: the CPU plugin's worker threads only grow, so the number of threads the
# process has after each compute shows how many threads that compute asked for.
_CHILD = r"""
import os, numpy as np, pyggml as pg
def nthreads():
    return len(os.listdir("/proc/self/task"))
rng = np.random.default_rng(0)
g = pg.Graph()
x = g.input("x", (64, 256))
w = g.weight("w", rng.standard_normal((256, 256)).astype(np.float32))
y = pg.mul_mat(w, x)
feeds = {"x": rng.standard_normal((64, 256)).astype(np.float32)}
one = pg.Scheduler("cpu", n_threads=1)
ref = one.compute(y, feeds)
three = pg.Scheduler("cpu", n_threads=3)      # must not change `one`
base = nthreads()
assert np.array_equal(one.compute(y, feeds), ref)
print("after one:", nthreads() - base)
assert np.array_equal(three.compute(y, feeds), ref)
print("after three:", nthreads() - base)
five = pg.Scheduler("cpu", n_threads=5)       # must not change `three`
assert np.array_equal(three.compute(y, feeds), ref)
print("after three again:", nthreads() - base)
assert np.array_equal(five.compute(y, feeds), ref)
print("after five:", nthreads() - base)
assert np.array_equal(one.compute(y, feeds), ref)
print("ok")
"""


def test_n_threads_is_per_scheduler():
    """A second Scheduler's n_threads used to be a device option that changed the first one's
    thread count (issue 16); now each Scheduler's CPU stream carries its own."""
    out = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["after one: 0", "after three: 2", "after three again: 2", "after five: 4", "ok"], out.stdout


def test_stream_option_errors():
    s = pg.Scheduler("cpu", n_threads=2)
    assert s.n_threads == 2
    with pytest.raises(pg.ConfigError, match="n_threads"):
        pg.Scheduler("cpu", n_threads=0)
    with pytest.raises(pg.PluginError, match="n_threads wants an integer in 1..1024"):
        pg.Scheduler("cpu", n_threads=5000)


def test_cpu_table_has_stream_set_option():
    assert pg.ABI_VERSION == (1, 1)
    p = pg.get_device("cpu").plugin
    assert (p.abi_major, p.abi_minor) == (1, 1)
