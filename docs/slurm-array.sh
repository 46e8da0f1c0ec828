#!/usr/bin/env bash
# A warpline batch as a Slurm job array: 10 tasks, each running its own
# shard of the inputs (--shard auto/10 reads SLURM_ARRAY_TASK_ID, less
# SLURM_ARRAY_TASK_MIN). Submit with: sbatch docs/slurm-array.sh
#SBATCH --job-name=warpline-mosaic
#SBATCH --array=0-9
#SBATCH --cpus-per-task=2
#SBATCH --mem=2G
#SBATCH --time=04:00:00
#SBATCH --output=logs/warpline-%A_%a.log
set -euo pipefail
mkdir -p reports
exec warpline run mosaic.toml --shard auto/10 \
  --report "reports/shard-${SLURM_ARRAY_TASK_ID}.json" \
  --failures "reports/failed-${SLURM_ARRAY_TASK_ID}.jsonl"
