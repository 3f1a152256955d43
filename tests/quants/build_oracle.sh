#!/bin/sh
# Build ggml's own reference quantizers (ggml-quants.c, as vendored in the ggml-python sdist
# on PyPI) into tests/quants/build/liboracle.so. tests/test_quants.py then compares our
# quantizers with it byte for byte on fresh random data (it skips that test when the library
# is absent; the committed golden hashes are checked either way).
# Built like llama.cpp builds ggml-base on x86-64: plain -O2, no -march (so no FMA contraction).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --no-binary ggml-python -d "$work" "ggml-python==0.0.45"
tar -xzf "$work"/ggml_python-*.tar.gz -C "$work"
src=$(echo "$work"/ggml_python-*/vendor/ggml)
mkdir -p "$here/build"
${CC:-cc} -O2 -fPIC -shared -I"$src/include" -I"$src/src" -o "$here/build/liboracle.so" \
    "$src/src/ggml-quants.c" "$here/oracle_stubs.c" -lm
echo "built $here/build/liboracle.so"
