#!/usr/bin/env bash
# The stac source's memory over stac-geoparquet files of 1,000, 10,000,
# 100,000 and 300,000 items (generated, one asset each, 10,000 rows a row group, zstd):
# the figures of docs/performance.md, "stac-geoparquet: flat memory". Each
# file is read into a `discard` stage (the source's own memory: nothing
# is fetched) by the release binary under /usr/bin/time -v, RUNS times
# (default 2); a row per run: items, file size, peak RSS, wall time.
#
#   scripts/stac-geoparquet-memory.sh       # builds the release binaries first
#   RUNS=3 scripts/stac-geoparquet-memory.sh
#
# Needs /usr/bin/time (apt-get install time).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v /usr/bin/time >/dev/null || { echo "needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
cargo build --release --quiet -p warpline-cli
cargo build --release --quiet -p warpline-testkit --example stac-geoparquet
TARGET=${CARGO_TARGET_DIR:-target}/release
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
printf '| items | file | peak RSS | wall |\n|---|---|---|---|\n'
for items in 1000 10000 100000 300000; do
  file="$WORK/items-$items.parquet"
  "$TARGET/examples/stac-geoparquet" "$file" "$items" >/dev/null
  cat > "$WORK/p-$items.toml" <<TOML
[pipeline]
flow = ["sink"]

[source]
kind = "stac"
geoparquet = "$file"
assets = "B04"

[stages.sink]
kind = "discard"
TOML
  for _ in $(seq "${RUNS:-2}"); do
    /usr/bin/time -v "$TARGET/warpline" run "$WORK/p-$items.toml" \
      >/dev/null 2>"$WORK/time.txt" || { cat "$WORK/time.txt" >&2; exit 1; }
    rss=$(awk -F': ' '/Maximum resident/ {printf "%.1f MiB", $2 / 1024}' "$WORK/time.txt")
    wall=$(awk -F': ' '/Elapsed/ {print $2}' "$WORK/time.txt")
    size=$(du -h "$file" | cut -f1)
    printf '| %s | %s | %s | %s |\n' "$items" "$size" "$rss" "$wall"
  done
done
