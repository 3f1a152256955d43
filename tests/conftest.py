"""Shared fixtures: building small C libraries for the tests, and the plugins under test."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def build_shared(out_dir, name, sources, defines=(), extra=()):
    """Compile C sources into OUT_DIR/NAME with the plugin flags; returns the path."""
    out = os.path.join(str(out_dir), name)
    cmd = ["cc", "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-I", os.path.join(ROOT, "include"),
           *[f"-D{d}" for d in defines], *sources, *extra, "-o", out]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="session")
def c_builder(tmp_path_factory):
    d = tmp_path_factory.mktemp("clibs")

    def build(name, sources, defines=(), extra=()):
        return build_shared(d, name, [os.path.join(ROOT, s) for s in sources], defines, extra)
    return build


# A small synthetic LLaMA (2 layers, d=64, vocab 512, q8_0): loads and runs in well under a second.
SMALL_SHAPE = dict(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=128, n_vocab=512)


@pytest.fixture(scope="session")
def small_gguf(tmp_path_factory):
    from pyggml.synth import write_synth_model
    p = str(tmp_path_factory.mktemp("small") / "small-q8_0.gguf")
    write_synth_model(p, SMALL_SHAPE, "q8_0", seed=3, progress=False)
    return p
