"""Element types of include/pyggml/types.h (ids are GGUF's), with their numpy dtypes."""
import numpy as np

from . import _abi_consts as _abi
from .errors import UnknownTypeError


class DType:
    """One element type. `block_size` elements take `type_size` bytes."""

    __slots__ = ("id", "name", "block_size", "type_size", "np_dtype")

    def __init__(self, id, name, block_size, type_size, np_dtype=None):
        self.id = id
        self.name = name
        self.block_size = block_size
        self.type_size = type_size
        self.np_dtype = None if np_dtype is None else np.dtype(np_dtype)

    @property
    def is_quantized(self):
        return self.block_size > 1

    def row_bytes(self, n):
        """Bytes taken by a contiguous row of n elements (n a multiple of block_size)."""
        return n // self.block_size * self.type_size

    def __repr__(self):
        return f"pyggml.{self.name}"

    def __reduce__(self):
        return (dtype, (self.name,))


# numpy's view of the plain types (bf16 and the block types have none)
_NUMPY = {"f32": np.float32, "f16": np.float16, "i8": np.int8, "i16": np.int16, "i32": np.int32,
          "i64": np.int64, "f64": np.float64}
BY_ID = {tid: DType(tid, name, bs, ts, _NUMPY.get(name)) for tid, (name, bs, ts, _q) in _abi.TYPE_TRAITS.items()}
BY_NAME = {t.name: t for t in BY_ID.values()}
BY_NAME.update({t.name.lower(): t for t in BY_ID.values()})
_NP = {t.np_dtype: t for t in BY_ID.values() if t.np_dtype is not None}


def dtype(x):
    """Resolve a DType from a DType, a name ("q4_K", case-insensitive), a type id or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        t = BY_NAME.get(x) or BY_NAME.get(x.lower())
        if t is None:
            raise UnknownTypeError(f"unknown type name {x!r}; known: {', '.join(sorted({t.name for t in BY_ID.values()}))}")
        return t
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        t = BY_ID.get(int(x))
        if t is None:
            raise UnknownTypeError(f"unknown type id {int(x)}")
        return t
    try:
        nd = np.dtype(x)
    except TypeError:
        raise UnknownTypeError(f"cannot interpret {x!r} as a pyggml type") from None
    t = _NP.get(nd)
    if t is None:
        raise UnknownTypeError(f"numpy dtype {nd} has no pyggml type")
    return t


globals().update({t.name: t for t in BY_ID.values()})
__all__ = ["DType", "dtype"] + [t.name for t in BY_ID.values()]
