"""A model split into pipeline stages, each a Ray actor (pyggml/dist/worker.py) that owns a
pyggml Scheduler for a contiguous layer range (pyggml/models/stage.py).

The driver (this process) holds no weights: it checks the tokens, cuts a prompt into the chunks
Model.prefill uses (Model.chunks: the same chunks give the same bits) and passes each chunk through
the stages in order. Prefill keeps up to n_copies chunks in flight, so stage k runs chunk m + 1
while stage k + 1 runs chunk m; decode passes one token per step. Activations (the hidden state,
(T, n_embd) f32) go from stage to stage without the driver, as actor calls chained by ObjectRefs:
Ray's object store (shared memory on one node, the object manager between nodes). Ray's compiled
graphs (lower overhead per crossing) are not used: with Ray 2.60 they hung here on a second chunk
in flight between raylets and on messages of a few MB (a prefill's logits) on one raylet.

Faults: a stage whose process, actor or node dies surfaces as StageFailedError naming the stage
(Ray reports the death; a step that does not finish within `timeout` seconds raises
StageTimeoutError), and the pipeline refuses further work until rebuild() starts every stage again
(after a stage merely raised, reset() is enough).
"""
from __future__ import annotations

import collections
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ClosedError, ConfigError, ShapeError
from ..models.llama import Model, _token_id
from ..models import placement
from .cluster import import_ray
from .errors import StageFailedError, StageTimeoutError
from .worker import StageWorker


def stage_ranges(n_layer: int, stages, split: Optional[Sequence[float]] = None) -> List[Tuple[int, int]]:
    """Contiguous (first, stop) layer ranges: `stages` of them in proportion to `split` (equal by
    default), or `stages` given as the ranges themselves (checked: contiguous, covering every layer)."""
    if isinstance(stages, (list, tuple)):
        ranges = [tuple(int(v) for v in r) for r in stages]
        want = 0
        for a, b in ranges:
            if a != want or b <= a:
                raise ConfigError(f"stage layer ranges must be contiguous and non-empty from 0: {stages!r}")
            want = b
        if want != n_layer:
            raise ConfigError(f"stage layer ranges {stages!r} do not cover the model's {n_layer} layers")
        return ranges
    if isinstance(stages, bool) or not isinstance(stages, int) or not 1 <= stages <= n_layer:
        raise ConfigError(f"stages must be an int in [1, {n_layer}] (the model's layers), got {stages!r}")
    names = [f"stage{k}" for k in range(stages)]
    per = placement.summary(placement.split_layers(names, n_layer, split if split is not None else [1] * stages))
    if len(per) != stages:
        raise ConfigError(f"split {split!r} leaves a stage without layers ({n_layer} layers, {stages} stages)")
    return [(per[n].start, per[n].stop) for n in names]


