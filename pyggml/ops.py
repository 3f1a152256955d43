"""Op constructors. Each checks its operands when called and raises ShapeError or
TypeMismatchError with the shapes in the message; semantics are those of include/pyggml/ops.h."""
from __future__ import annotations

import struct
from typing import Optional, Sequence

from . import _abi_consts as _abi
from .errors import GraphError, ShapeError, TypeMismatchError
from .graph import OP, FLAG_STATE, MAX_DIMS, Tensor, as_int, contiguous_strides, ne_from_shape
from .types import dtype as _dtype, f32, f16, i32, i64

FLOAT_TYPES = (f32, f16)


def _f(x):
    """A float stored bit-for-bit in an int32 op-param word."""
    return struct.unpack("<i", struct.pack("<f", float(x)))[0]


def _graph_of(op, *ts):
    g = None
    for t in ts:
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeMismatchError(f"{op}: expected a pyggml Tensor, got {type(t).__name__}")
        if g is None:
            g = t.graph
        elif t.graph is not g:
            raise GraphError(f"{op}: operands belong to different graphs")
    return g


def _need_type(op, t, allowed, what="operand"):
    if t.type not in allowed:
        names = "/".join(a.name for a in allowed)
        raise TypeMismatchError(f"{op}: {what} {t!r} has type {t.type.name}; expected {names}")


def _node(op, src, type, ne, ndim, params=(), nb=None, view_src=None, view_offs=0, name=""):
    g = _graph_of(op, *src)
    params = list(params) + [0] * (16 - len(params))
    return Tensor(g, type, ne, ndim, op=OP[op], src=src, params=params, nb=nb, view_src=view_src,
                  view_offs=view_offs, name=name)


def _shape(t):
    return list(t.shape)


# ---------------------------------------------------------------- elementwise

def _binary(op, a, b):
    _graph_of(op, a, b)
    _need_type(op, a, FLOAT_TYPES, "a")
    _need_type(op, b, FLOAT_TYPES, "b")
    for i in range(MAX_DIMS):
        if a.ne[i] % b.ne[i]:
            raise ShapeError(f"{op}: b of shape {_shape(b)} does not broadcast over a of shape {_shape(a)} "
                             f"(each axis of b must divide a's)")
    return _node(op, (a, b), a.type, a.ne, max(a.ndim, b.ndim))


def add(a: Tensor, b: Tensor) -> Tensor:
    """a + b; b repeats over a."""
    return _binary("add", a, b)


def mul(a: Tensor, b: Tensor) -> Tensor:
    """a * b; b repeats over a."""
    return _binary("mul", a, b)


def scale(a: Tensor, s: float, bias: float = 0.0) -> Tensor:
    """a * s + bias."""
    _need_type("scale", a, FLOAT_TYPES)
    return _node("scale", (a,), a.type, a.ne, a.ndim, [_f(s), _f(bias)])


def _unary(op, a):
    _need_type(op, a, FLOAT_TYPES)
    return _node(op, (a,), a.type, a.ne, a.ndim)


def silu(a: Tensor) -> Tensor:
    return _unary("silu", a)


def gelu(a: Tensor) -> Tensor:
    """GELU, tanh approximation."""
    return _unary("gelu", a)


