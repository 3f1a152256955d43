"""Backends written in Python, through the same C ABI as a compiled plugin.

A Python class fills the plugin table (include/pyggml/plugin.h) through cffi callbacks: the
scheduler calls them exactly as it calls a C plugin's entries (from its nogil code; cffi takes the
GIL for the call), so a device can be prototyped in Python (numpy, CuPy, a vendor's Python API)
and ported to C later without the scheduler noticing. Subclass Backend and Device, give the device
its ops, and load the file:

    class NumpyDevice(pyggml.plugin.Device):
        def supports(self, node): ...          # pure: can compute(node) run it?
        def compute(self, node): ...           # write node.array() from node.src[i].array()

    class NumpyBackend(pyggml.plugin.Backend):
        name = "numpy"
        def init(self): return [NumpyDevice()]

    pyggml.plugin.load("numpy_plugin.py")      # or: python3 -m pyggml check numpy_plugin.py

What the base classes do: buffers are aligned numpy byte arrays (device memory: the host never
touches it directly, so a graph split with the CPU copies through buffer_write/buffer_read);
streams run their work when it is queued (no PYG_CAP_ASYNC_COMPUTE), events complete when recorded,
so every ordering rule holds by construction; plans keep the graph's nodes as Node objects.

Errors are values, never silent: an entry that raises Error(code, message) returns that error
object; any other exception -- a bug in the plugin -- returns PYG_ERR_INTERNAL carrying the
formatted traceback (MemoryError: PYG_ERR_OUT_OF_MEMORY). Entries that cannot return an error
(destroy, supports_op) log the traceback through host->log and do nothing / answer 0. Nothing is
ever reported as success after an exception.
"""
import importlib.util
import inspect
import os
import threading
import traceback

import numpy as np

from . import _abi_consts as A
from ._ffi import ffi

__all__ = ["Error", "Backend", "Device", "Buffer", "Node", "load"]


class Error(Exception):
    """Raise from a plugin method to return this pyg_status (A.ERR_*) with the message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- the objects a backend works with

class Buffer:
    """Device memory: an aligned numpy byte array. `mem` is the whole allocation."""

    def __init__(self, device, size, flags):
        self.device, self.size, self.flags = device, size, flags
        raw = np.empty(size + device.alignment, np.uint8)
        skip = (-raw.ctypes.data) % device.alignment
        self.mem = raw[skip: skip + size]

    @property
    def base(self):
        return self.mem.ctypes.data


class Node:
    """A pyg_tensor as a plugin reads it: op, type, ne, nb, params, src (Node or None), and its
    data as a numpy view (array()). Host-owned: valid while the plan or call that gave it lives."""

    def __init__(self, backend, ptr, cache):
        self._b, self.ptr = backend, ptr
        cache[int(ffi.cast("uintptr_t", ptr))] = self
        t = ptr
        self.op, self.type, self.flags = t.op, t.type, t.flags
        self.ne, self.nb = tuple(t.ne), tuple(t.nb)
        self.params = list(t.op_params)
        self.name = ffi.string(t.name).decode(errors="replace")
        self.src = [None if t.src[i] == ffi.NULL else
                    cache.get(int(ffi.cast("uintptr_t", t.src[i]))) or Node(backend, t.src[i], cache)
                    for i in range(A.MAX_SRC)]

    def param_f32(self, i):
        return float(np.array([self.params[i]], np.int32).view(np.float32)[0])

    def array(self):
        """The data as a numpy view in numpy order (shape = reversed ne); plain types only."""
        dtype = {A.TYPE_F32: np.float32, A.TYPE_F16: np.float16, A.TYPE_I32: np.int32,
                 A.TYPE_I64: np.int64}.get(self.type)
        if dtype is None:
            raise Error(A.ERR_UNSUPPORTED, f"{self.name}: type {self.type} has no numpy view here")
        t = self.ptr
        buf, off = t.buffer, t.offset
        if buf == ffi.NULL:
            raise Error(A.ERR_INVALID_ARGUMENT, f"{self.name}: no buffer")
        mem = self._b.get(buf, Buffer).mem
        return np.ndarray(self.ne[::-1], dtype, buffer=mem, offset=off, strides=self.nb[::-1])


class Device:
    """One device. Override supports() and compute(); the rest has working defaults."""
    description = "a Python device"
    type = A.DEVICE_ACCEL
    caps = A.CAP_EVENTS          # events order streams trivially: every stream runs work at queue time
    quirks = 0
    alignment = 64
    max_alloc = 0

    def __init__(self):
        self.fault_next = False  # the debug_async_fault test hook (REQUIREMENTS.md R18)

    def memory(self):
        """(free, total) bytes; 0 = unknown."""
        return 0, 0

    def set_option(self, key, value):
        if key == "debug_async_fault":
            self.fault_next = value not in ("0", "off", "false", "no")
            return
        raise Error(A.ERR_UNSUPPORTED, f"unknown option '{key}' (known: debug_async_fault)")

    def set_stream_option(self, stream, key, value):
        """Options of one stream (ABI 1.1 stream_set_option); none by default."""
        raise Error(A.ERR_UNSUPPORTED, f"unknown stream option '{key}' (none known)")

    def supports(self, node):
        """1 when compute(node) gives the op's reference result for these types and strides."""
        return False

    def compute(self, node):
        """Write node.array() from its sources; raise Error for a failure."""
        raise Error(A.ERR_UNSUPPORTED, f"op {node.op} not implemented")

    # Moving bytes and ordering work. The defaults run everything when it is queued, so every
    # ordering rule holds; an asynchronous device overrides enqueue (run `work` later, in queue
    # order) and synchronize (wait for what `stream` queued), and record/query/wait for events.
    def write(self, buf, offset, data):
        """Blocking: `data` (uint8 array) into buf at offset; complete when this returns (R13)."""
        buf.mem[offset: offset + data.size] = data

    def read(self, buf, offset, out):
        """Blocking: bytes of buf at offset into `out` (uint8 array)."""
        out[:] = buf.mem[offset: offset + out.size]

    def copy(self, dst, dst_offset, src, src_offset, size):
        dst.mem[dst_offset: dst_offset + size] = src.mem[src_offset: src_offset + size]

    def enqueue(self, stream, work):
        """Queue `work` (a callable) on `stream`; it may raise Error, reported at the next sync."""
        work()

    def synchronize(self, stream):
        """Return when every work item queued on `stream` so far has run."""

    def record(self, event, stream):
        event.stream = stream

    def query(self, event):
        return True

    def wait(self, stream, event):
        """Work queued on `stream` from now on runs after `event` completed."""


