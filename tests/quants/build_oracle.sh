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

# The same sdist's AVX2 dot products (ggml-cpu/arch/x86/quants.c) as a speed peer for
# bench/quant_dot.py --peer: built with the flags llama.cpp uses for an AVX2 CPU variant.
if grep -q avx2 /proc/cpuinfo 2>/dev/null; then
    ${CC:-cc} -O3 -fPIC -mavx2 -mfma -mf16c -mbmi2 -c -I"$src/include" -I"$src/src" -I"$src/src/ggml-cpu" \
        "$src/src/ggml-cpu/arch/x86/quants.c" -o "$work/cpuq.o"
    ${CC:-cc} -O2 -fPIC -c -I"$src/include" -I"$src/src" "$src/src/ggml-quants.c" -o "$work/gq.o"
    ${CC:-cc} -O2 -fPIC -shared -o "$here/build/libggml_peer.so" "$work/cpuq.o" "$work/gq.o" \
        "$here/oracle_stubs.c" "$here/peer_tables.c" -lm
    echo "built $here/build/libggml_peer.so"
fi
