"""pyggml.dist on a local Ray cluster on the loopback (three raylets, one CPU each): 2 and 3
pipeline stages, each a Ray actor on its own raylet, give one process's logits bit for bit (same
thread count); a stage whose process is killed surfaces as StageFailedError naming it, and the
pipeline is rebuilt. Skipped only where Ray is not installed (`pip install pyggml[ray]`)."""
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pyggml[ray]'); CI installs it")

from pyggml import models                                  # noqa: E402
import pyggml.dist as dist                                 # noqa: E402

THREADS = 1
KW = dict(n_ctx=96, n_batch=16, n_threads=THREADS)
N_PROMPT, N_GEN = 45, 4                                    # chunks 16 16 8 4 1: three micro-batch sizes


@pytest.fixture(scope="module")
def cluster():
    c = dist.LocalCluster(n_nodes=3, num_cpus=1, object_store_memory=80 * 2**20)
    yield c
    c.shutdown()


@pytest.fixture(scope="module")
def tiny():
    from pyggml.bench_model import resolve_model
    return resolve_model("synth:tiny:q4_0", quiet=True)


@pytest.fixture(scope="module")
def tokens():
    return [int(t) for t in np.random.default_rng(7).integers(3, 32000, N_PROMPT + N_GEN)]


def _session(m, toks):
    """All logits of the prompt, then each decoded token's, then a reset and the prompt's last logits."""
    out = [m.prefill(toks[:N_PROMPT], all_logits=True)] + [m.decode(t) for t in toks[N_PROMPT:]]
    m.reset()
    return out + [m.prefill(toks[:N_PROMPT])]


@pytest.fixture(scope="module")
def one_process(tiny, tokens):
    m = models.load(tiny, progress=False, **KW)
    try:
        return _session(m, tokens)
    finally:
        m.close()


@pytest.mark.parametrize("n_stages", [2, 3])
def test_ray_stages_give_one_process_logits(cluster, tiny, tokens, one_process, n_stages):
    with dist.Pipeline(tiny, n_stages, **KW) as p:
        assert len({i["node_id"] for i in p.info}) == n_stages          # one raylet per stage
        assert [tuple(i["layers"]) for i in p.info] == p.ranges == dist.stage_ranges(6, n_stages)
        full = models.load(tiny, progress=False, **KW)
        try:
            assert sum(i["weight_bytes"] for i in p.info) == full.weight_bytes
        finally:
            full.close()
        got = _session(p, tokens)
        assert len(got) == len(one_process)
        for g, w in zip(got, one_process):
            assert g.shape == w.shape and np.array_equal(g, w)
        st = p.stage_stats()
        assert [s["n_past"] for s in st] == [N_PROMPT] * n_stages
        assert all(s["calls"] == 5 + N_GEN + 5 for s in st)         # prefill chunks, decodes, prefill again


def test_ray_killed_stage_raises_and_rebuilds(cluster, tiny, tokens, one_process):
    with dist.Pipeline(tiny, 2, timeout=120, **KW) as p:
        p.prefill(tokens[:8])
        dead_pid = p.info[1]["pid"]
        os.kill(dead_pid, signal.SIGKILL)                  # what a crashed stage host looks like
        with pytest.raises(dist.StageFailedError) as e:
            p.decode(tokens[8])
        assert not isinstance(e.value, dist.StageTimeoutError)      # reported by Ray, not by waiting
        assert e.value.stage == 1 and e.value.dead
        assert "stage 1 (layers 3-5" in str(e.value) and "rebuild()" in str(e.value)
        with pytest.raises(dist.StageFailedError, match="rebuild"):
            p.prefill(tokens[:4])                                   # refused, not hung, until rebuilt
        with pytest.raises(dist.StageFailedError, match="rebuild"):
            p.reset()
        p.rebuild()
        assert p.n_past == 0 and p.info[1]["pid"] != dead_pid
        got = [p.prefill(tokens[:N_PROMPT], all_logits=True)]
        assert np.array_equal(got[0], one_process[0])


def test_ray_dead_first_stage_fails_a_pipelined_prefill(cluster, tiny, tokens):
    """With the first of three stages gone, a prefill of five chunks (n_copies in flight, each
    chained through every stage) raises for that stage instead of waiting on the chunks behind it."""
    with dist.Pipeline(tiny, 3, timeout=120, **KW) as p:
        p.kill_stage(0)
        with pytest.raises(dist.StageFailedError) as e:
            p.prefill(tokens[:N_PROMPT])
        assert e.value.stage == 0 and e.value.dead


def test_ray_pipeline_errors(cluster, tiny):
    with pytest.raises(dist.ConfigError, match="need 8 CPU"):
        dist.Pipeline(tiny, 4, num_cpus=2, **KW)
    with pytest.raises(dist.ConfigError, match="stages must be"):
        dist.Pipeline(tiny, 7, **KW)
    with dist.Pipeline(tiny, 2, **KW) as p:
        with pytest.raises(models.ContextFullError):
            p.prefill(list(range(3, 100)))
        with pytest.raises(dist.ShapeError):
            p.decode(32000)
        assert p.n_past == 0
    with pytest.raises(dist.ClosedError):
        p.decode(5)


def test_ray_hung_stage_times_out(cluster, tiny, tokens):
    """A stage that stops answering (SIGSTOP: alive to Ray, never done) costs `timeout` seconds,
    then StageTimeoutError: a pipeline step never waits forever."""
    with dist.Pipeline(tiny, 2, timeout=3.0, **KW) as p:
        pid = p.info[0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(dist.StageTimeoutError, match="no result within 3.0 s"):
                p.decode(tokens[0])
        finally:
            os.kill(pid, signal.SIGCONT)
        with pytest.raises(dist.StageFailedError, match="rebuild"):
            p.decode(tokens[0])
        p.rebuild()
        assert p.decode(tokens[0]).shape == (32000,)


def test_ray_bench_cli(tiny, tmp_path):
    """`pyggml bench -m MODEL --ray local --stages 2` in its own process (its own local cluster)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-m", "pyggml", "bench", "-m", tiny, "--ray", "local", "--stages", "2",
                        "-t", "1", "-r", "1", "-p", "16", "-n", "4", "-ub", "8", "-o", str(tmp_path)],
                       capture_output=True, text=True, cwd=root, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| Ray, 2 stages | cpu x2 | tg4 |" in r.stdout and "crossing them (3 Ray hops" in r.stdout
    doc = json.load(open(next(tmp_path.glob("model-cpu_ray2-*.json"))))
    ray_res = doc["results"][0]["ray"]
    assert ray_res["ranges"] == [[0, 3], [3, 6]] and ray_res["pp16"]["mean"] > 0 and ray_res["tg4"]["mean"] > 0
    assert ray_res["crossing_us_per_token"] > 0 and doc["results"][0]["pyggml"]["tg4"]["mean"] > 0
