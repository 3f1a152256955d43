"""Shared fixtures: building small C libraries for the tests, and the plugins under test."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


MARKERS = {
    "gpu": "needs a GPU device (skips with a reason where none loads)",
    "slow": "takes more than ~10 s on the 2-core CI machine (deselect with -m 'not slow')",
    "llamacpp": "compares with llama.cpp through llama-cpp-python (skips where it is not installed)",
}


def pytest_configure(config):
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


def pytest_collection_modifyitems(config, items):
    """gpu and llamacpp follow from what a test needs: a CUDA device (`_cuda_device()`, the `cuda`
    fixture) or llama-cpp-python (`importorskip("llama_cpp")`); slow ones are marked where defined."""
    import inspect
    for item in items:
        fn = getattr(item, "function", None)
        try:
            src = inspect.getsource(fn) if fn else ""
        except (OSError, TypeError):
            src = ""
        if "_cuda_device(" in src or "cuda" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.gpu)
        if 'importorskip("llama_cpp"' in src:
            item.add_marker(pytest.mark.llamacpp)


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
