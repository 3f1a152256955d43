"""A pipeline stage: the contiguous layers [first, stop) of a LLaMA model (pyggml.dist runs one
per Ray actor).

    s = pyggml.models.load(path, layers=(0, 3), ...)      # layers 0-2 of a 6-layer model
    h = s.run(tokens)                                      # (T, n_embd) f32 hidden state
    logits = last_stage.run(h)                             # a stage holding the last layer

load(path, layers=(first, stop)) uploads only the weights of those layers (the token embedding
with layer 0, the output norm and projection with the last layer) and only their KV caches get
memory (the cache states of other layers are graph nodes no plan uses). A stage holding layer 0
takes token ids (T,) i32, a later one the hidden state (T, n_embd) f32 of the stage before it; a
stage holding the last layer returns logits like Model.prefill, the others the hidden state after
their last layer (every row). The nodes come from Model's own builders (Model._layer,
Model._output) and the feeds from Model._run, so a chain of stages fed the chunks Model.prefill
uses (Model.chunks) computes exactly one Model's nodes: on the CPU with the same thread count the
logits are bitwise equal.
"""
from __future__ import annotations

import contextlib
import numbers
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import ops as pg
from ..errors import ConfigError, ShapeError, TypeMismatchError
from ..types import f32
from . import placement
from .llama import ContextFullError, Model, _exclusive, kv_extent


def layer_range(layers, n_layer: int) -> Tuple[int, int]:
    """(first, stop) checked against the model's n_layer: whole numbers, 0 <= first < stop <= n_layer."""
    try:
        first, stop = layers
    except (TypeError, ValueError):
        raise ConfigError(f"layers must be a (first, stop) pair, got {layers!r}") from None
    for v in (first, stop):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeMismatchError(f"layers: {v!r} is not an int (layers={layers!r})")
    if not 0 <= first < stop <= n_layer:
        raise ConfigError(f"layers ({first}, {stop}) is not a non-empty range of the model's {n_layer} layers")
    return int(first), int(stop)


def layer_devices(devs: Sequence, layers, n_layer: int, tensor_split=None) -> List[Optional[str]]:
    """The device of each of n_layer layers for a stage holding `layers` (None outside them): the
    stage's layers split over its devices like a whole model's (placement.split_layers)."""
    first, stop = layer_range(layers, n_layer)
    if not devs:
        raise ConfigError("a stage needs at least one device")
    return [None] * first + placement.split_layers(devs, stop - first, tensor_split) + [None] * (n_layer - stop)


class StageModel(Model):
    """Layers [first, stop) of a model, built by pyggml.models.load(path, layers=(first, stop)).
    run() computes one chunk after the stage's context; prefill/decode/generate work only on a
    stage holding every layer (they take tokens and return logits)."""

    def __init__(self, *args, layers, **kw):
        super().__init__(*args, **kw)
        self.first, self.stop = layer_range(layers, self.hp.n_layer)
        self.takes_tokens = self.first == 0                 # else the hidden state (T, n_embd) f32
        self.gives_logits = self.stop == self.hp.n_layer    # else the hidden state after layer stop - 1

    def _first_input(self, name, T):
        if self.takes_tokens:
            return super()._first_input(name, T)
        return self.graph.input(name, (T, self.hp.n_embd), f32)

    def _remember(self, x):
        if self.takes_tokens:
            super()._remember(x)

    def _forward_nodes(self, x, pos, kvi, mask, T, all_logits):
        hp, W = self.hp, self.w
        rope_kw = dict(n_dims=hp.rope_dims, mode=hp.rope_mode, freq_base=hp.rope_base, freq_scale=hp.rope_scale,
                       n_ctx_orig=hp.n_ctx_train, freq_factors=W.get("rope_freqs.weight"))
        g = self.graph
        on = (lambda i: g.on(self.layer_devices[i], prefer=True)) if self.layer_devices else \
            (lambda i: contextlib.nullcontext())
        if self.takes_tokens:
            with on(0):
                x = pg.get_rows(W["token_embd.weight"], x)
        for i in range(self.first, self.stop):
            with on(i):
                x = self._layer(i, x, pos, kvi, mask, T, hp.rms_eps, rope_kw)
        if not self.gives_logits:
            return x
        with on(self.stop - 1):
            return self._output(x, T, all_logits, hp.rms_eps)

    def _whole(self, what):
        if not (self.takes_tokens and self.gives_logits):
            raise ConfigError(f"{what}: this stage holds layers {self.first}-{self.stop - 1} of {self.hp.n_layer}; "
                              f"use run() (pyggml.dist.Pipeline drives a chain of stages)")

    def _prefill(self, t, all_logits, output_of):
        self._whole("prefill")
        return super()._prefill(t, all_logits, output_of)

    def _step(self, token, output_of):
        self._whole("decode")
        return super()._step(token, output_of)

    def check_input(self, x) -> np.ndarray:
        """x as this stage's input: token ids (T,) for the first stage, else a (T, n_embd) f32 array;
        ContextFullError when T more tokens do not fit after n_past."""
        if self.takes_tokens:
            return self._check_tokens(x)
        a = np.asarray(x)
        if a.ndim != 2 or a.shape[1] != self.hp.n_embd or a.shape[0] < 1:
            raise ShapeError(f"stage {self.first}-{self.stop - 1}: the hidden state must be (T, {self.hp.n_embd}), "
                             f"got {a.shape}")
        if a.dtype != np.float32:
            raise TypeMismatchError(f"stage {self.first}-{self.stop - 1}: the hidden state must be float32, not {a.dtype}")
        if self.n_past + a.shape[0] > self.n_ctx:
            raise ContextFullError(f"{a.shape[0]} more tokens after {self.n_past} do not fit n_ctx {self.n_ctx}")
        return a

    @_exclusive
    def run(self, x, all_logits: bool = False) -> np.ndarray:
        """One chunk of T tokens (token ids or the previous stage's hidden state) after the stage's
        context: the hidden state (T, n_embd) f32, or on the last stage the logits (1, n_vocab) of
        the last token, or (T, n_vocab) with all_logits=True."""
        a = self.check_input(x)
        T = a.shape[0]          # the cells it attends: as Model.prefill/decode would for this chunk
        f = self.forward_for(T, all_logits and self.gives_logits, kv_extent(self.n_past + T, self.n_ctx, T == 1))
        return self._run(f, a, f.logits)
