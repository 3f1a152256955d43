# cython: language_level=3
"""Plugin loader: finds libpyggml-*.so files, opens them with RTLD_LOCAL, negotiates the ABI and
wraps their devices. After loading, every call into a plugin is a plain C call through the
table (pyg_plugin_api); ctypes is used once, to find the entry symbol."""
import ctypes
import logging
import os
import re

from libc.stdint cimport uintptr_t, uint64_t, int32_t
from libc.string cimport memset

from pyggml._abi cimport *
from pyggml import errors as E
from pyggml import _probe

cdef extern from "_abi_check.h" nogil:
    size_t pyg_host_prefix_size()
    const char *pyg_host_missing_1_0(const pyg_plugin_api *a)
    int pyg_host_has_stream_set_option(const pyg_plugin_api *a)

_log = logging.getLogger("pyggml")
_LEVELS = {PYG_LOG_DEBUG: logging.DEBUG, PYG_LOG_INFO: logging.INFO, PYG_LOG_WARN: logging.WARNING,
           PYG_LOG_ERROR: logging.ERROR}

# Plugins may log from their own worker threads while the host waits on them holding the GIL, so
# the callback never takes the GIL: messages go into a small ring under a mutex and are emitted
# through Python's logging by drain_log(), which the loader and scheduler call after their C calls. A full ring
# drops debug lines before anything more severe (drain_log warns how many were dropped).
cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *m, void *attr)
    int pthread_mutex_lock(pthread_mutex_t *m)
    int pthread_mutex_unlock(pthread_mutex_t *m)

cdef extern from "<stdio.h>" nogil:
    int snprintf(char *s, size_t n, const char *fmt, ...)

DEF LOG_RING = 128
DEF LOG_LEN = 480

cdef struct _LogEntry:
    int32_t level
    char text[LOG_LEN]

cdef _LogEntry _ring[LOG_RING]
cdef int _ring_head = 0
cdef int _ring_count = 0
cdef int _ring_dropped = 0
cdef pthread_mutex_t _ring_mu
pthread_mutex_init(&_ring_mu, NULL)


cdef void _host_log(void *user, int32_t level, const char *plugin, const char *msg) noexcept nogil:
    global _ring_head, _ring_count, _ring_dropped
    pthread_mutex_lock(&_ring_mu)
    cdef int i
    cdef const char *p = plugin
    cdef const char *m = msg
    if p == NULL:
        p = "?"
    if m == NULL:
        m = ""
    cdef int j, k
    if _ring_count == LOG_RING:
        # Full: one message is lost. A debug line (kernel choices: hundreds per plan) gives way to a more severe
        # one (a pipeline's statistics, a warning), so the oldest debug line goes and the later ones move up;
        # with none queued, or the new message debug too, the new one goes.
        j = -1
        if level > PYG_LOG_DEBUG:
            for k in range(LOG_RING):
                if _ring[(_ring_head + k) % LOG_RING].level <= PYG_LOG_DEBUG:
                    j = k
                    break
        _ring_dropped += 1
        if j >= 0:
            for k in range(j, LOG_RING - 1):
                _ring[(_ring_head + k) % LOG_RING] = _ring[(_ring_head + k + 1) % LOG_RING]
            _ring_count -= 1
    if _ring_count < LOG_RING:
        i = (_ring_head + _ring_count) % LOG_RING
        _ring[i].level = level
        snprintf(_ring[i].text, LOG_LEN, "%s: %s", p, m)
        _ring_count += 1
    pthread_mutex_unlock(&_ring_mu)


def _log_for_test(int level, bytes text):
    """Queue one message as a plugin's log callback would (tests of the ring)."""
    _host_log(NULL, level, b"test", text)


def drain_log():
    """Emit the plugins' queued log messages through the 'pyggml' logger."""
    global _ring_head, _ring_count, _ring_dropped
    cdef _LogEntry e
    msgs = []
    pthread_mutex_lock(&_ring_mu)
    while _ring_count > 0:
        e = _ring[_ring_head]
        _ring_head = (_ring_head + 1) % LOG_RING
        _ring_count -= 1
        msgs.append((e.level, (<bytes>e.text).decode(errors="replace")))
    dropped = _ring_dropped
    _ring_dropped = 0
    pthread_mutex_unlock(&_ring_mu)
    for level, text in msgs:
        _log.log(_LEVELS.get(level, logging.ERROR), "%s", text)
    if dropped:
        _log.warning("%d plugin log messages were dropped (ring full)", dropped)
    return len(msgs)


