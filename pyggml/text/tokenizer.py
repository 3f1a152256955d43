"""Text <-> token ids for a GGUF model, with llama.cpp's results.

    tok = Tokenizer.from_gguf("model.gguf")        # or Tokenizer(vocab_from_reader(reader))
    ids = tok.tokenize("Hello world", add_special=True, parse_special=True)
    text = tok.detokenize(ids)

tokenize: special-token texts (control, user-defined and unknown tokens; with parse_special=False
only user-defined ones) are cut out of the text first, longest first, and become their ids; the
text between them goes through the vocabulary's encoder (SPM: with "▁" for spaces and one in front
of every piece that starts the text or follows a special token; BPE: the pre-tokenizer, then byte
level BPE). add_special puts BOS/EOS around the result where the metadata asks for them.

detokenize: the pieces' bytes joined and decoded as UTF-8 (invalid bytes become U+FFFD); control
tokens give nothing unless special=True; for SPM the space the tokenizer put in front of a piece
is taken off again, so detokenize(tokenize(text)) == text.
"""
from __future__ import annotations

import codecs
import os
from typing import Iterable

from .errors import TokenizerError
from .vocab import BPE, BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED, SPM, Vocab, from_reader


class Tokenizer:
    """One model's tokenizer (see the module doc)."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._encoder = None
        self._pieces: list[bytes] | None = None

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Tokenizer":
        """The tokenizer of a GGUF file (metadata only: no tensor is read)."""
        from ..gguf import GGUFReader
        with GGUFReader(path) as r:
            return cls(from_reader(r))

    # ------------------------------------------------------------- properties

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos(self) -> int | None:
        return self.vocab.bos

    @property
    def eos(self) -> int | None:
        return self.vocab.eos

    @property
    def eog(self) -> frozenset:
        """Ids that end a generation (EOS, end of turn, ...)."""
        return self.vocab.eog

    @property
    def chat_template(self) -> str | None:
        return self.vocab.chat_template

    def _enc(self):
        if self._encoder is None:
            if self.vocab.kind == SPM:
                from .spm import SPMEncoder
                self._encoder = SPMEncoder(self.vocab)
            else:
                from .bpe import BPEEncoder
                self._encoder = BPEEncoder(self.vocab)
        return self._encoder

    # ------------------------------------------------------------- text -> ids

    def _partition(self, text: str, parse_special: bool) -> list:
        """The text as a list of str fragments and int (special token) ids."""
        v = self.vocab
        frags: list = [text] if text else []
        for tid in v.special:
            if not parse_special and v.types[tid] in (CONTROL, UNKNOWN):
                continue
            s = v.tokens[tid]
            if not any(isinstance(f, str) and s in f for f in frags):
                continue
            out: list = []
            for f in frags:
                if isinstance(f, str) and s in f:
                    parts = f.split(s)
                    for i, p in enumerate(parts):
                        if i:
                            out.append(tid)
                        if p:
                            out.append(p)
                else:
                    out.append(f)
            frags = out
        return frags

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text` (see the module doc). add_special: BOS/EOS as the model's metadata
        asks; parse_special: special-token texts such as "<|im_start|>" become their ids."""
        if not isinstance(text, str):
            raise TypeError(f"tokenize: text must be str, not {type(text).__name__}")
        v = self.vocab
        enc = self._enc()
        out: list[int] = []
        if add_special and v.add_bos and v.bos is not None:
            out.append(v.bos)
        prev_special = True
        for f in self._partition(text, parse_special):
            if isinstance(f, int):
                out.append(f)
                prev_special = True
                continue
            if v.kind == SPM and v.add_space_prefix and prev_special:
                f = " " + f
            out.extend(enc.encode(f))
            prev_special = False
        if add_special and v.add_eos and v.eos is not None:
            out.append(v.eos)
        return out

    # ------------------------------------------------------------- ids -> text

    def _piece_table(self) -> list[bytes]:
        if self._pieces is None:
            v = self.vocab
            if v.kind == BPE:
                from .bpe import decode_piece
            out = []
            for text, ty in zip(v.tokens, v.types):
                if ty in (CONTROL, UNKNOWN, USER_DEFINED):
                    out.append(text.encode())
                elif ty == NORMAL:
                    out.append(text.replace("\u2581", " ").encode() if v.kind == SPM else decode_piece(text))
                elif ty == BYTE and v.kind == SPM:
                    out.append(bytes([int(text[3:5], 16)]) if len(text) == 6 and text.startswith("<0x")
                               else text.encode())
                else:                               # unused / undefined: shown as nothing, as llama.cpp
                    out.append(b"")
            self._pieces = out
        return self._pieces

    def _check_id(self, tid) -> int:
        t = int(tid)
        if not 0 <= t < self.vocab.n_vocab:
            raise TokenizerError(f"token id {t} is not in [0, {self.vocab.n_vocab})")
        return t

    def token_to_piece(self, tid: int, special: bool = False) -> bytes:
        """The bytes one token stands for (a piece may be part of a UTF-8 character). Control and
        unknown tokens give b"" unless special=True."""
        t = self._check_id(tid)
        if not special and self.vocab.types[t] in (CONTROL, UNKNOWN):
            return b""
        return self._piece_table()[t]

    def detokenize(self, ids: Iterable[int], special: bool = False) -> str:
        """The text of `ids` (see the module doc)."""
        v = self.vocab
        strip = v.kind == SPM and v.add_space_prefix
        out = bytearray()
        after_special = True
        for tid in ids:
            t = self._check_id(tid)
            is_special = v.types[t] in (CONTROL, UNKNOWN)
            piece = self.token_to_piece(t, special)
            if is_special or v.types[t] == USER_DEFINED:
                after_special = True            # the tokenizer put a space in front of the text after it
            else:
                if strip and after_special and piece.startswith(b" "):
                    piece = piece[1:]
                after_special = False
            out += piece
        return out.decode("utf-8", errors="replace")

    def decoder(self, special: bool = False) -> "StreamDecoder":
        """An incremental decoder for generated tokens (text pieces never split a character)."""
        return StreamDecoder(self, special)

    def __repr__(self):
        v = self.vocab
        return (f"<pyggml Tokenizer {v.kind} pre={v.pre!r} n_vocab={v.n_vocab} bos={v.bos} eos={v.eos} "
                f"add_bos={v.add_bos}>")


class StreamDecoder:
    """Token ids in, text out, one token at a time: bytes of a character split over tokens are held
    until the character is complete. flush() returns what is left (U+FFFD for an unfinished
    character)."""

    def __init__(self, tok: Tokenizer, special: bool = False):
        self._tok = tok
        self._special = special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, tid: int) -> str:
        return self._dec.decode(self._tok.token_to_piece(tid, self._special))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