def swiglu(a: Tensor, b: Optional[Tensor] = None, swapped: bool = False) -> Tensor:
    """silu(a) * b; with b None, a's last axis is split in halves (gate, up)."""
    _need_type("swiglu", a, FLOAT_TYPES, "a")
    if b is None:
        if a.ne[0] % 2:
            raise ShapeError(f"swiglu: a of shape {_shape(a)} must have an even last axis to be split")
        ne = (a.ne[0] // 2,) + a.ne[1:]
        return _node("swiglu", (a,), a.type, ne, a.ndim, [1 if swapped else 0])
    _need_type("swiglu", b, FLOAT_TYPES, "b")
    if a.ne != b.ne:
        raise ShapeError(f"swiglu: a {_shape(a)} and b {_shape(b)} must have the same shape")
    return _node("swiglu", (a, b), a.type, a.ne, a.ndim)


# ---------------------------------------------------------------- row-wise

def rms_norm(a: Tensor, eps: float = 1e-6) -> Tensor:
    _need_type("rms_norm", a, FLOAT_TYPES)
    return _node("rms_norm", (a,), a.type, a.ne, a.ndim, [_f(eps)])


def norm(a: Tensor, eps: float = 1e-5) -> Tensor:
    _need_type("norm", a, FLOAT_TYPES)
    return _node("norm", (a,), a.type, a.ne, a.ndim, [_f(eps)])


def soft_max(a: Tensor, mask: Optional[Tensor] = None, scale: float = 1.0, max_bias: float = 0.0) -> Tensor:
    """softmax(a*scale + mask) over the last axis; mask (f32/f16) has a's last axis and at least
    a's rows along the next one, and broadcasts over the two outer axes."""
    _need_type("soft_max", a, FLOAT_TYPES)
    src = (a,)
    if mask is not None:
        _need_type("soft_max", mask, FLOAT_TYPES, "mask")
        if mask.ne[0] != a.ne[0] or mask.ne[1] < a.ne[1] or a.ne[2] % mask.ne[2] or a.ne[3] % mask.ne[3]:
            raise ShapeError(f"soft_max: mask {_shape(mask)} does not fit a {_shape(a)}")
        src = (a, mask)
    return _node("soft_max", src, a.type, a.ne, a.ndim, [_f(scale), _f(max_bias)])


ROPE_NORMAL, ROPE_NEOX = _abi.ROPE_NORMAL, _abi.ROPE_NEOX


def rope(x: Tensor, positions: Tensor, n_dims: Optional[int] = None, mode: int = ROPE_NORMAL,
         freq_base: float = 10000.0, freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
         beta_fast: float = 32.0, beta_slow: float = 1.0, n_ctx_orig: int = 0,
         freq_factors: Optional[Tensor] = None) -> Tensor:
    """Rotary embedding of x (n_tokens, n_head, head_dim) at int32 `positions` (n_tokens,)."""
    _need_type("rope", x, FLOAT_TYPES)
    _need_type("rope", positions, (i32,), "positions")
    n_dims = x.ne[0] if n_dims is None else as_int(n_dims, "rope: n_dims")
    n_ctx_orig = as_int(n_ctx_orig, "rope: n_ctx_orig")
    if not 0 <= n_ctx_orig < 2**31:
        raise ShapeError(f"rope: n_ctx_orig {n_ctx_orig} is not in [0, 2^31)")
    if n_dims % 2 or not 0 < n_dims <= x.ne[0]:
        raise ShapeError(f"rope: n_dims {n_dims} must be even and <= head_dim {x.ne[0]} (x {_shape(x)})")
    if positions.ne[0] != x.ne[2] or positions.nelements != positions.ne[0]:
        raise ShapeError(f"rope: positions {_shape(positions)} must be 1-D with one entry per token "
                         f"({x.ne[2]} tokens in x {_shape(x)})")
    if as_int(mode, "rope: mode") not in (ROPE_NORMAL, ROPE_NEOX):
        raise ShapeError(f"rope: mode {mode} is not ROPE_NORMAL (0) or ROPE_NEOX (2)")
    src = (x, positions)
    if freq_factors is not None:
        _need_type("rope", freq_factors, (f32,), "freq_factors")
        if freq_factors.nelements < n_dims // 2:
            raise ShapeError(f"rope: freq_factors {_shape(freq_factors)} needs n_dims/2 = {n_dims // 2} entries")
        src = (x, positions, freq_factors)
    params = [n_dims, mode, n_ctx_orig, _f(freq_base), _f(freq_scale), _f(ext_factor), _f(attn_factor),
              _f(beta_fast), _f(beta_slow)]
    return _node("rope", src, x.type, x.ne, x.ndim, params)


def argmax(a: Tensor) -> Tensor:
    """Index (int32) of the largest element along the last axis; shape a.shape[:-1]."""
    _need_type("argmax", a, (f32,))
    ne = a.ne[1:] + (1,)
    return _node("argmax", (a,), i32, ne, max(1, a.ndim - 1))


# ---------------------------------------------------------------- matrix

def mul_mat(w: Tensor, x: Tensor) -> Tensor:
    """ggml's mul_mat: w (.., M, K) of any type, x (.., N, K) f32 -> (.., N, M) f32 = x @ w.T.
    w's two outer axes broadcast over x's."""
    _graph_of("mul_mat", w, x)
    _need_type("mul_mat", x, (f32,), "x")
    if w.ne[0] != x.ne[0]:
        raise ShapeError(f"mul_mat: inner dimensions differ: w {_shape(w)} ({w.type.name}) and x {_shape(x)} "
                         f"(both last axes must be equal)")
    if x.ne[2] % w.ne[2] or x.ne[3] % w.ne[3]:
        raise ShapeError(f"mul_mat: w {_shape(w)} does not broadcast over x {_shape(x)} on the outer axes")
    ne = (w.ne[1], x.ne[1], x.ne[2], x.ne[3])
    return _node("mul_mat", (w, x), f32, ne, max(2, w.ndim, x.ndim))


def get_rows(table: Tensor, idx: Tensor) -> Tensor:
    """table (rows, n) of any type, idx int32 (k,) -> (k, n) f32; with a batch axis:
    table (b, rows, n), idx (b, k) -> (b, k, n)."""
    _graph_of("get_rows", table, idx)
    _need_type("get_rows", idx, (i32,), "idx")
    if idx.ne[2] != 1 or idx.ne[3] != 1 or table.ne[3] != 1 or table.ne[2] != idx.ne[1]:
        raise ShapeError(f"get_rows: table {_shape(table)} and idx {_shape(idx)} do not fit "
                         f"(table (b, rows, n) with idx (b, k), or table (rows, n) with idx (k,))")
    ne = (table.ne[0], idx.ne[0], idx.ne[1], 1)
    return _node("get_rows", (table, idx), f32, ne, max(2, idx.ndim + 1))


def set_rows(dst: Tensor, rows: Tensor, idx: Tensor) -> Tensor:
    """dst[idx[i]] = rows[i] (converted to dst's type), in place; returns dst's new version.
    dst (R, n) any writable type, rows (k, n) f32, idx int32/int64 (k,)."""
    _graph_of("set_rows", dst, rows, idx)
    _need_type("set_rows", rows, (f32,), "rows")
    _need_type("set_rows", idx, (i32, i64), "idx")
    if rows.ne[0] != dst.ne[0] or idx.ne[0] != rows.ne[1] or rows.ne[2:] != dst.ne[2:] \
            or idx.nelements != idx.ne[0] * idx.ne[1] or idx.ne[1] not in (1, rows.ne[2]):
        raise ShapeError(f"set_rows: rows {_shape(rows)} with idx {_shape(idx)} do not fit dst {_shape(dst)}")
    base = dst.view_src or dst
    node = _node("set_rows", (dst, rows, idx), dst.type, dst.ne, dst.ndim, nb=dst.nb,
                 view_src=base, view_offs=dst.view_offs if dst.view_src else 0)
    node.graph.effects.append(node)
    return node


def flash_attn_ext(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor] = None, scale: float = 1.0,
                   max_bias: float = 0.0, logit_softcap: float = 0.0) -> Tensor:
    """Attention with an online softmax. Numpy order: q (B, H, n_q, D) f32, k (B, H_kv, n_kv, D),
    v (B, H_kv, n_kv, Dv) f32/f16, mask (1|B, 1|H, >=n_q, n_kv) -> (B, n_q, H, Dv) f32."""
    _graph_of("flash_attn_ext", q, k, v, mask)
    _need_type("flash_attn_ext", q, (f32,), "q")
    _need_type("flash_attn_ext", k, FLOAT_TYPES, "k")
    _need_type("flash_attn_ext", v, FLOAT_TYPES, "v")
    D, n_q, H, B = q.ne
    if k.ne[0] != D or k.ne[1] != v.ne[1] or k.ne[2] != v.ne[2] or H % k.ne[2] or k.ne[3] != B or v.ne[3] != B:
        raise ShapeError(f"flash_attn_ext: q {_shape(q)}, k {_shape(k)}, v {_shape(v)} do not fit "
                         f"(head dims equal, k/v same kv length and heads, heads of q a multiple of k's)")
    src = (q, k, v)
    if mask is not None:
        _need_type("flash_attn_ext", mask, FLOAT_TYPES, "mask")
        if mask.ne[0] != k.ne[1] or mask.ne[1] < n_q or H % mask.ne[2] or B % mask.ne[3]:
            raise ShapeError(f"flash_attn_ext: mask {_shape(mask)} does not fit q {_shape(q)} / k {_shape(k)}")
        src = (q, k, v, mask)
    ne = (v.ne[0], H, n_q, B)
    return _node("flash_attn_ext", src, f32, ne, 4, [_f(scale), _f(max_bias), _f(logit_softcap)])


