"""Quantized types of the CPU plugin (plugins/cpu/quants*.c): bit-exactness with ggml/GGUF,
round-trip error, dot products.

The kernels are compiled with tests/quants/quants_capi.c into a test library and called through
ctypes (tests/quants/qlib.py), so every path (the AVX2 kernels, the scalar reference, the
multi-row kernel) can be exercised separately. References:
- gguf (PyPI): quantize for q4_0/q4_1/q5_0/q5_1/q8_0, dequantize for every type but q8_1/q8_K;
- tests/quants/golden.json: sha256 of ggml's own reference quantizers on deterministic data
  (all types; the only byte reference for q4_K/q6_K/q8_K when ggml itself is not built here);
- ggml's reference quantizers compiled from source (tests/quants/build_oracle.sh), when built.
"""
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "quants"))
import qlib  # noqa: E402

try:
    import gguf.quants as gq
    from gguf import GGMLQuantizationType as GT
except ImportError:  # only the tests against gguf need it
    gq = GT = None
needs_gguf = pytest.mark.skipif(gq is None, reason="gguf (PyPI) not installed")

GGUF_QUANTIZES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]
GGUF_DEQUANTIZES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K"]
WEIGHT_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q8_1", "q4_K", "q5_K", "q6_K", "q8_K"]
MAIN_TYPES = ["q4_0", "q8_0", "q4_K", "q6_K"]

# Relative RMS round-trip error, rms(dequant(quant(x)) - x) / rms(x), measured on qlib's
# "normal" data (N(0,1)-like) with these kernels (= ggml, byte-identical); 3% slack on top. The values agree with
# ggml's (they are ggml's algorithms): more bits, lower error; K-quants beat their 32-block peers.
RMS_LEVELS = {"q4_0": 0.0820, "q4_1": 0.0757, "q5_0": 0.0408, "q5_1": 0.0367, "q8_0": 0.00509,
              "q8_1": 0.00509, "q4_K": 0.0691, "q5_K": 0.03484, "q6_K": 0.01706, "q8_K": 0.00627}


@pytest.fixture(scope="module")
def q(tmp_path_factory):
    if not shutil.which(os.environ.get("CC", "cc")):
        pytest.skip("no C compiler")
    return qlib.QLib(qlib.build(tmp_path_factory.mktemp("quants")))


@pytest.fixture(scope="module")
def q_scalar(q, tmp_path_factory):
    """a second copy of the library whose dispatch is forced to the scalar kernels"""
    path = str(tmp_path_factory.mktemp("quants_scalar") / "libquants_scalar.so")
    shutil.copy(q.lib._name, path)
    qs = qlib.QLib(path)
    qs.lib.tq_force_scalar(1)
    assert not qs.has_avx2()
    return qs


def gguf_type(name):
    return getattr(GT, name.upper())


def random_data(seed, n):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n).astype(np.float32)


# ---------------------------------------------------------------- bit-exact quantize

@needs_gguf
@pytest.mark.parametrize("kind", qlib.DATA_KINDS)
@pytest.mark.parametrize("name", GGUF_QUANTIZES)
def test_quantize_matches_gguf(q, name, kind):
    x = qlib.det_data(kind, 256 * 16).reshape(16, 256)
    ours = q.quantize(name, x)
    with np.errstate(over="ignore"):
        ref = gq.quantize(x, gguf_type(name))
    assert ours.shape == ref.shape
    assert np.array_equal(ours, ref), f"{name}/{kind}: first differing byte at {np.argmax(ours != ref)}"


@needs_gguf
@pytest.mark.parametrize("name", GGUF_QUANTIZES)
def test_quantize_matches_gguf_random(q, name):
    x = random_data(7, 64 * 1024).reshape(64, 1024) * np.float32(3.0)
    assert np.array_equal(q.quantize(name, x), gq.quantize(x, gguf_type(name)))


@needs_gguf
@pytest.mark.parametrize("name", ["q4_K", "q5_K", "q6_K"])
def test_quantize_kquants_vs_gguf_if_available(q, name):
    """gguf 0.19 only dequantizes the K-quants; should a version quantize them, bytes must match"""
    x = qlib.det_data("normal", 256 * 8).reshape(8, 256)
    try:
        ref = gq.quantize(x, gguf_type(name))
    except NotImplementedError:
        from importlib.metadata import version
        pytest.skip(f"gguf {version('gguf')} cannot quantize {name} (golden/oracle tests cover it)")
    assert np.array_equal(q.quantize(name, x), ref)


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_quantize_matches_ggml_golden(q, name):
    """byte identity with ggml's reference quantizers, through committed hashes"""
    with open(os.path.join(qlib.HERE, "golden.json")) as f:
        golden = json.load(f)
    for kind in qlib.DATA_KINDS:
        x = qlib.det_data(kind, golden["n"])
        got = hashlib.sha256(q.quantize(name, x).tobytes()).hexdigest()
        assert got == golden["hashes"][kind][name], f"{name} differs from ggml on '{kind}' data"


