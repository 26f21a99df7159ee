#!/usr/bin/env bash
# bench/istio-gateway.sh - the seed's gateway study with Istio in the loop (issue 28), beside
# the same gateway configured directly: for each scale ($DOMAINS domains x $PATHS paths, TLS,
# a certificate per domain), one `meshbench experiment` with `gateway.type: istio` (etcd,
# kube-apiserver and istiod started by the lab, pilot-agent's router running the upstream
# Envoy) and one with `gateway.type: envoy` (meshbench's own static configuration), closed loop
# over $CONNS connections to random routes, the gateway limited to $CPUS core.
#
#   figures : RPS and RPS per core at the limit, the gateway's memory (working set; Envoy's
#             allocator), and for Istio the control plane's line: istiod ready, objects
#             applied, Envoy configured after the agent started, config dump size, the push
#             time of one route added
#   reps    : $REPS per scale and type, interleaved (istio, envoy, istio, envoy ...)
#
# Two cores in all: the load generator and the backend share the machine with the gateway,
# so read the ratio of the two types at one scale, not the absolute RPS.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=${REPS:-1}
DUR=${DUR:-10}
CONNS=${CONNS:-64}
CPUS=${CPUS:-1}
PATHS=${PATHS:-100}
SCALES=${SCALES:-10 100 1000}
TYPES=${TYPES:-istio envoy}
WORK=$(mktemp -d /tmp/meshbench-istiobench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/install-deps.sh" >/dev/null
cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
MB="$ROOT/target/release/meshbench"

printf '%-6s %-6s %-4s %10s %10s %12s  %s\n' domains type rep 'req/s' 'RPS/core' 'MiB' 'control plane'
for domains in $SCALES; do
  for rep in $(seq 1 "$REPS"); do
    for type in $TYPES; do
      name="istiobench-$type-$domains"
      cat > "$WORK/$name.yaml" <<YAML
name: $name
topologies: [gateway]
duration_secs: $DUR
warmup_secs: 3
cooldown_secs: 0.5
load:
  mode: closed
  connections: [3200]
  in_flight: [$CONNS]
  response_bytes: [1024]
gateway:
  type: $type
  domains: $domains
  paths: $PATHS
limits:
  proxy:
    cpus: [$CPUS]
YAML
      out="$WORK/$name.$rep.out"
      "$MB" experiment "$WORK/$name.yaml" --store "$WORK/store" >"$out" 2>&1
      row=$(grep -E "^  gateway gateway \($type\)" "$out" | head -1)
      rps=$(awk '{print $9}' <<<"$row")
      per_core=$(awk '{print $14}' <<<"$row")
      mib=$(awk '{print $15}' <<<"$row")
      note=$(grep '^istio:' "$out" | sed 's/^istio: //')
      failed=$(grep -m1 'failed:' "$out")
      printf '%-6s %-6s %-4s %10s %10s %12s  %s\n' "$domains" "$type" "$rep" "${rps:--}" \
        "${per_core:--}" "${mib:--}" "${note:-${failed:-}}"
      grep -E '^     gateway \((istio|envoy)\):' "$out" | sed 's/^ */        envoy admin: /'
    done
  done
done
