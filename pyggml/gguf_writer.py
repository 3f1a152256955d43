"""GGUF writer: streaming, atomic (a temp file renamed into place), cleaned up on SIGTERM.

Tensor data is written as given (numpy arrays or callables producing chunks), aligned like the
reader expects; see pyggml.gguf for the format. ``pyggml.gguf`` re-exports GGUFWriter."""


import os
import re
import signal
import struct
import tempfile
import threading
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from .gguf_types import (GGUFError, 
    GGMLType, GGML_TYPES, GGUFValueType, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUF_MAX_DIMS,
    GGUF_MAX_NAME, GGUF_VERSIONS, _DTYPE_TO_TYPE, _INT_RANGE, _SCALAR_DTYPE, _SCALAR_FMT, _VT,
    ggml_type, tensor_nbytes)





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

