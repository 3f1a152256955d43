"""Where a model's layers live: contiguous layer ranges per device.

By default the layers are spread over the listed devices that are not the CPU, in proportion to
their free memory (the CPU stays the fallback for ops a device cannot compute); with
`tensor_split` (like llama.cpp's -ts) the proportions are given, one per listed device, the CPU
included (partial offload: the CPU then holds its share of the layers). The token embedding lookup
runs with the first layer, the output norm and projection with the last; each layer's KV cache
lives with its layer.
"""
from __future__ import annotations

import math
import re
from typing import Dict, List, Optional, Sequence

from ..errors import ConfigError

CPU_KIND = 0
_BLK = re.compile(r"^blk\.(\d+)\.")


def split_layers(devices: Sequence, n_layer: int, tensor_split: Optional[Sequence[float]] = None) -> List[str]:
    """The device name of each of n_layer layers: contiguous ranges in device order."""
    names = [str(d) for d in devices]
    if tensor_split is not None:
        try:
            w = [float(x) for x in tensor_split]
        except (TypeError, ValueError):
            raise ConfigError(f"tensor_split must be a list of numbers, got {tensor_split!r}") from None
        if len(w) != len(names):
            raise ConfigError(f"tensor_split has {len(w)} entries for {len(names)} devices {names}")
        if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
            raise ConfigError(f"tensor_split entries must be finite, >= 0, and not all 0: {tensor_split!r}")
        cands = list(range(len(names)))
    else:
        cands = [i for i, d in enumerate(devices) if d.kind != CPU_KIND] or [0]
        if len(cands) == 1:
            w = [1.0 if i == cands[0] else 0.0 for i in range(len(names))]
        else:
            w = [0.0] * len(names)
            for i in cands:
                free, total = devices[i].memory()
                w[i] = float(free or total or 1)
    total = sum(w)
    bounds, acc = [], 0.0
    for x in w:
        acc += x
        bounds.append(acc / total * n_layer)
    out = []
    for layer in range(n_layer):
        k = next(i for i, b in enumerate(bounds) if layer + 0.5 < b + 1e-9 and w[i] > 0)
        out.append(names[k])
    return out


def weight_devices(name: str, layer_dev: List[Optional[str]], tied_output: bool) -> List[str]:
    """The devices that need weight `name` (a GGUF tensor name) for the layer placement. A None in
    layer_dev is a layer the model does not hold (a pipeline stage, pyggml/models/stage.py): its
    weights, and the embedding or output of a range it does not hold, need no device ([])."""
    m = _BLK.match(name)
    if m:
        d = layer_dev[int(m.group(1))]
        return [] if d is None else [d]
    first, last = layer_dev[0], layer_dev[-1]
    if name == "token_embd.weight":
        want = [first, last] if tied_output else [first]
    elif name.startswith("output"):
        want = [last]
    else:
        want = layer_dev                    # shared tables (rope_freqs): every device with layers
    return [d for d in dict.fromkeys(want) if d is not None]


def summary(layer_dev: List[str]) -> Dict[str, range]:
    """{device: range of layers} for messages and benchmarks."""
    out: Dict[str, range] = {}
    for i, d in enumerate(layer_dev):
        r = out.get(d)
        out[d] = range(r.start if r else i, i + 1)
    return out
