"""Choosing the next token from logits: greedy, or the chain llama.cpp uses by default —
repetition penalty, top-k, top-p, min-p, temperature, then a draw from the distribution left.

    s = Sampler(SamplingParams(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05, seed=1))
    tok = s.sample(logits, history)

temperature <= 0 is greedy (argmax; the model may then take the argmax on the device). The
penalty divides positive logits and multiplies negative ones of the tokens among the last
`repeat_last_n` (llama.cpp's rule). A seed makes a run reproducible: the same prompt, parameters
and seed give the same tokens.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0          # <= 0: greedy
    top_k: int = 40                   # <= 0: off
    top_p: float = 0.95               # >= 1: off
    min_p: float = 0.05               # <= 0: off
    repeat_penalty: float = 1.0       # 1: off
    repeat_last_n: int = 64           # tokens looked back for the penalty (-1: the whole context)
    seed: int | None = None           # None: a fresh random seed

    def __post_init__(self):
        for f in ("temperature", "top_p", "min_p", "repeat_penalty"):
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or v != v:
                raise ValueError(f"{f} must be a number, got {v!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0:
            raise ValueError(f"repeat_penalty must be > 0, got {self.repeat_penalty}")
        if int(self.top_k) != self.top_k or int(self.repeat_last_n) != self.repeat_last_n:
            raise ValueError("top_k and repeat_last_n must be integers")
        if self.repeat_last_n < -1:
            raise ValueError(f"repeat_last_n must be >= -1, got {self.repeat_last_n}")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def penalized(self) -> bool:
        return self.repeat_penalty != 1.0 and self.repeat_last_n != 0

    @classmethod
    def make(cls, params: "SamplingParams | None" = None, **kw) -> "SamplingParams":
        """params with the keyword arguments that are not None put in (unknown names: TypeError)."""
        names = {f.name for f in fields(cls)}
        bad = sorted(set(kw) - names)
        if bad:
            raise TypeError(f"unknown sampling parameter(s) {bad}; known: {sorted(names)}")
        kw = {k: v for k, v in kw.items() if v is not None}
        return replace(params or cls(), **kw)


class Sampler:
    """Stateful (its random generator) sampler for one generation."""

    def __init__(self, params: SamplingParams | None = None):
        self.params = params or SamplingParams()
        self.rng = np.random.default_rng(self.params.seed)

    def penalize(self, logits: np.ndarray, history: Sequence[int]) -> np.ndarray:
        p = self.params
        if not p.penalized or not len(history):
            return logits
        recent = history if p.repeat_last_n < 0 else history[-p.repeat_last_n:]
        ids = np.unique(np.asarray(recent, dtype=np.int64))
        logits = np.array(logits, dtype=np.float32, copy=True)
        sel = logits[ids]
        logits[ids] = np.where(sel > 0, sel / p.repeat_penalty, sel * p.repeat_penalty)
        return logits

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token id from one row of logits (n_vocab,)."""
        p = self.params
        x = self.penalize(np.asarray(logits, dtype=np.float32).reshape(-1), history)
        if p.greedy:
            return int(np.argmax(x))
        ids = np.arange(x.size)
        if 0 < p.top_k < x.size:
            keep = np.argpartition(-x, p.top_k - 1)[:p.top_k]
            ids, x = ids[keep], x[keep]
        order = np.argsort(-x, kind="stable")               # descending; ties keep the lower id first
        ids, x = ids[order], x[order].astype(np.float64)
        if p.top_p < 1.0 or p.min_p > 0.0:
            probs = np.exp(x - x[0])
            probs /= probs.sum()
            n = x.size
            if p.top_p < 1.0:
                n = min(n, int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1)
            if p.min_p > 0.0:
                n = min(n, max(1, int(np.count_nonzero(probs >= p.min_p * probs[0]))))
            ids, x = ids[:n], x[:n]
        z = x / p.temperature
        probs = np.exp(z - z.max())
        probs /= probs.sum()
        return int(ids[self.rng.choice(ids.size, p=probs)])
