"""Plugin isolation: what the loader does before a library enters this process.

1. `elf_problem(path)`: the file must be an ELF shared object for this interpreter's machine,
   class and byte order, with its program headers, loadable segments and section headers inside
   the file. dlopen of a truncated library maps pages past the end of the file and dies with
   SIGBUS on the first touch; this catches it first.
2. `probe(path)`: a plugin not seen before is loaded in a child process first (`python -m
   pyggml._probe PATH`: dlopen, the entry call, plugin_init, the devices), with a timeout. A
   crash (a segfaulting entry, an aborting constructor) or a hang (a plugin_init that never
   returns) marks the plugin unusable with the reason; this process carries on.
3. Verdicts are cached by real path, size and mtime (and this pyggml's ABI version) in
   `$XDG_CACHE_HOME/pyggml/plugin-probes.json` (default `~/.cache`), falling back to a per-user
   folder in the temp dir, then to memory only; a rebuilt plugin is probed again.
"""
from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import tempfile

PROBE_TIMEOUT_S = 30.0          # a real GPU runtime may take seconds to initialise
_FORMAT = 1                     # bump when the verdict layout changes

_memory_cache: dict = {}


# ---------------------------------------------------------------- ELF

def _elf_ident(path):
    with open(path, "rb") as f:
        return f.read(64)


def _host_ident():
    """(class, data, machine) of the running interpreter, or None when it is not ELF."""
    try:
        h = _elf_ident(os.path.realpath(sys.executable))
    except OSError:
        return None
    if h[:4] != b"\x7fELF" or len(h) < 20:
        return None
    end = "<" if h[5] == 1 else ">"
    return h[4], h[5], struct.unpack_from(end + "H", h, 18)[0]


def elf_problem(path) -> str | None:
    """Why `path` cannot be a loadable shared library here, or None when it looks sound."""
    host = _host_ident()
    if host is None:
        return None                                  # not an ELF platform: dlopen decides
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
            if head[:4] != b"\x7fELF":
                return "not an ELF file (bad magic)"
            if len(head) < 52:
                return f"truncated ELF header ({size} bytes)"
            cls, data = head[4], head[5]
            if (cls, data) != host[:2]:
                return (f"ELF class/byte order {cls}/{data} is not this interpreter's {host[0]}/{host[1]} "
                        f"(a 32-bit or foreign library)")
            end = "<" if data == 1 else ">"
            if cls == 2:
                if len(head) < 64:
                    return f"truncated ELF header ({size} bytes)"
                e_type, e_machine = struct.unpack_from(end + "HH", head, 16)
                phoff, shoff = struct.unpack_from(end + "QQ", head, 32)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", head, 54)
                ph_fmt, ph_min = end + "II6Q", 56
            else:
                e_type, e_machine = struct.unpack_from(end + "HH", head, 16)
                phoff, shoff = struct.unpack_from(end + "II", head, 28)
                phentsize, phnum, shentsize, shnum = struct.unpack_from(end + "HHHH", head, 42)
                ph_fmt, ph_min = end + "8I", 32
            if e_type != 3:
                return f"ELF type {e_type} is not a shared object (ET_DYN)"
            if e_machine != host[2]:
                return f"built for ELF machine {e_machine}, this machine is {host[2]}"
            if phnum == 0 or phentsize < ph_min:
                return "no program headers"
            if phoff + phnum * phentsize > size:
                return f"program headers end at byte {phoff + phnum * phentsize}, past the end of the file ({size})"
            if shoff and shoff + shnum * shentsize > size:
                return f"section headers end at byte {shoff + shnum * shentsize}, past the end of the file ({size}): truncated"
            f.seek(phoff)
            table = f.read(phnum * phentsize)
        for i in range(phnum):
            ent = struct.unpack_from(ph_fmt, table, i * phentsize)
            if cls == 2:
                p_type, _, p_offset, _, _, p_filesz = ent[:6]
            else:
                p_type, p_offset, _, _, p_filesz = ent[:5]
            if p_type == 1 and p_offset + p_filesz > size:     # PT_LOAD
                return (f"loadable segment {i} [{p_offset}, {p_offset + p_filesz}) runs past the end of the file "
                        f"({size} bytes): truncated")
    except OSError as e:
        return f"cannot be read: {e.strerror or e}"
    except struct.error:
        return "malformed ELF headers"
    return None


