#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (unit,
# integration, doc tests) of every crate, with a Redis server of its own for
# the coordinator tests. Ends with one summary line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# A throwaway Redis on its own port, for cli/tests/redis.rs.
REDIS_PORT=${WARPLINE_TEST_REDIS_PORT:-6399}
if ! redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --save "" --appendonly no >/dev/null
  for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi
export WARPLINE_TEST_REDIS="redis://127.0.0.1:$REDIS_PORT"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
passed=$(grep -oE 'test result: .* ([0-9]+) passed' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -E 'test result:' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo
echo "tests: $passed passed, $failed failed"
exit "$status"
