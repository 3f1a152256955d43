"""Graphs and tensors as Python objects (built once; the scheduler turns them into C descriptors).

Shapes are numpy-ordered at the API (`t.shape`); the C descriptor's `ne` is reversed (ne[0] is
the last numpy axis), as in GGUF. Every tensor belongs to one Graph; nodes are kept in creation
order, which is also execution order (so a set_rows into a state runs before ops created after it).
"""
import itertools
import numbers
from typing import ContextManager, Optional, Sequence, Union

import numpy as np

from . import _abi_consts as _abi
from .errors import GraphError, ShapeError, TypeMismatchError
from .types import DType, dtype as _dtype, f32

DTypeLike = Union[DType, str]

MAX_DIMS = _abi.MAX_DIMS
FLAG_INPUT, FLAG_OUTPUT = _abi.TENSOR_FLAG_INPUT, _abi.TENSOR_FLAG_OUTPUT
FLAG_WEIGHT, FLAG_STATE = _abi.TENSOR_FLAG_WEIGHT, _abi.TENSOR_FLAG_STATE

# Op ids of include/pyggml/ops.h, by name.
OP = {name: i for i, name in enumerate(_abi.OP_NAMES)}
OP_NAME = dict(enumerate(_abi.OP_NAMES))
VIEW_OPS = {OP["view"], OP["reshape"], OP["permute"], OP["transpose"]}

_graph_ids = itertools.count(1)


