"""GGUF files: a validating, memory-mapping reader and a streaming, atomic writer.

Format (GGUF v2/v3, little-endian): a header (magic "GGUF", version u32, n_tensors u64,
n_kv u64), n_kv metadata entries (key string, value type u32, value), n_tensors tensor infos
(name string, n_dims u32, dims u64[n_dims] in ggml "ne" order, type u32, offset u64 relative to
the data section), padding to the alignment (metadata key general.alignment, default 32), then
the data section where every tensor starts at an aligned offset.

The reader checks every count, length and offset against the file size before it allocates or
slices anything, so a malformed or truncated file raises GGUFError with a message naming what is
wrong and where, never another exception and never a crash. Tensor data is never copied: each
tensor's ``data`` is a numpy view into one read-only mmap of the file.

Shapes are given in numpy order everywhere in this module (``shape``); ``ne`` is the reversed,
ggml order stored in the file.
"""

from __future__ import annotations

import enum
import mmap
import os
import re
import signal
import struct
import sys
import tempfile
import threading
from typing import Any, Callable, Iterable, NamedTuple

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


# --------------------------------------------------------------------------- reader

class _Cursor:
    """Bounds-checked little-endian reads from a buffer; every overrun is a GGUFError."""

    __slots__ = ("buf", "pos", "end", "section")

    def __init__(self, buf, end: int):
        self.buf, self.pos, self.end, self.section = buf, 0, end, "header"

    def need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise GGUFError(f"truncated file: {what} in the {self.section} at offset {pos} needs "
                            f"{n} bytes but the file ends at {self.end}")
        self.pos = pos + n
        return pos

    def scalar(self, vt: GGUFValueType, what: str):
        pos = self.need(_SCALAR_SIZE[vt], what)
        v = struct.unpack_from(_SCALAR_FMT[vt], self.buf, pos)[0]
        return bool(v) if vt == _VT.BOOL else v

    def u32(self, what: str) -> int:
        pos = self.need(4, what)
        return struct.unpack_from("<I", self.buf, pos)[0]

    def u64(self, what: str) -> int:
        pos = self.need(8, what)
        return struct.unpack_from("<Q", self.buf, pos)[0]

    def raw_string(self, what: str) -> bytes:
        start = self.pos
        n = self.u64(f"length of {what}")
        if n > self.end - self.pos:
            raise GGUFError(f"string too long: {what} at offset {start} claims {n} bytes but only "
                            f"{self.end - self.pos} bytes remain in the file")
        pos = self.need(n, what)
        return bytes(self.buf[pos:pos + n])

    def name(self, what: str) -> str:
        start = self.pos
        raw = self.raw_string(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} at offset {start} is not valid UTF-8: {raw[:40]!r}") from None


def _decode_value(raw: bytes) -> str:
    # Values keep undecodable bytes (some vocabularies hold them) as surrogate escapes, which the
    # writer turns back into the same bytes.
    return raw.decode("utf-8", errors="surrogateescape")


class GGUFTensor:
    """A tensor info plus a zero-copy view of its bytes in the reader's mmap."""

    __slots__ = ("name", "shape", "type", "offset", "file_offset", "nbytes", "n_elements",
                 "_reader")

    def __init__(self, reader, name, shape, type_, offset, file_offset, nbytes, n_elements):
        self.name = name
        self.shape = shape              # numpy order
        self.type = type_               # GGMLType
        self.offset = offset            # relative to the data section, as stored
        self.file_offset = file_offset  # absolute position in the file
        self.nbytes = nbytes
        self.n_elements = n_elements
        self._reader = reader

    @property
    def ne(self) -> tuple[int, ...]:
        """Dims in ggml order (ne[0] = last numpy axis), as stored in the file."""
        return tuple(reversed(self.shape))

    @property
    def type_id(self) -> int:
        return self.type.id

    @property
    def type_name(self) -> str:
        return self.type.name

    @property
    def raw(self) -> np.ndarray:
        """The tensor's bytes as a flat read-only uint8 view into the mmap."""
        return np.frombuffer(self._reader._buffer(), np.uint8, self.nbytes, self.file_offset)

    @property
    def data(self) -> np.ndarray:
        """Read-only view into the mmap: typed with `shape` for plain types (bf16 as uint16);
        for block types uint8 of shape shape[:-1] + (bytes per row,)."""
        t = self.type
        buf = self._reader._buffer()
        if t.id in _PLAIN_DTYPES:
            a = np.frombuffer(buf, _PLAIN_DTYPES[t.id], self.n_elements, self.file_offset)
            return a.reshape(self.shape)
        a = np.frombuffer(buf, np.uint8, self.nbytes, self.file_offset)
        row = self.shape[-1] // t.block_size * t.type_size if self.shape else t.type_size
        return a.reshape(tuple(self.shape[:-1]) + (row,))

    def __repr__(self):
        return (f"GGUFTensor({self.name!r}, shape={self.shape}, type={self.type.name}, "
                f"offset={self.offset}, nbytes={self.nbytes})")


