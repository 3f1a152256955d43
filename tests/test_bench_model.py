"""`pyggml bench -m`: test lists, depths (llama-bench names), n_ctx sizing, the JSON results, and the
llama-bench peer's JSON mapped onto the same test names (a stand-in binary prints llama-bench's format)."""
import argparse
import json
import os
import stat
import sys

import pytest

import pyggml as pg
from pyggml import bench_model as bm
from pyggml import cli


def test_counts_tests_and_names():
    assert bm.parse_counts("512,4096", "-p") == [512, 4096]
    for bad in ("", "x", "-1", "5,,-2"):
        with pytest.raises(argparse.ArgumentTypeError):
            bm.parse_counts(bad, "-p")
    tests = bm.make_tests([512, 0], [128], [0, 4096])
    assert [bm.label(*t) for t in tests] == ["pp512", "pp512 @ d4096", "tg128", "tg128 @ d4096"]
    assert bm.default_n_ctx(tests) == 4608 and bm.default_n_ctx([("tg", 1, 0)]) == 256
    assert bm.make_tests([0], [0], [0]) == []


FAKE_LLAMA_BENCH = r'''#!{py}
import json, sys
a = sys.argv[1:]
arg = lambda k: a[a.index(k) + 1]
assert arg("-fa") == "1" and arg("-o") == "json" and arg("-ngl") == "0", a
rows = []
for p in map(int, arg("-p").split(",")):
    for d in map(int, arg("-d").split(",")):
        rows.append({{"n_prompt": p, "n_gen": 0, "n_depth": d, "avg_ts": 100.0 + d, "samples_ts": [100.0 + d] * 2}})
for n in map(int, arg("-n").split(",")):
    for d in map(int, arg("-d").split(",")):
        rows.append({{"n_prompt": 0, "n_gen": n, "n_depth": d, "avg_ts": 10.0, "samples_ts": [9.0, 11.0]}})
print(json.dumps(rows))
'''


def _args(output, rest):
    """`pyggml bench -m synth:tiny:q4_0 -d cpu -t 1 -r 1 REST...` as the CLI parses it."""
    return cli.build_parser().parse_args(["bench", "-m", "synth:tiny:q4_0", "-d", "cpu", "-t", "1", "-r", "1",
                                          "-o", output, *rest])


def _run(tmp_path, monkeypatch, rest, capsys):
    monkeypatch.setenv("PYGGML_MODEL_CACHE", str(tmp_path / "models"))
    assert bm.main(_args(str(tmp_path / "out"), rest)) == 0
    out = capsys.readouterr().out
    (f,) = os.listdir(tmp_path / "out")
    return out, json.load(open(tmp_path / "out" / f))["results"][0]


def test_depth_run_writes_every_test(tmp_path, monkeypatch, capsys):
    out, doc = _run(tmp_path, monkeypatch, ["-p", "8,16", "-n", "4", "--depth", "0,20", "--no-peer"], capsys)
    names = ["pp8", "pp8 @ d20", "pp16", "pp16 @ d20", "tg4", "tg4 @ d20"]
    assert [r["test"] for r in doc["tests"]] == names
    assert doc["n_ctx"] == 256 and doc["depths"] == [0, 20]
    for r in doc["tests"]:
        assert r["pyggml"]["median"] > 0 and r["llama_cpp"] is None and "ratio_median" not in r
        assert f"| {r['test']} |" in out
    tg = doc["pyggml"]["tg4 @ d20"]
    assert tg["decode_replans"] == 0 and tg["decode_new_allocs"] == 0     # warm-up built every forward
    assert "T=1 n_kv=256" in doc["pyggml"]["forwards"]


def test_llama_bench_peer_is_mapped_onto_our_tests(tmp_path, monkeypatch, capsys):
    exe = tmp_path / "llama-bench"
    exe.write_text(FAKE_LLAMA_BENCH.format(py=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    out, doc = _run(tmp_path, monkeypatch, ["-p", "8", "-n", "4", "--depth", "0,12", "--llama-bench", str(exe)],
                    capsys)
    rows = {r["test"]: r for r in doc["tests"]}
    assert rows["pp8 @ d12"]["llama_cpp"]["median"] == 112.0 and rows["pp8"]["llama_cpp"]["median"] == 100.0
    assert rows["tg4 @ d12"]["llama_cpp"]["values"] == [9.0, 11.0]
    assert rows["tg4"]["ratio_median"] == pytest.approx(rows["tg4"]["pyggml"]["median"] / 10.0)
    assert doc["llama_cpp"]["via"] == "llama-bench" and "-d 0,12" in doc["llama_cpp"]["command"]
    assert "x |" in out


def test_too_small_n_ctx_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYGGML_MODEL_CACHE", str(tmp_path / "models"))
    args = _args("", ["-p", "8", "-n", "0", "--depth", "64", "--n-ctx", "64", "--no-peer"])
    assert bm.main(args) == 2
    assert "--n-ctx 64" in capsys.readouterr().err


def test_device_options_are_set_and_recorded(tmp_path, monkeypatch, capsys):
    """-O DEVICE:KEY=VALUE (the CLI's device options) reaches the device (here its default, so later tests see the same device) and the JSON records it; a key
    no device knows is an error before anything runs."""
    monkeypatch.setenv("PYGGML_MODEL_CACHE", str(tmp_path / "models"))
    base = ["bench", "-m", "synth:tiny:q4_0", "-d", "cpu", "-t", "1", "-r", "1", "-p", "0", "-n", "2", "--no-peer"]
    with pytest.raises(pg.PyggmlError, match="no_such_option"):
        cli.main(base + ["-o", "", "-O", "cpu:no_such_option=1"])
    assert cli.main(base + ["-o", str(tmp_path / "out"), "-O", "cpu:repack=1"]) == 0
    (f,) = os.listdir(tmp_path / "out")
    assert json.load(open(tmp_path / "out" / f))["results"][0]["device_options"] == ["cpu:repack=1"]


def test_paired_ratio_follows_the_rounds_not_the_load():
    """Interleaved rounds under a load that halves both engines midway: the ratio of the medians
    mixes rounds of different load, the per-round ratios do not."""
    ours = {"values": [100.0, 100.0, 200.0, 200.0, 200.0]}
    peer = {"values": [80.0, 80.0, 160.0, 160.0, 160.0]}
    assert bm.paired_ratio(ours, peer) == pytest.approx(1.25)
    ours_first_slow = {"values": [100.0, 110.0, 220.0, 200.0, 200.0]}
    peer_shifted = {"values": [160.0, 80.0, 160.0, 160.0, 160.0]}   # medians 200 / 160, pairs mostly 1.25-1.375
    assert bm.paired_ratio(ours_first_slow, peer_shifted) == pytest.approx(1.25)
    assert bm.paired_ratio(ours, {"values": [1.0]}) is None          # rounds that do not pair
    assert bm.paired_ratio(ours, {"values": []}) is None
