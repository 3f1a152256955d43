"""Sampling, streamed text with stop strings, chat templates in jinja2's sandbox, and text
generation through Model on the synthetic tiny LLaMA (its vocabulary is a synthetic SPM one)."""
import collections

import numpy as np
import pytest

import pyggml.models as models
from pyggml.synth import write_synth_model
from pyggml.text import ChatTemplate, ChatTemplateError, Sampler, SamplingParams, TextStream, Tokenizer
from pyggml.text.vocab import from_metadata


# ------------------------------------------------------------------ sampling

def _draws(params, logits, n=2000, history=()):
    s = Sampler(params)
    return collections.Counter(s.sample(logits, history) for _ in range(n))


LOGITS = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], np.float32))


def test_greedy_and_top_k_1_are_argmax():
    x = np.array([0.1, 3.0, 2.9, -1.0], np.float32)
    assert Sampler(SamplingParams()).sample(x) == 1
    assert set(_draws(SamplingParams(temperature=1.5, top_k=1, top_p=1.0, min_p=0.0), x, 200)) == {1}


def test_top_k_top_p_min_p_cut_the_tail():
    hot = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=1)
    assert set(_draws(SamplingParams(**hot), LOGITS)) == {0, 1, 2, 3, 4}
    assert set(_draws(SamplingParams(**{**hot, "top_k": 2}), LOGITS)) == {0, 1}
    assert set(_draws(SamplingParams(**{**hot, "top_p": 0.8}), LOGITS)) == {0, 1, 2}     # 0.5+0.2 < 0.8 <= 0.85
    assert set(_draws(SamplingParams(**{**hot, "min_p": 0.25}), LOGITS)) == {0, 1, 2}    # p >= 0.125
    # the kept tokens keep their relative odds (temperature 1): token 0 about 0.5/0.85 of the draws
    c = _draws(SamplingParams(**{**hot, "top_p": 0.8}), LOGITS, 4000)
    assert abs(c[0] / 4000 - 0.5 / 0.85) < 0.04


def test_temperature_sharpens_and_flattens():
    cold = _draws(SamplingParams(temperature=0.2, top_k=0, top_p=1.0, min_p=0.0, seed=2), LOGITS)
    warm = _draws(SamplingParams(temperature=3.0, top_k=0, top_p=1.0, min_p=0.0, seed=2), LOGITS)
    assert cold[0] > 1900 and warm[0] < 900 and warm[4] > 150


def test_seed_reproduces_and_differs():
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    a = [Sampler(p).sample(LOGITS) for _ in range(1)] + list(_draws(p, LOGITS, 50).elements())
    b = [Sampler(p).sample(LOGITS) for _ in range(1)] + list(_draws(p, LOGITS, 50).elements())
    assert a == b
    s1, s2 = Sampler(p), Sampler(SamplingParams.make(p, seed=8))
    assert [s1.sample(LOGITS) for _ in range(40)] != [s2.sample(LOGITS) for _ in range(40)]


def test_repetition_penalty_is_llama_cpps_rule():
    s = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=2))
    x = np.array([4.0, -1.0, 3.0, 1.0], np.float32)
    out = s.penalize(x, [0, 1, 3, 3])                 # last 2: token 3 only
    assert out.tolist() == [4.0, -1.0, 3.0, 0.5]
    out = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=-1)).penalize(x, [0, 1])
    assert out.tolist() == [2.0, -2.0, 3.0, 1.0]
    assert Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=-1)).sample(x, [0, 1]) == 2
    assert x.tolist() == [4.0, -1.0, 3.0, 1.0]        # the caller's logits are not changed


