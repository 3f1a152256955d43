"""Pipeline stages without Ray (pyggml/models/stage.py): load(path, layers=(first, stop)) holds
only its layers' weights; a chain of stages fed Model.prefill's chunks gives the logits of one
Model bit for bit; bad ranges and inputs are clear errors; pyggml.dist imports without Ray."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg
from pyggml import models
from pyggml.dist import stage_ranges

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KW = dict(n_ctx=64, n_batch=16, progress=False, n_threads=2)


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    from pyggml.synth import write_synth_model
    p = str(tmp_path_factory.mktemp("stage") / "m.gguf")
    write_synth_model(p, dict(n_embd=64, n_layer=4, n_head=4, n_head_kv=2, n_ff=128, n_vocab=512), "q4_0", seed=5,
                      progress=False)
    return p


def _through(stages, x, all_logits=False):
    for s in stages:
        x = s.run(x, all_logits)
    return x


@pytest.mark.parametrize("cuts,kv_pad", [((0, 2, 4), None), ((0, 1, 3, 4), None), ((0, 4), None), ((0, 2, 4), 8)])
def test_chained_stages_give_the_model_logits(path, cuts, kv_pad, monkeypatch):
    """kv_pad 8 in a 128-cell context: the model attends 32 cells for its two 16-token chunks (one
    pipelined group), a stage 16 then 32 for them (one at a time), decode 48: the same bits."""
    kw = dict(KW)
    if kv_pad:
        from pyggml.models import llama
        monkeypatch.setattr(llama, "KV_PAD", kv_pad)
        kw["n_ctx"] = 128
    toks = [int(t) for t in np.random.default_rng(0).integers(0, 512, 43)]
    m = models.load(path, **kw)
    stages = [models.load(path, layers=(a, b), **kw) for a, b in zip(cuts, cuts[1:])]
    try:
        want = [m.prefill(toks[:40], all_logits=True)] + [m.decode(t) for t in toks[40:]]
        got, i = [], 0
        outs = []
        for c in m.chunks(40):                          # 32 + 8: the chunks prefill uses
            outs.append(_through(stages, np.array(toks[i:i + c]), all_logits=True))
            i += c
        got.append(np.concatenate(outs))
        got += [_through(stages, np.array([t]))[0] for t in toks[40:]]
        for g, w in zip(got, want):
            assert np.array_equal(g, w)
        if kv_pad:
            assert sorted(k for k in m._forwards if k[0] > 1) == [(8, True, 64), (16, True, 32)]
            assert sorted(k for k in stages[-1]._forwards if k[0] > 1) == [(8, True, 64), (16, True, 16),
                                                                          (16, True, 32)]
        assert sum(s.weight_bytes for s in stages) == m.weight_bytes       # each weight in one stage
        assert [s.n_past for s in stages] == [43] * len(stages)
    finally:
        m.close()
        for s in stages:
            s.close()


def test_stage_holds_only_its_layers(path):
    s = models.load(path, layers=(1, 3), **KW)
    try:
        assert sorted({n.split(".")[1] for n in s.w if n.startswith("blk.")}) == ["1", "2"]
        assert "token_embd.weight" not in s.w and not any(n.startswith("output") for n in s.w)
        s.run(np.zeros((3, 64), np.float32))
        plan = s.sched.plan([s.forward_for(3).logits])
        caches = sorted(t.name for t in plan.order if t.name.startswith("cache_"))
        assert caches == ["cache_k.1", "cache_k.2", "cache_v.1", "cache_v.2"]
    finally:
        s.close()


def test_stage_errors(path):
    for bad in [(0, 0), (2, 1), (0, 5), (-1, 2), 3, (0, 1, 2)]:
        with pytest.raises(pg.ConfigError):
            models.load(path, layers=bad, **KW)
    with pytest.raises(pg.TypeMismatchError):
        models.load(path, layers=(0.0, 2), **KW)
    first, mid = models.load(path, layers=(0, 2), **KW), models.load(path, layers=(2, 4), **KW)
    try:
        with pytest.raises(pg.ShapeError, match=r"\(T, 64\)"):
            mid.run(np.zeros((3, 32), np.float32))
        with pytest.raises(pg.TypeMismatchError, match="float32"):
            mid.run(np.zeros((3, 64), np.float64))
        with pytest.raises(models.ContextFullError):
            mid.run(np.zeros((65, 64), np.float32))
        with pytest.raises(pg.ShapeError):
            first.run([600])
        with pytest.raises(pg.ConfigError, match="use run"):
            first.prefill([1, 2])
        with pytest.raises(pg.ConfigError, match="use run"):
            mid.decode(1)
    finally:
        first.close()
        mid.close()


def test_stage_ranges():
    assert stage_ranges(6, 2) == [(0, 3), (3, 6)]
    assert stage_ranges(6, 3) == [(0, 2), (2, 4), (4, 6)]
    assert stage_ranges(8, 2, [1, 3]) == [(0, 2), (2, 8)]
    assert stage_ranges(6, [(0, 1), (1, 6)]) == [(0, 1), (1, 6)]
    for bad in (0, 7, True, [(0, 2), (3, 6)], [(0, 3)]):
        with pytest.raises(pg.ConfigError):
            stage_ranges(6, bad)


def test_dist_imports_without_ray():
    """Nothing outside pyggml.dist needs Ray, and pyggml.dist only asks for it when it is used."""
    code = ("import sys; sys.modules['ray'] = None\n"
            "import pyggml, pyggml.models, pyggml.bench_model, pyggml.cli, pyggml.dist as d\n"
            "try:\n    d.import_ray()\nexcept d.RayMissingError as e:\n    assert isinstance(e, pyggml.PyggmlError)\n"
            "    print('missing:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "pip install 'pyggml[ray]'" in r.stdout
