#!/usr/bin/env bash
# bench/h3.sh - HTTP/3 requests per generator CPU-second: meshbench against oha (Rust, hyper's
# h3 over quinn; built from crates.io with its http3 feature, cached) side by side in one run.
# h2load is the usual peer, but Debian's nghttp2-client (1.52) is built without ngtcp2: it has
# no HTTP/3 (its --npn-list h3 still opens TCP), so it is not in this run.
#
#   server    : Debian's caddy with HTTP/3 on (quic-go: code neither client shares), one
#               GOMAXPROCS, pinned to CPU $SRV_CPU, answering $SIZE bytes
#   generator : pinned to CPU $GEN_CPU; meshbench `run --http3 --threads 1`, oha
#               `--http-version 3`; both closed loops of $CONNS connections, one request in
#               flight each, certificates not checked (caddy's internal CA)
#   reps      : $REPS, interleaved
#
# Prints the median requests per second and requests per generator CPU-second (user + system
# of the client process, from /usr/bin/time), and meshbench/oha.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18443}
DUR=${DUR:-5}
CONNS=${CONNS:-16}
SIZE=${SIZE:-1024}
REPS=${REPS:-5}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/h3-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
OHA_ROOT=${OHA_ROOT:-/var/cache/meshbench/oha}
WORK=$(mktemp -d /tmp/meshbench-h3.XXXXXX)

command -v caddy >/dev/null || apt-get install -y -q caddy >/dev/null
command -v /usr/bin/time >/dev/null || apt-get install -y -q time >/dev/null
OHA_ROOT="$OHA_ROOT" "$ROOT/scripts/install-oha.sh" || echo "oha did not build; measuring meshbench alone" >&2
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

body=$(head -c "$SIZE" /dev/zero | tr '\0' x)
cat > "$WORK/Caddyfile" <<EOF
{
	admin off
	auto_https disable_redirects
	skip_install_trust
	default_sni 127.0.0.1
	storage file_system $WORK/data
	servers {
		protocols h1 h2 h3
	}
	log {
		level ERROR
	}
}
https://127.0.0.1:$PORT {
	tls internal
	respond "$body" 200
}
EOF
GOMAXPROCS=1 HOME="$WORK" XDG_DATA_HOME="$WORK" XDG_CONFIG_HOME="$WORK" taskset -c "$SRV_CPU" \
  caddy run --adapter caddyfile --config "$WORK/Caddyfile" > "$WORK/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; rm -rf "$WORK"' EXIT
trap 'exit 130' INT TERM
sleep 2
URL="https://127.0.0.1:$PORT/"

printf 'client\trep\trequests\tcpu_s\trequests_per_cpu_s\trequests_per_s\n' > "$OUT"
record() { # client rep requests cpu_s
  awk -v c="$1" -v r="$2" -v n="$3" -v cpu="$4" -v d="$DUR" \
    'BEGIN { printf "%s\t%s\t%d\t%.3f\t%.0f\t%.0f\n", c, r, n, cpu, n / cpu, n / d }' >> "$OUT"
}
for rep in $(seq 1 "$REPS"); do
  /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$GEN_CPU" "$MB" run "$URL" --http3 -k \
    --threads 1 -c "$CONNS" -d "$DUR" -q --json "$WORK/mb.json" >/dev/null 2>&1
  n=$(python3 -c "import json; print(json.load(open('$WORK/mb.json'))['status_codes'].get('200', 0))")
  record meshbench "$rep" "$n" "$(awk '{ print $1 + $2 }' "$WORK/time")"

  if [ -x "$OHA_ROOT/bin/oha" ]; then
    /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$GEN_CPU" "$OHA_ROOT/bin/oha" --http-version 3 \
      --insecure -c "$CONNS" -z "${DUR}s" --no-tui --output-format json -o "$WORK/oha.json" "$URL" >/dev/null 2>&1
    n=$(python3 -c "import json; print(json.load(open('$WORK/oha.json'))['statusCodeDistribution'].get('200', 0))")
    record oha "$rep" "$n" "$(awk '{ print $1 + $2 }' "$WORK/time")"
  fi
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
med = {}
for c in sorted({r['client'] for r in rows}):
    rs = [r for r in rows if r['client'] == c]
    med[c] = (statistics.median(float(r['requests_per_cpu_s']) for r in rs),
              statistics.median(float(r['requests_per_s']) for r in rs))
    print(f"{c:10s} median {med[c][1]:9.0f} req/s  {med[c][0]:9.0f} req per CPU-s")
if 'oha' in med and 'meshbench' in med:
    print(f"meshbench/oha per CPU-s: {med['meshbench'][0] / med['oha'][0]:.2f}x, "
          f"per second: {med['meshbench'][1] / med['oha'][1]:.2f}x")
PY
echo "rows in $OUT"
