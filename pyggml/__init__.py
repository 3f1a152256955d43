"""pyggml: ggml-style tensor graphs run from Python on run-time loaded backend plugins.

    import pyggml as pg
    g = pg.Graph()
    x = g.input("x", (4, 8))
    y = pg.silu(pg.rms_norm(x))
    out = pg.Scheduler("cpu").compute(y, {"x": data})
"""
from typing import TYPE_CHECKING

from .errors import (AbiMismatchError, ClosedError, ConcurrentUseError, ConfigError, DeviceError,
                     DeviceOutOfMemory, DeviceUnavailableError, GGUFError, GraphError, MissingEntryPointError,
                     NonFiniteError,
                     PluginError, PluginInitError, PluginLoadError, PluginNotFoundError, PyggmlError,
                     SanitizerError, ShapeError, SyncStateError, TypeMismatchError, UnknownTypeError,
                     UnsupportedError)
from .types import DType, dtype, f32, f16, bf16, f64, i8, i16, i32, i64, q4_0, q4_1, q5_0, q5_1, q8_0, \
    q8_1, q2_K, q3_K, q4_K, q5_K, q6_K, q8_K
from .graph import Graph, Tensor
from .ops import (add, argmax, cont, cpy, flash_attn_ext, gelu, get_rows, mul, mul_mat, norm, permute, reshape,
                  rms_norm, rope, scale, set_rows, silu, soft_max, swiglu, transpose, view, ROPE_NEOX,
                  ROPE_NORMAL)
from ._plugin import (ABI_VERSION, Device, Plugin, devices, discover, failures, get_device, load_plugin, plugins,
                      shadowed)
from ._plan import Plan
from .scheduler import RunStats, Scheduler
from .quant import dequantize, quantize

__version__ = "0.1.0"


def get_include() -> str:
    """The folder holding the plugin ABI headers (`#include "pyggml/pyggml.h"`), for building a
    backend plugin against this installation: the copy inside the installed package, or the
    checkout's include/ when run from a source tree."""
    import os
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "include"), os.path.join(os.path.dirname(here), "include")):
        if os.path.isfile(os.path.join(d, "pyggml", "plugin.h")):
            return d
    raise PyggmlError(f"the pyggml ABI headers are missing (looked in {here}/include and ../include)")


def load(path, **kw) -> "Model":
    """Open a GGUF model (LLaMA family): memory-mapped, uploaded tensor by tensor with a progress
    bar, no RAM peak. See pyggml.models.load for the options (devices, n_ctx, n_threads, ...)."""
    from .models import load as _load
    return _load(path, **kw)


if TYPE_CHECKING:
    from .models import Model
