#!/bin/sh
# Installs what the Vulkan plugin needs to build and run on a CPU-only machine:
# the loader + headers, glslc (GLSL -> SPIR-V), mesa's lavapipe software driver, and the
# Khronos validation layer (sanitizer mode: PYGGML_VULKAN_VALIDATION=1).
# Idempotent and quiet; safe to run twice.
set -e
exec sh "$(dirname "$0")/apt_install.sh" mesa-vulkan-drivers libvulkan-dev glslc vulkan-tools vulkan-validationlayers
