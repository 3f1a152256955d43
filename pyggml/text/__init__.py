"""Text in, text out for GGUF models: tokenizers read from the file (SPM and byte-level BPE with
llama.cpp's pre-tokenizers), chat templates (jinja2 sandbox), sampling and streamed generation.
pyggml.models.Model exposes these as tokenize/detokenize/generate/chat."""
from .chat import ChatTemplate
from .errors import ChatTemplateError, TokenizerError
from .generate import GenerationStats, TextStream
from .sampling import Sampler, SamplingParams
from .tokenizer import StreamDecoder, Tokenizer
from .vocab import Vocab

__all__ = ["ChatTemplate", "ChatTemplateError", "GenerationStats", "Sampler", "SamplingParams", "StreamDecoder",
           "TextStream", "Tokenizer", "TokenizerError", "Vocab"]
