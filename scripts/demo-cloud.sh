#!/usr/bin/env bash
# The cloud demo, with no network: STAC items whose assets are COGs in an
# S3 bucket, warped to EPSG:4326 and uploaded as COGs to another bucket, all
# on loopback. The scenes are the plain demo's outputs (`warpline demo`,
# COGs in EPSG:3857); the S3 server is s3s-fs (an S3 server over a folder
# that checks SigV4 signatures, installed by scripts/setup.sh as for the
# tests). Runs pipelines/cloud-demo.toml; everything lands in
# out/demo-cloud (the bucket `results` is out/demo-cloud/s3/results).
#
#   scripts/demo-cloud.sh
#
# WARPLINE_BIN: a warpline binary to use (default: a release build);
# WARPLINE_DEMO_S3_PORT: the server's port (default 8490).
set -euo pipefail
cd "$(dirname "$0")/.."
WARPLINE_SETUP_S3=1 bash scripts/setup.sh
if [ -z "${WARPLINE_BIN:-}" ]; then
  cargo build --release --quiet -p warpline-cli
  WARPLINE_BIN=target/release/warpline
fi
DIR=out/demo-cloud
PORT=${WARPLINE_DEMO_S3_PORT:-8490}
if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  echo "demo-cloud: port $PORT is taken; set WARPLINE_DEMO_S3_PORT to a free one" >&2
  exit 1
fi
rm -rf "$DIR"
mkdir -p "$DIR/s3/scenes" "$DIR/s3/results"

# The scenes: the plain demo's COGs, put in the bucket `scenes` (s3s-fs
# serves a folder's files as its objects).
"$WARPLINE_BIN" demo --dir "$DIR/made" --progress off >/dev/null
cp "$DIR"/made/output/*.tif "$DIR/s3/scenes/"

# A STAC ItemCollection of them: an item a scene, its asset `visual`.
{
  printf '{"type": "FeatureCollection", "features": ['
  sep=""
  for f in "$DIR"/s3/scenes/*.tif; do
    id=$(basename "$f" .tif)
    printf '%s\n  {"type": "Feature", "stac_version": "1.0.0", "id": "%s", "properties": {}, "geometry": null, "links": [], "assets": {"visual": {"href": "s3://scenes/%s.tif", "type": "image/tiff; application=geotiff; profile=cloud-optimized"}}}' "$sep" "$id" "$id"
    sep=","
  done
  printf '\n]}\n'
} >"$DIR/items.json"

# Demo credentials, for this throwaway server only.
export AWS_ACCESS_KEY_ID=warpline-demo AWS_SECRET_ACCESS_KEY=warpline-demo-secret
export AWS_REGION=us-east-1 AWS_ALLOW_HTTP=true AWS_ENDPOINT_URL="http://127.0.0.1:$PORT"
PATH="$PATH:${CARGO_HOME:-$HOME/.cargo}/bin" s3s-fs --host 127.0.0.1 --port "$PORT" \
  --access-key "$AWS_ACCESS_KEY_ID" --secret-key "$AWS_SECRET_ACCESS_KEY" \
  "$DIR/s3" >"$DIR/s3-server.log" 2>&1 &
S3_PID=$!
trap 'kill "$S3_PID" 2>/dev/null || true; wait "$S3_PID" 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
  kill -0 "$S3_PID" 2>/dev/null || { cat "$DIR/s3-server.log" >&2; exit 1; }
  sleep 0.1
done

status=0
"$WARPLINE_BIN" run pipelines/cloud-demo.toml --report "$DIR/report.json" "$@" || status=$?
echo "demo-cloud: outputs in $DIR/s3/results/4326 (the bucket \`results\`), run report in $DIR/report.json" >&2
exit "$status"
