"""The CUDA plugin (plugins/cuda): built by nvcc where nvcc exists, one exported symbol, loads and
answers NO_DEVICE cleanly on a machine without a GPU (R1, R2), its quant block decoders match the
gguf reference bit for bit (checked on the CPU), and, where a CUDA device is present, quantized
mul_mat on it matches numpy (the op suite in test_ops.py has no quantized-weight cases)."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

from _cuda import cuda_device as _cuda_device, nmse as _nmse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIB = os.path.join(ROOT, "pyggml", "plugins", "libpyggml-cuda.so")
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: the CUDA plugin is not built here")

PYG_OK, PYG_ERR_NO_DEVICE = 0, 4


def _api(lib):
    """The frozen prefix of the table, read with ctypes (no pyggml import needed)."""
    get = lib.pyg_plugin_get_api
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.c_void_p]
    addr = get(None)
    assert addr, "pyg_plugin_get_api returned NULL"
    words = (ctypes.c_uint64 * 12).from_address(addr)
    return addr, words


@needs_nvcc
def test_library_built():
    assert os.path.exists(LIB), f"{LIB} missing: run `make plugins` (nvcc is at {NVCC})"


@needs_nvcc
def test_exports_one_symbol():
    """R1: exactly pyg_plugin_get_api (cudart is static and hidden by the version script)."""
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} missing: run `make plugins`")
    out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
    names = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
    assert names == ["pyg_plugin_get_api"], names


@needs_nvcc
def test_not_linked_to_driver_or_dynamic_cudart():
    """R2: loading must not need libcuda or libcudart; they are opened at run time."""
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} missing: run `make plugins`")
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True).stdout
    needed = [ln for ln in out.splitlines() if "(NEEDED)" in ln]
    assert not any("libcuda" in ln or "libcudart" in ln for ln in needed), needed


@needs_nvcc
def test_plugin_init_answers_cleanly():
    """R2/R3/R4: the table's prefix is sane and plugin_init returns NO_DEVICE with a reason when there is
    no driver or GPU (or OK with >= 1 device where there is one) -- never a crash."""
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} missing: run `make plugins`")
    lib = ctypes.CDLL(LIB, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    addr, w = _api(lib)
    struct_size = w[0]
    abi_major, abi_minor = w[1] & 0xFFFF, (w[1] >> 16) & 0xFFFF
    assert (abi_major, abi_minor) == (1, 1)
    assert struct_size >= 8 * 12
    name = ctypes.cast(ctypes.c_void_p(w[2]), ctypes.c_char_p).value
    assert name == b"cuda"
    error_code = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(w[4])
    error_message = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(w[5])
    error_destroy = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(w[6])
    plugin_init = ctypes.CFUNCTYPE(ctypes.c_void_p)(w[7])
    device_count = ctypes.CFUNCTYPE(ctypes.c_int32)(w[8])
    err = plugin_init()
    if err:
        code, msg = error_code(err), error_message(err).decode()
        error_destroy(err)
        assert code == PYG_ERR_NO_DEVICE, (code, msg)
        assert msg.startswith("cuda: ") and len(msg) > 10, msg
        assert device_count() == 0
        err2 = plugin_init()   # a second call gives the same answer
        assert err2 and error_code(err2) == PYG_ERR_NO_DEVICE
        error_destroy(err2)
    else:
        assert device_count() >= 1
    error_destroy(None)        # R6


@needs_nvcc
def test_loader_lists_cuda_with_reason():
    """Through pyggml's own loader: the plugin loads; without a GPU it is unavailable with the reason."""
    pg = pytest.importorskip("pyggml")
    if not os.path.exists(LIB):
        pytest.fail(f"{LIB} missing: run `make plugins`")
    p = pg.load_plugin(LIB)
    assert p.name == "cuda"
    if not p.available:
        assert p.unavailable_reason and p.unavailable_reason.startswith("cuda: "), p.unavailable_reason
        assert not p.devices
    else:
        assert len(p.devices) >= 1


