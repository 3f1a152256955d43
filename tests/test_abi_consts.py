"""One source of truth for the ABI constants: pyggml/_abi_consts.py is generated from
include/pyggml/*.h (scripts/gen_abi.py). Here: the committed file is what the headers give, and the
C compiler agrees with it on every constant, every type's traits and every struct's layout."""
import os
import shutil
import subprocess
import sys

import pytest

from pyggml import _abi_consts as A

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = shutil.which(os.environ.get("CC", "cc"))
STRUCTS = ["pyg_tensor", "pyg_graph", "pyg_host_info", "pyg_device_props", "pyg_buffer_info", "pyg_plugin_api",
           "pyg_type_traits"]


def test_generated_file_is_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_abi.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _constants():
    return {k: v for k, v in vars(A).items() if k.isupper() and isinstance(v, int)}


@pytest.fixture(scope="module")
def c_view(tmp_path_factory):
    """What the C compiler says: NAME value lines for every constant, traits, sizes and offsets."""
    if CC is None:
        pytest.skip("no C compiler")
    import cffi
    ffi = cffi.FFI()
    ffi.cdef(A.CDEF)
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "pyggml/pyggml.h"', "int main(void) {"]
    for k in _constants():
        lines.append(f'    printf("{k} %lld\\n", (long long)(PYG_{k}));')
    for tid in range(A.TYPE_COUNT):
        lines.append(f"    {{ const pyg_type_traits *t = pyg_type_get_traits({tid}); if (t) "
                     f'printf("traits {tid} %s %d %d %d\\n", t->name, t->block_size, t->type_size, t->is_quantized); }}')
    for op in range(A.OP_COUNT):
        lines.append(f'    printf("op {op} %s\\n", pyg_op_name({op}));')
    for s in STRUCTS:
        lines.append(f'    printf("sizeof {s} %zu\\n", sizeof({s}));')
        for name, _ in ffi.typeof(s).fields:
            lines.append(f'    printf("offsetof {s}.{name} %zu\\n", offsetof({s}, {name}));')
    lines += ["    return 0;", "}"]
    d = tmp_path_factory.mktemp("abi")
    src, exe = d / "abi.c", d / "abi"
    src.write_text("\n".join(lines))
    r = subprocess.run([CC, "-std=c11", "-Wall", "-I", os.path.join(ROOT, "include"), "-o", str(exe), str(src)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    return ffi, out


def test_constants_match_the_compiler(c_view):
    _, out = c_view
    got = {ln.split()[0]: int(ln.split()[1]) for ln in out if ln.split()[0].isupper()}
    assert got == _constants()


def test_type_traits_and_op_names_match_the_compiler(c_view):
    _, out = c_view
    traits = {int(p[1]): (p[2], int(p[3]), int(p[4]), int(p[5])) for p in (ln.split() for ln in out)
              if p[0] == "traits"}
    assert traits == A.TYPE_TRAITS
    ops = tuple(ln.split()[2] for ln in out if ln.startswith("op "))
    assert ops == A.OP_NAMES


def test_struct_layouts_match_the_compiler(c_view):
    """The cffi declarations (CDEF) lay every struct out exactly as the compiler does."""
    ffi, out = c_view
    for ln in out:
        kind, what, value = (ln.split() + ["", ""])[:3]
        if kind == "sizeof":
            assert ffi.sizeof(what) == int(value), what
        elif kind == "offsetof":
            s, field = what.split(".")
            assert ffi.offsetof(s, field) == int(value), what


def test_python_tables_come_from_the_headers():
    """types.py, graph.py and gguf.py read the generated tables (no copies of their own)."""
    import pyggml as pg
    from pyggml import gguf, graph, types
    assert {t.id: (t.name, t.block_size, t.type_size) for t in types.BY_ID.values()} == \
        {k: v[:3] for k, v in A.TYPE_TRAITS.items()}
    assert graph.OP == {n: i for i, n in enumerate(A.OP_NAMES)}
    assert all(gguf.GGML_TYPES[k].in_abi and gguf.GGML_TYPES[k].type_size == v[2] for k, v in A.TYPE_TRAITS.items())
    assert pg.f32.id == A.TYPE_F32
