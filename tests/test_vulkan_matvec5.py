"""matvec=8: mul_mat_vec5.comp, the q4_0 decode mat-vec with the activations in registers and the
weights streamed (units of two blocks along K per invocation, 8 rows per row group, 1, 2 or 4 row
groups per workgroup by K), against numpy in float64; where it does not apply (q8_0, several
columns, rows off 16 bytes) matvec=8 runs as 6."""
import numpy as np
import pytest

from pyggml.conformance.cases import nmse
from test_vulkan_kernels import VK, _decode_model, _int_dot_kernels, _run

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.parametrize("m,k", [(37, 256), (9, 768), (2048, 2048), (259, 4096), (101, 5632), (4096, 4096),
                                 (1000, 11008), (32000, 2048), (1, 8192)])
def test_matvec5(m, k):
    """Float dot products of each pair of blocks with its 64 activations: numpy's to f32 rounding at
    the models' K (2048: four row groups a workgroup; 4096 and 5632: two, 5632 in two rounds with
    idle invocations; 11008: one, two rounds), a K of 4 units (most invocations idle), M not a
    multiple of 8 or of the workgroup's rows, 32000 rows (the vocabulary), one row."""
    e, kernels = _run("q4_0", (m, k), (1, k), {"matvec": "8"}, seed=m + k)
    assert e <= 1e-9, f"NMSE {e:.3g}"
    assert kernels == ["mul_mat_vec5"], kernels


@pytest.mark.parametrize("wdt,wshape,xshape", [("q8_0", (37, 512), (1, 512)), ("q4_0", (37, 512), (2, 512)),
                                               ("q4_0", (2, 1, 20, 512), (2, 6, 1, 512))])
def test_matvec5_falls_back(wdt, wshape, xshape):
    """Where mul_mat_vec5 does not apply (q8_0; two columns; batch axes) matvec=8 runs as 6."""
    e, kernels = _run(wdt, wshape, xshape, {"matvec": "8"}, seed=5)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert kernels in _int_dot_kernels("6"), kernels


def test_matvec5_unaligned_activations():
    """Activations that start 4 bytes into their row (not on 16 bytes): not mul_mat_vec5's layout."""
    e, kernels = _run("q4_0", (37, 512), (1, 512), {"matvec": "8"}, x_offset=1, seed=6)
    assert e <= 5e-4, f"NMSE {e:.3g}"
    assert "mul_mat_vec5" not in kernels, kernels


def test_matvec5_model_decode(tmp_path):
    """A small synthetic q4_0 LLaMA decodes with matvec=8 to within mul_mat's NMSE threshold of the float
    mat-vec's logits (matvec=2), every step, its one-column mat-vecs on mul_mat_vec5 (the prompt's
    four-column graph runs mul_mat_vec3w's int8 activations: hence not f32 rounding)."""
    run = _decode_model(tmp_path, "q4_0", 5)
    new, k8 = run({"matvec": "8", "fuse_norm_mv": "off"})
    old, k2 = run({"matvec": "2"})
    assert "mul_mat_vec5" in k8 and "mul_mat_vec5" not in k2, (k8, k2)
    for step, (a, b) in enumerate(zip(new, old)):
        assert nmse(a, b) <= 5e-4, f"step {step}: NMSE {nmse(a, b):.3g}"
