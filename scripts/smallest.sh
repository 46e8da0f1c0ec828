#!/usr/bin/env bash
# The smallest pipeline a user writes (a glob source of local files, fetch,
# decode, reproject to EPSG:3857, write; no [limits], no workers) on six
# scenes of 4000 x 3630 px, against what `warpline plan` said of it: the
# figures of docs/performance.md, "The smallest pipeline".
#
# The scenes are derived from RGB.byte.tif of the shared real rasters
# (WARPLINE_TEST_DATA, else ../shared/data/real) with gdal_translate into a
# temporary directory: six windows of 600 x 545 px, each resampled to
# 4000 x 3630 px, 3-band Byte, uncompressed (41.6 MiB each), and the same
# scenes DEFLATE-compressed and tiled; and one scene of 10000 x 9080 px
# (the whole of RGB.byte.tif resampled, DEFLATE, tiled). Each scenario runs the release
# binary once under /usr/bin/time -v and prints a row: the scenario, the
# cores the blocking stages kept busy (the report's `cpu` line), peak RSS,
# the default budget, and plan's estimate with its error.
#
#   scripts/smallest.sh                 # builds the release binary first
#   WARPLINE_BIN=path/to/warpline scripts/smallest.sh
#
# Needs gdal_translate (gdal-bin) and /usr/bin/time (time).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in gdal_translate /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "needs $tool (apt-get install gdal-bin time)" >&2; exit 1; }
done
DATA=${WARPLINE_TEST_DATA:-../shared/data/real}
[ -f "$DATA/RGB.byte.tif" ] || { echo "no $DATA/RGB.byte.tif (set WARPLINE_TEST_DATA)" >&2; exit 1; }
if [ -z "${WARPLINE_BIN:-}" ]; then
  cargo build --release --quiet -p warpline-cli
  WARPLINE_BIN=${CARGO_TARGET_DIR:-target}/release/warpline
fi
BIN=$(realpath "$WARPLINE_BIN")
DATA=$(realpath "$DATA")

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/plain" "$WORK/deflate" "$WORK/large"
for i in 0 1 2 3 4 5; do
  gdal_translate -q -srcwin $((i * 30)) $((i * 25)) 600 545 -outsize 4000 3630 -r bilinear \
    "$DATA/RGB.byte.tif" "$WORK/plain/scene-$i.tif"
  gdal_translate -q -co COMPRESS=DEFLATE -co TILED=YES \
    "$WORK/plain/scene-$i.tif" "$WORK/deflate/scene-$i.tif"
done
gdal_translate -q -outsize 10000 9080 -r bilinear -co COMPRESS=DEFLATE -co TILED=YES \
  "$DATA/RGB.byte.tif" "$WORK/large/scene.tif"

# The pipeline over the scenes in $1, with the lines of $2 in [pipeline]
# and $3 in each blocking stage.
pipeline() {
  cat <<EOF
[pipeline]
flow = ["fetch", "decode", "reproject", "write"]
$2

[source]
kind = "glob"
pattern = "$1/*.tif"

[stages.fetch]
kind = "fetch"

[stages.decode]
kind = "decode"
$3

[stages.reproject]
kind = "reproject"
crs = "EPSG:3857"
$3

[stages.write]
kind = "write"
dir = "$WORK/out"
$3
EOF
}

# MiB in a plan or report figure such as "624.3 MiB" or "11.8 GiB".
mib() {
  awk '{ v = $1; if ($2 == "GiB") v *= 1024; else if ($2 == "KiB") v /= 1024; printf "%.0f", v }'
}

# Cores busy depend on what else the machine runs: say how loaded it was.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| scenario | cores busy (report) | peak RSS (MiB) | default budget | plan's estimate (MiB) | error |"
echo "|---|---|---|---|---|---|"
run() {
  local name=$1 scenes=$2 pipe=$3 stage=$4
  pipeline "$WORK/$scenes" "$pipe" "$stage" >"$WORK/p.toml"
  rm -rf "$WORK/out"
  local plan budget estimate
  plan=$("$BIN" plan "$WORK/p.toml")
  budget=$(grep -o 'memory       bytes  [0-9.]* [KMG]iB ([^)]*)' <<<"$plan" | sed 's/memory       bytes  //' || true)
  estimate=$(grep -o 'estimated peak memory: [0-9.]* [KMG]iB' <<<"$plan" | sed 's/estimated peak memory: //' | mib)
  /usr/bin/time -v "$BIN" run "$WORK/p.toml" --progress off >"$WORK/run.txt" 2>"$WORK/time.txt"
  local rss cores
  rss=$(awk '/Maximum resident set size/ { printf "%.0f", $6 / 1024 }' "$WORK/time.txt")
  cores=$(grep -o '[0-9.]* of [0-9]* cores busy' "$WORK/run.txt" | sed 's/ cores busy//')
  echo "| $name | $cores | $rss | ${budget:-none} | $estimate | $(awk -v e="$estimate" -v r="$rss" 'BEGIN { printf "%+.0f%%", (e - r) * 100 / r }') |"
}
run "6 scenes, uncompressed" plain "" ""
run "the same, \`workers = 1\` declared" plain "" "workers = 1"
run "6 scenes, DEFLATE, tiled" deflate "" ""
run "1 scene of 10000 x 9080, DEFLATE, tiled" large "" ""
run "uncompressed, \`memory = \"300MiB\"\`" plain 'memory = "300MiB"' ""
run "uncompressed, \`memory = \"unbounded\"\`" plain 'memory = "unbounded"' ""
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
