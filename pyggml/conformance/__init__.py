"""The op conformance suite: every op on random data against a float64 numpy reference, run on
any plugin's device (`pyggml check path/to/libpyggml-foo.so`, or tests/test_ops.py)."""
from .cases import CASES, Case, nmse
from .runner import run_case, run_all
