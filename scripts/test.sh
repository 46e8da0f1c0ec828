#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (unit,
# integration, doc tests) of every crate, with a Redis server of its own for
# the coordinator tests, an S3-compatible server (s3s-fs), Azurite (the
# Azure Storage emulator) and fake-gcs-server (the Google Cloud Storage
# emulator) for the object store tests. Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
WARPLINE_SETUP_S3=1 WARPLINE_SETUP_AZURE=1 WARPLINE_SETUP_GCS=1 WARPLINE_SETUP_STAC=1 bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --workspace --locked --quiet

# A throwaway Redis on its own port, for cli/tests/all/redis.rs.
REDIS_PORT=${WARPLINE_TEST_REDIS_PORT:-6399}
if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --save "" --appendonly no >/dev/null
  for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
export WARPLINE_TEST_REDIS="redis://127.0.0.1:$REDIS_PORT"

# A throwaway S3-compatible server (s3s-fs, which checks SigV4 signatures)
# on its own port, over an empty directory with one bucket, for cli/tests/all/s3/ and the store unit tests.
# Known test credentials, for this server only.
S3_PORT=${WARPLINE_TEST_S3_PORT:-8415}
S3_ROOT=$(mktemp -d)
S3_PID=""
AZ_PID=""
AZ_ROOT=$(mktemp -d)
GCS_PID=""
GCS_ROOT=$(mktemp -d)
log=$(mktemp)
cleanup() {
  for pid in "$S3_PID" "$AZ_PID" "$GCS_PID"; do
    if [ -n "$pid" ]; then
      kill "$pid" 2>/dev/null || true
      wait "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$S3_ROOT" "$AZ_ROOT" "$GCS_ROOT" "$log"
}
trap cleanup EXIT
# Waits until the server NAME (process PID, log LOG) answers on PORT: at
# most 10 s; a server that exits or does not answer ends the script.
wait_for() {
  local name=$1 port=$2 pid=$3 log=$4
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "test: $name did not start:" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "test: $name does not answer on port $port after 10 s" >&2
  exit 1
}
if (exec 3<>"/dev/tcp/127.0.0.1/$S3_PORT") 2>/dev/null; then
  echo "test: port $S3_PORT is taken; set WARPLINE_TEST_S3_PORT to a free one" >&2
  exit 1
fi
export WARPLINE_TEST_S3_KEY=warpline-test WARPLINE_TEST_S3_SECRET=warpline-test-secret
export WARPLINE_TEST_S3_BUCKET=warpline-test
mkdir -p "$S3_ROOT/data/$WARPLINE_TEST_S3_BUCKET"
PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin" s3s-fs --host 127.0.0.1 --port "$S3_PORT" \
  --access-key "$WARPLINE_TEST_S3_KEY" --secret-key "$WARPLINE_TEST_S3_SECRET" \
  "$S3_ROOT/data" >"$S3_ROOT/server.log" 2>&1 &
S3_PID=$!
wait_for s3s-fs "$S3_PORT" "$S3_PID" "$S3_ROOT/server.log"
export WARPLINE_TEST_S3="http://127.0.0.1:$S3_PORT"
# Where the server keeps its files: tests look for uploads left in progress.
export WARPLINE_TEST_S3_ROOT="$S3_ROOT/data"

# A throwaway Azurite (blob service only) on its own port, over an empty
# directory, for cli/tests/all/azure/. Its account and key are the
# emulator's public constants (the tests' defaults); the tests create
# their container.
AZ_PORT=${WARPLINE_TEST_AZURE_PORT:-10000}
if (exec 3<>"/dev/tcp/127.0.0.1/$AZ_PORT") 2>/dev/null; then
  echo "test: port $AZ_PORT is taken; set WARPLINE_TEST_AZURE_PORT to a free one" >&2
  exit 1
fi
azurite-blob --blobHost 127.0.0.1 --blobPort "$AZ_PORT" --location "$AZ_ROOT" \
  --skipApiVersionCheck --loose --disableTelemetry --silent >"$AZ_ROOT/server.log" 2>&1 &
AZ_PID=$!
wait_for azurite "$AZ_PORT" "$AZ_PID" "$AZ_ROOT/server.log"
export WARPLINE_TEST_AZURE="http://127.0.0.1:$AZ_PORT"

# A throwaway fake-gcs-server (installed by setup.sh, see
# scripts/fake-gcs.sh) on its own port, over an empty directory, for
# cli/tests/all/gcs/. It checks no credentials; the tests give warpline a
# service account key that names this server (gcs_base_url) and disables
# OAuth, and create their bucket. -public-host is the address the clients
# use: the server routes the XML API (object_store's reads and listings)
# only for requests to its public host.
GCS_PORT=${WARPLINE_TEST_GCS_PORT:-4443}
if (exec 3<>"/dev/tcp/127.0.0.1/$GCS_PORT") 2>/dev/null; then
  echo "test: port $GCS_PORT is taken; set WARPLINE_TEST_GCS_PORT to a free one" >&2
  exit 1
