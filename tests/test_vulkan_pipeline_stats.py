"""Device option pipeline_stats (plugins/vulkan/vk_pipe_stats.c) and scripts/vulkan_pipeline_stats.py's reading of its
lines. Where the device has VK_KHR_pipeline_executable_properties (the NVIDIA driver), a fresh process with the option
on logs the driver's statistics of each pipeline it compiles; where it has not (lavapipe in CI), setting the option is
refused by name and the device goes on as before."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg
from _scripts import load_script

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def vps():
    return load_script("vulkan_pipeline_stats")


def test_parse_reads_the_plugin_line(vps):
    line = ("vulkan: pipeline mul_mat_vec_rp (spec 0x100, 0x80) Compute Shader, subgroup 32: Register Count=40, "
            "Local Memory Size=0, Shared Memory Size=2304")
    p = vps.parse(line)
    assert p == {"shader": "mul_mat_vec_rp", "spec": ["0x100", "0x80"], "executable": "Compute Shader", "subgroup": 32,
                 "stats": {"Register Count": "40", "Local Memory Size": "0", "Shared Memory Size": "2304"}}
    assert vps.parse(line[len("vulkan: "):]) == p   # (the plugin's own text, without the host's prefix)
    assert vps.parse("vulkan: plan for graph 3: 12 dispatches") is None


_CHILD = r"""
import logging, sys
import numpy as np
import pyggml as pg
lines = []
h = logging.Handler(); h.emit = lambda r: lines.append(r.getMessage())
logging.getLogger("pyggml").addHandler(h); logging.getLogger("pyggml").setLevel(logging.INFO)
pg.get_device(sys.argv[1]).set_option("pipeline_stats", "1")
g = pg.Graph()
a = g.input("a", (4, 64)); b = g.input("b", (4, 64))
out = pg.Scheduler([sys.argv[1]]).compute(pg.add(a, b), {"a": np.ones((4, 64), np.float32), "b": np.full((4, 64), 2, np.float32)})
from pyggml._plugin import drain_log
drain_log()
assert np.all(np.asarray(out) == 3.0)
print("\n".join(l for l in lines if l.startswith("vulkan: pipeline ")))
"""


@pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")
def test_option_logs_statistics_or_is_refused(vps):
    dev = pg.get_device(VK)
    try:
        dev.set_option("pipeline_stats", "1")
    except pg.PyggmlError as e:   # lavapipe: no extension, so no statistics to give
        assert "VK_KHR_pipeline_executable_properties" in str(e) and "pipeline_stats" in str(e)
        dev.set_option("pipeline_stats", "0")   # (off is always taken)
        g = pg.Graph()
        a = g.input("a", (8,))
        got = pg.Scheduler([VK]).compute(pg.add(a, a), {"a": np.arange(8, dtype=np.float32)})
        assert np.array_equal(np.asarray(got), 2 * np.arange(8, dtype=np.float32))
        return
    dev.set_option("pipeline_stats", "0")
    r = subprocess.run([sys.executable, "-c", _CHILD, VK], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    parsed = [vps.parse(line) for line in r.stdout.splitlines()]
    assert parsed and all(p is not None for p in parsed), r.stdout
    assert any(p["shader"] == "elementwise" and p["stats"] for p in parsed), r.stdout
