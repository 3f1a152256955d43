"""Errors of pyggml.dist: all derive from PyggmlError."""
from ..errors import ClosedError, ConfigError, PyggmlError, ShapeError


class RayMissingError(PyggmlError, ImportError):
    """Ray is not installed (`pip install pyggml[ray]`)."""


class StageFailedError(PyggmlError, RuntimeError):
    """A pipeline stage died (its process, actor or node is gone) or raised; the message names the
    stage, its layers and its node. The pipeline is unusable until reset() (a stage raised) or
    rebuild() (a stage is gone)."""

    def __init__(self, message, stage=None, dead=False):
        super().__init__(message)
        self.stage = stage      # index of the failing stage (None: not known)
        self.dead = dead        # True: the stage is gone, only rebuild() helps


class StageTimeoutError(StageFailedError, TimeoutError):
    """A pipeline step did not finish within the Pipeline's timeout."""


__all__ = ["ConfigError", "ClosedError", "ShapeError", "RayMissingError", "StageFailedError", "StageTimeoutError"]
