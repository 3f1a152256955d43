"""The CUDA decode flash attention (plugins/cuda/flash_attn_dec.cu) without a GPU: its kernel runs on
host fibers through plugins/cuda/test/vendor_emu.h (shuffles, barriers, the block counters of the
folded merge) and is checked against a double-precision reference by plugins/cuda/test/
fattn_dec_host.cpp, over head sizes, grouped-query widths, split counts (the multiprocessor count
sets them), masks with holes (hidden cells hold NaN, so reading one fails), the sparse path, softcap,
ALiBi, several query rows and batches, and the int8 activations it writes for the next mat-vec.
On a GPU the same kernel is checked by the op suite and test_cuda_build.py."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CXX = shutil.which("g++") or shutil.which("c++")


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    if CXX is None:
        pytest.skip("no host C++ compiler")
    exe = str(tmp_path_factory.mktemp("fattn_dec") / "fattn_dec_host")
    r = subprocess.run([CXX, "-std=c++17", "-O2", "-include", os.path.join(ROOT, "plugins", "cuda", "test", "vendor_emu.h"),
                        "-I", os.path.join(ROOT, "include"),
                        "-I", os.path.join(ROOT, "plugins", "cuda"), "-o", exe,
                        os.path.join(ROOT, "plugins", "cuda", "test", "fattn_dec_host.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def _run(exe, *args):
    r = subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


# D, G, H_kv, n_q, B, n_kv, n_ctx, mask, sparse, n_sm, softcap, max_bias, quant, mask_f32
CASES = [
    (64, 4, 2, 1, 1, 300, 512, "prefix:250", 0, 132, 0, 0, 1, 0),     # the 1b layout, folded merge + int8
    (64, 4, 2, 1, 1, 40, 64, "prefix:33", 0, 132, 0, 0, 1, 0),        # one split: output written directly
    (128, 1, 4, 1, 1, 1000, 1024, "prefix:1000", 0, 132, 0, 0, 1, 0),  # the 7b layout, 64 splits
    (128, 1, 4, 1, 1, 1000, 1024, "prefix:700", 0, 7, 0, 0, 0, 0),     # a few long splits, masked tail
    (128, 2, 2, 1, 1, 512, 600, "holes:0.5", 0, 16, 0, 0, 0, 0),
    (128, 8, 1, 1, 1, 256, 256, "prefix:256", 0, 132, 0, 0, 1, 0),
    (256, 2, 2, 1, 1, 200, 256, "holes:0.3", 0, 8, 0, 0, 0, 0),
    (256, 8, 1, 1, 1, 96, 128, "prefix:90", 0, 132, 0, 0, 0, 1),
    (64, 1, 3, 1, 1, 129, 256, "none", 0, 132, 0, 0, 0, 0),
    (64, 2, 2, 3, 2, 300, 320, "prefix:280", 0, 16, 0, 0, 0, 0),      # query rows (causal) and batches
    (64, 4, 2, 2, 1, 100, 128, "empty", 0, 132, 0, 0, 0, 0),          # a row that sees nothing: zeros
    (128, 4, 2, 1, 1, 300, 300, "holes:0.2", 0, 132, 30.0, 8.0, 0, 0),  # softcap and ALiBi
    (64, 4, 2, 1, 1, 300, 512, "holes:0.9", 1, 132, 0, 0, 1, 0),      # sparse: compacted live cells
    (128, 1, 4, 1, 1, 4096, 4096, "holes:0.97", 1, 132, 0, 0, 0, 0),  # sparse at its 4096 bound
    (128, 2, 2, 2, 1, 700, 800, "prefix:600", 1, 16, 0, 4.0, 0, 1),
    (64, 4, 1, 1, 1, 4352, 4352, "holes:0.5", 1, 132, 0, 0, 0, 0),    # past 4096: the dense path
    (256, 4, 1, 1, 1, 70, 80, "holes:0.5", 1, 4, 10.0, 0, 1, 0),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "D{}-G{}-hkv{}-q{}-b{}-kv{}-{}-sp{}-sm{}".format(
    c[0], c[1], c[2], c[3], c[4], c[5], c[7], c[8], c[9]))
def test_decode_kernel_matches_the_reference(harness, case):
    rc, out = _run(harness, *case)
    assert rc == 0 and out.strip().endswith("ok"), out


def test_unsupported_shapes_are_left_to_the_other_kernels(harness):
    rc, out = _run(harness, 96, 2, 2, 1, 1, 100, 128, "none", 0, 132)     # D 96: not this kernel's
    assert rc == 3 and "not usable" in out
    rc, out = _run(harness, 64, 3, 2, 1, 1, 100, 128, "none", 0, 132)     # 3 heads per kv head
    assert rc == 3
