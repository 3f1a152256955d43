"""Hostile metadata (issue 16): 4-byte edits of a valid model file. Each must raise a GGUFError
naming the key within seconds, before anything is sized by the value (no MemoryError after a
minute of CPU, no OverflowError / ZeroDivisionError, no NaN logits)."""
import math
import struct
import time

import numpy as np
import pytest

import pyggml as pg
import pyggml.models as models
from pyggml.gguf import GGUFReader, GGUFWriter



@pytest.fixture(scope="module")
def small(small_gguf):
    return small_gguf


def patch_value(src, dst, key, raw):
    """Copy `src` with the value bytes of metadata `key` overwritten by `raw` (same length)."""
    with GGUFReader(src) as r:
        f = r.fields[key]
        pos = f.offset + 8 + len(key.encode()) + 4          # key string, then the u32 value type
    data = bytearray(open(src, "rb").read())
    data[pos:pos + len(raw)] = raw
    open(dst, "wb").write(bytes(data))
    return dst


def with_keys(src, dst, **keys):
    """Copy `src` with metadata keys replaced or added (any value type the writer infers)."""
    keys = {k.replace("__", "."): v for k, v in keys.items()}
    with GGUFReader(src) as r:
        w = GGUFWriter(dst, alignment=r.alignment)
        for k, f in r.fields.items():
            if k not in keys and k != "general.alignment":
                w.add(k, f.value, f.type, f.elem_type)
        for k, v in keys.items():
            w.add(k, v)
        for t in r.tensors:
            w.add_tensor(t.name, np.array(t.raw), type=t.type.name, shape=t.shape)
        w.write()
    return dst


def assert_rejected(path, key, match=None):
    t0 = time.monotonic()
    with pytest.raises(pg.GGUFError, match=match or key.replace(".", r"\.")) as ei:
        models.load(path, progress=False, n_ctx=16)
    assert key in str(ei.value)
    assert time.monotonic() - t0 < 10, "rejecting the file took too long"


U32 = lambda v: struct.pack("<I", v)      # noqa: E731
F32 = lambda v: struct.pack("<f", v)      # noqa: E731


@pytest.mark.parametrize("key,raw", [
    ("llama.block_count", U32(0xFFFFFFFF)),
    ("llama.block_count", U32(1_000_000)),
    ("llama.block_count", U32(0)),
    ("llama.context_length", U32(2**31)),
    ("llama.context_length", U32(0xFFFFFFFF)),
    ("llama.embedding_length", U32(0xFFFFFFFF)),
    ("llama.feed_forward_length", U32(0)),
    ("llama.vocab_size", U32(0xFFFFFFFF)),
    ("llama.rope.dimension_count", U32(0x80000000)),
    ("llama.attention.layer_norm_rms_epsilon", F32(math.nan)),
    ("llama.attention.layer_norm_rms_epsilon", F32(-1e-5)),
    ("llama.attention.layer_norm_rms_epsilon", F32(0.0)),
    ("llama.attention.layer_norm_rms_epsilon", F32(math.inf)),
    ("llama.rope.freq_base", F32(math.nan)),
    ("llama.rope.freq_base", F32(0.0)),
    ("llama.rope.freq_base", F32(-math.inf)),
    ("tokenizer.ggml.bos_token_id", U32(0xFFFFFFFF)),
    ("llama.attention.head_count", U32(0)),
])
def test_four_byte_edit(small, tmp_path, key, raw):
    p = patch_value(small, str(tmp_path / "e.gguf"), key, raw)
    assert_rejected(p, key)


def test_value_type_edit(small, tmp_path):
    """The 4-byte value *type* of block_count changed to FLOAT32: a type error naming the key."""
    with GGUFReader(small) as r:
        f = r.fields["llama.block_count"]
        pos = f.offset + 8 + len("llama.block_count")
    data = bytearray(open(small, "rb").read())
    data[pos:pos + 4] = U32(6)                              # GGUFValueType.FLOAT32
    p = tmp_path / "t.gguf"
    p.write_bytes(bytes(data))
    assert_rejected(str(p), "llama.block_count", "expected int")


@pytest.mark.parametrize("keys,key", [
    ({"llama.rope.scale_linear": 0.0}, "llama.rope.scale_linear"),
    ({"llama.rope.scale_linear": float("nan")}, "llama.rope.scale_linear"),
    ({"llama.rope.scaling.type": ["linear"]}, "llama.rope.scaling.type"),
    ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 0.0}, "llama.rope.scaling.factor"),
    ({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": -2.0}, "llama.rope.scaling.factor"),
    ({"llama.attention.layer_norm_rms_epsilon": [1e-5]}, "llama.attention.layer_norm_rms_epsilon"),
    ({"llama.context_length": 2**40}, "llama.context_length"),
    ({"general.name": 7}, "general.name"),
    ({"llama.block_count": 3}, "llama.block_count"),     # more blocks than the 21 tensors hold
])
def test_bad_value(small, tmp_path, keys, key):
    p = with_keys(small, str(tmp_path / "k.gguf"), **{k.replace(".", "__"): v for k, v in keys.items()})
    assert_rejected(p, key)


def test_valid_file_still_loads(small):
    with models.load(small, progress=False, n_ctx=16) as m:
        assert m.hp.n_layer == 2
        assert np.all(np.isfinite(m.prefill([1, 5, 9])))