# ---------------------------------------------------------------- block layouts, on the CPU

_QUANTS = [("q4_0", 2, 18, [0]), ("q4_1", 3, 20, [0, 2]), ("q8_0", 8, 34, [0]), ("q4_K", 12, 144, [0, 2]), ("q6_K", 14, 210, [208])]


@pytest.fixture(scope="module")
def dequant_host(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc not found")
    d = tmp_path_factory.mktemp("cuda_host")
    exe = str(d / "dequant_host")
    r = subprocess.run([NVCC, "-std=c++17", "-I", os.path.join(ROOT, "include"), "-I",
                        os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(ROOT, "plugins", "cuda", "test", "dequant_host.cu")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _random_blocks(rng, nblocks, size, d_offsets):
    b = rng.integers(0, 256, (nblocks, size), dtype=np.uint8)
    for off in d_offsets:   # keep the f16 scales finite
        b[:, off:off + 2] = (rng.standard_normal(nblocks) * 0.01).astype(np.float16).view(np.uint8).reshape(nblocks, 2)
    return b


@needs_nvcc
@pytest.mark.parametrize("name,type_id,size,d_offsets", _QUANTS, ids=[q[0] for q in _QUANTS])
def test_block_decoders_match_gguf(dequant_host, tmp_path, name, type_id, size, d_offsets):
    """dequant_one and the mat-vec unit decoders of the CUDA plugin against the gguf package."""
    gguf_quants = pytest.importorskip("gguf.quants")
    from gguf import GGMLQuantizationType
    rng = np.random.default_rng(type_id)
    blocks = _random_blocks(rng, 64, size, d_offsets)
    ref = gguf_quants.dequantize(blocks, getattr(GGMLQuantizationType, name.upper())).reshape(-1)
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    blocks.tofile(src)
    r = subprocess.run([dequant_host, str(type_id), str(src), str(dst)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = np.fromfile(dst, dtype=np.float32)
    np.testing.assert_array_equal(out, ref.astype(np.float32))


# ---------------------------------------------------------------- on a CUDA device



@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q8_0", "q4_K", "q6_K"])
@pytest.mark.parametrize("n", [1, 3, 8, 17, 37, 100])
def test_quant_mul_mat_on_cuda(qtype, n):
    """int8 mat-vec (n <= 8), FFMA GEMM (8 < n < 32) and tensor-core GEMM (n >= 32) on quantized
    weights, against numpy on the dequantized ones."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(n)
    M, K = 48, 512
    wf = rng.standard_normal((M, K)).astype(np.float32)
    blocks = pg.quantize(wf, qtype)
    wd = pg.dequantize(blocks, qtype, (M, K)).astype(np.float64)
    x = rng.standard_normal((2, n, K)).astype(np.float32)
    g = pg.Graph()
    w = g.weight("w", blocks, type=qtype, shape=(M, K))
    xi = g.input("x", x.shape, pg.f32)
    out = pg.Scheduler([dev]).compute(pg.mul_mat(w, xi), {"x": x})
    ref = np.einsum("bnk,mk->bnm", x.astype(np.float64), wd)
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


def _bf16_bits(a):
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16))


@pytest.mark.parametrize("wtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("k", [67, 256])
@pytest.mark.parametrize("n", [1, 5, 40, 100])
def test_plain_mul_mat_on_cuda(wtype, k, n):
    """Plain weights through the float mat-vec (16-byte and scalar loads), FFMA and tensor-core GEMM."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(k + n)
    M = 70
    wf = rng.standard_normal((M, k)).astype(np.float32)
    g = pg.Graph()
    if wtype == "bf16":
        bits = _bf16_bits(wf)
        w = g.weight("w", bits, type="bf16", shape=(M, k))
        wd = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    else:
        wv = wf.astype(np.float16) if wtype == "f16" else wf
        w = g.weight("w", wv)
        wd = wv.astype(np.float64)
    x = rng.standard_normal((n, k)).astype(np.float32)
    xi = g.input("x", x.shape, pg.f32)
    out = pg.Scheduler([dev]).compute(pg.mul_mat(w, xi), {"x": x})
    ref = x.astype(np.float64) @ wd.T
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


def test_cuda_graph_replay_matches():
    """The same plan computed 4 times (direct, capture, replay, replay) with new inputs each time."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(7)
    g = pg.Graph()
    w = g.weight("w", rng.standard_normal((64, 256)).astype(np.float32))
    x = g.input("x", (2, 256), pg.f32)
    y = pg.silu(pg.mul_mat(w, pg.rms_norm(x, eps=1e-5)))
    s = pg.Scheduler([dev])
    cpu = pg.Scheduler(["cpu"])
    for i in range(4):
        xv = rng.standard_normal((2, 256)).astype(np.float32)
        out, ref = s.compute(y, {"x": xv}), cpu.compute(y, {"x": xv})
        assert _nmse(out, ref) < 1e-6, f"compute #{i + 1}"


# Paths the op suite does not reach: the kv-split flash attention of long-context decode, head size
# 256, quantized get_rows / cont (dequantizing), cpy between shapes, set_rows into bf16.

def _run(pg, dev, outs, feeds):
    return pg.Scheduler([dev]).compute(outs, feeds)


@pytest.mark.parametrize("n_kv,D,H,Hk,n_q,kvt", [(1000, 128, 8, 2, 1, "f16"), (50, 256, 4, 2, 3, "f32"),
                                                 (4096, 64, 4, 4, 1, "f16")])
def test_flash_attn_paths_on_cuda(n_kv, D, H, Hk, n_q, kvt):
    pg, dev = _cuda_device()
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(n_kv + D)
    npt = np.float16 if kvt == "f16" else np.float32
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(npt)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(npt)
    mv = np.zeros((1, 1, (n_q + 7) // 8 * 8, n_kv), np.float32)
    mv[rng.random(mv.shape) < 0.3] = -np.inf
    mv[..., 0] = 0.0
    mv = mv.astype(np.float16)
    g = pg.Graph()
    q, k, v, m = (g.input(n, a.shape, pg.dtype(a.dtype)) for n, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    scale = 1.0 / np.sqrt(D)
    y = pg.flash_attn_ext(q, k, v, m, scale=scale)
    out = _run(pg, dev, y, {"q": qv, "k": kv, "v": vv, "m": mv})
    ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64), mv.astype(np.float64),
                       scale, 0.0, 0.0)
    assert _nmse(out, ref) < 5e-4


@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q8_0", "q4_K", "q6_K"])
def test_quant_get_rows_and_cont_on_cuda(qtype):
    pg, dev = _cuda_device()
    rng = np.random.default_rng(3)
    rows, K = 20, 512
    blocks = pg.quantize(rng.standard_normal((rows, K)).astype(np.float32), qtype)
    ref = pg.dequantize(blocks, qtype, (rows, K)).astype(np.float64)
    idx = np.array([3, 0, 19, 7, 7, 12, 1], np.int32)
    g = pg.Graph()
    w = g.weight("w", blocks, type=qtype, shape=(rows, K))
    i = g.input("i", idx.shape, pg.i32)
    got_rows, got_all = _run(pg, dev, [pg.get_rows(w, i), pg.cont(w, pg.f32)], {"i": idx})
    assert _nmse(got_rows, ref[idx]) < 1e-12
    assert _nmse(got_all, ref) < 1e-12


def test_cpy_between_shapes_and_set_rows_bf16_on_cuda():
    pg, dev = _cuda_device()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 35)).astype(np.float32)
    r = rng.standard_normal((3, 16)).astype(np.float32)
    idx = np.array([4, 0, 2], np.int64)
    g = pg.Graph()
    xi = g.input("x", x.shape, pg.f32)
    st = g.state("s", (35, 6), pg.f16)
    kv = g.state("kv", (5, 16), pg.bf16)
    ri = g.input("r", r.shape, pg.f32)
    ii = g.input("i", idx.shape, pg.i64)
    a = pg.cpy(xi, st)
    b = pg.cont(pg.set_rows(kv, ri, ii), pg.f32)
    out_a, out_b = _run(pg, dev, [pg.cont(a, pg.f32), b], {"x": x, "r": r, "i": idx})
    assert np.array_equal(out_a, x.reshape(35, 6).astype(np.float16).astype(np.float32))
    ref_b = np.zeros((5, 16), np.float32)
    ref_b[idx] = (_bf16_bits(r).astype(np.uint32) << 16).view(np.float32)
    assert np.array_equal(out_b, ref_b)


@pytest.mark.parametrize("qtype", ["q4_0", "q4_1", "q8_0", "q4_K", "q6_K"])
def test_grouped_decode_mat_vecs_on_cuda(qtype):
    """Mat-vecs over one activation column (a layer's q/k/v, gate/up) run as one launch with the
    column quantized once (device option fuse); every output must match its own weights, including
    row counts that leave a block half full, and a consumer that reads all of them."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(11)
    K, Ms = 512, (96, 30, 30, 64, 7)
    x = rng.standard_normal((1, K)).astype(np.float32)
    g = pg.Graph()
    xi = g.input("x", x.shape, pg.f32)
    outs, refs = [], []
    for i, M in enumerate(Ms):
        blocks = pg.quantize(rng.standard_normal((M, K)).astype(np.float32), qtype)
        wd = pg.dequantize(blocks, qtype, (M, K)).astype(np.float64)
        outs.append(pg.mul_mat(g.weight(f"w{i}", blocks, type=qtype, shape=(M, K)), xi))
        refs.append(x.astype(np.float64) @ wd.T)
    s = pg.Scheduler([dev])
    for _ in range(3):                              # direct launches, capture, replay
        got = s.compute(outs, {"x": x})
        for o, r in zip(got, refs):
            assert o.shape == r.shape and np.all(np.isfinite(o))
            assert _nmse(o, r) < 5e-4


@pytest.mark.parametrize("rows", [1, 5, 300])
def test_fused_rms_norm_times_weight_on_cuda(rows):
    """rms_norm followed by mul(norm, weight row) runs as one kernel; both the product and the norm
    itself (a second consumer) must come out right."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(rows)
    n = 2048
    x = rng.standard_normal((rows, n)).astype(np.float32)
    wv = rng.standard_normal(n).astype(np.float32)
    g = pg.Graph()
    xi = g.input("x", x.shape, pg.f32)
    nrm = pg.rms_norm(xi, eps=1e-5)
    y = pg.mul(nrm, g.weight("w", wv))
    z = pg.add(nrm, xi)
    s = pg.Scheduler([dev])
    x64 = x.astype(np.float64)
    ref_n = x64 / np.sqrt(np.mean(x64 ** 2, axis=-1, keepdims=True) + 1e-5)
    for _ in range(3):
        got_y, got_z = s.compute([y, z], {"x": x})
        assert _nmse(got_y, ref_n * wv) < 1e-7
        assert _nmse(got_z, ref_n + x64) < 1e-7


@pytest.mark.parametrize("rows", [1, 7, 300])
def test_fused_add_rms_norm_times_weight_on_cuda(rows):
    """add -> rms_norm -> mul(norm, weight row) (a residual add and the next norm) runs as one
    kernel; the sum (used again later, as the residual is), the norm and the product must all be
    right, also when the graph is replayed."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(rows + 1)
    n = 2048
    x = rng.standard_normal((rows, n)).astype(np.float32)
    y = rng.standard_normal((rows, n)).astype(np.float32)
    wv = rng.standard_normal(n).astype(np.float32)
    g = pg.Graph()
    xi, yi = g.input("x", x.shape, pg.f32), g.input("y", y.shape, pg.f32)
    s_ = pg.add(xi, pg.silu(yi))                    # the addend is a fresh node, as a mat-vec's output is
    nrm = pg.rms_norm(s_, eps=1e-5)
    h = pg.mul(nrm, g.weight("w", wv))
    later = pg.add(s_, pg.scale(h, 0.5))            # the sum lives on, as the residual stream does
    sched = pg.Scheduler([dev])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    ref_s = x64 + y64 / (1 + np.exp(-y64))
    ref_n = ref_s / np.sqrt(np.mean(ref_s ** 2, axis=-1, keepdims=True) + 1e-5)
    for _ in range(3):
        got_h, got_l, got_n = sched.compute([h, later, nrm], {"x": x, "y": y})
        assert _nmse(got_h, ref_n * wv) < 1e-7
        assert _nmse(got_n, ref_n) < 1e-7
        assert _nmse(got_l, ref_s + 0.5 * ref_n * wv) < 1e-7


@pytest.mark.parametrize("spread", [8, 4, 1])
@pytest.mark.parametrize("n", [512, 2048])
@pytest.mark.parametrize("qtype", ["q4_0", "q4_K", "q6_K"])
def test_prequantized_decode_activations_on_cuda(qtype, n, spread):
    """A decode layer's shape: add -> rms_norm -> mul feeds a group of mat-vecs, and swiglu feeds
    the down mat-vec; the norm and the swiglu launches also write their row as the int8 activation
    blocks the next mat-vec reads (plan-time fusion). Every output, including the rows the fused
    launches write as floats, must match a float64 reference, also on capture and replay. spread:
    glu_spread (K 512 and 2048: the gate/up launch's row groups over up to 8 or 4 warps per K slice, or 1)."""
    pg, dev = _cuda_device()
    pg.get_device(dev).set_option("glu_spread", str(spread))
    try:
        _prequantized_decode_activations(pg, dev, qtype, n)
    finally:
        pg.get_device(dev).set_option("glu_spread", "4")


def _prequantized_decode_activations(pg, dev, qtype, n):
    rng = np.random.default_rng(21)
    f = 768
    x = rng.standard_normal((1, n)).astype(np.float32)
    y = rng.standard_normal((1, n)).astype(np.float32)
    wv = rng.standard_normal(n).astype(np.float32)
    g = pg.Graph()
    xi, yi = g.input("x", x.shape, pg.f32), g.input("y", y.shape, pg.f32)
    s_ = pg.add(xi, pg.silu(yi))
    h = pg.mul(pg.rms_norm(s_, eps=1e-5), g.weight("w", wv))

    def weight(name, rows, cols):
        blocks = pg.quantize((rng.standard_normal((rows, cols)) * 0.5).astype(np.float32), qtype)
        return g.weight(name, blocks, type=qtype, shape=(rows, cols)), pg.dequantize(blocks, qtype, (rows, cols))

    (wq, dq), (wg, dg), (wu, du), (wd, dd) = weight("q", n, n), weight("g", f, n), weight("u", f, n), weight("d", n, f)
    q = pg.mul_mat(wq, h)
    sw = pg.swiglu(pg.mul_mat(wg, h), pg.mul_mat(wu, h))
    down = pg.mul_mat(wd, sw)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    rs = x64 + y64 / (1 + np.exp(-y64))
    rh = rs / np.sqrt(np.mean(rs ** 2, axis=-1, keepdims=True) + 1e-5) * wv
    gg, uu = rh @ dg.T.astype(np.float64), rh @ du.T.astype(np.float64)
    rsw = gg / (1 + np.exp(-gg)) * uu
    sched = pg.Scheduler([dev])
    for _ in range(3):                              # direct launches, capture, replay
        got_h, got_q, got_sw, got_d = sched.compute([h, q, sw, down], {"x": x, "y": y})
        assert _nmse(got_h, rh) < 1e-7
        assert _nmse(got_q, rh @ dq.T.astype(np.float64)) < 5e-4
        assert _nmse(got_sw, rsw) < 5e-4
        assert _nmse(got_d, rsw @ dd.T.astype(np.float64)) < 5e-4


@pytest.mark.parametrize("order", ["pairs", "rope_store"])
@pytest.mark.parametrize("mode", ["normal", "neox"])
def test_paired_ropes_and_cache_writes_on_cuda(mode, order):
    """order=pairs: a layer's q and k ropes (same parameters and positions) run as one launch, and
    so do its K and V cache writes. order=rope_store: the k rope comes right before the writes, and
    the rope stores its rows into the K cache itself in the launch that also writes V. Each must
    give what the CPU plugin gives for the same graph, also on replay."""
    pg, dev = _cuda_device()
    rng = np.random.default_rng(3)
    T, H, Hk, D, n_ctx = 3, 4, 2, 16, 8
    mode_id = pg.ROPE_NEOX if mode == "neox" else pg.ROPE_NORMAL
    q = rng.standard_normal((T, H * D)).astype(np.float32)
    k = rng.standard_normal((T, Hk * D)).astype(np.float32)
    v = rng.standard_normal((T, Hk * D)).astype(np.float32)
    pos = np.array([5, 6, 7], np.int32)
    idx = np.array([2, 7, 4], np.int64)

    def build():
        g = pg.Graph()
        qi, ki, vi = g.input("q", q.shape, pg.f32), g.input("k", k.shape, pg.f32), g.input("v", v.shape, pg.f32)
        pi, ii = g.input("pos", pos.shape, pg.i32), g.input("idx", idx.shape, pg.i64)
        kc, vc = g.state("kc", (n_ctx, Hk * D), pg.f16), g.state("vc", (n_ctx, Hk * D), pg.f16)
        qsc, ksc = pg.scale(qi, 1.5), pg.scale(ki, 0.5)   # kept as outputs: the pair may not land on them
        if order == "pairs":
            qr = pg.rope(pg.reshape(qsc, (T, H, D)), pi, mode=mode_id)
        kr = pg.rope(pg.reshape(ksc, (T, Hk, D)), pi, mode=mode_id)
        ks = pg.set_rows(kc, pg.reshape(kr, (T, Hk * D)), ii)
        vs = pg.set_rows(vc, vi, ii)
        if order != "pairs":
            qr = pg.rope(pg.reshape(qsc, (T, H, D)), pi, mode=mode_id)
        return [qr, kr, pg.cont(ks, pg.f32), pg.cont(vs, pg.f32), qsc, ksc]

    feeds = {"q": q, "k": k, "v": v, "pos": pos, "idx": idx}
    cpu = [d for d in pg.devices() if str(d).startswith("cpu")][0]
    want = pg.Scheduler([cpu]).compute(build(), feeds)
    sched = pg.Scheduler([dev])
    outs = build()
    for _ in range(3):
        got = sched.compute(outs, feeds)
        for gv, wv in zip(got, want):
            assert gv.shape == wv.shape
            assert _nmse(gv, wv) < 1e-10


@pytest.mark.parametrize("n_q,n_kv,D,H,Hk,mask_kind,max_bias,softcap", [
    (16, 64, 64, 4, 4, "causal", 0.0, 0.0),       # one block, one tile
    (77, 200, 128, 8, 2, "causal", 0.0, 0.0),     # partial query block and kv tile, grouped query
    (512, 640, 128, 4, 1, "causal", 0.0, 0.0),    # a prefill over a larger cache (masked tail skipped)
    (64, 100, 64, 4, 2, "random", 0.0, 0.0),      # holes, and rows with every key masked
    (40, 96, 64, 8, 8, "random", 8.0, 0.0),       # ALiBi slopes
    (33, 70, 128, 2, 2, "none", 0.0, 30.0),       # no mask, softcap
])
def test_flash_attn_prefill_tensor_cores_on_cuda(n_q, n_kv, D, H, Hk, mask_kind, max_bias, softcap):
    """flash_attn_ext with 16 or more queries, f16 K/V and D in {64, 128} runs the tensor-core kernel
    (flash_attn_mma.cu): causal and random masks (with fully masked rows, which give zeros), the
    masked-tile skip, grouped-query heads, ALiBi, softcap, partial tiles, against float64."""
    pg, dev = _cuda_device()
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(n_q * 7 + n_kv)
    qv = rng.standard_normal((1, H, n_q, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    scale = 1.0 / np.sqrt(D)
    feeds = {"q": qv, "k": kv, "v": vv}
    g = pg.Graph()
    q, k, v = (g.input(nm, a.shape, pg.dtype(a.dtype)) for nm, a in (("q", qv), ("k", kv), ("v", vv)))
    m, mref = None, None
    if mask_kind != "none":
        mv = np.zeros((1, 1, (n_q + 7) // 8 * 8, n_kv), np.float32)
        if mask_kind == "causal":
            off = n_kv - n_q - 40 if n_kv > n_q + 40 else n_kv - n_q   # cache cells past the prompt stay masked
            for i in range(mv.shape[2]):
                mv[0, 0, i, off + i + 1:] = -np.inf
        else:
            mv[rng.random(mv.shape) < 0.4] = -np.inf
            mv[0, 0, 3, :] = -np.inf                                    # a row with nothing to attend to
            mv[mv == 0] = rng.standard_normal(int((mv == 0).sum())) * 0.5
        mv = mv.astype(np.float16)
        m = g.input("m", mv.shape, pg.f16)
        feeds["m"] = mv
        mref = mv.astype(np.float64)
    y = pg.flash_attn_ext(q, k, v, m, scale=scale, max_bias=max_bias, logit_softcap=softcap)
    out = _run(pg, dev, y, feeds)
    with np.errstate(invalid="ignore"):
        ref = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64), mref, scale, max_bias,
                           softcap)
    ref = np.nan_to_num(ref, nan=0.0)               # a row with every key masked gives zeros (the library's rule)
    assert np.all(np.isfinite(out))
    assert _nmse(out, ref) < 5e-4


@pytest.mark.parametrize("qtype", ["q4_0", "q4_K"])
def test_attention_output_prequantized_for_its_projection_on_cuda(qtype):
    """Decode attention whose kv splits a second kernel merges, then the output projection: the merge
    also writes the attention row as the projection's int8 activations (plan-time fusion; they lie
    past the split partials in the scratch). Both outputs against float64, also on replay."""
    pg, dev = _cuda_device()
    from pyggml.conformance import reference as R
    rng = np.random.default_rng(8)
    H, Hk, D, n_kv, M = 8, 2, 64, 512, 96
    qv = rng.standard_normal((1, H, 1, D)).astype(np.float32)
    kv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    vv = rng.standard_normal((1, Hk, n_kv, D)).astype(np.float16)
    mv = np.zeros((1, 1, 8, n_kv), np.float32)
    mv[..., 300:] = -np.inf                         # the unfilled part of a cache
    mv = mv.astype(np.float16)
    blocks = pg.quantize((rng.standard_normal((M, H * D)) * 0.5).astype(np.float32), qtype)
    wd = pg.dequantize(blocks, qtype, (M, H * D)).astype(np.float64)
    g = pg.Graph()
    q, k, v, m = (g.input(nm, a.shape, pg.dtype(a.dtype)) for nm, a in (("q", qv), ("k", kv), ("v", vv), ("m", mv)))
    o = pg.flash_attn_ext(q, k, v, m, scale=0.125)
    y = pg.mul_mat(g.weight("w", blocks, type=qtype, shape=(M, H * D)), pg.reshape(o, (1, H * D)))
    ref_o = R.flash_attn(qv.astype(np.float64), kv.astype(np.float64), vv.astype(np.float64), mv.astype(np.float64),
                         0.125, 0.0, 0.0)
    ref_y = ref_o.reshape(1, H * D) @ wd.T
    sched = pg.Scheduler([dev])
    for _ in range(3):                              # direct launches, capture, replay
        got_o, got_y = sched.compute([o, y], {"q": qv, "k": kv, "v": vv, "m": mv})
        assert _nmse(got_o, ref_o) < 5e-4
        assert _nmse(got_y, ref_y) < 5e-4
