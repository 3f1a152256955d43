#!/bin/sh
# Build the GPU-like test plugin: tests/plugins/testdev/build.sh OUTDIR [NAME ...]
# Writes OUTDIR/libpyggml-NAME.so for each NAME (default: testdev). Needs cc and make only.
set -e
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
[ -n "$1" ] || { echo "usage: $0 OUTDIR [NAME ...]" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
shift
NAMES=${*:-testdev}
exec make -s -C "$ROOT" -f tests/plugins/testdev/testdev.mk TESTDEV_OUT="$OUT" TESTDEV_NAMES="$NAMES" testdev