class Backend:
    """The plugin: its name (the table's name, [a-z0-9_]+; device specs use it) and its devices."""
    name = "python"
    version = "0.1.0"

    def init(self):
        """Probe: the devices (list of Device), or raise Error(A.ERR_NO_DEVICE, why)."""
        return []


class _Stream:
    def __init__(self, device):
        self.device, self.pending = device, None   # an asynchronous failure not yet reported


class _Plan:
    def __init__(self, device, nodes):
        self.device, self.nodes = device, nodes


# ---------------------------------------------------------------- the table

_SIGS = {
    "error_code": ("int32_t(const pyg_error *)", "code"),
    "error_message": ("const char *(const pyg_error *)", None),
    "error_destroy": ("void(pyg_error *)", None),
    "plugin_init": ("pyg_error *(void)", "err"),
    "device_count": ("int32_t(void)", 0),
    "device_get": ("pyg_error *(int32_t, pyg_device **)", "err"),
    "device_get_props": ("pyg_error *(pyg_device *, pyg_device_props *)", "err"),
    "device_memory": ("pyg_error *(pyg_device *, uint64_t *, uint64_t *)", "err"),
    "device_set_option": ("pyg_error *(pyg_device *, const char *, const char *)", "err"),
    "device_supports_op": ("int32_t(pyg_device *, const pyg_tensor *)", 0),
    "stream_create": ("pyg_error *(pyg_device *, uint32_t, pyg_stream **)", "err"),
    "stream_destroy": ("void(pyg_stream *)", None),
    "stream_synchronize": ("pyg_error *(pyg_stream *)", "err"),
    "stream_wait_event": ("pyg_error *(pyg_stream *, pyg_event *)", "err"),
    "event_create": ("pyg_error *(pyg_device *, pyg_event **)", "err"),
    "event_destroy": ("void(pyg_event *)", None),
    "event_record": ("pyg_error *(pyg_event *, pyg_stream *)", "err"),
    "event_query": ("pyg_error *(pyg_event *, int32_t *)", "err"),
    "event_synchronize": ("pyg_error *(pyg_event *)", "err"),
    "buffer_alloc": ("pyg_error *(pyg_device *, uint64_t, uint32_t, pyg_buffer **)", "err"),
    "buffer_free": ("void(pyg_buffer *)", None),
    "buffer_get_info": ("pyg_error *(pyg_buffer *, pyg_buffer_info *)", "err"),
    "buffer_write": ("pyg_error *(pyg_buffer *, uint64_t, const void *, uint64_t)", "err"),
    "buffer_read": ("pyg_error *(pyg_buffer *, uint64_t, void *, uint64_t)", "err"),
    "buffer_fill": ("pyg_error *(pyg_buffer *, uint64_t, uint8_t, uint64_t)", "err"),
    "stream_write_async": ("pyg_error *(pyg_stream *, pyg_buffer *, uint64_t, const void *, uint64_t)", "err"),
    "stream_read_async": ("pyg_error *(pyg_stream *, pyg_buffer *, uint64_t, void *, uint64_t)", "err"),
    "stream_copy_async": ("pyg_error *(pyg_stream *, pyg_buffer *, uint64_t, pyg_buffer *, uint64_t, uint64_t)",
                          "err"),
    "graph_plan_create": ("pyg_error *(pyg_device *, const pyg_graph *, pyg_graph_plan **)", "err"),
    "graph_plan_destroy": ("void(pyg_graph_plan *)", None),
    "graph_plan_compute": ("pyg_error *(pyg_graph_plan *, pyg_stream *)", "err"),
    "stream_set_option": ("pyg_error *(pyg_stream *, const char *, const char *)", "err"),   # since 1.1
}


