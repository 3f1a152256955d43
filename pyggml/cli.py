"""The `pyggml` command: devices, check, bench, synth, run, chat (`pyggml COMMAND --help`)."""
import argparse
import os
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
    if not pg.devices():
        from pyggml._plugin import _package_plugin_dir
        print(f"no usable device: no plugin library found or none has a device (searched PYGGML_PLUGIN_PATH, "
              f"{_package_plugin_dir()}, and the pyggml.plugins entry points)", file=sys.stderr)
        return 1
    return 0


def _cmd_check(args):
    """Conformance of one plugin: every checkable rule of REQUIREMENTS.md (pyggml/conformance/check.py)."""
    from pyggml.conformance import check
    return check.main(args)


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


def _cmd_synth(args):
    from pyggml import synth
    return synth.run(args)


def build_parser():
    """The parser of every subcommand; each lists all its options in --help, and an option a
    subcommand does not know is an error."""
    from pyggml import __version__, bench_model, cli_text, synth
    from pyggml.conformance.check import add_arguments as add_check_arguments
    ap = argparse.ArgumentParser(prog="pyggml", description="ggml-style graphs on run-time loaded backends")
    ap.add_argument("-V", "--version", action="version", version=f"pyggml {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    d = sub.add_parser("devices", help="list plugins and devices (and why a plugin is unusable)",
                       description="list plugins and devices (and why a plugin is unusable)")
    d.set_defaults(func=_cmd_devices)
    c = sub.add_parser("check", help="run the conformance suite on a plugin (library or Python plugin)",
                       description="check a plugin: every checkable rule of include/pyggml/REQUIREMENTS.md")
    add_check_arguments(c)
    c.set_defaults(func=_cmd_check)
    b = sub.add_parser("bench", help="benchmarks (ops; a GGUF model with -m)",
                       description="op benchmark, or with -m a model benchmark (llama-bench conventions)")
    b.add_argument("-d", "--device", default="cpu",
                   help="device, or comma-separated devices for a model run (cuda:0,cpu)")
    b.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    b.add_argument("-r", "--reps", type=int, default=5, help="timed repetitions (default 5)")
    b.add_argument("-m", "--model", default=None,
                   help="a GGUF model file, or synth:SHAPE:WTYPE (generated once, cached in ~/.cache/pyggml/models)")
    b.add_argument("-O", "--option", action="append", default=[], metavar="DEVICE:KEY=VALUE",
                   help="a device option before anything runs, e.g. cuda:graphs=0 (every cuda device) or "
                        "cuda:1:fuse=0; the options of each plugin are listed in its README")
    b.add_argument("--quick", action="store_true", help="small shapes (smoke test)")
    b.add_argument("--ops", action="store_true", help="op benchmark (the default without -m)")
    b.add_argument("--no-quant", action="store_true", help="skip the per-weight-type mul_mat section")
    b.add_argument("-o", "--output", default="bench/results", help="folder for the JSON results ('' = none)")
    bench_model.add_model_arguments(b)
    b.set_defaults(func=_cmd_bench)
    s = synth.add_arguments(sub.add_parser("synth", help="write a synthetic LLaMA GGUF",
                                           description="write a synthetic LLaMA GGUF model"))
    s.set_defaults(func=_cmd_synth)
    cli_text.add_parsers(sub)
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
