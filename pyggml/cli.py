"""The `pyggml` command: devices, bench, check (and synth once models land)."""
import argparse
import os
import subprocess
import sys


def _cmd_devices(args):
    import pyggml as pg
    pg.discover()
    for p in pg.plugins():
        if p.available:
            for d in p.devices:
                gib = f", {d.memory_total / 2**30:.1f} GiB" if d.memory_total else ""
                print(f"{str(d):12s} {d.description}{gib}  [{p.path}]")
        else:
            print(f"{p.name + ':-':12s} unavailable: {p.unavailable_reason}  [{p.path}]")
    for path, msg in pg.failures():
        print(f"{'(failed)':12s} {msg}")
    for name, used, ignored in pg.shadowed():
        print(f"{'(shadowed)':12s} {ignored}: plugin {name!r} is taken from {used}")
    return 0


def _cmd_check(args):
    """Conformance of one plugin library: ABI rules, then every op case on each of its devices."""
    import pyggml as pg
    from pyggml.conformance import run_all
    failures = 0
    path = os.path.abspath(args.plugin)
    try:
        p = pg.load_plugin(path)
    except pg.PluginError as e:
        print(f"FAIL load: {e}")
        return 2
    print(f"plugin {p.name} {p.version} ABI {p.abi_major}.{p.abi_minor}: {path}")
    try:
        syms = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout.split()
        exported = [s for s in syms if not (len(s) == 1 or all(c in "0123456789abcdef" for c in s))]
        ok = exported == ["pyg_plugin_get_api"]
        print(f"{'pass' if ok else 'FAIL'} R1 one exported symbol: {exported}")
        failures += not ok
    except OSError:
        print("skip R1: nm not found")
    from pyggml._plugin import abi_rule_checks
    for rule, ok, detail in abi_rule_checks(p):
        print(f"{'pass' if ok else 'FAIL'} {rule}: {detail}")
        failures += not ok
    if not p.available:
        print(f"skip ops: plugin unavailable here: {p.unavailable_reason}")
        return 1 if failures else 0
    for d in p.devices:
        print(f"--- ops on {d} ({d.description})")
        counts = run_all(d, echo=print if args.verbose else (lambda s: print(s) if not s.startswith("pass") else None))
        print(f"{d}: {counts['pass']} passed, {counts['fail']} failed, {counts['unsupported']} unsupported")
        failures += counts["fail"]
    return 1 if failures else 0


def apply_device_options(specs):
    """Device options from the command line: each "DEVICE:KEY=VALUE", DEVICE a plugin name (every
    device of it) or "name:index" (one device), e.g. "cuda:graphs=0", "cuda:1:fuse=0"."""
    import pyggml as pg
    for spec in specs:
        target, sep, value = spec.partition("=")
        dev, _, key = target.rpartition(":")
        if not sep or not dev or not key:
            raise pg.PyggmlError(f"-O {spec!r}: expected DEVICE:KEY=VALUE (e.g. cuda:graphs=0)")
        devs = [pg.get_device(dev)] if ":" in dev else pg.get_device(dev).plugin.devices
        for d in devs:
            d.set_option(key, value)


def _cmd_bench(args):
    from pyggml import bench_ops
    apply_device_options(args.option)
    if args.model:
        from pyggml import bench_model
        return bench_model.main(args)
    threads = args.threads or (os.cpu_count() if args.device.startswith("cpu") else None)
    print(f"# pyggml op benchmark on {args.device} ({threads or 'default'} threads), {args.reps} reps after a warm-up")
    triad, _ = bench_ops.stream_triad(n_threads=threads or 2)
    print(f"memory bandwidth (STREAM-style triad, {threads or 2} threads, same run): {triad:.1f} GB/s\n")
    rows = bench_ops.bench_ops(args.device, n_threads=threads, reps=args.reps, quick=args.quick)
    if not args.no_quant:
        rows += bench_ops.bench_quant(args.device, n_threads=threads, reps=args.reps, quick=args.quick)
    bench_ops.print_table(rows, bandwidth=triad)
    if args.output:
        for r in rows:
            if r["unit"] == "GB/s":
                r["fraction_of_triad"] = r["median"] / triad
        path = bench_ops.write_json(rows + [{"op": "stream triad", "unit": "GB/s", "median": triad}], args.output,
                                    args.device, threads, " ".join(sys.argv))
        print(f"\nresults: {path}")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(prog="pyggml", description="ggml-style graphs on run-time loaded backends")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("devices", help="list plugins and devices (and why a plugin is unusable)")
    c = sub.add_parser("check", help="run the conformance suite on a plugin library")
    c.add_argument("plugin", help="path to libpyggml-NAME.so")
    c.add_argument("-v", "--verbose", action="store_true", help="print passing cases too")
    b = sub.add_parser("bench", help="benchmarks (ops now; models with -m)")
    b.add_argument("-d", "--device", default="cpu",
                   help="device, or comma-separated devices for a model run (cuda:0,cpu)")
    b.add_argument("-t", "--threads", type=int, default=None)
    b.add_argument("-r", "--reps", type=int, default=5)
    b.add_argument("-m", "--model", default=None,
                   help="a GGUF model file, or synth:SHAPE:WTYPE (generated once, cached in ~/.cache/pyggml/models); "
                        "model options: -p N -n N --attn flash|softmax --no-peer")
    b.add_argument("-O", "--option", action="append", default=[], metavar="DEVICE:KEY=VALUE",
                   help="a device option before anything runs, e.g. cuda:graphs=0 (every cuda device) or "
                        "cuda:1:fuse=0; the options of each plugin are listed in its README")
    b.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    b.add_argument("--ops", action="store_true", help="op benchmark (the default without -m)")
    b.add_argument("--no-quant", action="store_true", help="skip the per-weight-type mul_mat section")
    b.add_argument("-o", "--output", default="bench/results", help="folder for the JSON results ('' = none)")
    sub.add_parser("synth", help="write a synthetic LLaMA GGUF (see `pyggml synth -h`)", add_help=False)
    args, rest = ap.parse_known_args(argv)
    args.rest = rest
    if args.cmd == "synth":
        from pyggml import synth
        return synth.main(rest)
    return {"devices": _cmd_devices, "check": _cmd_check, "bench": _cmd_bench}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
