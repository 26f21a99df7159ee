#!/usr/bin/env bash
# bench/pacer.sh - does the open loop keep time on THIS machine's clock, and at what CPU cost?
#
#   floor   : bench/wakeup_floor.rs: CPU per timer wake-up and its lateness at 200 µs-5 ms
#             periods, a syscall, a clock read (the floor under any pacer that wakes per send)
#   lag     : open loop at $RATES req/s against nginx (1 worker, CPU $SRV_CPU), $CONNS
#             connections, $DUR s, generator on CPU $GEN_CPU: schedule lag p50/p99 and requests
#             per generator CPU-second, for meshbench (--idle-strategy auto, and each of $IDLES),
#             h2load (--rps per connection) and, with BASELINE=/path/to/meshbench, an older build
#   truth   : the backend spinning ${WORK_MS} ms per request (not sleeping: a sleeping server
#             inherits the clock's lateness) on CPU $SRV_CPU; meshbench open loop at 200 req/s
#             vs wrk at one connection: their p50s should agree within 0.05 ms
#   reps    : $REPS, interleaved (rep 1 of every tool and phase, then rep 2, ...)
#
# Prints medians; raw rows go to $OUT. Noisy shared machines: read ratios from one run.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18190}
DUR=${DUR:-10}
CONNS=${CONNS:-50}
REPS=${REPS:-3}
RATES=${RATES:-"200 1000 5000"}
IDLES=${IDLES:-"sleep hybrid"}
WORK_MS=${WORK_MS:-2}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
PHASES=${PHASES:-"lag truth"}
BASELINE=${BASELINE:-}
WORK=$(mktemp -d /tmp/meshbench-pacer.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/pacer-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
URL=http://127.0.0.1:$PORT/

"$ROOT/scripts/install-deps.sh"
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

echo "== floor: one timer wake-up on this machine (CPU $GEN_CPU)" >&2
rustc -O --edition 2021 -o "$WORK/floor" "$HERE/wakeup_floor.rs" && taskset -c "$GEN_CPU" "$WORK/floor" | tee "$WORK/floor.tsv"

. "$HERE/nginx.sh"
start_nginx "$WORK" "$PORT" "$SRV_CPU" "pacer bench body of some length" || exit 1
BPORT=$((PORT + 1))
taskset -c "$SRV_CPU" "$MB" backend --listen 127.0.0.1:$BPORT --size 64 --work ${WORK_MS}ms > /dev/null &
BACKEND_PID=$!
cleanup() { kill -QUIT $NGINX_PID 2>/dev/null; kill $BACKEND_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$BPORT/" && break; sleep 0.1; done

printf 'phase\ttool\trep\trequests\tgen_cpu_s\treq_per_cpu_s\tlag_p50_us\tlag_p99_us\tp50_ms\textra\n' > "$OUT"
# one PHASE TOOL REP RATE
one() {
  local phase=$1 tool=$2 rep=$3 rate=$4 base=$WORK/$1-$2-$3-$4 cmd=()
  case $phase:$tool in
    lag:meshbench-*)  cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s --idle-strategy ${tool#meshbench-} --json "$base.json" "$URL") ;;
    lag:meshbench)    cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    lag:baseline)     cmd=("$BASELINE" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    lag:h2load)       cmd=(h2load --h1 -t1 -c$CONNS -D${DUR}s --rps=$(python3 -c "print($rate/$CONNS)") "$URL") ;;
    truth:meshbench)  cmd=("$MB" run -q -c 4 -r 200 -d ${DUR}s --json "$base.json" "http://127.0.0.1:$BPORT/") ;;
    truth:wrk)        cmd=(wrk -t1 -c1 -d${DUR}s --latency "http://127.0.0.1:$BPORT/") ;;
  esac
  timeout -k 5 $((DUR + 60)) taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S' -o "$base.time" \
    "${cmd[@]}" > "$base.out" 2> "$base.err" < /dev/null
  python3 - "$phase" "$tool" "$rep" "$rate" "$base" >> "$OUT" <<'PY'
import json, re, sys
phase, tool, rep, rate, base = sys.argv[1:6]
user, sys_ = open(base + ".time").read().split()[-2:]
cpu = float(user) + float(sys_)
out = open(base + ".out", errors="replace").read()
lag50 = lag99 = p50 = ""
extra = ""
if tool.startswith("meshbench") or tool == "baseline":
    r = json.load(open(base + ".json"))
    n = r["requests"]["ok"]
    lag = r["schedule_lag_us"] or {}
    lag50, lag99 = lag.get("p50", ""), lag.get("p99", "")
    p50 = r["latency_us"]["p50"] / 1000
    g = r["generator"]
    wake = g.get("wakeup_error_us") or {}
    extra = "wake_p99_us=%s spin_s=%s valid=%s" % (wake.get("p99", "-"), g.get("spin_secs", "-"), g.get("check", {}).get("valid", "-"))
elif tool == "wrk":
    n = int(re.search(r"(\d+) requests in", out).group(1))
    m = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
    p50 = float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]
else:
    n = int(re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out).group(1))
print("\t".join(map(str, [phase + ("@" + rate if phase == "lag" else ""), tool, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, lag50, lag99, p50, extra])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

timeout 20 taskset -c "$GEN_CPU" wrk -t1 -c$CONNS -d2s "$URL" > /dev/null 2>&1
for rep in $(seq 1 "$REPS"); do
  for phase in $PHASES; do
    if [ "$phase" = lag ]; then
      tools="meshbench h2load"
      for i in $IDLES; do tools="$tools meshbench-$i"; done
      [ -n "$BASELINE" ] && tools="$tools baseline"
      for rate in $RATES; do for tool in $tools; do one lag "$tool" "$rep" "$rate"; done; done
    else
      for tool in meshbench wrk; do one truth "$tool" "$rep" 200; done
    fi
  done
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
groups = {}
for r in rows:
    groups.setdefault((r["phase"], r["tool"]), []).append(r)
med = lambda rs, k: statistics.median(float(r[k]) for r in rs if r[k] != "")
print("\nmedians of %d interleaved repetitions" % max(len(v) for v in groups.values()))
print("%-10s %-18s %12s %10s %10s %9s" % ("phase", "tool", "req/CPU-s", "lag p50", "lag p99", "p50 ms"))
for (phase, tool), rs in groups.items():
    f = lambda k: ("%.0f" % med(rs, k)) if any(r[k] != "" for r in rs) else "-"
    p50 = ("%.3f" % med(rs, "p50_ms")) if any(r["p50_ms"] != "" for r in rs) else "-"
    print("%-10s %-18s %12s %10s %10s %9s" % (phase, tool, f("req_per_cpu_s"), f("lag_p50_us"), f("lag_p99_us"), p50))
print("\nratios (requests per generator CPU-second, medians)")
for (phase, tool), rs in groups.items():
    peer = groups.get((phase, "h2load"))
    if peer and tool != "h2load":
        print("  %-10s %-18s / h2load  %.2fx" % (phase, tool, med(rs, "req_per_cpu_s") / med(peer, "req_per_cpu_s")))
t_mb, t_wrk = groups.get(("truth", "meshbench")), groups.get(("truth", "wrk"))
if t_mb and t_wrk:
    d = med(t_mb, "p50_ms") - med(t_wrk, "p50_ms")
    print("\ntruth: p50 meshbench %.3f ms, wrk (1 connection) %.3f ms, difference %+.3f ms (goal within 0.05)" % (med(t_mb, "p50_ms"), med(t_wrk, "p50_ms"), d))
PY
