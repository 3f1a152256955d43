"""The LLaMA graph against a float64 numpy forward of the same architecture: tiny synthetic models
of every weight type, prefill then 16 decode steps, on every available device; the decode graph
is planned once and reused."""
import math

import numpy as np
import pytest

import pyggml as pg
import pyggml.models as models
from pyggml.gguf import GGUFReader
from pyggml.synth import write_synth_model

WTYPES = ("f16", "q8_0", "q4_0", "q4_K")
NMSE_LIMIT = 5e-4           # the attention/mul_mat class threshold of the op suite
PROMPT = [1, 450, 4996, 17354, 1701, 29916, 432, 17204, 975]
N_DECODE = 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_models")
    paths = {}
    for w in WTYPES:
        paths[w] = str(d / f"tiny-{w}.gguf")
        write_synth_model(paths[w], "tiny", w, seed=3, progress=False)
    return paths


def _device_sets():
    out = [("cpu",)]
    for d in pg.devices():
        if str(d) != "cpu:0":
            out.append((str(d), "cpu"))
    return out


DEVICE_SETS = _device_sets()


# ---------------------------------------------------------------- float64 reference

def _weights64(path):
    """Every tensor of the file as float64 (quantized ones through pg.dequantize)."""
    out = {}
    with GGUFReader(path) as r:
        meta = dict(r.metadata)
        for t in r.tensors:
            if t.type.name in ("f32", "f16"):
                out[t.name] = np.asarray(t.data, np.float64)
            else:
                out[t.name] = pg.dequantize(np.array(t.raw), t.type.name, t.shape).astype(np.float64)
    return meta, out


def _rope(x, pos, n_dims, base, neox):
    """x (T, heads, D) float64 rotated at positions pos (T,)."""
    half = n_dims // 2
    theta = pos[:, None].astype(np.float64) * base ** (-2.0 * np.arange(half) / n_dims)   # (T, half)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_dims]
        y[..., :half], y[..., half:n_dims] = a * c - b * s, a * s + b * c
    else:
        a, b = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
        y[..., 0:n_dims:2], y[..., 1:n_dims:2] = a * c - b * s, a * s + b * c
    return y


def reference_logits(meta, W, tokens, neox=False):
    """Causal float64 forward over `tokens`: logits of every position (T, n_vocab)."""
    a = meta["general.architecture"] + "."
    d, L = meta[a + "embedding_length"], meta[a + "block_count"]
    H, Hkv = meta[a + "attention.head_count"], meta[a + "attention.head_count_kv"]
    eps, base = float(meta[a + "attention.layer_norm_rms_epsilon"]), float(meta[a + "rope.freq_base"])
    D = d // H
    T = len(tokens)
    pos = np.arange(T)

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    x = W["token_embd.weight"][np.asarray(tokens)]
    causal = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        p = f"blk.{i}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = _rope((h @ W[p + "attn_q.weight"].T).reshape(T, H, D), pos, D, base, neox)
        k = _rope((h @ W[p + "attn_k.weight"].T).reshape(T, Hkv, D), pos, D, base, neox)
        v = (h @ W[p + "attn_v.weight"].T).reshape(T, Hkv, D)
        rep = H // Hkv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
        s = np.einsum("thd,uhd->htu", q, k) / math.sqrt(D) + causal
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("htu,uhd->thd", s, v).reshape(T, d)
        x = x + o @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "ffn_down.weight"].T
    out = W.get("output.weight", W["token_embd.weight"])
    return rms(x, W["output_norm.weight"]) @ out.T


def nmse(got, ref):
    got = np.asarray(got, np.float64)
    assert np.all(np.isfinite(got)), "non-finite logits"
    return float(((got - ref) ** 2).sum() / (ref ** 2).sum())


@pytest.fixture(scope="module")
def references(tiny):
    rng = np.random.default_rng(11)
    steps = [int(t) for t in rng.integers(3, 32000, N_DECODE)]
    out = {}
    for w, path in tiny.items():
        meta, W = _weights64(path)
        out[w] = reference_logits(meta, W, PROMPT + steps)
    return steps, out


# ---------------------------------------------------------------- tests

@pytest.mark.parametrize("devices", DEVICE_SETS, ids=lambda d: "+".join(d))
@pytest.mark.parametrize("wtype", WTYPES)
def test_prefill_and_decode_match_float64(tiny, references, wtype, devices):
    steps, refs = references
    ref = refs[wtype]
    m = models.load(tiny[wtype], devices=list(devices), n_ctx=64, progress=False)
    try:
        T = len(PROMPT)
        errs = [nmse(m.prefill(PROMPT), ref[T - 1])]
        plans = allocs = None
        for j, tok in enumerate(steps):
            errs.append(nmse(m.decode(tok), ref[T + j]))
            if j == 0:
                plans, allocs = m.sched.stats["plans"], m.sched.stats["buffer_allocs"]
        assert max(errs) < NMSE_LIMIT, f"{wtype} on {devices}: NMSE per step {['%.2e' % e for e in errs]}"
        # the decode graph was planned and allocated once; later steps only fed new inputs
        assert m.sched.stats["plans"] == plans and m.sched.stats["buffer_allocs"] == allocs
        assert m.n_past == T + N_DECODE
    finally:
        m.close()


