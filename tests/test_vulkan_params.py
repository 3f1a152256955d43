"""params_dev: where a plan's parameter blocks live. auto puts them in device-local memory on GPUs
(uploaded once when the plan is made: a host-visible block cost the H200 a microsecond per dependent
dispatch) and in host-visible memory on CPU devices such as lavapipe; on and off force either. The
same graph computes the same bytes every way, matching the CPU plugin, over several runs of one plan;
the plan's debug line names the memory."""
import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import _options_logged, _validation_clean  # noqa: F401 (an autouse fixture)

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def _graph(rng):
    g = pg.Graph()
    w = g.weight("w", pg.quantize(rng.standard_normal((64, 256)).astype(np.float32), "q8_0"), type="q8_0", shape=(64, 256))
    x = g.input("x", (2, 256))
    h = pg.rms_norm(pg.scale(x, 0.5, 1.0))
    return [pg.add(pg.mul_mat(w, h), pg.scale(pg.mul_mat(w, x), 2.0)), h]


@pytest.mark.parametrize("where", ["auto", "on", "off"])
def test_params_memory(where):
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal((2, 256)).astype(np.float32)}
    want = pg.Scheduler(["cpu"]).compute(_graph(np.random.default_rng(1)), feeds)
    with _options_logged({"params_dev": where}, "plan for graph") as plans:
        sched = pg.Scheduler([VK])
        outs = _graph(np.random.default_rng(1))
        runs = [sched.compute(outs, feeds) for _ in range(3)]
        sched.close()
    cpu_dev = pg.get_device(VK).description.lower().find("llvmpipe") >= 0
    mem = "device-local" if where == "on" or (where == "auto" and not cpu_dev) else "host-visible"
    assert plans and all(f"parameters in {mem} memory" in p for p in plans), plans
    for got in runs:
        for gv, wv in zip(got, want):
            assert nmse(gv, wv) <= 1e-4, nmse(gv, wv)
        for gv, fv in zip(got, runs[0]):
            assert np.array_equal(gv, fv)


def test_params_same_bytes_either_way():
    feeds = {"x": np.random.default_rng(9).standard_normal((2, 256)).astype(np.float32)}
    res = {}
    for where in ("on", "off"):
        with _options_logged({"params_dev": where}, "plan for graph"):
            res[where] = pg.Scheduler([VK]).compute(_graph(np.random.default_rng(2)), feeds)
    for a, b in zip(res["on"], res["off"]):
        assert np.array_equal(a, b)


def test_params_option_refuses_other_values():
    with pytest.raises(pg.PyggmlError, match="params_dev"):
        pg.get_device(VK).set_option("params_dev", "sometimes")
