"""The plugin SDK: examples/plugin-template builds alone against include/ with its version script
and passes `pyggml check`; mutated copies fail the rule they break (the library rules are real
checks); the header helpers compute what they promise."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "examples", "plugin-template")
CC = shutil.which(os.environ.get("CC", "cc"))
pytestmark = pytest.mark.skipif(CC is None or shutil.which("make") is None, reason="no C compiler or make")


def _build(tmp_path, edit=None, ldflags=""):
    d = tmp_path / "plugin"
    shutil.copytree(TEMPLATE, d)
    if edit:
        src = d / "template.c"
        text = src.read_text()
        assert edit[0] in text, edit[0]
        src.write_text(text.replace(edit[0], edit[1]))
    r = subprocess.run(["make", "-C", str(d), f"PYGGML_INCLUDE={ROOT}/include",
                        "PLUGIN_LDFLAGS=-shared -Wl,--version-script=template.map -Wl,--no-undefined " + ldflags],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(d / "libpyggml-template.so")


def _check(lib, *extra):
    r = subprocess.run([sys.executable, "-m", "pyggml", "check", "--async-mb", "2", "--async-rounds", "2", *extra, lib],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    return r.returncode, r.stdout + r.stderr


@pytest.mark.slow
def test_template_builds_alone_and_passes_check(tmp_path):
    lib = _build(tmp_path)
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout.split()
    assert nm[-1] == "pyg_plugin_get_api" and nm.count("pyg_plugin_get_api") == 1
    rc, out = _check(lib)
    assert rc == 0, out
    for rule in ("R1", "R2", "R3", "R4", "R5", "R6", "R8 R9", "R13", "R14", "R15", "R16", "R17"):
        assert f"pass {rule} " in out, (rule, out)
    assert "0 failed" in out.splitlines()[-1]


def test_check_fails_a_crashing_null_destroy(tmp_path):
    """R6 runs in a child process: a stream_destroy that dereferences NULL fails R6, named."""
    lib = _build(tmp_path, ("static void stream_destroy(pyg_stream *s) { free(s); }",
                            "static void stream_destroy(pyg_stream *s) { pyg_device *volatile d = s->dev; (void)d; free(s); }"))
    rc, out = _check(lib, "--no-ops", "--no-async")
    assert rc == 1 and "FAIL R6" in out and "stream_destroy(NULL) crashed" in out, out


def test_check_fails_a_library_that_needs_more_than_libc(tmp_path):
    """R2: a NEEDED entry beyond the C runtime (here libz forced in by --no-as-needed, standing for a
    vendor runtime) fails R2."""
    lib = _build(tmp_path, ldflags="-Wl,--no-as-needed -lz")
    if "libz" not in subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout:
        pytest.skip("no libz to link here")
    rc, out = _check(lib, "--no-ops", "--no-async")
    assert rc == 1 and "FAIL R2" in out and "libz" in out, out


def test_tensor_nbytes_of_a_transposed_view(tmp_path):
    """pyg_tensor_nbytes spans exactly the bytes a view touches: for a transposed f32 [3 x 5]
    (ne 3, 5; nb 20, 4) the last element is at 2*20 + 4*4 = 56, so 60 bytes, not 3*20 + 16 = 76."""
    src = tmp_path / "nbytes.c"
    src.write_text('#include <stdio.h>\n#include "pyggml/pyggml.h"\nint main(void) {\n'
                   "  pyg_tensor t = {0}; t.type = PYG_TYPE_F32;\n"
                   "  t.ne[0] = 3; t.ne[1] = 5; t.ne[2] = t.ne[3] = 1; t.nb[0] = 20; t.nb[1] = 4; t.nb[2] = t.nb[3] = 60;\n"
                   "  printf(\"%llu \", (unsigned long long)pyg_tensor_nbytes(&t));\n"
                   "  pyg_tensor q = {0}; q.type = PYG_TYPE_Q4_0; q.ne[0] = 64; q.ne[1] = 2; q.ne[2] = q.ne[3] = 1;\n"
                   "  q.nb[0] = 18; q.nb[1] = 36; q.nb[2] = q.nb[3] = 72;\n"
                   "  printf(\"%llu\\n\", (unsigned long long)pyg_tensor_nbytes(&q));\n  return 0;\n}\n")
    exe = tmp_path / "nbytes"
    subprocess.run([CC, "-std=c11", "-I", os.path.join(ROOT, "include"), "-o", str(exe), str(src)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split() == ["60", "72"]
    import pyggml as pg
    g = pg.Graph()
    x = g.input("x", (5, 3))
    assert pg.transpose(x).nbytes == 60 and x.nbytes == 60
