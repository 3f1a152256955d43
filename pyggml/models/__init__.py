"""GGUF models (LLaMA family) on pyggml graphs.

    import pyggml.models
    m = pyggml.models.load("model.gguf", devices=["cpu"], n_ctx=512)
    logits = m.prefill([1, 450, 4996])      # last token's logits (n_vocab,)
    logits = m.decode(int(logits.argmax()))
    toks = m.generate([1, 450], 16)          # greedy
    m.reset()
"""
from __future__ import annotations

import time

from ..gguf import GGUFReader
from .llama import ATTN_MODES, ContextFullError, Model
from .loader import HParams, check_tensors, read_hparams, rss_bytes, upload  # noqa: F401 (HParams re-exported)

__all__ = ["load", "Model", "HParams", "ContextFullError", "ATTN_MODES"]


def load(path, devices=("cpu",), n_ctx=512, n_threads=None, attn="flash", kv_type="f16", progress=True,
         sync=None, n_batch=512):
    """Open a GGUF model, check it, upload its weights into the first device's buffers (straight
    from the file's mmap, with a progress bar on stderr for loads over a second) and build the
    decode graph. Malformed files raise GGUFError; nothing stays open or allocated on failure.

    devices: as for pyggml.Scheduler (priority order). n_ctx: KV cache length (tokens).
    attn: "flash" (flash_attn_ext) or "softmax" (mul_mat + soft_max). kv_type: "f16" or "f32".
    n_batch: largest prefill chunk (prompts run in power-of-two chunks up to it)."""
    from ..scheduler import Scheduler
    from ..graph import Graph
    if attn not in ATTN_MODES:
        raise ValueError(f"attn must be one of {ATTN_MODES}, not {attn!r}")
    if kv_type not in ("f16", "f32"):
        raise ValueError(f"kv_type must be 'f16' or 'f32', not {kv_type!r}")
    n_ctx = int(n_ctx)
    if n_ctx < 1:
        raise ValueError(f"n_ctx must be >= 1, got {n_ctx}")
    t0 = time.perf_counter()
    reader = GGUFReader(path)
    model = None
    try:
        hp = read_hparams(reader)
        tensors = check_tensors(reader, hp)
        if isinstance(devices, str):
            devices = [devices]
        sched = Scheduler(list(devices), n_threads=n_threads, sync=sync)
        g = Graph(f"{hp.arch}:{hp.name or path}")
        weights = {}
        pairs = []
        for name, ft in tensors.items():
            gt = g.weight(name, ft.raw, type=ft.type.name, shape=ft.shape)
            weights[name] = gt
            pairs.append((gt, ft))
        t_parse = time.perf_counter()
        upload(sched, sched.devices[0], pairs, reader, progress=progress,
               label=f"loading {hp.name or hp.arch}")
        t_upload = time.perf_counter()
        model = Model(hp, tensors, sched, g, weights, n_ctx, attn=attn, kv_type=kv_type, reader=reader, path=path,
                      n_batch=n_batch)
        f = model.forward_for(1)
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