# ---------------------------------------------------------------- copies and views

def cont(a: Tensor, type: Optional[str] = None) -> Tensor:
    """A contiguous copy of a (any layout), converted to `type` when given."""
    t = a.type if type is None else _dtype(type)
    if t.is_quantized and a.ne[0] % t.block_size:
        raise ShapeError(f"cont: last axis of {_shape(a)} is not a multiple of {t.name}'s block size {t.block_size}")
    return _node("cont", (a,), t, a.ne, a.ndim)


def cpy(a: Tensor, dst: Tensor) -> Tensor:
    """Write a (converted to dst's type) into dst; returns dst's new version."""
    _graph_of("cpy", a, dst)
    if a.nelements != dst.nelements:
        raise ShapeError(f"cpy: {_shape(a)} and {_shape(dst)} hold different numbers of elements")
    base = dst.view_src or dst
    node = _node("cpy", (a, dst), dst.type, dst.ne, dst.ndim, nb=dst.nb, view_src=base,
                 view_offs=dst.view_offs if dst.view_src else 0)
    if base.flags & FLAG_STATE:
        node.graph.effects.append(node)
    return node


def _view_node(op, a, ne, nb, ndim, offs, params=()):
    base = a.view_src or a
    total = (a.view_offs if a.view_src else 0) + offs
    return _node(op, (a,), a.type, ne, ndim, params, nb=nb, view_src=base, view_offs=total)


