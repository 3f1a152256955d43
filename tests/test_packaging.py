"""Packaging: the build metadata, the CPU plugin flags kept in step between setup.py and the
Makefile, pyggml.get_include(), plugins found through installed packages' entry points, and an
sdist built here, turned into a wheel and installed into a fresh environment that runs from /."""
import ast
import glob
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile

import pytest

import pyggml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _make_var(path, name):
    with open(os.path.join(ROOT, path)) as f:
        m = re.search(rf"^{name}\s*:=\s*(.*)$", f.read(), re.M)
    return m.group(1).split()


def _setup_lists():
    tree = ast.parse(open(os.path.join(ROOT, "setup.py")).read())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("PLUGIN_CFLAGS", "PLUGIN_LDFLAGS", "CPU_LIBS"):
                out[name] = ast.literal_eval(node.value)
            elif name == "CPU_CFLAGS":
                out[name] = ast.literal_eval(node.value.right)
    return out


def test_cpu_plugin_flags_match_the_makefile():
    s = _setup_lists()
    assert s["PLUGIN_CFLAGS"] == _make_var("Makefile", "PLUGIN_CFLAGS")
    assert s["PLUGIN_LDFLAGS"] == _make_var("Makefile", "PLUGIN_LDFLAGS")
    assert ["$(PLUGIN_CFLAGS)"] + s["CPU_CFLAGS"] == _make_var("plugins/cpu/cpu.mk", "CPU_CFLAGS")
    with open(os.path.join(ROOT, "plugins/cpu/cpu.mk")) as f:
        assert " ".join(s["CPU_LIBS"]) in f.read()


def test_pyproject():
    tomllib = pytest.importorskip("tomllib", reason="tomllib needs Python 3.11")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        pp = tomllib.load(f)
    req = " ".join(pp["build-system"]["requires"]).lower()
    assert "setuptools" in req and "cython" in req and "numpy" not in req
    deps = " ".join(pp["project"]["dependencies"])
    for d in ("numpy", "tqdm", "jinja2", "tokenizers", "cffi"):
        assert d in deps
    assert pp["project"]["scripts"]["pyggml"] == "pyggml.cli:main"


