"""Conformance cases. Each case builds a small graph on random data (a fresh generator per run)
and gives float64 references; `nc` variants feed operands through transposed views so kernels see
non-contiguous strides. Sizes are odd on purpose (7, 33, 67 ...)."""
import math

import numpy as np

import pyggml as pg
from . import reference as R

NMSE_DEFAULT = 1e-7
NMSE_MATMUL = 5e-4


def nmse(out, ref):
    """Normalised mean squared error in float64; NaN or inf anywhere fails (returns inf)."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if out.shape != ref.shape:
        raise AssertionError(f"shape {out.shape} != reference {ref.shape}")
    if not np.all(np.isfinite(out)):
        return math.inf
    den = float(np.sum(ref * ref))
    num = float(np.sum((out - ref) ** 2))
    return num / den if den > 0 else num


class Case:
    def __init__(self, name, op, build, thr=NMSE_DEFAULT, exact=False):
        self.name = name
        self.op = op
        self.build = build      # build(rng) -> (outputs, feeds, refs)
        self.thr = thr
        self.exact = exact      # integer outputs: must be equal

    def __repr__(self):
        return f"Case({self.name})"


_NP = {"f32": np.float32, "f16": np.float16}


def _rand(rng, shape, dt="f32", scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(_NP[dt])


def _input(g, name, value, nc=False):
    """An input holding `value` (numpy); with nc, fed transposed and viewed back (non-contiguous)."""
    t = pg.dtype(value.dtype)
    if nc and value.ndim >= 2:
        feed = np.ascontiguousarray(np.swapaxes(value, -1, -2))
        x = g.input(name, feed.shape, t)
        return pg.transpose(x), {name: feed}
    return g.input(name, value.shape, t), {name: value}


def _f64(a):
    return np.asarray(a, dtype=np.float64)


CASES = []


def case(name, op, thr=NMSE_DEFAULT, exact=False):
    def deco(fn):
        CASES.append(Case(name, op, fn, thr, exact))
        return fn
    return deco


# ---------------------------------------------------------------- elementwise

def _binary_cases():
    shapes = [((7, 33), (7, 33)), ((3, 5, 33), (1, 1, 33)), ((4, 6, 9), (4, 1, 9)), ((2, 3, 4, 5), (2, 1, 4, 1))]
    for opname, fn, ref in (("add", pg.add, np.add), ("mul", pg.mul, np.multiply)):
        for sa, sb in shapes:
            for dt in ("f32", "f16"):
                for nc in (False, True):
                    def build(rng, sa=sa, sb=sb, dt=dt, nc=nc, fn=fn, ref=ref):
                        g = pg.Graph()
                        a, fa = _input(g, "a", _rand(rng, sa, dt), nc)
                        b, fb = _input(g, "b", _rand(rng, sb, "f32"), False)
                        return [fn(a, b)], {**fa, **fb}, [ref(_f64(_arr(fa, "a", nc)), _f64(fb["b"]))]
                    CASES.append(Case(f"{opname}-{dt}-{'x'.join(map(str, sa))}+{'x'.join(map(str, sb))}{'-nc' if nc else ''}",
                                      opname, build, 1e-6 if dt == "f16" else NMSE_DEFAULT))


def _arr(feeds, name, nc):
    a = feeds[name]
    return np.swapaxes(a, -1, -2) if nc and a.ndim >= 2 else a


_binary_cases()


def _unary_cases():
    table = [("silu", pg.silu, R.silu), ("gelu", pg.gelu, R.gelu)]
    for opname, fn, ref in table:
        for dt in ("f32", "f16"):
            for nc in (False, True):
                def build(rng, fn=fn, ref=ref, dt=dt, nc=nc):
                    g = pg.Graph()
                    a, fa = _input(g, "a", _rand(rng, (6, 35), dt, 3.0), nc)
                    return [fn(a)], fa, [ref(_f64(_arr(fa, "a", nc)))]
                CASES.append(Case(f"{opname}-{dt}{'-nc' if nc else ''}", opname, build,
                                  1e-5 if dt == "f16" else NMSE_DEFAULT))

    for nc in (False, True):
        def build(rng, nc=nc):
            g = pg.Graph()
            a, fa = _input(g, "a", _rand(rng, (5, 17)), nc)
            return [pg.scale(a, 0.7, 0.3)], fa, [_f64(_arr(fa, "a", nc)) * 0.7 + 0.3]
        CASES.append(Case(f"scale{'-nc' if nc else ''}", "scale", build))


_unary_cases()


@case("swiglu-split", "swiglu")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (5, 38), "f32", 2.0))
    v = _f64(f["x"])
    return [pg.swiglu(x)], f, [R.silu(v[:, :19]) * v[:, 19:]]


@case("swiglu-split-swapped", "swiglu")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (3, 2, 22), "f32", 2.0))
    v = _f64(f["x"])
    return [pg.swiglu(x, swapped=True)], f, [R.silu(v[..., 11:]) * v[..., :11]]


for _nc in (False, True):
    def _b(rng, nc=_nc):
        g = pg.Graph()
        a, fa = _input(g, "a", _rand(rng, (7, 19), "f32", 2.0), nc)
        b, fb = _input(g, "b", _rand(rng, (7, 19)), nc)
        return [pg.swiglu(a, b)], {**fa, **fb}, [R.silu(_f64(_arr(fa, "a", nc))) * _f64(_arr(fb, "b", nc))]
    CASES.append(Case(f"swiglu-pair{'-nc' if _nc else ''}", "swiglu", _b))


# ---------------------------------------------------------------- row-wise

for _op, _fn, _ref in (("rms_norm", pg.rms_norm, R.rms_norm), ("norm", pg.norm, R.norm)):
    for _shape in ((9, 67), (2, 3, 128), (1, 4096)):
        for _nc in (False, True):
            if _nc and _shape[-2] == 1:
                continue
            def _b(rng, fn=_fn, ref=_ref, shape=_shape, nc=_nc):
                g = pg.Graph()
                a, fa = _input(g, "a", _rand(rng, shape, "f32", 3.0) + 0.5, nc)
                return [fn(a, eps=1e-5)], fa, [ref(_f64(_arr(fa, "a", nc)), 1e-5)]
            CASES.append(Case(f"{_op}-{'x'.join(map(str, _shape))}{'-nc' if _nc else ''}", _op, _b))


def _mask(rng, shape, dt="f32"):
    m = np.zeros(shape, np.float32)
    m[rng.random(shape) < 0.2] = -np.inf
    m[..., 0] = 0.0          # every row keeps one finite entry
    m += (rng.standard_normal(shape) * 0.1).astype(np.float32) * np.isfinite(m)
    return m.astype(_NP[dt])


for _mdt in (None, "f32", "f16"):
    for _bias in (0.0, 8.0):
        for _nc in (False, True):
            if _mdt is None and _bias:
                continue
            def _b(rng, mdt=_mdt, bias=_bias, nc=_nc):
                g = pg.Graph()
                a, fa = _input(g, "a", _rand(rng, (3, 4, 7, 33), "f32", 2.0), nc)
                feeds = dict(fa)
                mask = None
                mv = None
                if mdt:
                    mv = _mask(rng, (1, 1, 8, 33), mdt)
                    mask, fm = _input(g, "m", mv)
                    feeds.update(fm)
                y = pg.soft_max(a, mask, scale=0.5, max_bias=bias)
                return [y], feeds, [R.soft_max(_f64(_arr(fa, "a", nc)), None if mv is None else _f64(mv), 0.5, bias)]
            CASES.append(Case(f"soft_max-mask{_mdt}-bias{_bias:g}{'-nc' if _nc else ''}", "soft_max", _b))


def _rope_case(name, mode, n_dims=16, freq_scale=1.0, ext=0.0, attn=1.0, ff=False, dt="f32", nc=False):
    def build(rng):
        g = pg.Graph()
        x, fx = _input(g, "x", _rand(rng, (5, 3, 16), dt), False)
        if nc:   # a permuted view: tokens and heads swapped in memory
            raw = g.input("xt", (3, 5, 16), pg.dtype(dt))
            fx = {"xt": np.ascontiguousarray(fx["x"].transpose(1, 0, 2))}
            x = pg.permute(raw, (1, 0, 2))
        pos_v = rng.integers(0, 200, 5).astype(np.int32)
        pos, fp = _input(g, "pos", pos_v)
        ffv = None
        freq = None
        feeds = {**fx, **fp}
        if ff:
            ffv = (1.0 + rng.random(n_dims // 2) * 3).astype(np.float32)
            freq, ffd = _input(g, "ff", ffv)
            feeds.update(ffd)
        y = pg.rope(x, pos, n_dims=n_dims, mode=mode, freq_base=10000.0, freq_scale=freq_scale,
                    ext_factor=ext, attn_factor=attn, beta_fast=32.0, beta_slow=1.0, n_ctx_orig=64,
                    freq_factors=freq)
        xv = fx["x"] if not nc else fx["xt"].transpose(1, 0, 2)
        ref = R.rope(_f64(xv), pos_v, n_dims, mode, 10000.0, freq_scale, ext, attn, 32.0, 1.0, 64,
                     None if ffv is None else _f64(ffv))
        return [y], feeds, [ref]
    CASES.append(Case(name, "rope", build, 1e-6 if dt == "f16" else NMSE_DEFAULT))


for _mode, _mn in ((0, "normal"), (2, "neox")):
    _rope_case(f"rope-{_mn}", _mode)
    _rope_case(f"rope-{_mn}-partial", _mode, n_dims=8)
    _rope_case(f"rope-{_mn}-scaled", _mode, freq_scale=0.5, attn=1.3)
    _rope_case(f"rope-{_mn}-yarn", _mode, freq_scale=0.25, ext=1.0)
    _rope_case(f"rope-{_mn}-freqfactors", _mode, ff=True)
    _rope_case(f"rope-{_mn}-f16", _mode, dt="f16")
    _rope_case(f"rope-{_mn}-nc", _mode, nc=True)


@case("argmax", "argmax", exact=True)
def _(rng):
    g = pg.Graph()
    a, f = _input(g, "a", _rand(rng, (7, 37)))
    return [pg.argmax(a)], f, [np.argmax(f["a"], axis=-1).astype(np.int32)]


# ---------------------------------------------------------------- matrix

def _mm_case(name, wshape, xshape, wdt="f32", nc_x=False, nc_w=False):
    def build(rng):
        g = pg.Graph()
        wv = _rand(rng, wshape, wdt)
        if nc_w:
            wt = g.weight("wt", np.ascontiguousarray(np.swapaxes(wv, -1, -2)))
            w = pg.transpose(wt)
        else:
            w = g.weight("w", wv)
        x, fx = _input(g, "x", _rand(rng, xshape), nc_x)
        xv = _f64(_arr(fx, "x", nc_x))
        w64 = _f64(wv)
        # broadcast w over x's outer axes
        wb = w64.reshape((1,) * (4 - w64.ndim) + w64.shape)
        xb = xv.reshape((1,) * (4 - xv.ndim) + xv.shape)
        wb = np.repeat(np.repeat(wb, xb.shape[0] // wb.shape[0], axis=0), xb.shape[1] // wb.shape[1], axis=1)
        ref = np.einsum("abnk,abmk->abnm", xb, wb)
        outshape = xv.shape[:-1] + (wv.shape[-2],)
        return [pg.mul_mat(w, x)], fx, [ref.reshape(outshape)]
    CASES.append(Case(name, "mul_mat", build, NMSE_MATMUL))


_mm_case("mul_mat-f32-vec", (13, 67), (1, 67))
_mm_case("mul_mat-f32-small", (13, 67), (5, 67))
_mm_case("mul_mat-f32-gemm", (96, 256), (40, 256))
_mm_case("mul_mat-f32-odd-gemm", (33, 70), (19, 70))
_mm_case("mul_mat-f32-batch", (2, 13, 64), (4, 3, 64))
_mm_case("mul_mat-f32-batch4", (2, 1, 9, 32), (2, 3, 5, 32))
_mm_case("mul_mat-f16-vec", (33, 64), (1, 64), "f16")
_mm_case("mul_mat-f16-small", (33, 64), (7, 64), "f16")
_mm_case("mul_mat-f16-gemm", (64, 128), (32, 128), "f16")
_mm_case("mul_mat-f32-nc-x", (13, 67), (5, 67), nc_x=True)
_mm_case("mul_mat-f32-nc-w", (13, 67), (5, 67), nc_w=True)
_mm_case("mul_mat-f16-nc-x", (33, 64), (17, 64), "f16", nc_x=True)


# quantized and bf16 weights at GEMM sizes (N >= 32: the GPU plugins' tensor-core/cuBLAS paths),
# strided activations and broadcast batches
def _bf16_bits(a):
    u = np.asarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _mmw_case(name, wshape, xshape, wdt, nc_x=False):
    """mul_mat with quantized or bf16 weights: the reference uses the dequantized (rounded) weights,
    so only the kernel's own error is measured. Weight batches broadcast over x's outer axes."""
    def build(rng):
        g = pg.Graph()
        wf = rng.standard_normal(wshape).astype(np.float32)
        k = wshape[-1]
        if wdt == "bf16":
            bits = _bf16_bits(wf)
            w = g.weight("w", bits, type="bf16", shape=wshape)
            w64 = (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        else:
            flat = wf.reshape(-1, k)
            blocks = pg.quantize(flat, wdt)
            w = g.weight("w", blocks, type=wdt, shape=wshape)
            w64 = pg.dequantize(blocks, wdt, flat.shape).astype(np.float64).reshape(wshape)
        x, fx = _input(g, "x", _rand(rng, xshape), nc_x)
        xv = _f64(_arr(fx, "x", nc_x))
        wb = w64.reshape((1,) * (4 - w64.ndim) + w64.shape)
        xb = xv.reshape((1,) * (4 - xv.ndim) + xv.shape)
        wb = np.repeat(np.repeat(wb, xb.shape[0] // wb.shape[0], axis=0), xb.shape[1] // wb.shape[1], axis=1)
        ref = np.einsum("abnk,abmk->abnm", xb, wb)
        return [pg.mul_mat(w, x)], fx, [ref.reshape(xv.shape[:-1] + (wshape[-2],))]
    CASES.append(Case(name, "mul_mat", build, NMSE_MATMUL))


# prefill-sized N (>= 32: the cuBLAS / tensor-core GEMM), every weight type
for _wdt in ("q4_0", "q8_0", "q4_K", "q6_K", "bf16"):
    _mmw_case(f"mul_mat-{_wdt}-gemm", (96, 256), (64, 256), _wdt)
    _mmw_case(f"mul_mat-{_wdt}-gemm-nc-x", (64, 256), (40, 256), _wdt, nc_x=True)      # src1 transposed view
    _mmw_case(f"mul_mat-{_wdt}-gemm-batch", (2, 48, 256), (2, 6, 33, 256), _wdt)       # r2 = 3, r3 = 2
_mm_case("mul_mat-f32-gemm-nc-x", (96, 256), (64, 256), nc_x=True)
_mm_case("mul_mat-f32-gemm-nc-w", (96, 256), (64, 256), nc_w=True)    # transposed weights (converted)
_mm_case("mul_mat-f32-gemm-batch", (2, 48, 128), (2, 6, 40, 128))     # r2 = 3 over 4-D, r3 = 1
_mm_case("mul_mat-f16-gemm-batch", (2, 1, 48, 128), (2, 4, 40, 128), "f16")   # b2 = 1: full broadcast
_mm_case("mul_mat-f16-gemm-nc-x", (64, 128), (48, 128), "f16", nc_x=True)


def _getrows_case(name, tshape, ishape, tdt="f32"):
    def build(rng):
        g = pg.Graph()
        tv = _rand(rng, tshape, tdt)
        t = g.weight("t", tv)
        rows = tshape[-2]
        iv = rng.integers(0, rows, ishape).astype(np.int32)
        idx, fi = _input(g, "i", iv)
        if len(tshape) == 2:
            ref = _f64(tv)[iv]
        else:
            ref = np.stack([_f64(tv)[b][iv[b]] for b in range(tshape[0])])
        return [pg.get_rows(t, idx)], fi, [ref]
    CASES.append(Case(name, "get_rows", build))


_getrows_case("get_rows-f32", (20, 33), (7,))
_getrows_case("get_rows-f16", (20, 33), (9,), "f16")
_getrows_case("get_rows-f32-batch", (2, 10, 16), (2, 5))


def _setrows_case(name, sdt="f32", idt=np.int32):
    def build(rng):
        g = pg.Graph()
        init = _rand(rng, (10, 16), sdt)
        st = g.state("kv", (10, 16), pg.dtype(sdt), init=init)
        rows, fr = _input(g, "r", _rand(rng, (4, 16)))
        iv = np.array([7, 2, 9, 0], dtype=idt)
        idx, fi = _input(g, "i", iv)
        y = pg.set_rows(st, rows, idx)
        ref = _f64(init).copy()
        ref[iv] = _f64(fr["r"].astype(_NP[sdt]))
        return [y], {**fr, **fi}, [ref]
    CASES.append(Case(name, "set_rows", build))


_setrows_case("set_rows-f32")
_setrows_case("set_rows-f16", "f16")
_setrows_case("set_rows-f32-i64", "f32", np.int64)


# ---------------------------------------------------------------- copies and views

def _bf16_round(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.astype(np.uint32).view(np.float32)


def _from_bf16(u16):
    return (np.asarray(u16, np.uint16).astype(np.uint32) << 16).view(np.float32)


@case("cont-permuted", "cont")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (2, 3, 5, 7)))
    return [pg.cont(pg.permute(x, (0, 2, 1, 3)))], f, [_f64(f["x"]).transpose(0, 2, 1, 3)]


for _src, _dst in (("f32", "f16"), ("f16", "f32"), ("f32", "f32"), ("f16", "f16")):
    for _nc in (False, True):
        def _b(rng, src=_src, dst=_dst, nc=_nc):
            g = pg.Graph()
            x, f = _input(g, "x", _rand(rng, (6, 35), src), nc)
            v = _arr(f, "x", nc)
            return [pg.cont(x, dst)], f, [_f64(v.astype(_NP[dst]))]
        CASES.append(Case(f"cont-{_src}-to-{_dst}{'-nc' if _nc else ''}", "cont", _b))


class _Bf16Case(Case):
    pass


def _bf16_build(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (5, 33)))
    y = pg.cont(x, pg.bf16)
    back = pg.cont(y, pg.f32)
    return [back], f, [_f64(_bf16_round(f["x"]))]


CASES.append(Case("cont-f32-to-bf16-to-f32", "cont", _bf16_build))


@case("cpy-f32-to-f16-state", "cpy")
def _(rng):
    g = pg.Graph()
    st = g.state("s", (4, 24), pg.f16)
    x, f = _input(g, "x", _rand(rng, (4, 24)))
    return [pg.cpy(x, st)], f, [_f64(f["x"].astype(np.float16))]


@case("cpy-transposed-into-f32", "cpy")
def _(rng):
    g = pg.Graph()
    st = g.state("s", (9, 6), pg.f32)
    x, f = _input(g, "x", _rand(rng, (6, 9)))
    return [pg.cpy(pg.transpose(x), st)], f, [_f64(f["x"]).T]


@case("view-strided-scale", "view")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (8, 20)))
    v = pg.view(x, (3, 7), strides=(2 * 20 * 4, 4), offset=(20 + 5) * 4)
    return [pg.scale(v, 2.0)], f, [_f64(f["x"])[1:7:2, 5:12] * 2.0]


@case("reshape-rms_norm", "reshape")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (6, 40)) + 0.3)
    y = pg.rms_norm(pg.reshape(x, (3, 2, 40)), eps=1e-6)
    return [y], f, [R.rms_norm(_f64(f["x"]).reshape(3, 2, 40), 1e-6)]


@case("permute-as-output", "permute")
def _(rng):
    g = pg.Graph()
    x, f = _input(g, "x", _rand(rng, (2, 3, 5)))
    y = pg.permute(pg.scale(x, 1.5), (2, 0, 1))
    return [y], f, [_f64(f["x"]).transpose(2, 0, 1) * 1.5]


# ---------------------------------------------------------------- attention

def _fa_case(name, B=1, H=4, Hk=2, n_q=3, n_kv=17, D=32, kv="f16", mask="f16", softcap=0.0, bias=0.0):
    def build(rng):
        g = pg.Graph()
        qv = _rand(rng, (B, H, n_q, D))
        kv_ = _rand(rng, (B, Hk, n_kv, D), kv)
        vv = _rand(rng, (B, Hk, n_kv, D), kv)
        q, fq = _input(g, "q", qv)
        k, fk = _input(g, "k", kv_)
        v, fv = _input(g, "v", vv)
        feeds = {**fq, **fk, **fv}
        m = None
        mv = None
        if mask:
            pad = (n_q + 7) // 8 * 8
            mv = _mask(rng, (1, 1, pad, n_kv), mask)
            m, fm = _input(g, "m", mv)
            feeds.update(fm)
        scale = 1.0 / math.sqrt(D)
        y = pg.flash_attn_ext(q, k, v, m, scale=scale, max_bias=bias, logit_softcap=softcap)
        ref = R.flash_attn(_f64(qv), _f64(kv_), _f64(vv), None if mv is None else _f64(mv), scale, bias, softcap)
        return [y], feeds, [ref]
    CASES.append(Case(name, "flash_attn_ext", build, NMSE_MATMUL))


_fa_case("flash_attn-f16")
_fa_case("flash_attn-f32kv", kv="f32", mask="f32")
_fa_case("flash_attn-decode", n_q=1, n_kv=40)
_fa_case("flash_attn-nomask", mask=None)
_fa_case("flash_attn-softcap", softcap=20.0)
_fa_case("flash_attn-alibi", bias=8.0)
_fa_case("flash_attn-mha-d64", H=3, Hk=3, D=64, n_q=5, n_kv=9)
