"""Builds pyggml: the Cython core (pyggml._plugin, pyggml._sched), the CPU plugin
(pyggml/plugins/libpyggml-cpu.so: plain C11, any C compiler, no SDK) and a copy of the ABI headers
under pyggml/include for plugin authors (pyggml.get_include()). Metadata lives in pyproject.toml.

GPU plugins are not built here (README, "GPU backends"): `make` builds them in a checkout, and an
installed pyggml finds them in its plugins folder, in PYGGML_PLUGIN_PATH, or in a separately
installed package that names its library under the `pyggml.plugins` entry-point group.
"""
import os
import shlex
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))

# The CPU plugin's compile and link flags: the Makefile's PLUGIN_CFLAGS/PLUGIN_LDFLAGS plus
# plugins/cpu/cpu.mk's CPU_CFLAGS (tests/test_packaging.py checks that the three agree).
PLUGIN_CFLAGS = ["-g", "-fPIC", "-fvisibility=hidden", "-Iinclude", "-Wall", "-Wextra", "-Wno-unused-parameter"]
CPU_CFLAGS = PLUGIN_CFLAGS + ["-std=gnu11", "-O3", "-Iplugins/cpu"]
PLUGIN_LDFLAGS = ["-Wl,--version-script=plugins/plugin.map", "-Wl,--no-undefined"]
CPU_LIBS = ["-lpthread", "-lm"]
CPU_PLUGIN = "libpyggml-cpu.so"


def _cc():
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _cpu_sources():
    d = os.path.join("plugins", "cpu")
    return sorted(os.path.join(d, f) for f in os.listdir(os.path.join(ROOT, d)) if f.endswith(".c"))


def _cpu_inputs():
    d = os.path.join(ROOT, "plugins", "cpu")
    hdrs = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".h")]
    inc = os.path.join(ROOT, "include", "pyggml")
    hdrs += [os.path.join(inc, f) for f in os.listdir(inc) if f.endswith(".h")]
    return [os.path.join(ROOT, s) for s in _cpu_sources()] + hdrs + [os.path.join(ROOT, "plugins", "plugin.map")]


def build_cpu_plugin(out_path, temp_dir, jobs=None, log=print):
    """Compile plugins/cpu/*.c (in parallel) and link libpyggml-cpu.so at out_path; skipped when
    out_path is newer than every source and header."""
    if os.path.exists(out_path) and os.path.getmtime(out_path) >= max(map(os.path.getmtime, _cpu_inputs())):
        log(f"{out_path} is up to date")
        return out_path
    os.makedirs(temp_dir, exist_ok=True)
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    cc = _cc()

    def compile_one(src):
        obj = os.path.join(temp_dir, os.path.basename(src)[:-2] + ".o")
        subprocess.run(cc + CPU_CFLAGS + ["-c", src, "-o", obj], cwd=ROOT, check=True)
        return obj

    log(f"building the CPU plugin ({len(_cpu_sources())} C files) -> {out_path}")
    with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as ex:
        objs = list(ex.map(compile_one, _cpu_sources()))
    tmp = out_path + ".tmp"
    subprocess.run(cc + ["-shared", "-o", tmp] + objs + PLUGIN_LDFLAGS + CPU_LIBS, cwd=ROOT, check=True)
    os.replace(tmp, out_path)
    return out_path


class BuildExt(build_ext):
    """The Cython extensions, then the CPU plugin next to them (pyggml/plugins/).
    --no-cpu-plugin: the extensions only (the Makefile builds the plugin itself, with -j)."""

    user_options = build_ext.user_options + [("no-cpu-plugin", None, "do not build libpyggml-cpu.so")]
    boolean_options = build_ext.boolean_options + ["no-cpu-plugin"]

    def initialize_options(self):
        super().initialize_options()
        self.no_cpu_plugin = False

    def run(self):
        super().run()
        if self.no_cpu_plugin:
            return
        if self.inplace:
            out = os.path.join(ROOT, "pyggml", "plugins", CPU_PLUGIN)
        else:
            out = os.path.join(self.build_lib, "pyggml", "plugins", CPU_PLUGIN)
        build_cpu_plugin(out, os.path.join(self.build_temp, "cpu_plugin"), jobs=self.parallel or None,
                         log=self.announce_info)

    def announce_info(self, msg):
        self.announce(msg, level=2)


class BuildPy(build_py):
    """Python sources, plus include/pyggml/*.h copied to pyggml/include/pyggml/ in the build."""

    def run(self):
        super().run()
        src = os.path.join(ROOT, "include", "pyggml")
        dst = os.path.join(self.build_lib, "pyggml", "include", "pyggml")
        os.makedirs(dst, exist_ok=True)
        for f in sorted(os.listdir(src)):
            if f.endswith((".h", ".md")):
                shutil.copy2(os.path.join(src, f), os.path.join(dst, f))


common = dict(include_dirs=["include", "pyggml"], extra_compile_args=["-O2"])
exts = [
    Extension("pyggml._plugin", ["pyggml/_plugin.pyx"], **common),
    Extension("pyggml._sched", ["pyggml/_sched.pyx"], **common),
]

setup(
    ext_modules=cythonize(exts, language_level=3, compiler_directives={"embedsignature": True}),
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
