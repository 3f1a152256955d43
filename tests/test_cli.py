"""The `pyggml` command: every subcommand's --help lists all its options, an unknown option is an
error, --version, and run/chat on a synthetic model (no chat template: run completes raw text,
chat says why it cannot)."""
import argparse
import io
import os
import subprocess
import sys

import pytest

import pyggml
from pyggml import cli
from pyggml.cli_text import cmd_chat, cmd_run
from pyggml.synth import write_synth_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUBCOMMANDS = ("devices", "check", "bench", "synth", "run", "chat")


def _subparsers():
    ap = cli.build_parser()
    act = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return ap, act.choices


def test_every_option_is_in_its_help(capsys):
    ap, subs = _subparsers()
    assert set(subs) == set(SUBCOMMANDS)
    for name, sp in subs.items():
        with pytest.raises(SystemExit) as e:
            cli.main([name, "--help"])
        assert e.value.code == 0
        text = capsys.readouterr().out
        for a in sp._actions:
            if a.help == argparse.SUPPRESS:
                continue
            for opt in a.option_strings:
                assert opt in text, (name, opt)
    bench_help = subs["bench"].format_help()
    for opt in ("-p", "--n-prompt", "-n", "--n-gen", "--attn", "--no-peer", "-m", "-t", "-d"):
        assert opt in bench_help
    run_help = subs["run"].format_help()
    for opt in ("--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "--seed", "--stop", "--raw", "-n"):
        assert opt in run_help


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_unknown_option_is_an_error(name, capsys):
    args = {"check": ["x.so"], "synth": ["out.gguf"], "run": ["-m", "x", "-p", "y"], "chat": ["-m", "x"]}.get(name, [])
    with pytest.raises(SystemExit) as e:
        cli.main([name, *args, "--bogus"])
    assert e.value.code == 2
    assert "--bogus" in capsys.readouterr().err


def test_version_and_devices_from_another_directory():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pyggml", "--version"], cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"pyggml {pyggml.__version__}"
    r = subprocess.run([sys.executable, "-m", "pyggml", "devices"], cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("cpu:0"), r.stdout + r.stderr
    # no plugin at all (the wheel without its CPU plugin): an error, not silence and exit 0
    r = subprocess.run([sys.executable, "-m", "pyggml", "devices"], cwd="/", capture_output=True, text=True,
                       env=dict(env, PYGGML_PLUGINS="nosuchplugin"))
    assert r.returncode == 1 and "no usable device" in r.stderr, r.stdout + r.stderr


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("cli") / "tiny.gguf")
    write_synth_model(p, "tiny", "q8_0", seed=4, progress=False)
    return p


def _args(*argv):
    return cli.build_parser().parse_args(list(argv))


def test_run_and_chat_on_a_model_without_template(tiny, capsys):
    out, err = io.StringIO(), io.StringIO()
    rc = cmd_run(_args("run", "-m", tiny, "-p", "hello", "-n", "5", "-c", "64"), out, err)
    assert rc == 0
    assert out.getvalue().endswith("\n") and len(out.getvalue()) > 1
    assert "time to first token" in err.getvalue() and "5 tokens generated" in err.getvalue()
    rc = cmd_chat(_args("chat", "-m", tiny, "-c", "64", "-q"), io.StringIO("hi\n"), io.StringIO(), io.StringIO())
    assert rc == 1 and "no chat template" in capsys.readouterr().err


def test_run_errors(tiny, capsys, tmp_path):
    assert cli.main(["run", "-m", tiny]) == 2
    assert "-p TEXT or -f FILE" in capsys.readouterr().err
    assert cli.main(["run", "-m", str(tmp_path / "none.gguf"), "-p", "x"]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    assert cli.main(["run", "-m", str(bad), "-p", "x", "-q"]) == 1
    assert "GGUFError" in capsys.readouterr().err
    assert cli.main(["run", "-m", tiny, "-p", "x", "--top-p", "0", "-q"]) == 1
    assert "top_p" in capsys.readouterr().err
