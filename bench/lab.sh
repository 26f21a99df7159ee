#!/usr/bin/env bash
# bench/lab.sh - what the lab costs on THIS machine: the overhead of a step beyond its warm-up,
# measured time and cool-down (start the rig, start the sampler, store the step, stop the rig),
# the time from `meshbench experiment` to the first request, and the sampler's CPU.
#
#   meshbench : `meshbench experiment` with $STEPS steps of serveronly (haproxy sidecar, 1 core,
#               mutual TLS off) at 200 rps x 4 connections, $DUR s measured after $WARM s warm-up
#   glue      : the same steps the way shell scripts do them (Istio's runner, k6 wrappers):
#               start `meshbench backend` and haproxy, poll the port, `meshbench run`, kill both
#   reps      : $REPS, interleaved (meshbench then glue, then again)
#
# Overhead per step = (wall time - steps x (warm-up + measured)) / steps, median of the reps;
# printed with the ratio meshbench/glue. First request = from the command's start to the first
# sample of step 1 (the sampler starts right before the load). Sampler CPU = the `sampler`
# pseudo-role's millicores, median over every step. Noisy shared machines: read the ratios.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
STEPS=${STEPS:-6}
REPS=${REPS:-3}
DUR=${DUR:-1}
WARM=${WARM:-0.5}
WORK=$(mktemp -d /tmp/meshbench-labbench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
"$ROOT/scripts/install-deps.sh"
cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
MB="$ROOT/target/release/meshbench"
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)

cat > "$WORK/exp.yaml" <<EOF
name: labbench
topologies: [serveronly]
duration_secs: $DUR
warmup_secs: $WARM
cooldown_secs: 0
repeats: $STEPS
load:
  rate_rps: [200]
  connections: [4]
proxy:
  type: haproxy
limits:
  proxy:
    cpus: [1]
EOF

now_ms() { date +%s%3N; }

glue_step() {
  local bport=$1 pport=$2
  "$MB" backend --listen 127.0.0.1:$bport --threads 2 >/dev/null 2>&1 &
  local backend=$!
  cat > "$WORK/h.cfg" <<EOF
global
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend in
  bind 127.0.0.1:$pport
  default_backend next
backend next
  http-reuse always
  server next 127.0.0.1:$bport
EOF
  "$HAPROXY" -db -f "$WORK/h.cfg" >/dev/null 2>&1 &
  local proxy=$!
  until (exec 3<>/dev/tcp/127.0.0.1/$pport) 2>/dev/null; do sleep 0.02; done
  until (exec 3<>/dev/tcp/127.0.0.1/$bport) 2>/dev/null; do sleep 0.02; done
  "$MB" run "http://127.0.0.1:$pport/" -r 200 -c 4 -d ${DUR}s --warmup ${WARM}s -q >/dev/null
  kill $proxy $backend; wait $proxy $backend 2>/dev/null
}

rows="$WORK/rows.txt"
: > "$rows"
for rep in $(seq 1 "$REPS"); do
  store="$WORK/r$rep.db"
  t0=$(now_ms)
  "$MB" experiment "$WORK/exp.yaml" --store "$store" -q >/dev/null 2>&1
  t1=$(now_ms)
  python3 - "$store" "$t0" "$t1" "$STEPS" "$DUR" "$WARM" >> "$rows" <<'PY'
import sqlite3, sys, statistics
store, t0, t1, steps, dur, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
db = sqlite3.connect(store)
first = db.execute("select min(t_ms) from samples").fetchone()[0]
sampler = [r[0] for r in db.execute("select cpu_millicores_avg from usage where role='sampler'")]
overhead = ((t1 - t0) / 1000 - steps * (dur + warm)) / steps
print(f"meshbench overhead_s {overhead:.3f}")
print(f"meshbench first_request_s {(first - t0) / 1000:.3f}")
print(f"meshbench sampler_mc {statistics.median(sampler):.2f}")
PY
  t0=$(now_ms)
  for s in $(seq 1 "$STEPS"); do glue_step $((21000 + s)) $((22000 + s)); done
  t1=$(now_ms)
  python3 -c "print(f'glue overhead_s {(($t1 - $t0) / 1000 - $STEPS * ($DUR + $WARM)) / $STEPS:.3f}')" >> "$rows"
done

python3 - "$rows" <<'PY'
import sys, statistics, collections
v = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tool, key, x = line.split()
    v[(tool, key)].append(float(x))
med = {k: statistics.median(x) for k, x in v.items()}
print(f"reps: {len(v[('meshbench', 'overhead_s')])} (medians; raw rows below)")
print(f"overhead per step     meshbench {med[('meshbench','overhead_s')]:.3f} s   glue script {med[('glue','overhead_s')]:.3f} s   ratio {med[('meshbench','overhead_s')] / med[('glue','overhead_s')]:.2f}x")
print(f"to the first request  meshbench {med[('meshbench','first_request_s')]:.3f} s")
print(f"sampler CPU           {med[('meshbench','sampler_mc')]:.2f} millicores ({med[('meshbench','sampler_mc')] / 10:.2f} % of a core)")
for (tool, key), xs in sorted(v.items()):
    print(f"  {tool:9} {key:16} {' '.join(f'{x:.3f}' for x in xs)}")
PY
