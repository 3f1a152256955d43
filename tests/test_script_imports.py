"""The device-call scripts and benches run where nothing can be fixed (the GPU machine, minutes of
budget): every `from pyggml... import name` in scripts/*.py and bench/*.py must name something that
exists, so a rename in the package cannot break them unseen (bench_pyggml's removal broke two)."""
import ast
import glob
import importlib
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.py")) + glob.glob(os.path.join(ROOT, "bench", "*.py")))


def _pyggml_imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "pyggml":
            yield node.lineno, node.module, [a.name for a in node.names]


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_pyggml_names_a_script_imports_exist(path):
    missing = []
    for line, module, names in _pyggml_imports(path):
        mod = importlib.import_module(module)
        for name in names:
            if name != "*" and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")     # a submodule
                except ImportError:
                    missing.append(f"line {line}: from {module} import {name}")
    assert not missing, missing


def test_the_check_sees_a_missing_name(tmp_path):
    p = tmp_path / "s.py"
    p.write_text("from pyggml.bench_model import bench_pyggml\n")
    with pytest.raises(AssertionError, match="bench_pyggml"):
        test_pyggml_names_a_script_imports_exist(str(p))
