#!/usr/bin/env bash
# The whole test suite: dependencies, formatting, lints, then every unit and black-box test
# (which start real nginx and backend processes on loopback).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# One test at a time: the black-box tests measure real latency and rates, and two of them
# sharing the machine's two cores would measure each other.
cargo test --workspace --profile test-release --locked -- --test-threads=1