class GGUFReader:
    """Parse and validate a GGUF v2/v3 file; tensor data stays in one read-only mmap.

    Attributes: path, file_size, version, alignment, data_offset (absolute start of the data
    section), fields (dict key -> GGUFField, file order), metadata (dict key -> value),
    tensors (list of GGUFTensor, file order). Use as a context manager or call close().
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._mm = None
        with open(self.path, "rb") as f:
            self.file_size = os.fstat(f.fileno()).st_size
            if self.file_size == 0:
                raise GGUFError(f"{self.path}: truncated file: it is empty (no GGUF header)")
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            self._parse()
        except GGUFError as e:
            self.close()
            raise GGUFError(f"{self.path}: {e}") from None
        except BaseException:
            self.close()
            raise

    # -- lifetime

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Release the mapping. Views handed out keep it alive until they are dropped."""
        mm, self._mm = self._mm, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:
                pass  # numpy views still point into it; it is unmapped when they are gone

    def _buffer(self):
        if self._mm is None:
            raise GGUFError(f"{self.path}: reader is closed")
        return self._mm

    # -- lookup

    def tensor(self, name: str) -> GGUFTensor:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"{self.path}: no tensor named {name!r}") from None

    def get(self, key: str, default=None):
        f = self.fields.get(key)
        return default if f is None else f.value

    def __repr__(self):
        return (f"GGUFReader({self.path!r}, v{self.version}, {len(self.fields)} kv, "
                f"{len(self.tensors)} tensors)")

    # -- parsing

    def _parse(self) -> None:
        cur = _Cursor(self._mm, self.file_size)
        magic = bytes(self._mm[:4])
        if len(magic) < 4 or magic != GGUF_MAGIC:
            if len(magic) < 4 and GGUF_MAGIC.startswith(magic):
                raise GGUFError(f"truncated file: header needs 24 bytes, file has {self.file_size}")
            raise GGUFError(f"wrong magic {magic!r}: not a GGUF file (expected {GGUF_MAGIC!r})")
        cur.pos = 4
        version = cur.u32("version")
        if version not in GGUF_VERSIONS:
            swapped = struct.unpack("<I", struct.pack(">I", version))[0]
            if swapped in GGUF_VERSIONS:
                raise GGUFError(f"big-endian GGUF (version {swapped}) is not supported")
            raise GGUFError(f"unsupported GGUF version {version} (supported: "
                            f"{', '.join(map(str, GGUF_VERSIONS))})")
        self.version = version
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # Each entry takes at least a few bytes, so counts beyond what the remaining bytes could
        # hold are refused before any list is built.
        room = self.file_size - cur.pos
        if n_kv * 13 > room:
            raise GGUFError(f"absurd metadata count {n_kv}: the {room} bytes after the header "
                            f"cannot hold that many entries (corrupt or truncated file)")
        if n_tensors * 24 + n_kv * 13 > room:
            raise GGUFError(f"absurd tensor count {n_tensors}: the {room} bytes after the "
                            f"header cannot hold that many tensor infos and {n_kv} metadata "
                            f"entries (corrupt or truncated file)")

        cur.section = "metadata"
        fields: dict[str, GGUFField] = {}
        for i in range(n_kv):
            start = cur.pos
            key = cur.name(f"key of metadata entry {i}")
            if key in fields:
                raise GGUFError(f"duplicate metadata key {key!r} at offset {start}")
            vt = self._value_type(cur, f"type of metadata {key!r}")
            if vt == _VT.ARRAY:
                et, value = self._array(cur, key, 0)
            else:
                et, value = None, self._scalar_value(cur, vt, key)
            fields[key] = GGUFField(key, vt, value, et, start)
        self.fields = fields
        self.metadata = {k: f.value for k, f in fields.items()}

        align_field = fields.get("general.alignment")
        alignment = GGUF_DEFAULT_ALIGNMENT
        if align_field is not None:
            if align_field.type != _VT.UINT32:
                raise GGUFError(f"general.alignment must be uint32, not {align_field.type.name}")
            alignment = align_field.value
            if alignment == 0 or alignment & (alignment - 1):
                raise GGUFError(f"general.alignment {alignment} is not a power of two")
        self.alignment = alignment

        cur.section = "tensor infos"
        infos = []
        seen = set()
        for i in range(n_tensors):
            name = cur.name(f"name of tensor {i}")
            if len(name.encode("utf-8")) >= GGUF_MAX_NAME:
                raise GGUFError(f"tensor name {name[:80]!r} is {len(name.encode())} bytes; "
                                f"ggml allows at most {GGUF_MAX_NAME - 1}")
            if name in seen:
                raise GGUFError(f"duplicate tensor name {name!r}")
            seen.add(name)
            n_dims = cur.u32(f"n_dims of tensor {name!r}")
            if n_dims > GGUF_MAX_DIMS:
                raise GGUFError(f"tensor {name!r} has {n_dims} dims; at most {GGUF_MAX_DIMS} "
                                f"are allowed")
            pos = cur.need(8 * n_dims, f"dims of tensor {name!r}")
            ne = struct.unpack_from(f"<{n_dims}q", self._mm, pos)
            n_el = 1
            for d in ne:
                if d <= 0:
                    raise GGUFError(f"tensor {name!r} has dim {d} (dims {list(ne)}); every dim "
                                    f"must be >= 1")
                n_el *= d
                if n_el > 2**63 - 1:
                    raise GGUFError(f"tensor {name!r} dims {list(ne)}: element count overflows "
                                    f"int64")
            tid = cur.u32(f"type of tensor {name!r}")
            if tid not in GGML_TYPES:
                raise GGUFError(f"tensor {name!r} has unknown type id {tid}")
            tt = GGML_TYPES[tid]
            ne0 = ne[0] if ne else 1
            if ne0 % tt.block_size:
                raise GGUFError(f"tensor {name!r}: row length {ne0} is not a multiple of "
                                f"{tt.name}'s block size {tt.block_size}")
            offset = cur.u64(f"offset of tensor {name!r}")
            if offset % alignment:
                raise GGUFError(f"tensor {name!r} offset {offset} is misaligned (alignment "
                                f"{alignment})")
            nbytes = n_el // tt.block_size * tt.type_size
            infos.append((name, tuple(reversed(ne)), tt, offset, nbytes, n_el))

        data_offset = -(-cur.pos // alignment) * alignment
        self.data_offset = data_offset
        tensors = []
        for name, shape, tt, offset, nbytes, n_el in infos:
            start = data_offset + offset
            if start + nbytes > self.file_size:
                raise GGUFError(f"tensor {name!r} data [{start}, {start + nbytes}) runs past the "
                                f"end of the file ({self.file_size} bytes): truncated data or "
                                f"bad offset/size")
            tensors.append(GGUFTensor(self, name, shape, tt, offset, start, nbytes, n_el))
        # Two tensors sharing bytes would alias each other's weights (ggml refuses such files)
        by_start = sorted(tensors, key=lambda t: t.offset)
        for a, b in zip(by_start, by_start[1:]):
            if b.offset < a.offset + a.nbytes:
                raise GGUFError(f"tensor {b.name!r} data at offset {b.offset} overlaps tensor "
                                f"{a.name!r} [{a.offset}, {a.offset + a.nbytes})")
        self.tensors = tensors
        self._by_name = {t.name: t for t in tensors}

    @staticmethod
    def _value_type(cur: _Cursor, what: str) -> GGUFValueType:
        pos = cur.pos
        v = cur.u32(what)
        try:
            return GGUFValueType(v)
        except ValueError:
            raise GGUFError(f"unknown value type {v} for {what} at offset {pos}") from None

    def _scalar_value(self, cur: _Cursor, vt: GGUFValueType, key: str):
        if vt == _VT.STRING:
            return _decode_value(cur.raw_string(f"string value of {key!r}"))
        return cur.scalar(vt, f"value of {key!r}")

    def _array(self, cur: _Cursor, key: str, depth: int):
        if depth >= _MAX_ARRAY_DEPTH:
            raise GGUFError(f"metadata {key!r}: arrays nested deeper than {_MAX_ARRAY_DEPTH}")
        et = self._value_type(cur, f"element type of array {key!r}")
        start = cur.pos
        n = cur.u64(f"length of array {key!r}")
        remaining = cur.end - cur.pos
        if n * _MIN_SIZE[et] > remaining:
            raise GGUFError(f"truncated file or absurd length: array {key!r} at offset {start} "
                            f"claims {n} {et.name} elements but only {remaining} bytes remain")
        if et in _SCALAR_DTYPE:
            size = _SCALAR_SIZE[et]
            pos = cur.need(n * size, f"data of array {key!r}")
            arr = np.frombuffer(self._mm, _SCALAR_DTYPE[et], n, pos).copy()
            return et, arr.astype(bool) if et == _VT.BOOL else arr
        if et == _VT.STRING:
            return et, self._string_array(cur, key, n)
        out = []
        for _ in range(n):
            out.append(self._array(cur, key, depth + 1)[1])
        return et, out

    def _string_array(self, cur: _Cursor, key: str, n: int) -> list[str]:
        # The hot loop of metadata parsing (32k-256k vocab strings): plain locals, no calls
        # beyond unpack and slicing; bounds checked per string.
        buf, end, pos = self._mm, cur.end, cur.pos
        unpack = struct.Struct("<Q").unpack_from
        out = [None] * n
        for i in range(n):
            if pos + 8 > end:
                cur.pos = pos
                cur.need(8, f"length of string {i} of array {key!r}")
            ln = unpack(buf, pos)[0]
            pos += 8
            if ln > end - pos:
                raise GGUFError(f"string too long: string {i} of array {key!r} at offset "
                                f"{pos - 8} claims {ln} bytes but only {end - pos} remain")
            out[i] = buf[pos:pos + ln].decode("utf-8", errors="surrogateescape")
            pos += ln
        cur.pos = pos
        return out


# --------------------------------------------------------------------------- writer

def _encode_str(s: str | bytes) -> bytes:
    b = s if isinstance(s, bytes) else s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(b)) + b


