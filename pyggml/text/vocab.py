"""A GGUF vocabulary: token texts, scores, attributes, special ids and the settings that decide how
text becomes tokens, read from the `tokenizer.*` metadata with llama.cpp's defaults and fix-ups.

Token types in the file (tokenizer.ggml.token_type): 1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte. llama.cpp forces some tokens to "control" by their text (the
end-of-turn and fill-in-the-middle markers) and treats a set of them as end of generation; the same
rules apply here so that tokens, special-token splitting and stops agree with it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import TokenizerError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SPM, BPE = "spm", "bpe"
_MODELS = {"llama": SPM, "gpt2": BPE}

# Texts llama.cpp takes for end-of-turn / end-of-generation / fill-in-the-middle markers.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
              "<EOT>", "_<EOT>", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
              "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>")
_FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>", "<file_sep>", "<fim-sep>", "<fim_sep>"),
}
_FIM_EOG = ("pad", "rep", "sep")


@dataclass
class Vocab:
    kind: str                       # SPM or BPE
    pre: str                        # tokenizer.ggml.pre ("default" when absent)
    tokens: list[str]
    scores: list[float]
    types: list[int]
    merges: list[tuple[str, str]]
    bos: int | None
    eos: int | None
    eot: int | None
    unk: int | None
    pad: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog: frozenset = frozenset()
    chat_template: str | None = None
    token_to_id: dict = field(default_factory=dict)
    special: list = field(default_factory=list)     # ids split out of raw text, longest text first

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def is_control(self, tid: int) -> bool:
        return self.types[tid] in (CONTROL, UNKNOWN)


def _opt_id(md, key, default, n):
    v = md.get(key, default)
    if v is None:
        return None
    try:
        v = int(v)
    except (TypeError, ValueError):
        raise TokenizerError(f"metadata {key} = {v!r} is not a token id") from None
    if v == -1 or v == 0xFFFFFFFF:
        return None
    if not 0 <= v < n:
        raise TokenizerError(f"metadata {key} = {v} is not a token id of a {n}-token vocabulary")
    return v


def _opt_bool(md, key, default):
    v = md.get(key)
    return default if v is None else bool(v)


def from_metadata(md: Mapping[str, Any], where: str = "GGUF") -> Vocab:
    """The vocabulary of a model from its metadata ({key: value}, as GGUFReader.get gives)."""
    model = md.get("tokenizer.ggml.model")
    if model is None:
        raise TokenizerError(f"{where}: no vocabulary (metadata tokenizer.ggml.model is missing)")
    kind = _MODELS.get(model)
    if kind is None:
        raise TokenizerError(f"{where}: vocabulary type {model!r} is not supported (pyggml reads "
                             f"{', '.join(sorted(_MODELS))})")
    tokens = md.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, (list, tuple)) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise TokenizerError(f"{where}: tokenizer.ggml.tokens must be a non-empty array of strings")
    n = len(tokens)
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]

    def array(key, default, conv):
        v = md.get(key)
        if v is None:
            return [default] * n
        v = list(v)
        if len(v) != n:
            raise TokenizerError(f"{where}: {key} has {len(v)} entries for {n} tokens")
        return [conv(x) for x in v]
    scores = array("tokenizer.ggml.scores", 0.0, float)
    types = array("tokenizer.ggml.token_type", NORMAL, int)
    merges = []
    if kind == BPE:
        raw = md.get("tokenizer.ggml.merges")
        if not isinstance(raw, (list, tuple)) or not raw:
            raise TokenizerError(f"{where}: a gpt2 (BPE) vocabulary needs tokenizer.ggml.merges")
        for m in raw:
            pos = m.find(" ", 1)
            if pos < 0:
                raise TokenizerError(f"{where}: merge {m!r} is not 'LEFT RIGHT'")
            merges.append((m[:pos], m[pos + 1:]))

    pre = md.get("tokenizer.ggml.pre") or "default"
    if kind == SPM:
        bos_d, eos_d, unk_d = 1, 2, 0
        add_bos, add_eos, space = True, False, True
    else:
        bos_d = eos_d = 11 if n > 11 else None
        unk_d = None
        add_bos, add_eos, space = False, False, False
        from .bpe import pre_settings
        add_bos = pre_settings(pre, where)["add_bos"]
    bos = _opt_id(md, "tokenizer.ggml.bos_token_id", bos_d, n)
    eos = _opt_id(md, "tokenizer.ggml.eos_token_id", eos_d, n)
    unk = _opt_id(md, "tokenizer.ggml.unknown_token_id", unk_d, n)
    pad = _opt_id(md, "tokenizer.ggml.padding_token_id", None, n)
    eot = _opt_id(md, "tokenizer.ggml.eot_token_id", None, n)
    eom = _opt_id(md, "tokenizer.ggml.eom_token_id", None, n)
    add_bos = _opt_bool(md, "tokenizer.ggml.add_bos_token", add_bos)
    add_eos = _opt_bool(md, "tokenizer.ggml.add_eos_token", add_eos)
    space = _opt_bool(md, "tokenizer.ggml.add_space_prefix", space)

    token_to_id = {t: i for i, t in enumerate(tokens)}          # a repeated text: the last id, as llama.cpp

    def force_control(tid):
        if types[tid] != CONTROL:
            types[tid] = CONTROL
    if eot is None:
        for t in _EOT_TEXTS:
            if t in token_to_id:
                eot = token_to_id[t]
                force_control(eot)
                break
    eog = set()
    for role, texts in _FIM_TEXTS.items():
        for t in texts:
            if t in token_to_id:
                force_control(token_to_id[t])
                if role in _FIM_EOG:
                    eog.add(token_to_id[t])
                break
    for t in _EOG_TEXTS:
        if t in token_to_id:
            eog.add(token_to_id[t])
            force_control(token_to_id[t])
    eog.update(x for x in (eos, eot, eom) if x is not None)
    special = [i for i, ty in enumerate(types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)]
    special.sort(key=lambda i: (-len(tokens[i].encode()), i))
    tmpl = md.get("tokenizer.chat_template")
    return Vocab(kind=kind, pre=pre, tokens=tokens, scores=scores, types=types, merges=merges, bos=bos, eos=eos,
                 eot=eot, unk=unk, pad=pad, add_bos=add_bos, add_eos=add_eos, add_space_prefix=space,
                 eog=frozenset(eog), chat_template=tmpl if isinstance(tmpl, str) else None,
                 token_to_id=token_to_id, special=special)


def from_reader(reader) -> Vocab:
    """The vocabulary of an open GGUFReader."""
    keys = [k for k in reader.fields if k.startswith("tokenizer.")]
    return from_metadata({k: reader.get(k) for k in keys}, where=str(getattr(reader, "path", "GGUF")))
