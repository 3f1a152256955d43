"""REQUIREMENTS.md rules a host can check on a plugin library without computing (R1-R6).

Each check returns (rule, ok, detail), ok True, False or None (not applicable here: the detail says
why). Checks that could crash the process if the plugin breaks the rule (R3, R6) run in a child
process, so a crash is reported as a failure naming the entry instead of ending the check."""
import os
import re
import subprocess
import sys

from .. import _abi_consts as A
from .abi import AbiCallError, Table, device_handle, ffi

# Libraries a plugin may need at load time (R2): the C and C++ runtimes and the loader.
_SYSTEM_LIBS = re.compile(r"^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|ld-linux[\w.-]*|libmvec)"
                          r"\.so(\.\d+)*$")
_NAME_RE = re.compile(r"^[a-z0-9_]+$")


def _tool(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def r1_one_symbol(path):
    out = _tool(["nm", "-D", "--defined-only", path])
    if out is None:
        return "R1 one exported symbol", None, "skipped: nm not found"
    exported = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
    return "R1 one exported symbol", exported == ["pyg_plugin_get_api"], f"exported: {exported}"


def r2_always_loads(path, plugin):
    """The library needs nothing but the system runtime to load (the vendor runtime is opened in
    plugin_init), and an unavailable plugin says why."""
    out = _tool(["readelf", "-d", path])
    if out is None:
        return "R2 loads without the vendor runtime", None, "skipped: readelf not found"
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    vendor = [n for n in needed if not _SYSTEM_LIBS.match(n)]
    if vendor:
        return "R2 loads without the vendor runtime", False, f"loading needs {vendor} (dlopen them in plugin_init)"
    if not plugin.available and not (plugin.unavailable_reason or "").strip():
        return "R2 loads without the vendor runtime", False, "unavailable without saying why"
    state = "available" if plugin.available else f"unavailable here: {plugin.unavailable_reason}"
    return "R2 loads without the vendor runtime", True, f"needs only {needed or 'nothing'}; {state}"


_CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from pyggml._ffi import ffi
ffi.cdef("const pyg_plugin_api *pyg_plugin_get_api(const pyg_host_info *host);")
lib = ffi.dlopen({path!r})
host = ffi.new("pyg_host_info *")
host.struct_size, host.abi_major, host.abi_minor = ffi.sizeof("pyg_host_info"), {major}, 0
api = lib.pyg_plugin_get_api(host)
print("table", int(api != ffi.NULL), flush=True)
if api != ffi.NULL and {destroy}:
    for entry in ("error_destroy", "stream_destroy", "event_destroy", "buffer_free", "graph_plan_destroy"):
        print("calling", entry, flush=True)
        getattr(api, entry)(ffi.NULL)
        print("returned", entry, flush=True)
"""


def _child(path, major, destroy):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = _CHILD.format(root=root, path=os.path.abspath(path), major=major, destroy=destroy)
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None, "timed out"
    return r.returncode, r.stdout + r.stderr[-500:]


def r3_entry_never_fails(path):
    """pyg_plugin_get_api returns the table for a host of any version (here: major 99)."""
    rc, out = _child(path, 99, False)
    ok = rc == 0 and "table 1" in out
    return "R3 entry never fails", ok, ("returned the table to a host speaking ABI 99.0" if ok else
                                        f"for a host speaking ABI 99.0 (exit {rc}): {out.strip()[-300:]}")


def r4_frozen_prefix(plugin):
    size = Table(plugin).api.struct_size
    prefix = ffi.offsetof("pyg_plugin_api", "error_destroy") + ffi.sizeof("void *")
    ok = size >= prefix and bool(_NAME_RE.match(plugin.name))
    return "R4 frozen prefix and name", ok, f"struct_size {size} (prefix {prefix}), name {plugin.name!r}"


def r5_oom_is_an_error(plugin):
    out = []
    t = Table(plugin)
    for d in plugin.devices:
        rule = f"R5 OOM is an error ({d})"
        try:
            buf = t.out("buffer_alloc", "pyg_buffer *", device_handle(d), 1 << 62, A.BUFFER_DEVICE)
        except AbiCallError as e:
            out.append((rule, e.code == A.ERR_OUT_OF_MEMORY, f"error {e.code}: {e.msg}"))
        else:
            t.api.buffer_free(buf)
            out.append((rule, False, "a 4 EiB buffer_alloc succeeded"))
    return out


def r6_null_destroys(path):
    rc, out = _child(path, A.ABI_MAJOR, True)
    calls = re.findall(r"calling (\w+)", out)
    returned = re.findall(r"returned (\w+)", out)
    if rc == 0 and len(returned) == 5:
        return "R6 destroy(NULL) is a no-op", True, "error/stream/event/buffer/plan destroy(NULL) returned"
    where = calls[-1] if calls and (not returned or calls[-1] != returned[-1]) else "?"
    return "R6 destroy(NULL) is a no-op", False, f"{where}(NULL) crashed or failed (exit {rc}): {out.strip()[-300:]}"


def r6_in_process(plugin):
    """R6 for a plugin without a library (a Python plugin): the destroys with NULL, here."""
    api = Table(plugin).api
    for entry in ("error_destroy", "stream_destroy", "event_destroy", "buffer_free", "graph_plan_destroy"):
        getattr(api, entry)(ffi.NULL)
    return "R6 destroy(NULL) is a no-op", True, "error/stream/event/buffer/plan destroy(NULL) returned"


def library_rules(path, plugin):
    """R1-R6 on a plugin library (a .so)."""
    out = [r1_one_symbol(path), r2_always_loads(path, plugin), r3_entry_never_fails(path), r4_frozen_prefix(plugin)]
    out += r5_oom_is_an_error(plugin) if plugin.available else []
    out.append(r6_null_destroys(path))
    return out
