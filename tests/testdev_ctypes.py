"""The test plugin (tests/plugins/testdev) through ctypes: a mirror of include/pyggml/plugin.h, a
Plugin wrapper that raises PluginError on an error object, and the fixtures the testdev tests share
(libdir builds the plugin, plugin_session loads it once, ctx resets the devices around each test).
Used by tests/test_testdev.py, tests/test_testdev_sanitizer.py and the child scripts they start."""
import ctypes as C
import os
import shutil
import threading

import numpy as np
import pytest

from pyggml import _abi_consts as A

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------- ABI 1.0 through ctypes

# constants from the headers (pyggml/_abi_consts.py, generated); the ctypes structs below are
# checked against the headers' layout by test_ctypes_mirror_matches_the_headers
PYG_OK, PYG_ERR_INVALID_ARGUMENT, PYG_ERR_UNSUPPORTED = A.OK, A.ERR_INVALID_ARGUMENT, A.ERR_UNSUPPORTED
PYG_ERR_OUT_OF_MEMORY, PYG_ERR_SANITIZER = A.ERR_OUT_OF_MEMORY, A.ERR_SANITIZER
CAP = {k[4:]: v for k, v in vars(A).items() if k.startswith("CAP_")}
DEFAULT_CAPS = sum(CAP[k] for k in ("ASYNC_COMPUTE", "EVENTS", "ASYNC_WRITE_PINNED", "ASYNC_WRITE_PAGEABLE",
                                    "ASYNC_READ", "PEER_COPY", "HOST_BUFFER", "MULTI_STREAM"))
QUIRK_NO_ASYNC_HOST_COPY, QUIRK_MULTI_DEVICE_SYNC = A.QUIRK_NO_ASYNC_HOST_COPY, A.QUIRK_MULTI_DEVICE_SYNC
PYG_DEVICE_GPU = A.DEVICE_GPU
PYG_LOG_ERROR = A.LOG_ERROR
PYG_BUFFER_HOST = A.BUFFER_HOST
OP_ADD, OP_MUL_MAT = A.OP_ADD, A.OP_MUL_MAT
T_F32 = A.TYPE_F32

vp = C.c_void_p
P = C.POINTER
ERR = vp
F = C.CFUNCTYPE


class HostInfo(C.Structure):
    _fields_ = [("struct_size", C.c_uint64), ("abi_major", C.c_uint16), ("abi_minor", C.c_uint16),
                ("reserved0", C.c_uint32),
                ("log", F(None, vp, C.c_int32, C.c_char_p, C.c_char_p)), ("log_user_data", vp)]


class DeviceProps(C.Structure):
    _fields_ = [("struct_size", C.c_uint64), ("name", C.c_char_p), ("description", C.c_char_p),
                ("type", C.c_int32), ("reserved0", C.c_int32), ("caps", C.c_uint64), ("quirks", C.c_uint64),
                ("memory_total", C.c_uint64), ("alignment", C.c_uint64), ("max_alloc", C.c_uint64)]


class BufferInfo(C.Structure):
    _fields_ = [("struct_size", C.c_uint64), ("size", C.c_uint64), ("base", vp), ("host_ptr", vp),
                ("flags", C.c_uint32), ("reserved0", C.c_uint32)]


class Tensor(C.Structure):
    pass


Tensor._fields_ = [("type", C.c_int32), ("op", C.c_int32), ("ne", C.c_int64 * 4), ("nb", C.c_uint64 * 4),
                   ("op_params", C.c_int32 * 16), ("flags", C.c_uint32), ("reserved0", C.c_int32),
                   ("src", P(Tensor) * 6), ("view_src", P(Tensor)), ("view_offs", C.c_uint64),
                   ("buffer", vp), ("offset", C.c_uint64), ("data", vp), ("name", C.c_char * 64),
                   ("reserved", vp * 4)]


class Graph(C.Structure):
    _fields_ = [("struct_size", C.c_uint64), ("n_nodes", C.c_int32), ("reserved0", C.c_int32),
                ("nodes", P(P(Tensor))), ("id", C.c_uint64)]


