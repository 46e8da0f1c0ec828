#!/usr/bin/env bash
# The whole test suite again on GDAL 3.12.1 built from source (gdal-sys's
# `bundled` feature: gdal-src 0.3 and PROJ from proj-sys 0.27, linked
# statically): first without the accelerator (`--no-default-features`),
# which proves that warpline builds and passes on a GDAL other than
# Debian's and that every test passes with the accelerator left out; then
# the accelerator's own proofs with it (its crate's tests, the fidelity
# and raster suites), which on 3.12 take every warp they take on 3.6.
#
# Run by scripts/test.sh when WARPLINE_TEST_BUNDLED=1 (as .ci/run does),
# inside the servers it started; on its own it needs the same environment
# (see docs/testing.md). The first build of GDAL and PROJ takes about 20
# minutes of two cores; it is kept in WARPLINE_BUNDLED_TARGET (default
# ~/.cache/warpline/target-bundled) and reused while the dependencies do
# not change. Prints "bundled: N passed, M failed" last.
set -euo pipefail
cd "$(dirname "$0")/.."
WARPLINE_SETUP_BUNDLED=1 bash scripts/setup.sh
export CARGO_TARGET_DIR="${WARPLINE_BUNDLED_TARGET:-${XDG_CACHE_HOME:-$HOME/.cache}/warpline/target-bundled}"
mkdir -p "$CARGO_TARGET_DIR"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast --no-default-features \
  --features warpline-gdal/bundled 2>&1 | tee "$log" || status=$?
echo "== the accelerator's proofs on this GDAL"
# The whole workspace (as above): a package alone would unify gdal-src's
# features otherwise, and build GDAL again.
cargo test --workspace --locked --no-fail-fast --features warpline-gdal/bundled \
  -- kernel:: area:: fidelity:: raster:: 2>&1 | tee -a "$log" || status=$?
# shellcheck source=scripts/results.sh
. scripts/results.sh
passed=$(sum_results "$log" passed)
failed=$(sum_results "$log" failed)
echo
echo "bundled: $passed passed, $failed failed"
exit "$status"
