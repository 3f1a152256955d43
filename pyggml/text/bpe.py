"""Byte-level BPE (`tokenizer.ggml.model = gpt2`) through the `tokenizers` library, built from the
GGUF's own vocabulary and merges, with llama.cpp's pre-tokenizer for `tokenizer.ggml.pre`.

A pre-tokenizer is a list of regular expressions applied in turn: each one splits every piece the
previous ones produced into its matches and the text between them (tokenizers' Split with
"isolated"). The pieces are then mapped to GPT-2's printable byte alphabet and merged by rank
within each piece. `ignore_merges`: a piece that is a whole token is taken as is (LLaMA 3).
"""
from __future__ import annotations

from .errors import TokenizerError

# The pieces of the expressions (the models' own tokenizer.json patterns, as llama.cpp uses them).
_CONTRACTIONS = "'s|'t|'re|'ve|'m|'ll|'d"
_GPT2 = _CONTRACTIONS + r"| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS_CI = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"
_QWEN35 = (_CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")

# family -> (expressions, ignore_merges, add_bos default, no BOS id by default)
_FAMILIES = {
    "default": ((r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"), False, False, False),
    "llama3": ((_LLAMA3,), True, True, False),
    "dbrx": ((_LLAMA3,), False, False, False),
    "gpt2": ((_GPT2,), False, False, False),
    "starcoder": ((r"\p{N}", _GPT2), False, False, False),
    "qwen2": ((_QWEN2,), False, False, False),
    "qwen35": ((_QWEN35,), False, False, False),
    "falcon": ((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"), False, False, False),
    "deepseek-coder": ((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"), False, False, False),
    "poro": ((_PORO,), False, False, False),
    "viking": ((_PORO, r"\p{N}"), False, False, False),
    "chatglm4": ((_LLAMA3,), False, False, True),
    "glm4": ((_LLAMA3,), True, False, True),
}

# tokenizer.ggml.pre -> family (the names llama.cpp accepts for these expressions)
PRE_TYPES = {
    "default": "default",
    "llama3": "llama3", "llama-v3": "llama3", "llama-bpe": "llama3", "falcon3": "llama3", "falcon-h1": "llama3",
    "pixtral": "llama3", "midm-2.0": "llama3", "lfm2": "llama3", "jina-v5-nano": "llama3",
    "dbrx": "dbrx", "smaug-bpe": "dbrx",
    "gpt-2": "gpt2", "phi-2": "gpt2", "jina-es": "gpt2", "jina-de": "gpt2", "gigachat": "gpt2",
    "jina-v1-en": "gpt2", "jina-v2-es": "gpt2", "jina-v2-de": "gpt2", "jina-v2-code": "gpt2",
    "roberta-bpe": "gpt2", "mpt": "gpt2", "olmo": "gpt2", "jais": "gpt2", "trillion": "gpt2",
    "a.x-4.0": "gpt2", "mellum": "gpt2", "modern-bert": "gpt2", "exaone4": "gpt2", "granite-docling": "gpt2",
    "starcoder": "starcoder", "refact": "starcoder", "command-r": "starcoder", "smollm": "starcoder",
    "codeshell": "starcoder", "exaone": "starcoder", "minerva-7b": "starcoder", "mellum2": "starcoder",
    "qwen2": "qwen2", "deepseek-r1-qwen": "qwen2", "kormo": "qwen2", "f2llmv2": "qwen2", "stablelm2": "qwen2",
    "megrez": "qwen2", "hunyuan": "qwen2", "solar-open": "qwen2", "grok-2": "qwen2",
    "qwen35": "qwen35",
    "falcon": "falcon",
    "deepseek-coder": "deepseek-coder",
    "poro-chat": "poro", "bloom": "poro", "gpt3-finnish": "poro",
    "viking": "viking",
    "chatglm-bpe": "chatglm4", "glm4": "glm4", "glm5": "glm4",
}


def pre_settings(pre: str, where: str = "GGUF") -> dict:
    """{"family", "regexes", "ignore_merges", "add_bos", "no_bos"} for a tokenizer.ggml.pre value."""
    fam = PRE_TYPES.get(pre or "default")
    if fam is None:
        raise TokenizerError(f"{where}: BPE pre-tokenizer {pre!r} is not supported (known: "
                             f"{', '.join(sorted(PRE_TYPES))})")
    regexes, ignore_merges, add_bos, no_bos = _FAMILIES[fam]
    return {"family": fam, "regexes": regexes, "ignore_merges": ignore_merges, "add_bos": add_bos, "no_bos": no_bos}


def _bytes_to_unicode():
    """GPT-2's map from the 256 byte values to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


BYTE_TO_CHAR = _bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def decode_piece(text: str) -> bytes:
    """A byte-level token's text back to its bytes (a character outside the byte alphabet is kept
    as its UTF-8, as llama.cpp's decoder keeps unknown text readable)."""
    out = bytearray()
    for ch in text:
        b = CHAR_TO_BYTE.get(ch)
        if b is None:
            out += ch.encode()
        else:
            out.append(b)
    return bytes(out)


class BPEEncoder:
    """Raw text (no special tokens) -> token ids, for one vocabulary."""

    def __init__(self, vocab):
        try:
            from tokenizers import Regex, Tokenizer, models, pre_tokenizers
        except ImportError as e:           # a declared dependency; say so rather than fail obscurely
            raise TokenizerError("BPE vocabularies need the `tokenizers` package (pip install tokenizers)") from e
        s = pre_settings(vocab.pre)
        t2i = vocab.token_to_id
        merges = [m for m in vocab.merges if m[0] in t2i and m[1] in t2i and m[0] + m[1] in t2i]
        model = models.BPE(vocab=dict(t2i), merges=merges, ignore_merges=s["ignore_merges"], fuse_unk=False)
        tok = Tokenizer(model)
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in s["regexes"]]
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        self._tok = tok
        self.family = s["family"]

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return self._tok.encode(text, add_special_tokens=False).ids
