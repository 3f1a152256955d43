"""GGUF's vocabulary: ggml tensor types (block sizes, byte sizes) and metadata value types.

Shared by the reader (pyggml.gguf) and the writer (pyggml.gguf_writer); ``pyggml.gguf`` re-exports
every public name, so user code imports from there."""


import enum
import struct
from typing import Any, Iterable, NamedTuple

import numpy as np

from . import _abi_consts as _abi

try:  # the package's exception tree, once it has one (the same class, never a twin)
    from .errors import GGUFError
except ImportError:  # pragma: no cover - only when gguf.py is used outside the package
    class GGUFError(ValueError):
        """A GGUF file (or a writer request) is malformed; the message says what and where."""




GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)          # v1 used 32-bit counts and is not read
GGUF_DEFAULT_ALIGNMENT = 32
GGUF_MAX_DIMS = 4
GGUF_MAX_NAME = 64              # ggml's name buffer: names must be shorter (63 bytes + NUL)
_MAX_ARRAY_DEPTH = 8            # nested arrays deeper than this are refused


# --------------------------------------------------------------------------- types

class GGMLType(NamedTuple):
    id: int
    name: str
    block_size: int     # elements per block (1 for plain types)
    type_size: int      # bytes per block
    quantized: bool
    in_abi: bool        # listed in include/pyggml/types.h (pyggml can compute with it)


def _t(id_, name, bs, ts, q, abi=True):
    return id_, GGMLType(id_, name, bs, ts, q, abi)


# The type table: the in_abi entries come from include/pyggml/types.h (through the generated
# _abi_consts; tests/test_gguf.py checks them against the gguf package's table). The other ggml
# ids are known only so that files holding them can still be parsed and reported; pyggml cannot
# compute with them.
GGML_TYPES: dict[int, GGMLType] = dict(sorted([
    *((tid, GGMLType(tid, name, bs, ts, bool(q), True)) for tid, (name, bs, ts, q) in _abi.TYPE_TRAITS.items()),
    _t(16, "iq2_xxs", 256, 66, True, False), _t(17, "iq2_xs", 256, 74, True, False),
    _t(18, "iq3_xxs", 256, 98, True, False), _t(19, "iq1_s", 256, 50, True, False),
    _t(20, "iq4_nl", 32, 18, True, False), _t(21, "iq3_s", 256, 110, True, False),
    _t(22, "iq2_s", 256, 82, True, False), _t(23, "iq4_xs", 256, 136, True, False),
    _t(29, "iq1_m", 256, 56, True, False),
    _t(34, "tq1_0", 256, 54, True, False), _t(35, "tq2_0", 256, 66, True, False),
    _t(39, "mxfp4", 32, 17, True, False),
]))
GGML_TYPE_IDS: dict[str, int] = {t.name: t.id for t in GGML_TYPES.values()}

# numpy dtype of the plain types (bf16 has none in numpy: its data is shown as uint16)
_PLAIN_DTYPES = {_abi.TYPE_F32: "<f4", _abi.TYPE_F16: "<f2", _abi.TYPE_I8: "i1", _abi.TYPE_I16: "<i2",
                 _abi.TYPE_I32: "<i4", _abi.TYPE_I64: "<i8", _abi.TYPE_F64: "<f8", _abi.TYPE_BF16: "<u2"}
_DTYPE_TO_TYPE = {np.dtype(v): k for k, v in _PLAIN_DTYPES.items() if k != _abi.TYPE_BF16}


def ggml_type(t: int | str) -> GGMLType:
    """The GGMLType for an id or a name ("q4_K", case as in GGUF tools; "Q4_K" accepted too)."""
    if isinstance(t, GGMLType):
        return t
    if isinstance(t, (int, np.integer)) and not isinstance(t, bool):
        if int(t) in GGML_TYPES:
            return GGML_TYPES[int(t)]
        raise GGUFError(f"unknown ggml type id {int(t)}")
    if isinstance(t, str):
        if t in GGML_TYPE_IDS:
            return GGML_TYPES[GGML_TYPE_IDS[t]]
        low = {k.lower(): v for k, v in GGML_TYPE_IDS.items()}
        if t.lower() in low:
            return GGML_TYPES[low[t.lower()]]
        raise GGUFError(f"unknown ggml type name {t!r}")
    raise GGUFError(f"a ggml type is an id or a name, not {type(t).__name__}")


def row_nbytes(t: int | str, ne0: int) -> int:
    """Bytes taken by one row of ne0 elements (ne0 must be a multiple of the block size)."""
    tt = ggml_type(t)
    if ne0 % tt.block_size:
        raise GGUFError(f"row of {ne0} elements is not a multiple of {tt.name}'s block size "
                        f"{tt.block_size}")
    return ne0 // tt.block_size * tt.type_size


def tensor_nbytes(t: int | str, shape: Iterable[int]) -> int:
    """Bytes of a contiguous tensor of numpy `shape` (last axis = ggml ne[0])."""
    shape = tuple(int(s) for s in shape)
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows * row_nbytes(t, shape[-1] if shape else 1)


# --------------------------------------------------------------------------- value types

class GGUFValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


_VT = GGUFValueType
_SCALAR_FMT = {_VT.UINT8: "<B", _VT.INT8: "<b", _VT.UINT16: "<H", _VT.INT16: "<h",
               _VT.UINT32: "<I", _VT.INT32: "<i", _VT.FLOAT32: "<f", _VT.BOOL: "<B",
               _VT.UINT64: "<Q", _VT.INT64: "<q", _VT.FLOAT64: "<d"}
_SCALAR_DTYPE = {_VT.UINT8: "u1", _VT.INT8: "i1", _VT.UINT16: "<u2", _VT.INT16: "<i2",
                 _VT.UINT32: "<u4", _VT.INT32: "<i4", _VT.FLOAT32: "<f4", _VT.BOOL: "u1",
                 _VT.UINT64: "<u8", _VT.INT64: "<i8", _VT.FLOAT64: "<f8"}
_SCALAR_SIZE = {k: struct.calcsize(v) for k, v in _SCALAR_FMT.items()}
_INT_RANGE = {_VT.UINT8: (0, 2**8 - 1), _VT.INT8: (-2**7, 2**7 - 1),
              _VT.UINT16: (0, 2**16 - 1), _VT.INT16: (-2**15, 2**15 - 1),
              _VT.UINT32: (0, 2**32 - 1), _VT.INT32: (-2**31, 2**31 - 1),
              _VT.UINT64: (0, 2**64 - 1), _VT.INT64: (-2**63, 2**63 - 1)}
# smallest encoding of one element, for "can the file even hold this many" checks
_MIN_SIZE = {**_SCALAR_SIZE, _VT.STRING: 8, _VT.ARRAY: 12}


class GGUFField(NamedTuple):
    """One metadata entry. `value` is a Python scalar or str; arrays of numbers are numpy arrays
    (owned copies), arrays of strings are lists of str, arrays of arrays are lists."""
    key: str
    type: GGUFValueType
    value: Any
    elem_type: GGUFValueType | None = None   # for ARRAY: the element type
    offset: int = 0                          # byte offset of the entry in the file

