# Loader twins: the cdef classes other Cython modules (the scheduler) use without Python calls.
from libc.stdint cimport uint64_t
from pyggml._abi cimport pyg_plugin_api, pyg_device, pyg_error, pyg_stream

cdef class Plugin:
    cdef const pyg_plugin_api *api
    cdef readonly str name
    cdef readonly str path
    cdef readonly str version
    cdef readonly int abi_major
    cdef readonly int abi_minor
    cdef readonly str unavailable_reason
    cdef readonly list devices
    cdef object _lib

cdef class Device:
    cdef readonly Plugin plugin
    cdef pyg_device *dev
    cdef readonly int index
    cdef readonly str description
    cdef readonly int kind
    cdef readonly uint64_t caps
    cdef readonly uint64_t quirks
    cdef readonly uint64_t memory_total
    cdef readonly uint64_t alignment
    cdef readonly uint64_t max_alloc

# Turn a plugin error into the matching Python exception (and release it). Call with the GIL.
cdef int check(const pyg_plugin_api *api, pyg_error *err, str plugin, str what) except -1

# Set an option of one stream of `dev` (ABI 1.1 stream_set_option). A plugin without the entry
# (ABI 1.0) gets it as a device option instead. Call with the GIL.
cdef int stream_set_option(Device dev, pyg_stream *s, str key, str value) except -1
