"""Loading GGUF models: malformed files surface GGUFError and leave nothing open; weights reach the
device straight from the mmap (no host copy, peak RSS within file size + a constant); progress
bar only for slow loads."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pyggml as pg
import pyggml.models as models
from pyggml.gguf import GGUFReader, GGUFWriter
from pyggml import progress as progress_mod
from pyggml.models import loader
from pyggml.synth import write_synth_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def tiny_q8(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("load") / "tiny-q8_0.gguf")
    write_synth_model(p, "tiny", "q8_0", seed=1, progress=False)
    return p


def _fds():
    return len(os.listdir("/proc/self/fd"))


def _mapped(path):
    real = os.path.realpath(path)
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(real) for line in f)


def _rewrite(src, dst, drop_tensor=None, reshape=None, drop_key=None, set_keys=None):
    """Copy a GGUF with one change (a tensor left out or re-shaped, a key left out or changed)."""
    with GGUFReader(src) as r:
        w = GGUFWriter(dst, alignment=r.alignment)
        for k, f in r.fields.items():
            if k == drop_key or k == "general.alignment" or (set_keys and k in set_keys):
                continue
            w.add(k, f.value, f.type, f.elem_type)
        for k, v in (set_keys or {}).items():
            w.add(k, v)
        for t in r.tensors:
            if t.name == drop_tensor:
                continue
            if reshape and t.name == reshape:
                data = np.zeros(t.nbytes * 2, np.uint8)       # twice the rows
                w.add_tensor(t.name, data, type=t.type.name, shape=(t.shape[0] * 2,) + tuple(t.shape[1:]))
            else:
                w.add_tensor(t.name, np.array(t.raw), type=t.type.name, shape=t.shape)
        w.write()
    return dst


def _assert_fails_cleanly(path, exc, match):
    import gc
    pg.Scheduler("cpu")          # plugins loaded before counting descriptors
    gc.collect()
    before = _fds()
    with pytest.raises(exc, match=match):
        models.load(path, progress=False)
    gc.collect()
    assert _fds() == before, "load left a file descriptor open"
    assert not _mapped(path), "load left the file mapped"


def test_truncated_and_garbage_files_raise_gguferror(tiny_q8, tmp_path):
    data = open(tiny_q8, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])          # tensor data runs past the end
    _assert_fails_cleanly(str(cut), pg.GGUFError, "cut.gguf")
    head = tmp_path / "head.gguf"
    head.write_bytes(data[:100])                     # inside the metadata
    _assert_fails_cleanly(str(head), pg.GGUFError, "truncated")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"NOTAGGUF" + data[8:4096])
    _assert_fails_cleanly(str(junk), pg.GGUFError, "magic")


def test_missing_or_misshaped_tensor(tiny_q8, tmp_path):
    p = _rewrite(tiny_q8, str(tmp_path / "m.gguf"), drop_tensor="blk.3.ffn_up.weight")
    _assert_fails_cleanly(p, pg.GGUFError, "'blk.3.ffn_up.weight' is missing")
    p = _rewrite(tiny_q8, str(tmp_path / "s.gguf"), reshape="blk.0.attn_k.weight")
    _assert_fails_cleanly(p, pg.GGUFError, r"'blk.0.attn_k.weight' has shape \[576, 288\]")


def test_bad_metadata(tiny_q8, tmp_path):
    p = _rewrite(tiny_q8, str(tmp_path / "k.gguf"), drop_key="llama.block_count")
    _assert_fails_cleanly(p, pg.GGUFError, "'llama.block_count' is missing")
    p = _rewrite(tiny_q8, str(tmp_path / "h.gguf"), set_keys={"llama.attention.head_count": 7})
    _assert_fails_cleanly(p, pg.GGUFError, "do not divide evenly")
    p = _rewrite(tiny_q8, str(tmp_path / "a.gguf"), set_keys={"general.architecture": "gpt2"})
    _assert_fails_cleanly(p, pg.UnsupportedError, "architecture 'gpt2'")
    p = _rewrite(tiny_q8, str(tmp_path / "r.gguf"), set_keys={"llama.rope.type": "spiral"})
    _assert_fails_cleanly(p, pg.GGUFError, "rope type 'spiral'")


def test_hparams_from_metadata(tiny_q8, tmp_path):
    with GGUFReader(tiny_q8) as r:
        hp = loader.read_hparams(r)
    assert (hp.n_embd, hp.n_layer, hp.n_head, hp.n_head_kv, hp.n_ff, hp.n_vocab) == (288, 6, 6, 6, 768, 32000)
    assert hp.head_dim == 48 and hp.rope_dims == 48 and hp.rope_mode == pg.ROPE_NORMAL
    assert hp.rope_base == 10000.0 and hp.rope_scale == 1.0 and abs(hp.rms_eps - 1e-5) < 1e-12
    p = _rewrite(tiny_q8, str(tmp_path / "x.gguf"),
                 set_keys={"llama.rope.type": "neox", "llama.rope.scaling.type": "linear",
                           "llama.rope.scaling.factor": 4.0, "llama.rope.freq_base": 500000.0})
    with GGUFReader(p) as r:
        hp = loader.read_hparams(r)
    assert hp.rope_mode == pg.ROPE_NEOX and hp.rope_scale == 0.25 and hp.rope_base == 500000.0


def test_weights_are_views_of_the_mmap(tiny_q8):
    """No host copy: every weight the graph holds points into the file's mapping."""
    m = models.load(tiny_q8, progress=False)
    try:
        mm = m.reader._mm
        lo = np.frombuffer(mm, np.uint8, 1, 0).ctypes.data
        hi = lo + m.reader.file_size
        for name, t in m.w.items():
            ptr = t.data.ctypes.data
            ft = m.reader.tensor(name)
            assert ptr == lo + ft.file_offset, name
            assert lo <= ptr and ptr + t.data.nbytes <= hi
        assert m.timings["file_bytes"] == os.path.getsize(tiny_q8)
    finally:
        m.close()