@pytest.mark.parametrize("wtype", ["f16", "q4_K"])
def test_softmax_attention_path_and_all_logits(tiny, references, wtype):
    steps, refs = references
    ref = refs[wtype]
    m = models.load(tiny[wtype], n_ctx=48, attn="softmax", kv_type="f32", progress=False)
    try:
        T = len(PROMPT)
        all_l = m.prefill(PROMPT, all_logits=True)
        assert all_l.shape == (T, m.hp.n_vocab)
        for t in range(T):
            assert nmse(all_l[t], ref[t]) < NMSE_LIMIT
        for j, tok in enumerate(steps[:4]):
            assert nmse(m.decode(tok), ref[T + j]) < NMSE_LIMIT
    finally:
        m.close()


def test_prefill_in_chunks_equals_one_prefill(tiny, references):
    """Prefill 4 + 5 tokens continues the context like 9 at once (positions, KV rows, mask)."""
    steps, refs = references
    m = models.load(tiny["q8_0"], n_ctx=32, progress=False)
    try:
        m.prefill(PROMPT[:4])
        got = m.prefill(PROMPT[4:])
        assert nmse(got, refs["q8_0"][len(PROMPT) - 1]) < NMSE_LIMIT
        m.reset()               # a reset context gives the first answer again
        assert nmse(m.prefill(PROMPT[:4]), refs["q8_0"][3]) < NMSE_LIMIT
    finally:
        m.close()


def test_generate_greedy_device_and_host_argmax_agree(tiny):
    m = models.load(tiny["q4_0"], n_ctx=64, progress=False)
    try:
        a = m.generate(PROMPT, 8)
        m.reset()
        b = m.generate(PROMPT, 8, device_argmax=False)
        assert a == b and len(a) == 8
        m.reset()
        # the same tokens by hand: prefill then decode of each argmax
        logits = m.prefill(PROMPT)
        hand = []
        for _ in range(8):
            hand.append(int(np.argmax(logits)))
            logits = m.decode(hand[-1])
        assert hand == a
        plans = m.sched.stats["plans"]
        m.reset()
        m.generate(PROMPT, 8)
        assert m.sched.stats["plans"] == plans          # prompt and decode graphs reused
    finally:
        m.close()


def test_decode_program_reused_without_new_programs(tiny):
    m = models.load(tiny["q4_K"], n_ctx=32, progress=False)
    try:
        m.decode(1)
        stats = dict(m.sched.stats)
        for t in range(2, 20):
            m.decode(t)
        after = m.sched.stats
        for k in ("plans", "programs", "buffer_allocs", "bytes_allocated"):
            assert after[k] == stats[k], k
        assert after["computes"] == stats["computes"] + 18
        assert m.sched.last_run.host_syncs <= 1
    finally:
        m.close()


def test_context_limits_and_bad_tokens(tiny):
    m = models.load(tiny["q4_0"], n_ctx=8, progress=False)
    try:
        m.prefill([1, 2, 3, 4, 5, 6])
        with pytest.raises(models.ContextFullError, match="n_ctx 8"):
            m.prefill([1, 2, 3])
        assert m.n_past == 6
        m.decode(7)
        m.decode(8)
        with pytest.raises(models.ContextFullError):
            m.decode(9)
        m.reset()
        with pytest.raises(pg.ShapeError, match="token ids"):
            m.prefill([1, 32000])
        with pytest.raises(pg.ShapeError):
            m.prefill([])
        assert m.n_past == 0
    finally:
        m.close()


# ---------------------------------------------------------------- a custom model: GQA, sharp attention

