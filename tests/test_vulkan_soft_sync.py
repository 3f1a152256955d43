"""Device option soft_sync (plugins/vulkan/vk_soft.c): decode stages of the repacked mat-vecs and the fused norms
follow the stage before without a pipeline barrier, waiting in the shader on the plan's stage counters. The results
must be the bytes the barriers give (lavapipe runs dispatches one after another, so there its waits find the count
complete at once; the GPU script runs the same tests on the NVIDIA driver, where the stages overlap), with fewer
barriers in the decode plan; prefill plans with cooperative-matrix kernels and runs under the validation layer keep
every barrier."""
import re

import numpy as np
import pytest

import pyggml as pg
from _vulkan_rp import debug_records, has_int8
from test_vulkan_kernels import VALIDATING, VK, _decode_model

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


def _plans(records):
    """(dispatches, barriers) of each plan the plugin logged"""
    return [(int(m.group(1)), int(m.group(2))) for m in (re.search(r"plan for graph \d+: (\d+) dispatches, (\d+) barriers", r)
                                                         for r in records) if m]


@pytest.mark.parametrize("wdt,level", [("q4_0", "1"), ("q4_K", "1"), ("q4_0", "2")])
def test_soft_sync_same_bytes(wdt, level, tmp_path):
    run = _decode_model(tmp_path, wdt, 21)
    got = {}
    for v in (level, "0"):
        with debug_records() as rec:
            got[v] = (run({"soft_sync": v}), _plans(rec))
    (on, k_on), plans_on = got[level]
    (off, k_off), plans_off = got["0"]
    assert k_on == k_off
    for a, b in zip(on, off):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    dec_on, dec_off = min(plans_on), min(plans_off)   # (the decode plan: the fewest dispatches)
    assert dec_on[0] == dec_off[0], (plans_on, plans_off)
    if has_int8() and not VALIDATING:   # the repacked mat-vecs and fused norms run there: their stages go without
        assert dec_on[1] < dec_off[1], (dec_on, dec_off)
    else:                               # under the validation layer the option is not applied
        assert dec_on[1] == dec_off[1], (dec_on, dec_off)


@pytest.mark.parametrize("level", ["1", "2"])
def test_soft_sync_gpu_kernels_same_bytes(level, tmp_path):
    """The kernels a GPU's decode runs, forced on lavapipe: the register norm (norm_wg=on) beside the mat-vecs that
    recompute it, and the split decode attention with its merge folded in (fa_split=on over 256 cells). With
    soft_sync=2 every stage of the decode plan goes without a barrier (get_rows' too: the norm reads it coherently),
    with 1 the attention's keep theirs; the bytes are the barriers'."""
    run = _decode_model(tmp_path, "q4_0", 23, n_ctx=512)
    gpu = {"norm_wg": "on", "fa_split": "on"}
    got = {}
    for v in (level, "0"):
        with debug_records() as rec:
            got[v] = (run({**gpu, "soft_sync": v}), _plans(rec), [r for r in rec if r.startswith("vulkan: flash_attn '")])
    (on, _), plans_on, fa_on = got[level]
    (off, _), plans_off, _ = got["0"]
    for a, b in zip(on, off):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    dec = [f for f in fa_on if "n_q 1," in f]
    assert dec and all(f.endswith(("flash_attn_dec", "flash_attn_dec2")) for f in dec), fa_on
    dec_on, dec_off = min(plans_on), min(plans_off)
    assert dec_on[0] == dec_off[0] and dec_off[1] > 0, (plans_on, plans_off)
    if has_int8() and not VALIDATING:
        n_layer = 2
        assert dec_on[1] == (0 if level == "2" else n_layer), (level, dec_on, dec_off)
    else:
        assert dec_on[1] == dec_off[1], (dec_on, dec_off)


@pytest.mark.skipif(VK is None or "llvmpipe" in pg.get_device(VK).description,
                    reason="a GPU's stages overlap; lavapipe runs dispatches one after another (the test above covers it)")
def test_soft_sync_wide_model_bytes(tmp_path):
    """On a GPU, where the waiting stages really run beside the stages they wait for: a model with 2048-wide rows and
    four layers decodes 24 steps, with soft_sync=1 once and =2 (the attention's stages too) twice, to the bytes the
    barriers give."""
    import pyggml.models as models
    from pyggml.synth import write_synth_model
    path = str(tmp_path / "wide.gguf")
    write_synth_model(path, dict(n_embd=2048, n_layer=4, n_head=16, n_head_kv=4, n_ff=5632, n_vocab=8192), "q4_0",
                      seed=5, progress=False)
    dev = pg.get_device(VK)
    runs = {}
    try:
        for v in ("0", "1", "2", "2"):
            dev.set_option("soft_sync", v)
            m = models.load(path, devices=[VK, "cpu"], n_ctx=64, progress=False)
            try:
                out = [np.asarray(m.prefill(list(range(1, 9)))).tobytes()]
                out += [np.asarray(m.decode(t)).tobytes() for t in range(10, 34)]
            finally:
                m.close()
            runs.setdefault(v, []).append(out)
    finally:
        dev.set_option("soft_sync", "0")
    ref = runs["0"][0]
    for k, out in enumerate(runs["1"] + runs["2"]):
        bad = [i for i, (a, b) in enumerate(zip(out, ref)) if a != b]
        assert not bad, f"soft_sync run {k}: steps {bad} differ from the barriers' bytes"


def _chain(options):
    """y2 = W2 (W1 x): two repacked mat-vecs, the second in a stage of its own after the first (soft_sync's boundary)."""
    from test_vulkan_kernels import _weight
    rng = np.random.default_rng(3)
    g = pg.Graph()
    (w1, a), (w2, b) = (_weight(g, rng, "q4_0", (256, 256), n) for n in ("w1", "w2"))
    x = g.input("x", (1, 256))
    y = pg.mul_mat(w2, pg.mul_mat(w1, x))
    dev = pg.get_device(VK)
    try:
        for k, v in options.items():
            dev.set_option(k, v)
        return pg.Scheduler([VK]).compute(y, {"x": rng.standard_normal((1, 256)).astype(np.float32)})
    finally:
        for k in options:
            dev.set_option(k, "0")


@pytest.mark.skipif(VALIDATING or not has_int8(), reason="soft_sync applies to the repacked mat-vecs, outside the validation layer")
def test_soft_sync_wait_that_gives_up_is_an_error():
    """A wait that is never met (debug_soft_stall: one workgroup more than the stage before has) gives up after its polls
    and the compute fails with an error naming soft_sync: no hang, no silent result. The device goes on afterwards."""
    with pytest.raises(pg.PyggmlError, match="soft_sync"):
        _chain({"soft_sync": "1", "debug_soft_stall": "1"})
    good = np.asarray(_chain({"soft_sync": "1"}))
    assert good.tobytes() == np.asarray(_chain({})).tobytes()
