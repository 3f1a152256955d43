"""debug_mv_parts, the measurement switch of mul_mat_vec3w (matvec=6): 1 stages zeros instead of reading
and quantizing the activation row, 2 skips the weight loads. Either way every dot product is zero:
the results are zeros, by design, and the whole mat-vec is back at 0. scripts/vulkan_matvec_sweep.py
times the parts (kernels mv3w_nostage, mv3w_noweights) to split a mat-vec's GPU time."""
import numpy as np
import pytest

import pyggml as pg
from test_vulkan_kernels import VK, _int_dot_kernels, _run

pytestmark = pytest.mark.skipif(VK is None, reason="no Vulkan device (install lavapipe: .ci/apt-vulkan.sh)")


@pytest.mark.parametrize("parts", ["1", "2"])
@pytest.mark.parametrize("m,k", [(37, 256), (259, 4096)])
def test_mv_parts_give_zeros(parts, m, k):
    e, kernels = _run("q4_0", (m, k), (1, k), {"matvec": "6", "debug_mv_parts": parts}, seed=m + k)
    assert kernels in _int_dot_kernels("6"), kernels
    if kernels == ["mul_mat_vec3w"]:   # (a device without the integer dot product runs mul_mat_vec3: no switch)
        assert e == pytest.approx(1.0), f"NMSE {e:.3g}: the parts switch should leave zeros (NMSE 1)"
    e, kernels = _run("q4_0", (m, k), (1, k), {"matvec": "6"}, seed=m + k)   # the switch reset: the whole mat-vec
    assert e <= 5e-4, f"NMSE {e:.3g}"


def test_mv_parts_values():
    dev = pg.get_device(VK)
    for bad in ("3", "-1"):
        with pytest.raises(pg.PyggmlError, match="debug_mv_parts"):
            dev.set_option("debug_mv_parts", bad)
    dev.set_option("debug_mv_parts", "0")
