#!/usr/bin/env bash
# bench/soak.sh - does a long run stay flat? meshbench at a steady open-loop rate for $DUR
# (default 10 minutes) against nginx, its resident memory, open file descriptors and threads
# sampled every second from /proc; after the warm-up ($SETTLE s) each must stay within 2 % of
# its level at the end of the warm-up (fds and threads exactly).
#
#   RATE=2000 CONNS=50 DUR=600 SETTLE=60 bench/soak.sh
#
# Prints the figures and PASS/FAIL; the samples go to $OUT. Not part of the test suite (too long).
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18290}
RATE=${RATE:-2000}
CONNS=${CONNS:-50}
DUR=${DUR:-600}
SETTLE=${SETTLE:-60}
ARGS=${ARGS:-}
WORK=$(mktemp -d /tmp/meshbench-soak.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/soak-$(date +%Y%m%d-%H%M%S).tsv}
"$ROOT/scripts/install-deps.sh"
if [ -z "${MB:-}" ]; then  # MB=/path/to/meshbench soaks that binary as it is
  MB=$ROOT/target/release/meshbench
  (cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }
fi
. "$HERE/nginx.sh"
start_nginx "$WORK" "$PORT" "" soak || exit 1
cleanup() { kill -QUIT $NGINX_PID 2>/dev/null; [ -n "${MB_PID:-}" ] && kill -INT $MB_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086
"$MB" run -q -c "$CONNS" -r "$RATE" -d "${DUR}s" --json "$WORK/soak.json" $ARGS "http://127.0.0.1:$PORT/" > "$WORK/summary.txt" &
MB_PID=$!
printf 'second\trss_kib\tfds\tthreads\n' > "$OUT"
started=$SECONDS
while kill -0 $MB_PID 2>/dev/null; do
  rss=$(awk '/^VmRSS/{print $2}' /proc/$MB_PID/status 2>/dev/null) || break
  thr=$(awk '/^Threads/{print $2}' /proc/$MB_PID/status 2>/dev/null) || break
  fds=$(ls /proc/$MB_PID/fd 2>/dev/null | wc -l)
  [ -n "$rss" ] && printf '%d\t%s\t%s\t%s\n' $((SECONDS - started)) "$rss" "$fds" "$thr" >> "$OUT"
  sleep 1
done
wait $MB_PID
MB_PID=
cat "$WORK/summary.txt"
python3 - "$OUT" "$SETTLE" "$WORK/soak.json" <<'PY'
import csv, json, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")]
settle = int(sys.argv[2])
after = [r for r in rows if int(r["second"]) >= settle][:-2]  # the last samples see the drain
if not after:
    sys.exit("the run was shorter than the warm-up (%d s)" % settle)
ok = True
for key, tol in (("rss_kib", 0.02), ("fds", 0.0), ("threads", 0.0)):
    v = [int(r[key]) for r in after]
    base = v[0]
    drift = (max(v) - min(v)) / base if base else 0
    good = drift <= tol + 1e-9
    ok &= good
    print("%-8s at %d s: %d; over the next %d s min %d max %d: drift %.2f %% (limit %.0f %%) %s"
          % (key, settle, base, len(v), min(v), max(v), 100 * drift, 100 * tol, "ok" if good else "FAIL"))
r = json.load(open(sys.argv[3]))
print("requests ok %d, errors %d, throughput %.0f/s, latency p99 %.3f ms, valid %s"
      % (r["requests"]["ok"], r["requests"]["errors"], r["throughput_rps"], r["latency_us"]["p99"] / 1000,
         r["generator"].get("check", {}).get("valid")))
print("PASS" if ok else "FAIL")
PY
