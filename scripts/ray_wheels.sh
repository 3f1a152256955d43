#!/usr/bin/env bash
# scripts/ray_wheels.sh — Ray for the GPU machine (Python 3.12, no network there): downloads the
# wheels scripts/gpu_ray.sh installs into .whl/ (run here, in the repo root; carry [".whl"]).
#
#   bash scripts/ray_wheels.sh          # .whl/ is in .gitignore
#
# That is the device README's `pip download` line for ray==2.60.0 and the one dependency group
# the GPU image lacks (jsonschema, its specifications, referencing, rpds-py; click, filelock,
# msgpack, packaging, protobuf, pyyaml, requests and aiohttp's family are there). The Ray wheel
# (76 MB) is over the 64 MiB a call carries, so it is rewritten without what pyggml.dist never
# imports: the Java jars (31 MB), rllib, data, serve, tune, train and llm. About 41 MB remain.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
RAY_VERSION=${RAY_VERSION:-2.60.0}
mkdir -p .whl
dl() {
    $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$@"
}
dl "ray==$RAY_VERSION" jsonschema jsonschema-specifications referencing rpds-py
$PY - .whl/ray-"$RAY_VERSION"-*.whl <<'PYEOF'
import os, sys, zipfile
DROP = ("ray/jars/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/tune/", "ray/train/", "ray/llm/")
src = sys.argv[1]
tmp = src + ".tmp"
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        if info.filename.startswith(DROP):
            continue
        data = zin.read(info)
        if info.filename.endswith(".dist-info/RECORD"):
            data = b"".join(l for l in data.splitlines(keepends=True) if not l.decode().startswith(DROP))
        zout.writestr(info, data)          # the same ZipInfo: file modes (the raylet's exec bit) kept
os.replace(tmp, src)
PYEOF
du -ch .whl/*.whl | tail -1
