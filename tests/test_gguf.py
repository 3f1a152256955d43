"""GGUF reader/writer: round trips, agreement with the gguf package and include/pyggml/types.h,
and every kind of malformed file raising GGUFError (never another exception, never a crash)."""
import os
import re
import stat
import struct

import numpy as np
import pytest

from pyggml.gguf import (GGML_TYPES, GGUFError, GGUFReader, GGUFValueType as VT, GGUFWriter,
                         ggml_type, tensor_nbytes)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- raw builders (independent of
# the writer, so reader tests do not only check the writer against itself)

def s_(text):
    b = text if isinstance(text, bytes) else text.encode()
    return struct.pack("<Q", len(b)) + b


def header(n_tensors, n_kv, version=3, magic=b"GGUF"):
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def kv(key, vtype, payload):
    return s_(key) + struct.pack("<I", vtype) + payload


def tinfo(name, ne, type_id, offset):
    return s_(name) + struct.pack(f"<I{len(ne)}QIQ", len(ne), *ne, type_id, offset)


def raw_file(kvs=(), infos=(), data=b"", align=32, n_tensors=None, n_kv=None, version=3):
    head = header(len(infos) if n_tensors is None else n_tensors,
                  len(kvs) if n_kv is None else n_kv, version)
    body = head + b"".join(kvs) + b"".join(infos)
    body += b"\0" * (-len(body) % align)
    return body + data


def write_bytes(tmp_path, b, name="f.gguf"):
    p = tmp_path / name
    p.write_bytes(b)
    return str(p)


def expect_error(tmp_path, b, pattern):
    p = write_bytes(tmp_path, b)
    with pytest.raises(GGUFError, match=pattern):
        GGUFReader(p)


# ---------------------------------------------------------------- the type table

def _header_types():
    text = open(os.path.join(ROOT, "include", "pyggml", "types.h")).read()
    ids = {m.group(1).lower(): int(m.group(2))
           for m in re.finditer(r"PYG_TYPE_(\w+)\s*=\s*(\d+)", text) if m.group(1) != "COUNT"}
    traits = {}
    for m in re.finditer(r'(\w+)\s*=\s*\{\s*"(\w+)",\s*(\d+),\s*([0-9 +/*]+),\s*(\d)\s*\}', text):
        traits[m.group(2)] = (int(m.group(3)), eval(m.group(4), {"__builtins__": {}}),  # digits
                              bool(int(m.group(5))))
    return ids, traits


def test_type_table_matches_types_h():
    ids, traits = _header_types()
    assert len(ids) == len(traits) >= 20
    in_abi = {t.id: t for t in GGML_TYPES.values() if t.in_abi}
    assert set(in_abi) == set(ids.values())
    for name, (bs, ts, q) in traits.items():
        t = ggml_type(name)
        assert t.in_abi and ids[name.lower()] == t.id
        assert (t.block_size, t.type_size, t.quantized) == (bs, ts, q), name


def test_type_table_matches_gguf_package():
    constants = pytest.importorskip("gguf.constants")
    for tid, t in GGML_TYPES.items():
        qt = constants.GGMLQuantizationType(tid)
        if t.name == "q8_1":
            # ggml's block_q8_1 is two halves + 32 int8 = 36 bytes (types.h); gguf-py still
            # lists the old float layout (40). q8_1 only ever exists as a runtime scratch type.
            assert t.type_size == 36
            continue
        assert constants.GGML_QUANT_SIZES[qt] == (t.block_size, t.type_size), t.name
        assert qt.name.lower() == t.name.lower()


def test_ggml_type_lookup():
    assert ggml_type("q4_K").id == 12 and ggml_type("Q4_K").id == 12 and ggml_type(12).name == "q4_K"
    assert tensor_nbytes("q4_K", (3, 512)) == 3 * 2 * 144
    for bad in ("q9_9", 99, 4, None):
        with pytest.raises(GGUFError):
            ggml_type(bad)


# ---------------------------------------------------------------- round trips

SCALARS = [
    ("u8", VT.UINT8, [0, 255]), ("i8", VT.INT8, [-128, 127]),
    ("u16", VT.UINT16, [0, 65535]), ("i16", VT.INT16, [-32768, 32767]),
    ("u32", VT.UINT32, [0, 2**32 - 1]), ("i32", VT.INT32, [-2**31, 2**31 - 1]),
    ("u64", VT.UINT64, [0, 2**64 - 1]), ("i64", VT.INT64, [-2**63, 2**63 - 1]),
    ("f32", VT.FLOAT32, [1.5, -0.25]), ("f64", VT.FLOAT64, [1e300, -1 / 3]),
    ("bool", VT.BOOL, [True, False]),
]


def test_roundtrip_every_metadata_type(tmp_path):
    p = str(tmp_path / "m.gguf")
    with GGUFWriter(p) as w:
        for name, vt, values in SCALARS:
            for i, v in enumerate(values):
                w.add(f"s.{name}.{i}", v, vt)
            w.add_array(f"a.{name}", values, vt)
            w.add_array(f"e.{name}", [], vt)
        w.add_string("s.str", "héllo ▁wörld")
        w.add_string("s.empty", "")
        w.add_array("a.str", ["a", "", "▁the", "<0x0A>", "日本"])
        w.add_array("a.bytes_str", [b"\xff\xfe raw"], "string")
        w.add_array("a.nested", [[1, 2, 3], [], [4]], "array")
        w.add_array("a.nested_str", [["x", "y"], ["z"]], "array")
        w.add_array("a.np_f32", np.linspace(0, 1, 1000, dtype=np.float32))
        w.add("inferred.int", 5)
        w.add("inferred.big", 2**40)
        w.add("inferred.float", 0.5)
        w.add("inferred.bool", True)
        w.add("inferred.np", np.uint16(7))
    with GGUFReader(p) as r:
        assert r.version == 3 and r.tensors == []
        f = r.fields
        for name, vt, values in SCALARS:
            for i, v in enumerate(values):
                fld = f[f"s.{name}.{i}"]
                assert fld.type == vt
                if vt == VT.FLOAT32:
                    assert fld.value == np.float32(v)
                else:
                    assert fld.value == v and type(fld.value) is type(v)
            arr = f[f"a.{name}"]
            assert arr.type == VT.ARRAY and arr.elem_type == vt
            assert list(arr.value) == [np.float32(v) if vt == VT.FLOAT32 else v for v in values]
            assert len(f[f"e.{name}"].value) == 0 and f[f"e.{name}"].elem_type == vt
        assert r.metadata["s.str"] == "héllo ▁wörld" and r.metadata["s.empty"] == ""
        assert r.metadata["a.str"] == ["a", "", "▁the", "<0x0A>", "日本"]
        raw = r.metadata["a.bytes_str"][0]
        assert raw.encode("utf-8", "surrogateescape") == b"\xff\xfe raw"
        assert [list(x) for x in r.metadata["a.nested"]] == [[1, 2, 3], [], [4]]
        assert r.metadata["a.nested_str"] == [["x", "y"], ["z"]]
        assert np.array_equal(r.metadata["a.np_f32"], np.linspace(0, 1, 1000, dtype=np.float32))
        assert f["inferred.int"].type == VT.INT32 and f["inferred.big"].type == VT.INT64
        assert f["inferred.float"].type == VT.FLOAT32 and f["inferred.bool"].type == VT.BOOL
        assert f["inferred.np"].type == VT.UINT16
        assert list(f) == list(r.metadata)   # file order kept


def _tensors(rng):
    return {
        "t.f32": (rng.standard_normal((3, 5, 7)).astype(np.float32), None, None),
        "t.f32_4d": (rng.standard_normal((2, 1, 3, 4)).astype(np.float32), None, None),
        "t.f16": (rng.standard_normal((33,)).astype(np.float16), None, None),
        "t.i32": (rng.integers(-9, 9, (4, 4)).astype(np.int32), None, None),
        "t.q8_0": (rng.integers(0, 256, (5, 2 * 34), dtype=np.uint8), "q8_0", (5, 64)),
        "t.q4_0": (rng.integers(0, 256, (3, 18), dtype=np.uint8), "q4_0", (3, 32)),
        "t.q4_K": (rng.integers(0, 256, (2, 144), dtype=np.uint8), "q4_K", (2, 256)),
        "t.bf16": (rng.integers(0, 2**16, (6,), dtype=np.uint16).view(np.uint8), "bf16", (6,)),
    }


@pytest.mark.parametrize("alignment", [32, 1, 64, 4096])
def test_roundtrip_tensors_bytes_identical(tmp_path, alignment):
    rng = np.random.default_rng(1)
    ts = _tensors(rng)
    p = str(tmp_path / "t.gguf")
    w = GGUFWriter(p, alignment=alignment)
    w.add_string("general.architecture", "test")
    for name, (arr, t, shape) in ts.items():
        w.add_tensor(name, arr, type=t, shape=shape)
    expected_size = w.total_bytes()
    w.write()
    assert os.path.getsize(p) == expected_size
    with GGUFReader(p) as r:
        assert r.alignment == alignment
        assert [t.name for t in r.tensors] == list(ts)
        for t in r.tensors:
            arr, ty, shape = ts[t.name]
            assert t.shape == (shape or arr.shape)
            assert t.type.name == (ty or {np.float32: "f32", np.float16: "f16",
                                          np.int32: "i32"}[arr.dtype.type])
            assert t.offset % alignment == 0 and t.file_offset % alignment == 0
            assert t.raw.tobytes() == arr.tobytes()
            assert t.nbytes == arr.nbytes
            if ty is None:
                assert t.data.dtype == arr.dtype and np.array_equal(t.data, arr)
            # a view into the mapping, not a copy
            assert not t.data.flags.owndata and not t.data.flags.writeable
        assert r.tensor("t.q4_K").data.shape == (2, 144)
        assert r.tensor("t.f32").ne == (7, 5, 3)


def test_reader_matches_gguf_package_on_written_file(tmp_path):
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(2)
    p = str(tmp_path / "x.gguf")
    with GGUFWriter(p) as w:
        w.add_uint32("a", 3)
        w.add_array("b", ["x", "yy"])
        for name, (arr, t, shape) in _tensors(rng).items():
            w.add_tensor(name, arr, type=t, shape=shape)
    theirs = gguf.GGUFReader(p)
    with GGUFReader(p) as ours:
        assert [t.name for t in theirs.tensors] == [t.name for t in ours.tensors]
        for a, b in zip(theirs.tensors, ours.tensors):
            assert int(a.tensor_type) == b.type.id
            assert tuple(int(x) for x in a.shape) == b.ne
            assert int(a.data_offset) == b.file_offset
            assert np.asarray(a.data).tobytes() == b.raw.tobytes()
        assert theirs.fields["b"].contents() == ours.metadata["b"]


def test_writer_streams_producers_in_order(tmp_path):
    calls = []

    def make(i):
        def produce():
            calls.append(i)
            yield np.full((2, 4), i, np.float32)
            yield np.full((1, 4), i, np.float32)
        return produce

    p = str(tmp_path / "s.gguf")
    w = GGUFWriter(p)
    for i in range(3):
        w.add_tensor(f"t{i}", make(i), type="f32", shape=(3, 4))
    assert calls == []                       # nothing generated before write()
    progress = []
    w.write(progress=lambda done, total, name: progress.append((done, total, name)))
    assert calls == [0, 1, 2]
    assert progress[-1][0] <= progress[-1][1] and [x[2] for x in progress][-1] == "t2"
    with GGUFReader(p) as r:
        for i, t in enumerate(r.tensors):
            assert np.array_equal(t.data, np.full((3, 4), i, np.float32))


def test_writer_failure_leaves_no_file(tmp_path):
    p = tmp_path / "fail.gguf"

    def boom():
        yield np.zeros((1, 4), np.float32)
        raise RuntimeError("generator failed")

    w = GGUFWriter(str(p))
    w.add_tensor("ok", np.zeros(4, np.float32))
    w.add_tensor("bad", boom, type="f32", shape=(2, 4))
    with pytest.raises(RuntimeError, match="generator failed"):
        w.write()
    assert os.listdir(tmp_path) == []

    # an existing file is left untouched; a short producer is a GGUFError
    p.write_bytes(b"old")
    w = GGUFWriter(str(p))
    w.add_tensor("short", lambda: np.zeros(3, np.float32), type="f32", shape=(4,))
    with pytest.raises(GGUFError, match="producer gave 12 bytes"):
        w.write()
    assert p.read_bytes() == b"old" and os.listdir(tmp_path) == ["fail.gguf"]

    w = GGUFWriter(str(p))
    w.add_tensor("long", lambda: np.zeros(5, np.float32), type="f32", shape=(4,))
    with pytest.raises(GGUFError, match="more than"):
        w.write()
    assert p.read_bytes() == b"old"


def test_writer_file_mode_follows_umask(tmp_path):
    p = str(tmp_path / "m.gguf")
    with GGUFWriter(p) as w:
        w.add_uint8("x", 1)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o666 & ~umask


def test_writer_rejects_bad_requests(tmp_path):
    w = GGUFWriter(str(tmp_path / "w.gguf"))
    w.add_uint32("k", 1)
    w.add_tensor("t", np.zeros(4, np.float32))
    bad = [
        lambda: w.add_uint32("k", 2),                                 # duplicate key
        lambda: w.add_uint8("u", 256),                                # out of range
        lambda: w.add_int32("i", 1.5),                                # float for int
        lambda: w.add_array("e", []),                                 # no element type
        lambda: w.add_array("m", [1, "a"]),                           # mixed
        lambda: w.add_array("r", [1, 300], "uint8"),                  # out of range
        lambda: w.add_string("s", 3),
        lambda: w.add("x", object()),
        lambda: w.add("general.alignment", 64, "uint32"),
        lambda: w.add_tensor("t", np.zeros(4, np.float32)),           # duplicate tensor
        lambda: w.add_tensor("x" * 64, np.zeros(4, np.float32)),      # name too long
        lambda: w.add_tensor("q", np.zeros(10, np.uint8), "q8_0", (40,)),   # row % block
        lambda: w.add_tensor("q2", np.zeros(10, np.uint8), "q8_0", (32,)),  # wrong byte count
        lambda: w.add_tensor("q3", np.zeros(34, np.uint8), "q8_0"),         # shape missing
        lambda: w.add_tensor("c", lambda: None),                           # producer w/o type
        lambda: w.add_tensor("b", np.zeros(4, np.bool_)),                  # no ggml type
        lambda: w.add_tensor("d", np.zeros((1, 1, 1, 1, 1), np.float32)),  # 5 dims
    ]
    for f in bad:
        with pytest.raises(GGUFError):
            f()
    with pytest.raises(GGUFError):
        GGUFWriter(str(tmp_path / "a.gguf"), alignment=48)
    with pytest.raises(GGUFError):
        GGUFWriter(str(tmp_path / "v.gguf"), version=1)


# ---------------------------------------------------------------- malformed files

def _valid_small(tmp_path):
    """A small valid file with metadata of several types and three tensors."""
    p = str(tmp_path / "valid.gguf")
    with GGUFWriter(p) as w:
        w.add_string("general.architecture", "llama")
        w.add_uint32("n", 7)
        w.add_array("toks", ["<unk>", "a", "bc", "▁def"])
        w.add_array("scores", np.arange(4, dtype=np.float32))
        w.add_array("nest", [[1], [2, 3]], "array")
        w.add_tensor("a", np.arange(6, dtype=np.float32).reshape(2, 3))
        w.add_tensor("b", np.zeros((2, 34), np.uint8), "q8_0", (2, 32))
        w.add_tensor("c", np.ones(5, np.float16))
    return p


def test_truncation_at_every_offset_raises_gguferror(tmp_path):
    p = _valid_small(tmp_path)
    data = open(p, "rb").read()
    with GGUFReader(p) as r:
        needed = max(t.file_offset + t.nbytes for t in r.tensors)
    assert needed <= len(data)
    cut = tmp_path / "cut.gguf"
    for n in range(len(data)):
        cut.write_bytes(data[:n])
        if n < needed:
            with pytest.raises(GGUFError):
                GGUFReader(str(cut))
        else:  # only trailing padding removed: still a complete file
            GGUFReader(str(cut)).close()


def test_truncated_sections_are_named(tmp_path):
    p = _valid_small(tmp_path)
    data = open(p, "rb").read()
    with GGUFReader(p) as r:
        meta_pos = r.fields["nest"].offset + 10
        data_pos = r.data_offset + 4
    expect_error(tmp_path, data[:3], "truncated")
    expect_error(tmp_path, data[:10], "truncated.*header")
    expect_error(tmp_path, data[:meta_pos], "truncated.*metadata")
    info_pos = data.rindex(s_("c")) + 12           # inside the last tensor info
    expect_error(tmp_path, data[:info_pos], "truncated.*tensor infos")
    expect_error(tmp_path, data[:data_pos], "past the end")
    expect_error(tmp_path, b"", "empty")


def test_random_corruption_never_escapes_as_other_exception(tmp_path):
    p = _valid_small(tmp_path)
    data = bytearray(open(p, "rb").read())
    rng = np.random.default_rng(7)
    f = tmp_path / "fuzz.gguf"
    outcomes = {"ok": 0, "err": 0}
    for _ in range(600):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            i = int(rng.integers(0, len(b)))
            b[i] = int(rng.integers(0, 256)) if rng.random() < 0.7 else b[i] ^ 0x80
        f.write_bytes(bytes(b))
        try:
            GGUFReader(str(f)).close()
            outcomes["ok"] += 1
        except GGUFError:
            outcomes["err"] += 1
    assert outcomes["err"] > 100


def test_wrong_magic_and_versions(tmp_path):
    expect_error(tmp_path, b"GGML" + b"\0" * 40, "wrong magic")
    expect_error(tmp_path, b"\x7fELF" + b"\0" * 40, "wrong magic")
    expect_error(tmp_path, raw_file(version=1), "unsupported GGUF version 1")
    expect_error(tmp_path, raw_file(version=4), "unsupported GGUF version 4")
    expect_error(tmp_path, b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian")
    for v in (2, 3):
        p = write_bytes(tmp_path, raw_file(version=v))
        with GGUFReader(p) as r:
            assert r.version == v


def test_absurd_counts(tmp_path):
    expect_error(tmp_path, raw_file(n_kv=2**40), "absurd metadata count")
    expect_error(tmp_path, raw_file(n_tensors=2**60), "absurd tensor count")
    expect_error(tmp_path, raw_file(n_kv=2**64 - 1), "absurd metadata count")
    # array longer than the file can hold: refused before allocating
    big = kv("a", VT.ARRAY, struct.pack("<IQ", VT.UINT64, 2**61))
    expect_error(tmp_path, raw_file([big]), "array 'a'.*claims")
    big_s = kv("a", VT.ARRAY, struct.pack("<IQ", VT.STRING, 2**50))
    expect_error(tmp_path, raw_file([big_s]), "claims")


def test_strings_longer_than_the_file(tmp_path):
    expect_error(tmp_path, raw_file([struct.pack("<Q", 2**63) + b"key"]), "string too long")
    long_val = s_("k") + struct.pack("<I", VT.STRING) + struct.pack("<Q", 10**6) + b"abc"
    expect_error(tmp_path, raw_file([long_val]), "string too long.*'k'")
    arr = kv("k", VT.ARRAY, struct.pack("<IQ", VT.STRING, 2) + s_("ok")
             + struct.pack("<Q", 2**40) + b"x")
    expect_error(tmp_path, raw_file([arr]), "string too long: string 1 of array 'k'")
    ti = struct.pack("<Q", 2**62) + b"name"
    expect_error(tmp_path, raw_file([], [ti]), "string too long")


def test_bad_metadata(tmp_path):
    expect_error(tmp_path, raw_file([kv("k", 13, b"\0" * 8)]), "unknown value type 13")
    expect_error(tmp_path, raw_file([kv("k", VT.ARRAY, struct.pack("<IQ", 99, 0))]),
                 "unknown value type 99")
    dup = kv("k", VT.UINT8, b"\1")
    expect_error(tmp_path, raw_file([dup, dup]), "duplicate metadata key 'k'")
    expect_error(tmp_path, raw_file([kv(b"\xff\xfe", VT.UINT8, b"\1")]), "not valid UTF-8")
    nested = struct.pack("<IQ", VT.ARRAY, 1) * 20 + struct.pack("<IQ", VT.UINT8, 0)
    expect_error(tmp_path, raw_file([kv("deep", VT.ARRAY, nested)]), "nested deeper")
    for payload, msg in [(struct.pack("<I", 0), "power of two"), (struct.pack("<I", 48), "power"),
                         (None, "must be uint32")]:
        e = (kv("general.alignment", VT.UINT32, payload) if payload is not None
             else kv("general.alignment", VT.UINT64, struct.pack("<Q", 32)))
        expect_error(tmp_path, raw_file([e]), msg)


F32 = 0


def test_bad_tensor_infos(tmp_path):
    d = b"\0" * 64
    cases = [
        ([tinfo("t", [4], 77, 0)], "unknown type id 77"),
        ([tinfo("t", [4], 16 + 100, 0)], "unknown type id"),
        ([tinfo("t", [1, 1, 1, 1, 1], F32, 0)], "5 dims"),
        ([tinfo("t", [4, 0], F32, 0)], "dim 0"),
        ([tinfo("t", [4, 2**64 - 1], F32, 0)], "dim -1"),
        ([tinfo("t", [2**40, 2**40], F32, 0)], "overflows"),
        ([tinfo("t", [4], F32, 0), tinfo("t", [4], F32, 32)], "duplicate tensor name 't'"),
        ([tinfo("t", [4], F32, 8)], "misaligned"),
        ([tinfo("t", [4], F32, 64)], "past the end"),
        ([tinfo("t", [1000], F32, 0)], "past the end"),
        ([tinfo("t", [2**62], F32, 0)], "past the end"),
        ([tinfo("t", [2**61, 2], F32, 0)], "past the end"),
        ([tinfo("t", [2**64 - 32 + 0], F32, 0)], "dim"),
        ([tinfo("t", [4], F32, 2**64 - 32)], "past the end"),
        ([tinfo("q", [48], 8, 0)], "not a multiple of q8_0's block size 32"),
        ([tinfo("n" * 64, [4], F32, 0)], "too long|allows at most"),
        ([tinfo("t", [16], F32, 0), tinfo("u", [4], F32, 32)], "'u'.*overlaps tensor 't'"),
        ([tinfo("t", [4], F32, 32), tinfo("u", [4], F32, 32)], "overlaps"),
        ([tinfo(b"\xc3\x28", [4], F32, 0)], "not valid UTF-8"),
    ]
    for infos, msg in cases:
        expect_error(tmp_path, raw_file([], infos, d), msg)
    # the same kind of file with sane values parses (so the cases above fail for their reason)
    p = write_bytes(tmp_path, raw_file([], [tinfo("t", [4], F32, 0), tinfo("u", [2, 3], 1, 32)], d))
    with GGUFReader(p) as r:
        assert [(t.name, t.shape) for t in r.tensors] == [("t", (4,)), ("u", (3, 2))]


def test_alignment_key_is_honoured(tmp_path):
    a = kv("general.alignment", VT.UINT32, struct.pack("<I", 64))
    body = raw_file([a], [tinfo("t", [4], F32, 0), tinfo("u", [4], F32, 64)],
                    np.arange(32, dtype=np.float32).tobytes(), align=64)
    p = write_bytes(tmp_path, body)
    with GGUFReader(p) as r:
        assert r.alignment == 64 and r.data_offset % 64 == 0
        assert list(r.tensor("u").data) == [16, 17, 18, 19]
    bad = raw_file([a], [tinfo("t", [4], F32, 32)], b"\0" * 128, align=64)
    expect_error(tmp_path, bad, "misaligned.*64")


def test_missing_file_is_an_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        GGUFReader(str(tmp_path / "nope.gguf"))


def test_close_with_live_views(tmp_path):
    p = _valid_small(tmp_path)
    r = GGUFReader(p)
    view = r.tensor("a").data
    r.close()                         # views keep the mapping alive; no BufferError escapes
    assert view[1, 2] == 5
    with pytest.raises(GGUFError, match="closed"):
        r.tensor("a").data


def test_reader_to_writer_copy_is_byte_identical(tmp_path):
    """Every field and tensor read back and written again gives the same file, byte for byte."""
    src = str(tmp_path / "src.gguf")
    rng = np.random.default_rng(5)
    with GGUFWriter(src, alignment=64) as w:
        w.add_string("s", "x\u2581y")
        w.add_array("a", [b"\xff\x00", "ok"], "string")
        w.add_array("n", [[1.5], [2.5, 3.5]], "array")
        w.add_array("b", [True, False, True])
        w.add_uint64("u", 2**64 - 1)
        w.add_float64("d", 0.1)
        for name, (arr, t, shape) in _tensors(rng).items():
            w.add_tensor(name, arr, type=t, shape=shape)
    dst = str(tmp_path / "dst.gguf")
    with GGUFReader(src) as r:
        w = GGUFWriter(dst, alignment=r.alignment, version=r.version)
        for f in r.fields.values():
            if f.key != "general.alignment":
                w.add(f.key, f.value, f.type, f.elem_type)
        for t in r.tensors:
            w.add_tensor(t.name, t.data, type=t.type.id, shape=t.shape)
        w.write()
    assert open(src, "rb").read() == open(dst, "rb").read()
