"""GGUF models (LLaMA family) on pyggml graphs.

    import pyggml.models
    m = pyggml.models.load("model.gguf", devices=["cpu"], n_ctx=512)
    logits = m.prefill([1, 450, 4996])      # last token's logits (n_vocab,)
    logits = m.decode(int(logits.argmax()))
    toks = m.generate([1, 450], 16)          # greedy
    m.reset()
"""
from __future__ import annotations

import functools
import numbers
import os
import time
from typing import Sequence

from ..errors import ConfigError, PyggmlError, TypeMismatchError
from ..gguf import GGUFReader
from ..progress import ProgressArg
from .llama import ATTN_MODES, ContextFullError, Model, kv_extent
from .._plugin import get_device
from . import placement, stage
from .loader import HParams, check_tensors, read_hparams, rss_bytes, upload  # noqa: F401 (HParams re-exported)

__all__ = ["load", "Model", "HParams", "ContextFullError", "ATTN_MODES", "ModelNotFoundError"]

MAX_CTX = 1 << 24          # KV cells: far beyond any context a GGUF declares, well inside int32


class ModelNotFoundError(PyggmlError, FileNotFoundError):
    """No readable model file at the given path."""


def _count(name, v, lo, hi):
    """A whole number in [lo, hi]; floats, strings, bools and None are errors, not conversions."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeMismatchError(f"{name} must be an int, not {type(v).__name__} {v!r}")
    if not lo <= int(v) <= hi:
        raise ConfigError(f"{name} must be in [{lo}, {hi}], got {int(v)}")
    return int(v)


def load(path: str | os.PathLike, devices: str | Sequence[str] = ("cpu",), n_ctx: int = 512,
         n_threads: int | None = None, attn: str = "flash", kv_type: str = "f16", progress: ProgressArg = True,
         sync: str | None = None, n_batch: int = 512, tensor_split: Sequence[float] | None = None,
         n_copies: int | None = None, n_ubatch: int | None = None, trace: str | None = None,
         layers: tuple[int, int] | None = None) -> Model:
    """Open a GGUF model, check it, upload its weights into the buffers of the devices that hold
    them (straight from the file's mmap, with a progress bar on stderr for loads over a second) and
    build the decode graph. Malformed files raise GGUFError; nothing stays open or allocated on
    failure.

    devices: as for pyggml.Scheduler (priority order). With several devices the layers are split
    into contiguous ranges (pyggml/models/placement.py): over the non-CPU devices by free memory,
    or by `tensor_split` (one proportion per listed device, the CPU included: partial offload);
    the output layer goes with the last range, each layer's KV cache with its layer.
    n_ctx: KV cache length (tokens). attn: "flash" (flash_attn_ext) or "softmax" (mul_mat +
    soft_max). kv_type: "f16" or "f32". n_batch (alias n_ubatch): the micro-batch, the largest
    prefill chunk (prompts run in power-of-two chunks up to it; equal chunks are pipelined over the
    devices). n_copies: input slots per split for that pipelining (default 2 with several devices).
    trace: a Chrome/Perfetto trace file of every run (written when the model closes).
    layers: (first, stop) builds a pipeline stage (pyggml/models/stage.py) holding only those
    layers' weights and KV cache: the layers are split over `devices` as above. progress: True
    (a bar on stderr for loads over a second), False, or fn(done_bytes, total_bytes, name)."""
    from ..scheduler import Scheduler
    from ..graph import Graph
    if not isinstance(attn, str) or attn not in ATTN_MODES:
        raise ConfigError(f"attn must be one of {ATTN_MODES}, not {attn!r}")
    if not isinstance(kv_type, str) or kv_type not in ("f16", "f32"):
        raise ConfigError(f"kv_type must be 'f16' or 'f32', not {kv_type!r}")
    n_ctx = _count("n_ctx", n_ctx, 1, MAX_CTX)
    n_batch = _count("n_batch", n_batch if n_ubatch is None else n_ubatch, 1, MAX_CTX)
    if n_threads is not None:
        n_threads = _count("n_threads", n_threads, 1, 1024)
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeMismatchError(f"path must be a file path, not {type(path).__name__}")
    t0 = time.perf_counter()
    try:
        reader = GGUFReader(path)
    except FileNotFoundError:
        raise ModelNotFoundError(f"model file not found: {os.fsdecode(path)}") from None
    except IsADirectoryError:
        raise ModelNotFoundError(f"model path is a directory, not a GGUF file: {os.fsdecode(path)}") from None
    except PermissionError as e:
        raise ModelNotFoundError(f"cannot open the model file {os.fsdecode(path)}: {e.strerror}") from None
    model = None
    try:
        hp = read_hparams(reader)
        tensors = check_tensors(reader, hp)
        if isinstance(devices, str):
            devices = [devices]
        devs = [get_device(d) for d in devices] if isinstance(devices, (list, tuple)) else devices
        if layers is None:
            layer_dev = placement.split_layers(devs, hp.n_layer, tensor_split) if devs else []
        else:
            layer_dev = stage.layer_devices(devs, layers, hp.n_layer, tensor_split)
        if n_copies is None:
            n_copies = 2 if len(set(layer_dev) - {None}) > 1 else 1
        sched = Scheduler(devs, n_threads=n_threads, sync=sync, n_copies=n_copies, trace=trace)
        g = Graph(f"{hp.arch}:{hp.name or path}")
        weights = {}
        pairs = []
        tied = "output.weight" not in tensors
        for name, ft in tensors.items():
            wdev = placement.weight_devices(name, layer_dev, tied)
            if not wdev:
                continue                    # a stage's: a weight of layers it does not hold
            gt = g.weight(name, ft.raw, type=ft.type.name, shape=ft.shape)
            weights[name] = gt
            pairs.append((gt, ft, wdev))
        t_parse = time.perf_counter()
        upload(sched, pairs, reader, progress=progress, label=f"loading {hp.name or hp.arch}")
        t_upload = time.perf_counter()
        cls = Model if layers is None else functools.partial(stage.StageModel, layers=layers)
        model = cls(hp, tensors, sched, g, weights, n_ctx, attn=attn, kv_type=kv_type, reader=reader, path=path,
                    n_batch=n_batch, layer_devices=layer_dev if len(sched.devices) > 1 else None)
        f = model.forward_for(1, n_kv=kv_extent(1, n_ctx, True))      # the first decode step's forward
        sched.plan([f.logits])
        t_end = time.perf_counter()
        model.timings = {"parse_s": t_parse - t0, "upload_s": t_upload - t_parse, "plan_s": t_end - t_upload,
                         "total_s": t_end - t0, "file_bytes": reader.file_size, "rss_after_load": rss_bytes()[0]}
        return model
    except BaseException:
        if model is not None:
            model.close()
        model = None
        sched = g = weights = pairs = tensors = None
        reader.close()
        raise