class Api(C.Structure):
    _fields_ = [
        ("struct_size", C.c_uint64), ("abi_major", C.c_uint16), ("abi_minor", C.c_uint16), ("reserved0", C.c_uint32),
        ("name", C.c_char_p), ("version", C.c_char_p),
        ("error_code", F(C.c_int32, ERR)), ("error_message", F(C.c_char_p, ERR)), ("error_destroy", F(None, ERR)),
        ("plugin_init", F(ERR)), ("device_count", F(C.c_int32)), ("device_get", F(ERR, C.c_int32, P(vp))),
        ("device_get_props", F(ERR, vp, P(DeviceProps))), ("device_memory", F(ERR, vp, P(C.c_uint64), P(C.c_uint64))),
        ("device_set_option", F(ERR, vp, C.c_char_p, C.c_char_p)), ("device_supports_op", F(C.c_int32, vp, P(Tensor))),
        ("stream_create", F(ERR, vp, C.c_uint32, P(vp))), ("stream_destroy", F(None, vp)),
        ("stream_synchronize", F(ERR, vp)), ("stream_wait_event", F(ERR, vp, vp)),
        ("event_create", F(ERR, vp, P(vp))), ("event_destroy", F(None, vp)), ("event_record", F(ERR, vp, vp)),
        ("event_query", F(ERR, vp, P(C.c_int32))), ("event_synchronize", F(ERR, vp)),
        ("buffer_alloc", F(ERR, vp, C.c_uint64, C.c_uint32, P(vp))), ("buffer_free", F(None, vp)),
        ("buffer_get_info", F(ERR, vp, P(BufferInfo))),
        ("buffer_write", F(ERR, vp, C.c_uint64, vp, C.c_uint64)), ("buffer_read", F(ERR, vp, C.c_uint64, vp, C.c_uint64)),
        ("buffer_fill", F(ERR, vp, C.c_uint64, C.c_uint8, C.c_uint64)),
        ("stream_write_async", F(ERR, vp, vp, C.c_uint64, vp, C.c_uint64)),
        ("stream_read_async", F(ERR, vp, vp, C.c_uint64, vp, C.c_uint64)),
        ("stream_copy_async", F(ERR, vp, vp, C.c_uint64, vp, C.c_uint64, C.c_uint64)),
        ("graph_plan_create", F(ERR, vp, P(Graph), P(vp))), ("graph_plan_destroy", F(None, vp)),
        ("graph_plan_compute", F(ERR, vp, vp)),
        ("stream_set_option", F(ERR, vp, C.c_char_p, C.c_char_p)),     # since 1.1
    ]


class PluginError(Exception):
    def __init__(self, code, msg):
        super().__init__(f"[{code}] {msg}")
        self.code, self.msg = code, msg


class Plugin:
    """A loaded plugin with a log sink; calls raise PluginError on an error object."""

    def __init__(self, path):
        self.lib = C.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self.logs = []
        self._log_lock = threading.Lock()

        def log(_user, level, plugin, msg):
            with self._log_lock:
                self.logs.append((level, plugin.decode(), msg.decode()))

        self._log_cb = HostInfo._fields_[4][1](log)  # kept alive: the plugin calls it from its threads
        self.host = HostInfo(C.sizeof(HostInfo), 1, 0, 0, self._log_cb, None)
        get_api = self.lib.pyg_plugin_get_api
        get_api.restype = P(Api)
        get_api.argtypes = [P(HostInfo)]
        self.api = get_api(C.byref(self.host)).contents
        self.check(self.api.plugin_init())

    def check(self, err):
        if err:
            code, msg = self.api.error_code(err), self.api.error_message(err).decode()
            self.api.error_destroy(err)
            raise PluginError(code, msg)

    def call(self, name, *args):
        self.check(getattr(self.api, name)(*args))

    def error_of(self, name, *args):
        """Run an entry that must fail; return the PluginError."""
        with pytest.raises(PluginError) as ei:
            self.call(name, *args)
        return ei.value

    def device(self, i):
        d = vp()
        self.call("device_get", i, C.byref(d))
        return d

    def props(self, dev):
        p = DeviceProps()
        p.struct_size = C.sizeof(DeviceProps)
        self.call("device_get_props", dev, C.byref(p))
        return p

    def opt(self, dev, key, value):
        self.call("device_set_option", dev, key.encode(), str(value).encode())

    def new(self, kind, dev, *extra):
        h = vp()
        self.call(kind + "_create", dev, *extra, C.byref(h))
        return h

    def buffer(self, dev, size, flags=0):
        b = vp()
        self.call("buffer_alloc", dev, size, flags, C.byref(b))
        return b

    def info(self, buf):
        i = BufferInfo()
        i.struct_size = C.sizeof(BufferInfo)
        self.call("buffer_get_info", buf, C.byref(i))
        return i

    def read(self, buf, n, offset=0, dtype=np.float32):
        out = np.empty(n, dtype)
        self.call("buffer_read", buf, offset, out.ctypes.data, out.nbytes)
        return out

    def errors_logged(self):
        with self._log_lock:
            return [m for lvl, _, m in self.logs if lvl == PYG_LOG_ERROR]

    def sanitizer_report(self, dev):
        """Violations since the last call (then forgotten): "" when none."""
        try:
            self.opt(dev, "sanitize_check", "1")
        except PluginError as e:
            assert e.code == PYG_ERR_SANITIZER
            return e.msg
        return ""