# ---------------------------------------------------------------- the verdict cache

def _cache_path():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for d in (os.path.join(base, "pyggml"), os.path.join(tempfile.gettempdir(), f"pyggml-{os.getuid()}")):
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            if os.access(d, os.W_OK):
                return os.path.join(d, "plugin-probes.json")
        except OSError:
            continue
    return None


def _key(real, abi):
    st = os.stat(real)
    return f"{real}|{st.st_size}|{st.st_mtime_ns}|{abi[0]}.{abi[1]}|{_FORMAT}"


def _load_cache(path):
    if path is None:
        return {}
    try:
        with open(path) as f:
            d = json.load(f)
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _store(key, verdict):
    _memory_cache[key] = verdict
    path = _cache_path()
    if path is None:
        return
    d = _load_cache(path)
    d = {k: v for k, v in d.items() if os.path.exists(k.split("|", 1)[0])}    # forget removed files
    d[key] = verdict
    try:
        fd, tmp = tempfile.mkstemp(prefix=".plugin-probes.", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump(d, f)
        os.replace(tmp, path)
    except OSError:
        pass


def cached(real, abi):
    key = _key(real, abi)
    if key in _memory_cache:
        return _memory_cache[key]
    v = _load_cache(_cache_path()).get(key)
    if isinstance(v, dict) and "ok" in v:
        _memory_cache[key] = v
        return v
    return None


# ---------------------------------------------------------------- the probe

def probe(real, abi, timeout=None):
    """The verdict on plugin `real` (cached when seen before): {"ok": True} when it loads in a
    child process (or fails there with an ordinary PluginError, which the caller then reproduces
    safely in-process: errors are values), {"ok": False, "error": class name, "reason": text}
    when it crashed or hung there."""
    v = cached(real, abi)
    if v is not None:
        return v
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    if not sys.executable:
        return {"ok": True}                          # embedded without an interpreter to run
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))] + sys.path))
    try:
        out = subprocess.run([sys.executable, "-m", "pyggml._probe", real], capture_output=True, text=True,
                             timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        v = {"ok": False, "crash": True, "error": "PluginInitError",
             "reason": f"hung: loading it (dlopen, entry call, plugin_init) did not finish within {timeout:g} s "
                       f"in a probe process"}
    else:
        v = _verdict(out)
    if v.get("ok") or v.get("crash"):
        _store(_key(real, abi), v)      # ordinary errors are not cached: they may be transient
    return v


def _verdict(out):
    if out.returncode < 0:
        try:
            sig = signal.Signals(-out.returncode).name
        except ValueError:
            sig = f"signal {-out.returncode}"
        return {"ok": False, "crash": True, "error": "PluginLoadError",
                "reason": f"crashed ({sig}) while being loaded in a probe process"}
    lines = out.stdout.strip().splitlines()
    try:
        v = json.loads(lines[-1]) if lines else None
    except ValueError:
        v = None
    if not isinstance(v, dict) or "ok" not in v:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"ok": False, "crash": True, "error": "PluginLoadError",
                "reason": f"the probe process exited with status {out.returncode}: {tail[0][:300]}"}
    return v


def _main(path):
    """Child side: load the plugin here (no probe) and print the verdict as one JSON line."""
    from pyggml import _plugin, errors
    try:
        p = _plugin.load_plugin(path, probe=False)
        v = {"ok": True, "name": p.name, "devices": len(p.devices)}
    except errors.PluginError as e:
        v = {"ok": False, "error": type(e).__name__, "reason": str(e)}
    sys.stdout.write("\n" + json.dumps(v) + "\n")
    sys.stdout.flush()
    os._exit(0)                     # no atexit / destructors of a plugin that may misbehave there


if __name__ == "__main__":
    _main(sys.argv[1])
