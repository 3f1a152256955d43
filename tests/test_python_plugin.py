"""Backends written in Python (pyggml.plugin): the example passes `pyggml check`, takes part in a
graph split with the CPU, and an exception inside a Python plugin always becomes an error value
carrying its traceback, never a success."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg
import pyggml.plugin as P
from pyggml import _abi_consts as A

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "numpy_plugin.py")


@pytest.fixture(scope="module")
def numpy_plugin():
    return P.load(EXAMPLE)


@pytest.mark.slow
def test_check_passes_on_the_example():
    r = subprocess.run([sys.executable, "-m", "pyggml", "check", EXAMPLE], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "FAIL" not in r.stdout
    for rule in ("R4", "R5", "R6", "R8 R9", "R13", "R14", "R15", "R16", "R17", "R18"):
        assert f"pass {rule}" in r.stdout, rule


def test_graph_split_with_the_cpu(numpy_plugin):
    """mul_mat is the CPU's (the numpy device does not support it); add runs on the numpy device
    and so do rms_norm and silu, pinned there: numpy -> cpu -> numpy, values against float64."""
    dev = numpy_plugin.devices[0]
    rng = np.random.default_rng(1)
    w = rng.standard_normal((48, 64)).astype(np.float32)
    x = rng.standard_normal((3, 64)).astype(np.float32)
    g = pg.Graph()
    xi = g.input("x", x.shape)
    h = pg.mul_mat(g.weight("w", w), pg.add(xi, xi))
    with g.on(str(dev)):
        y = pg.silu(pg.rms_norm(h, eps=1e-5))
    sched = pg.Scheduler([str(dev), "cpu"])
    out = sched.compute(y, {"x": x})
    h = (2 * x.astype(np.float64)) @ w.T.astype(np.float64)
    h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-5)
    ref = h / (1 + np.exp(-h))
    assert np.max(np.abs(out - ref)) < 1e-4
    order = [s["device"] for s in sched.last_run.per_split]
    assert order == [str(dev), "cpu:0", str(dev)], sched.last_run.per_split


class _Boom(P.Device):
    description = "raises"

    def supports(self, node):
        if node.op == A.OP_SCALE:
            raise RuntimeError("supports exploded")
        return node.op == A.OP_ADD and node.type == A.TYPE_F32

    def compute(self, node):
        raise ValueError("compute exploded on purpose")


class _BoomBackend(P.Backend):
    name = "boom"

    def init(self):
        return [_Boom()]


def test_an_uncaught_exception_is_an_error_with_its_traceback():
    """compute raises ValueError: Scheduler.compute raises PluginError (internal error) whose message
    carries the Python traceback; the output is never returned as if computed."""
    p = P.load(_BoomBackend())
    g = pg.Graph()
    a = g.input("a", (4, 1024))
    y = pg.add(a, a)
    with pytest.raises(pg.PluginError) as e:
        pg.Scheduler([str(p.devices[0])]).compute(y, {"a": np.ones((4, 1024), np.float32)})
    assert e.value.code == A.ERR_INTERNAL
    assert "Traceback" in str(e.value) and "ValueError: compute exploded on purpose" in str(e.value)


def test_exception_in_supports_op_is_no_and_is_logged(caplog):
    """supports_op cannot return an error: an exception there answers 0 and logs the traceback."""
    import logging
    from pyggml._plugin import drain_log
    from pyggml.conformance.abi import Table, device_handle, f32_tensor, ffi  # noqa: F401
    p = P.load(_BoomBackend())
    g = pg.Graph()
    a = g.input("a", (4, 1024))
    y = pg.scale(a, 2.0)
    with caplog.at_level(logging.ERROR, logger="pyggml"):
        out = pg.Scheduler([str(p.devices[0]), "cpu"]).compute(y, {"a": np.ones((4, 1024), np.float32)})
        drain_log()
    assert np.all(out == 2.0)                       # the CPU took it
    assert any("supports exploded" in r.getMessage() for r in caplog.records)


def test_errors_raised_with_a_code_keep_it():
    class Picky(P.Device):
        def set_option(self, key, value):
            raise P.Error(A.ERR_INVALID_ARGUMENT, f"{key} wants a prime, got {value}")

    class PickyBackend(P.Backend):
        name = "picky"

        def init(self):
            return [Picky()]
    p = P.load(PickyBackend())
    with pytest.raises(pg.PluginError, match="wants a prime") as e:
        p.devices[0].set_option("n", "4")
    assert e.value.code == A.ERR_INVALID_ARGUMENT


class _Recorder(P.Device):
    """add / scale / rms_norm on the host (float64, f32 stored); each computed node's flags kept."""
    description = "records the flags of the nodes it computes"

    def __init__(self):
        super().__init__()
        self.flags = {}

    def supports(self, node):
        return node.op in (A.OP_ADD, A.OP_SCALE, A.OP_RMS_NORM) and node.type == A.TYPE_F32

    def compute(self, node):
        a = node.src[0].array().astype(np.float64)
        if node.op == A.OP_ADD:
            r = a + node.src[1].array()
        elif node.op == A.OP_SCALE:
            r = a * node.param_f32(0)
        else:
            r = a / np.sqrt(np.mean(a * a, axis=-1, keepdims=True) + node.param_f32(0))
        node.array()[...] = r
        self.flags[node.name] = node.flags


class _RecorderBackend(P.Backend):
    name = "flagrec"

    def init(self):
        self.devs = [_Recorder()]
        return self.devs


def test_nodes_read_after_the_graph_carry_the_output_flag():
    """PYG_TENSOR_FLAG_OUTPUT marks the nodes whose bytes are read once a device's graph has run
    (include/pyggml/tensor.h), so a plugin that fuses nodes (CUDA's qkv_rope) keeps writing them:
    an output the host reads, a node another split reads (the CPU's mul_mat; c, whose view the host
    reads through a cont() the recorder leaves to the CPU); never an intermediate only the same
    graph reads. (On the H200 the scheduler set the flag
    nowhere, the CUDA plugin fused away a mat-vec the host read, and the host got zeros.)"""
    be = _RecorderBackend()
    p = P.load(be)
    dev = p.devices[0]
    x = np.random.default_rng(3).standard_normal((2, 32)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((8, 32)).astype(np.float32)
    g = pg.Graph()
    xi = g.input("x", x.shape)
    with g.on(str(dev)):
        a = pg.add(xi, xi)             # read only by b, in this graph
        b = pg.scale(a, 0.5)           # read by the CPU split (mul_mat)
        c = pg.rms_norm(b, 1e-5)       # the host reads a view of it
        d = pg.scale(b, 3.0)           # the host reads it
    y = pg.mul_mat(g.weight("w", w), b)
    outs = pg.Scheduler([str(dev), "cpu"]).compute([y, pg.reshape(c, (64,)), d], {"x": x})
    assert np.allclose(outs[2], 3 * x, atol=1e-5) and np.allclose(outs[0], x @ w.T, atol=1e-4)
    flags = be.devs[0].flags
    name = {t: f"{t.op_name}#{t.id}" for t in (a, b, c, d)}
    OUT = A.TENSOR_FLAG_OUTPUT
    assert set(flags) == set(name.values()), flags
    assert [bool(flags[name[t]] & OUT) for t in (a, b, c, d)] == [False, True, True, True], flags
