#!/usr/bin/env bash
# Installs what warpline needs to build and test on Debian 12, if missing.
# Safe to run again: it only installs what is not there yet.
set -euo pipefail

# Debian packages the build and the tests need.
PACKAGES=(pkg-config libgdal-dev gdal-bin redis-server)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