def write_custom_model(path, rope_type=None, tied=False, seed=0, d=64, H=4, Hkv=2, ff=128, L=2, nv=300,
                       qk_std=0.35):
    """A small LLaMA GGUF with grouped-query attention and large q/k weights, so attention is peaked
    and the rotary embedding decides the logits (the synthetic tiny models have flat attention)."""
    from pyggml.gguf import GGUFWriter
    rng = np.random.default_rng(seed)
    D = d // H
    w = GGUFWriter(path)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", "custom")
    for k, v in (("vocab_size", nv), ("context_length", 256), ("embedding_length", d), ("block_count", L),
                 ("feed_forward_length", ff), ("attention.head_count", H), ("attention.head_count_kv", Hkv),
                 ("rope.dimension_count", D)):
        w.add_uint32("llama." + k, v)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    if rope_type is not None:
        w.add_string("llama.rope.type", rope_type)

    def mat(rows, cols, std):
        return (rng.standard_normal((rows, cols)) * std).astype(np.float16)

    w.add_tensor("token_embd.weight", mat(nv, d, 1.0))
    w.add_tensor("output_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
    if not tied:
        w.add_tensor("output.weight", mat(nv, d, 0.1))
    for i in range(L):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        w.add_tensor(p + "attn_q.weight", mat(d, d, qk_std))
        w.add_tensor(p + "attn_k.weight", mat(Hkv * D, d, qk_std))
        w.add_tensor(p + "attn_v.weight", mat(Hkv * D, d, 0.15))
        w.add_tensor(p + "attn_output.weight", mat(d, d, 0.1))
        w.add_tensor(p + "ffn_norm.weight", (1 + 0.1 * rng.standard_normal(d)).astype(np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(ff, d, 0.1))
        w.add_tensor(p + "ffn_up.weight", mat(ff, d, 0.1))
        w.add_tensor(p + "ffn_down.weight", mat(d, ff, 0.1))
    w.write()
    return path


@pytest.mark.parametrize("devices", DEVICE_SETS, ids=lambda d: "+".join(d))
@pytest.mark.parametrize("rope_type,tied,attn", [(None, False, "flash"), ("neox", True, "flash"),
                                                 (None, True, "softmax"), ("neox", False, "softmax")])
def test_gqa_with_peaked_attention_and_rope_modes(tmp_path, rope_type, tied, attn, devices):
    path = write_custom_model(str(tmp_path / "c.gguf"), rope_type, tied)
    meta, W = _weights64(path)
    neox = rope_type == "neox"
    rng = np.random.default_rng(5)
    toks = [int(t) for t in rng.integers(0, 300, 24)]
    ref = reference_logits(meta, W, toks, neox=neox)
    wrong = reference_logits(meta, W, toks, neox=not neox)
    m = models.load(path, devices=list(devices), n_ctx=32, attn=attn, progress=False)
    try:
        assert m.hp.n_head_kv == 2 and m.hp.n_head == 4
        got = [m.prefill(toks[:16])] + [m.decode(t) for t in toks[16:]]
        errs = [nmse(g, ref[15 + j]) for j, g in enumerate(got)]
        assert max(errs) < NMSE_LIMIT, errs
        # the test can tell the rope layouts apart: the other one is far off
        assert min(nmse(g, wrong[15 + j]) for j, g in enumerate(got)) > 10 * NMSE_LIMIT
    finally:
        m.close()


def test_prompts_of_any_length_share_a_few_chunk_forwards(tiny, references):
    steps, refs = references
    m = models.load(tiny["q8_0"], n_ctx=64, n_batch=8, progress=False)
    try:
        assert m.chunks(9) == [8, 1] and m.chunks(7) == [4, 2, 1] and m.chunks(20) == [8, 8, 4]
        for n in range(1, 10):
            m.reset()
            m.prefill(PROMPT[:n])
        plans = m.sched.stats["plans"]
        assert sorted(k[0] for k in m._forwards) == [1, 2, 4, 8]
        m.reset()
        all_l = m.prefill(PROMPT + steps[:6], all_logits=True)       # 15 tokens: 8 + 4 + 2 + 1
        ref = refs["q8_0"]
        assert all_l.shape == (15, 32000)
        assert max(nmse(all_l[t], ref[t]) for t in range(15)) < NMSE_LIMIT
        m.reset()
        m.prefill(PROMPT)
        assert m.sched.stats["plans"] == plans + 3                   # the all-logits 8, 4 and 2
    finally:
        m.close()


@pytest.mark.parametrize("wtype", ["f16", "q4_0"])
def test_logits_match_llama_cpp(tiny, wtype):
    """The same file through llama.cpp (only where llama-cpp-python is already installed)."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    llm = llama_cpp.Llama(model_path=tiny[wtype], n_ctx=64, n_threads=2, verbose=False, logits_all=True)
    llm.eval(PROMPT)
    ref = np.array(llm.scores[:len(PROMPT)], np.float64)
    m = models.load(tiny[wtype], n_ctx=64, progress=False)
    try:
        got = m.prefill(PROMPT, all_logits=True)
    finally:
        m.close()
    errs = [nmse(got[t], ref[t]) for t in range(len(PROMPT))]
    assert max(errs) < NMSE_LIMIT, errs
    assert (got.argmax(1) == ref.argmax(1)).all()