class _Table:
    """A backend's pyg_plugin_api: cffi callbacks around the Backend/Device objects, error objects
    (code and message kept here until error_destroy) and handles (objects kept until destroyed)."""

    def __init__(self, backend):
        self.backend, self.devices, self.init_error = backend, [], None
        self.lock = threading.Lock()
        self.errors = {}                   # address -> (code, char[] message)
        self.objects = _Handles()
        self.host = None
        self.name = str(backend.name).encode()
        self.version = str(backend.version).encode()
        self.api = ffi.new("pyg_plugin_api *")
        self.api.struct_size = ffi.sizeof("pyg_plugin_api")
        self.api.abi_major, self.api.abi_minor = A.ABI_MAJOR, A.ABI_MINOR
        self.keep = [ffi.new("char[]", self.name), ffi.new("char[]", self.version)]   # owned here
        self.api.name, self.api.version = self.keep
        self._static_err = ffi.new("char[]", b"pyggml.plugin: internal error while reporting an error")
        for entry, (sig, kind) in _SIGS.items():
            impl = getattr(self, "_" + entry)
            cb = ffi.callback(sig, self._guard(entry, impl, kind), onerror=self._onerror(kind))
            self.keep.append(cb)
            setattr(self.api, entry, cb)
        self.entry = ffi.callback("const pyg_plugin_api *(const pyg_host_info *)", self._get_api)
        self.keep.append(self.entry)

    # ---- errors and logging
    def error(self, code, message):
        text = ffi.new("char[]", f"{self.name.decode()}: {message}".encode(errors="replace"))
        ptr = ffi.cast("pyg_error *", text)
        with self.lock:
            self.errors[int(ffi.cast("uintptr_t", ptr))] = (code, text)
        return ptr

    def log(self, level, message):
        h = self.host
        if h is not None and h.log != ffi.NULL:
            h.log(h.log_user_data, level, self.name, message.encode(errors="replace")[:4000])

    def _guard(self, entry, impl, kind):
        def call(*args):
            try:
                r = impl(*args)
                return ffi.NULL if kind == "err" else r
            except Error as e:
                if kind == "err":
                    return self.error(e.code, f"{entry}: {e}")
                self.log(A.LOG_ERROR, f"{entry}: {e}")
            except MemoryError:
                if kind == "err":
                    return self.error(A.ERR_OUT_OF_MEMORY, f"{entry}: out of memory")
                self.log(A.LOG_ERROR, f"{entry}: out of memory")
            except BaseException as e:
                # the exception first (a host may keep only the start of a log line), then the traceback
                text = f"{entry}: uncaught Python exception: {type(e).__name__}: {e}\n{traceback.format_exc()}"
                if kind == "err":
                    return self.error(A.ERR_INTERNAL, text)
                self.log(A.LOG_ERROR, text)
            return A.ERR_INTERNAL if kind == "code" else 0 if kind == 0 else ffi.NULL
        return call

    def _onerror(self, kind):
        # last resort, when even building the error object failed: never NULL (= success)
        def handler(exc, val, tb):
            if kind == "err":
                return ffi.cast("pyg_error *", self._static_err)
            return A.ERR_INTERNAL if kind == "code" else 0 if kind == 0 else None
        return handler

    def _get_api(self, host):
        self.host = host
        return self.api

    def _error_code(self, err):
        if err == ffi.NULL:
            return A.OK
        with self.lock:
            e = self.errors.get(int(ffi.cast("uintptr_t", err)))
        return e[0] if e else A.ERR_INTERNAL     # the static last-resort error

    def _error_message(self, err):
        if err == ffi.NULL:
            return ffi.NULL
        with self.lock:
            e = self.errors.get(int(ffi.cast("uintptr_t", err)))
        return e[1] if e else self._static_err

    def _error_destroy(self, err):
        if err != ffi.NULL:
            with self.lock:
                self.errors.pop(int(ffi.cast("uintptr_t", err)), None)

    # ---- devices
    def _plugin_init(self):
        if not self.devices and self.init_error is None:
            try:
                self.devices = list(self.backend.init())
            except Error as e:
                self.init_error = e
        if self.init_error is not None:
            raise self.init_error
        if not self.devices:
            raise Error(A.ERR_NO_DEVICE, "the backend reports no devices")
        for d in self.devices:
            self.objects.add(d)

    def _device_count(self):
        return len(self.devices)

    def _device_get(self, index, out):
        if not 0 <= index < len(self.devices):
            raise Error(A.ERR_INVALID_ARGUMENT, f"device index {index} out of range ({len(self.devices)} devices)")
        out[0] = self.objects.handle(self.devices[index], "pyg_device *")

    def _device_get_props(self, dev, props):
        d = self.objects.get(dev, Device)
        if props == ffi.NULL or props.struct_size < ffi.sizeof("pyg_device_props"):
            raise Error(A.ERR_INVALID_ARGUMENT, "props NULL or older than ABI 1.0")
        d._name = getattr(d, "_name", None) or ffi.new("char[]", self.name)
        d._descr = getattr(d, "_descr", None) or ffi.new("char[]", str(d.description).encode())
        props.name, props.description, props.type = d._name, d._descr, d.type
        props.caps, props.quirks = d.caps, d.quirks
        props.memory_total, props.alignment, props.max_alloc = d.memory()[1], d.alignment, d.max_alloc

    def _device_memory(self, dev, free, total):
        f, t = self.objects.get(dev, Device).memory()
        if free != ffi.NULL:
            free[0] = f
        if total != ffi.NULL:
            total[0] = t

    def _device_set_option(self, dev, key, value):
        if key == ffi.NULL or value == ffi.NULL:
            raise Error(A.ERR_INVALID_ARGUMENT, "NULL key or value")
        self.objects.get(dev, Device).set_option(ffi.string(key).decode(), ffi.string(value).decode())

    def _device_supports_op(self, dev, node):
        d = self.objects.get(dev, Device)
        if node == ffi.NULL:
            return 0
        n = Node(self.objects, node, {})
        return 1 if n.op == A.OP_NONE or n.op in _VIEWS or d.supports(n) else 0

    # ---- streams and events
    def _stream_create(self, dev, flags, out):
        out[0] = self.objects.handle(_Stream(self.objects.get(dev, Device)), "pyg_stream *")

    def _stream_set_option(self, s, key, value):
        if key == ffi.NULL or value == ffi.NULL:
            raise Error(A.ERR_INVALID_ARGUMENT, "NULL key or value")
        st = self.objects.get(s, _Stream)
        st.device.set_stream_option(st, ffi.string(key).decode(), ffi.string(value).decode())

    def _stream_destroy(self, s):
        self.objects.drop(s)

    def _enqueue(self, st, work):
        """Queue work on a stream. A device without PYG_CAP_ASYNC_COMPUTE finishes work before the
        entry returns, so its failure is the entry's error; otherwise it surfaces at the next sync."""
        if not st.device.caps & A.CAP_ASYNC_COMPUTE:
            st.device.enqueue(st, work)
            return

        def run():
            try:
                work()
            except Error as e:
                st.pending = st.pending or e
            except BaseException:
                st.pending = st.pending or Error(A.ERR_INTERNAL, "queued work raised:\n" + traceback.format_exc())
        st.device.enqueue(st, run)

    def _stream_synchronize(self, s):
        st = self.objects.get(s, _Stream)
        st.device.synchronize(st)
        err, st.pending = st.pending, None
        if err is not None:
            raise err

    def _stream_wait_event(self, s, e):
        st, ev = self.objects.get(s, _Stream), self.objects.get(e, _Event)
        st.device.wait(st, ev)

    def _event_create(self, dev, out):
        out[0] = self.objects.handle(_Event(self.objects.get(dev, Device)), "pyg_event *")

    def _event_destroy(self, e):
        self.objects.drop(e)

    def _event_record(self, e, s):
        ev, st = self.objects.get(e, _Event), self.objects.get(s, _Stream)
        st.device.record(ev, st)

    def _event_query(self, e, done):
        ev = self.objects.get(e, _Event)
        done[0] = 1 if ev.stream is None or ev.device.query(ev) else 0
        if done[0]:
            self._event_error(ev)

    def _event_synchronize(self, e):
        ev = self.objects.get(e, _Event)
        if ev.stream is not None:
            ev.stream.device.synchronize(ev.stream)
        self._event_error(ev)

    def _event_error(self, ev):
        st = ev.stream
        if st is not None and st.pending is not None:
            err, st.pending = st.pending, None
            raise err

    # ---- buffers and copies
    def _buffer_alloc(self, dev, size, flags, out):
        d = self.objects.get(dev, Device)
        if flags != A.BUFFER_DEVICE:
            raise Error(A.ERR_UNSUPPORTED, f"buffer flags {flags}: only device memory")
        if size > (1 << 40):
            raise Error(A.ERR_OUT_OF_MEMORY, f"{size} bytes: more than this device holds")
        out[0] = self.objects.handle(Buffer(d, size, flags), "pyg_buffer *")

    def _buffer_free(self, b):
        self.objects.drop(b)

    def _buffer_get_info(self, b, info):
        buf = self.objects.get(b, Buffer)
        info.size, info.base, info.host_ptr, info.flags = buf.size, ffi.cast("void *", buf.base), ffi.NULL, buf.flags

    def _range(self, b, off, size):
        buf = self.objects.get(b, Buffer)
        if off + size > buf.size:
            raise Error(A.ERR_INVALID_ARGUMENT, f"range {off}+{size} beyond the buffer's {buf.size} bytes")
        return buf.mem[off: off + size]

    def _host(self, ptr, size):
        return np.frombuffer(ffi.buffer(ptr, size), np.uint8)

    def _buffer_write(self, b, off, src, size):
        self._range(b, off, size)
        buf = self.objects.get(b, Buffer)
        buf.device.write(buf, off, self._host(src, size))

    def _buffer_read(self, b, off, dst, size):
        self._range(b, off, size)
        buf = self.objects.get(b, Buffer)
        buf.device.read(buf, off, self._host(dst, size))

    def _buffer_fill(self, b, off, value, size):
        self._range(b, off, size)[:] = value

    def _stream_write_async(self, s, b, off, src, size):
        st, buf = self.objects.get(s, _Stream), self.objects.get(b, Buffer)
        self._range(b, off, size)
        data = self._host(src, size)            # the host keeps it alive until the stream passes
        self._enqueue(st, lambda: st.device.write(buf, off, data))

    def _stream_read_async(self, s, b, off, dst, size):
        st, buf = self.objects.get(s, _Stream), self.objects.get(b, Buffer)
        self._range(b, off, size)
        out = self._host(dst, size)
        self._enqueue(st, lambda: st.device.read(buf, off, out))

    def _stream_copy_async(self, s, dst, doff, src, soff, size):
        st = self.objects.get(s, _Stream)
        self._range(dst, doff, size), self._range(src, soff, size)
        d, sb = self.objects.get(dst, Buffer), self.objects.get(src, Buffer)
        self._enqueue(st, lambda: st.device.copy(d, doff, sb, soff, size))

    # ---- plans
    def _graph_plan_create(self, dev, graph, out):
        d = self.objects.get(dev, Device)
        cache, nodes = {}, []
        for i in range(graph.n_nodes):
            n = Node(self.objects, graph.nodes[i], cache)
            if n.op == A.OP_NONE or n.op in _VIEWS:
                continue
            if not d.supports(n):
                raise Error(A.ERR_UNSUPPORTED, f"node {i} '{n.name}': op {A.OP_NAMES[n.op]} is not supported")
            nodes.append(n)
        out[0] = self.objects.handle(_Plan(d, nodes), "pyg_graph_plan *")

    def _graph_plan_destroy(self, p):
        self.objects.drop(p)

    def _graph_plan_compute(self, p, s):
        plan, st = self.objects.get(p, _Plan), self.objects.get(s, _Stream)
        if st.device is not plan.device:
            raise Error(A.ERR_INVALID_ARGUMENT, "stream of another device")
        fault, plan.device.fault_next = plan.device.fault_next, False

        def run():
            if fault:                                  # R18: fail asynchronously, report at the next sync
                raise Error(A.ERR_DEVICE, "injected asynchronous failure (debug_async_fault)")
            for n in plan.nodes:
                plan.device.compute(n)
        self._enqueue(st, run)


