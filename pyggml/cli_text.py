"""`pyggml run` (one prompt, streamed completion) and `pyggml chat` (an interactive loop).

    pyggml run -m model.gguf -p "What is the capital of France?"        # through the chat template
    pyggml run -m model.gguf -p "Once upon a time" --raw -n 64 --temp 0.8 --seed 1
    pyggml chat -m model.gguf --system "Answer briefly."

The completion goes to stdout as it is generated; the timings (time to first token, prompt and
generation tokens/s) go to stderr, so `pyggml run ... > answer.txt` keeps only the answer.
"""
from __future__ import annotations

import argparse
import sys
from typing import TextIO


def _add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", required=True, help="GGUF model file (or synth:SHAPE:WTYPE)")
    p.add_argument("-d", "--device", default="cpu", help="device(s), comma-separated in priority order (default cpu)")
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("-c", "--ctx-size", type=int, default=4096, help="context length in tokens (default 4096)")
    p.add_argument("--attn", default="flash", choices=("flash", "softmax"), help="attention graph (default flash)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar and no timings on stderr")


def _add_sampling_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("generation")
    g.add_argument("-n", "--n-predict", type=int, default=512, help="most tokens to generate (default 512)")
    g.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default 0)")
    g.add_argument("--top-k", type=int, default=40, help="keep the K most likely tokens; 0 = off (default 40)")
    g.add_argument("--top-p", type=float, default=0.95, help="nucleus: smallest set with probability >= P (default 0.95)")
    g.add_argument("--min-p", type=float, default=0.05,
                   help="drop tokens below P x the most likely one's probability (default 0.05)")
    g.add_argument("--repeat-penalty", type=float, default=1.0, help="penalty for repeated tokens; 1 = off (default 1)")
    g.add_argument("--repeat-last-n", type=int, default=64, help="tokens the penalty looks back over (default 64)")
    g.add_argument("-s", "--seed", type=int, default=None, help="random seed (default: random)")
    g.add_argument("--stop", action="append", default=[], metavar="TEXT",
                   help="stop when this text is generated (repeatable)")
    g.add_argument("--system", default=None, help="system message (chat template only)")


def add_parsers(sub) -> None:
    r = sub.add_parser("run", help="generate text from a prompt with a GGUF model",
                       description="Generate a completion of a prompt. The model's chat template is applied when "
                                   "it has one (--raw: the prompt as is). Timings go to stderr.")
    _add_model_options(r)
    r.add_argument("-p", "--prompt", default=None, help="the prompt (or -f FILE; '-' reads stdin)")
    r.add_argument("-f", "--file", default=None, help="read the prompt from this file")
    r.add_argument("--raw", action="store_true", help="no chat template: complete the prompt text as is")
    _add_sampling_options(r)
    r.set_defaults(func=cmd_run)
    c = sub.add_parser("chat", help="chat with a GGUF model (interactive)",
                       description="An interactive chat through the model's chat template. Type a message and "
                                   "Enter; /reset forgets the conversation, /exit or end of input quits.")
    _add_model_options(c)
    _add_sampling_options(c)
    c.set_defaults(func=cmd_chat)


def _load(args):
    import pyggml
    from pyggml.bench_model import resolve_model
    path = resolve_model(args.model, quiet=args.quiet)
    devices = [d for d in args.device.split(",") if d]
    return pyggml.load(path, devices=devices, n_ctx=args.ctx_size, n_threads=args.threads, attn=args.attn,
                       progress=not args.quiet)


def _sampling(args) -> dict:
    return dict(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                repeat_penalty=args.repeat_penalty, repeat_last_n=args.repeat_last_n, seed=args.seed)


def _report(model, err: TextIO) -> None:
    s = model.last_stats
    if s is None:
        return
    err.write(f"\n[time to first token {s.ttft_s * 1e3:.0f} ms ({s.n_prompt} prompt tokens, "
              f"{s.prompt_tokens_per_s:.1f} t/s); {s.n_generated} tokens generated, "
              f"{s.tokens_per_s:.1f} t/s; stop: {s.stop_reason or 'end of text'}]\n")
    err.flush()


def _answer(model, pieces, out: TextIO, err: TextIO, quiet: bool) -> str:
    """Write the pieces as they come, then a newline and (unless quiet) the timings; the text."""
    text = []
    for p in pieces:
        out.write(p)
        out.flush()
        text.append(p)
    out.write("\n")
    out.flush()
    if not quiet:
        _report(model, err)
    return "".join(text)


def _guarded(cmd: str, body) -> int:
    """Run body(); pyggml, file and argument errors become one line on stderr and exit status 1."""
    from pyggml.errors import PyggmlError
    try:
        return body()
    except (PyggmlError, OSError, ValueError) as e:
        print(f"pyggml {cmd}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def cmd_run(args, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    if (args.prompt is None) == (args.file is None):
        print("pyggml run: error: give the prompt with -p TEXT or -f FILE (one of them)", file=sys.stderr)
        return 2

    def body():
        if args.file is not None:
            with open(args.file, encoding="utf-8") as f:
                prompt = f.read()
        else:
            prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
        with _load(args) as m:
            kw = dict(stream=True, stop=args.stop or None, **_sampling(args))
            if not args.raw and m.tokenizer.chat_template:
                msgs = ([{"role": "system", "content": args.system}] if args.system else [])
                msgs.append({"role": "user", "content": prompt})
                pieces = m.chat(msgs, args.n_predict, **kw)
            else:
                pieces = m.generate(prompt, args.n_predict, **kw)
            _answer(m, pieces, out, err, args.quiet)
        return 0
    return _guarded("run", body)


def cmd_chat(args, inp: TextIO | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    inp = inp or sys.stdin
    out = out or sys.stdout
    err = err or sys.stderr
    tty = getattr(inp, "isatty", lambda: False)()

    def body():
        with _load(args) as m:
            _ = m.chat_template                              # no template: a clear error now, not at the first line
            system = [{"role": "system", "content": args.system}] if args.system else []
            msgs = list(system)
            while True:
                if tty:
                    out.write("> ")
                    out.flush()
                line = inp.readline()
                if not line:
                    return 0
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                if line.strip() in ("/exit", "/quit"):
                    return 0
                if line.strip() == "/reset":
                    msgs = list(system)
                    m.reset()
                    continue
                msgs.append({"role": "user", "content": line})
                pieces = m.chat(msgs, args.n_predict, stream=True, stop=args.stop or None, **_sampling(args))
                msgs.append({"role": "assistant", "content": _answer(m, pieces, out, err, args.quiet)})
    return _guarded("chat", body)
