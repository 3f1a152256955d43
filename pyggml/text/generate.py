"""The generation loop over a Model: prompt in, tokens or text out, optionally streamed.

Tokens: `token_stream` prefills the prompt and yields each new token; greedy decoding without a
penalty takes the argmax on the device (one int read back per token), anything else reads the
logits and samples on the host (sampling.Sampler).

Text: `TextStream` turns tokens into text pieces that never end inside a UTF-8 character and
never show a stop string (text that may be the start of one is held back until it is known not to
be); a stop token (end of generation, or one the caller names) ends the text without being shown.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

from ..errors import ConcurrentUseError, ShapeError
from .sampling import Sampler, SamplingParams


@dataclass
class GenerationStats:
    """Timings of the last generation (perf_counter seconds)."""
    n_prompt: int = 0                 # prompt tokens run (after reusing the cached prefix)
    n_cached: int = 0                 # prompt tokens already in the cache and reused
    n_generated: int = 0
    prompt_s: float = 0.0             # prefill, up to the first new token (time to first token)
    generate_s: float = 0.0           # after the first token, to the last
    stop_reason: str = ""             # "length", "stop token", "stop string"

    @property
    def ttft_s(self) -> float:
        return self.prompt_s

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: tokens after the first over the time they took."""
        return (self.n_generated - 1) / self.generate_s if self.n_generated > 1 and self.generate_s > 0 else 0.0

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.n_prompt / self.prompt_s if self.prompt_s > 0 else 0.0

    def summary(self) -> str:
        return (f"prompt {self.n_prompt} tokens ({self.n_cached} cached) in {self.prompt_s * 1e3:.0f} ms "
                f"(time to first token; {self.prompt_tokens_per_s:.1f} t/s), generated {self.n_generated} tokens, "
                f"{self.tokens_per_s:.1f} t/s; stop: {self.stop_reason}")


def reuse_prefix(model, ids: Sequence[int]) -> int:
    """Keep the longest prefix of the model's context that `ids` starts with (at least one token of
    `ids` must still run, for its logits); forget the rest. Returns the number of tokens kept."""
    if not len(ids):
        raise ShapeError("the prompt is empty (and the model adds no BOS token): generation needs at least one "
                         "token to continue from")
    have = model.tokens
    k = 0
    for a, b in zip(have, ids):
        if a != b:
            break
        k += 1
    k = min(k, len(ids) - 1)
    if k < model.n_past:
        model.n_past = k
        del model.tokens[k:]
    return k


def token_stream(model, prompt: Sequence[int], max_tokens: int, params: SamplingParams | None = None,
                 stop_ids: Iterable[int] = (), stats: GenerationStats | None = None,
                 device_argmax: bool = True) -> Iterator[int]:
    """New tokens after `prompt` (run after the model's current context), up to max_tokens; a token
    in stop_ids is yielded and ends the stream."""
    params = params or SamplingParams()
    stats = stats if stats is not None else GenerationStats()
    stats.n_prompt = len(prompt)
    stop = frozenset(int(t) for t in stop_ids)
    if max_tokens <= 0:
        stats.stop_reason = "length"
        return
    on_device = params.greedy and not params.penalized and device_argmax
    sampler = None if on_device else Sampler(params)
    history = list(model.tokens)
    feed = list(prompt)
    expect = len(model.tokens)
    t0 = time.perf_counter()
    n = 0
    while True:
        if len(model.tokens) != expect:
            raise ConcurrentUseError("the model's context changed during this generation: another caller used the "
                                     "model between two of its tokens (drive a Model from one place at a time)")
        expect += len(feed)
        if on_device:
            tok = model._next(feed, True)
        else:
            logits = model.prefill(feed) if len(feed) > 1 else model.decode(feed[0])
            history.extend(feed)
            tok = sampler.sample(logits, history)
        n += 1
        now = time.perf_counter()
        if n == 1:
            stats.prompt_s = now - t0
            t1 = now
        else:
            stats.generate_s = now - t1
        stats.n_generated = n
        reason = ("stop token" if tok in stop else "length" if n >= max_tokens
                  else "context full" if model.n_past >= model.n_ctx else "")
        stats.stop_reason = reason
        yield tok
        if reason:
            return
        feed = [tok]


class TextStream:
    """Tokens -> text pieces with stop strings held back (see the module doc)."""

    def __init__(self, tokenizer, stop_strings: Sequence[str] = ()):
        self._dec = tokenizer.decoder()
        self._stops = [s for s in stop_strings if s]
        self._pending = ""
        self.text = ""               # everything emitted so far
        self.stopped = False

    def _held(self, s: str) -> int:
        """Length of the longest end of s that begins some stop string."""
        best = 0
        for st in self._stops:
            for k in range(min(len(st) - 1, len(s)), best, -1):
                if s.endswith(st[:k]):
                    best = k
                    break
        return best

    def _emit(self, s: str) -> str:
        self.text += s
        return s

    def _scan(self, final: bool) -> str:
        p = self._pending
        cut = min((i for i in (p.find(st) for st in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            self._pending = ""
            return self._emit(p[:cut])
        keep = 0 if final else self._held(p)
        self._pending = p[len(p) - keep:] if keep else ""
        return self._emit(p[:len(p) - keep])

    def push(self, tok: int) -> str:
        """The text that may be shown after this token ('' while held back)."""
        if self.stopped:
            return ""
        self._pending += self._dec.add(tok)
        return self._scan(False)

    def finish(self) -> str:
        """What is left once generation ends (held text that did not become a stop string)."""
        if self.stopped:
            return ""
        self._pending += self._dec.flush()
        return self._scan(True)


def split_stops(stop: Iterable[int | str] | None) -> tuple[set, list]:
    """(token ids, strings) of a mixed stop list."""
    ids, strs = set(), []
    for s in stop or ():
        if isinstance(s, str):
            strs.append(s)
        elif isinstance(s, (int,)) or hasattr(s, "__index__"):
            ids.add(int(s))
        else:
            raise TypeError(f"a stop must be a token id (int) or a string, not {type(s).__name__}")
    return ids, strs


def text_stream(model, prompt_ids: Sequence[int], max_tokens: int, params: SamplingParams | None = None,
                stop: Iterable[int | str] | None = (), stats: GenerationStats | None = None,
                device_argmax: bool = True, continue_context: bool = False) -> Iterator[str]:
    """Text pieces generated after prompt_ids. The context becomes the prompt (reusing the cached
    prefix), or with continue_context=True the prompt is run after the current context. Ends at
    max_tokens, an end-of-generation token, a stop token id or a stop string."""
    stats = stats if stats is not None else GenerationStats()
    tok = model.tokenizer
    ids, strs = split_stops(stop)
    stop_ids = set(tok.eog) | ids
    ts = TextStream(tok, strs)
    kept = 0 if continue_context else reuse_prefix(model, prompt_ids)
    for t in token_stream(model, list(prompt_ids[kept:]), max_tokens, params, stop_ids, stats, device_argmax):
        if t in stop_ids:
            break
        piece = ts.push(t)
        if piece:
            yield piece
        if ts.stopped:
            stats.stop_reason = "stop string"
            break
    stats.n_cached = kept
    rest = ts.finish()
    if rest:
        yield rest
