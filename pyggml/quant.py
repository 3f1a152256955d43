"""quantize / dequantize through the CPU plugin (a cont op converting types), bit-exact with ggml."""
from typing import Optional, Sequence

import numpy as np

from .errors import ShapeError
from .types import dtype as _dtype, f32

_scheds = {}


def _sched(n_threads):
    s = _scheds.get(n_threads)
    if s is None:
        from .scheduler import Scheduler
        s = _scheds[n_threads] = Scheduler("cpu", n_threads=n_threads)
    return s


def quantize(array: np.ndarray, type: str, n_threads: Optional[int] = None) -> np.ndarray:
    """f32 data (..., K) -> raw blocks of `type` as uint8 (..., bytes per row); K must be a
    multiple of the type's block size. Runs threaded in the CPU plugin."""
    from .graph import Graph
    from .ops import cont
    t = _dtype(type)
    a = np.ascontiguousarray(array, dtype=np.float32)
    if a.ndim == 0 or a.shape[-1] % t.block_size:
        raise ShapeError(f"quantize: last axis of shape {list(a.shape)} is not a multiple of {t.name}'s "
                         f"block size {t.block_size}")
    shape2 = (int(np.prod(a.shape[:-1], dtype=np.int64)), a.shape[-1])
    g = Graph("quantize")
    x = g.input("x", shape2, f32)
    s = _sched(n_threads)
    try:
        out = s.compute(cont(x, t), {"x": a.reshape(shape2)})
    finally:
        s.forget(g)                 # one-off graph: keep no plan (its arena held the whole input)
    return out.reshape(a.shape[:-1] + (out.shape[-1],)) if t.is_quantized else out.reshape(a.shape)


def dequantize(blocks: np.ndarray, type: str, shape: Sequence[int], n_threads: Optional[int] = None) -> np.ndarray:
    """Raw blocks of `type` with logical numpy `shape` (..., K) -> float32 array of that shape."""
    from .graph import Graph
    from .ops import cont
    t = _dtype(type)
    shape = tuple(int(s) for s in shape)
    if not shape or shape[-1] % t.block_size:
        raise ShapeError(f"dequantize: last axis of shape {list(shape)} is not a multiple of {t.name}'s "
                         f"block size {t.block_size}")
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    g = Graph("dequantize")
    w = g.weight("w", np.ascontiguousarray(blocks).view(np.uint8).reshape(-1), type=t, shape=(rows, shape[-1]))
    s = _sched(n_threads)
    try:
        out = s.compute(cont(w, f32))
    finally:
        s.forget(g)
    return out.reshape(shape)
