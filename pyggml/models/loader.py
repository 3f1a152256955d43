"""Reading a LLaMA-family GGUF: hyperparameters, the tensor table checked against them, and the
upload of every weight from the file's mmap straight into the device buffers.

No RAM peak: a weight is handed to the graph as a view into the reader's mmap (no copy), the
scheduler writes it into its device buffer from that pointer, and the file pages just read are
then dropped from this process (madvise DONTNEED: they stay in the page cache, not in our
resident set). Peak resident memory is the device buffers (on the CPU: the weights, about the
file size) plus one tensor's pages and a constant.
"""
from __future__ import annotations

import math
import mmap
from dataclasses import dataclass, field

import numpy as np

from ..errors import GGUFError, UnsupportedError
from ..gguf import GGUFReader
from ..ops import ROPE_NEOX, ROPE_NORMAL
from ..progress import Progress
from ..types import dtype as _dtype

# Architectures whose tensors and graph are LLaMA's. The rope layout follows llama.cpp: these
# use adjacent pairs ("normal"); a file may say otherwise with `{arch}.rope.type` or
# `pyggml.rope.type` = "neox" / "normal".
ARCHS = {"llama": ROPE_NORMAL, "mistral": ROPE_NORMAL, "granite": ROPE_NORMAL}
_ROPE_TYPES = {"normal": ROPE_NORMAL, "norm": ROPE_NORMAL, "neox": ROPE_NEOX}


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    n_ctx_train: int
    rms_eps: float
    rope_mode: int
    rope_dims: int
    rope_base: float
    rope_scale: float          # freq_scale = 1 / linear scaling factor
    name: str = ""
    file_type: int | None = None
    bos: int | None = None
    eos: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def n_embd_kv(self):
        return self.n_head_kv * self.head_dim


# Largest count or length a hyperparameter may hold: ggml keeps dims and rope's n_ctx_orig in
# int32 op parameters, and nothing real comes near it.
_MAX_DIM = 2**31 - 1
# Tensors every block (layer) of a LLaMA graph reads: 2 norms, q, k, v, o, gate, up, down.
_TENSORS_PER_BLOCK = 9


def _key(reader, key, kind, default=None, required=True, lo=None, hi=None, why=""):
    """Metadata value `key` of type `kind` (int, float, str), range-checked: ints in [lo, hi],
    floats finite and > lo (when lo is given). Anything else is a GGUFError naming the key."""
    f = reader.fields.get(key)
    if f is None:
        if required and default is None:
            raise GGUFError(f"{reader.path}: metadata key {key!r} is missing")
        return default
    v = f.value
    out = None
    if kind is int and isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        out = int(v)
        if (lo is not None and out < lo) or (hi is not None and out > hi):
            raise GGUFError(f"{reader.path}: metadata {key!r} = {out} is out of range [{lo}, {hi}]{why}")
    elif kind is float and isinstance(v, (int, float, np.integer, np.floating)) \
            and not isinstance(v, (bool, np.bool_)):
        out = float(v)
        if not math.isfinite(out) or (lo is not None and not out > lo):
            raise GGUFError(f"{reader.path}: metadata {key!r} = {out!r} must be finite"
                            + (f" and > {lo}" if lo is not None else ""))
    elif kind is str and isinstance(v, str):
        out = v
    if out is None:
        shown = f"an array of {len(v)}" if isinstance(v, (list, np.ndarray)) else repr(v)
        raise GGUFError(f"{reader.path}: metadata {key!r} is {f.type.name} {shown}; expected {kind.__name__}")
    return out