def view(a: Tensor, shape: Sequence[int], strides: Optional[Sequence[int]] = None, offset: int = 0) -> Tensor:
    """A window into a's memory: numpy-order `shape`, byte `strides` (default contiguous) and byte
    `offset`. The window must lie inside a's data."""
    ne, ndim = ne_from_shape(shape, "view shape")
    offset = as_int(offset, "view: offset")
    if ne[0] % a.type.block_size:
        raise ShapeError(f"view: last axis {ne[0]} is not a multiple of {a.type.name}'s block size")
    if strides is None:
        nb = contiguous_strides(a.type, ne)
    else:
        if len(strides) != ndim:
            raise ShapeError(f"view: {len(strides)} strides for a {ndim}-D shape {list(shape)}")
        nb = [as_int(s, f"view: strides {tuple(strides)}") for s in reversed(strides)]
        if nb[0] != a.type.type_size:
            raise ShapeError(f"view: the last axis must be dense ({a.type.type_size}-byte stride for "
                             f"{a.type.name}), got {nb[0]}")
        for i in range(ndim, MAX_DIMS):
            nb.append(nb[i - 1] * ne[i - 1])
        nb = tuple(nb)
    end = offset + ne[0] // a.type.block_size * nb[0] + sum((ne[i] - 1) * nb[i] for i in range(1, MAX_DIMS))
    if offset < 0 or end > a.nbytes:
        raise ShapeError(f"view: shape {list(shape)} strides {strides} at offset {offset} reaches byte {end}, "
                         f"past the {a.nbytes} bytes of {_shape(a)}")
    return _view_node("view", a, ne, nb, ndim, offset)


def reshape(a: Tensor, shape: Sequence[int]) -> Tensor:
    """Same bytes, new shape; a must be contiguous (use cont first)."""
    ne, ndim = ne_from_shape(shape, "reshape")
    if ne[0] * ne[1] * ne[2] * ne[3] != a.nelements:
        raise ShapeError(f"reshape: cannot reshape {_shape(a)} ({a.nelements} elements) to {list(shape)}")
    if not a.is_contiguous():
        raise ShapeError(f"reshape: {a!r} is not contiguous; call cont() first")
    if ne[0] % a.type.block_size:
        raise ShapeError(f"reshape: last axis {ne[0]} is not a multiple of {a.type.name}'s block size")
    return _view_node("reshape", a, ne, None, ndim, 0)


def permute(a: Tensor, axes: Sequence[int]) -> Tensor:
    """Reorder axes with numpy's meaning: result.shape[i] == a.shape[axes[i]] (like np.transpose)."""
    nd = a.ndim
    axes = [as_int(x, f"permute: axes {tuple(axes)}") for x in axes]
    axes = [x % nd if -nd <= x < nd else x for x in axes]
    if sorted(axes) != list(range(nd)):
        raise ShapeError(f"permute: axes {list(axes)} are not a permutation of {nd} axes of {_shape(a)}")
    if a.type.is_quantized and axes[-1] != nd - 1:
        raise ShapeError(f"permute: the last axis of a {a.type.name} tensor cannot move")
    shape = [a.shape[i] for i in axes]
    strides = [a.strides[i] for i in axes]
    # numpy axis j of the result is ggml dim nd-1-j; source numpy axis axes[j] is ggml dim nd-1-axes[j]
    ne = tuple(reversed(shape)) + (1,) * (MAX_DIMS - nd)
    nb = list(reversed(strides))
    for i in range(nd, MAX_DIMS):
        nb.append(nb[i - 1] * ne[i - 1])
    ggml_axes = [0] * MAX_DIMS
    for j in range(nd):
        ggml_axes[nd - 1 - axes[j]] = nd - 1 - j
    for d in range(nd, MAX_DIMS):
        ggml_axes[d] = d
    return _view_node("permute", a, ne, tuple(nb), nd, 0, ggml_axes)


def transpose(a: Tensor) -> Tensor:
    """Swap the last two axes (ggml dims 0 and 1)."""
    if a.ndim < 2:
        raise ShapeError(f"transpose: {_shape(a)} has fewer than 2 axes")
    axes = list(range(a.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    if a.type.is_quantized:
        raise ShapeError(f"transpose: a {a.type.name} tensor cannot be transposed")
    v = permute(a, axes)
    v.op = OP["transpose"]
    return v
