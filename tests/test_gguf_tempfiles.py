"""GGUF writer temp files (issue 16): SIGTERM during a write removes the temp file; a temp file a
killed writer (kill -9) left behind is removed by the next write of the same path."""
import glob
import os
import signal
import subprocess
import sys
import time

import numpy as np

from pyggml.gguf import GGUFReader, GGUFWriter

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A writer whose tensor producer is slow: the temp file exists for seconds.
_CHILD = r"""
import sys, time, numpy as np
sys.path.insert(0, {root!r})
from pyggml.gguf import GGUFWriter
def slow():
    for i in range(600):
        time.sleep(0.05)
        yield np.zeros(1024, np.float32)
w = GGUFWriter({path!r})
w.add_string("general.name", "slow")
w.add_tensor("t", slow, type="f32", shape=(600 * 1024,))
w.write()
"""


def _start(path):
    p = subprocess.Popen([sys.executable, "-c", _CHILD.format(root=ROOT, path=path)])
    pat = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".*.tmp")
    t0 = time.monotonic()
    while not glob.glob(pat):
        assert p.poll() is None, "the writer ended early"
        assert time.monotonic() - t0 < 60, "no temp file appeared"
        time.sleep(0.05)
    time.sleep(0.2)
    return p, pat


def test_sigterm_removes_the_temp_file(tmp_path):
    path = str(tmp_path / "m.gguf")
    p, pat = _start(path)
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == -signal.SIGTERM           # still ends by SIGTERM
    assert glob.glob(pat) == [] and not os.path.exists(path)


def test_next_write_removes_a_killed_writers_temp_file(tmp_path):
    path = str(tmp_path / "m.gguf")
    p, pat = _start(path)
    p.kill()
    p.wait(30)
    left = glob.glob(pat)
    assert len(left) == 1                          # kill -9 cannot be handled
    mine = os.path.join(str(tmp_path), f".m.gguf.{os.getpid()}.abcd1234.tmp")   # a live writer's
    open(mine, "wb").close()
    other = os.path.join(str(tmp_path), ".other.gguf.999999999.x.tmp")          # another file's
    open(other, "wb").close()
    w = GGUFWriter(path)
    w.add_tensor("x", np.arange(8, dtype=np.float32))
    w.write()
    assert not os.path.exists(left[0])
    assert os.path.exists(mine) and os.path.exists(other)
    with GGUFReader(path) as r:
        assert np.array_equal(r.tensor("x").data, np.arange(8, dtype=np.float32))
