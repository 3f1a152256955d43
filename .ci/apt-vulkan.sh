#!/bin/sh
# Installs what the Vulkan plugin needs to build and run on a CPU-only machine:
# the loader + headers, glslc (GLSL -> SPIR-V) and mesa's lavapipe software driver.
# Idempotent and quiet; safe to run twice.
set -e
PKGS="mesa-vulkan-drivers libvulkan-dev glslc vulkan-tools"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
