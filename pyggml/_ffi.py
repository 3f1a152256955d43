"""cffi's view of the plugin ABI (ABI mode: no compiler), from the declarations generated out of
include/pyggml/*.h (pyggml/_abi_consts.py). Shared by the conformance checks and pyggml.plugin."""
import cffi

from . import _abi_consts

ffi = cffi.FFI()
ffi.cdef(_abi_consts.CDEF)
