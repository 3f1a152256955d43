"""The fuzz harness (tests/fuzz/fuzz_gguf.py) on its committed seed corpus and on the findings of
issue 16, without atheris: `make fuzz` mutates these; here each must pass through the reader and
the loader's checks with nothing but pyggml errors."""
import glob
import os
import struct
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "fuzz"))
import fuzz_gguf  # noqa: E402

from pyggml.gguf import GGUFReader  # noqa: E402
from pyggml.models import loader  # noqa: E402

CORPUS = sorted(glob.glob(os.path.join(HERE, "fuzz", "corpus", "*")))


def test_corpus_is_committed():
    assert len(CORPUS) >= 3


@pytest.mark.parametrize("path", CORPUS, ids=os.path.basename)
def test_seed(path):
    fuzz_gguf.one_input(open(path, "rb").read())


@pytest.mark.parametrize("path", [p for p in CORPUS if "llama" in p], ids=os.path.basename)
def test_llama_seeds_pass_every_check(path):
    """The seeds reach the deepest code: they are valid models, not early rejects."""
    with GGUFReader(path) as r:
        hp = loader.read_hparams(r)
        assert len(loader.check_tensors(r, hp)) == 2 + 9 * hp.n_layer


def _edit(data, key, raw):
    with GGUFReader(CORPUS[0]) as r:
        pos = r.fields[key].offset + 8 + len(key) + 4
    return data[:pos] + raw + data[pos + len(raw):]


@pytest.mark.parametrize("key,raw", [("llama.block_count", struct.pack("<I", 0xFFFFFFFF)),
                                     ("llama.context_length", struct.pack("<I", 2**31)),
                                     ("llama.attention.layer_norm_rms_epsilon", struct.pack("<f", float("nan"))),
                                     ("llama.rope.freq_base", struct.pack("<f", 0.0))])
def test_issue_findings_through_the_harness(key, raw):
    data = _edit(open(CORPUS[0], "rb").read(), key, raw)
    fuzz_gguf.one_input(data)                       # a pyggml error, swallowed by the harness
    with pytest.raises(Exception) as ei:
        with open(fuzz_gguf._PATH, "wb") as f:
            f.write(data)
        with GGUFReader(fuzz_gguf._PATH) as r:
            loader.read_hparams(r)
    assert type(ei.value).__name__ == "GGUFError" and key in str(ei.value)
