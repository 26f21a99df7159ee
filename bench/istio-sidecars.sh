#!/usr/bin/env bash
# bench/istio-sidecars.sh - Istio's sidecars as Istio runs them (issue 34) beside meshbench's
# own Envoy sidecars, at the shapes of the seeds that measure sidecars:
#
#   published : 1000 rps x 16 connections x 1 KB, sidecars with 2 workers, mutual TLS
#               (Istio's "Performance and scalability" page: +2.76 ms p90 / +2.88 ms p99 with
#               both sidecars, 0.20-0.5 vCPU and 50-60 MB per sidecar per 1000 RPS)
#   twopods   : 1000 rps x 10 connections x 1 KB (istio/tools perf/benchmark's default)
#
# and three configurations, each one `meshbench experiment` with `isolation: netns`:
#
#   istio-permissive : proxy.type istio, Istio's default PeerAuthentication (auto mutual TLS)
#                      over baseline, serveronly, both
#   istio-strict     : proxy.type istio, PeerAuthentication STRICT, over baseline, both
#                      (STRICT refuses serveronly's plaintext client)
#   envoy            : proxy.type envoy, meshbench's own bootstraps shaped like Istio's, each
#                      role in a namespace of its own, over baseline, serveronly, both
#
#   figures : what each experiment answers (latency added over its own baseline at p50, p90,
#             p99 with 95 % intervals; each sidecar's millicores, vCPU per 1000 RPS and MiB),
#             the control plane's line (each sidecar's config dump size), and the self-check
#   reps    : $REPS rounds, the configurations interleaved within each round
#
# Two cores in all: the load, the backend, both sidecars and istiod share the machine. Run it
# with nothing else running; a step the self-check marks INVALID is rerun, not published.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=${REPS:-1}
DUR=${DUR:-15}
SHAPES=${SHAPES:-published twopods}
CONFIGS=${CONFIGS:-istio-permissive istio-strict envoy}
WORK=$(mktemp -d /tmp/meshbench-sidecarbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/install-deps.sh" >/dev/null
if [ -z "${MESHBENCH:-}" ]; then
  cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
  MESHBENCH="$ROOT/target/release/meshbench"
fi

for rep in $(seq 1 "$REPS"); do
  for shape in $SHAPES; do
    case $shape in
      published) conns=16 ;;
      twopods) conns=10 ;;
    esac
    for config in $CONFIGS; do
      case $config in
        istio-permissive) type=istio; topologies="[baseline, serveronly, both]"; extra="" ;;
        istio-strict) type=istio; topologies="[baseline, both]"; extra="  peer_authentication: strict" ;;
        envoy) type=envoy; topologies="[baseline, serveronly, both]"; extra="" ;;
      esac
      name="sidecarbench-$shape-$config"
      cat > "$WORK/$name.yaml" <<YAML
name: $name
topologies: $topologies
isolation: netns
duration_secs: $DUR
warmup_secs: 3
cooldown_secs: 1
sample_interval_ms: 500
load:
  mode: open
  rate_rps: [1000]
  connections: [$conns]
  response_bytes: [1024]
proxy:
  type: $type
  workers: 2
  mtls: true
$extra
YAML
      echo "== round $rep: $shape ($conns connections), $config"
      out="$WORK/$name.$rep.out"
      "$MESHBENCH" experiment "$WORK/$name.yaml" --store "$WORK/store" >"$out" 2>&1
      status=$?
      grep -E "^istio sidecars:|INVALID|self-check" "$out" | head -5
      # The answers: added latency, and what each proxy costs.
      sed -n '/^Latency added over the baseline/,/^  slower\/faster/p' "$out"
      sed -n '/^What each proxy costs/,/^$/p' "$out" | grep -v "not enough loads"
      [ "$status" -eq 0 ] || { echo "exit $status:"; tail -5 "$out"; }
    done
  done
done
