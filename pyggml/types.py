"""Element types: the Python mirror of include/pyggml/types.h (ids are GGUF's)."""
import numpy as np

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


_TABLE = [
    (0, "f32", 1, 4, np.float32), (1, "f16", 1, 2, np.float16),
    (2, "q4_0", 32, 18, None), (3, "q4_1", 32, 20, None), (6, "q5_0", 32, 22, None),
    (7, "q5_1", 32, 24, None), (8, "q8_0", 32, 34, None), (9, "q8_1", 32, 36, None),
    (10, "q2_K", 256, 84, None), (11, "q3_K", 256, 110, None), (12, "q4_K", 256, 144, None),
    (13, "q5_K", 256, 176, None), (14, "q6_K", 256, 210, None), (15, "q8_K", 256, 292, None),
    (24, "i8", 1, 1, np.int8), (25, "i16", 1, 2, np.int16), (26, "i32", 1, 4, np.int32),
    (27, "i64", 1, 8, np.int64), (28, "f64", 1, 8, np.float64), (30, "bf16", 1, 2, None),
]
BY_ID = {row[0]: DType(*row) for row in _TABLE}
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