class Pipeline:
    """A model at `path` split into stages on the connected Ray cluster (pyggml.dist.connect).

    stages: how many (equal layer ranges, or in proportion to `split`), or the (first, stop)
    ranges themselves. devices: the devices each stage's Scheduler uses, as seen inside its actor
    (with num_gpus=1 per stage, Ray gives each actor its own GPU, which it sees as cuda:0).
    num_cpus/num_gpus: Ray resources per stage; nodes: node ids to pin stage k to
    nodes[k % len(nodes)] (default: Ray's SPREAD strategy). n_ctx, n_threads, n_batch, attn, kv_type,
    sync: as for pyggml.models.load, per stage. n_copies: chunks in flight in a prefill (default:
    the number of stages). timeout: seconds a step may take before StageTimeoutError (None: no
    limit; a dead stage is reported by Ray either way). load_timeout: seconds for the stages to load."""

    def __init__(self, path, stages=2, *, split=None, devices=("cpu",), num_cpus=1, num_gpus=0, nodes=None,
                 n_ctx=512, n_threads=None, n_batch=512, n_copies=None, attn="flash", kv_type="f16", sync=None,
                 timeout=300.0, load_timeout=600.0):
        from ..gguf import GGUFReader
        from ..models import _count, read_hparams
        self._ray = ray = import_ray()
        if not ray.is_initialized():
            raise ConfigError("Pipeline: connect to a Ray cluster first (pyggml.dist.connect(address))")
        reader = GGUFReader(path)
        try:
            self.hp = read_hparams(reader)
        finally:
            reader.close()
        self.path = str(path)
        self.n_ctx = _count("n_ctx", n_ctx, 1, 1 << 24)
        self.n_batch = _count("n_batch", n_batch, 1, 1 << 24)
        self.ranges = stage_ranges(self.hp.n_layer, stages, split)
        self.n_copies = len(self.ranges) if n_copies is None else _count("n_copies", n_copies, 1, 64)
        self.timeout = timeout
        self.load_timeout = load_timeout
        self.devices = [devices] if isinstance(devices, str) else list(devices)
        self.nodes = list(nodes) if nodes else None
        self._opts = dict(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0, max_task_retries=0)
        self._load_kw = dict(devices=self.devices, n_ctx=self.n_ctx, n_threads=n_threads, n_batch=self.n_batch,
                             attn=attn, kv_type=kv_type, sync=sync)
        self._check_resources(num_cpus, num_gpus)
        self.n_past = 0
        self.tokens: List[int] = []
        self._actors: list = []
        self._broken: Optional[StageFailedError] = None
        self._closed = False
        self.info: List[dict] = []
        self._start()

    # ---------------------------------------------------------------- lifetime

    def _check_resources(self, num_cpus, num_gpus):
        have = self._ray.cluster_resources()
        for key, per in (("CPU", num_cpus), ("GPU", num_gpus)):
            need = per * len(self.ranges)
            if need and have.get(key, 0) < need:
                raise ConfigError(f"{len(self.ranges)} stages need {need} {key} (num_{key.lower()}s={per} each); the "
                                  f"cluster has {have.get(key, 0)}")

    def _start(self):
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        cls = ray.remote(StageWorker)
        self._actors = []
        for k, layers in enumerate(self.ranges):
            strategy = "SPREAD" if not self.nodes else \
                NodeAffinitySchedulingStrategy(self.nodes[k % len(self.nodes)], soft=False)
            self._actors.append(cls.options(scheduling_strategy=strategy, **self._opts).remote(
                k, self.path, layers, self._load_kw))
        self._ids = {a._actor_id.hex(): k for k, a in enumerate(self._actors)}
        self.info = self._wait([a.info.remote() for a in self._actors], self.load_timeout, "loading the stages")

    def _stop(self):
        for a in self._actors:
            try:
                self._ray.kill(a)
            except Exception:
                pass
        self._actors = []

    def rebuild(self):
        """Start every stage again (new actors, empty context): the way back after a failure."""
        self._check_open("rebuild")
        self._stop()
        self.n_past, self.tokens, self._broken = 0, [], None
        self._start()

    def close(self):
        """Stop the stages' actors (their memory goes with them). Idempotent."""
        if not self._closed:
            self._stop()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_open(self, what):
        if self._closed:
            raise ClosedError(f"Pipeline.{what}: the pipeline was closed")

    def _check_usable(self, what):
        self._check_open(what)
        if self._broken is not None:
            how = "rebuild()" if self._broken.dead else "reset() or rebuild()"
            raise StageFailedError(f"Pipeline.{what}: the pipeline failed earlier ({self._broken}); call {how}",
                                   stage=self._broken.stage, dead=self._broken.dead)

    # ---------------------------------------------------------------- failures

    def _describe(self, k):
        if k is None:
            return "a stage"
        a, b = self.ranges[k]
        where = self.info[k]["host"] if k < len(self.info) else "?"
        return f"stage {k} (layers {a}-{b - 1} on {where})"

    def _failure(self, e, what, timeout):
        """The StageFailedError for a Ray error `e` seen while `what`; the pipeline is then broken."""
        ex = self._ray.exceptions
        if isinstance(e, ex.RayTaskError) and isinstance(e.cause, StageFailedError):
            err = e.cause
        elif isinstance(e, ex.GetTimeoutError):
            err = StageTimeoutError(f"{what}: no result within {timeout} s (a stage hung or is overloaded); "
                                    f"rebuild() starts the stages again", dead=True)
        elif isinstance(e, ex.RayActorError):
            k = self._ids.get(getattr(e, "actor_id", None) or "")
            reason = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
            err = StageFailedError(f"{what}: {self._describe(k)} is gone ({type(e).__name__}: {reason}); "
                                   f"rebuild() starts the stages again", stage=k, dead=True)
        else:                                  # a lost object, a node gone, ...
            k = self._dead_stage()
            err = StageFailedError(f"{what}: {self._describe(k)} failed ({type(e).__name__}: "
                                   f"{str(e).strip()[:300]}); rebuild() starts the stages again", stage=k, dead=True)
        self._broken = err
        return err

    def _dead_stage(self):
        """The first stage that does not answer a ping within a few seconds (None: all answer)."""
        for k, a in enumerate(self._actors):
            try:
                self._ray.get(a.stats.remote(), timeout=5.0)
            except Exception:
                return k
        return None

    def _wait(self, refs, timeout, what):
        try:
            return self._ray.get(refs, timeout=timeout)
        except self._ray.exceptions.RayError as e:
            raise self._failure(e, what, timeout) from None

    # ---------------------------------------------------------------- running

    def _submit(self, x, all_logits):
        ref = x
        for a in self._actors:
            ref = a.run.remote(ref, all_logits)
        return ref

    def _result(self, ref, what):
        return self._wait(ref, self.timeout, what)

    def _pipelined(self, chunks, all_logits, what):
        """Every chunk through every stage, up to n_copies chunks in flight; the last stage's outputs."""
        pending, outs = collections.deque(), []
        for x in chunks:
            if len(pending) >= self.n_copies:
                outs.append(self._result(pending.popleft(), what))
            pending.append(self._submit(x, all_logits))
        while pending:
            outs.append(self._result(pending.popleft(), what))
        return outs

    def prefill(self, tokens, all_logits=False) -> np.ndarray:
        """Run `tokens` after the context; the last token's logits (n_vocab,) f32, or every token's
        (T, n_vocab) with all_logits=True: the values Model.prefill gives."""
        self._check_usable("prefill")
        t = Model._check_tokens(self, tokens)           # the same checks (n_vocab, n_ctx) as a Model
        chunks, i = [], 0
        for c in Model.chunks(self, t.size):            # the same chunks as a Model
            chunks.append(t[i:i + c])
            i += c
        outs = self._pipelined(chunks, bool(all_logits), f"prefill of {t.size} tokens")
        self.n_past += t.size
        self.tokens.extend(int(x) for x in t)
        return np.concatenate(outs) if all_logits else outs[-1][0]

    def decode(self, token) -> np.ndarray:
        """One token through every stage; its logits (n_vocab,) f32."""
        self._check_usable("decode")
        tok = _token_id(token)
        if not 0 <= tok < self.hp.n_vocab:
            raise ShapeError(f"token id {tok} is not in [0, {self.hp.n_vocab})")
        Model._check_tokens(self, [tok])                # context room
        out = self._pipelined([np.array([tok], np.int32)], False, "decode")[0]
        self.n_past += 1
        self.tokens.append(tok)
        return out[0]

    def generate(self, prompt_tokens, n, stop=None) -> List[int]:
        """Greedy generation of up to n tokens after prompt_tokens (appended to the context)."""
        out: List[int] = []
        if n <= 0:
            return out
        tok = int(np.argmax(self.prefill(prompt_tokens)))
        out.append(tok)
        while len(out) < n and (stop is None or tok not in stop):
            tok = int(np.argmax(self.decode(tok)))
            out.append(tok)
        return out

    def reset(self):
        """Forget the context on every stage (also clears a failure where every stage still runs)."""
        self._check_open("reset")
        if self._broken is not None and self._broken.dead:
            raise StageFailedError(f"Pipeline.reset: {self._broken}; call rebuild()", stage=self._broken.stage,
                                   dead=True)
        self._wait([a.reset.remote() for a in self._actors], self.timeout, "reset")
        self.n_past, self.tokens, self._broken = 0, [], None

    def stage_stats(self, clear=False) -> List[dict]:
        """Per stage: busy_s (time inside StageModel.run), calls, n_past."""
        self._check_usable("stage_stats")
        return self._wait([a.stats.remote(clear) for a in self._actors], self.timeout, "stage stats")

    def kill_stage(self, k):
        """Kill stage k's actor (fault drills: what a dead host looks like to the driver)."""
        self._ray.kill(self._actors[k])

    def __repr__(self):
        return (f"<pyggml.dist.Pipeline {self.hp.name or self.hp.arch}: {len(self.ranges)} stages "
                f"{[f'{a}-{b - 1}' for a, b in self.ranges]}, n_past {self.n_past}>")