@pytest.mark.skipif(not os.path.exists(qlib.ORACLE),
                    reason="ggml oracle not built (run tests/quants/build_oracle.sh)")
@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_quantize_matches_ggml_oracle(q, name):
    """byte identity with ggml's reference quantizers compiled from source, on fresh random data"""
    oracle = qlib.Oracle()
    rng = np.random.default_rng(11)
    for scale in (1.0, 1e-3, 1e3, 40000.0):
        x = (rng.standard_normal((32, 1024)) * scale * np.exp(rng.standard_normal((32, 1)))).astype(np.float32)
        x[3] = 0.0
        x[5] = np.abs(x[5])
        x[6, :256] = 1.5
        ours, ref = q.quantize(name, x), oracle.quantize(name, x)
        assert np.array_equal(ours, ref), f"{name} scale {scale}: first diff at {np.argmax(ours != ref)}"
    x = tie_blocks()
    assert np.array_equal(q.quantize(name, x), oracle.quantize(name, x)), f"{name}: rounding ties"


def tie_blocks():
    """blocks whose scaled values land exactly on .5 ties and next to them: max-abs 127 makes
    q8_0's d = 1 and q8_K's iscale = -1 (or 1), so the quantizers round x itself"""
    vals = np.array([0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 0.49999997, -0.49999997,
                     0.50000006, 3.4999998, -3.5000002, 64.5, -64.5, 0.0], np.float32)
    rows = []
    for top in (127.0, -127.0):
        b = np.resize(vals, 256).astype(np.float32)
        b[::32] = top  # every 32-block holds the extreme
        b[100] = -top  # the same magnitude later: the first one fixes q8_K's sign
        rows.append(b)
    return np.concatenate(rows)


@pytest.mark.parametrize("name", ["q8_0", "q8_1", "q8_K"])
def test_rounding_ties(q, q_scalar, name):
    x = tie_blocks()
    ours = q.quantize(name, x)
    assert np.array_equal(ours, q_scalar.quantize(name, x))
    _, bs, ts = qlib.TYPES[name]
    qs_off = {"q8_0": 2, "q8_1": 4, "q8_K": 4}[name]
    qs = ours.reshape(-1, ts)[:, qs_off:qs_off + bs].view(np.int8).astype(np.float32).ravel()
    if name == "q8_K":  # round half to even of x * (-127 / first max) = +-x
        sign = np.repeat(np.where(x.reshape(-1, 256)[:, 0] > 0, -1.0, 1.0), 256)
        assert np.array_equal(qs, np.rint(x * sign))
    else:  # half away from zero
        assert np.array_equal(qs, np.sign(x) * np.floor(np.abs(x.astype(np.float64)) + 0.5))


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_dispatched_equals_scalar(q, q_scalar, name):
    """the SIMD table's quantize/dequantize are bit-identical to the scalar table's"""
    if not q.has_avx2():
        pytest.skip("no AVX2 on this CPU: both tables are the scalar one")
    for kind in qlib.DATA_KINDS:
        x = qlib.det_data(kind, 256 * 24)
        a, b = q.quantize(name, x), q_scalar.quantize(name, x)
        assert np.array_equal(a, b), (name, kind)
        assert np.array_equal(q.dequantize(name, a, x.size).view(np.uint32),
                              q_scalar.dequantize(name, a, x.size).view(np.uint32))


# ---------------------------------------------------------------- bit-exact dequantize

def random_blocks(name, n_blocks, seed):
    """random bytes with every f16 scale field replaced by a finite random f16"""
    _, bs, ts = qlib.TYPES[name]
    rng = np.random.default_rng(seed)
    b = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    f16_fields = {"q4_0": [0], "q4_1": [0, 2], "q5_0": [0], "q5_1": [0, 2], "q8_0": [0],
                  "q8_1": [0, 2], "q4_K": [0, 2], "q5_K": [0, 2], "q6_K": [208]}[name] if name != "q8_K" else []
    for off in f16_fields:
        v = (rng.standard_normal(n_blocks) * np.exp(rng.uniform(-8, 8, n_blocks))).astype(np.float16)
        b[:, off:off + 2] = v.view(np.uint8).reshape(n_blocks, 2)
    if name == "q8_K":
        b[:, 0:4] = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8).reshape(n_blocks, 4)
    return b


