#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run): dependencies, formatting, lints, then every unit
# and black-box test (the black-box tests start real nginx, Envoy, istiod, Prometheus, a
# Kubernetes node... on loopback and in network namespaces they make).
#
# On a new machine the time goes to the installs' Go builds and to the Rust build, so they run
# side by side: scripts/install-deps.sh starts first, in the background (its Debian packages,
# then its downloads and its Go builds at `nice -n 10`), while fmt and the tests' build run in the
# foreground. Clippy rides along that build: cargo hands the workspace's crates to clippy-driver
# (RUSTC_WORKSPACE_WRAPPER, what `cargo clippy` itself sets), which lints each crate and then
# compiles it, so no separate check pass builds every dependency a second time. The tests build
# with the release profile (Cargo.toml says what it optimises and why), as `cargo run --release`.
#
# Then the tests, in four groups, each test's time reported and the ten slowest listed at the end:
#   1. the unit tests of every crate and the integration tests beside them, in parallel;
#   2. the black-box tests that only check behaviour and need nothing the Go builds make: two at
#      a time beside the installs while they still build, or else one at a time at the end of
#      istiod's lane (two there slowed the node's lane by a fifth);
#   3. after the installs, two lanes side by side, each one test at a time: the tests that start
#      a Kubernetes node (they take its lock in turn), and those that only check behaviour
#      through istiod, then group 2 if it waited; nothing in either lane asserts a time or a CPU
#      figure that the other would move;
#   4. everything else, one at a time with nothing beside it: the tests that measure latency,
#      rates or CPU, or look at the whole machine (its sockets, its network namespaces, its
#      threads by the thousand).
# A module is named in a group only if every test in it belongs there; a new module goes to the
# last group unless it is added to another.
#
# The lab's network namespaces and the test node each turn IPv4 forwarding on and put back what
# they found; with two of them at once, the first to finish would turn it off under the other.
# So the suite turns it on for its whole run and puts back the machine's own setting at the end.
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

# The build, the Go builds' caches and the tests' scratch take about 6 GiB; a full disk shows up
# late and obscurely (lld dies with a bus error writing a test binary), so it is said up front.
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$target"
free_gib=$(( $(df -Pk "$target" | awk 'NR == 2 { print $4 }') / 1024 / 1024 ))
[ "$free_gib" -ge 6 ] || echo "test.sh: warning: $free_gib GiB free under $target; the suite needs about 6" >&2

forward=/proc/sys/net/ipv4/ip_forward
forward_was=$(cat "$forward")
echo 1 2>/dev/null > "$forward" || echo "test.sh: warning: cannot turn on $forward" >&2
installs=
finish() {
  [ -z "$installs" ] || kill -- -"$installs" 2>/dev/null || true
  echo "$forward_was" 2>/dev/null > "$forward" || true
}
trap finish EXIT

# In a process group of its own (setsid), so that the suite's end, whatever ends it, ends the
# installs' builds too.
INSTALL_LOGS="$scratch/installs" setsid scripts/install-deps.sh > "$scratch/installs/all.log" 2>&1 &
installs=$!

cargo fmt --all -- --check
# Every cargo command below runs with these, so that none of them builds the workspace again.
RUSTC_WORKSPACE_WRAPPER=$(command -v clippy-driver) || {
  echo "test.sh: clippy-driver not found (rustup component add clippy)" >&2
  exit 1
}
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# The test binaries are built once, here, and run directly below: a later `cargo test -p X` or
# `--exclude X` would resolve the dependencies' features for fewer packages and build the
# workspace again. tests.tsv: each test binary's target, its package's directory (a test's
# working directory, as under `cargo test`) and its path.
cargo test --workspace --release --locked --no-run --message-format=json-render-diagnostics \
  > "$scratch/build.json"
python3 - "$scratch/build.json" > "$scratch/tests.tsv" <<'EOF'
import json, os, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"], os.path.dirname(m["manifest_path"]), m["executable"], sep="\t")
EOF
lap "the tests built, clippy clean"

# Group 2: behaviour only, nothing from the Go builds (crates/meshbench/tests/it/<module>.rs).
BESIDE=(bad_input envoy envoy_admin gateway grafana grafana_panels install_envoy istio_plotter metrics protocols store_faults web)
# Group 3: the test node's lane, and istiod's (Contour's too: the same API server, no node).
NODE=(cluster_stop k8s k8s_node k8s_port_forward istio_gateway_injected istio_injected cluster_experiment cluster_change_cost cluster_contour cluster_api_only cluster_two_nodes cluster_detached)
ISTIOD=(istio_sidecars istio_gateway contour_gateway gateway_compare stop_during_setup changes)

