"""Fuzz the GGUF reader and the model loader's checks (atheris, coverage-guided).

    python3 tests/fuzz/fuzz_gguf.py -max_total_time=180 WORKDIR tests/fuzz/corpus

Every input is written to a file and opened as a model would be: GGUFReader (header, metadata,
tensor table, offsets), then read_hparams / check_tensors (hyperparameters against the tensors)
and every tensor's data view. The only acceptable failures are pyggml errors (GGUFError,
UnsupportedError...); any other exception, a crash or a hang is a finding. `make fuzz` runs it
bounded; tests/test_fuzz_corpus.py replays the committed corpus through `one_input` in make test.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

try:                                           # coverage of pyggml's own code only (fast start)
    import atheris
    with atheris.instrument_imports(include=["pyggml"]):
        from pyggml.errors import PyggmlError
        from pyggml.gguf import GGUFReader
        from pyggml.models import loader
except ImportError:                            # replaying the corpus without atheris (make test)
    atheris = None
    from pyggml.errors import PyggmlError
    from pyggml.gguf import GGUFReader
    from pyggml.models import loader

_fd, _PATH = tempfile.mkstemp(prefix="pyggml-fuzz-", suffix=".gguf")
os.close(_fd)


def one_input(data: bytes) -> None:
    with open(_PATH, "wb") as f:
        f.write(data)
    try:
        with GGUFReader(_PATH) as r:
            for t in r.tensors:
                t.data                       # every view must lie inside the mapping
            hp = loader.read_hparams(r)
            tensors = loader.check_tensors(r, hp)
            assert set(tensors) <= {t.name for t in r.tensors}
            del tensors, t
    except PyggmlError:
        pass


def main():
    if atheris is None:
        sys.exit("atheris is not installed: pip install atheris (make fuzz does)")
    atheris.Setup(sys.argv, one_input)
    try:
        atheris.Fuzz()
    finally:
        os.unlink(_PATH)


if __name__ == "__main__":
    main()
