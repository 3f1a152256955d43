"""The op conformance suite on every loadable device (plus the CPU plugin's reference kernels).

A device that does not support a case skips it with the plugin's reason, except the CPU plugin,
which must support everything (it is the fallback of every other backend)."""
import itertools

import pytest

import pyggml as pg
from pyggml.conformance import CASES, run_case


def _targets():
    out = []
    for d in pg.devices():
        out.append((str(d), "auto"))
        if d.plugin.name == "cpu":
            out.append((str(d), "reference"))
    return out


TARGETS = _targets()


@pytest.fixture(scope="module")
def scheds():
    cache = {}

    def get(dev, kernels):
        key = (dev, kernels)
        if key not in cache:
            cache[key] = pg.Scheduler([dev], poison=True)
        d = pg.get_device(dev)
        if d.plugin.name == "cpu":
            d.set_option("kernels", kernels)
        return cache[key]
    yield get
    for d in pg.devices():
        if d.plugin.name == "cpu":
            d.set_option("kernels", "auto")


_seed = itertools.count(1000)


@pytest.mark.parametrize("target", TARGETS, ids=[f"{d}-{k}" if k != "auto" else d for d, k in TARGETS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op(case, target, scheds):
    dev, kernels = target
    sched = scheds(dev, kernels)
    status, detail = run_case(case, sched, seed=next(_seed))
    if status == "unsupported":
        if dev.startswith("cpu"):
            pytest.fail(f"the CPU plugin must support every op: {detail}")
        pytest.skip(f"{dev} does not support this case: {detail}")
    assert status == "pass", f"{case.name} on {dev} ({kernels}): {detail}"


def test_cpu_is_present():
    assert any(d.plugin.name == "cpu" for d in pg.devices()), \
        f"the CPU plugin did not load; failures: {pg.failures()}"
