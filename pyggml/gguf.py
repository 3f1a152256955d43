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

import mmap
import os
import struct
import sys

import numpy as np

from .gguf_types import (  # noqa: F401 (public names re-exported)
    GGUFError, GGMLType, GGML_TYPES, GGML_TYPE_IDS, GGUFField, GGUFValueType, GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC, GGUF_MAX_DIMS, GGUF_MAX_NAME, GGUF_VERSIONS, _MAX_ARRAY_DEPTH, _MIN_SIZE,
    _PLAIN_DTYPES, _SCALAR_DTYPE, _SCALAR_FMT, _SCALAR_SIZE, _VT, ggml_type, row_nbytes,
    tensor_nbytes)



from .gguf_writer import GGUFWriter  # noqa: F401 (re-exported)

__all__ = ["GGMLType", "GGML_TYPES", "GGML_TYPE_IDS", "GGUFError", "GGUFField", "GGUFReader", "GGUFTensor",
           "GGUFValueType", "GGUFWriter", "ggml_type", "row_nbytes", "tensor_nbytes"]


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