def test_get_include_builds_a_plugin_source(tmp_path):
    inc = pyggml.get_include()
    assert os.path.isfile(os.path.join(inc, "pyggml", "plugin.h"))
    src = tmp_path / "p.c"
    src.write_text('#include "pyggml/pyggml.h"\nint n = PYG_ABI_MAJOR;\n')
    r = subprocess.run(["cc", "-c", "-I", inc, str(src), "-o", str(tmp_path / "p.o")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_plugins_from_entry_points(c_builder, tmp_path):
    lib = c_builder("libpyggml-epdemo.so", ["tests/plugins/broken/broken.c"],
                    defines=["BROKEN_NO_DEVICE", 'BROKEN_NAME="epdemo"'])
    site = tmp_path / "site"
    (site / "epdemo-1.0.dist-info").mkdir(parents=True)
    (site / "epdemo-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: epdemo\nVersion: 1.0\n")
    (site / "epdemo-1.0.dist-info" / "entry_points.txt").write_text(
        "[pyggml.plugins]\nepdemo = epdemo_mod:plugin_path\nbroken = epdemo_mod:missing\n")
    (site / "epdemo_mod.py").write_text(f"def plugin_path():\n    return {os.path.dirname(lib)!r}\n")
    code = textwrap.dedent("""
        import pyggml as pg
        ps = {p.name: p for p in pg.plugins()}
        print(ps["epdemo"].path, ps["epdemo"].available, ps["epdemo"].unavailable_reason)
        print([m for _, m in pg.failures()])
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), ROOT]))
    r = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.splitlines()
    assert first.startswith(lib) and "False" in first and "no widget driver" in first
    assert "AttributeError" in second and "missing" in second


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    """The sdist, built by setuptools' PEP 517 backend (no network, no build isolation)."""
    out = tmp_path_factory.mktemp("sdist")
    code = f"from setuptools import build_meta as b; print(b.build_sdist({str(out)!r}))"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return os.path.join(str(out), r.stdout.strip().splitlines()[-1])


def test_sdist_contents(sdist):
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for need in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "Makefile", "pyggml/_plugin.pyx",
                 "pyggml/_sched.pyx", "pyggml/_abi.pxd", "pyggml/_abi_check.h", "include/pyggml/plugin.h",
                 "plugins/plugin.map", "plugins/cpu/cpu.mk", "plugins/cpu/plugin.c", "plugins/cuda/cuda.mk",
                 "pyggml/text/tokenizer.py", "pyggml/py.typed", "pyggml/_sched.pyi"):
        assert need in names, need
    assert not [n for n in names if n.endswith((".so", ".o")) or n in ("pyggml/_sched.c", "pyggml/_plugin.c")]


@pytest.mark.slow
def test_wheel_from_sdist_installs_and_runs_from_root(sdist, tmp_path):
    """sdist -> wheel (Cython core + CPU plugin compiled here) -> a fresh venv -> `pyggml devices`
    and get_include() from /. Takes a few minutes on 2 cores."""
    wheels = tmp_path / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(wheels), sdist], capture_output=True, text=True, timeout=1800,
                       env=dict(os.environ, PATH=os.pathsep.join(
                           p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "nvcc")))))
    assert r.returncode == 0, r.stderr[-3000:]
    whl = glob.glob(str(wheels / "pyggml-*.whl"))[0]
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
    assert "pyggml/plugins/libpyggml-cpu.so" in names and "pyggml/include/pyggml/plugin.h" in names
    assert any(n.startswith("pyggml/_sched.") and n.endswith(".so") for n in names)
    assert not [n for n in names if "libpyggml-" in n and "cpu" not in n]       # GPU plugins ship separately
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    # the dependencies (numpy, ...) and pip come from this test's environment, after the venv's own
    # site-packages (a .pth file): no network, and pyggml only from the wheel
    import site
    venv_site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(venv_site, "_outer_env.pth"), "w") as f:
        f.write("\n".join(p for p in site.getsitepackages() + [site.getusersitepackages()] if os.path.isdir(p)))
    r = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-index", "-q", whl],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYGGML_PLUGIN_PATH")}
    r = subprocess.run([str(venv / "bin" / "pyggml"), "devices"], cwd="/", env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("cpu:0") and str(venv) in r.stdout, r.stdout + r.stderr
    r = subprocess.run([py, "-c", "import pyggml; print(pyggml.__file__, pyggml.get_include())"], cwd="/", env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count(str(venv)) == 2, r.stdout + r.stderr


@pytest.mark.parametrize("mod", ["_plugin", "_sched"])
def test_stubs_cover_the_cython_modules(mod):
    """Every public class and function of the compiled module is in its .pyi, with each public
    method of the classes."""
    import importlib
    import inspect
    m = importlib.import_module(f"pyggml.{mod}")
    stub = ast.parse(open(os.path.join(ROOT, "pyggml", f"{mod}.pyi")).read())
    names = {n.name: n for n in stub.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    for name, obj in vars(m).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != m.__name__:
            continue
        if not (inspect.isclass(obj) or callable(obj)):
            continue
        assert name in names, f"{name} is missing from {mod}.pyi"
        if inspect.isclass(obj):
            body = names[name].body
            have = {n.name for n in body if isinstance(n, ast.FunctionDef)}
            have |= {n.target.id for n in body if isinstance(n, ast.AnnAssign)}
            for attr, v in vars(obj).items():
                public = not attr.startswith("_") or attr in ("__enter__", "__exit__")
                if public and (inspect.isfunction(v) or isinstance(v, property)):
                    assert attr in have, f"{name}.{attr} is missing from {mod}.pyi"


def test_scheduler_and_model_are_context_managers(tmp_path):
    from pyggml.synth import write_synth_model
    import numpy as np
    g = pyggml.Graph()
    y = pyggml.scale(g.input("x", (2,)), 2.0)
    x = np.array([1.0, 2.0], np.float32)
    with pyggml.Scheduler("cpu") as s:
        assert s.compute(y, {"x": x}).tolist() == [2.0, 4.0]
    with pytest.raises(pyggml.ClosedError):
        s.compute(y, {"x": x})
    p = str(tmp_path / "t.gguf")
    write_synth_model(p, "tiny", "f16", seed=1, progress=False)
    with pyggml.load(p, n_ctx=16, progress=False) as m:
        assert m.sched is not None
    assert m.sched is None and m.reader is None
    assert (tmp_path / "py.typed").exists() or os.path.exists(os.path.join(ROOT, "pyggml", "py.typed"))
