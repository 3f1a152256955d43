"""Synthetic LLaMA GGUF files: layout, metadata, weights, quantizers, determinism, and (when
llama-cpp-python happens to be installed) that llama.cpp opens and runs them."""
import hashlib
import os

import numpy as np
import pytest

from pyggml import synth
from pyggml.gguf import GGUFReader, GGUFValueType as VT
from pyggml.synth import (FILE_TYPES, WTYPES, numpy_quantize, plan_tensors, synth_vocab,
                          write_synth_model)

LAYER_TENSORS = ["attn_k", "attn_norm", "attn_output", "attn_q", "attn_v", "ffn_down",
                 "ffn_gate", "ffn_norm", "ffn_up"]


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    out = {}
    for wt in WTYPES:
        p = str(d / f"tiny-{wt}.gguf")
        write_synth_model(p, "tiny", wt, seed=0, progress=False, quantize=numpy_quantize)
        out[wt] = p
    return out


def _dequant(t):
    """float32 values of a tensor, through the gguf package's reference dequantizers."""
    if t.type.name == "f32":
        return np.asarray(t.data)
    if t.type.name == "f16":
        return np.asarray(t.data, np.float32)
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType
    return quants.dequantize(np.asarray(t.data), GGMLQuantizationType(t.type.id)).reshape(t.shape)


@pytest.mark.parametrize("wtype", WTYPES)
def test_tiny_file_layout_and_metadata(tiny_files, wtype):
    with GGUFReader(tiny_files[wtype]) as r:
        m = r.metadata
        assert m["general.architecture"] == "llama"
        assert r.fields["general.file_type"].type == VT.UINT32
        assert m["general.file_type"] == FILE_TYPES[wtype]
        assert m["general.quantization_version"] == 2
        expect = {"llama.context_length": 2048, "llama.embedding_length": 288,
                  "llama.block_count": 6, "llama.feed_forward_length": 768,
                  "llama.attention.head_count": 6, "llama.attention.head_count_kv": 6,
                  "llama.rope.dimension_count": 48, "llama.vocab_size": 32000}
        for k, v in expect.items():
            assert r.fields[k].type == VT.UINT32 and m[k] == v, k
        assert r.fields["llama.rope.freq_base"].type == VT.FLOAT32
        assert m["llama.rope.freq_base"] == 10000.0
        assert m["llama.attention.layer_norm_rms_epsilon"] == np.float32(1e-5)
        assert m["tokenizer.ggml.model"] == "llama"
        assert len(m["tokenizer.ggml.tokens"]) == 32000
        assert r.fields["tokenizer.ggml.scores"].elem_type == VT.FLOAT32
        assert r.fields["tokenizer.ggml.token_type"].elem_type == VT.INT32
        assert (m["tokenizer.ggml.bos_token_id"], m["tokenizer.ggml.eos_token_id"],
                m["tokenizer.ggml.unknown_token_id"]) == (1, 2, 0)

        names = [t.name for t in r.tensors]
        want = ["output.weight", "output_norm.weight", "token_embd.weight"] + [
            f"blk.{i}.{n}.weight" for i in range(6) for n in LAYER_TENSORS]
        assert names == want
        shapes = {t.name: t.shape for t in r.tensors}
        assert shapes["token_embd.weight"] == (32000, 288)
        assert shapes["output.weight"] == (32000, 288)
        assert shapes["blk.0.attn_q.weight"] == (288, 288)
        assert shapes["blk.0.attn_k.weight"] == (288, 288)
        assert shapes["blk.0.ffn_gate.weight"] == (768, 288)
        assert shapes["blk.0.ffn_down.weight"] == (288, 768)
        assert shapes["blk.3.ffn_norm.weight"] == (288,)
        plan = {p.name: p for p in plan_tensors("tiny", wtype)}
        for t in r.tensors:
            assert t.type.name == plan[t.name].type, t.name
            if t.name.endswith("norm.weight"):
                assert t.type.name == "f32"


