#!/usr/bin/env bash
# bench/control-plane.sh - what istiod costs as the mesh grows (issue 38), Istio's published
# shape ("1 vCPU and 1.5 GB of memory" for 1,000 services and 2,000 sidecars) at this
# machine's scale.
#
#   points : $POINTS, each PROXIES:SERVICES (simulated sidecars connected over delta ADS, plus
#            the one real Envoy and its simulated twin); points off the 2:1 line are what let
#            a fit tell a proxy's cost from a service's
#   churn  : $CHURN, each ENDPOINT:CONFIG changes per second written during the window (0:0 is
#            "quiet": one change of each kind mid-window, to time propagation)
#   window : $DUR s measured after $WARMUP s, every change then awaited up to $SETTLE s
#   objects: $OBJECTS Istio objects (VirtualServices and DestinationRules in turn)
#
# Each point and churn is one `meshbench experiment examples/control-plane.yaml` of one step,
# stored in $STORE; then one row per step: istiod's CPU (millicores, average over the
# window) and memory (MiB, RSS average and peak), how long the proxies took to hold a full
# configuration, propagation p50/p90/p99 and the time to 90 % of proxies per xDS type, pushes,
# xDS bytes/s, the simulated clients' own CPU, and whether the real Envoy's twin agreed. Then
# the least-squares fit of istiod's CPU and memory on proxies and services over the quiet
# steps (three points or more, not all on one line). A point that fails is reported and the
# script goes on: the largest point that succeeds is where this machine stops.
#
# Nothing else should run beside it: the figures go into docs/seeds.md.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
POINTS=${POINTS:-"100:50 200:100 500:250 1000:500 200:500 1000:100"}
CHURN=${CHURN:-"0:0 2:0.5"}
DUR=${DUR:-20}
WARMUP=${WARMUP:-5}
SETTLE=${SETTLE:-60}
OBJECTS=${OBJECTS:-0}
OUT=${OUT:-/tmp/meshbench-control-plane}
STORE=${STORE:-$OUT/results.db}
MB=${MB:-$ROOT/target/release/meshbench}
mkdir -p "$OUT"
[ -x "$MB" ] || (cd "$ROOT" && cargo build --release --locked -q -p meshbench) || exit 1

names=()
for point in $POINTS; do
  proxies=${point%%:*} services=${point##*:}
  for churn in $CHURN; do
    ep=${churn%%:*} cfg=${churn##*:}
    name="cp-$proxies-$services-$ep-$cfg"
    echo "== $proxies proxies x $services services, churn $ep endpoint + $cfg config changes/s" >&2
    if "$MB" experiment "$ROOT/examples/control-plane.yaml" --store "$STORE" \
        --set "name=\"$name\"" \
        --set duration_secs="$DUR" --set warmup_secs="$WARMUP" --set cooldown_secs=2 \
        --set control_plane.settle_secs="$SETTLE" \
        --set "control_plane.proxies=[$proxies]" --set "control_plane.services=[$services]" \
        --set "control_plane.istio_objects=[$OBJECTS]" \
        --set "control_plane.endpoint_churn_per_s=[$ep]" \
        --set "control_plane.config_churn_per_s=[$cfg]" \
        2> "$OUT/$name.log"; then :; else
      echo "FAILED: $name (log: $OUT/$name.log)"
      tail -3 "$OUT/$name.log" >&2
    fi
    names+=("$name")
  done
done

files=()
for name in "${names[@]}"; do
  "$MB" results export "$name" --format json --store "$STORE" > "$OUT/$name.json" 2>/dev/null \
    && files+=("$OUT/$name.json")
done
python3 "$HERE/control_plane_table.py" "${files[@]}"
