"""`pyggml check PLUGIN`: every rule of include/pyggml/REQUIREMENTS.md that a host can check, each
line naming its rule: the library rules (R1-R6), the op suite (R8, R9), the asynchronous rules
(R13-R18). PLUGIN is a plugin library (libpyggml-NAME.so) or a Python plugin (a .py file defining a
pyggml.plugin.Backend). Exit status 1 when a rule failed."""
import json
import os
import time

from .runner import run_all


def _line(echo, results, rule, ok, detail):
    results.append({"rule": rule, "ok": ok, "detail": detail})
    echo(f"{'pass' if ok else 'skip' if ok is None else 'FAIL'} {rule}: {detail}")


def add_arguments(p):
    p.add_argument("plugin", help="path to libpyggml-NAME.so, or to a Python plugin (.py)")
    p.add_argument("-v", "--verbose", action="store_true", help="print passing op cases too")
    p.add_argument("--no-ops", action="store_true", help="skip the op suite (R8, R9)")
    p.add_argument("--no-async", action="store_true", help="skip the asynchronous rules (R13-R18)")
    p.add_argument("--async-mb", type=int, default=None, help="MiB per buffer in the async rules "
                   "(default: 32 on GPUs, 8 on the CPU, 4 on lavapipe)")
    p.add_argument("--async-rounds", type=int, default=None, help="rounds per async rule (default: 20 on GPUs)")
    p.add_argument("-O", "--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a device option set on every device of the plugin before the checks")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")


def load(path):
    """(plugin, is_library) for a library path or a Python plugin file."""
    import pyggml as pg
    if path.endswith(".py"):
        from .. import plugin as pyplugin
        return pyplugin.load(path), False
    return pg.load_plugin(path), True


def main(args, echo=print):
    from . import async_rules, rules        # cffi: only `pyggml check` needs it, not the other commands
    import pyggml as pg
    path = os.path.abspath(args.plugin)
    results = []
    try:
        p, is_lib = load(path)
    except (pg.PyggmlError, OSError, ImportError) as e:
        echo(f"FAIL load: {type(e).__name__}: {e}")
        return 2
    echo(f"plugin {p.name} {p.version} ABI {p.abi_major}.{p.abi_minor}: {path}")
    if is_lib:
        for r in rules.library_rules(path, p):
            _line(echo, results, *r)
    else:
        _line(echo, results, "R1-R3 library rules", None, "not applicable: a Python plugin (no shared library)")
        _line(echo, results, *rules.r4_frozen_prefix(p))
        _line(echo, results, *rules.r6_in_process(p))
        for r in rules.r5_oom_is_an_error(p) if p.available else []:
            _line(echo, results, *r)
    if not p.available:
        _line(echo, results, "R8, R9, R13-R18 device rules", None, f"plugin unavailable here: {p.unavailable_reason}")
    for opt in args.option:
        key, sep, value = opt.partition("=")
        for d in p.devices:
            try:
                if not sep:
                    raise pg.PyggmlError(f"-O {opt!r}: expected KEY=VALUE")
                d.set_option(key, value)
            except pg.PyggmlError as e:
                echo(f"FAIL option {opt} on {d}: {e}")
                return 2
        echo(f"option {opt} set on every device")
    for d in p.devices:
        if not args.no_ops:
            echo(f"--- ops on {d} ({d.description})")
            quiet = (lambda s: echo(s) if not s.startswith("pass") else None)
            counts = run_all(d, echo=echo if args.verbose else quiet)
            _line(echo, results, f"R8 R9 op suite ({d})", counts["fail"] == 0,
                  f"{counts['pass']} passed, {counts['fail']} failed, {counts['unsupported']} unsupported")
        if not args.no_async:
            echo(f"--- asynchronous rules on {d}")
            for r in async_rules.check_device(d, args.async_mb, args.async_rounds):
                _line(echo, results, *r)
    failed = [r for r in results if r["ok"] is False]
    echo(f"{p.name}: {sum(r['ok'] is True for r in results)} passed, {len(failed)} failed, "
         f"{sum(r['ok'] is None for r in results)} skipped")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "plugin": p.name, "path": path,
                       "devices": [f"{d} ({d.description})" for d in p.devices], "results": results}, f, indent=1)
    return 1 if failed else 0
