#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): dependencies, formatting, lints, then every unit
# and black-box test (the black-box tests start real nginx, Envoy, istiod, Prometheus, a
# Kubernetes node... on loopback and in network namespaces they make).
#
# On a new machine the time goes to the installs' Go builds and to the Rust build, so they run
# side by side: scripts/install-deps.sh starts first, in the background (its Debian packages,
# then its downloads and its Go builds at `nice -n 10`), while fmt, clippy and the tests' build
# run in the foreground. Clippy and the tests build with the release profile (Cargo.toml says
# what it optimises and why): they share its build scripts and procedural macros, and the tests
# share the rest with `cargo run --release -- demo`.
#
# Then the tests, in three groups:
#   1. the unit tests of every crate and the integration tests beside them, in parallel;
#   2. the black-box tests that only check behaviour, two at a time, while the installs may
#      still be building (nothing in this group needs what they build);
#   3. after the installs: the black-box tests that measure latency, rates or CPU, or start what
#      the installs built (Envoy, fortio, istiod, a Kubernetes node), one at a time, so that no
#      other test shares the machine's two cores with them.
# Each test's time is reported; the ten slowest are listed at the end.
#
# Every scratch directory the tests and the programs they start make (stores, certificates,
# role directories, the test cluster's) goes under one directory, removed when the suite passes
# and kept, with its path said, when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
began=$SECONDS
scratch=$(mktemp -d -t meshbench-suite.XXXXXX)
mkdir -p "$scratch/installs" "$scratch/times"
lap() { echo "test.sh: $1 at $(( (SECONDS - began) / 60 )) min $(( (SECONDS - began) % 60 )) s" >&2; }

# In a process group of its own (setsid), so that the suite's end, whatever ends it, ends the
# installs' builds too.
INSTALL_LOGS="$scratch/installs" setsid scripts/install-deps.sh > "$scratch/installs/all.log" 2>&1 &
installs=$!
trap 'kill -- -$installs 2>/dev/null || true' EXIT

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked --release -- -D warnings
lap "clippy done"
cargo test --workspace --release --locked --no-run
lap "the tests built"

# The black-box tests (crates/meshbench/tests/it) that only check behaviour: what a command
# prints, refuses, stores or writes, with nothing timed and nothing the Go builds make. A module
# belongs here only if every test in it does so; anything else stays in the one-at-a-time group.
BESIDE=(backend bad_input envoy_admin grafana grafana_panels install_envoy istio_plotter store_faults web)

failed=0
# `--report-time` (each test's time) is a libtest option behind `-Z unstable-options`, which a
# stable test binary accepts when RUSTC_BOOTSTRAP=1 is in its environment. It is given to the test
# binaries only, through cargo's runner: in cargo's own environment it would reach the build
# scripts that probe the compiler, and cargo would build everything again.
# run_tests NAME CARGO-ARGS... -- TEST-ARGS...
run_tests() {
  local name=$1
  shift
  if ! TMPDIR="$scratch" cargo test --release --locked --no-fail-fast \
    --config "target.'cfg(all())'.runner = ['env', 'RUSTC_BOOTSTRAP=1']" "$@" \
    -Z unstable-options --report-time 2>&1 | tee "$scratch/times/$name.log"; then
    failed=1
  fi
}

# Everything but the Go builds installed (Envoy, the npm and Python packages, Debian's).
until [ -e "$scratch/installs/downloads.done" ] || ! kill -0 "$installs" 2>/dev/null; do
  sleep 1
done
lap "the downloads done"
# 1. Unit tests and the small integration tests, each binary's tests in parallel threads.
run_tests units --workspace --exclude meshbench --
run_tests units-bin -p meshbench --lib --
lap "unit tests done"
# 2. Behaviour-only black-box tests, two at a time, beside the installs.
filters=()
for m in "${BESIDE[@]}"; do filters+=("$m::"); done
run_tests beside -p meshbench --test it -- --test-threads=2 "${filters[@]}"
lap "behaviour tests done"
if ! wait "$installs"; then
  failed=1
  echo "test.sh: the installs failed (the tests that need them will fail too):" >&2
fi
cat "$scratch/installs/all.log" >&2
trap - EXIT
lap "installs done"
# 3. Everything else, one at a time.
skips=()
for m in "${BESIDE[@]}"; do skips+=(--skip "$m::"); done
run_tests alone -p meshbench --test it -- --test-threads=1 "${skips[@]}"
lap "all tests done"

echo "test.sh: the ten slowest tests:" >&2
cat "$scratch"/times/*.log \
  | sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' \
  | sort -rn | head -10 | awk '{ printf "  %7.1f s  %s\n", $1, $2 }' >&2

if [ $failed -eq 0 ]; then
  rm -rf "$scratch"
  lap "the suite passed"
else
  lap "a test failed; its scratch directories are kept in $scratch"
  exit 1
fi
