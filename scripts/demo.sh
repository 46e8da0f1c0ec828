#!/usr/bin/env bash
# The main job: builds warpline and runs the demo pipeline. Needs no network
# (beyond package registries on first set-up) and no data files.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --quiet
exec ./target/release/warpline run pipelines/synthetic.toml "$@"
