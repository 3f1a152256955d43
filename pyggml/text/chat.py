"""Chat templates: the GGUF's `tokenizer.chat_template` (Jinja) rendered in jinja2's sandbox.

The sandbox refuses attribute access to internals and unsafe calls (a template is data from a
downloaded file); a template that tries raises ChatTemplateError. Templates get what Hugging Face
templates expect: `messages`, `add_generation_prompt`, `bos_token`, `eos_token`, `tools`,
`raise_exception(msg)`, `strftime_now(fmt)` and a `tojson` filter that keeps non-ASCII text.
"""
from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

from .errors import ChatTemplateError

Message = Mapping[str, Any]


def _raise(msg):
    raise ChatTemplateError(f"the chat template refused the messages: {msg}")


def _tojson(x, indent=None, ensure_ascii=False, separators=None, sort_keys=False):
    return json.dumps(x, indent=indent, ensure_ascii=ensure_ascii, separators=separators, sort_keys=sort_keys)


class ChatTemplate:
    """One compiled template. render(messages) -> the prompt text."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("the chat template is empty")
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(source)
        except TemplateError as e:
            raise ChatTemplateError(f"the chat template does not compile: {e}") from e
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for `messages` ([{"role": ..., "content": ...}, ...])."""
        from jinja2 import TemplateError
        from jinja2.exceptions import SecurityError
        check_messages(messages)
        ctx = {"messages": [dict(m) for m in messages], "add_generation_prompt": add_generation_prompt,
               "bos_token": self.bos_token, "eos_token": self.eos_token, "tools": None}
        ctx.update(extra)
        try:
            return self._template.render(**ctx)
        except ChatTemplateError:
            raise
        except SecurityError as e:
            raise ChatTemplateError(f"the chat template tried an unsafe operation: {e}") from e
        except (TemplateError, TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise ChatTemplateError(f"the chat template failed: {type(e).__name__}: {e}") from e


def check_messages(messages: Sequence[Message]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(f"message {i} must be a dict with a str 'role', got {m!r}")
        if "content" in m and m["content"] is not None and not isinstance(m["content"], (str, list)):
            raise ChatTemplateError(f"message {i}: content must be str (or a list of parts), "
                                    f"not {type(m['content']).__name__}")


def for_tokenizer(tok) -> ChatTemplate:
    """The template of a tokenizer's model, with its BOS/EOS texts; ChatTemplateError when the
    model has none."""
    src = tok.chat_template
    if not src:
        raise ChatTemplateError("the model has no chat template (tokenizer.chat_template); pass raw text "
                                "to generate() instead")
    v = tok.vocab
    bos = v.tokens[v.bos] if v.bos is not None else ""
    eos = v.tokens[v.eos] if v.eos is not None else ""
    return ChatTemplate(src, bos, eos)


def render_prompt(tok, template: ChatTemplate, messages, add_generation_prompt=True, **extra) -> list[int]:
    """Messages -> prompt token ids: the template's text, without a leading BOS text when the
    tokenizer adds BOS itself (no double BOS), tokenized with special tokens parsed."""
    text = template.render(messages, add_generation_prompt=add_generation_prompt, **extra)
    v = tok.vocab
    if v.add_bos and template.bos_token and text.startswith(template.bos_token):
        text = text[len(template.bos_token):]
    return tok.tokenize(text, add_special=True, parse_special=True)
