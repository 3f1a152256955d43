"""gemm_splitk: mul_mat_cm4 over K splits (at least gemm_splitk_steps K steps each), a workgroup each, where the GEMM's
grid, with those of the other GEMMs reading the same activations (its barrier stage), has fewer workgroups than the
option; splitk_add.comp adds the partial sums of splits 1.. (the plan's scratch) into split 0's result after it.
Against the CPU plugin, emulated everywhere (gemm=cm_emulated; lavapipe in CI) and on the tensor cores where the device
has them (the H100/H200: scripts/gpu_vulkan.sh)."""
import re

import numpy as np
import pytest

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import VALIDATING, VK, _compute, _has_coopmat, _options_logged, _rerun_under_validation
from test_vulkan_kernels import _validation_clean  # noqa: F401 (an autouse fixture)


def _gemm(wtype, M, K, N, batch=1, seed=0):
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    wf = rng.standard_normal((M, K)).astype(np.float32)
    w = g.weight("w", wf.astype(np.float16)) if wtype == "f16" else g.weight("w", pg.quantize(wf, wtype), type=wtype, shape=(M, K))
    shape = (batch, N, K) if batch > 1 else (N, K)
    x = g.input("x", shape)
    y = pg.mul_mat(w, x)
    xv = rng.standard_normal(shape).astype(np.float32)
    ref = np.asarray(pg.Scheduler(["cpu"]).compute(y, {"x": xv}), np.float64)
    return y, {"x": xv}, ref


def _gemm_opts(gemm, splitk):
    return {"gemm": gemm, "gemm_v": "4", "gemm_splitk": str(splitk), "gemm_splitk_steps": "16", "splitk_last": "0"}


def _skip_without(gemm):
    if gemm == "coopmat" and not _has_coopmat():
        pytest.skip("no cooperative matrices on this device")


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("wtype,M,K,N,batch", [("q4_0", 64, 4096, 40, 1), ("q4_0", 130, 4096, 70, 1), ("q4_K", 64, 4096, 40, 1),
                                               ("f16", 64, 4608, 33, 1), ("q8_0", 64, 4096, 40, 2)])
def test_split_gemm_against_cpu(gemm, wtype, M, K, N, batch):
    """The split GEMM (its kernel name ends in ' splitN': N splits of at least 32 K steps) against the CPU plugin: q4_0
    read directly, q4_K through gemm_dq's f16 copy where that runs, f16, a partial last tile of rows, K not a multiple
    of the splits' steps (4608), a batch of two."""
    _skip_without(gemm)
    y, feeds, ref = _gemm(wtype, M, K, N, batch)
    got, kernels = _compute(y, feeds, _gemm_opts(gemm, 1024), "mul_mat '")
    assert kernels and " split" in kernels[0], kernels
    assert nmse(np.asarray(got), ref) <= 5e-4, f"NMSE {nmse(np.asarray(got), ref):.3g} ({kernels})"


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_split_sums_in_split_order(gemm):
    """splitk_add adds the partials in split order: two runs give the same bytes, and the plan has the pass after the
    GEMM (2 dispatches, 1 barrier; where gemm_b16 converts the activations first, as on a GPU, 3 and 2)."""
    _skip_without(gemm)
    y, feeds, ref = _gemm("q4_0", 64, 4096, 40)
    a, k1 = _compute(y, feeds, _gemm_opts(gemm, 1024), "mul_mat '")
    b, k2 = _compute(y, feeds, _gemm_opts(gemm, 1024), "plan for graph")
    assert " split" in k1[0], k1
    assert np.array_equal(np.asarray(a), np.asarray(b))
    b16 = " b16" in k1[0]
    assert any(("3 dispatches, 2 barriers" if b16 else "2 dispatches, 1 barriers") in k for k in k2), (k1, k2)
    assert nmse(np.asarray(a), ref) <= 5e-4


@pytest.mark.parametrize("M,K,N,splitk", [(64, 512, 40, 1024),     # 16 K steps: not two splits of 16
                                          (64, 4096, 40, 1),       # the grid (1 workgroup) not below the option
                                          (64, 4096, 40, 0),       # never
                                          (64, 2048, 40, 8)])      # 8 splits asked, the emulated build's 64 K steps allow 4
