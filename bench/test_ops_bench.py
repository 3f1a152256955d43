"""Op micro-benchmarks on pytest-benchmark: each op on a pyggml device and the same op in numpy,
in one run and one group, so the table and the JSON hold both side by side.

    python3 -m pytest bench/test_ops_bench.py --device cpu --benchmark-json bench/results/ops-bench-$(date +%Y%m%dT%H%M%S).json
    python3 -m pytest bench/test_ops_bench.py --benchmark-save=base              # keep a baseline (.benchmarks/)
    python3 -m pytest bench/test_ops_bench.py --benchmark-compare=0001 --benchmark-compare-fail=median:10%
    make bench-ops-pytest DEVICE=cuda:0                                           # the same through make

A run measures its peer (numpy) in the same process; compare medians and ratios, not absolute
times across machines. Values are checked once per case before timing (a benchmark of a wrong
answer is no benchmark)."""
import numpy as np
import pytest

import pyggml as pg

CASES = {   # name: (full shape, quick shape)
    "mul_mat f32 decode": ((1, 4096, 4096), (1, 512, 512)),
    "mul_mat f32 prefill": ((128, 2048, 2048), (32, 256, 256)),
    "mul_mat q4_0 decode": ((1, 4096, 4096), (1, 512, 512)),
    "rms_norm f32": ((512, 4096), (64, 512)),
    "soft_max f32": ((512, 4096), (64, 512)),
    "add f32": ((512, 4096), (64, 512)),
    "silu f32": ((512, 4096), (64, 512)),
}


def _numpy(name, xv, bv, wf):
    if name.startswith("mul_mat"):
        wt = np.ascontiguousarray(wf.T)
        return lambda: xv @ wt
    return {"rms_norm f32": lambda: xv / np.sqrt((xv * xv).mean(-1, keepdims=True) + 1e-5),
            "soft_max f32": lambda: (lambda e: e / e.sum(-1, keepdims=True))(np.exp(xv - xv.max(-1, keepdims=True))),
            "add f32": lambda: xv + bv,
            "silu f32": lambda: xv / (1 + np.exp(-xv))}[name]


def _case(name, size):
    rng = np.random.default_rng(0)
    shape = CASES[name][size == "quick"]
    g = pg.Graph()
    wf = bv = None
    if name.startswith("mul_mat"):
        n, m, k = shape
        wf = rng.standard_normal((m, k)).astype(np.float32)
        if "q4_0" in name:
            blocks = pg.quantize(wf, "q4_0")
            w = g.weight("w", blocks, type="q4_0", shape=wf.shape)
            wf = pg.dequantize(blocks, "q4_0", wf.shape).astype(np.float32)
        else:
            w = g.weight("w", wf)
        xv = rng.standard_normal((n, k)).astype(np.float32)
        y = pg.mul_mat(w, g.input("x", xv.shape))
    else:
        xv = rng.standard_normal(shape).astype(np.float32)
        x = g.input("x", shape)
        bv = rng.standard_normal(shape).astype(np.float32)
        y = {"rms_norm f32": lambda: pg.rms_norm(x, eps=1e-5), "soft_max f32": lambda: pg.soft_max(x),
             "add f32": lambda: pg.add(x, g.input("b", shape)), "silu f32": lambda: pg.silu(x)}[name]()
    feeds = {"x": xv, "b": bv} if name.startswith("add") else {"x": xv}
    return y, feeds, _numpy(name, xv, bv, wf)


@pytest.mark.parametrize("impl", ["pyggml", "numpy"])
@pytest.mark.parametrize("name", list(CASES))
def test_op(benchmark, request, name, impl):
    device, size = request.config.getoption("--device"), request.config.getoption("--size")
    y, feeds, ref = _case(name, size)
    benchmark.group = name
    benchmark.extra_info.update(device=device if impl == "pyggml" else "numpy", shape=str(CASES[name][size == "quick"]))
    if impl == "numpy":
        benchmark(ref)
        return
    sched = pg.Scheduler([device])
    got = sched.compute(y, feeds)                  # plans, uploads; and the answer must be right
    want = ref()
    err = float(np.sum((got - want) ** 2) / max(float(np.sum(want.astype(np.float64) ** 2)), 1e-30))
    assert err < 5e-4, f"{name} on {device}: NMSE {err:g}"
    benchmark(sched.compute, y, feeds)
