"""Attention over the filled KV cells only: every forward attends kv_extent(filled) cells, never
the whole n_ctx, and the logits still match the float64 reference at every depth, across extent
changes, resets and both attention paths; each (T, extent) forward is planned once and reused."""
import numpy as np
import pytest

import pyggml.models as models
from pyggml.models import llama
from pyggml.models.llama import kv_extent
from test_llama import DEVICE_SETS, NMSE_LIMIT, _weights64, nmse, reference_logits, write_custom_model


def test_kv_extent_pads_decode_to_256_and_prefill_to_powers_of_two():
    assert [kv_extent(n, 100000, True) for n in (1, 256, 257, 4096, 4097)] == [256, 256, 512, 4096, 4352]
    assert kv_extent(20, 100, True) == 100 and kv_extent(20, 100, False) == 100       # capped at n_ctx
    assert [kv_extent(n, 100000, False) for n in (1, 256, 257, 4097, 16896)] == [256, 256, 512, 8192, 32768]
    prev = 0
    for n in range(1, 70000, 7):
        e = kv_extent(n, 1 << 20, True)
        assert n <= e and (e - n) * 16 <= max(e, 16 * llama.KV_PAD)     # padding: under 1/16 past 4096
        assert e % llama.KV_PAD == 0 and e >= prev
        prev = e
    # a long decode builds about 16 forwards per doubling of the context, not one per 256 cells
    assert len({kv_extent(n, 1 << 20, True) for n in range(8193, 16385)}) == 16


def _reference(tmp_path, n_tok, seed=5):
    path = write_custom_model(str(tmp_path / "c.gguf"), seed=seed)
    meta, W = _weights64(path)
    toks = [int(t) for t in np.random.default_rng(seed).integers(0, 300, n_tok)]
    return path, toks, reference_logits(meta, W, toks)


@pytest.mark.parametrize("devices", DEVICE_SETS, ids=lambda d: "+".join(d))
@pytest.mark.parametrize("attn", ["flash", "softmax"])
def test_decode_across_extents_matches_float64(tmp_path, monkeypatch, devices, attn):
    monkeypatch.setattr(llama, "KV_PAD", 8)           # small extents: a short context crosses many
    n_ctx, n_prompt, n_tok = 96, 21, 70
    path, toks, ref = _reference(tmp_path, n_tok)
    m = models.load(path, devices=list(devices), n_ctx=n_ctx, attn=attn, progress=False)
    try:
        got = [m.prefill(toks[:n_prompt])]            # chunks 16, 4, 1: extents 16, 32, 24
        assert {k[0]: k[2] for k in m._forwards if k[0] > 1} == {16: 16, 4: 32}
        extents = []
        for j, t in enumerate(toks[n_prompt:]):
            got.append(m.decode(t))
            f = m._decode_fwd
            extents.append(f.n_kv)
            assert f.mask.shape == (1, 1, 1, kv_extent(n_prompt + j + 1, n_ctx, True))
            assert f.n_kv < n_ctx or n_prompt + j + 1 > n_ctx - 8
        errs = [nmse(g, ref[n_prompt - 1 + j]) for j, g in enumerate(got)]
        assert max(errs) < NMSE_LIMIT, ["%.1e" % e for e in errs]
        assert sorted(set(extents)) == list(range(24, 80, 8))
        # the same context again: every forward (and its plan) is reused
        plans = m.sched.stats["plans"]
        m.reset()
        again = [m.prefill(toks[:n_prompt])] + [m.decode(t) for t in toks[n_prompt:]]
        assert m.sched.stats["plans"] == plans
        assert max(nmse(g, ref[n_prompt - 1 + j]) for j, g in enumerate(again)) < NMSE_LIMIT
    finally:
        m.close()


def test_depth_past_the_first_256_cells(tmp_path):
    """The default padding: a prompt of 500 attends 512 cells (pow2), decode steps 256-cell
    extents (512, then 768 past cell 512), and a prefill chunk after it its power of two."""
    path, toks, ref = _reference(tmp_path, 530, seed=7)
    m = models.load(path, n_ctx=1024, n_batch=256, progress=False)
    try:
        errs = [nmse(m.prefill(toks[:500]), ref[499])]
        assert {k[2] for k in m._forwards if k[0] > 1} == {256, 512}
        for j, t in enumerate(toks[500:520]):
            errs.append(nmse(m.decode(t), ref[500 + j]))
        assert {k[2] for k in m._forwards if k[0] == 1} == {256, 512, 768}   # load's, then the two crossed
        errs.append(nmse(m.prefill(toks[520:530]), ref[529]))          # chunks 8, 2 at 520: extent 1024
        assert max(errs) < NMSE_LIMIT, errs
        assert (8, False, 1024) in m._forwards
    finally:
        m.close()


def test_forward_for_rejects_extents_outside_the_context(tmp_path):
    path, _, _ = _reference(tmp_path, 4)
    m = models.load(path, n_ctx=64, progress=False)
    try:
        for T, n_kv in ((8, 4), (1, 65), (1, 0)):
            with pytest.raises(llama.ShapeError, match="attends"):
                m.forward_for(T, n_kv=n_kv)
        assert m.forward_for(2, n_kv=None).n_kv == 64
    finally:
        m.close()


def _causal(T, n, p0):
    m = np.full((T, n), -np.inf, np.float16)
    for i in range(T):
        m[i, :p0 + i + 1] = 0
    return m


def test_causal_mask_rewrites_only_what_changed():
    """set_causal_mask keeps what the mask encodes and rewrites only the columns that differ: over
    forward, repeated, backward and far jumps (and a slot mask passed with its own state) the
    result equals a mask built from nothing, and a repeat writes nothing."""
    T, n = 8, 64
    f = llama._Forward.__new__(llama._Forward)
    f.T, f._tri, f._mask_p0 = T, None, None
    f.mask = np.full((1, 1, T, n), -np.inf, np.float16)
    slot, was = np.full_like(f.mask, 7.0), None        # garbage: the first use writes all of it
    for p0 in (0, 8, 16, 16, 9, 40, 3, 56, 0, 31):
        f.set_causal_mask(p0)
        assert np.array_equal(f.mask[0, 0], _causal(T, n, p0)), p0
        was = f.set_causal_mask(p0, slot, was)
        assert np.array_equal(slot[0, 0], _causal(T, n, p0)), p0
    f.mask.flags.writeable = False                     # the same p0 again: nothing to write
    f.set_causal_mask(31)


def test_prefills_after_reset_match_float64(tmp_path):
    """Chunked prefills whose masks are updated in place (one chunk; and groups of equal chunks
    as pipelined micro-batches, each with its kept slot mask) at other positions after reset()
    give the float64 logits."""
    path, toks, ref = _reference(tmp_path, 48, seed=3)
    m = models.load(path, n_ctx=64, n_batch=8, progress=False)
    try:
        errs = []
        for n in (40, 20, 48, 40, 13):
            m.reset()
            errs.append(nmse(m.prefill(toks[:n]), ref[n - 1]))
        m.reset()
        errs.append(nmse(m.prefill(toks[:13]), ref[12]))
        errs.append(nmse(m.prefill(toks[13:45]), ref[44]))   # four chunks of 8 from p0 = 13
        assert max(errs) < NMSE_LIMIT, ["%.1e" % e for e in errs]
    finally:
        m.close()
