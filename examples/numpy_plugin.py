"""A pyggml backend written in Python: a "numpy" device that computes f32 elementwise and row ops
with numpy, through the same C ABI as a compiled plugin (pyggml.plugin fills the table).

    python3 -m pyggml check examples/numpy_plugin.py          # the conformance suite
    python3 examples/numpy_plugin.py                            # a graph split with the CPU

Its memory is its own (numpy byte arrays the host never touches), so in a graph with the CPU the
scheduler copies activations in and out through the table; what it does not support (mul_mat,
quantized types) runs on the next device in the list.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from a checkout
import pyggml.plugin as P  # noqa: E402
from pyggml import _abi_consts as A  # noqa: E402


def _silu(x):
    return x / (1.0 + np.exp(-x))


def _broadcastable(a, b):
    return all(y == x or y == 1 for x, y in zip(a.ne, b.ne))


class NumpyDevice(P.Device):
    description = "numpy (Python plugin example)"

    def memory(self):
        return 0, 1 << 30

    def supports(self, node):
        s = [x for x in node.src if x is not None]
        if node.type != A.TYPE_F32 or any(x.type != A.TYPE_F32 for x in s):
            return False
        if node.op in (A.OP_ADD, A.OP_MUL):
            return len(s) == 2 and _broadcastable(s[0], s[1]) and s[0].ne == node.ne
        if node.op in (A.OP_SCALE, A.OP_SILU, A.OP_CONT):
            return len(s) == 1 and s[0].ne == node.ne if node.op != A.OP_CONT else len(s) == 1
        if node.op == A.OP_RMS_NORM:
            return len(s) == 1 and s[0].ne == node.ne
        return False

    def compute(self, node):
        out = node.array()
        x = node.src[0].array().astype(np.float64)
        if node.op == A.OP_ADD:
            r = x + node.src[1].array()
        elif node.op == A.OP_MUL:
            r = x * node.src[1].array()
        elif node.op == A.OP_SCALE:
            r = x * node.param_f32(0) + node.param_f32(1)
        elif node.op == A.OP_SILU:
            r = _silu(x)
        elif node.op == A.OP_CONT:
            r = x.reshape(-1).reshape(out.shape)       # flat order, dim 0 fastest
        elif node.op == A.OP_RMS_NORM:
            r = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + node.param_f32(0))
        else:
            raise P.Error(A.ERR_UNSUPPORTED, f"op {A.OP_NAMES[node.op]}")
        out[...] = r


class NumpyBackend(P.Backend):
    name = "numpy"
    version = "0.1.0"

    def init(self):
        return [NumpyDevice()]


if __name__ == "__main__":
    import pyggml as pg
    P.load(__file__)
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 128)).astype(np.float32)
    x = rng.standard_normal((4, 128)).astype(np.float32)
    g = pg.Graph()
    xi = g.input("x", x.shape)
    y = pg.silu(pg.rms_norm(pg.mul_mat(g.weight("w", w), pg.add(xi, xi)), eps=1e-5))
    sched = pg.Scheduler(["numpy", "cpu"])
    out = sched.compute(y, {"x": x})
    h = (2 * x.astype(np.float64)) @ w.T.astype(np.float64)
    h = h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + 1e-5)
    ref = h / (1 + np.exp(-h))
    print("splits:", sched.last_run.splits if hasattr(sched.last_run, "splits") else "?")
    print("max abs error against float64 numpy:", float(np.max(np.abs(out - ref))))