@needs_gguf
@pytest.mark.parametrize("name", GGUF_DEQUANTIZES)
def test_dequantize_matches_gguf(q, name):
    _, bs, ts = qlib.TYPES[name]
    for blocks in (random_blocks(name, 512, 3),
                   q.quantize(name, qlib.det_data("edge", 256 * 64)).reshape(-1, ts)):
        n = blocks.shape[0] * bs
        ours = q.dequantize(name, blocks, n)
        ref = gq.dequantize(blocks.reshape(1, -1), gguf_type(name)).ravel().astype(np.float32)
        assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), \
            f"{name}: first differing element {np.argmax(ours.view(np.uint32) != ref.view(np.uint32))}"


def test_dequantize_q8_1_q8_K_layout(q):
    """no gguf reference for the activation formats: check them against their definition"""
    b = random_blocks("q8_1", 64, 5)
    ours = q.dequantize("q8_1", b, 64 * 32)
    ref = b[:, 0:2].copy().view(np.float16).astype(np.float32) * b[:, 4:].view(np.int8).astype(np.float32)
    assert np.array_equal(ours, ref.ravel())
    b = random_blocks("q8_K", 16, 6)
    ours = q.dequantize("q8_K", b, 16 * 256)
    ref = b[:, 0:4].copy().view(np.float32) * b[:, 4:260].view(np.int8).astype(np.float32)
    assert np.array_equal(ours, ref.ravel())


def test_q8_K_bsums_and_q8_1_sum(q):
    x = qlib.det_data("edge", 256 * 16)
    b = q.quantize("q8_K", x).reshape(-1, 292)
    qs = b[:, 4:260].view(np.int8).astype(np.int32).reshape(-1, 16, 16)
    assert np.array_equal(b[:, 260:].copy().view(np.int16), qs.sum(axis=-1))
    assert qs.min() >= -127 and qs.max() <= 127
    b = q.quantize("q8_1", x).reshape(-1, 36)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32).ravel()
    s = b[:, 2:4].copy().view(np.float16).ravel()
    qsum = b[:, 4:].view(np.int8).astype(np.int32).sum(axis=1)
    # s = f16(sum * d) with d before its own f16 rounding (the exact bytes: golden test)
    with np.errstate(over="ignore"):
        expect = (qsum.astype(np.float32) * d).astype(np.float16)
    fin = np.isfinite(expect) & (d >= 2.0 ** -14)  # f16 subnormal d: too coarse to compare
    assert np.allclose(s[fin].astype(np.float32), expect[fin].astype(np.float32), rtol=2e-3, atol=0)
    assert not np.any(np.isnan(s))


def test_f16_conversion_matches_numpy(q):
    rng = np.random.default_rng(2)
    bits = np.concatenate([
        rng.integers(0, 2 ** 32, 200000, dtype=np.uint64).astype(np.uint32),
        # around every f16 rounding boundary: normal, subnormal, overflow
        (np.arange(0, 2 ** 16, dtype=np.uint32) << 13)[:, None].repeat(3, 1).ravel()
        + np.tile(np.array([0xfff, 0x1000, 0x1001], np.uint32), 2 ** 16),
    ])
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(q.f32_to_f16(x), ref)
    h = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)
    finite = np.isfinite(h.view(np.float16))
    assert np.array_equal(q.f16_to_f32(h)[finite], h.view(np.float16)[finite].astype(np.float32))
    assert np.all(np.isnan(q.f16_to_f32(h)[np.isnan(h.view(np.float16))]))


# ---------------------------------------------------------------- round trip

@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_roundtrip_rms(q, name):
    x = qlib.det_data("normal", 256 * 256)
    y = q.dequantize(name, q.quantize(name, x), x.size)
    rel = float(np.sqrt(np.mean((y.astype(np.float64) - x) ** 2)) / np.sqrt(np.mean(x.astype(np.float64) ** 2)))
    print(f"{name}: relative RMS round-trip error {rel:.5f}")
    assert rel <= RMS_LEVELS[name] * 1.03
    assert rel >= RMS_LEVELS[name] * 0.8, "suspiciously better than ggml's algorithm"


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_edge_blocks(q, name):
    _, bs, ts = qlib.TYPES[name]
    n = 256
    zero = np.zeros(n, np.float32)
    assert np.array_equal(q.dequantize(name, q.quantize(name, zero), n), zero)
    for c in (1.0, -2.5, 0.05, 1000.0):  # (tiny constants underflow q6_K's f16 super-scale)
        x = np.full(n, c, np.float32)
        y = q.dequantize(name, q.quantize(name, x), n)
        assert np.all(np.isfinite(y)) and np.allclose(y, c, rtol=0.02), (name, c, y[:4])
    neg = -np.abs(random_data(4, 4096))
    y = q.dequantize(name, q.quantize(name, neg), 4096)
    assert np.all(np.isfinite(y)) and np.sqrt(np.mean((y - neg) ** 2)) < 0.2


