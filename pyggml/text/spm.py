"""SentencePiece-style BPE over scores (`tokenizer.ggml.model = llama`), the way llama.cpp runs it.

No library reproduces llama.cpp here: sentencepiece normalizes its input (NFKC, whitespace) and a
`tokenizers` BPE needs ranked merges, which an SPM GGUF does not have (ties between merges of equal
score are broken by position, not by a rank). The algorithm: the text is split into characters;
every adjacent pair whose concatenation is a token is a candidate scored by that token's score;
the best candidate (ties: the leftmost) is merged and its neighbours become new candidates, until
none is left. A final piece that is not a token is written as its UTF-8 bytes (<0xXX> tokens).
"""
from __future__ import annotations

import heapq

from .errors import TokenizerError

SPACE = "\u2581"        # "▁", SentencePiece's visible space


class SPMEncoder:
    """Raw text (no special tokens; the caller adds the space prefix) -> token ids."""

    def __init__(self, vocab):
        self.t2i = vocab.token_to_id
        self.scores = vocab.scores
        self.unk = vocab.unk
        self._bytes = []
        for b in range(256):
            tid = self.t2i.get(f"<0x{b:02X}>")
            if tid is None:
                tid = self.t2i.get(chr(b)) if b < 128 else None
            self._bytes.append(tid)

    def byte_token(self, b: int) -> int:
        tid = self._bytes[b]
        if tid is None:
            if self.unk is None:
                raise TokenizerError(f"byte 0x{b:02X} has no token and the vocabulary has no unknown token")
            return self.unk
        return tid

    def encode(self, text: str) -> list[int]:
        text = text.replace(" ", SPACE)
        n = len(text)
        if n == 0:
            return []
        t2i, scores = self.t2i, self.scores
        start = list(range(n))              # symbol i covers text[start[i]:end[i]]; merged-away: end = -1
        end = list(range(1, n + 1))
        prev = list(range(-1, n - 1))
        nxt = list(range(1, n + 1))
        nxt[-1] = -1
        heap = []

        def push(left, right):
            if left < 0 or right < 0:
                return
            piece = text[start[left]:end[right]]
            tid = t2i.get(piece)
            if tid is not None:
                heapq.heappush(heap, (-scores[tid], left, right, len(piece)))

        for i in range(1, n):
            push(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if end[left] < 0 or end[right] < 0 or (end[left] - start[left]) + (end[right] - start[right]) != size:
                continue                    # stale: one side has changed since this pair was seen
            end[left] = end[right]
            end[right] = -1
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            push(prev[left], left)
            push(left, nxt[left])
        out = []
        i = 0
        while i != -1:
            piece = text[start[i]:end[i]]
            tid = t2i.get(piece)
            if tid is not None:
                out.append(tid)
            else:
                out.extend(self.byte_token(b) for b in piece.encode())
            i = nxt[i]
        return out
