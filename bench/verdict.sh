#!/usr/bin/env bash
# bench/verdict.sh - does `meshbench compare` call B slower exactly when B's server is slower?
#
#   servers : `meshbench backend --delay D --delay-mode $DELAY_MODE`, one thread each, on
#             loopback: two at $DELAY_MS (A, and the null's B), one at $DELAY_MS + s for each
#             shift s in $SHIFTS (ms)
#   trial   : one run against each server, in a shuffled order (open loop, $RATE req/s,
#             $CONNS connections, $DUR s measured after $WARMUP s), then
#             `meshbench compare A.json B.json` for each shift; at shift 0, B is the second
#             server with A's delay
#   trials  : $TRIALS
#
# Prints, per shift and percentile, the share of trials the verdict called slower, faster,
# within noise and too short to tell, and the median estimated shift. At shift 0, slower +
# faster is the false-positive rate (the test allows 2.9 % with four one-second intervals a
# side, 3.2 % with five); above 0, slower is the power. Raw rows go to $OUT.
# The machine is shared: other work on it is noise in both runs alike, and is part of the test.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18290}
DELAY_MS=${DELAY_MS:-2}
SHIFTS=${SHIFTS:-"0 0.5 1 2"}
DELAY_MODE=${DELAY_MODE:-spin}
TRIALS=${TRIALS:-20}
RATE=${RATE:-500}
CONNS=${CONNS:-8}
DUR=${DUR:-4}
WARMUP=${WARMUP:-0.5}
WORK=$(mktemp -d /tmp/meshbench-verdictbench.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/verdict-$(date +%Y%m%d-%H%M%S).tsv}
MB=${MB:-${CARGO_TARGET_DIR:-$ROOT/target}/release/meshbench}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd "$ROOT" && cargo build --release --locked -q -p meshbench) || { echo "build failed" >&2; exit 1; }

# ------------------------------------------------------------- servers ----
# Server names: "null" (A's delay again) and one per non-zero shift; A is "a".
names="a"
declare -A URL
start_backend() { # NAME DELAY_MS
  local port=$((PORT + ${#PIDS[@]}))
  "$MB" backend --listen 127.0.0.1:$port --delay "$(python3 -c "print(round($2 * 1000))")us" \
    --delay-mode "$DELAY_MODE" > "$WORK/backend-$1.out" 2>&1 &
  PIDS+=($!)
  URL[$1]=http://127.0.0.1:$port/
  for _ in $(seq 50); do curl -sf -o /dev/null "${URL[$1]}" && return 0; sleep 0.1; done
  echo "backend $1 did not start" >&2; cat "$WORK/backend-$1.out" >&2; exit 1
}
start_backend a "$DELAY_MS"
for s in $SHIFTS; do
  n=s$s
  [ "$s" = 0 ] && n=null
  start_backend "$n" "$(python3 -c "print($DELAY_MS + $s)")"
  names="$names $n"
done
echo "servers: $(for n in $names; do printf '%s=%s ' "$n" "${URL[$n]}"; done)(delay mode $DELAY_MODE)" >&2
echo "trials: $TRIALS, each a ${DUR}s run at $RATE req/s x $CONNS connections per server" >&2

# -------------------------------------------------------------- trials ----
printf 'trial\tshift_ms\tpercentile\tverdict\testimate_ms\tmerged_ms\n' > "$OUT"
for trial in $(seq 1 "$TRIALS"); do
  order=$(python3 -c "import random, sys; r = random.Random($trial); n = sys.argv[1:]; r.shuffle(n); print(' '.join(n))" $names)
  for n in $order; do
    timeout -k 5 $((${DUR%.*} + 60)) "$MB" run -q -r "$RATE" -c "$CONNS" -d "${DUR}s" \
      --warmup "${WARMUP}s" --json "$WORK/$n.json" "${URL[$n]}" > /dev/null 2> "$WORK/$n.err" \
      || { echo "run against $n failed:" >&2; cat "$WORK/$n.err" >&2; exit 1; }
  done
  for s in $SHIFTS; do
    n=s$s
    [ "$s" = 0 ] && n=null
    "$MB" compare "$WORK/a.json" "$WORK/$n.json" > "$WORK/compare-$n.txt" 2>&1 \
      || { cat "$WORK/compare-$n.txt" >&2; exit 1; }
    python3 - "$trial" "$s" "$WORK/compare-$n.txt" >> "$OUT" <<'PY'
import re, sys
trial, shift, path = sys.argv[1:4]
text = open(path).read()
merged = {}
for line in text.splitlines():
    cells = line.split()
    # The table's rows: percentile, A ms, A runs, B ms, B runs, B - A ms, ...
    if len(cells) > 6 and re.fullmatch(r"p[\d.]+", cells[0]):
        merged[cells[0]] = cells[5]
for m in re.finditer(r"^\s+(p[\d.]+): (B slower by|B faster by|within noise: B|too short to tell)\s*([+-]?[\d.]+)?", text, re.M):
    q, what, value = m.group(1), m.group(2), m.group(3)
    verdict = {"B slower by": "slower", "B faster by": "faster", "within noise: B": "within_noise",
               "too short to tell": "too_short"}[what]
    est = "" if value is None else float(value) * (-1 if verdict == "faster" else 1)
    print("\t".join(map(str, [trial, shift, q, verdict, est, merged.get(q, "")])))
PY
  done
  echo "trial $trial/$TRIALS: $(awk -F'\t' -v t="$trial" '$1 == t && $3 == "p50" {printf "%s:%s ", $2, $4}' "$OUT")" >&2
done

# ------------------------------------------------------------- summary ----
python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
shifts = sorted({float(r["shift_ms"]) for r in rows})
qs = ["p50", "p90", "p99", "p99.9"]
print("shift ms  pct    trials  slower  faster  within noise  too short  false pos./power  median est. ms")
for s in shifts:
    for q in qs:
        sel = [r for r in rows if float(r["shift_ms"]) == s and r["percentile"] == q]
        if not sel:
            continue
        n = len(sel)
        c = {v: sum(r["verdict"] == v for r in sel) for v in ("slower", "faster", "within_noise", "too_short")}
        est = [float(r["estimate_ms"]) for r in sel if r["estimate_ms"]]
        figure = (c["slower"] + c["faster"]) / n if s == 0 else c["slower"] / n
        label = "FP" if s == 0 else "power"
        print("%8.1f  %-5s  %6d  %6d  %6d  %12d  %9d  %5s %5.0f %%  %14s" % (
            s, q, n, c["slower"], c["faster"], c["within_noise"], c["too_short"], label,
            figure * 100, "%+.3f" % statistics.median(est) if est else "-"))
PY
echo "rows: $OUT" >&2
