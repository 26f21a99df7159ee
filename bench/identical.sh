#!/usr/bin/env bash
# bench/identical.sh - how much do two identical runs differ on this machine?
#
#   servers : `meshbench backend` on loopback, one thread each, one per configuration in
#             $CONFIGS: "work" spends $WORK of CPU per request at $WORK_RATE req/s (the issue's
#             spinning server; at 200 req/s it saturates here whenever the machine is busy),
#             "plain" answers at once at 1000 req/s (the fastest server there is, for the
#             absolute floor)
#   pair    : two runs in a row against the same server with the same flags ($DUR s measured
#             after $WARMUP s, open loop), then `meshbench compare A.json B.json --margin 0`
#             (the test alone, no margin), for each configuration in turn
#   pairs   : $PAIRS per configuration
#
# The compare margin (docs/cli.md, `compare --margin`) is meant to be what identical runs
# differ by. For each pair and percentile this prints how far the test's 95 % interval of
# B - A lies from zero (0 when it holds zero): the margin that pair would have needed for its
# verdict to be "no difference", in ms and as a share of A's value. A margin above the 95th
# percentile of those calls fewer than 1 pair in 20 of identical runs different. A pair in which
# either run failed the generator's self-check (docs/result.md) is counted apart: its figures
# may be the generator's. Raw rows go to $OUT. The machine is shared: its other work is part of what is measured.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18330}
PAIRS=${PAIRS:-12}
CONFIGS=${CONFIGS:-"work plain"}
WORK=${WORK:-2ms}
WORK_RATE=${WORK_RATE:-100}
DUR=${DUR:-8}
WARMUP=${WARMUP:-1}
SCRATCH=$(mktemp -d /tmp/meshbench-identical.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/identical-$(date +%Y%m%d-%H%M%S).tsv}
MB=${MB:-${CARGO_TARGET_DIR:-$ROOT/target}/release/meshbench}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$SCRATCH"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd "$ROOT" && cargo build --release --locked -q -p meshbench) || { echo "build failed" >&2; exit 1; }

declare -A URL FLAGS
start_backend() { # NAME BACKEND-FLAGS...
  local name=$1 port=$((PORT + ${#PIDS[@]}))
  shift
  "$MB" backend --listen 127.0.0.1:$port "$@" > "$SCRATCH/backend-$name.out" 2>&1 &
  PIDS+=($!)
  URL[$name]=http://127.0.0.1:$port/
  for _ in $(seq 50); do curl -sf -o /dev/null "${URL[$name]}" && return 0; sleep 0.1; done
  echo "backend $name did not start" >&2; cat "$SCRATCH/backend-$name.out" >&2; exit 1
}
for c in $CONFIGS; do
  case $c in
    work) start_backend work --work "$WORK"; FLAGS[work]="-r $WORK_RATE -c 4" ;;
    plain) start_backend plain; FLAGS[plain]="-r 1000 -c 8" ;;
    *) echo "unknown configuration $c (work, plain)" >&2; exit 2 ;;
  esac
done
echo "pairs: $PAIRS per configuration, each run ${DUR}s after ${WARMUP}s; $(for c in $CONFIGS; do printf '%s: %s %s; ' "$c" "${URL[$c]}" "${FLAGS[$c]}"; done)" >&2

printf 'config\tpair\tpercentile\ta_ms\testimate_ms\tci_low_ms\tci_high_ms\tneeded_ms\tvalid\n' > "$OUT"
for pair in $(seq 1 "$PAIRS"); do
  for c in $CONFIGS; do
    for side in a b; do
      # shellcheck disable=SC2086
      timeout -k 5 $((DUR + 60)) "$MB" run -q ${FLAGS[$c]} -d "${DUR}s" --warmup "${WARMUP}s" \
        --json "$SCRATCH/$side.json" "${URL[$c]}" > /dev/null 2> "$SCRATCH/$side.err" \
        || { echo "run $c/$side failed:" >&2; cat "$SCRATCH/$side.err" >&2; exit 1; }
    done
    "$MB" compare "$SCRATCH/a.json" "$SCRATCH/b.json" --margin 0 > "$SCRATCH/compare.txt" 2>&1 \
      || { cat "$SCRATCH/compare.txt" >&2; exit 1; }
    python3 - "$c" "$pair" "$SCRATCH/compare.txt" "$SCRATCH/a.json" "$SCRATCH/b.json" >> "$OUT" <<'PY'
import json, re, sys
config, pair, path = sys.argv[1:4]
valid = all(json.load(open(f))["generator"]["check"]["valid"] for f in sys.argv[4:6])
for line in open(path).read().splitlines():
    cells = line.split()
    # Table rows: percentile, A ms, A runs, B ms, B runs, B - A ms, shift [CI] verdict, p.
    if len(cells) < 6 or not re.fullmatch(r"p[\d.]+", cells[0]):
        continue
    m = re.search(r"([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\]", line)
    if not m:
        continue
    est, lo, hi = (float(g) for g in m.groups())
    needed = max(0.0, lo, -hi)
    print("\t".join(map(str, [config, pair, cells[0], cells[1], est, lo, hi, round(needed, 4), valid])))
PY
  done
  echo "pair $pair/$PAIRS: $(awk -F'\t' -v p="$pair" '$2 == p && $3 == "p50" {printf "%s p50 needs %s ms; ", $1, $8}' "$OUT")" >&2
done

python3 - "$OUT" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
print("how far each identical pair's 95 % interval lies from zero (the margin it would need),")
print("over the pairs whose runs both passed the generator's self-check")
print("config  pct     pairs  A median ms  clears 0   needed ms: median  p95    max   as % of A: median  p95    max")
for config in dict.fromkeys(r["config"] for r in rows):
    for pct in ["p50", "p90", "p99", "p99.9"]:
        sel = [r for r in rows if r["config"] == config and r["percentile"] == pct and r["valid"] == "True"]
        if not sel:
            continue
        need = [float(r["needed_ms"]) for r in sel]
        rel = [float(r["needed_ms"]) / float(r["a_ms"]) * 100 for r in sel]
        a = sorted(float(r["a_ms"]) for r in sel)
        print("%-7s %-6s %6d  %11.3f  %8d  %17.3f %6.3f %6.3f  %17.1f %6.1f %6.1f" % (
            config, pct, len(sel), a[len(a) // 2], sum(n > 0 for n in need),
            q(need, 0.5), q(need, 0.95), max(need), q(rel, 0.5), q(rel, 0.95), max(rel)))
invalid = {(r["config"], r["pair"]) for r in rows if r["valid"] != "True"}
print("pairs left out (a run the self-check called invalid): %d of %d" % (
    len(invalid), len({(r["config"], r["pair"]) for r in rows})))
PY
echo "rows: $OUT" >&2
