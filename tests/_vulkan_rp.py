"""Helpers shared by the tests of the repacked decode mat-vec and its epilogues on Vulkan (test_vulkan_mv_rp.py,
test_vulkan_rope_mv.py, test_vulkan_norm_fold.py): which devices run it, the plugin's debug log, a graph's outputs
over several computes of one plan, and a model's decode with and without an option."""
import contextlib
import logging
import re

import numpy as np

import pyggml as pg
from pyggml.conformance.cases import nmse
from test_vulkan_kernels import VK, _compute, _decode_model, _options_logged, _weight


def has_int8():
    """Devices known to have the integer dot product and subgroup sums (where matvec_rp applies)."""
    desc = pg.get_device(VK).description
    return "llvmpipe" in desc or "NVIDIA" in desc


@contextlib.contextmanager
def debug_records():
    """Yields the list that collects the messages of pyggml's log (the plugins' debug lines too) in the block."""
    records = []

    class H(logging.Handler):
        def emit(self, r):
            records.append(r.getMessage())
    h = H(level=logging.DEBUG)
    log = logging.getLogger("pyggml")
    log.addHandler(h)
    try:
        yield records
    finally:
        log.removeHandler(h)


def run_steps(devs, build, feeds, options=None):
    """build()'s outputs computed by one scheduler on devs, once per feed dict (one plan, state kept between);
    with Vulkan device `options`, also the kernels the debug log named for its mul_mat nodes."""
    if options is None:
        s = pg.Scheduler(devs)
        outs = build()
        return [s.compute(outs, f) for f in feeds], []
    with _options_logged(options, "mul_mat '") as kernels:   # (filled when the block ends)
        s = pg.Scheduler(devs)
        outs = build()
        got = [s.compute(outs, f) for f in feeds]
    return got, kernels


def cpu_on_off(build, feeds, on, off):
    """build()'s outputs per feed on the CPU plugin, then on VK with options `on` and `off`: (CPU results, (results,
    mat-vec kernels, debug log lines) with `on`, the same with `off`)"""
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want, _ = run_steps([cpu], build, feeds)
    res = []
    for opts in (on, off):
        with debug_records() as records:
            got, kernels = run_steps([VK], build, feeds, opts)
        res.append((got, kernels, records))
    return want, res[0], res[1]


def smallest_plan(lines):
    """(dispatches, barriers) of the smallest plan among the plugin's 'plan for graph' lines (a model's decode plan)"""
    plans = [re.search(r"(\d+) dispatches, (\d+) barriers", r) for r in lines if "dispatches" in r]
    return min((int(m.group(1)), int(m.group(2))) for m in plans if m)


def decode_on_off(tmp_path, on, off):
    """A small synthetic LLaMA (2 layers, _decode_model) run with Vulkan options `on`, then `off`: for each, its logits
    per step, the kernels of its mul_mat nodes and its decode plan's (dispatches, barriers)."""
    run = _decode_model(tmp_path, "q4_0", 11)
    res = []
    for opts in (on, off):
        with debug_records() as records:
            logits, kernels = run(opts)
        res.append((logits, kernels, smallest_plan(records)))
    return res


def check_model_on_off(tmp_path, on, off, kernel, fewer, max_nmse=0.0, fewer_barriers=None):
    """decode_on_off's model with Vulkan options `on` and `off`: its logits equal step by step (bit for bit, or within
    max_nmse), and where the device has the integer dot product, `kernel` among on's mat-vec kernels and not off's,
    and on's decode plan `fewer` dispatches shorter (2 layers), and `fewer_barriers` barriers (where given)."""
    (got, k1, n_on), (ref, k0, n_off) = decode_on_off(tmp_path, on, off)
    for step, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), np.asarray(b)
        assert (np.array_equal(a, b) if max_nmse == 0.0 else nmse(a, b) <= max_nmse), f"step {step}: NMSE {nmse(a, b):.3g}"
    if has_int8():
        assert kernel in k1 and kernel not in k0, (k1, k0)
        assert n_on[0] == n_off[0] - fewer, (n_on, n_off)
        if fewer_barriers is not None:
            assert n_on[1] == n_off[1] - fewer_barriers, (n_on, n_off)


def check_gate_up_swiglu(wdt, m, k, seed, options):
    """A wdt gate/up pair (m x k) and its swiglu with Vulkan `options`: one mul_mat_vec_rpg dispatch where the device
    has the integer dot product, all three results against numpy within the int8 mat-vecs' threshold."""
    rng = np.random.default_rng(seed)
    g = pg.Graph()
    (wg, g64), (wu, u64) = (_weight(g, rng, wdt, (m, k), name) for name in ("wg", "wu"))
    x = g.input("x", (1, k))
    gate, up = pg.mul_mat(wg, x), pg.mul_mat(wu, x)
    xv = rng.standard_normal((1, k)).astype(np.float32)
    got, kern = _compute([gate, up, pg.swiglu(gate, up)], {"x": xv}, options, "mul_mat '")
    if has_int8():
        assert kern == ["mul_mat_vec_rpg"], kern
    a, b = xv.astype(np.float64) @ g64.T, xv.astype(np.float64) @ u64.T
    for out, ref in zip(got, (a, b, a / (1 + np.exp(-a)) * b)):
        out = np.asarray(out).reshape(ref.shape)
        assert nmse(out, ref) <= 5e-4, f"NMSE {nmse(out, ref):.3g}"
