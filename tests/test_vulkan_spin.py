"""barrier=spin (experimental; vk_spin.c): a plan records no command between its stages; each
dispatch's workgroups wait in the shader on a counter of the plan that the previous stage's workgroups
count up when done. On lavapipe the dispatches of a command buffer run one after the other, so the
waits pass at once: these tests cover what the option records and computes (the words in every
parameter block, the counters zeroed each run, every shader's wrapped main), not its timing. A
synthetic LLaMA's prefill and decode steps give the bytes of the barrier plan; so do graphs of
many stages and of several dispatches per stage, and a plan computed many times. Synchronization
validation cannot see a dependency made through shader atomics: under the validation layer these
plans are expected to be reported (test_vulkan_multi's test_dropped_barrier_is_caught_by_sync_validation)."""
import numpy as np
import pytest

import pyggml as pg
from test_vulkan_kernels import VALIDATING, _model_logits, _options_logged

VK = next((str(d) for d in pg.devices() if d.plugin.name == "vulkan"), None)
pytestmark = [pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)"),
              pytest.mark.skipif(VALIDATING, reason="sync validation reports barrier=spin's stages (no barrier it can see)")]


@pytest.mark.parametrize("options", [{}, {"fa_split": "on"}, {"matvec": "3", "fuse": "0"}])
def test_spin_model_bytes(tmp_path, options):
    """Prefill and three decode steps: the logits of barrier=memory, byte for byte (with the KV split's
    row counters, a second fill at the start of each run; and with fusion off: more stages)."""
    ref, _ = _model_logits(tmp_path, {**options, "barrier": "memory"}, "plan for graph", 21, n_ctx=96, prompt=range(1, 40))
    got, log = _model_logits(tmp_path, {**options, "barrier": "spin"}, "plan for graph", 21, n_ctx=96, prompt=range(1, 40))
    assert any(" barriers" in m for m in log), log
    for step, (a, b) in enumerate(zip(got, ref)):
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"step {step}"


def _chain(n, width, seed):
    """y_{i+1} = rms_norm(y_i + x_i) * w_i for n steps over rows of `width`, plus a side branch per
    step (independent dispatches sharing a stage)."""
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    y = g.input("x0", (4, width))
    feeds = {"x0": rng.standard_normal((4, width)).astype(np.float32)}
    side = []
    for i in range(n):
        xi = g.input(f"x{i + 1}", (4, width))
        feeds[f"x{i + 1}"] = rng.standard_normal((4, width)).astype(np.float32)
        wi = g.weight(f"w{i}", rng.standard_normal(width).astype(np.float32))
        side.append(pg.scale(xi, 0.5 + i))
        y = pg.mul(pg.rms_norm(pg.add(y, xi), 1e-6), wi)
    return [y] + side, feeds


def test_spin_chain_many_stages():
    """A chain of 40 dependent steps with an independent node beside each, computed 25 times on one
    plan with new inputs each run (the counters start at zero every run; a read that saw a line cached
    from an earlier run or stage, not the bytes the stage before wrote, would differ): every run's
    bytes are barrier=memory's for the same inputs."""
    outs, feeds = _chain(40, 1024, 3)
    rng = np.random.default_rng(5)
    runs_feeds = [{k: rng.standard_normal(v.shape).astype(np.float32) for k, v in feeds.items()} for _ in range(25)]
    with _options_logged({"barrier": "memory"}, "plan for graph"):
        s = pg.Scheduler([VK])
        ref = [s.compute(outs, f) for f in runs_feeds]
        s.close()
    with _options_logged({"barrier": "spin"}, "plan for graph") as log:
        s = pg.Scheduler([VK])
        runs = [s.compute(outs, f) for f in runs_feeds]
        s.close()
    assert any(" 0 barriers" in m for m in log), log   # no barrier between stages
    for r, (got, want) in enumerate(zip(runs, ref)):
        for a, b in zip(got, want):
            assert np.array_equal(a, b), f"run {r}"


def test_spin_option_value():
    """barrier takes spin, and a value it does not know is refused with the list."""
    dev = pg.get_device(VK)
    dev.set_option("barrier", "spin")
    dev.set_option("barrier", "memory")
    with pytest.raises(pg.PyggmlError, match="spin"):
        dev.set_option("barrier", "spinning")


def test_spin_stall_is_an_error():
    """A wait that gives up (debug_spin_stall: each stage waits for one workgroup more than the one
    before it has) is reported at the next host wait, before the results are read: a PyggmlError
    naming barrier=spin, not a hang and not wrong bytes handed back. The plan works again after."""
    outs, feeds = _chain(3, 1024, 4)
    dev = pg.get_device(VK)
    with _options_logged({"barrier": "spin", "debug_spin_stall": "1"}, "plan for graph"):
        s = pg.Scheduler([VK])
        try:
            with pytest.raises(pg.PyggmlError, match="barrier=spin"):
                s.compute(outs, feeds)
        finally:
            s.close()
            dev.set_option("debug_spin_stall", "0")
    with _options_logged({"barrier": "spin"}, "plan for graph"):
        s = pg.Scheduler([VK])
        got = s.compute(outs, feeds)
        s.close()
    s = pg.Scheduler([VK])
    ref = s.compute(outs, feeds)
    s.close()
    for a, b in zip(got, ref):
        assert np.array_equal(a, b)
