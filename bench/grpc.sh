#!/usr/bin/env bash
# bench/grpc.sh - gRPC unary calls per generator CPU-second: meshbench against fortio's gRPC
# client and ghz (built from their Go modules, cached), side by side in one run.
#
#   server    : fortio's own gRPC ping server (GOMAXPROCS=1) pinned to CPU $SRV_CPU, so that
#               neither client talks to its own code
#   generator : pinned to CPU $GEN_CPU; meshbench `run --grpc --threads 1`, fortio `load -grpc
#               -ping` (GOMAXPROCS=1), ghz `--cpus 1` (the method found by server reflection);
#               all closed loops of $CONNS connections, one call in flight each, $PAYLOAD-byte pings
#   reps      : $REPS, interleaved
#
# Prints the median calls per second and calls per generator CPU-second (user + system of the
# client process, from /usr/bin/time), and meshbench/fortio.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18279}
DUR=${DUR:-5}
CONNS=${CONNS:-16}
PAYLOAD=${PAYLOAD:-100}
REPS=${REPS:-5}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/grpc-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
FORTIO=${FORTIO:-/var/cache/meshbench/fortio/bin/fortio}
GHZ_BIN=${GHZ_BIN:-/var/cache/meshbench/ghz/bin}
GHZ_VERSION=v0.93.0  # what the Go proxy here serves as latest
WORK=$(mktemp -d /tmp/meshbench-grpc.XXXXXX)

"$ROOT/scripts/install-fortio.sh"
[ -x "$GHZ_BIN/ghz" ] || GOBIN="$GHZ_BIN" nice go install "github.com/bojand/ghz/cmd/ghz@$GHZ_VERSION" \
  || echo "ghz did not build; comparing with fortio only" >&2
command -v /usr/bin/time >/dev/null || apt-get install -y -q time >/dev/null
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

GOMAXPROCS=1 taskset -c "$SRV_CPU" "$FORTIO" server -grpc-port "127.0.0.1:$PORT" -http-port disabled \
  -redirect-port disabled -tcp-port disabled -udp-port disabled > "$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
sleep 1

printf 'client\trep\tcalls\tcpu_s\tcalls_per_cpu_s\tcalls_per_s\n' > "$OUT"
record() { # client rep calls cpu_s
  awk -v c="$1" -v r="$2" -v n="$3" -v cpu="$4" -v d="$DUR" \
    'BEGIN { printf "%s\t%s\t%d\t%.3f\t%.0f\t%.0f\n", c, r, n, cpu, n / cpu, n / d }' >> "$OUT"
}
for rep in $(seq 1 "$REPS"); do
  /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$GEN_CPU" "$MB" run "http://127.0.0.1:$PORT/" \
    --grpc --grpc-payload "$PAYLOAD" --threads 1 -c "$CONNS" -d "$DUR" -q --json "$WORK/mb.json" >/dev/null 2>&1
  calls=$(python3 -c "import json; print(json.load(open('$WORK/mb.json'))['grpc_status'].get('OK', 0))")
  record meshbench "$rep" "$calls" "$(awk '{ print $1 + $2 }' "$WORK/time")"

  GOMAXPROCS=1 /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$GEN_CPU" "$FORTIO" load -grpc -ping \
    -payload-size "$PAYLOAD" -c "$CONNS" -qps 0 -t "${DUR}s" -json "$WORK/f.json" "127.0.0.1:$PORT" >/dev/null 2>&1
  calls=$(python3 -c "import json; print(json.load(open('$WORK/f.json'))['RetCodes'].get('SERVING', 0))")
  record fortio "$rep" "$calls" "$(awk '{ print $1 + $2 }' "$WORK/time")"

  if [ -x "$GHZ_BIN/ghz" ]; then
    payload=$(head -c "$PAYLOAD" /dev/zero | tr '\0' x)
    /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$GEN_CPU" "$GHZ_BIN/ghz" --insecure --cpus 1 \
      --call fgrpc.PingServer/Ping -d "{\"payload\":\"$payload\"}" --connections "$CONNS" -c "$CONNS" \
      -z "${DUR}s" -O json -o "$WORK/g.json" "127.0.0.1:$PORT" >/dev/null 2>&1
    calls=$(python3 -c "import json; print(json.load(open('$WORK/g.json'))['statusCodeDistribution'].get('OK', 0))")
    record ghz "$rep" "$calls" "$(awk '{ print $1 + $2 }' "$WORK/time")"
  fi
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
med = {}
for c in sorted({r['client'] for r in rows}):
    rs = [r for r in rows if r['client'] == c]
    med[c] = (statistics.median(float(r['calls_per_cpu_s']) for r in rs),
              statistics.median(float(r['calls_per_s']) for r in rs))
    print(f"{c:10s} median {med[c][1]:9.0f} calls/s  {med[c][0]:9.0f} calls per CPU-s")
for peer in ('fortio', 'ghz'):
    if peer in med:
        print(f"meshbench/{peer}: {med['meshbench'][0] / med[peer][0]:.2f}x calls per CPU-s, "
              f"{med['meshbench'][1] / med[peer][1]:.2f}x calls/s")
PY
echo "rows in $OUT" >&2
