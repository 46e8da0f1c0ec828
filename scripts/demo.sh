#!/usr/bin/env bash
# The main job: builds warpline and runs its demo: sample GeoTIFF tiles in
# four CRSs, served on a loopback HTTP server, fetched, decoded, reprojected
# to Web Mercator and written as COGs to out/demo/output. No network (beyond
# package registries on first set-up) and no data files are needed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec cargo run --release --quiet -p warpline-cli -- demo "$@"