cdef pyg_host_info _host
memset(&_host, 0, sizeof(_host))
_host.struct_size = sizeof(pyg_host_info)
_host.abi_major = PYG_ABI_MAJOR
_host.abi_minor = PYG_ABI_MINOR
_host.log = _host_log
_host.log_user_data = NULL

ABI_VERSION = (PYG_ABI_MAJOR, PYG_ABI_MINOR)
# Newer plugins of the same major are accepted up to this many minors ahead (plugin.h, CHANGELOG.md).
ABI_MINOR_WINDOW = PYG_ABI_MINOR_WINDOW

_CODE_EXC = {
    PYG_ERR_INVALID_ARGUMENT: E.PluginError,
    PYG_ERR_UNSUPPORTED: E.UnsupportedError,
    PYG_ERR_OUT_OF_MEMORY: E.DeviceOutOfMemory,
    PYG_ERR_NO_DEVICE: E.DeviceUnavailableError,
    PYG_ERR_DEVICE: E.DeviceError,
    PYG_ERR_ABI: E.AbiMismatchError,
    PYG_ERR_INTERNAL: E.PluginError,
    PYG_ERR_SANITIZER: E.SanitizerError,
}
_CODE_NAME = {
    PYG_ERR_INVALID_ARGUMENT: "invalid argument", PYG_ERR_UNSUPPORTED: "unsupported",
    PYG_ERR_OUT_OF_MEMORY: "out of memory", PYG_ERR_NO_DEVICE: "no device",
    PYG_ERR_DEVICE: "device error", PYG_ERR_ABI: "ABI mismatch",
    PYG_ERR_INTERNAL: "internal error", PYG_ERR_SANITIZER: "sanitizer",
}


cdef tuple _take_error(const pyg_plugin_api *api, pyg_error *err):
    cdef int code = api.error_code(err)
    cdef const char *m = api.error_message(err)
    msg = (<bytes>m).decode(errors="replace") if m != NULL else ""
    api.error_destroy(err)
    return code, msg


cdef int check(const pyg_plugin_api *api, pyg_error *err, str plugin, str what) except -1:
    if err == NULL:
        return 0
    drain_log()
    code, msg = _take_error(api, err)
    exc = _CODE_EXC.get(code, E.PluginError)
    raise exc(f"{plugin}: {what}: {_CODE_NAME.get(code, f'error {code}')}: {msg}",
              plugin=plugin, code=code)


cdef class Plugin:
    """A loaded plugin library. Never unloaded; one object per file per process."""

    def __repr__(self):
        state = f"{len(self.devices)} device(s)" if self.available else f"unavailable: {self.unavailable_reason}"
        return f"<pyggml.Plugin {self.name} {self.version} ABI {self.abi_major}.{self.abi_minor} {state}>"

    @property
    def available(self):
        return self.unavailable_reason is None

    @property
    def api_address(self):
        """Address of the plugin's pyg_plugin_api table (for cffi: the conformance checks)."""
        return <uintptr_t>self.api


cdef class Device:
    """One device of a plugin: `str(dev)` is "name:index", e.g. "cpu:0", "cuda:1"."""

    def __str__(self):
        return f"{self.plugin.name}:{self.index}"

    def __repr__(self):
        gib = f", {self.memory_total / 2**30:.0f} GiB" if self.memory_total and self.kind != PYG_DEVICE_CPU else ""
        return f"{self}({self.description}{gib})"

    @property
    def name(self):
        return str(self)

    def has_cap(self, uint64_t bit):
        return (self.caps & bit) != 0

    @property
    def handle_address(self):
        """Address of the plugin's pyg_device handle (for cffi: the conformance checks)."""
        return <uintptr_t>self.dev

    def set_option(self, key, value):
        """Set a device option (CPU: "n_threads", "kernels"); unknown keys raise UnsupportedError."""
        k = str(key).encode()
        v = str(value).encode()
        check(self.plugin.api, self.plugin.api.device_set_option(self.dev, k, v),
              self.plugin.name, f"set option {key}={value}")

    def memory(self):
        """(free, total) bytes as the device reports them."""
        cdef uint64_t free_b = 0, total_b = 0
        check(self.plugin.api, self.plugin.api.device_memory(self.dev, &free_b, &total_b),
              self.plugin.name, "device_memory")
        return free_b, total_b


