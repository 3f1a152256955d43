"""pyggml.dist: a model split into pipeline stages, each a Ray actor (Ray is optional:
`pip install pyggml[ray]`; nothing outside this package imports it).

    import pyggml.dist as dist
    cluster = dist.connect("local", n_nodes=2)     # or dist.connect("HOST:PORT") / "auto"
    with dist.Pipeline("model.gguf", stages=2, n_ctx=1024, n_threads=4) as p:
        logits = p.prefill(tokens)                 # the logits one process computes
        logits = p.decode(int(logits.argmax()))
    cluster.shutdown()

Each stage loads only its layers (pyggml.models.load(path, layers=...)): the model file must be
at the same path on every node. See pipeline.py for how activations travel and the fault behaviour.
"""
from .cluster import LOOPBACK, LocalCluster, connect, import_ray
from .errors import ClosedError, ConfigError, RayMissingError, ShapeError, StageFailedError, StageTimeoutError
from .pipeline import Pipeline, stage_ranges

__all__ = ["Pipeline", "LocalCluster", "connect", "import_ray", "stage_ranges", "LOOPBACK",
           "RayMissingError", "StageFailedError", "StageTimeoutError",
           "ConfigError", "ClosedError", "ShapeError"]