_VIEWS = (A.OP_VIEW, A.OP_RESHAPE, A.OP_PERMUTE, A.OP_TRANSPOSE)


class _Event:
    def __init__(self, device):
        self.device, self.stream = device, None


class _Handles:
    """Python objects behind the handles the host holds: cffi handles kept alive until dropped."""

    def __init__(self):
        self.lock = threading.Lock()
        self.live = {}

    def add(self, obj):
        with self.lock:
            h = ffi.new_handle(obj)
            self.live[int(ffi.cast("uintptr_t", h))] = h
            obj._handle = h
        return h

    def handle(self, obj, ctype):
        h = getattr(obj, "_handle", None) or self.add(obj)
        return ffi.cast(ctype, h)

    def get(self, ptr, cls=object):
        if ptr == ffi.NULL:
            raise Error(A.ERR_INVALID_ARGUMENT, f"NULL {cls.__name__.strip('_').lower()} handle")
        with self.lock:
            h = self.live.get(int(ffi.cast("uintptr_t", ptr)))
        obj = ffi.from_handle(h) if h is not None else None
        if not isinstance(obj, cls):
            raise Error(A.ERR_INVALID_ARGUMENT, f"not a {cls.__name__.strip('_').lower()} of this plugin")
        return obj

    def drop(self, ptr):
        if ptr != ffi.NULL:
            with self.lock:
                self.live.pop(int(ffi.cast("uintptr_t", ptr)), None)