def test_when_not_split(M, K, N, splitk):
    """No split with fewer K steps than two splits take, where the grid is not smaller than the option, with the
    option 0; the split count is capped by 16 K steps a split (gemm_splitk_steps)."""
    y, feeds, ref = _gemm("q4_0", M, K, N)
    got, kernels = _compute(y, feeds, _gemm_opts("cm_emulated", splitk), "mul_mat '")
    assert kernels and kernels[0].startswith("mul_mat_cm4"), kernels
    if splitk == 8:
        assert kernels[0].startswith("mul_mat_cm4 64x64.k32") and kernels[0].endswith(" split4"), kernels
    else:
        assert " split" not in kernels[0], kernels
    assert nmse(np.asarray(got), ref) <= 5e-4


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_split_and_unsplit_in_one_stage(gemm):
    """A split GEMM (K 4096) and two unsplit ones (K 512) share a barrier stage: each against the CPU plugin (under the
    validation layer: no hazard between them, though every module of theirs declares a write to binding 6; the unsplit
    ones bind their results there)."""
    _skip_without(gemm)
    rng = np.random.default_rng(3)
    g = pg.Graph()
    w1 = g.weight("w1", pg.quantize(rng.standard_normal((64, 4096)).astype(np.float32), "q4_0"), type="q4_0", shape=(64, 4096))
    w2 = g.weight("w2", pg.quantize(rng.standard_normal((96, 512)).astype(np.float32), "q4_0"), type="q4_0", shape=(96, 512))
    x, x2 = g.input("x", (40, 4096)), g.input("x2", (40, 512))
    w3 = g.weight("w3", pg.quantize(rng.standard_normal((32, 512)).astype(np.float32), "q4_0"), type="q4_0", shape=(32, 512))
    y1, y2, y3 = pg.mul_mat(w1, x), pg.mul_mat(w2, x2), pg.mul_mat(w3, x2)
    feeds = {"x": rng.standard_normal((40, 4096)).astype(np.float32), "x2": rng.standard_normal((40, 512)).astype(np.float32)}
    cpu = pg.Scheduler(["cpu"])
    refs = [np.asarray(r, np.float64) for r in cpu.compute([y1, y2, y3], feeds)]
    got, kernels = _compute([y1, y2, y3], feeds, _gemm_opts(gemm, 1024), "mul_mat '")
    assert sum(" split" in k for k in kernels) == 1, kernels
    for o, r in zip(got, refs):
        assert nmse(np.asarray(o), r) <= 5e-4


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("readers", [1, 2, 3])
def test_the_stage_counts(gemm, readers):
    """GEMMs reading the same activations share a barrier stage, so the rule counts their tiles together: 64-row GEMMs
    (one tile each) of K 4096 with the option 4 split alone (4 splits), two together (2 each), three not at all. Each
    against the CPU plugin."""
    _skip_without(gemm)
    rng = np.random.default_rng(8)
    g = pg.Graph()
    x = g.input("x", (40, 4096))
    ws = [pg.quantize(rng.standard_normal((64, 4096)).astype(np.float32), "q4_0") for _ in range(readers)]
    ys = [pg.mul_mat(g.weight(f"w{i}", w, type="q4_0", shape=(64, 4096)), x) for i, w in enumerate(ws)]
    feeds = {"x": rng.standard_normal((40, 4096)).astype(np.float32)}
    refs = [np.asarray(r, np.float64) for r in pg.Scheduler(["cpu"]).compute(ys, feeds)]
    got, kernels = _compute(ys, feeds, _gemm_opts(gemm, 4), "mul_mat '")
    want = {1: " split4", 2: " split2", 3: None}[readers]
    assert len(kernels) == readers and all((k.endswith(want) if want else " split" not in k) for k in kernels), kernels
    for o, r in zip(got, refs):
        assert nmse(np.asarray(o), r) <= 5e-4


