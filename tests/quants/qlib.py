"""ctypes access to the CPU plugin's quantized-type kernels (plugins/cpu/quants*.c), compiled
together with tests/quants/quants_capi.c into a small test library; deterministic test data; and
ggml's reference quantizers (tests/quants/build/liboracle.so, built by build_oracle.sh) when present.
Used by tests/test_quants.py and bench/quant_dot.py."""
import ctypes
import glob
import os
import subprocess

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "tests", "quants")
ORACLE = os.environ.get("PYGGML_GGML_ORACLE", os.path.join(HERE, "build", "liboracle.so"))

# name: (GGUF type id, block size, block bytes)
TYPES = {
    "q4_0": (2, 32, 18), "q4_1": (3, 32, 20), "q5_0": (6, 32, 22), "q5_1": (7, 32, 24),
    "q8_0": (8, 32, 34), "q8_1": (9, 32, 36),
    "q4_K": (12, 256, 144), "q5_K": (13, 256, 176), "q6_K": (14, 256, 210), "q8_K": (15, 256, 292),
}
NAMES = {v[0]: k for k, v in TYPES.items()}
VEC_DOT_TYPE = {"q4_0": "q8_0", "q4_1": "q8_1", "q5_0": "q8_0", "q5_1": "q8_1", "q8_0": "q8_0",
                "q8_1": "q8_1", "q4_K": "q8_K", "q5_K": "q8_K", "q6_K": "q8_K", "q8_K": "q8_K"}

_P = ctypes.c_void_p
_LL = ctypes.c_longlong


