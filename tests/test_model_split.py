"""A model split across devices (pyggml/models/placement.py): contiguous layer ranges per device,
each layer's KV cache with its layer, the output with the last range, partial offload to the CPU,
long prompts prefilled as micro-batches pipelined over the devices, decode through the devices in
order with one host sync per token. Run on two devices of the GPU-like test plugin (CPU kernels:
the logits must equal a CPU-only run bit for bit) with its sanitizer on."""
import os

import numpy as np
import pytest

import pyggml as pg
from testdev_ctypes import load_builder
from pyggml import models
from pyggml.models import llama, placement

from test_llama import write_custom_model

tb = load_builder()
THREADS = os.cpu_count()


@pytest.fixture(scope="module")
def tdm():
    d = tb.build_testdev(names=("tdm",))
    p = pg.load_plugin(os.path.join(d, "libpyggml-tdm.so"))
    for dev in p.devices:
        dev.set_option("sanitize", "1")
        dev.set_option("copy_latency_us", "300")
        dev.set_option("launch_latency_us", "200")
        dev.set_option("n_threads", str(THREADS))
    yield p
    assert tb.sanitizer_report(p.devices[0]) == ""


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return write_custom_model(str(tmp_path_factory.mktemp("split") / "m.gguf"), L=4, tied=True, nv=300)


def _run(path, devices, policy="events", **kw):
    """Prefill a 40-token prompt (n_batch 8: five pipelined micro-batches), then decode 6 tokens."""
    rng = np.random.default_rng(2)
    toks = [int(t) for t in rng.integers(0, 300, 46)]
    m = models.load(path, devices=devices, n_ctx=64, n_batch=8, progress=False, sync=policy, n_threads=THREADS, **kw)
    try:
        out = [m.prefill(toks[:40])] + [m.decode(t) for t in toks[40:]]
        return out, m.layer_devices, m.sched.last_run
    finally:
        m.close()


@pytest.fixture(scope="module")
def cpu_logits(model_path):
    return _run(model_path, ["cpu"])[0]


@pytest.mark.parametrize("policy", ["strict", "relaxed", "events"])
def test_two_devices_give_the_cpu_logits(tdm, model_path, cpu_logits, policy):
    got, layers, last = _run(model_path, ["tdm:0", "tdm:1"], policy)
    assert layers == ["tdm:0", "tdm:0", "tdm:1", "tdm:1"]
    for g, want in zip(got, cpu_logits):
        assert np.array_equal(g, want)
    assert tb.sanitizer_report(tdm.devices[0]) == ""
    if policy == "events":
        assert last.host_syncs == 1, last.sync_pattern          # decode: one host wait per token
        assert "w" in last.sync_pattern                          # the devices ordered by device waits


def test_partial_offload_and_tensor_split(tdm, model_path, cpu_logits):
    got, layers, _ = _run(model_path, ["tdm:0", "cpu"], tensor_split=[3, 1])
    assert layers == ["tdm:0", "tdm:0", "tdm:0", "cpu:0"]
    for g, want in zip(got, cpu_logits):
        assert np.array_equal(g, want)
    got, layers, _ = _run(model_path, ["tdm:0", "tdm:1"], tensor_split=[1, 3])
    assert layers == ["tdm:0", "tdm:1", "tdm:1", "tdm:1"]
    for g, want in zip(got, cpu_logits):
        assert np.array_equal(g, want)


def test_split_attends_the_filled_cells_only(tdm, model_path, monkeypatch):
    """Small extents (KV_PAD 8) in a 128-cell context: the 40-token prompt's five 8-token micro-batches
    run through one forward attending the 64 cells its last chunk needs (the mask fed to both
    devices), decode crosses the 48-, 56- and 64-cell extents; the split gives the CPU's logits bit
    for bit, with the same forwards."""
    monkeypatch.setattr(llama, "KV_PAD", 8)
    rng = np.random.default_rng(4)
    toks = [int(t) for t in rng.integers(0, 300, 60)]

    def run(devices):
        m = models.load(model_path, devices=devices, n_ctx=128, n_batch=8, progress=False, n_threads=THREADS)
        try:
            return [m.prefill(toks[:40])] + [m.decode(t) for t in toks[40:]], sorted(m._forwards)
        finally:
            m.close()

    want, fw = run(["cpu"])
    got, fw_split = run(["tdm:0", "tdm:1"])
    assert fw == fw_split and [k for k in fw if k[0] == 8] == [(8, False, 64)]
    assert {k[2] for k in fw if k[0] == 1} >= {48, 56, 64}
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    assert tb.sanitizer_report(tdm.devices[0]) == ""


def test_plan_places_layers_caches_and_output(tdm, model_path):
    m = models.load(model_path, devices=["tdm:0", "tdm:1"], n_ctx=64, progress=False)
    try:
        plan = m.sched.plan([m.forward_for(1).logits])
        used = [str(plan.devices[d]) for d, _ in plan.splits]
        assert used == ["tdm:0", "tdm:1"], plan.describe()        # one hand-over between the ranges
        homes = {t.name: str(plan.devices[plan.home[t.id]]) for t in plan.order if t.name.startswith("cache_")}
        assert homes == {f"cache_{kv}.{i}": f"tdm:{i // 2}" for kv in "kv" for i in range(4)}
        assert plan.peak_bytes["tdm:0"] > 0 and plan.peak_bytes["tdm:1"] > 0
    finally:
        m.close()


def test_split_layers_by_memory_and_errors(tdm):
    devs = [tdm.devices[0], tdm.devices[1], pg.get_device("cpu")]
    assert placement.split_layers(devs, 8) == ["tdm:0"] * 4 + ["tdm:1"] * 4     # equal free memory, CPU left out
    assert placement.split_layers(devs, 3, [0, 0, 1]) == ["cpu:0"] * 3
    assert placement.summary(placement.split_layers(devs, 5, [2, 2, 1])) == \
        {"tdm:0": range(0, 2), "tdm:1": range(2, 4), "cpu:0": range(4, 5)}
    for bad in ([1, 1], [1, -1, 1], [0, 0, 0], ["a", 1, 1], [float("nan"), 1, 1]):
        with pytest.raises(pg.ConfigError, match="tensor_split"):
            placement.split_layers(devs, 8, bad)
