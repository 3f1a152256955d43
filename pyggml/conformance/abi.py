"""The plugin table through cffi (ABI mode, declarations generated from the headers), for checks
that call entries the scheduler never calls in the order a check needs: a loaded plugin's table
and device handles, entries that raise AbiCallError on an error object, buffers and one-node
graph plans built from descriptors. cffi releases the GIL around each call."""
from .. import _abi_consts as A
from .._ffi import ffi


class AbiCallError(Exception):
    """An entry returned an error object: `entry`, `code` (pyg_status) and the plugin's message."""

    def __init__(self, entry, code, msg):
        super().__init__(f"{entry}: error {code}: {msg}")
        self.entry, self.code, self.msg = entry, code, msg


class Table:
    """One plugin's table. `t("entry", args...)` calls a fallible entry and raises on error;
    `t.take("entry", args...)` returns (code, message) instead (0, "" for success)."""

    def __init__(self, plugin):
        self.plugin = plugin
        self.api = ffi.cast("const pyg_plugin_api *", plugin.api_address)

    def take(self, entry, *args):
        err = getattr(self.api, entry)(*args)
        if err == ffi.NULL:
            return A.OK, ""
        code = self.api.error_code(err)
        m = self.api.error_message(err)
        msg = ffi.string(m).decode(errors="replace") if m != ffi.NULL else ""
        self.api.error_destroy(err)
        return code, msg

    def __call__(self, entry, *args):
        code, msg = self.take(entry, *args)
        if code != A.OK:
            raise AbiCallError(entry, code, msg)

    def out(self, entry, ctype, *args):
        """Call an entry whose last argument is an out-pointer of `ctype`; return what it wrote."""
        p = ffi.new(ctype + " *")
        self(entry, *args, p)
        return p[0]


def device_handle(dev):
    return ffi.cast("pyg_device *", dev.handle_address)


class Buffer:
    """A device buffer with its info (base may be NULL: address the bytes through buffer+offset)."""

    def __init__(self, t, dev, size, flags=A.BUFFER_DEVICE):
        self.t, self.size = t, size
        self.handle = t.out("buffer_alloc", "pyg_buffer *", dev, size, flags)
        info = ffi.new("pyg_buffer_info *")
        info.struct_size = ffi.sizeof("pyg_buffer_info")
        t("buffer_get_info", self.handle, info)
        self.base = info.base

    def free(self):
        if self.handle is not None:
            self.t.api.buffer_free(self.handle)
            self.handle = None


def f32_tensor(buf, n, name, op=A.OP_NONE, src=(), params=()):
    """A contiguous f32 [rows, 1024] descriptor over the first n floats of `buf` (n % 1024 == 0)."""
    t = ffi.new("pyg_tensor *")
    t.type, t.op = A.TYPE_F32, op
    t.ne[0], t.ne[1], t.ne[2], t.ne[3] = 1024, n // 1024, 1, 1
    t.nb[0], t.nb[1] = 4, 4096
    t.nb[2] = t.nb[3] = 4096 * (n // 1024)
    for i, s in enumerate(src):
        t.src[i] = s
    for i, w in enumerate(params):
        t.op_params[i] = w
    t.buffer = buf.handle
    t.offset = 0
    t.data = buf.base if buf.base != ffi.NULL else ffi.NULL
    t.name = name.encode()[: A.MAX_NAME - 1]
    t.flags = A.TENSOR_FLAG_OUTPUT if op != A.OP_NONE else A.TENSOR_FLAG_INPUT
    return t


def f32_bits(x):
    return int.from_bytes(ffi.buffer(ffi.new("float *", x))[:], "little", signed=True)


class Plan:
    """A graph plan of `k` chained scale nodes, each adding 1: dst = src + k (exact for small
    integer values), ping-ponging between `dst` and `tmp` so the chain's last node writes `dst`.
    None of it exists unless the device supports the scale node (`Plan.make` returns None)."""

    def __init__(self, t, dev, nodes, keep):
        self.t, self.keep = t, keep
        g = ffi.new("pyg_graph *")
        arr = ffi.new("pyg_tensor *[]", nodes)
        g.struct_size, g.n_nodes, g.nodes, g.id = ffi.sizeof("pyg_graph"), len(nodes), arr, id(self)
        self.keep += [g, arr]
        self.handle = t.out("graph_plan_create", "pyg_graph_plan *", dev, g)

    @classmethod
    def make(cls, t, dev, src, dst, tmp, n, k):
        leaf = f32_tensor(src, n, "src")
        prev, keep = leaf, [leaf]
        bufs = [dst if (k - 1 - i) % 2 == 0 else tmp for i in range(k)]
        for i in range(k):
            node = f32_tensor(bufs[i], n, f"add1_{i}", op=A.OP_SCALE, src=[prev],
                              params=[f32_bits(1.0), f32_bits(1.0)])
            if i == 0 and not t.api.device_supports_op(dev, node):
                return None
            keep.append(node)
            prev = node
        return cls(t, dev, keep, keep)

    def compute(self, stream):
        self.t("graph_plan_compute", self.handle, stream)

    def destroy(self):
        if self.handle is not None:
            self.t.api.graph_plan_destroy(self.handle)
            self.handle = None
