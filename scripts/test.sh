#!/usr/bin/env bash
# The whole test suite: dependencies, formatting, lints, then every unit and black-box test
# (which start real nginx and backend processes on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --release --locked