# ---------------------------------------------------------------- loading

def load(source):
    """Load a Python plugin: a Backend instance or subclass, or a .py file defining one (its one
    Backend subclass, or the instance named BACKEND). Returns the pyggml Plugin."""
    from . import _plugin
    origin = None
    if isinstance(source, (str, os.PathLike)):
        origin = os.path.abspath(os.fspath(source))
        name = "pyggml_plugin_" + os.path.splitext(os.path.basename(origin))[0]
        spec = importlib.util.spec_from_file_location(name, origin)
        if spec is None:
            raise ImportError(f"{origin}: not a Python file")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        source = getattr(module, "BACKEND", None) or _only_backend(module, origin)
    backend = source() if inspect.isclass(source) else source
    if not isinstance(backend, Backend):
        raise TypeError(f"{source!r} is not a pyggml.plugin.Backend")
    origin = origin or f"<python plugin {type(backend).__module__}.{type(backend).__qualname__}>"
    table = _Table(backend)
    return _plugin.load_entry(int(ffi.cast("uintptr_t", table.entry)), origin, table)


def _only_backend(module, origin):
    found = [v for v in vars(module).values()
             if inspect.isclass(v) and issubclass(v, Backend) and v is not Backend and v.__module__ == module.__name__]
    if len(found) != 1:
        raise ImportError(f"{origin}: defines {len(found)} pyggml.plugin.Backend subclasses; "
                          f"name the one to load BACKEND")
    return found[0]