def contiguous_strides(t: DType, ne):
    nb0 = t.type_size
    nb1 = nb0 * (ne[0] // t.block_size)
    return (nb0, nb1, nb1 * ne[1], nb1 * ne[1] * ne[2])


INT64_MAX = 2**63 - 1


def as_int(v, what):
    """An int from an int or a numpy integer; floats, bools, strings are errors, not conversions."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
        raise TypeMismatchError(f"{what}: {v!r} is not an int ({type(v).__name__})")
    return int(v)


def ne_from_shape(shape, what="shape"):
    if isinstance(shape, numbers.Integral) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise TypeMismatchError(f"{what}: a shape is a tuple of ints, not {type(shape).__name__} {shape!r}")
    shape = tuple(as_int(s, f"{what} {tuple(shape)}") for s in shape)
    if not 1 <= len(shape) <= MAX_DIMS:
        raise ShapeError(f"{what} {shape}: pyggml tensors have 1 to {MAX_DIMS} dimensions")
    if any(s <= 0 for s in shape):
        raise ShapeError(f"{what} {shape}: every dimension must be >= 1")
    n = 1
    for s in shape:
        n *= s
    if n > INT64_MAX:
        raise ShapeError(f"{what} {shape}: {n} elements do not fit int64 (at most 2^63 - 1)")
    ne = tuple(reversed(shape)) + (1,) * (MAX_DIMS - len(shape))
    return ne, len(shape)


def _leaf_name(kind, name):
    if not isinstance(name, str) or not name:
        raise TypeMismatchError(f"{kind}: the name must be a non-empty str, not {name!r}")


class Tensor:
    """A node of a Graph: a leaf (input, weight, state) or the result of an op."""

    __slots__ = ("graph", "id", "type", "ne", "nb", "ndim", "op", "params", "src", "view_src",
                 "view_offs", "name", "flags", "data", "pin", "pin_soft", "__weakref__")

    def __init__(self, graph, type, ne, ndim, op=0, src=(), params=None, nb=None, view_src=None,
                 view_offs=0, name="", flags=0, data=None):
        self.graph = graph
        self.type = type
        self.ne = tuple(int(x) for x in ne)
        self.nb = tuple(int(x) for x in (nb or contiguous_strides(type, self.ne)))
        if max(self.nb) > INT64_MAX or self.ne[3] * self.nb[3] > INT64_MAX:
            raise ShapeError(f"{type.name}{list(reversed(self.ne[:ndim]))}: the tensor's bytes do not fit int64")
        self.ndim = ndim
        self.op = op
        self.src = tuple(src)
        self.params = list(params or [])
        self.view_src = view_src
        self.view_offs = int(view_offs)
        self.name = name
        self.flags = flags
        self.data = data
        self.pin = graph._pin           # device spec this tensor must live/run on (None: scheduler decides)
        self.pin_soft = graph._pin_soft  # True: a preference; a device that cannot compute it falls back
        self.id = graph._add(self)

    # --- numpy-facing views of the descriptor
    @property
    def shape(self):
        return tuple(reversed(self.ne[: self.ndim]))

    @property
    def strides(self):
        """Byte strides in numpy order (for block types, the row stride is per block)."""
        return tuple(reversed(self.nb[: self.ndim]))

    @property
    def dtype(self):
        return self.type

    @property
    def nelements(self):
        return self.ne[0] * self.ne[1] * self.ne[2] * self.ne[3]

    @property
    def nbytes(self):
        """Bytes spanned by the data (last byte + 1), honouring strides in any order (as
        pyg_tensor_nbytes in tensor.h)."""
        n = self.type.type_size + (self.ne[0] // self.type.block_size - 1) * self.nb[0]
        return n + sum((self.ne[i] - 1) * self.nb[i] for i in range(1, MAX_DIMS))

    @property
    def op_name(self):
        return OP_NAME[self.op]

    @property
    def is_view(self):
        return self.op in VIEW_OPS

    def is_contiguous(self):
        return self.nb == contiguous_strides(self.type, self.ne)

    def __repr__(self):
        kind = self.op_name if self.op else ("input" if self.flags & FLAG_INPUT else
                                             "weight" if self.flags & FLAG_WEIGHT else
                                             "state" if self.flags & FLAG_STATE else "leaf")
        nm = f" {self.name!r}" if self.name else ""
        return f"<Tensor{nm} {kind} {self.type.name}{list(self.shape)}>"

    # --- operator sugar
    def __add__(self, other):
        from . import ops
        return ops.add(self, other)

    def __mul__(self, other):
        from . import ops
        if isinstance(other, (int, float)):
            return ops.scale(self, float(other))
        return ops.mul(self, other)

    def __matmul__(self, other):
        """a @ b with numpy meaning: (.., N, K) @ (.., K, M) -> mul_mat(b^T as weights, a)."""
        from . import ops
        return ops.mul_mat(ops.cont(ops.transpose(other)), self)


class Graph:
    """A container of tensors. Build with input/weight/state and the op functions in pyggml."""

    def __init__(self, name=""):
        self.name = name
        self.uid = next(_graph_ids)
        self.tensors = []
        self.by_name = {}
        self.effects = []   # nodes that write persistent memory (set_rows, cpy into a state)
        self.version = 0    # bumped by every change; plans are keyed by it
        self._pin = None
        self._pin_soft = False

    def on(self, device: str, prefer: bool = False) -> ContextManager[None]:
        """Context manager: tensors created inside are pinned to `device` ("cuda:1"); use it
        around a range of layers to place them. `t.pin = "cpu"` pins one tensor. With
        prefer=True the pin is a preference: a node the device cannot compute goes where the
        scheduler's usual rules put it (the CPU fallback) instead of raising."""
        graph = self

        class _On:
            def __enter__(self_):
                self_.prev = graph._pin, graph._pin_soft
                graph._pin = None if device is None else str(device)
                graph._pin_soft = bool(prefer)
                return graph

            def __exit__(self_, *exc):
                graph._pin, graph._pin_soft = self_.prev
        return _On()

    def _add(self, t):
        if t.name:
            if t.name in self.by_name:
                raise GraphError(f"graph already has a tensor named {t.name!r}")
            self.by_name[t.name] = t
        self.tensors.append(t)
        self.version += 1
        return len(self.tensors) - 1

    def __getitem__(self, name):
        return self.by_name[name]

    def input(self, name: str, shape: Sequence[int], dtype: DTypeLike = f32) -> "Tensor":
        """A tensor whose data is fed to each compute (`feeds[name]`)."""
        _leaf_name("input", name)
        t = _dtype(dtype)
        if t.is_quantized:
            raise TypeMismatchError(f"input {name!r}: inputs must be plain types, not {t.name}")
        ne, ndim = ne_from_shape(shape, f"input {name!r}")
        return Tensor(self, t, ne, ndim, name=name, flags=FLAG_INPUT)

    def weight(self, name: str, data: np.ndarray, type: Optional[str] = None,
               shape: Optional[Sequence[int]] = None) -> "Tensor":
        """A constant tensor, uploaded to the device once and kept there.

        `data` is a numpy array (its dtype gives the type), or raw blocks (uint8) with `type`
        (e.g. "q4_K") and the logical `shape` (numpy order, last axis a multiple of the block)."""
        _leaf_name("weight", name)
        if type is None:
            arr = np.ascontiguousarray(data)
            t = _dtype(arr.dtype)
            ne, ndim = ne_from_shape(arr.shape, f"weight {name!r}")
            raw = arr
        else:
            t = _dtype(type)
            if shape is None:
                raise ShapeError(f"weight {name!r}: give the logical shape of the {t.name} data")
            ne, ndim = ne_from_shape(shape, f"weight {name!r}")
            if ne[0] % t.block_size:
                raise ShapeError(f"weight {name!r}: last axis {ne[0]} is not a multiple of "
                                 f"{t.name}'s block size {t.block_size}")
            raw = np.ascontiguousarray(data)
            need = t.row_bytes(ne[0]) * ne[1] * ne[2] * ne[3]
            if raw.nbytes != need:
                raise ShapeError(f"weight {name!r}: {t.name}{list(shape)} needs {need} bytes, "
                                 f"got {raw.nbytes} (array shape {raw.shape}, dtype {raw.dtype})")
            if t.np_dtype is not None and raw.dtype != t.np_dtype and raw.dtype != np.uint8:
                raise TypeMismatchError(f"weight {name!r}: data dtype {raw.dtype} does not match {t.name}")
        return Tensor(self, t, ne, ndim, name=name, flags=FLAG_WEIGHT, data=raw)

    def state(self, name: str, shape: Sequence[int], dtype: DTypeLike = f32,
              init: Optional[np.ndarray] = None) -> "Tensor":
        """A persistent tensor the graph may write (a KV cache). Zero-filled unless `init` is given;
        it keeps its contents across computes of the same Scheduler."""
        _leaf_name("state", name)
        t = _dtype(dtype)
        ne, ndim = ne_from_shape(shape, f"state {name!r}")
        data = None
        if init is not None:
            data = np.ascontiguousarray(init, dtype=t.np_dtype)
            if data.shape != tuple(shape):
                raise ShapeError(f"state {name!r}: init shape {data.shape} != {tuple(shape)}")
        return Tensor(self, t, ne, ndim, name=name, flags=FLAG_STATE, data=data)

    def constant(self, name: str, array: np.ndarray) -> "Tensor":
        """Alias of weight() for small constants (masks, tables)."""
        return self.weight(name, array)

    @property
    def inputs(self):
        return [t for t in self.tensors if t.flags & FLAG_INPUT]

    def __repr__(self):
        return f"<pyggml.Graph {self.name!r} {len(self.tensors)} tensors>"
