#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (unit,
# integration, doc tests) of every crate.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
