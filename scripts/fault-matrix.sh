#!/usr/bin/env bash
# The byte budget's check (issue 16): a skewed corpus (one tile in ten
# 40-100x the pixels of the others, 30-75 MiB decoded) served over loopback
# HTTP and run through the whole pipeline (fetch, decode, reproject to
# EPSG:3857, write GTiff) at `budget = "256MiB"` and `"512MiB"`, 5 rounds
# each, interleaved, each run in a process of its own (the bench's
# `skew10-256` and `skew10-512` scenarios, benches/raster.rs).
#
# Per run: completed or not (a run with no item admitted, done or failed
# for 120 s is cancelled and its state printed), items done / failed /
# requeued, peak RSS, the `memory` limiter's own peak, and what the
# resident size held at its peak; then a table of every run. Exits 1 if a
# run did not complete or its peak RSS was over budget + 64 MiB.
#
#   scripts/fault-matrix.sh            # 600 tiles per run, 5 rounds
#   TILES=1000 ROUNDS=5 scripts/fault-matrix.sh
#
# 600 tiles by default: on a 2-core machine a 1,000-tile run takes 2.5 min,
# and the matrix of 10 would take 25 min; 600 keep it near 15 min with the
# same mix (60 large tiles per run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo bench --bench raster --no-run --quiet
WARPLINE_BENCH_TILES="${TILES:-600}" WARPLINE_BENCH_REPEAT="${ROUNDS:-5}" \
    exec cargo bench --bench raster --quiet -- skew10-256 skew10-512
