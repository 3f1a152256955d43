"""Options of the op micro-benchmarks (bench/test_ops_bench.py, pytest-benchmark)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def pytest_addoption(parser):
    parser.addoption("--device", default="cpu", help="pyggml device the ops run on (numpy is measured beside it)")
    parser.addoption("--size", default="full", choices=["full", "quick"], help="quick: small shapes (a smoke run)")