def read_hparams(reader: GGUFReader) -> HParams:
    """Hyperparameters from the metadata; anything missing or inconsistent is a GGUFError."""
    arch = _key(reader, "general.architecture", str)
    if arch not in ARCHS:
        raise UnsupportedError(f"{reader.path}: architecture {arch!r} is not supported "
                               f"(pyggml.models knows {', '.join(sorted(ARCHS))})")
    a = arch + "."
    dim = dict(lo=1, hi=_MAX_DIM)
    n_embd = _key(reader, a + "embedding_length", int, **dim)
    # every block needs its own tensors: a block count the tensor table cannot hold is refused
    # before anything is sized by it
    n_t = len(reader.tensors)
    n_layer = _key(reader, a + "block_count", int, lo=1, hi=max(1, n_t // _TENSORS_PER_BLOCK),
                   why=f" (the file has {n_t} tensors, {_TENSORS_PER_BLOCK} per block)")
    n_head = _key(reader, a + "attention.head_count", int, **dim)
    n_head_kv = _key(reader, a + "attention.head_count_kv", int, default=n_head, **dim)
    n_ff = _key(reader, a + "feed_forward_length", int, **dim)
    if n_embd % n_head or n_head % n_head_kv:
        raise GGUFError(f"{reader.path}: embedding_length {n_embd}, head_count {n_head} and head_count_kv "
                        f"{n_head_kv} do not divide evenly")
    head_dim = _key(reader, a + "attention.key_length", int, default=n_embd // n_head, **dim)
    if head_dim * n_head != n_embd:
        raise UnsupportedError(f"{reader.path}: key_length {head_dim} x {n_head} heads != embedding_length "
                               f"{n_embd} (not a LLaMA layout)")
    rope_dims = _key(reader, a + "rope.dimension_count", int, default=head_dim, **dim)
    if rope_dims <= 0 or rope_dims % 2 or rope_dims > head_dim:
        raise GGUFError(f"{reader.path}: rope.dimension_count {rope_dims} must be even and <= head size {head_dim}")
    rope_type = reader.get(a + "rope.type", reader.get("pyggml.rope.type"))
    if rope_type is None:
        rope_mode = ARCHS[arch]
    elif isinstance(rope_type, str) and rope_type.lower() in _ROPE_TYPES:
        rope_mode = _ROPE_TYPES[rope_type.lower()]
    else:
        raise GGUFError(f"{reader.path}: rope type {rope_type!r} is not one of {sorted(_ROPE_TYPES)}")
    rope_base = _key(reader, a + "rope.freq_base", float, default=10000.0, lo=0.0)
    scale = 1.0
    stype = _key(reader, a + "rope.scaling.type", str, required=False)
    if stype not in (None, "none"):
        if stype != "linear":
            raise UnsupportedError(f"{reader.path}: rope scaling {stype!r} is not supported (linear only)")
        scale = 1.0 / _key(reader, a + "rope.scaling.factor", float, lo=0.0)
    elif a + "rope.scale_linear" in reader.fields:
        scale = 1.0 / _key(reader, a + "rope.scale_linear", float, lo=0.0)
    if not (math.isfinite(scale) and scale > 0):
        raise GGUFError(f"{reader.path}: the rope scaling factor gives freq_scale {scale!r}, not a finite positive number")
    rms_eps = _key(reader, a + "attention.layer_norm_rms_epsilon", float, default=1e-5, lo=0.0)
    emb = None
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            emb = t
    if emb is None:
        raise GGUFError(f"{reader.path}: tensor 'token_embd.weight' is missing")
    n_vocab = _key(reader, a + "vocab_size", int, default=emb.shape[0], **dim)
    n_ctx_train = _key(reader, a + "context_length", int, default=2048, **dim)
    tok = dict(required=False, lo=0, hi=n_vocab - 1)
    return HParams(arch=arch, n_vocab=n_vocab, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                   n_head_kv=n_head_kv, n_ff=n_ff, head_dim=head_dim,
                   n_ctx_train=n_ctx_train, rms_eps=rms_eps,
                   rope_mode=rope_mode, rope_dims=rope_dims, rope_base=rope_base, rope_scale=scale,
                   name=_key(reader, "general.name", str, required=False) or "",
                   file_type=_key(reader, "general.file_type", int, required=False),
                   bos=_key(reader, "tokenizer.ggml.bos_token_id", int, **tok),
                   eos=_key(reader, "tokenizer.ggml.eos_token_id", int, **tok))


def expected_tensors(hp: HParams):
    """{name: numpy shape} of every tensor the graph uses; optional ones map to (shape, False)."""
    d, kv, ff, nv = hp.n_embd, hp.n_embd_kv, hp.n_ff, hp.n_vocab
    out = {"token_embd.weight": ((nv, d), True), "output_norm.weight": ((d,), True),
           "output.weight": ((nv, d), False), "rope_freqs.weight": ((hp.rope_dims // 2,), False)}
    for i in range(hp.n_layer):
        p = f"blk.{i}."
        out.update({p + "attn_norm.weight": ((d,), True), p + "attn_q.weight": ((d, d), True),
                    p + "attn_k.weight": ((kv, d), True), p + "attn_v.weight": ((kv, d), True),
                    p + "attn_output.weight": ((d, d), True), p + "ffn_norm.weight": ((d,), True),
                    p + "ffn_gate.weight": ((ff, d), True), p + "ffn_up.weight": ((ff, d), True),
                    p + "ffn_down.weight": ((d, ff), True)})
    return out


def check_tensors(reader: GGUFReader, hp: HParams):
    """{name: GGUFTensor} for the graph, after checking presence, shapes and types."""
    have = {t.name: t for t in reader.tensors}
    found = {}
    for name, (shape, required) in expected_tensors(hp).items():
        t = have.get(name)
        if t is None:
            if required:
                raise GGUFError(f"{reader.path}: tensor {name!r} is missing")
            continue
        if tuple(t.shape) != tuple(shape):
            raise GGUFError(f"{reader.path}: tensor {name!r} has shape {list(t.shape)}, the hyperparameters "
                            f"say {list(shape)}")
        if not t.type.in_abi:
            raise UnsupportedError(f"{reader.path}: tensor {name!r} has type {t.type.name}, which pyggml "
                                   f"cannot compute with")
        if name.endswith("_norm.weight") or name == "rope_freqs.weight":
            if t.type.name != "f32":
                raise UnsupportedError(f"{reader.path}: tensor {name!r} is {t.type.name}; norms and rope "
                                       f"factors must be f32")
        found[name] = t
    return found


def weight_data(t):
    """The tensor's bytes as a flat uint8 view into the mmap (no copy) for Graph.weight."""
    return t.raw


_PAGE = mmap.PAGESIZE


def drop_pages(reader: GGUFReader, t):
    """Release the mmap pages under tensor t from this process's resident set (they stay in the
    page cache; touching them again faults them back in). Best effort."""
    mm = getattr(reader, "_mm", None)
    if mm is None or not hasattr(mm, "madvise"):
        return
    start = t.file_offset // _PAGE * _PAGE
    end = min(reader.file_size, -(-(t.file_offset + t.nbytes) // _PAGE) * _PAGE)
    if end > start:
        try:
            mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError):
            pass


def upload(sched, weights, reader, progress=True, label="loading"):
    """Put every weight tensor (graph Tensors whose data views the reader's mmap) into the buffers
    of the devices that need it, now, in file order, dropping each one's file pages once written.
    weights: [(graph tensor, GGUF tensor, [device specs])]. progress: as pyggml.progress describes
    (True: a bar on stderr; a callable(done, total, name))."""
    total = sum(int(t.nbytes) * len(devs) for t, _, devs in weights)
    bar = Progress(progress, label, total)
    done = 0
    try:
        for gt, ft, devs in sorted(weights, key=lambda p: p[1].file_offset):
            for dev in devs:
                sched.upload(gt, dev)
                done += gt.nbytes
            drop_pages(reader, ft)
            bar.update(done, ft.name)
    finally:
        bar.close()
    return True


def rss_bytes():
    """(current, peak) resident set of this process in bytes, from /proc/self/status."""
    cur = peak = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    cur = int(line.split()[1]) * 1024
                elif line.startswith("VmHWM:"):
                    peak = int(line.split()[1]) * 1024
    except OSError:
        pass
    return cur, peak


def reset_peak_rss():
    """Reset VmHWM to the current RSS (Linux >= 4.0); False when not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def type_of(t):
    return _dtype(t.type.name)
