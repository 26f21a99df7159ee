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
# Every scratch directory the tests and the programs they start make (stores, certificates,
# role directories, the test cluster's) goes under one directory, removed when the suite
# passes and kept, with its path said, when it fails.
scratch=$(mktemp -d -t meshbench-suite.XXXXXX)
# --no-fail-fast: a failing test binary does not hide the results of the ones after it.
if TMPDIR="$scratch" cargo test --workspace --profile test-release --locked --no-fail-fast -- --test-threads=1; then
  rm -rf "$scratch"
else
  echo "test.sh: a test failed; its scratch directories are kept in $scratch" >&2
  exit 1
fi
