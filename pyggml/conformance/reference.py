"""float64 numpy references for every op, in numpy axis order (ne reversed)."""
import math

import numpy as np


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms_norm(x, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def norm(x, eps):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps)


def alibi_slopes(n_head, max_bias):
    if max_bias <= 0:
        return np.ones(n_head)
    n_log2 = 2 ** int(math.floor(math.log2(n_head)))
    m0 = 2.0 ** (-max_bias / n_log2)
    m1 = 2.0 ** (-(max_bias / 2.0) / n_log2)
    return np.array([m0 ** (h + 1) if h < n_log2 else m1 ** (2 * (h - n_log2) + 1) for h in range(n_head)])


def soft_max(x, mask=None, scale=1.0, max_bias=0.0):
    """x (B3, B2, rows, n); mask (M3, M2, >=rows, n) broadcast over the two outer axes."""
    x4 = x.reshape((1,) * (4 - x.ndim) + x.shape)
    y = x4 * scale
    if mask is not None:
        m4 = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)[:, :, : x4.shape[2], :]
        slopes = alibi_slopes(x4.shape[1], max_bias).reshape(1, -1, 1, 1)
        rep = (x4.shape[0] // m4.shape[0], x4.shape[1] // m4.shape[1], 1, 1)
        y = y + slopes * np.tile(m4, rep)
    y = y - y.max(axis=-1, keepdims=True)
    e = np.exp(y)
    return (e / e.sum(axis=-1, keepdims=True)).reshape(x.shape)


def _yarn_corr_dim(n_dims, n_ctx_orig, n_rot, base):
    return n_dims * math.log(n_ctx_orig / (n_rot * 2 * math.pi)) / (2 * math.log(base))


def rope(x, pos, n_dims, mode, freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow,
         n_ctx_orig, freq_factors=None):
    """x (n_tokens, n_head, head_dim); pos (n_tokens,)."""
    out = x.copy()
    half = n_dims // 2
    i = np.arange(half)
    theta_extrap = pos[:, None].astype(np.float64) * freq_base ** (-2.0 * i / n_dims)[None, :]
    if freq_factors is not None:
        theta_extrap = theta_extrap / freq_factors[None, :half]
    theta_interp = freq_scale * theta_extrap
    mscale = attn_factor
    theta = theta_interp
    if ext_factor != 0.0:
        lo = max(0.0, math.floor(_yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base)))
        hi = min(n_dims - 1.0, math.ceil(_yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base)))
        y = (i - lo) / max(0.001, hi - lo)
        ramp = (1.0 - np.clip(y, 0.0, 1.0)) * ext_factor
        theta = theta_interp * (1 - ramp) + theta_extrap * ramp
        mscale *= 1.0 + 0.1 * math.log(1.0 / freq_scale)
    c = (np.cos(theta) * mscale)[:, None, :]
    s = (np.sin(theta) * mscale)[:, None, :]
    if mode == 0:
        a, b = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
        out[..., 0:n_dims:2] = a * c - b * s
        out[..., 1:n_dims:2] = a * s + b * c
    else:
        a, b = x[..., :half], x[..., half:n_dims]
        out[..., :half] = a * c - b * s
        out[..., half:n_dims] = a * s + b * c
    return out


def flash_attn(q, k, v, mask, scale, max_bias, softcap):
    """q (B, H, n_q, D), k (B, Hk, n_kv, D), v (B, Hk, n_kv, Dv), mask (1|B, 1|H, >=n_q, n_kv)
    -> (B, n_q, H, Dv)."""
    B, H, n_q, _ = q.shape
    g = H // k.shape[1]
    kk = np.repeat(k, g, axis=1)
    vv = np.repeat(v, g, axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, kk) * scale
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:
        m = mask[:, :, :n_q, :]
        m = np.broadcast_to(np.tile(m, (B // m.shape[0], H // m.shape[1], 1, 1)), s.shape)
        s = s + alibi_slopes(H, max_bias).reshape(1, H, 1, 1) * m
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhqk,bhkd->bhqd", p, vv)
    return o.transpose(0, 2, 1, 3)
