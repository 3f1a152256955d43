"""Errors of the text layer (tokenizers, chat templates, generation); all derive from PyggmlError."""
from ..errors import PyggmlError


class TokenizerError(PyggmlError, ValueError):
    """The GGUF's vocabulary cannot be used (unknown type or pre-tokenizer, missing or inconsistent
    arrays), or a token id / text cannot be converted; the message names what and where."""


class ChatTemplateError(PyggmlError, ValueError):
    """The model has no chat template, the template does not compile or fails while rendering
    (including the sandbox refusing an unsafe operation), or the messages are malformed."""