@pytest.mark.parametrize("wtype", WTYPES)
def test_tiny_weights_are_sane(tiny_files, wtype):
    with GGUFReader(tiny_files[wtype]) as r:
        for name in ["token_embd.weight", "output.weight", "blk.0.attn_q.weight",
                     "blk.5.ffn_down.weight", "blk.2.attn_v.weight"]:
            w = _dequant(r.tensor(name))
            assert np.isfinite(w).all()
            assert 0.015 < w.std() < 0.025 and abs(w.mean()) < 0.002, (name, w.std())
            assert len(np.unique(w[:4])) > 100          # not constant, not degenerate
        n = _dequant(r.tensor("blk.1.attn_norm.weight"))
        assert 0.95 < n.mean() < 1.05 and 0.05 < n.std() < 0.15
        # a layer's tensors differ from each other and across layers
        a = _dequant(r.tensor("blk.0.attn_q.weight"))
        b = _dequant(r.tensor("blk.1.attn_q.weight"))
        assert not np.allclose(a, b)


def test_tiny_logits_not_degenerate(tiny_files):
    """A numpy forward pass over one token of the f16 file: logits vary and are finite."""
    with GGUFReader(tiny_files["f16"]) as r:
        g = lambda n: _dequant(r.tensor(n))  # noqa: E731
        x = g("token_embd.weight")[1]
        for i in range(6):
            h = x / np.sqrt((x ** 2).mean() + 1e-5) * g(f"blk.{i}.attn_norm.weight")
            v = g(f"blk.{i}.attn_v.weight") @ h          # one token: attention = v
            x = x + g(f"blk.{i}.attn_output.weight") @ v
            h = x / np.sqrt((x ** 2).mean() + 1e-5) * g(f"blk.{i}.ffn_norm.weight")
            a, u = g(f"blk.{i}.ffn_gate.weight") @ h, g(f"blk.{i}.ffn_up.weight") @ h
            x = x + g(f"blk.{i}.ffn_down.weight") @ (a / (1 + np.exp(-a)) * u)
        h = x / np.sqrt((x ** 2).mean() + 1e-5) * g("output_norm.weight")
        logits = g("output.weight") @ h
    assert np.isfinite(logits).all() and logits.std() > 0.1
    assert len(np.unique(np.argsort(logits)[-10:])) == 10


def test_cross_check_with_gguf_package(tiny_files):
    gguf = pytest.importorskip("gguf")
    p = tiny_files["q4_0"]
    theirs = gguf.GGUFReader(p)
    with GGUFReader(p) as ours:
        keys = [k for k in theirs.fields if not k.startswith("GGUF.")]
        assert keys == list(ours.fields)
        for k in keys:
            a, b = theirs.fields[k].contents(), ours.metadata[k]
            if isinstance(b, np.ndarray):
                assert np.array_equal(np.asarray(a), b), k
            elif isinstance(b, float):
                assert a == pytest.approx(b), k
            else:
                assert a == b, k
        assert len(theirs.tensors) == len(ours.tensors)
        for a, b in zip(theirs.tensors, ours.tensors):
            assert a.name == b.name and int(a.tensor_type) == b.type.id
            assert tuple(int(x) for x in a.shape) == b.ne
            assert int(a.n_bytes) == b.nbytes
            assert np.asarray(a.data).tobytes() == b.raw.tobytes(), a.name


def test_vocab():
    tokens, scores, types = synth_vocab(32000)
    assert len(tokens) == len(set(tokens)) == 32000
    assert tokens[:3] == ["<unk>", "<s>", "</s>"]
    assert tokens[3] == "<0x00>" and tokens[3 + 10] == "<0x0A>" and tokens[258] == "<0xFF>"
    assert list(types[:4]) == [2, 3, 3, 6] and (types[3:259] == 6).all() and (types[259:] == 1).all()
    assert "\u2581" in tokens and "\u2581t" in tokens and "e" in tokens
    assert (np.diff(scores[259:]) < 0).all() and (scores[:259] == 0).all()
    assert all(t for t in tokens)


