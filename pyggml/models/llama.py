"""The LLaMA graph and a Model that prefills, decodes and generates with it.

One Graph holds the weights (views into the GGUF mmap until uploaded), the KV cache (per layer
K and V states of shape (n_ctx, n_head_kv * head_dim), f16 by default) and one forward per
prompt length T and attended extent n_kv. A forward's inputs are the token ids (T,), their
positions (T,), the KV rows they write (T,) and the attention mask (1, 1, T, n_kv) f16 (0 where a
query may look, -inf elsewhere). Attention reads only the first n_kv cells of the cache: the
filled ones, padded (kv_extent: to 256 cells like llama.cpp for decode, to a power of two for a
prefill chunk), never the whole allocated n_ctx, so a step costs what the context holds. Each
(T, n_kv) forward is built once and cached: a decode step only feeds new inputs into the forward
of its extent, and the scheduler reuses that forward's plan, memory and command program (and a
device's captured graph); a new forward is built when decoding crosses into the next extent.

Per layer (numpy order, T tokens, d = n_embd, H heads of D, H_kv kv heads):
    h = rms_norm(x) * attn_norm
    q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T;  q, k = rope(q (T, H, D)), rope(k (T, H_kv, D))
    K[kv_idx] = k;  V[kv_idx] = v                          (set_rows into the states)
    o = flash_attn_ext(q (1, H, T, D), K[:n_kv] (1, H_kv, n_kv, D), V[:n_kv], mask) -> (1, T, H, D)
        (or softmax(q K^T * scale + mask) V through mul_mat/soft_max with attn="softmax")
    x = x + o (T, d) @ Wo.T
    x = x + swiglu(rms_norm(x) * ffn_norm @ Wgate.T, ... @ Wup.T) @ Wdown.T
then logits = rms_norm(x[last]) * output_norm @ Wout.T (all rows with all_logits=True).
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import threading
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from .. import ops as pg
from ..errors import ClosedError, ConcurrentUseError, PyggmlError, ShapeError, TypeMismatchError
from ..types import f16, i32, dtype as _dtype
from ..text.model_text import TextMixin

ATTN_MODES = ("flash", "softmax")


class ContextFullError(PyggmlError):
    """The tokens do not fit the remaining context (n_ctx)."""


KV_PAD = 256        # decode extents are whole multiples of this many cells (llama.cpp pads n_kv to 256)


def kv_extent(n, n_ctx, decode):
    """The cells a forward attends when the first n cells of the cache are filled after it.

    Decode: n padded to KV_PAD cells, and past 4096 cells to KV_PAD * 2^k with k = log2(n / 4096),
    so the padding stays under 1/16 of the extent (what a split-KV kernel leaves idle) while a long
    generation builds 16 forwards per doubling of the context, not one per 256 tokens. Prefill
    chunks: the next power of two (at least KV_PAD), so the big chunk forwards, whose arenas hold
    a chunk's activations, number at most log2(n_ctx / KV_PAD) + 1 per chunk size; the masked tail
    of such an extent costs a mask read, not K/V reads. Both are capped at n_ctx."""
    if decode:
        g = KV_PAD
        while n >= 2 * 16 * g:
            g *= 2
        e = -(-n // g) * g
    else:
        e = KV_PAD
        while e < n:
            e *= 2
    return min(e, n_ctx)


class _Forward:
    """The graph nodes of one forward over T tokens attending n_kv cells, and its host-side feeds."""

    def __init__(self, model, T, all_logits, n_kv):
        self.T = T
        self.n_kv = n_kv
        self.all_logits = all_logits
        key = f"{T}{'a' if all_logits else ''}" + (f"k{n_kv}" if n_kv != model.n_ctx else "")
        g = model.graph
        self.names = {n: f"{n}_{key}" for n in ("tokens", "pos", "kv_idx", "mask")}
        n_effects = len(g.effects)
        tok = model._first_input(self.names["tokens"], T)    # token ids; a pipeline stage's hidden state
        pos = g.input(self.names["pos"], (T,), i32)
        kvi = g.input(self.names["kv_idx"], (T,), i32)
        mask = g.input(self.names["mask"], (1, 1, T, n_kv), f16)
        self.logits = model._forward_nodes(tok, pos, kvi, mask, T, all_logits)
        self.argmax = pg.argmax(self.logits)
        # The KV writes are reached from the attention that reads them (it views the set_rows
        # results), so they need not stay graph-wide effects: left there, every other forward of
        # this graph would run them too.
        del g.effects[n_effects:]
        self.mask = np.full((1, 1, T, n_kv), -np.inf, np.float16)
        self.feeds = {self.names["tokens"]: np.zeros(tok.shape, tok.type.np_dtype), self.names["pos"]: np.zeros(T, np.int32),
                      self.names["kv_idx"]: np.zeros(T, np.int32), self.names["mask"]: self.mask}
        self.visible = 0       # decode (T=1): mask cells [0, visible) are already 0
        self._tri = None       # prefill: the causal (T, T) block of the mask, built on first use
        self._mask_p0 = None   # prefill: the p0 self.mask encodes (None: not set yet)
        self._mb_masks = []    # pipelined micro-batches: [mask, the p0 it encodes] per slot

    def set_causal_mask(self, p0, mask=None, was=None):
        """Prefill from position p0: query i sees cells [0, p0 + i] (into self.mask or `mask`).

        Only the columns that differ from what the mask encodes now are written: self.mask's
        own state, or `was` (the p0 that `mask` was last set for; None: unknown, so all of it).
        From p0' to p0 those are [min, max + T): at depth 16384 a 512-token chunk rewrites 1 MiB
        instead of the whole 17 MiB (3.8 ms of numpy on a 2-core dev machine, against a 24 ms
        chunk on the H200). Returns p0."""
        if mask is None:
            mask, was = self.mask, self._mask_p0
        m = mask[0, 0]
        T, n = self.T, m.shape[1]
        if self._tri is None:
            self._tri = np.triu(np.full((T, T), -np.inf, np.float16), 1)
        lo, hi = (0, n) if was is None else (min(was, p0), min(n, max(was, p0) + T))
        if was != p0:
            m[:, lo:p0] = 0
            m[:, p0:p0 + T] = self._tri
            m[:, p0 + T:hi] = -np.inf
        if mask is self.mask:
            self._mask_p0 = p0
        return p0

    def set_decode_mask(self, p0):
        """One query at position p0: cells [0, p0] visible (only the newly visible ones written)."""
        if self.visible > p0 + 1:           # the context was reset: hide everything again
            self.mask[...] = -np.inf
            self.visible = 0
        self.mask[0, 0, 0, self.visible:p0 + 1] = 0
        self.visible = p0 + 1


def _LOGITS(f):
    return f.logits


def _ARGMAX(f):
    return f.argmax


def _exclusive(fn):
    """Run a Model method as the only thread inside this Model: a Model is one conversation (its
    KV cache and n_past), so a second thread calling in while the first is still inside raises
    ConcurrentUseError instead of interleaving two token streams into one cache. The same thread
    may re-enter (generate calls decode's path)."""
    @functools.wraps(fn)
    def run(self, *args, **kw):
        if not self._busy.acquire(blocking=False):
            raise ConcurrentUseError(f"Model.{fn.__name__}: this Model is in use by another thread; a Model is "
                                     f"driven by one thread at a time (use one Model per thread, or a lock)")
        try:
            if self.sched is None:
                raise ClosedError(f"Model.{fn.__name__}: the model was closed")
            return fn(self, *args, **kw)
        finally:
            self._busy.release()
    return run


def _token_id(token):
    """An int token id; bools, floats, strings and None are errors, not conversions."""
    if isinstance(token, (bool, np.bool_)) or not isinstance(token, numbers.Integral):
        if isinstance(token, np.ndarray) and token.ndim == 0 and np.issubdtype(token.dtype, np.integer):
            return int(token)
        raise TypeMismatchError(f"a token id is an int, not {type(token).__name__} {token!r}")
    return int(token)


class Model(TextMixin):
    """A LLaMA-family model on a Scheduler. Build with pyggml.models.load(). Text in, text out
    (tokenize, detokenize, generate on a str, chat) comes from pyggml.text (TextMixin).

    Threads: a Model is driven by one thread at a time; a call from a second thread while
    another is inside prefill/decode/generate/reset/close raises ConcurrentUseError (nothing is
    computed, the state is unchanged). Use one Model per thread for parallel conversations.
    After close(), every method raises ClosedError."""

    def __init__(self, hp, tensors, sched, graph, weights, n_ctx, attn="flash", kv_type="f16", reader=None,
                 path=None, n_batch=512, layer_devices=None):
        if attn not in ATTN_MODES:
            raise ValueError(f"attn must be one of {ATTN_MODES}, not {attn!r}")
        self.hp = hp
        self.sched = sched
        self.graph = graph
        self.w = weights                  # name -> graph weight Tensor
        self.file_tensors = tensors       # name -> GGUFTensor (shapes, types, file offsets)
        self.n_ctx = int(n_ctx)
        self.n_batch = max(1, int(n_batch))     # largest prefill chunk
        self.attn = attn
        self.kv_type = _dtype(kv_type)
        self.reader = reader
        self.path = path
        self.n_past = 0
        self.tokens = []                  # tokens currently in the cache
        self._forwards = {}
        self._decode_fwd = None
        self.timings = {}                 # filled by load()
        # device name per layer (contiguous ranges, see placement.py); None: the scheduler decides
        self.layer_devices = list(layer_devices) if layer_devices else None
        self._busy = threading.RLock()    # see _exclusive
        kvd = hp.n_embd_kv
        self.k_cache = [graph.state(f"cache_k.{i}", (self.n_ctx, kvd), self.kv_type) for i in range(hp.n_layer)]
        self.v_cache = [graph.state(f"cache_v.{i}", (self.n_ctx, kvd), self.kv_type) for i in range(hp.n_layer)]

    # ---------------------------------------------------------------- graph

    def _forward_nodes(self, tok, pos, kvi, mask, T, all_logits):
        hp, W = self.hp, self.w
        eps = hp.rms_eps
        rope_kw = dict(n_dims=hp.rope_dims, mode=hp.rope_mode, freq_base=hp.rope_base, freq_scale=hp.rope_scale,
                       n_ctx_orig=hp.n_ctx_train, freq_factors=W.get("rope_freqs.weight"))
        g = self.graph
        on = (lambda i: g.on(self.layer_devices[i], prefer=True)) if self.layer_devices else \
            (lambda i: contextlib.nullcontext())
        with on(0):
            x = pg.get_rows(W["token_embd.weight"], tok)                      # (T, d) f32
        for i in range(hp.n_layer):
            with on(i):
                x = self._layer(i, x, pos, kvi, mask, T, eps, rope_kw)
        with on(hp.n_layer - 1):
            return self._output(x, T, all_logits, eps)

    def _layer(self, i, x, pos, kvi, mask, T, eps, rope_kw):
        """Layer i over the residual stream x (T, d): attention then the SwiGLU FFN."""
        hp, W = self.hp, self.w
        H, Hkv, D = hp.n_head, hp.n_head_kv, hp.head_dim
        p = f"blk.{i}."
        h = pg.mul(pg.rms_norm(x, eps), W[p + "attn_norm.weight"])
        q = pg.mul_mat(W[p + "attn_q.weight"], h)
        k = pg.mul_mat(W[p + "attn_k.weight"], h)
        v = pg.mul_mat(W[p + "attn_v.weight"], h)
        q = pg.rope(pg.reshape(q, (T, H, D)), pos, **rope_kw)
        k = pg.rope(pg.reshape(k, (T, Hkv, D)), pos, **rope_kw)
        ks = pg.set_rows(self.k_cache[i], pg.reshape(k, (T, Hkv * D)), kvi)
        vs = pg.set_rows(self.v_cache[i], v, kvi)
        o = self._attention(q, ks, vs, mask, T)                            # (T, d)
        x = pg.add(x, pg.mul_mat(W[p + "attn_output.weight"], o))
        h = pg.mul(pg.rms_norm(x, eps), W[p + "ffn_norm.weight"])
        f = pg.swiglu(pg.mul_mat(W[p + "ffn_gate.weight"], h), pg.mul_mat(W[p + "ffn_up.weight"], h))
        x = pg.add(x, pg.mul_mat(W[p + "ffn_down.weight"], f))
        return x

    def _output(self, x, T, all_logits, eps):
        W, d = self.w, self.hp.n_embd
        if T > 1 and not all_logits:
            x = pg.view(x, (1, d), offset=(T - 1) * d * 4)
        x = pg.mul(pg.rms_norm(x, eps), W["output_norm.weight"])
        out_w = W["output.weight"] if "output.weight" in W else W["token_embd.weight"]   # tied
        return pg.mul_mat(out_w, x)                                            # (T or 1, n_vocab)

    def _attention(self, q, ks, vs, mask, T):
        hp = self.hp
        H, Hkv, D, n = hp.n_head, hp.n_head_kv, hp.head_dim, mask.shape[-1]
        es = self.kv_type.type_size
        kvd = Hkv * D
        strides = (n * kvd * es, D * es, kvd * es, es)
        k = pg.view(ks, (1, Hkv, n, D), strides)                              # (1, H_kv, n_kv, D): the filled cells
        v = pg.view(vs, (1, Hkv, n, D), strides)
        qh = pg.permute(pg.reshape(q, (1, T, H, D)), (0, 2, 1, 3))            # (1, H, T, D)
        scale = 1.0 / math.sqrt(D)
        if self.attn == "flash":
            o = pg.flash_attn_ext(qh, k, v, mask, scale=scale)                 # (1, T, H, D)
            return pg.reshape(o, (T, H * D))
        kq = pg.soft_max(pg.mul_mat(k, qh), mask, scale=scale)                 # (1, H, T, n_kv)
        vt = pg.cont(pg.transpose(v))                                          # (1, H_kv, D, n_kv)
        o = pg.mul_mat(vt, kq)                                                 # (1, H, T, D)
        return pg.reshape(pg.cont(pg.permute(o, (0, 2, 1, 3))), (T, H * D))

    def forward_for(self, T, all_logits=False, n_kv=None):
        """The (cached) forward over T tokens attending the first n_kv cache cells (default: all
        n_ctx); built on first use."""
        T = int(T)
        if T < 1:
            raise ShapeError("a forward needs at least one token")
        if T > self.n_ctx:
            raise ContextFullError(f"{T} tokens do not fit n_ctx {self.n_ctx}")
        n_kv = self.n_ctx if n_kv is None else int(n_kv)
        if not T <= n_kv <= self.n_ctx:
            raise ShapeError(f"a forward over {T} tokens attends {T}..{self.n_ctx} cells, not {n_kv}")
        all_logits = bool(all_logits) and T > 1
        key = (T, all_logits, n_kv)
        f = self._forwards.get(key)
        if f is None:
            f = self._forwards[key] = _Forward(self, T, all_logits, n_kv)
        return f

    # ---------------------------------------------------------------- running

    def _check_tokens(self, tokens):
        if tokens is None or isinstance(tokens, (str, bytes)):
            raise TypeMismatchError(f"tokens must be a sequence of int token ids, not {type(tokens).__name__}")
        t = np.asarray(tokens)
        if t.ndim == 0:
            t = t.reshape(1)
        if t.ndim != 1 or t.size == 0:
            raise ShapeError(f"tokens must be a non-empty 1-D sequence, got shape {t.shape}")
        if not np.issubdtype(t.dtype, np.integer) or t.dtype == np.bool_:
            raise TypeMismatchError(f"tokens must be integers, got {t.dtype}")
        if t.min() < 0 or t.max() >= self.hp.n_vocab:
            raise ShapeError(f"token ids must be in [0, {self.hp.n_vocab}), got [{t.min()}, {t.max()}]")
        if self.n_past + t.size > self.n_ctx:
            raise ContextFullError(f"{t.size} more tokens after {self.n_past} do not fit n_ctx {self.n_ctx}; "
                                   f"reset() or load with a larger n_ctx")
        return t.astype(np.int32)

    def _run(self, f, tokens, output):
        T, p0 = f.T, self.n_past
        fe = f.feeds
        fe[f.names["tokens"]][:] = tokens
        pos = fe[f.names["pos"]]
        pos[:] = np.arange(p0, p0 + T, dtype=np.int32)
        fe[f.names["kv_idx"]][:] = pos
        if T == 1:
            f.set_decode_mask(p0)
        else:
            f.set_causal_mask(p0)
        out = self.sched.compute(output, fe)
        self.n_past += T
        self._remember(tokens)
        return out

    def _first_input(self, name, T):
        """The graph input a forward starts from: T token ids (a pipeline stage overrides it)."""
        return self.graph.input(name, (T,), i32)

    def _remember(self, tokens):
        self.tokens.extend(int(x) for x in tokens)

    def _run_batches(self, f, token_chunks, output):
        """Equal chunks as pipelined micro-batches (Scheduler.compute_batches): with layers on
        several devices, chunk m + 1 runs on the first devices while m runs on the next."""
        feeds, p = [], self.n_past
        for k, tk in enumerate(token_chunks):
            pos = np.arange(p, p + f.T, dtype=np.int32)
            if k == len(f._mb_masks):                      # each micro-batch its own: all are queued at once
                f._mb_masks.append([np.empty_like(f.mask), None])   # None: written whole
            slot = f._mb_masks[k]                          # kept for the next call (compute_batches returns
            mask = slot[0]                                 # when every input has been read)
            slot[1] = f.set_causal_mask(p, mask, slot[1])
            feeds.append({f.names["tokens"]: np.asarray(tk, np.int32), f.names["pos"]: pos, f.names["kv_idx"]: pos,
                          f.names["mask"]: mask})
            p += f.T
        outs = self.sched.compute_batches(output, feeds)
        self.n_past = p
        for tk in token_chunks:
            self.tokens.extend(int(x) for x in tk)
        return outs

    def chunks(self, n):
        """Sizes a prompt of n tokens is run in: powers of two up to n_batch, largest first, so
        that any prompt length reuses at most log2(n_batch) + 1 forwards (plans, arenas)."""
        out = []
        while n > 0:
            c = min(self.n_batch, 1 << (n.bit_length() - 1))
            out.append(c)
            n -= c
        return out

    def _prefill(self, t, all_logits, output_of):
        outs, i = [], 0
        sizes = self.chunks(t.size)
        j = 0
        while j < len(sizes):
            c, n = sizes[j], 1
            while j + n < len(sizes) and sizes[j + n] == c:
                n += 1
            # one forward (one plan) for a group of equal chunks: the extent its last chunk needs
            f = self.forward_for(c, all_logits, kv_extent(self.n_past + n * c, self.n_ctx, c == 1))
            if n == 1:
                rs = [self._run(f, t[i:i + c], output_of(f))]
            else:
                rs = self._run_batches(f, [t[i + k * c:i + (k + 1) * c] for k in range(n)], output_of(f))
            if all_logits:
                outs.extend(r.reshape(c, -1) for r in rs)
            i += n * c
            j += n
        return np.concatenate(outs) if all_logits else rs[-1]

    @_exclusive
    def prefill(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Run `tokens` after the current context; returns the last token's logits (n_vocab,) f32,
        or every token's (T, n_vocab) with all_logits=True. Long or odd-length prompts run in
        chunks (see chunks())."""
        t = self._check_tokens(tokens)
        out = self._prefill(t, all_logits, _LOGITS)
        return out if all_logits else out[0]

    def _step(self, token, output_of):
        """The decode fast path: one token, no numpy checks beyond a range test."""
        tok = _token_id(token)
        if not 0 <= tok < self.hp.n_vocab:
            raise ShapeError(f"token id {tok} is not in [0, {self.hp.n_vocab})")
        p0 = self.n_past
        if p0 >= self.n_ctx:
            raise ContextFullError(f"the context is full (n_ctx {self.n_ctx}); reset() or load with a larger n_ctx")
        f = self._decode_fwd
        n_kv = kv_extent(p0 + 1, self.n_ctx, True)
        if f is None or f.n_kv != n_kv:
            f = self._decode_fwd = self.forward_for(1, n_kv=n_kv)
        fe, nm = f.feeds, f.names
        fe[nm["tokens"]][0] = tok
        fe[nm["pos"]][0] = p0
        fe[nm["kv_idx"]][0] = p0
        f.set_decode_mask(p0)
        out = self.sched.compute(output_of(f), fe)
        self.n_past = p0 + 1
        self.tokens.append(tok)
        return out

    @_exclusive
    def decode(self, token: int) -> np.ndarray:
        """One token through the reused decode graph; returns its logits (n_vocab,) f32."""
        return self._step(token, _LOGITS)[0]

    @_exclusive
    def _next(self, tokens, device_argmax):
        if len(tokens) == 1:
            if device_argmax:
                return int(self._step(tokens[0], _ARGMAX)[0])
            return int(np.argmax(self._step(tokens[0], _LOGITS)[0]))
        t = self._check_tokens(tokens)
        if device_argmax:
            return int(self._prefill(t, False, _ARGMAX)[0])
        return int(np.argmax(self._prefill(t, False, _LOGITS)[0]))

    @_exclusive
    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, device_argmax: bool = True,
                 stop: Iterable[int | str] | None = None, *, stream: bool = False,
                 **sampling: Any) -> str | list[int] | Iterator[str]:
        """Up to `max_tokens` new tokens after `prompt`.

        prompt str: the context becomes the prompt (tokenized with BOS etc.; a cached prefix is
        reused); returns the completion text, or with stream=True an iterator of text pieces.
        It stops at an end-of-generation token, at a token id or string in `stop`.
        prompt token ids: run after the current context; returns the new token ids (a stop id
        in `stop` ends them and is included), or with stream=True an iterator of text pieces.
        Greedy by default, the argmax on the device unless device_argmax=False; sampling
        keywords: temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, or
        sampling=pyggml.text.SamplingParams(...). Timings: self.last_stats."""
        return self._generate(prompt, max_tokens, device_argmax, stop, stream, sampling)

    @_exclusive
    def reset(self) -> None:
        """Forget the context (the cache cells are masked, not cleared)."""
        self.n_past = 0
        self.tokens = []

    def close(self) -> None:
        """Release the device memory, the file mapping and its file descriptor now (not at garbage
        collection). Idempotent; afterwards every other method raises ClosedError."""
        if not self._busy.acquire(blocking=False):
            raise ConcurrentUseError("Model.close: this Model is in use by another thread")
        try:
            self._tokenizer = self._chat_template = None
            sched, self.sched = self.sched, None
            if sched is not None:
                sched.close()
            self._forwards.clear()
            self._decode_fwd = None
            graph, self.graph = self.graph, None
            if graph is not None:
                for t in graph.tensors:        # the weights are views of the mapping: cut them, so
                    t.data = None              # that the unmap below happens now
            self.w = {}
            self.file_tensors = {}
            self.k_cache = self.v_cache = []
            if self.reader is not None:
                self.reader.close()
                self.reader = None
        finally:
            self._busy.release()

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_params(self):
        return sum(int(np.prod(t.shape)) for t in self.w.values())

    @property
    def weight_bytes(self):
        return sum(int(t.nbytes) for t in self.w.values())

    def __repr__(self):
        hp = self.hp
        return (f"<pyggml Model {hp.arch} {hp.name!r}: {hp.n_layer} layers, d={hp.n_embd}, "
                f"{hp.n_head}/{hp.n_head_kv} heads, vocab {hp.n_vocab}, n_ctx {self.n_ctx}, attn={self.attn}, "
                f"{self.weight_bytes / 1e6:.1f} MB on {[str(d) for d in self.sched.devices] if self.sched else '-'}>")