class _PendingTensor(NamedTuple):
    name: str
    shape: tuple
    type: GGMLType
    nbytes: int
    data: Any            # ndarray, or a callable returning an ndarray or an iterable of them


class GGUFWriter:
    """Build a GGUF file: add metadata and tensors, then write() (or leave a `with` block).

    Tensor data may be given as a numpy array or as a zero-argument callable that returns an
    array or an iterable of array chunks (their bytes concatenated in order); callables run one
    at a time during write(), so a model never has to be in memory at once. The file is written
    to a temporary file beside `path` and renamed over it only when complete.
    """

    def __init__(self, path: str | os.PathLike, alignment: int = GGUF_DEFAULT_ALIGNMENT,
                 version: int = 3):
        if version not in GGUF_VERSIONS:
            raise GGUFError(f"cannot write GGUF version {version}")
        if alignment <= 0 or alignment & (alignment - 1):
            raise GGUFError(f"alignment {alignment} is not a power of two")
        self.path = os.fspath(path)
        self.version = version
        self.alignment = alignment
        self._kv: dict[str, bytes] = {}
        self._tensors: dict[str, _PendingTensor] = {}
        self._written = False
        if alignment != GGUF_DEFAULT_ALIGNMENT:
            self.add_uint32("general.alignment", alignment)

    # -- metadata

    def add(self, key: str, value: Any, type: GGUFValueType | str | None = None,
            elem_type: GGUFValueType | str | None = None) -> None:
        """Add one entry. Without `type` it is inferred: bool -> BOOL, int -> INT32 (INT64 if
        out of range), float -> FLOAT32, str -> STRING, numpy scalar/array -> its dtype, list ->
        ARRAY of the inferred element type. Give `type`/`elem_type` to pin it."""
        if not isinstance(key, str) or not key:
            raise GGUFError(f"metadata key must be a non-empty str, not {key!r}")
        if key in self._kv:
            raise GGUFError(f"duplicate metadata key {key!r}")
        vt = _as_vt(type) if type is not None else _infer_vt(value)
        et = _as_vt(elem_type) if elem_type is not None else None
        if key == "general.alignment" and (vt != _VT.UINT32 or value != self.alignment):
            raise GGUFError("general.alignment is set through GGUFWriter(alignment=...)")
        self._kv[key] = (_encode_str(key) + struct.pack("<I", vt)
                         + _encode_value(vt, value, et, key))

    def add_uint8(self, key, v): self.add(key, v, _VT.UINT8)
    def add_int8(self, key, v): self.add(key, v, _VT.INT8)
    def add_uint16(self, key, v): self.add(key, v, _VT.UINT16)
    def add_int16(self, key, v): self.add(key, v, _VT.INT16)
    def add_uint32(self, key, v): self.add(key, v, _VT.UINT32)
    def add_int32(self, key, v): self.add(key, v, _VT.INT32)
    def add_float32(self, key, v): self.add(key, v, _VT.FLOAT32)
    def add_uint64(self, key, v): self.add(key, v, _VT.UINT64)
    def add_int64(self, key, v): self.add(key, v, _VT.INT64)
    def add_float64(self, key, v): self.add(key, v, _VT.FLOAT64)
    def add_bool(self, key, v): self.add(key, v, _VT.BOOL)
    def add_string(self, key, v): self.add(key, v, _VT.STRING)

    def add_array(self, key, values, elem_type: GGUFValueType | str | None = None):
        self.add(key, values, _VT.ARRAY, elem_type)

    # -- tensors

    def add_tensor(self, name: str, data: Any, type: int | str | None = None,
                   shape: Iterable[int] | None = None) -> None:
        """Add a tensor. `data`: a numpy array (f32/f16/f64/i8..i64 infer their type; quantized
        data is uint8 blocks with `type` and the logical numpy `shape` given), or a callable
        producing such an array or an iterable of chunks (then `type` and `shape` are required)."""
        if not isinstance(name, str) or not name:
            raise GGUFError(f"tensor name must be a non-empty str, not {name!r}")
        if len(name.encode("utf-8")) >= GGUF_MAX_NAME:
            raise GGUFError(f"tensor name {name!r} is too long (ggml allows {GGUF_MAX_NAME - 1} "
                            f"bytes)")
        if name in self._tensors:
            raise GGUFError(f"duplicate tensor name {name!r}")
        if callable(data):
            if type is None or shape is None:
                raise GGUFError(f"tensor {name!r}: a data producer needs type= and shape=")
            tt = ggml_type(type)
        else:
            data = np.asarray(data)
            if type is None:
                if data.dtype not in _DTYPE_TO_TYPE:
                    raise GGUFError(f"tensor {name!r}: cannot infer a ggml type from dtype "
                                    f"{data.dtype}; pass type=")
                tt = GGML_TYPES[_DTYPE_TO_TYPE[data.dtype]]
            else:
                tt = ggml_type(type)
            if shape is None:
                if tt.block_size != 1:
                    raise GGUFError(f"tensor {name!r}: {tt.name} data needs shape= (the logical "
                                    f"numpy shape)")
                shape = data.shape
        shape = tuple(int(s) for s in shape)
        if len(shape) > GGUF_MAX_DIMS or any(s <= 0 for s in shape):
            raise GGUFError(f"tensor {name!r}: bad shape {shape} (1..{GGUF_MAX_DIMS} dims >= 1)")
        try:
            nbytes = tensor_nbytes(tt, shape)
        except GGUFError as e:
            raise GGUFError(f"tensor {name!r}: {e}") from None
        if not callable(data) and data.nbytes != nbytes:
            raise GGUFError(f"tensor {name!r}: {data.nbytes} bytes of data, but {tt.name} "
                            f"{shape} takes {nbytes}")
        self._tensors[name] = _PendingTensor(name, shape, tt, nbytes, data)

    # -- output

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and not self._written:
            self.write()

    def total_bytes(self) -> int:
        """Size of the file write() will produce."""
        return self._data_start() + self._data_size()

    def _infos(self) -> list[bytes]:
        out, off = [], 0
        for t in self._tensors.values():
            ne = tuple(reversed(t.shape)) or (1,)
            out.append(_encode_str(t.name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne,
                                                         t.type.id, off))
            off += -(-t.nbytes // self.alignment) * self.alignment
        return out

    def _header(self) -> bytes:
        return struct.pack("<4sIQQ", GGUF_MAGIC, self.version, len(self._tensors), len(self._kv))

    def _data_start(self) -> int:
        n = len(self._header()) + sum(map(len, self._kv.values())) + sum(map(len, self._infos()))
        return -(-n // self.alignment) * self.alignment

    def _data_size(self) -> int:
        a = self.alignment
        return sum(-(-t.nbytes // a) * a for t in self._tensors.values())

    def write(self, progress: Callable[[int, int, str], None] | None = None) -> None:
        """Write the file. `progress(done_bytes, total_bytes, tensor_name)` is called after each
        tensor (and chunk). On any failure the temporary file is removed and `path` untouched.

        The temporary file is `.NAME.PID.XXXXXXXX.tmp` beside `path`. SIGTERM during the write
        removes it before the process ends (when the write runs on the main thread and SIGTERM
        has its default action); one left behind by a killed writer (kill -9, power loss) is
        removed by the next write of the same path, once that PID no longer runs."""
        if self._written:
            raise GGUFError(f"{self.path}: already written")
        d = os.path.dirname(os.path.abspath(self.path))
        base = os.path.basename(self.path)
        _remove_stale_temps(d, base)
        fd, tmp = tempfile.mkstemp(prefix=f".{base}.{os.getpid()}.", suffix=".tmp", dir=d)
        term = _TermGuard()
        try:
            with term:
                with os.fdopen(fd, "wb") as f:
                    self._write_to(f, progress)
                    f.flush()
                    os.fsync(f.fileno())
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o666 & ~umask)
                os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            term.redeliver()
            raise
        self._written = True
        self._tensors.clear()     # drop references to the data


    def _write_to(self, f, progress) -> None:
        head = self._header() + b"".join(self._kv.values()) + b"".join(self._infos())
        f.write(head)
        pos = len(head)
        pad = -pos % self.alignment
        f.write(b"\0" * pad)
        pos += pad
        total = pos + self._data_size()
        for t in self._tensors.values():
            data = t.data() if callable(t.data) else t.data
            chunks = (data,) if isinstance(data, np.ndarray) else data
            written = 0
            for c in chunks:
                c = np.ascontiguousarray(c)
                if written + c.nbytes > t.nbytes:
                    raise GGUFError(f"tensor {t.name!r}: producer gave more than the "
                                    f"{t.nbytes} bytes of {t.type.name} {t.shape}")
                f.write(memoryview(c.reshape(-1)).cast("B"))
                written += c.nbytes
                if progress is not None:
                    progress(pos + written, total, t.name)
            if written != t.nbytes:
                raise GGUFError(f"tensor {t.name!r}: producer gave {written} bytes, "
                                f"{t.type.name} {t.shape} takes {t.nbytes}")
            pad = -t.nbytes % self.alignment
            f.write(b"\0" * pad)
            pos += t.nbytes + pad


class _Terminated(BaseException):
    """SIGTERM arrived during a GGUF write (raised by _TermGuard's handler)."""


class _TermGuard:
    """While active on the main thread, turn SIGTERM (default action: die on the spot) into an
    exception, so that write() removes its temporary file; redeliver() then ends the process by
    SIGTERM as it would have. A handler the program installed itself is left alone."""

    def __init__(self):
        self.prev = None
        self.hit = False

    def __enter__(self):
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            self.prev = signal.signal(signal.SIGTERM, self._on_term)
        return self

    def _on_term(self, signum, frame):
        self.hit = True
        raise _Terminated("SIGTERM during a GGUF write")

    def __exit__(self, *exc):
        if self.prev is not None:
            signal.signal(signal.SIGTERM, self.prev)
            self.prev = None

    def redeliver(self):
        if self.hit:
            os.kill(os.getpid(), signal.SIGTERM)


def _remove_stale_temps(d: str, base: str) -> None:
    """Remove `.BASE.PID.*.tmp` files in `d` that this user owns and whose writer PID is gone."""
    pat = re.compile(r"\." + re.escape(base) + r"\.(\d+)\.[A-Za-z0-9_]+\.tmp")
    try:
        names = os.listdir(d)
    except OSError:
        return
    for name in names:
        m = pat.fullmatch(name)
        if m is None:
            continue
        path = os.path.join(d, name)
        try:
            if os.lstat(path).st_uid != os.getuid() or _pid_alive(int(m.group(1))):
                continue
            os.unlink(path)
        except OSError:
            pass


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return pid > 0          # exists, but not ours (or absurd): leave its file alone
    return True


def _as_vt(t) -> GGUFValueType:
    if isinstance(t, GGUFValueType):
        return t
    if isinstance(t, str):
        try:
            return GGUFValueType[t.upper()]
        except KeyError:
            raise GGUFError(f"unknown GGUF value type {t!r}") from None
    try:
        return GGUFValueType(int(t))
    except (ValueError, TypeError):
        raise GGUFError(f"unknown GGUF value type {t!r}") from None


_NP_KIND_TO_VT = {np.dtype("u1"): _VT.UINT8, np.dtype("i1"): _VT.INT8,
                  np.dtype("u2"): _VT.UINT16, np.dtype("i2"): _VT.INT16,
                  np.dtype("u4"): _VT.UINT32, np.dtype("i4"): _VT.INT32,
                  np.dtype("f4"): _VT.FLOAT32, np.dtype("bool"): _VT.BOOL,
                  np.dtype("u8"): _VT.UINT64, np.dtype("i8"): _VT.INT64,
                  np.dtype("f8"): _VT.FLOAT64}


def _infer_vt(v) -> GGUFValueType:
    if isinstance(v, (bool, np.bool_)):
        return _VT.BOOL
    if isinstance(v, np.generic) and v.dtype in _NP_KIND_TO_VT:
        return _NP_KIND_TO_VT[v.dtype]
    if isinstance(v, int):
        return _VT.INT32 if -2**31 <= v < 2**31 else _VT.INT64
    if isinstance(v, float):
        return _VT.FLOAT32
    if isinstance(v, (str, bytes)):
        return _VT.STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return _VT.ARRAY
    raise GGUFError(f"cannot infer a GGUF value type for {type(v).__name__}")


def _encode_value(vt: GGUFValueType, v, et, key) -> bytes:
    if vt == _VT.STRING:
        if not isinstance(v, (str, bytes)):
            raise GGUFError(f"metadata {key!r}: STRING value must be str, not {type(v).__name__}")
        return _encode_str(v)
    if vt == _VT.ARRAY:
        return _encode_array(v, et, key)
    return _encode_scalar(vt, v, key)


def _encode_scalar(vt, v, key) -> bytes:
    if vt in _INT_RANGE:
        if isinstance(v, (float, np.floating)) or not isinstance(v, (int, np.integer)):
            raise GGUFError(f"metadata {key!r}: {vt.name} value must be an int, not {v!r}")
        lo, hi = _INT_RANGE[vt]
        if not lo <= int(v) <= hi:
            raise GGUFError(f"metadata {key!r}: {v} does not fit {vt.name}")
        return struct.pack(_SCALAR_FMT[vt], int(v))
    if vt == _VT.BOOL:
        return struct.pack("<B", 1 if v else 0)
    try:
        return struct.pack(_SCALAR_FMT[vt], float(v))
    except (TypeError, ValueError):
        raise GGUFError(f"metadata {key!r}: {vt.name} value must be a number, not {v!r}") from None


def _encode_array(values, et, key) -> bytes:
    if isinstance(values, np.ndarray):
        if et is None:
            if values.dtype not in _NP_KIND_TO_VT:
                raise GGUFError(f"metadata {key!r}: no GGUF type for array dtype {values.dtype}")
            et = _NP_KIND_TO_VT[values.dtype]
        values = values.reshape(-1)
    else:
        values = list(values)
        if et is None:
            if not values:
                raise GGUFError(f"metadata {key!r}: empty list needs elem_type=")
            kinds = {_infer_vt(x) for x in values}
            if kinds == {_VT.INT32, _VT.INT64}:
                kinds = {_VT.INT64}
            if len(kinds) != 1:
                raise GGUFError(f"metadata {key!r}: mixed element types "
                                f"{sorted(k.name for k in kinds)}; pass elem_type=")
            et = kinds.pop()
    head = struct.pack("<IQ", et, len(values))
    if et == _VT.STRING:
        parts = []
        for x in values:
            if not isinstance(x, (str, bytes)):
                raise GGUFError(f"metadata {key!r}: STRING array holds {type(x).__name__}")
            parts.append(_encode_str(x))
        return head + b"".join(parts)
    if et == _VT.ARRAY:
        # empty inner lists take the element type of their first non-empty sibling
        enc = [None if (not isinstance(x, np.ndarray) and len(x) == 0) else
               _encode_array(x, None, key) for x in values]
        first = next((e for e in enc if e is not None), None)
        inner = struct.unpack_from("<I", first)[0] if first is not None else None
        return head + b"".join(e if e is not None else _encode_array([], inner, key)
                               for e in enc)
    if et in _INT_RANGE:
        lo, hi = _INT_RANGE[et]
        if isinstance(values, np.ndarray):
            ok = values.dtype.kind in "iub" and (
                not values.size or (lo <= int(values.min()) and int(values.max()) <= hi))
        else:
            ok = all(isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
                     and lo <= int(x) <= hi for x in values)
        if not ok:
            raise GGUFError(f"metadata {key!r}: values are not all {et.name} integers in range")
        if not isinstance(values, np.ndarray):
            values = [int(x) for x in values]
    try:
        return head + np.asarray(values, dtype=_SCALAR_DTYPE[et]).tobytes()
    except (TypeError, ValueError, OverflowError):
        raise GGUFError(f"metadata {key!r}: values are not {et.name}") from None


def _main(argv=None) -> int:
    """`python -m pyggml.gguf FILE`: print the header, metadata and tensor table."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m pyggml.gguf FILE.gguf", file=sys.stderr)
        return 2
    try:
        r = GGUFReader(argv[0])
    except GGUFError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with r:
        print(f"GGUF v{r.version}, {len(r.fields)} kv, {len(r.tensors)} tensors, "
              f"alignment {r.alignment}, data at {r.data_offset}")
        for f in r.fields.values():
            v = f.value
            if isinstance(v, np.ndarray):
                v = v.tolist()
            if isinstance(v, list) and len(v) > 8:
                v = f"[{', '.join(map(repr, v[:6]))}, ... ({len(v)} items)]"
            t = f.type.name + (f"[{f.elem_type.name}]" if f.elem_type is not None else "")
            print(f"  {f.key:48s} {t:16s} {v}")
        for t in r.tensors:
            print(f"  {t.name:40s} {t.type.name:6s} {str(t.shape):20s} {t.nbytes}")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