def test_plan_follows_llama_quantize():
    # Q4_K_M on a 16-layer model: attn_v/ffn_down get q6_K where use_more_bits(i, 16) holds
    plan = {p.name: p.type for p in plan_tensors("1b", "q4_K")}
    more = {0, 1, 4, 7, 10, 13, 14, 15}
    for i in range(16):
        for n in ("attn_v", "ffn_down"):
            assert plan[f"blk.{i}.{n}.weight"] == ("q6_K" if i in more else "q4_K"), (i, n)
        assert plan[f"blk.{i}.attn_q.weight"] == "q4_K"
    assert plan["output.weight"] == "q6_K" and plan["token_embd.weight"] == "q4_K"
    p40 = {p.name: p.type for p in plan_tensors("7b", "q4_0")}
    assert p40["output.weight"] == "q6_K" and p40["token_embd.weight"] == "q4_0"
    assert {t for n, t in p40.items() if n != "output.weight" and "norm" not in n} == {"q4_0"}
    p41 = {p.name: p.type for p in plan_tensors("smollm2", "q4_1")}   # (the SmolLM2 wheel's file type)
    # output q6_K, but its rows of 576 fit no 256-element block: q8_0, as the wheel's file has it
    assert p41["output.weight"] == "q8_0" and {t for n, t in p41.items() if n != "output.weight" and "norm" not in n} == {"q4_1"}
    for wt in ("f16", "q8_0"):
        types = {p.type for p in plan_tensors("1b", wt)}
        assert types == {wt, "f32"}
    pure = {p.type for p in plan_tensors("1b", "q4_K", mix="pure")}
    assert pure == {"q4_K", "f32"}
    # tiny rows of 288 do not fit 256-element blocks: q8_0 fallback, except ffn_down (768)
    tiny = {p.name: p.type for p in plan_tensors("tiny", "q4_K")}
    assert tiny["blk.0.attn_q.weight"] == "q8_0" and tiny["output.weight"] == "q8_0"
    assert tiny["blk.0.ffn_down.weight"] == "q4_K" and tiny["blk.2.ffn_down.weight"] == "q6_K"
    with pytest.raises(ValueError):
        plan_tensors("tiny", "q5_1")
    with pytest.raises(ValueError):
        plan_tensors("13b", "f16")


def test_custom_shape_uses_k_quants_everywhere(tmp_path):
    shape = dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1000)
    calls = []

    def q(x, t):
        calls.append(t)
        return numpy_quantize(x, t)

    p = str(tmp_path / "k.gguf")
    plan = write_synth_model(p, shape, "q4_K", seed=3, progress=False, quantize=q, mix="pure")
    assert set(calls) == {"q4_K"}
    with GGUFReader(p) as r:
        assert {t.type.name for t in r.tensors} == {"q4_K", "f32"}
        assert r.tensor("blk.1.attn_k.weight").shape == (128, 256)
        assert len(r.metadata["tokenizer.ggml.tokens"]) == 1000
        assert [t.name for t in r.tensors] == [p.name for p in plan]
        w = _dequant(r.tensor("blk.0.ffn_up.weight"))
        assert 0.015 < w.std() < 0.025


def test_deterministic_and_chunking_independent(tmp_path, monkeypatch):
    shape = dict(n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=128, n_vocab=300)
    digest = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()  # noqa: E731
    a, b, c, d = (str(tmp_path / f"{x}.gguf") for x in "abcd")
    write_synth_model(a, shape, "q8_0", seed=1, progress=False, quantize=numpy_quantize)
    write_synth_model(b, shape, "q8_0", seed=1, progress=False, quantize=numpy_quantize)
    write_synth_model(c, shape, "q8_0", seed=2, progress=False, quantize=numpy_quantize)
    monkeypatch.setattr(synth, "_CHUNK_ELEMENTS", 100)    # many small chunks per tensor
    write_synth_model(d, shape, "q8_0", seed=1, progress=False, quantize=numpy_quantize)
    assert digest(a) == digest(b) == digest(d) != digest(c)


def test_bad_quantizer_output_is_an_error(tmp_path):
    shape = dict(n_embd=64, n_layer=1, n_head=2, n_head_kv=1, n_ff=128, n_vocab=300)
    p = tmp_path / "bad.gguf"
    with pytest.raises(Exception, match="quantizer returned"):
        write_synth_model(str(p), shape, "q8_0", progress=False,
                          quantize=lambda x, t: np.zeros((1, 1), np.uint8))
    assert not p.exists() and os.listdir(tmp_path) == []


# ---------------------------------------------------------------- quantizers