fi
# shellcheck source=scripts/fake-gcs.sh
. scripts/fake-gcs.sh
if ! GCS_BIN=$(fake_gcs_bin); then
  echo "test: fake-gcs-server is not installed in $FAKE_GCS_VENV (scripts/setup.sh with WARPLINE_SETUP_GCS=1)" >&2
  exit 1
fi
"$GCS_BIN" -scheme http -host 127.0.0.1 -port "$GCS_PORT" \
  -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" \
  -backend filesystem -filesystem-root "$GCS_ROOT/data" -log-level warn \
  >"$GCS_ROOT/server.log" 2>&1 &
GCS_PID=$!
wait_for fake-gcs-server "$GCS_PORT" "$GCS_PID" "$GCS_ROOT/server.log"
export WARPLINE_TEST_GCS="http://127.0.0.1:$GCS_PORT"

# The STAC checker's Python (cli/tests/all/stac.rs validates what the
# write stage publishes with it, offline: scripts/check-stac.py).
# shellcheck source=scripts/stac-check.sh
. scripts/stac-check.sh
if ! WARPLINE_TEST_STAC_PYTHON="$(stac_check_python)"; then
  echo "test: the STAC checker is not installed in $STAC_CHECK_VENV (scripts/setup.sh with WARPLINE_SETUP_STAC=1)" >&2
  exit 1
fi
export WARPLINE_TEST_STAC_PYTHON

status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# The cloud demo (scripts/demo-cloud.sh: STAC items of COGs in an S3 bucket
# warped into another bucket, on loopback) with the binary the tests built:
# it must complete, every item done.
demo="cloud demo: not run (a test failed)"
if [ "$status" = 0 ]; then
  if WARPLINE_BIN="${CARGO_TARGET_DIR:-target}/debug/warpline" \
    WARPLINE_DEMO_S3_PORT=${WARPLINE_TEST_DEMO_S3_PORT:-8416} \
    bash scripts/demo-cloud.sh --progress off >"$log.demo" 2>&1; then
    demo="cloud demo: completed"
  else
    status=1
    demo="cloud demo: FAILED"
    cat "$log.demo" >&2
  fi
  rm -f "$log.demo"
fi
# shellcheck source=scripts/results.sh
. scripts/results.sh
passed=$(sum_results "$log" passed)
failed=$(sum_results "$log" failed)
# The Python package's suite (scripts/test-python.sh: a venv, maturin
# develop, mypy --strict, pytest), on the same system GDAL.
python="python: not run (a test failed)"
if [ "$status" = 0 ]; then
  if bash scripts/test-python.sh >"$log.py" 2>&1; then :; else status=1; cat "$log.py" >&2; fi
  py_line=$(tail -n 1 "$log.py")
  py_passed=$(echo "$py_line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  # awk, not grep: a grep that matches nothing fails the pipeline, and
  # under `set -e -o pipefail` that ended this script when all passed.
  py_failed=$(echo "$py_line" | awk '{for (i = 2; i <= NF; i++) if ($i ~ /^(failed|errors?),?$/) s += $(i - 1)} END {print s + 0}')
  python="python: $py_passed passed, $py_failed failed"
  passed=$((passed + py_passed))
  failed=$((failed + py_failed))
  rm -f "$log.py"
fi
sys_passed=$passed
sys_failed=$failed
# The same suite on the bundled GDAL 3.12.1, without the accelerator
# (scripts/test-bundled.sh), when asked (.ci/run asks).
bundled=""
if [ "${WARPLINE_TEST_BUNDLED:-0}" = 1 ]; then
  if bash scripts/test-bundled.sh >"$log.bundled" 2>&1; then :; else
    status=1
    # A build that fails runs no test: show its end, not only failed tests.
    if ! grep -q 'test result:' "$log.bundled"; then
      echo "bundled: no test ran; the end of its log:" >&2
      tail -n 60 "$log.bundled" >&2
    fi
  fi
  # The whole log: the bundled suite runs twice, and a failure in the first
  # run is far from the end.
  grep -E "^(test .* FAILED|failures:|---- )|panicked" "$log.bundled" >&2 || true
  line=$(tail -n 1 "$log.bundled")
  b_passed=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  b_failed=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 1)
  bundled="; GDAL 3.12.1 (bundled): $b_passed passed, $b_failed failed"
  passed=$((passed + b_passed))
  failed=$((failed + b_failed))
  rm -f "$log.bundled"
fi
echo
echo "GDAL $(gdal-config --version) (system): $sys_passed passed, $sys_failed failed ($python); $demo$bundled"
echo "tests: $passed passed, $failed failed"
exit "$status"