def test_bad_sampling_parameters():
    for kw in ({"temperature": -1}, {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": 2}, {"repeat_penalty": 0},
               {"top_k": 1.5}, {"temperature": float("nan")}, {"repeat_last_n": -2}):
        with pytest.raises(ValueError):
            SamplingParams(**kw)
    with pytest.raises(TypeError, match="unknown sampling parameter"):
        SamplingParams.make(tempreature=1.0)


# ------------------------------------------------------------------ text stream

class _ByteVocab:
    """A tokenizer whose token i is byte i (enough for TextStream)."""

    def decoder(self):
        import codecs

        class D:
            def __init__(self):
                self.d = codecs.getincrementaldecoder("utf-8")(errors="replace")

            def add(self, t):
                return self.d.decode(bytes([t]))

            def flush(self):
                return self.d.decode(b"", final=True)
        return D()


def _stream(text, stops):
    ts = TextStream(_ByteVocab(), stops)
    pieces = []
    for b in text.encode():
        pieces.append(ts.push(b))
        if ts.stopped:
            break
    pieces.append(ts.finish())
    return pieces, ts


def test_text_stream_utf8_and_stop_strings():
    pieces, ts = _stream("héllo 🦙 wörld", [])
    assert "".join(pieces) == "héllo 🦙 wörld" and all("\ufffd" not in p for p in pieces)
    assert pieces.count("") >= 4                      # the bytes of é, 🦙 (3 held) and ö
    pieces, ts = _stream("Answer: Paris.\nUser: more", ["\nUser:"])
    assert "".join(pieces) == "Answer: Paris." and ts.stopped
    assert not any("\n" in p for p in pieces)         # the start of the stop string was held, never shown
    pieces, ts = _stream("a\nUs b", ["\nUser:"])      # a false start is released at the end
    assert "".join(pieces) == "a\nUs b" and not ts.stopped
    pieces, ts = _stream("xxABCyy", ["BC", "ABD"])    # the earliest stop string wins
    assert "".join(pieces) == "xxA"


# ------------------------------------------------------------------ chat templates

SMOL_TMPL = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
             "{{ '<|im_start|>system\\nYou are helpful<|im_end|>\\n' }}{% endif %}"
             "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
             "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def test_chat_template_renders():
    t = ChatTemplate(SMOL_TMPL)
    out = t.render([{"role": "user", "content": "Hi"}])
    assert out == ("<|im_start|>system\nYou are helpful<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                   "<|im_start|>assistant\n")
    assert not t.render([{"role": "user", "content": "Hi"}], add_generation_prompt=False).endswith("assistant\n")
    t = ChatTemplate("{{ bos_token }}{% for m in messages %}{{ m['content'] | tojson }}{% endfor %}", bos_token="<s>")
    assert t.render([{"role": "user", "content": "é\""}]) == '<s>"é\\""'


def test_chat_template_sandbox_and_errors():
    evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError, match="unsafe|failed"):
        evil.render([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="refused the messages: only user"):
        ChatTemplate("{{ raise_exception('only user') }}").render([{"role": "user", "content": "x"}])
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for %}")
    with pytest.raises(ChatTemplateError, match="empty"):
        ChatTemplate("  ")
    t = ChatTemplate(SMOL_TMPL)
    with pytest.raises(ChatTemplateError, match="list of"):
        t.render("hello")
    with pytest.raises(ChatTemplateError, match="message 0"):
        t.render([{"content": "no role"}])


# ------------------------------------------------------------------ through a model

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("gen") / "tiny.gguf")
    write_synth_model(p, "tiny", "q8_0", seed=5, progress=False)
    m = models.load(p, n_ctx=96, progress=False)
    yield m
    m.close()


def test_model_text_generation(tiny):
    m = tiny
    ids = m.tokenize("hello world")
    assert ids[0] == m.tokenizer.bos and m.detokenize(ids) == "hello world"
    m.reset()
    toks = m.generate(ids, 6)                          # token prompt: token ids, greedy, as before
    assert len(toks) == 6
    m.reset()
    text = m.generate("hello world", 6)                # text prompt: the same continuation as text
    assert text == m.detokenize(toks) or m.last_stats.stop_reason == "stop token"
    pieces = list(m.generate("hello world", 6, stream=True))
    assert "".join(pieces) == text and m.last_stats.n_cached == len(ids) - 1      # the prompt prefix reused
    assert m.last_stats.n_generated <= 6 and m.last_stats.ttft_s > 0
    # seeded sampling is reproducible
    a = m.generate("hello", 8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    b = m.generate("hello", 8, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=3)
    assert a == b
    # a stop string cuts the text where it starts
    full = m.generate("hello world", 12)
    if len(full) > 4:
        stop = full[2:4]
        cut = m.generate("hello world", 12, stop=[stop])
        assert cut == full[:full.index(stop)]
        assert m.last_stats.stop_reason == "stop string"
    with pytest.raises(TypeError, match="stop strings"):
        m.generate(ids, 4, stop=["x"])
    with pytest.raises(ChatTemplateError, match="no chat template"):
        m.chat([{"role": "user", "content": "hi"}])


def test_generation_stops_at_the_context_end(tiny):
    m = tiny
    m.reset()
    out = m.generate(list(range(3, 90)), 50)
    assert len(out) == 96 - 87 + 1 and m.last_stats.stop_reason == "context full"


def test_tokenizer_after_close(tmp_path):
    p = str(tmp_path / "t.gguf")
    write_synth_model(p, "tiny", "f16", seed=1, progress=False)
    with models.load(p, n_ctx=16, progress=False) as m:
        assert m.tokenize("a")
    from pyggml import ClosedError
    with pytest.raises(ClosedError, match="closed"):
        m.tokenize("a")
    with pytest.raises(ClosedError):
        m.generate("a", 2)


def test_synth_vocab_is_a_working_spm_vocab(tiny):
    v = tiny.tokenizer.vocab
    assert v.kind == "spm" and v.add_bos
    tok = Tokenizer(from_metadata({"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": v.tokens,
                                   "tokenizer.ggml.scores": v.scores, "tokenizer.ggml.token_type": v.types}))
    assert tok.tokenize("some text 123") == tiny.tokenize("some text 123")
