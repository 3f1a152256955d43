#!/bin/sh
# Installs what the HIP plugin needs to BUILD on a machine without an AMD GPU (Debian 12: HIP 5.2):
# hipcc (clang with the HIP front end), the HIP runtime + headers (libamdhip64), and the AMDGPU
# device libraries (ocml/ockl bitcode for gfx90a/gfx1030). With them, plugins/hip/hip.mk builds
# libpyggml-hip.so. No ROCm kernel driver is needed (or installed): the plugin answers NO_DEVICE.
# Idempotent and quiet; safe to run twice.
set -e
exec sh "$(dirname "$0")/apt_install.sh" hipcc libamdhip64-dev rocm-device-libs
