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


def _chains(n):
    """Two independent chains of n scales and their sum: in graph order one chain, then the other."""
    g = pg.Graph()
    a, b = g.input("x", (4, 64)), g.input("y", (4, 64))
    for i in range(n):
        a = pg.scale(a, 1.5, 0.25)
    for i in range(n):
        b = pg.scale(b, 0.5, -1.0)
    return [pg.add(a, b)]


@pytest.mark.parametrize("n", [3, 6])
def test_reorder_shares_stages(n):
    """reorder=1 records the dispatches stage by stage: the two chains' scales share stages, so the
    plan needs fewer barriers than graph order (reorder=0: one chain, then the other), and never fewer
    than n (the chain's depth; the arena's reuse of freed bytes can add some); the same bytes either
    way, the CPU plugin's."""
    rng = np.random.default_rng(n)
    feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32), "y": rng.standard_normal((4, 64)).astype(np.float32)}
    want = pg.Scheduler(["cpu"]).compute(_chains(n), feeds)[0]
    got, barriers = {}, {}
    for reorder in ("1", "0"):
        with _options_logged({"reorder": reorder}, "plan for graph") as plans:
            sched = pg.Scheduler([VK])
            outs = _chains(n)
            got[reorder] = [sched.compute(outs, feeds)[0] for _ in range(2)]
            sched.close()
        assert plans, plans
        barriers[reorder] = int(plans[-1].split(" dispatches, ")[1].split(" ")[0])
    assert n <= barriers["1"] < barriers["0"], barriers
    for r in got.values():
        for v in r:
            assert np.array_equal(v, got["1"][0])
            assert nmse(v, want) <= 1e-12


@pytest.mark.parametrize("kind", ["memory", "buffer", "sync2"])
def test_barrier_kinds_same_bytes(kind):
    """barrier=buffer (buffer barriers on what the previous stage wrote) and barrier=sync2 (storage
    accesses only) order the stages as the default global barrier does: the same bytes, the CPU
    plugin's within rounding, as many barriers. A value the device cannot honour is refused."""
    dev = pg.get_device(VK)
    n = 4
    rng = np.random.default_rng(11)
    feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32), "y": rng.standard_normal((4, 64)).astype(np.float32)}
    want = pg.Scheduler(["cpu"]).compute(_chains(n), feeds)[0]
    got = {}
    for k in ("memory", kind):
        try:
            with _options_logged({"barrier": k}, "plan for graph") as plans:
                sched = pg.Scheduler([VK])
                outs = _chains(n)
                got[k] = ([sched.compute(outs, feeds)[0] for _ in range(2)], )
                sched.close()
        except pg.PyggmlError as e:
            assert k == "sync2" and "VK_KHR_synchronization2" in str(e), e
            pytest.skip(str(e))
        got[k] += (plans[-1].split(" dispatches, ")[1],)
    assert got[kind][1] == got["memory"][1]
    for v in got[kind][0]:
        assert np.array_equal(v, got["memory"][0][0])
        assert nmse(v, want) <= 1e-12


def test_barrier_option_refuses_other_values():
    with pytest.raises(pg.PyggmlError, match="barrier"):
        pg.get_device(VK).set_option("barrier", "fence")