# ---------------------------------------------------------------- dot products

@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_vec_dot_type(q, name):
    assert q.vec_dot_type(name) == qlib.VEC_DOT_TYPE[name]


@pytest.mark.parametrize("n_blocks", [1, 2, 3, 5, 7, 16, 131])
@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_vec_dot(q, name, n_blocks):
    """dispatched (AVX2 where present), scalar reference and multi-row kernels against a float64
    dot of the dequantized operands (block counts that exercise the kernels' unrolled tails)"""
    vt = qlib.VEC_DOT_TYPE[name]
    n = n_blocks * qlib.TYPES[name][1]
    rng = np.random.default_rng(n)
    w = (rng.standard_normal(n) * np.exp(rng.standard_normal(n // 32).repeat(32))).astype(np.float32)
    if n_blocks == 5:  # extreme weights: all-negative and all-zero blocks
        w[: n // 5] = -np.abs(w[: n // 5])
        w[n // 5: 2 * n // 5] = 0.0
    acts = (rng.standard_normal((4, n)) * 3).astype(np.float32)
    acts[1] = np.abs(acts[1])
    acts[2, : n // 2] = 0.0
    xq = q.quantize(name, w)
    yq = q.quantize(vt, acts)
    wd = q.dequantize(name, xq, n).astype(np.float64)
    ref = np.array([wd @ q.dequantize(vt, yq[k], n).astype(np.float64) for k in range(4)])
    scale = np.array([np.abs(wd) @ np.abs(q.dequantize(vt, yq[k], n).astype(np.float64)) for k in range(4)])
    # q4_1/q5_1 use q8_1's stored s = f16(d*sum(q)) for the offset term (as ggml does): allow
    # its two f16 roundings (s itself and d) on top of float summation error
    extra = np.zeros(4)
    if vt == "q8_1":
        m = xq.reshape(-1, qlib.TYPES[name][2])[:, 2:4].copy().view(np.float16).astype(np.float64).ravel()
        sy = yq.reshape(4, -1, 36)[:, :, 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
        extra = (np.abs(m)[None, :] * np.abs(sy)).sum(axis=1) * 2.0 ** -10
    for which, label in ((0, "dispatched"), (1, "scalar"), (2, "multi")):
        got = q.vec_dot(name, xq, yq, n, which).astype(np.float64)
        err = np.abs(got - ref) / (scale + extra / 2e-6)
        assert np.all(err < 2e-6), f"{name} {label}: rel err {err}"
    single = np.array([q.vec_dot(name, xq, yq[k:k + 1], n, 2)[0] for k in range(4)])
    assert np.allclose(single, q.vec_dot(name, xq, yq, n, 2), rtol=1e-6, atol=0)


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_non_finite_inputs_are_memory_safe(q, name):
    """ggml leaves NaN/inf inputs undefined; here they must at least never crash or write
    outside the output (the bytes are unspecified)"""
    _, bs, ts = qlib.TYPES[name]
    x = random_data(8, 4 * 256)
    x[3], x[300], x[700] = np.nan, np.inf, -np.inf
    x[512:768] = np.nan
    out = np.full(4 * 256 // bs * ts + 64, 0xA5, np.uint8)
    tid = qlib.TYPES[name][0]
    assert q.lib.tq_from_f32(tid, qlib._ptr(x), qlib._ptr(out), x.size) == 0
    assert np.all(out[-64:] == 0xA5)
    y = np.full(4 * 256 + 16, 1.0, np.float32)
    assert q.lib.tq_to_f32(tid, qlib._ptr(out), qlib._ptr(y), x.size) == 0
    assert np.all(y[-16:] == 1.0)


def test_avx2_dispatch(q):
    """on this project's x86 machines the AVX2 kernels must be the ones in use"""
    import platform
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("not x86")
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    want = all(f in flags.split() for f in ("avx2", "fma", "f16c"))
    assert q.has_avx2() == want


# ---------------------------------------------------------------- invalid sizes

@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_invalid_sizes_rejected(q, name):
    """the kernels assume n % block_size == 0; the caller path (here quants_capi.c's checks, in
    the plugin the ops' shape checks) must refuse anything else"""
    _, bs, ts = qlib.TYPES[name]
    buf = np.zeros(4 * ts, np.uint8)
    for n in (bs + 1, bs - 1, 0, -bs, 3 * bs // 2):
        with pytest.raises(ValueError):
            q.dequantize(name, buf, n)
        with pytest.raises(ValueError):
            q.quantize(name, np.zeros(n if n > 0 else 1, np.float32))
        with pytest.raises(ValueError):
            q.vec_dot(name, buf, buf[None, :], n)
    with pytest.raises(ValueError):
        q.vec_dot(name, buf, np.zeros((5, 4 * ts), np.uint8), bs, which=2)  # more rows than QUANT_MULTI_MAX


# ---------------------------------------------------------------- through the real plugin
# pg.quantize / pg.dequantize run a converting CONT on the CPU plugin; mul_mat runs the plugin's
# kernels (vec_dot on activations quantized to the vec_dot_type, or its own paths for larger N).

@pytest.fixture(scope="module")
def pg():
    try:
        import pyggml
        pyggml.Scheduler(["cpu"])
    except Exception as e:  # not built (make) or no CPU plugin
        pytest.skip(f"pyggml with the CPU plugin unavailable: {e}")
    return pyggml


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_pg_quantize_matches_ggml_golden(pg, name):
    with open(os.path.join(qlib.HERE, "golden.json")) as f:
        golden = json.load(f)
    for kind in qlib.DATA_KINDS:
        x = qlib.det_data(kind, golden["n"]).reshape(-1, 512)
        b = pg.quantize(x, name)
        _, bs, ts = qlib.TYPES[name]
        assert b.shape == (x.shape[0], 512 // bs * ts) and b.dtype == np.uint8
        assert hashlib.sha256(b.tobytes()).hexdigest() == golden["hashes"][kind][name], (name, kind)


@needs_gguf
@pytest.mark.parametrize("name", GGUF_DEQUANTIZES)
def test_pg_dequantize_matches_gguf(pg, name):
    _, bs, ts = qlib.TYPES[name]
    blocks = random_blocks(name, 256, 9).reshape(16, -1)
    shape = (16, blocks.shape[1] // ts * bs)
    ours = pg.dequantize(blocks, name, shape)
    ref = gq.dequantize(blocks, gguf_type(name)).astype(np.float32)
    assert ours.shape == ref.shape
    assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("name", list(qlib.TYPES))
def test_pg_quantize_rejects_bad_rows(pg, name):
    bs = qlib.TYPES[name][1]
    with pytest.raises(pg.PyggmlError):
        pg.quantize(np.zeros((2, bs + 1), np.float32), name)
    with pytest.raises(pg.PyggmlError):
        pg.dequantize(np.zeros(64 * 1024, np.uint8), name, (2, bs + 1))


@pytest.mark.parametrize("n_rows", [1, 2, 5, 16, 37])
@pytest.mark.parametrize("name", WEIGHT_TYPES)
def test_pg_mul_mat(pg, name, n_rows):
    """mul_mat of every weight type against a float64 reference of the dequantized bytes"""
    K = 768 if qlib.TYPES[name][1] == 256 else 416
    rng = np.random.default_rng(n_rows)
    W = (rng.standard_normal((67, K)) * np.exp(rng.standard_normal((67, 1)))).astype(np.float32)
    Wq = pg.quantize(W, name)
    Wd = pg.dequantize(Wq, name, W.shape).astype(np.float64)
    X = rng.standard_normal((n_rows, K)).astype(np.float32)
    g = pg.Graph()
    y = pg.mul_mat(g.weight("w", Wq, type=name, shape=W.shape), g.input("x", X.shape))
    out = pg.Scheduler(["cpu"]).compute(y, {"x": X})
    ref = X.astype(np.float64) @ Wd.T
    assert out.shape == ref.shape and np.all(np.isfinite(out))
    nmse = float(np.sum((out - ref) ** 2) / np.sum(ref ** 2))
    assert nmse < 5e-4, f"{name} N={n_rows}: NMSE {nmse:.3g}"


def test_quantize_keeps_no_plans():
    """quantize/dequantize build one-off graphs: their scheduler must not keep a plan (and the
    arena holding the whole input) per call -- a 7b synth once grew to 32 GiB that way."""
    import pyggml as pyg
    import pyggml.quant as q
    x = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
    for _ in range(5):
        pyg.dequantize(pyg.quantize(x, "q4_0"), "q4_0", x.shape)
    assert q._scheds and all(not s._plans and not s._leaf_mem for s in q._scheds.values())
