"""Text methods of pyggml.models.Model (a mixin): the tokenizer from the GGUF, chat templates and
text generation, on top of the Model's prefill/decode.

    m = pyggml.load("SmolLM2-135M-Instruct.Q4_1.gguf")
    ids = m.tokenize("Hello")                      # BOS etc. as the metadata says
    print(m.generate("The capital of France is", 16))
    for piece in m.chat([{"role": "user", "content": "Hi!"}], 64, stream=True):
        print(piece, end="", flush=True)
"""
from __future__ import annotations

import numbers
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

from ..errors import ClosedError, TypeMismatchError

from .chat import ChatTemplate, for_tokenizer, render_prompt
from .generate import GenerationStats, split_stops, text_stream, token_stream
from .sampling import SamplingParams
from .tokenizer import Tokenizer
from .vocab import from_reader

Stop = Union[int, str]


def _count(n) -> int:
    """max_tokens as an int (a bool, float or str is an error, not a conversion)."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeMismatchError(f"max_tokens is an int, not {type(n).__name__} {n!r}")
    return int(n)


class TextMixin:
    """Tokenizer, chat and text generation for a Model (needs .reader, .tokens, .n_past, .n_ctx,
    prefill(), decode(), _next() and _check_tokens())."""

    _tokenizer: Tokenizer | None = None
    _chat_template: ChatTemplate | None = None
    last_stats: GenerationStats | None = None      # timings of the last generate()/chat()

    @property
    def tokenizer(self) -> Tokenizer:
        """The model's tokenizer, read from the GGUF metadata on first use."""
        if self._tokenizer is None:
            reader = getattr(self, "reader", None)
            if reader is None:
                raise ClosedError("Model.tokenizer: the model was closed (its GGUF file with the vocabulary too)")
            self._tokenizer = Tokenizer(from_reader(reader))
        return self._tokenizer

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids of `text`, as llama.cpp's llama_tokenize gives them (see pyggml.text.tokenizer)."""
        return self.tokenizer.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Iterable[int], special: bool = False) -> str:
        """The text of token ids; control tokens are shown only with special=True."""
        return self.tokenizer.detokenize(ids, special=special)

    @property
    def chat_template(self) -> ChatTemplate:
        """The GGUF's chat template, compiled (ChatTemplateError when the model has none)."""
        if self._chat_template is None:
            self._chat_template = for_tokenizer(self.tokenizer)
        return self._chat_template

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            tokenize: bool = False, **extra: Any) -> str | list[int]:
        """The prompt the chat template makes of `messages` (text, or token ids with tokenize=True)."""
        if tokenize:
            return render_prompt(self.tokenizer, self.chat_template, messages, add_generation_prompt, **extra)
        return self.chat_template.render(messages, add_generation_prompt=add_generation_prompt, **extra)

    def _sampling(self, sampling: dict) -> SamplingParams:
        return SamplingParams.make(sampling.pop("sampling", None), **sampling)

    def _generate(self, prompt, max_tokens: int, device_argmax: bool, stop, stream: bool, sampling: dict):
        """Model.generate's body: see its doc."""
        params = self._sampling(dict(sampling))
        stats = self.last_stats = GenerationStats()
        max_tokens = _count(max_tokens)
        if isinstance(prompt, str):
            ids = self.tokenize(prompt)
            pieces = text_stream(self, ids, max_tokens, params, stop, stats, device_argmax)
            return pieces if stream else "".join(pieces)
        ids = [int(t) for t in self._check_tokens(prompt)]
        if stream:
            return text_stream(self, ids, max_tokens, params, stop, stats, device_argmax, continue_context=True)
        stop_ids, strs = split_stops(stop)
        if strs:
            raise TypeError("stop strings need a text prompt or stream=True; a token prompt stops at token ids")
        return list(token_stream(self, ids, max_tokens, params, stop_ids, stats, device_argmax))

    def chat(self, messages: Sequence[Mapping[str, Any]], max_tokens: int = 512, *, stream: bool = False,
             stop: Iterable[Stop] | None = None, **sampling: Any) -> str | Iterator[str]:
        """The assistant's answer to `messages` ([{"role": "user", "content": "..."}, ...]) through the
        model's chat template: the text, or with stream=True an iterator of text pieces. Sampling
        keywords as for generate(); the cached prefix of an earlier turn is reused."""
        ids = self.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        params = self._sampling(dict(sampling))
        stats = self.last_stats = GenerationStats()
        pieces = text_stream(self, ids, _count(max_tokens), params, stop, stats)
        return pieces if stream else "".join(pieces)