def build(out_dir, opt="-O3"):
    """Compile the kernels + C API into OUT_DIR/libquants_test.so; returns the path.
    PYGGML_QUANTS_CFLAGS adds flags (e.g. "-fsanitize=undefined -fno-sanitize-recover=all")."""
    srcs = sorted(glob.glob(os.path.join(ROOT, "plugins", "cpu", "quants*.c")))
    srcs.append(os.path.join(HERE, "quants_capi.c"))
    out = os.path.join(str(out_dir), "libquants_test.so")
    cmd = [os.environ.get("CC", "cc"), "-shared", "-fPIC", opt, "-std=gnu11", "-fvisibility=hidden",
           "-Wall", "-Wextra", "-Wno-unused-parameter", "-Werror",
           "-I", os.path.join(ROOT, "include"), "-I", os.path.join(ROOT, "plugins", "cpu"),
           *os.environ.get("PYGGML_QUANTS_CFLAGS", "").split(), *srcs, "-o", out, "-lm"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


def _ptr(a):
    return a.ctypes.data_as(_P)


class QLib:
    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        lib.tq_to_f32.argtypes = [ctypes.c_int, _P, _P, _LL]
        lib.tq_from_f32.argtypes = [ctypes.c_int, _P, _P, _LL]
        lib.tq_vec_dot.argtypes = [ctypes.c_int, ctypes.c_int, _LL, _P, _P, _P, _LL, ctypes.c_int]
        lib.tq_f32_to_f16.argtypes = [_P, _P, _LL]
        lib.tq_f16_to_f32.argtypes = [_P, _P, _LL]

    def has_avx2(self):
        return bool(self.lib.tq_has_avx2())

    def vec_dot_type(self, name):
        return NAMES.get(self.lib.tq_vec_dot_type(TYPES[name][0]))

    def quantize(self, name, x):
        """f32 rows (..., K) -> uint8 (..., K/block*bytes)"""
        tid, bs, ts = TYPES[name]
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.shape[:-1] + (x.shape[-1] // bs * ts,), np.uint8)
        if self.lib.tq_from_f32(tid, _ptr(x), _ptr(out), x.size) != 0:
            raise ValueError(f"quantize {name}: rejected n={x.size}")
        return out

    def dequantize(self, name, blocks, n):
        tid, bs, ts = TYPES[name]
        blocks = np.ascontiguousarray(blocks, dtype=np.uint8)
        out = np.empty(n, np.float32)
        if self.lib.tq_to_f32(tid, _ptr(blocks), _ptr(out), n) != 0:
            raise ValueError(f"dequantize {name}: rejected n={n}")
        return out

    def vec_dot(self, name, x_row, y_rows, n, which=0):
        """dot of one weight row against ny activation rows (2-D uint8, vec_dot_type);
        which: 0 dispatched kernel, 1 scalar reference, 2 multi-row kernel"""
        y_rows = np.ascontiguousarray(np.atleast_2d(y_rows), dtype=np.uint8)
        x_row = np.ascontiguousarray(x_row, dtype=np.uint8)
        s = np.zeros(y_rows.shape[0], np.float32)
        rc = self.lib.tq_vec_dot(TYPES[name][0], which, n, _ptr(s), _ptr(x_row), _ptr(y_rows),
                                 y_rows.shape[1], y_rows.shape[0])
        if rc != 0:
            raise ValueError(f"vec_dot {name}: rejected")
        return s

    def f32_to_f16(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty(x.size, np.uint16)
        self.lib.tq_f32_to_f16(_ptr(x), _ptr(out), x.size)
        return out

    def f16_to_f32(self, h):
        h = np.ascontiguousarray(h, dtype=np.uint16)
        out = np.empty(h.size, np.float32)
        self.lib.tq_f16_to_f32(_ptr(h), _ptr(out), h.size)
        return out


class Oracle:
    """ggml's quantize_row_<type>_ref, from the library build_oracle.sh makes."""

    def __init__(self, path=ORACLE):
        self.lib = ctypes.CDLL(path)

    def quantize(self, name, x):
        tid, bs, ts = TYPES[name]
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.zeros(x.shape[:-1] + (x.shape[-1] // bs * ts,), np.uint8)
        fn = getattr(self.lib, f"quantize_row_{name}_ref")
        fn.argtypes = [_P, _P, ctypes.c_int64]
        fn(_ptr(x), _ptr(out), x.size)
        return out


# ---------------------------------------------------------------- deterministic data
# Integer hashing (splitmix64) so the data, and hence the golden hashes, do not depend on the
# numpy version's random streams or on libm.

def _uniform(seed, n):
    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53  # [0, 1), exact


def _normalish(seed, n):
    """sum of 4 uniforms, centred and scaled to unit variance"""
    u = _uniform(seed, 4 * n).reshape(4, n)
    return (u.sum(axis=0) - 2.0) * np.sqrt(3.0)


def det_data(kind, n, seed=1):
    """float32 test vectors of length n (a multiple of 256) of a given kind"""
    if kind == "normal":
        x = _normalish(seed, n)
    elif kind == "uniform":
        x = _uniform(seed, n) * 2 - 1
    elif kind == "heavy":  # lognormal-scaled magnitudes: outliers inside blocks
        x = _normalish(seed, n) * np.exp(1.5 * _normalish(seed + 101, n))
    elif kind == "negative":
        x = -np.abs(_normalish(seed, n))
    elif kind == "positive_offset":
        x = _normalish(seed, n) * 0.1 + 1.0
    elif kind == "edge":
        # per 256-block: zero, constant, negative-only, huge, tiny, sparse, ties on the grid, normal
        blocks = _normalish(seed, n).reshape(-1, 256)
        kinds = np.arange(blocks.shape[0]) % 8
        blocks[kinds == 0] = 0.0
        blocks[kinds == 1] = 0.3125
        blocks[kinds == 2] = -np.abs(blocks[kinds == 2])
        blocks[kinds == 3] *= 3e4
        blocks[kinds == 4] *= 1e-5
        sparse = blocks[kinds == 5]
        sparse[:, 1::7] = 0.0
        sparse[:, ::3] = 0.0
        blocks[kinds == 5] = sparse
        blocks[kinds == 6] = np.round(blocks[kinds == 6] * 4) / 4  # many exact ties
        x = blocks.ravel()
    else:
        raise ValueError(kind)
    return x.astype(np.float32)


DATA_KINDS = ["normal", "uniform", "heavy", "negative", "positive_offset", "edge"]
