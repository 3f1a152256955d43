"""pyggml's exception tree: every error pyggml raises derives from PyggmlError.

Errors that come from a plugin carry the plugin's name and the ABI status code (`.plugin`,
`.code`), so a caller can tell "out of memory on cuda" from "bad shape" without parsing text.
"""


class PyggmlError(Exception):
    """Base of every pyggml exception."""

    def __init__(self, message, *, plugin=None, code=None):
        super().__init__(message)
        self.plugin = plugin
        self.code = code


class PluginError(PyggmlError):
    """A plugin failed to load, answered badly, or reported an error."""


class PluginNotFoundError(PluginError, FileNotFoundError):
    """No plugin file at the given path (or no plugin of that name)."""


class PluginLoadError(PluginError):
    """The file exists but is not a loadable shared library."""


class MissingEntryPointError(PluginError):
    """The library does not export pyg_plugin_get_api."""


class AbiMismatchError(PluginError):
    """The plugin was built for an ABI version this pyggml does not speak."""


class PluginInitError(PluginError):
    """The plugin's plugin_init reported an error other than 'no device'."""


class DeviceUnavailableError(PluginError):
    """The plugin loaded but has no usable device here (no driver, no hardware)."""


class UnsupportedError(PluginError):
    """The device cannot do what was asked (an op, a type, an option)."""


class DeviceError(PluginError):
    """The device or its runtime reported a failure."""


class DeviceOutOfMemory(PluginError, MemoryError):
    """A device (or host) allocation failed."""


class SanitizerError(PluginError):
    """A checking plugin saw a memory access that was not ordered after a pending one."""


class ShapeError(PyggmlError, ValueError):
    """Operand shapes do not fit the op; the message shows them."""


class TypeMismatchError(PyggmlError, TypeError):
    """An operand has a type the op does not accept; the message names it."""


class UnknownTypeError(PyggmlError, ValueError):
    """A type name or id that pyggml does not know."""


class GraphError(PyggmlError, ValueError):
    """A graph cannot be planned: a missing feed, a tensor from another graph, a cycle."""


class SyncStateError(PyggmlError, RuntimeError):
    """An illegal transition of the synchronization state machine."""


class ConfigError(PyggmlError, ValueError):
    """A bad argument to a pyggml object (a device list, a sync policy, a size)."""


class ClosedError(PyggmlError, RuntimeError):
    """The object (a Scheduler, a Model) was closed and cannot be used any more."""


class ConcurrentUseError(PyggmlError, RuntimeError):
    """An object that one thread drives at a time (a Model) was called from a second thread while
    the first was still inside it."""


class NonFiniteError(PyggmlError, FloatingPointError):
    """A result held NaN or Inf where the scheduler was asked to check (check_finite=True)."""


class GGUFError(PyggmlError, ValueError):
    """A GGUF file is malformed, truncated or uses something pyggml cannot read."""