def _rows(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((48, 512)).astype(np.float32) * 0.02
    x[0] = 0                                   # all-zero row
    x[1] = 0.5                                 # constant row
    x[2, 7] = 40.0                             # an outlier
    x[3] = -np.abs(x[3])                       # all negative
    x[4, :256] = np.linspace(-1, 1, 256)
    return x


@pytest.mark.parametrize("t", ["q8_0", "q4_0", "q4_1"])
def test_numpy_quantize_bit_exact_with_gguf_package(t):
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType
    x = _rows()
    assert np.array_equal(numpy_quantize(x, t), quants.quantize(x, GGMLQuantizationType[t.upper()]))


@pytest.mark.parametrize("t,limit", [("q8_0", 1e-4), ("q4_0", 2e-2), ("q4_1", 2e-2), ("q4_K", 1e-2), ("q6_K", 1e-3)])
def test_numpy_quantize_decodes_close(t, limit):
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType
    x = _rows(1)
    b = numpy_quantize(x, t)
    assert b.dtype == np.uint8 and b.shape == (48, 512 // (256 if t.endswith("_K") else 32)
                                               * {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q4_K": 144, "q6_K": 210}[t])
    y = quants.dequantize(b, GGMLQuantizationType[t.upper()])
    assert np.isfinite(y).all()
    for i in range(x.shape[0]):
        den = (x[i] ** 2).sum()
        err = ((y[i] - x[i]) ** 2).sum()
        assert (err <= limit * den) if den else err == 0, (t, i, err / max(den, 1e-30))


def test_numpy_quantize_rejects():
    with pytest.raises(ValueError):
        numpy_quantize(np.zeros((2, 48), np.float32), "q4_K")
    with pytest.raises(ValueError):
        numpy_quantize(np.zeros((2, 256), np.float32), "q5_K")
    with pytest.raises(ValueError):
        numpy_quantize(np.zeros(256, np.float32), "q8_0")


def _plugin_quantize():
    try:
        import pyggml
        q = pyggml.quantize
        q(np.zeros((1, 256), np.float32), "q4_K")
        return q
    except Exception as e:  # no CPU plugin built here
        pytest.skip(f"pyggml.quantize unavailable: {e}")


@pytest.mark.parametrize("t", ["q8_0", "q4_0", "q4_1"])
def test_numpy_quantize_matches_plugin(t):
    q = _plugin_quantize()
    x = _rows(2)
    assert np.array_equal(numpy_quantize(x, t), np.asarray(q(x, t)))


@pytest.mark.parametrize("t", ["q4_K", "q6_K"])
def test_numpy_k_quants_agree_with_plugin(t):
    """The simple numpy K-quant encoder and the plugin's ggml-exact one decode (through the gguf
    package) to nearly the same values: same block layout, similar error."""
    q = _plugin_quantize()
    quants = pytest.importorskip("gguf.quants")
    from gguf.constants import GGMLQuantizationType
    x = _rows(3)[8:]
    gt = GGMLQuantizationType[t.upper()]
    a = quants.dequantize(np.asarray(q(x, t)), gt)
    b = quants.dequantize(numpy_quantize(x, t), gt)
    ea, eb = ((a - x) ** 2).sum(), ((b - x) ** 2).sum()
    assert eb < 1.5 * ea and ((a - b) ** 2).sum() < 4 * ea


def test_cli_main(tmp_path, capsys):
    p = str(tmp_path / "cli.gguf")
    assert synth.main([p, "--shape", "tiny", "--wtype", "q8_0", "--seed", "5", "-q",
                       "--numpy-quant"]) == 0
    with GGUFReader(p) as r:
        assert r.metadata["pyggml.synth.seed"] == 5 and len(r.tensors) == 57
    with pytest.raises(SystemExit):
        synth.main([p, "--wtype", "q5_1"])
    assert synth.main([str(tmp_path / "no" / "dir.gguf"), "-q"]) == 1
    assert "error" in capsys.readouterr().err


# ---------------------------------------------------------------- llama.cpp itself

def numpy_llama_logits(reader, tokens):
    """float64 reference forward pass of a LLaMA GGUF (f16/f32 weights) over `tokens`:
    RMSNorm, RoPE (normal mode: adjacent pairs), causal GQA attention, SwiGLU; returns the
    logits of every position (n_tokens, n_vocab)."""
    m = reader.metadata
    g = lambda n: np.asarray(_dequant(reader.tensor(n)), np.float64)  # noqa: E731
    d, L = m["llama.embedding_length"], m["llama.block_count"]
    H, Hkv = m["llama.attention.head_count"], m["llama.attention.head_count_kv"]
    eps, base = m["llama.attention.layer_norm_rms_epsilon"], m["llama.rope.freq_base"]
    hd, T = d // H, len(tokens)
    norm = lambda x, w: x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w  # noqa: E731
    pos = np.arange(T)[:, None]
    theta = pos * base ** (-np.arange(0, hd, 2) / hd)            # (T, hd/2)
    cos, sin = np.cos(theta)[:, None], np.sin(theta)[:, None]

    def rope(x):                                                # (T, heads, hd)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x0 * cos - x1 * sin, x0 * sin + x1 * cos
        return out

    x = g("token_embd.weight")[tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for i in range(L):
        b = f"blk.{i}."
        h = norm(x, g(b + "attn_norm.weight"))
        q = rope((h @ g(b + "attn_q.weight").T).reshape(T, H, hd))
        k = rope((h @ g(b + "attn_k.weight").T).reshape(T, Hkv, hd))
        v = (h @ g(b + "attn_v.weight").T).reshape(T, Hkv, hd)
        k, v = np.repeat(k, H // Hkv, axis=1), np.repeat(v, H // Hkv, axis=1)
        s = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = np.einsum("hqk,khd->qhd", p, v).reshape(T, d)
        x = x + o @ g(b + "attn_output.weight").T
        h = norm(x, g(b + "ffn_norm.weight"))
        a, u = h @ g(b + "ffn_gate.weight").T, h @ g(b + "ffn_up.weight").T
        x = x + (a / (1 + np.exp(-a)) * u) @ g(b + "ffn_down.weight").T
    return norm(x, g("output_norm.weight")) @ g("output.weight").T


@pytest.mark.parametrize("wtype", WTYPES)
def test_llama_cpp_opens_and_runs(tiny_files, wtype):
    """llama.cpp loads the file, tokenizes with its vocabulary, and its logits at every position
    match the float64 numpy reference computed from the weights as the gguf package decodes
    them: the layout, orientation, RoPE mode and our quantized blocks mean the same to both.
    (Quantized matmuls in ggml also quantize the activations to 8 bits: hence the looser bound.)"""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    llm = llama_cpp.Llama(model_path=tiny_files[wtype], n_ctx=64, n_threads=1, logits_all=True,
                          verbose=False)
    try:
        assert llm.n_vocab() == 32000 and llm.n_embd() == 288
        toks = llm.tokenize(b"hello world, this is a synthetic model")
        assert toks[0] == 1 and len(toks) > 5
        llm.eval(toks)
        logits = np.array(llm.scores[:llm.n_tokens], np.float64)
    finally:
        if hasattr(llm, "close"):
            llm.close()
    assert logits.shape == (len(toks), 32000) and np.isfinite(logits).all()
    assert logits.std() > 0.1
    with GGUFReader(tiny_files[wtype]) as r:
        ref = numpy_llama_logits(r, toks)
    nmse = ((logits - ref) ** 2).sum() / (ref ** 2).sum()
    assert nmse < (1e-5 if wtype == "f16" else 2e-3), nmse
    if wtype == "f16":
        assert (logits.argmax(1) == ref.argmax(1)).all()


@pytest.mark.parametrize("mix", ["llama", "pure"])
def test_llama_cpp_gqa_k_quants(tmp_path, mix):
    """Grouped-query attention (8 heads, 2 kv heads) with 256-wide rows, so every matrix is a
    K-quant (q4_K, q6_K): llama.cpp agrees with the numpy reference."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python not installed")
    shape = dict(n_embd=256, n_layer=2, n_head=8, n_head_kv=2, n_ff=512, rope_base=500000.0)
    p = str(tmp_path / "gqa.gguf")
    plan = write_synth_model(p, shape, "q4_K", seed=4, progress=False, quantize=numpy_quantize,
                             mix=mix)
    assert {t.type for t in plan} == ({"q4_K", "q6_K", "f32"} if mix == "llama" else {"q4_K", "f32"})
    llm = llama_cpp.Llama(model_path=p, n_ctx=32, n_threads=1, logits_all=True, verbose=False)
    try:
        toks = llm.tokenize(b"grouped query attention")
        llm.eval(toks)
        logits = np.array(llm.scores[:llm.n_tokens], np.float64)
    finally:
        if hasattr(llm, "close"):
            llm.close()
    with GGUFReader(p) as r:
        ref = numpy_llama_logits(r, toks)
    nmse = ((logits - ref) ** 2).sum() / (ref ** 2).sum()
    assert logits.std() > 0.1 and nmse < 2e-3, nmse
