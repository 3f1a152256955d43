"""A GGUF vocabulary: token texts, scores, attributes, special ids and the settings that decide how
text becomes tokens, read from the `tokenizer.*` metadata with llama.cpp's defaults and fix-ups.

Token types in the file (tokenizer.ggml.token_type): 1 normal, 2 unknown, 3 control,
4 user-defined, 5 unused, 6 byte. llama.cpp forces some tokens to "control" by their text (the
end-of-turn and fill-in-the-middle markers) and treats a set of them as end of generation; the same
rules apply here so that tokens, special-token splitting and stops agree with it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import TokenizerError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

SPM, BPE = "spm", "bpe"
_MODELS = {"llama": SPM, "gpt2": BPE}

# llama.cpp's fix-ups by token text: the first token found with one of these texts becomes the
# end-of-turn / end-of-message / fill-in-the-middle token when the metadata names none, and is made
# a control token; tokens with the _EOG_TEXTS end a generation (and are made control tokens too).
_ROLE_TEXTS = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
            "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = frozenset(("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
                        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
                        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                        "<｜end▁of▁sentence｜>", "[e~["))
_ALWAYS_SHOWN = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")     # user-defined (gpt-oss)
_ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id", "eom": "eom_token_id",
            "unk": "unknown_token_id", "sep": "seperator_token_id", "pad": "padding_token_id",
            "fim_pre": "fim_pre_token_id", "fim_suf": "fim_suf_token_id", "fim_mid": "fim_mid_token_id",
            "fim_pad": "fim_pad_token_id", "fim_rep": "fim_rep_token_id", "fim_sep": "fim_sep_token_id"}
_ID_KEYS_OLD = {"fim_pre": "prefix_token_id", "fim_suf": "suffix_token_id", "fim_mid": "middle_token_id"}

_log = logging.getLogger("pyggml")


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


def _special_ids(md, defaults, n, where):
    """The special token ids: defaults, replaced by the metadata's where it gives an id in range
    (an id out of range keeps the default, as llama.cpp does, with a warning)."""
    ids = {}
    for role, key in _ID_KEYS.items():
        v = defaults.get(role)
        if v is not None and not 0 <= v < n:
            v = None
        for k in (key, _ID_KEYS_OLD.get(role)):
            raw = md.get(f"tokenizer.ggml.{k}") if k else None
            if raw is None:
                continue
            if isinstance(raw, bool) or not isinstance(raw, (int,)) and not hasattr(raw, "__index__"):
                raise TokenizerError(f"{where}: metadata tokenizer.ggml.{k} = {raw!r} is not a token id")
            if 0 <= int(raw) < n:
                v = int(raw)
            else:
                _log.warning("%s: tokenizer.ggml.%s = %s is out of the %d-token vocabulary; using %s", where, k,
                             raw, n, v)
        ids[role] = v
    return ids


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
            pos = m.find(" ", 1) if isinstance(m, str) else -1
            if pos < 0:
                raise TokenizerError(f"{where}: merge {m!r} is not 'LEFT RIGHT'")
            merges.append((m[:pos], m[pos + 1:]))

    pre = md.get("tokenizer.ggml.pre") or "default"
    if kind == SPM:
        defaults = {"bos": 1, "eos": 2, "unk": 0}
        add_bos, add_eos, space = True, False, True
    else:
        from .bpe import pre_settings
        ps = pre_settings(pre, where)
        defaults = {"bos": None if ps["no_bos"] else 11, "eos": 11}
        add_bos, add_eos, space = ps["add_bos"], False, False
    ids = _special_ids(md, defaults, n, where)
    add_bos = _opt_bool(md, "tokenizer.ggml.add_bos_token", add_bos)
    add_eos = _opt_bool(md, "tokenizer.ggml.add_eos_token", add_eos)
    space = _opt_bool(md, "tokenizer.ggml.add_space_prefix", space)

    token_to_id = {t: i for i, t in enumerate(tokens)}          # a repeated text: the last id, as llama.cpp
    control = set()                                             # ids made control tokens by their text
    for role, texts in _ROLE_TEXTS.items():
        found = [token_to_id[t] for t in texts if t in token_to_id]
        if ids[role] is None and found:
            ids[role] = min(found)
            control.add(ids[role])
    eog = {ids[r] for r in ("fim_pad", "fim_rep", "fim_sep") if ids[r] is not None}
    for t in _EOG_TEXTS:
        if t in token_to_id:
            eog.add(token_to_id[t])
            control.add(token_to_id[t])
    for tid in control:
        types[tid] = CONTROL
    for t in _ALWAYS_SHOWN:
        if t in token_to_id:
            types[token_to_id[t]] = USER_DEFINED
    eog.update(ids[r] for r in ("eos", "eot", "eom") if ids[r] is not None)
    texts = {tokens[i]: i for i in eog}
    if "<|end|>" in texts and (("<|return|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts))
                               or ("<|calls|>" in texts and "<|flush|>" in texts)):
        eog.discard(texts["<|end|>"])
        types[texts["<|end|>"]] = USER_DEFINED
    if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
        eog.discard(texts["</s>"])
        types[texts["</s>"]] = NORMAL
    special = [i for i, ty in enumerate(types) if ty in (CONTROL, USER_DEFINED, UNKNOWN)]
    special.sort(key=lambda i: (-len(tokens[i].encode()), i))
    tmpl = md.get("tokenizer.chat_template")
    return Vocab(kind=kind, pre=pre, tokens=tokens, scores=scores, types=types, merges=merges, bos=ids["bos"],
                 eos=ids["eos"], eot=ids["eot"], unk=ids["unk"], pad=ids["pad"], add_bos=add_bos, add_eos=add_eos,
                 add_space_prefix=space,
                 eog=frozenset(eog), chat_template=tmpl if isinstance(tmpl, str) else None,
                 token_to_id=token_to_id, special=special)


def from_reader(reader) -> Vocab:
    """The vocabulary of an open GGUFReader."""
    keys = [k for k in reader.fields if k.startswith("tokenizer.")]
    return from_metadata({k: reader.get(k) for k in keys}, where=str(getattr(reader, "path", "GGUF")))
