"""The body of a pipeline stage's Ray actor: one StageModel (pyggml/models/stage.py) on its own
Scheduler. pyggml.dist.pipeline wraps it with ray.remote; nothing here imports Ray at module level,
so the class also runs in-process (tests of the stage logic without a cluster)."""
from __future__ import annotations

import os
import socket
import time


class StageWorker:
    """Loads layers [first, stop) of the model at `path` (the file must be at that path on the
    stage's node) and runs one chunk per call, in call order."""

    def __init__(self, index, path, layers, load_kw):
        from .. import models
        self.index = index
        self.layers = tuple(layers)
        t = time.perf_counter()
        self.model = models.load(path, layers=self.layers, progress=False, **load_kw)
        self.load_s = time.perf_counter() - t
        self.busy_s = 0.0                   # time inside StageModel.run since the last stats(clear=True)
        self.calls = 0

    def _where(self):
        a, b = self.layers
        return f"stage {self.index} (layers {a}-{b - 1}, pid {os.getpid()} on {socket.gethostname()})"

    def run(self, x, all_logits=False):
        """One micro-batch through this stage: token ids or a hidden state in, the next stage's
        input (or the logits) out. Any error comes back as a StageFailedError naming the stage."""
        from .errors import StageFailedError
        t = time.perf_counter()
        try:
            out = self.model.run(x, all_logits)
        except Exception as e:
            raise StageFailedError(f"{self._where()}: {type(e).__name__}: {e}", stage=self.index) from e
        self.busy_s += time.perf_counter() - t
        self.calls += 1
        return out

    def reset(self):
        self.model.reset()
        return self.model.n_past

    def stats(self, clear=False):
        out = {"busy_s": self.busy_s, "calls": self.calls, "n_past": self.model.n_past}
        if clear:
            self.busy_s, self.calls = 0.0, 0
        return out

    def info(self):
        m = self.model
        node = None
        try:
            import ray
            node = ray.get_runtime_context().get_node_id()
        except Exception:                   # in-process use, no Ray
            pass
        return {"index": self.index, "layers": list(self.layers), "pid": os.getpid(), "host": socket.gethostname(),
                "node_id": node, "devices": [str(d) for d in m.sched.devices], "weight_bytes": m.weight_bytes,
                "memory": m.sched.memory_by_device(), "load_s": self.load_s,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}

    def close(self):
        self.model.close()
