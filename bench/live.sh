#!/usr/bin/env bash
# bench/live.sh - what watching a run costs the generator, measured side by side in one run.
#
#   server    : nginx, 1 worker pinned to CPU $SRV_CPU, 127.0.0.1:$PORT, 1 KiB body
#   generator : pinned to CPU $GEN_CPU, open loop at $RATE req/s over $CONNS connections, $DUR s;
#               CPU time from /usr/bin/time (user + sys)
#   variants  : off      - no live face
#               on       - --metrics-listen scraped every second by a real Prometheus,
#                          --prometheus-remote-write to the same Prometheus, --web polled every
#                          second (the page's JSON), all at once
#               baseline - BASELINE=/path/to/an/older/meshbench (optional): the engine before the
#                          live stream, to see what the richer per-second intervals cost
#   reps      : $REPS, interleaved (off, on, baseline, then again)
#
# Prints the median requests per generator CPU-second of each variant and the ratio on/off.
# The issue's bar: on costs under 2 % (ratio >= 0.98).
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18096}
DUR=${DUR:-10}
CONNS=${CONNS:-64}
REPS=${REPS:-5}
RATE=${RATE:-50000}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
WORK=$(mktemp -d /tmp/meshbench-live.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/live-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
BASELINE=${BASELINE:-}
URL=http://127.0.0.1:$PORT/
MPORT=$((PORT + 1)); WPORT=$((PORT + 2)); PPORT=$((PORT + 3))

"$ROOT/scripts/install-deps.sh"
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

body=$(python3 -c 'import string; s=(string.ascii_letters+string.digits)*20; print(s[:1024], end="")')
. "$HERE/nginx.sh"
start_nginx "$WORK" "$PORT" "$SRV_CPU" "$body" || exit 1

# A real Prometheus: scrapes /metrics every second and takes remote write.
cat > "$WORK/prometheus.yml" <<YML
global: { scrape_interval: 1s, scrape_timeout: 900ms }
scrape_configs:
  - job_name: meshbench
    static_configs: [ { targets: ['127.0.0.1:$MPORT'] } ]
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address=127.0.0.1:$PPORT --web.enable-remote-write-receiver \
  --enable-feature=native-histograms > "$WORK/prometheus.log" 2>&1 &
PROM_PID=$!
POLL_PID=
cleanup() {
  kill -QUIT $NGINX_PID 2>/dev/null; wait $NGINX_PID 2>/dev/null
  kill $PROM_PID ${POLL_PID:-} 2>/dev/null; wait $PROM_PID 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PPORT/-/ready" >/dev/null && break; sleep 0.2; done
echo "nginx on CPU $SRV_CPU, generator on CPU $GEN_CPU, prometheus on 127.0.0.1:$PPORT; work $WORK" >&2

printf 'variant\trep\trequests\tgen_cpu_s\treq_per_cpu_s\trps\n' > "$OUT"
run_one() {
  local variant=$1 rep=$2 base=$WORK/$1-$2 bin=$MB extra=()
  case $variant in
    baseline) bin=$BASELINE ;;
    on) extra=(--metrics-listen 127.0.0.1:$MPORT --web 127.0.0.1:$WPORT
               --prometheus-remote-write "http://127.0.0.1:$PPORT/api/v1/write")
        # The page's poll, once a second, as a browser would.
        ( while sleep 1; do curl -s -m 1 "http://127.0.0.1:$WPORT/" >/dev/null 2>&1;
            curl -s -m 1 "http://127.0.0.1:$WPORT/api/board" >/dev/null 2>&1; done ) &
        POLL_PID=$! ;;
  esac
  timeout -k 5 $((DUR + 60)) taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S %M' -o "$base.time" \
    "$bin" run -q -c $CONNS -r $RATE -d ${DUR}s --json "$base.json" "${extra[@]}" "$URL" \
    > "$base.out" 2> "$base.err" < /dev/null
  [ -n "$POLL_PID" ] && { kill $POLL_PID 2>/dev/null; wait $POLL_PID 2>/dev/null; POLL_PID=; }
  python3 - "$variant" "$rep" "$base" >> "$OUT" <<'PY'
import json, sys
variant, rep, base = sys.argv[1:4]
user, sys_, rss = open(base + ".time").read().split()[-3:]
cpu = float(user) + float(sys_)
r = json.load(open(base + ".json"))
n = r["requests"]["ok"]
print("\t".join(map(str, [variant, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, r["throughput_rps"]])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

for rep in $(seq 1 "$REPS"); do
  for variant in off on ${BASELINE:+baseline}; do run_one "$variant" "$rep"; done
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for v in ("off", "on", "baseline"):
    xs = [float(r["req_per_cpu_s"]) for r in rows if r["variant"] == v]
    if xs:
        med[v] = statistics.median(xs)
        print("%-8s median %8.0f req per generator CPU-s over %d reps (%s)" % (v, med[v], len(xs), ", ".join("%.0f" % x for x in xs)))
if "on" in med and "off" in med:
    print("on/off: %.3f (bar: >= 0.98)" % (med["on"] / med["off"]))
if "baseline" in med and "off" in med:
    print("off/baseline: %.3f (the richer per-second intervals)" % (med["off"] / med["baseline"]))
PY