# `--report-time` (each test's time) is a libtest option behind `-Z unstable-options`, which a
# stable test binary accepts when RUSTC_BOOTSTRAP=1 is in its environment (in cargo's, it would
# reach the build scripts that probe the compiler, and cargo would build everything again).
# run_tests NAME WHICH TEST-ARGS...: the test binaries whose target is `it` (WHICH = it) or every
# other one (WHICH = units), one after another; a failure is recorded in NAME.failed.
run_tests() {
  local name=$1 which=$2
  shift 2
  local target dir exe
  while IFS=$'\t' read -r target dir exe; do
    if [ "$which" = it ]; then [ "$target" = it ] || continue; else [ "$target" != it ] || continue; fi
    if ! (cd "$dir" && TMPDIR="$scratch" RUSTC_BOOTSTRAP=1 "$exe" -Z unstable-options --report-time "$@") \
      2>&1 | tee -a "$scratch/times/$name.log"; then
      echo "test.sh: a test failed in the group $name ($exe)" >> "$scratch/times/$name.failed"
    fi
  done < "$scratch/tests.tsv"
}
# filters PREFIX MODULE...: each module as a test-name filter, with PREFIX before it (or not).
filters() {
  local prefix=$1
  shift
  for m in "$@"; do [ -z "$prefix" ] && echo "$m::" || printf '%s\n%s\n' "$prefix" "$m::"; done
}

# Everything but the Go builds installed (Envoy, the npm and Python packages, Debian's).
until [ -e "$scratch/installs/downloads.done" ] || ! kill -0 "$installs" 2>/dev/null; do
  sleep 1
done
lap "the downloads done"
# 1. Unit tests and the small integration tests, each binary's tests in parallel threads; the
# thousand agents' test (2,000 threads, each side's silence limit 4 s) waits for group 4, as
# beside the Go builds its agents starve and are lost.
THOUSAND=agents::tests::a_thousand_agents_share_one_plan_with_small_messages
run_tests units units --skip "$THOUSAND"
lap "unit tests done"
# 2. Behaviour-only black-box tests: two at a time beside the installs, if they still run;
# otherwise in istiod's lane once its own tests are done (below), which ends minutes before the
# node's.
mapfile -t beside < <(filters "" "${BESIDE[@]}"; filters --skip "${NODE[@]}" "${ISTIOD[@]}")
beside_later=1
if kill -0 "$installs" 2>/dev/null; then
  run_tests beside it --test-threads=2 "${beside[@]}"
  lap "behaviour tests done"
  beside_later=
fi
if ! wait "$installs"; then
  echo "test.sh: the installs failed (the tests that need them will fail too):" >&2
  echo "installs" > "$scratch/times/installs.failed"
fi
cat "$scratch/installs/all.log" >&2
installs=
lap "installs done"
# 3. The node's lane and istiod's, side by side, each one test at a time.
mapfile -t args < <(filters "" "${NODE[@]}")
# (Each lane's output is shown when it ends, not interleaved with the other's.)
run_tests node it --test-threads=1 "${args[@]}" > "$scratch/node.out" &
node_lane=$!
mapfile -t args < <(filters "" "${ISTIOD[@]}")
{
  run_tests istiod it --test-threads=1 "${args[@]}"
  [ -z "$beside_later" ] || run_tests beside it --test-threads=1 "${beside[@]}"
} > "$scratch/istiod.out" &
istiod_lane=$!
wait "$node_lane" "$istiod_lane" || true
cat "$scratch/node.out" "$scratch/istiod.out"
lap "the node's and istiod's lanes done"
# 4. Everything else, one at a time, alone.
mapfile -t args < <(filters --skip "${BESIDE[@]}" "${NODE[@]}" "${ISTIOD[@]}")
run_tests alone it --test-threads=1 "${args[@]}"
run_tests alone units --exact "$THOUSAND"
lap "all tests done"

echo "test.sh: the ten slowest tests:" >&2
cat "$scratch"/times/*.log \
  | sed -n 's/^test \(.*\) \.\.\. [a-zA-Z]* <\([0-9.]*\)s>$/\2 \1/p' \
  | sort -rn | awk 'NR <= 10 { printf "  %7.1f s  %s\n", $1, $2 }' >&2

if ! ls "$scratch"/times/*.failed >/dev/null 2>&1; then
  rm -rf "$scratch"
  lap "the suite passed"
else
  cat "$scratch"/times/*.failed >&2
  # What each failed test said, last, where a CI log's tail shows it (a backtrace above it would
  # push the message out of view): up to 12 lines of each panic, 600 characters each.
  echo "test.sh: what the failed tests said:" >&2
  cat "$scratch"/times/*.log \
    | awk '/^---- .* stdout ----$/ { name = $2; next }
           /panicked at/ { grab = 12; print "  " name ":"; next }
           grab > 0 && !/^stack backtrace:/ && !/^note:/ { print "    " substr($0, 1, 600); grab--; next }
           { grab = 0 }' >&2
  lap "a test failed; its scratch directories are kept in $scratch"
  exit 1
fi
