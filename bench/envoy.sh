#!/usr/bin/env bash
# bench/envoy.sh - Envoy beside its stand-ins, in the same run, on THIS machine: what each
# proxy costs as a pair of sidecars (client and server, mutual TLS, HTTP/1.1, 1 KB at $QPS rps
# x 16 connections, 2 workers, as Istio's published set-up) and as a TLS gateway ($DOMAINS
# domains x 10 paths, closed loop, $GW_CONNS connections), each proxy limited to 1 core.
#
#   proxies : envoy (configured as Istio's, docs/envoy.md), nginx, haproxy, caddy
#   figures : per proxy role, vCPU per 1000 RPS and MiB; sidecars: p50/p99 added over the
#             baseline measured in the same repetition; gateway: RPS and RPS per core
#   reps    : $REPS, interleaved (every proxy once, then again), so drift hits all alike
#
# Each repetition is one `meshbench experiment` per proxy with the same file but `proxy.type`
# (or `gateway.type`); the figures are read back from the store's JSON export. Medians of the
# repetitions; read the ratios to Envoy, not the absolute times (shared, noisy machines).
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=${REPS:-3}
DUR=${DUR:-8}
QPS=${QPS:-1000}
DOMAINS=${DOMAINS:-100}
GW_CONNS=${GW_CONNS:-32}
PROXIES=${PROXIES:-envoy nginx haproxy caddy}
WORK=$(mktemp -d /tmp/meshbench-envoybench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/install-deps.sh" >/dev/null
cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
MB="$ROOT/target/release/meshbench"

cat > "$WORK/sidecars.yaml" <<EOF
name: envoybench-sidecars
topologies: [baseline, both]
duration_secs: $DUR
warmup_secs: 2
cooldown_secs: 0.5
load:
  rate_rps: [$QPS]
  connections: [16]
  response_bytes: [1024]
proxy:
  type: envoy
  workers: 2
  mtls: true
limits:
  proxy:
    cpus: [1]
EOF
cat > "$WORK/gateway.yaml" <<EOF
name: envoybench-gateway
topologies: [gateway]
duration_secs: $DUR
warmup_secs: 2
cooldown_secs: 0.5
load:
  mode: closed
  connections: [3200]
  in_flight: [$GW_CONNS]
  response_bytes: [1024]
gateway:
  type: envoy
  domains: $DOMAINS
  paths: 10
limits:
  proxy:
    cpus: [1]
EOF

for rep in $(seq 1 "$REPS"); do
  for p in $PROXIES; do
    "$MB" experiment "$WORK/sidecars.yaml" --store "$WORK/r.db" --quiet --set "proxy.type=$p" \
      --set "name=sidecars-$p-$rep" >/dev/null 2>"$WORK/err" || { echo "sidecars $p: $(tail -1 "$WORK/err")" >&2; }
    "$MB" results export "sidecars-$p-$rep" --format json --store "$WORK/r.db" > "$WORK/sidecars-$p-$rep.json" 2>/dev/null
    "$MB" experiment "$WORK/gateway.yaml" --store "$WORK/r.db" --quiet --set "gateway.type=$p" \
      --set "name=gateway-$p-$rep" >/dev/null 2>"$WORK/err" || { echo "gateway $p: $(tail -1 "$WORK/err")" >&2; }
    "$MB" results export "gateway-$p-$rep" --format json --store "$WORK/r.db" > "$WORK/gateway-$p-$rep.json" 2>/dev/null
  done
done

python3 - "$WORK" "$REPS" $PROXIES <<'PY'
import json, statistics, sys, os
work, reps, proxies = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(kind, p, rep):
    f = os.path.join(work, "%s-%s-%d.json" % (kind, p, rep))
    try:
        return json.load(open(f))["steps"]
    except Exception:
        return None
def role(step, name):
    return next((u for u in step["usage"] if u["role"] == name), None)
def pct(step, q):
    return step["summary"][q + "_us"] / 1000
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("\nsidecars (vCPU and MiB per sidecar): client + server proxy, mutual TLS, HTTP/1.1, 1 KB, 16 connections, 2 workers, 1 core each")
print("median of %d interleaved repetitions" % reps)
print("%-8s %10s %14s %10s %10s %8s" % ("proxy", "req/s", "vCPU/1k RPS", "+p50 ms", "+p99 ms", "MiB"))
rows = {}
for p in proxies:
    cpu, mib, a50, a99, rps = [], [], [], [], []
    for r in range(1, reps + 1):
        steps = load("sidecars", p, r)
        if not steps or len(steps) < 2 or any(s["status"] != "ok" for s in steps):
            continue
        base, both = steps[0], steps[1]
        thr = both["summary"]["throughput_rps"]
        us = [role(both, n) for n in ("client_proxy", "server_proxy")]
        cpu.append(sum(u["cpu_millicores_avg"] for u in us) / 1000 / (thr / 1000) / 2)
        mib.append(sum(u["working_set_mib_avg"] or u["rss_mib_avg"] for u in us) / 2)
        a50.append(pct(both, "p50") - pct(base, "p50"))
        a99.append(pct(both, "p99") - pct(base, "p99"))
        rps.append(thr)
    rows[p] = (med(cpu), med(a50), med(a99), med(mib))
    print("%-8s %10.0f %14.3f %10.3f %10.3f %8.1f" % (p, med(rps), med(cpu), med(a50), med(a99), med(mib)))
print("\ngateway: TLS, domains x 10 paths, closed loop, 1 core")
print("%-8s %10s %14s %10s %8s" % ("proxy", "req/s", "vCPU/1k RPS", "RPS/core", "MiB"))
gw = {}
for p in proxies:
    rps, cpu, mib, per_core = [], [], [], []
    for r in range(1, reps + 1):
        steps = load("gateway", p, r)
        if not steps or steps[0]["status"] != "ok":
            continue
        s = steps[0]
        thr = s["summary"]["throughput_rps"]
        u = role(s, "gateway")
        rps.append(thr)
        cpu.append(u["cpu_millicores_avg"] / 1000 / (thr / 1000))
        mib.append(u["working_set_mib_avg"] or u["rss_mib_avg"])
        per_core.append(thr / max(u["cpu_millicores_avg"] / 1000, 1e-9))
    gw[p] = (med(rps), med(cpu))
    print("%-8s %10.0f %14.3f %10.0f %8.1f" % (p, med(rps), med(cpu), med(per_core), med(mib)))
if "envoy" in rows:
    print("\nratios to envoy (medians): sidecar vCPU/1k RPS, gateway req/s")
    for p in proxies:
        if p != "envoy":
            print("  %-8s sidecar CPU %.2fx   gateway req/s %.2fx" % (p, rows[p][0] / rows["envoy"][0], gw[p][0] / gw["envoy"][0]))
PY