def test_peak_rss_during_load_is_file_size_plus_constant(tmp_path):
    """In a fresh process: peak resident memory of load() over the baseline stays within the file
    size + 24 MiB (an f16 tiny model of 49 MB: a second copy would add another 49 MB)."""
    if not os.path.exists("/proc/self/clear_refs"):
        pytest.skip("no /proc/self/clear_refs: peak RSS cannot be reset here")
    path = str(tmp_path / "tiny-f16.gguf")
    write_synth_model(path, "tiny", "f16", seed=2, progress=False)
    code = textwrap.dedent(f"""
        import gc, os, sys
        sys.path.insert(0, {ROOT!r})
        import pyggml as pg, pyggml.models as models
        from pyggml.models.loader import rss_bytes, reset_peak_rss
        pg.Scheduler("cpu")
        gc.collect()
        base = rss_bytes()[0]
        if not reset_peak_rss():
            print("SKIP"); sys.exit(0)
        m = models.load({path!r}, n_ctx=64, progress=False)
        peak = rss_bytes()[1]
        print(peak - base, os.path.getsize({path!r}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "SKIP":
        pytest.skip("peak RSS cannot be reset here")
    over, size = map(int, out.stdout.split())
    assert over <= size + 24 * 2**20, f"peak RSS over baseline {over / 2**20:.1f} MiB for a {size / 2**20:.1f} MiB file"


def test_drop_pages_releases_resident_file_pages(tiny_q8):
    import zlib
    with GGUFReader(tiny_q8) as r:
        t = max(r.tensors, key=lambda x: x.nbytes)
        with open(tiny_q8, "rb") as f:              # the bytes as plain reads see them
            f.seek(t.file_offset)
            want = zlib.crc32(f.read(t.nbytes))
        before = loader.rss_bytes()[0]
        assert zlib.crc32(np.ascontiguousarray(t.raw)) == want   # fault the pages in, through the map
        mid = loader.rss_bytes()[0]
        loader.drop_pages(r, t)
        after = loader.rss_bytes()[0]
    assert mid - before > t.nbytes // 2
    assert mid - after > t.nbytes // 2


def test_load_progress_callback_and_bar(tiny_q8, capsys, monkeypatch):
    # a callable receives (done, total, tensor name) up to the whole size, in file order
    calls = []
    m = models.load(tiny_q8, progress=lambda done, total, name: calls.append((done, total, name)))
    m.close()
    total = calls[0][1]
    assert [c[0] for c in calls] == sorted(c[0] for c in calls) and calls[-1][0] == total > 0
    assert all(c[1] == total for c in calls) and calls[-1][2]
    assert capsys.readouterr().err == ""                 # the callable replaces the bar
    # progress=True: the tqdm bar on stderr (shown at once here: no delay)
    monkeypatch.setattr(progress_mod, "DELAY_S", 0.0)
    m = models.load(tiny_q8, progress=True)
    m.close()
    cap = capsys.readouterr()
    assert "loading" in cap.err and "100%" in cap.err and cap.out == ""
    m = models.load(tiny_q8, progress=False)
    m.close()
    assert capsys.readouterr().err == ""


def test_bad_arguments(tiny_q8):
    with pytest.raises(ValueError, match="attn"):
        models.load(tiny_q8, attn="sparse")
    with pytest.raises(ValueError, match="kv_type"):
        models.load(tiny_q8, kv_type="q4_0")
    with pytest.raises(FileNotFoundError):
        models.load(tiny_q8 + ".nope")