# ---------------------------------------------------------------- fixtures

def load_builder():
    """tests/plugins/testdev/testdev_build.py as a module (build_testdev(names=...) builds the plugin
    under those names); the one loader of it for every test that builds the test plugin."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "testdev_build", os.path.join(ROOT, "tests", "plugins", "testdev", "testdev_build.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def libdir():
    pre = os.environ.get("PYGGML_TESTDEV_DIR")
    if pre:
        return pre
    if not shutil.which("cc") or not shutil.which("make"):
        pytest.skip("no C compiler or make to build the test plugin")
    return load_builder().build_testdev(names=("testdev", "testdevb"))


@pytest.fixture(scope="session")
def plugin_session(libdir):
    return Plugin(os.path.join(libdir, "libpyggml-testdev.so"))


class Ctx:
    """Per test: devices back at their defaults, sanitizer on, streams/events/buffers freed after."""

    def __init__(self, pg):
        self.pg = pg
        self.d0, self.d1 = pg.device(0), pg.device(1)
        self.streams, self.events, self.buffers = [], [], []

    def stream(self, dev):
        s = self.pg.new("stream", dev, 0)
        self.streams.append(s)
        return s

    def event(self, dev):
        e = self.pg.new("event", dev)
        self.events.append(e)
        return e

    def buffer(self, dev, size, flags=0):
        b = self.pg.buffer(dev, size, flags)
        self.buffers.append(b)
        return b

    def close(self):
        for s in self.streams:
            self.pg.api.stream_destroy(s)
        for e in self.events:
            self.pg.api.event_destroy(e)
        for b in self.buffers:
            self.pg.api.buffer_free(b)


def reset(pg, dev):
    """Defaults for what these tests change (the library may be shared with other tests in the process)."""
    for k, v in (("copy_latency_us", 0), ("launch_latency_us", 0), ("caps", f"{DEFAULT_CAPS:x}"), ("quirks", 0),
                 ("name", "testdev"), ("memory", 8 << 30), ("blocking_copies", "complete"), ("pageable_async", 0),
                 ("staging_bytes", 1 << 20)):
        pg.opt(dev, k, v)


@pytest.fixture
def ctx(plugin_session):
    pg = plugin_session
    c = Ctx(pg)
    for d in (c.d0, c.d1):
        reset(pg, d)
    pg.opt(c.d0, "sanitize", 1)
    pg.sanitizer_report(c.d0)
    with pg._log_lock:
        pg.logs.clear()
    yield c
    c.close()
    for d in (c.d0, c.d1):
        reset(pg, d)


class AddGraph:
    """sum = x + y, f32 [rows, cols] (numpy order), all three in one buffer of `dev`."""

    def __init__(self, ctx, dev, cols, rows):
        pg = self.pg = ctx.pg
        n = cols * rows * 4
        self.buf = ctx.buffer(dev, 3 * 256 + 3 * n)
        base = pg.info(self.buf).base
        self.off = [0, ((n + 255) // 256) * 256, 2 * ((n + 255) // 256) * 256]
        self.t = [Tensor() for _ in range(3)]
        for t, off, name in zip(self.t, self.off, (b"x", b"y", b"sum")):
            t.type = T_F32
            t.ne[:] = [cols, rows, 1, 1]
            t.nb[:] = [4, 4 * cols, 4 * cols * rows, 4 * cols * rows]
            t.buffer, t.offset, t.data, t.name = self.buf, off, base + off, name
        self.t[2].op = OP_ADD
        self.t[2].src[0] = C.pointer(self.t[0])
        self.t[2].src[1] = C.pointer(self.t[1])
        self.nodes = (P(Tensor) * 1)(C.pointer(self.t[2]))
        self.graph = Graph(C.sizeof(Graph), 1, 0, self.nodes, 1)
        self.plan = vp()
        pg.call("graph_plan_create", dev, C.byref(self.graph), C.byref(self.plan))

    def destroy(self):
        self.pg.api.graph_plan_destroy(self.plan)
