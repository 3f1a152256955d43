"""Builds pyggml's Cython extensions. Needs no GPU SDK: plugins are built by the Makefile."""
import numpy  # noqa: F401  (a build requirement; fails early with a clear message if missing)
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

common = dict(include_dirs=["include", "pyggml"], extra_compile_args=["-O2"])
exts = [
    Extension("pyggml._plugin", ["pyggml/_plugin.pyx"], **common),
    Extension("pyggml._sched", ["pyggml/_sched.pyx"], **common),
]

setup(
    name="pyggml",
    version="0.1.0",
    description="ggml-style tensor graphs from Python, with backends as run-time loaded plugins",
    packages=find_packages(include=["pyggml", "pyggml.*"]),
    package_data={"pyggml": ["plugins/*.so"]},
    ext_modules=cythonize(exts, language_level=3, compiler_directives={"embedsignature": True}),
    entry_points={"console_scripts": ["pyggml=pyggml.cli:main"]},
    python_requires=">=3.9",
    install_requires=["numpy>=1.24"],
)