cdef int stream_set_option(Device dev, pyg_stream *s, str key, str value) except -1:
    cdef const pyg_plugin_api *api = dev.plugin.api
    if not pyg_host_has_stream_set_option(api):
        dev.set_option(key, value)
        return 0
    k = key.encode()
    v = value.encode()
    check(api, api.stream_set_option(s, k, v), dev.plugin.name, f"set stream option {key}={value}")
    return 0


_loaded = {}          # realpath -> Plugin
_by_name = {}         # plugin name -> Plugin (first one wins)
_discovered = False
_failures = []        # (path, message) of plugins discovery could not load
_shadowed = []        # (name, used path, ignored path)
_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_SPEC_RE = re.compile(r"([a-z0-9_]+)(?::([0-9]{1,9}))?")


def _plugin_name_of(path):
    base = os.path.basename(path)
    m = re.match(r"^libpyggml-([a-z0-9_]+)\.so", base)
    return m.group(1) if m else None


def load_plugin(path, probe=True):
    """Load the plugin library at `path` (or return it if already loaded).

    Raises PluginNotFoundError, PluginLoadError, MissingEntryPointError, AbiMismatchError or
    PluginInitError. A plugin that loads but finds no device (no driver, no hardware) is returned
    with `available == False` and the reason in `unavailable_reason`.

    Before the library enters this process its ELF headers are checked, and a plugin not seen
    before (by path, size and mtime) is loaded in a child process first (pyggml._probe): one that
    crashes or hangs there raises PluginLoadError / PluginInitError with the reason, and this
    process never maps it. `probe=False` skips the child (the probe itself uses it)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise E.PluginNotFoundError(f"plugin file not found: {path}")
    real = os.path.realpath(path)
    if real in _loaded:
        return _loaded[real]
    if not os.path.isfile(real):
        raise E.PluginLoadError(f"{path}: not a file")
    bad = _probe.elf_problem(real)
    if bad is not None:
        raise E.PluginLoadError(f"{path}: cannot be loaded as a shared library: {bad}")
    if probe:
        v = _probe.probe(real, ABI_VERSION)
        if not v.get("ok") and v.get("crash"):
            exc = E.PluginInitError if v.get("error") == "PluginInitError" else E.PluginLoadError
            raise exc(f"{path}: unusable: {v.get('reason')}", plugin=_plugin_name_of(path))
    try:
        lib = ctypes.CDLL(real, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as e:
        raise E.PluginLoadError(f"{path}: cannot be loaded as a shared library: {e}") from None
    try:
        fn = lib.pyg_plugin_get_api
    except AttributeError:
        raise E.MissingEntryPointError(
            f"{path}: no entry symbol 'pyg_plugin_get_api' (is it a pyggml plugin? "
            f"build it with include/pyggml/plugin.h and export that one symbol)") from None
    return _accept_entry(ctypes.cast(fn, ctypes.c_void_p).value, path, real, lib)


def load_entry(uintptr_t address, origin, keepalive):
    """Load a plugin whose entry function (pyg_plugin_get_api) is at `address` rather than in a
    library: a Python plugin's cffi callback (pyggml.plugin). `origin` names it in messages (its
    file), `keepalive` is whatever must live as long as the process (its table and callbacks).
    The same negotiation, checks and plugin_init as load_plugin."""
    real = os.path.realpath(os.fspath(origin))
    if real in _loaded:
        return _loaded[real]
    return _accept_entry(address, origin, real, keepalive)


cdef _accept_entry(uintptr_t addr, path, real, keepalive):
    cdef pyg_plugin_get_api_fn entry = <pyg_plugin_get_api_fn>addr
    cdef const pyg_plugin_api *api
    with nogil:
        api = entry(&_host)
    if api == NULL:
        raise E.PluginLoadError(f"{path}: pyg_plugin_get_api returned NULL (REQUIREMENTS.md R3)")
    if api.struct_size < pyg_host_prefix_size():
        raise E.AbiMismatchError(f"{path}: plugin table is {api.struct_size} bytes, shorter than the "
                                 f"frozen prefix ({pyg_host_prefix_size()} bytes)")
    name = (<bytes>api.name).decode(errors="replace") if api.name != NULL else ""
    if not _NAME_RE.match(name):
        raise E.PluginLoadError(f"{path}: plugin name {name!r} is not [a-z0-9_]+ (R4)")
    file_name = _plugin_name_of(path)
    if file_name is not None and file_name != name:
        raise E.PluginLoadError(f"{path}: the library holds plugin '{name}'; name the file libpyggml-{name}.so "
                                f"(R4: device specs and PYGGML_PLUGINS use the table's name)", plugin=name)
    if api.abi_major != PYG_ABI_MAJOR or api.abi_minor > PYG_ABI_MINOR + ABI_MINOR_WINDOW:
        raise E.AbiMismatchError(
            f"{path}: plugin '{name}' was built for ABI {api.abi_major}.{api.abi_minor}; this pyggml "
            f"speaks {PYG_ABI_MAJOR}.{PYG_ABI_MINOR} (same major, minor up to "
            f"{PYG_ABI_MINOR + ABI_MINOR_WINDOW}); rebuild the plugin against this pyggml's headers",
            plugin=name, code=PYG_ERR_ABI)
    cdef const char *missing = pyg_host_missing_1_0(api)
    if missing != NULL:
        raise E.AbiMismatchError(f"{path}: plugin '{name}' lacks the ABI 1.0 entry "
                                 f"'{(<bytes>missing).decode()}'", plugin=name, code=PYG_ERR_ABI)

    cdef Plugin p = Plugin.__new__(Plugin)
    p.api = api
    p.name = name
    p.path = real
    p.version = (<bytes>api.version).decode(errors="replace") if api.version != NULL else "?"
    p.abi_major = api.abi_major
    p.abi_minor = api.abi_minor
    p.unavailable_reason = None
    p.devices = []
    p._lib = keepalive

    cdef pyg_error *err
    with nogil:
        err = api.plugin_init()
    if err != NULL:
        code, msg = _take_error(api, err)
        if code != PYG_ERR_NO_DEVICE:
            raise E.PluginInitError(f"{path}: plugin '{name}' failed to initialise: "
                                    f"{_CODE_NAME.get(code, f'error {code}')}: {msg}", plugin=name, code=code)
        p.unavailable_reason = msg or "no device"
    else:
        _init_devices(p)
    _loaded[real] = p
    _by_name.setdefault(name, p)
    return p


cdef _init_devices(Plugin p):
    cdef const pyg_plugin_api *api = p.api
    cdef int n = api.device_count()
    cdef pyg_device *dev
    cdef pyg_device_props props
    cdef Device d
    for i in range(n):
        dev = NULL
        check(api, api.device_get(i, &dev), p.name, f"device_get({i})")
        memset(&props, 0, sizeof(props))
        props.struct_size = sizeof(props)
        check(api, api.device_get_props(dev, &props), p.name, f"device_get_props({i})")
        d = Device.__new__(Device)
        d.plugin = p
        d.dev = dev
        d.index = i
        d.description = (<bytes>props.description).decode(errors="replace") if props.description != NULL else p.name
        d.kind = props.type
        d.caps = props.caps
        d.quirks = props.quirks
        d.memory_total = props.memory_total
        d.alignment = props.alignment if props.alignment else 64
        d.max_alloc = props.max_alloc
        p.devices.append(d)
    if n == 0:
        p.unavailable_reason = "the plugin reports no devices"


def _package_plugin_dir():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugins")


ENTRY_POINT_GROUP = "pyggml.plugins"


def _entry_point_paths():
    """Plugin files or folders named by installed packages: an entry point in the `pyggml.plugins`
    group names a str (a path) or a callable returning a path or a list of paths. One that cannot
    be loaded is recorded in failures(), not raised."""
    from importlib.metadata import entry_points
    try:
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:                       # Python < 3.10: a dict of groups
        eps = entry_points().get(ENTRY_POINT_GROUP, ())
    out = []
    for ep in eps:
        try:
            v = ep.load()
            v = v() if callable(v) else v
            out.extend([os.fspath(v)] if isinstance(v, (str, os.PathLike)) else [os.fspath(x) for x in v])
        except Exception as e:
            _failures.append((f"entry point {ep.name} = {ep.value}", f"{type(e).__name__}: {e}"))
    return out


def _candidates():
    """Plugin files in search order: PYGGML_PLUGIN_PATH entries, the package's folder, then the
    paths installed packages name under the `pyggml.plugins` entry-point group."""
    dirs = [d for d in os.environ.get("PYGGML_PLUGIN_PATH", "").split(os.pathsep) if d]
    dirs.append(_package_plugin_dir())
    dirs.extend(_entry_point_paths())
    out = []
    for d in dirs:
        if os.path.isfile(d):
            out.append(d)
        elif os.path.isdir(d):
            out.extend(os.path.join(d, f) for f in sorted(os.listdir(d))
                       if f.startswith("libpyggml-") and ".so" in f)
    return out


def _name_filter(name):
    only = [s.strip() for s in os.environ.get("PYGGML_PLUGINS", "").split(",") if s.strip()]
    off = [s.strip() for s in os.environ.get("PYGGML_PLUGINS_DISABLE", "").split(",") if s.strip()]
    return (not only or name in only) and name not in off


def discover(refresh=False):
    """Load every plugin on the search path once (explicit loads > PYGGML_PLUGIN_PATH > package >
    entry points).
    Plugins that fail to load are remembered in `failures()`, not raised."""
    global _discovered
    if _discovered and not refresh:
        return list(_by_name.values())
    del _shadowed[:]
    for path in _candidates():
        name = _plugin_name_of(path)
        if name is None or not _name_filter(name):
            continue
        used = _by_name.get(name)
        if used is not None:
            if os.path.realpath(path) != used.path:
                _shadowed.append((name, used.path, path))
                _log.warning("plugin %r: %s shadows %s (search order: PYGGML_PLUGIN_PATH, then the "
                             "package folder, then packages' pyggml.plugins entry points)", name, used.path, path)
            continue
        try:
            load_plugin(path)
        except E.PluginError as e:        # a later file of the same name may still load
            if all(p != path for p, _ in _failures):
                _failures.append((path, str(e)))
            _log.warning("plugin %r at %s is unusable: %s", name, path, e)
    _discovered = True
    return [p for p in _by_name.values() if _name_filter(p.name)]


def failures():
    """(path, message) for each plugin discovery could not load."""
    return list(_failures)


def shadowed():
    """(name, used path, ignored path) for each plugin file that discovery skipped because a file
    of the same plugin name came first in the search order (or it is a second copy)."""
    return list(_shadowed)


def plugins():
    """Loaded plugins (discovering them first)."""
    return discover()


def devices():
    """Every usable device of every loaded plugin, in load order."""
    return [d for p in discover() for d in p.devices]


def get_device(spec):
    """Resolve "cpu", "cpu:0", "cuda:1" or a Device to a Device."""
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str):
        raise E.TypeMismatchError(f"a device is a Device or a spec string like 'cpu' or 'cuda:1', "
                                  f"not {type(spec).__name__} {spec!r}")
    m = _SPEC_RE.fullmatch(spec)
    if m is None:
        raise E.ConfigError(f"device spec {spec!r} is not NAME or NAME:INDEX (e.g. 'cpu', 'cuda:1')")
    name, idx = m.group(1), m.group(2)
    discover()
    p = _by_name.get(name)
    if p is None:
        known = ", ".join(sorted(_by_name)) or "none"
        why = [f"{path}: {msg}" for path, msg in _failures if _plugin_name_of(path) == name]
        if why:
            raise E.PluginLoadError(f"plugin {name!r} is unusable: " + "; ".join(why), plugin=name)
        raise E.PluginNotFoundError(f"no plugin named {name!r} is loaded (loaded: {known})")
    if not p.available:
        raise E.DeviceUnavailableError(f"{name}: unavailable: {p.unavailable_reason}", plugin=name,
                                       code=PYG_ERR_NO_DEVICE)
    i = int(idx) if idx else 0
    if not 0 <= i < len(p.devices):
        raise E.DeviceUnavailableError(f"{name} has {len(p.devices)} device(s); no device {i}", plugin=name)
    return p.devices[i]