def test_split_steps_option():
    """gemm_splitk_steps sets the fewest K steps a split takes: 32 (the default) leaves a 64-step GEMM two splits where 16
    gives it 4."""
    y, feeds, ref = _gemm("q4_0", 64, 2048, 40)
    got, kernels = _compute(y, feeds, {**_gemm_opts("cm_emulated", 8), "gemm_splitk_steps": "32"}, "mul_mat '")
    assert kernels[0].endswith(" split2"), kernels
    assert nmse(np.asarray(got), ref) <= 5e-4
    with pytest.raises(pg.PyggmlError, match="gemm_splitk_steps"):
        pg.get_device(VK).set_option("gemm_splitk_steps", "0")


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
@pytest.mark.parametrize("wtype,M,K,N,batch", [("q4_0", 130, 4096, 70, 1), ("f16", 64, 4608, 33, 1), ("q8_0", 64, 4096, 40, 2)])
def test_split_last(gemm, wtype, M, K, N, batch):
    """splitk_last=1: each tile's last split adds the partials in split order, so the result is splitk_add's byte for
    byte (a partial last tile of rows, K not a multiple of the splits' steps, a batch of two), and the plan has no pass
    (one dispatch and one barrier fewer); three runs of one plan (the counters set back each time) agree."""
    _skip_without(gemm)
    y, feeds, ref = _gemm(wtype, M, K, N, batch)
    base, k0 = _compute(y, feeds, _gemm_opts(gemm, 1024), "plan for graph")
    opts = {**_gemm_opts(gemm, 1024), "splitk_last": "1"}
    with _options_logged(opts, "plan for graph") as k1:
        s = pg.Scheduler([VK], poison=True)
        runs = [np.asarray(s.compute(y, feeds)) for _ in range(3)]
    for r in runs:
        assert np.array_equal(r, np.asarray(base)), nmse(r, np.asarray(base))
    assert nmse(runs[0], ref) <= 5e-4
    n = lambda ks: [tuple(map(int, re.search(r"(\d+) dispatches, (\d+) barriers", k).groups())) for k in ks if "dispatches" in k]
    (d0, b0), (d1, b1) = n(k0)[0], n(k1)[0]
    assert d1 == d0 - 1 and b1 == b0 - 1, (k0, k1)


@pytest.mark.parametrize("gemm", ["cm_emulated", "coopmat"])
def test_split_last_two_gemms_share_the_counters(gemm):
    """Two split GEMMs of different grids one after the other (the second reads the first's result) share the region
    and its counters: each against splitk_last=0's bytes, and a second run of the plan too."""
    _skip_without(gemm)
    rng = np.random.default_rng(5)
    g = pg.Graph()
    w1 = g.weight("w1", pg.quantize(rng.standard_normal((2048, 4096)).astype(np.float32), "q4_0"), type="q4_0", shape=(2048, 4096))
    w2 = g.weight("w2", pg.quantize(rng.standard_normal((64, 2048)).astype(np.float32), "q4_0"), type="q4_0", shape=(64, 2048))
    x = g.input("x", (40, 4096))
    h = pg.mul_mat(w1, x)                       # 40 x 2048: 16-32 tiles (64 or 128 rows) in 4-8 splits
    # 40 x 64 after h: one tile over K 2048, 32 steps of 64 (a GPU's tile up to 64 tokens: 2 splits of at least
    # gemm_splitk_steps=16; at K 1024 it would not split) or 64 of 32 (lavapipe's: 4 splits)
    y = pg.mul_mat(w2, h)
    feeds = {"x": rng.standard_normal((40, 4096)).astype(np.float32)}
    base, k0 = _compute([h, y], feeds, _gemm_opts(gemm, 1024), "mul_mat '")
    with _options_logged({**_gemm_opts(gemm, 1024), "splitk_last": "1"}, "mul_mat '") as k1:
        s = pg.Scheduler([VK], poison=True)
        runs = [s.compute([h, y], feeds) for _ in range(2)]
    assert sum(" split" in k for k in k0) == 2, k0
    for r in runs:
        for a, b in zip(r, base):
            assert np.array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.skipif(VALIDATING, reason="this process is the validated run")
def test_split_under_validation_layer():
    """Re-runs this file in a child process with PYGGML_VULKAN_VALIDATION=1 (synchronization validation)."""
    _rerun_under_validation(__file__)


@pytest.mark.parametrize("bad", ["-1", "x", "2000000"])
def test_bad_option_values_are_refused(bad):
    with pytest.raises(pg.PyggmlError, match="gemm_splitk"):
        pg.get_device(VK).set_option("gemm_splitk", bad)
