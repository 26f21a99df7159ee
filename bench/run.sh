#!/usr/bin/env bash
# bench/run.sh - meshbench beside its peers on THIS machine, measured side by side in one run.
#
#   server    : nginx, 1 worker pinned to CPU $SRV_CPU, 127.0.0.1:$PORT, 1 KiB body
#   generator : pinned to CPU $GEN_CPU, CPU time from /usr/bin/time (user + sys)
#   phases    : closed  - closed loop, $CONNS connections, $DUR s       (meshbench, wrk, h2load)
#               open    - open loop at $RATE req/s                       (meshbench, h2load)
#               openhi  - open loop at $RATE_HI req/s, below nginx's ceiling (meshbench, h2load)
#   reps      : $REPS, interleaved (rep 1 of every tool and phase, then rep 2, ...)
#   extras    : peak RSS of a 5 s and a 30 s run; 10,000 connections; backend vs nginx
#               requests per server CPU-second (set EXTRAS=0 to skip)
#   baseline  : BASELINE=/path/to/an/older/meshbench runs it as one more tool, interleaved
#               with the others, so a change is measured before and after in the same run
#   binary    : MB=/path/to/meshbench measures that build instead of target/release's (which is
#               built first otherwise); give BASELINE a build of the same profile
#
# Prints the median of each figure and the ratios meshbench/peer; raw rows go to $OUT.
# Figures are requests per generator CPU-second = total requests / (user + sys seconds).
# Machines here are shared and noisy: compare ratios from the same run, not absolute times.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18090}
DUR=${DUR:-10}
CONNS=${CONNS:-50}
REPS=${REPS:-3}
RATE=${RATE:-5000}
RATE_HI=${RATE_HI:-50000}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
PHASES=${PHASES:-"closed open openhi"}
EXTRAS=${EXTRAS:-1}
WORK=$(mktemp -d /tmp/meshbench-bench.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/run-$(date +%Y%m%d-%H%M%S).tsv}
MB=${MB:-}
BASELINE=${BASELINE:-}
URL=http://127.0.0.1:$PORT/

"$ROOT/scripts/install-deps.sh"
if [ -z "$MB" ]; then
  MB=$ROOT/target/release/meshbench
  (cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }
fi

# ---------------------------------------------------------------- nginx ----
body=$(python3 -c 'import string; s=(string.ascii_letters+string.digits)*20; print(s[:1024], end="")')
mask=$(printf '%x' $((1 << SRV_CPU)))
. "$HERE/nginx.sh"
start_nginx "$WORK" "$PORT" "$SRV_CPU" "$body" || exit 1
cleanup() { kill -QUIT $NGINX_PID 2>/dev/null; wait $NGINX_PID 2>/dev/null; [ -n "${BACKEND_PID:-}" ] && kill $BACKEND_PID 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "nginx $(nginx -v 2>&1 | cut -d/ -f2) pinned to CPU $SRV_CPU (mask $mask); generators on CPU $GEN_CPU; work $WORK" >&2

# ------------------------------------------------------------- one run ----
# run_one PHASE TOOL REP: runs the generator under /usr/bin/time, appends a row to $OUT.
printf 'phase\ttool\trep\trequests\tgen_cpu_s\treq_per_cpu_s\trss_kib\trps\textra\n' > "$OUT"
run_one() {
  local phase=$1 tool=$2 rep=$3 base=$WORK/$1-$2-$3 per=$(( ${4:-$RATE} / CONNS )) rate=${4:-$RATE}
  local cmd=()
  case $phase:$tool in
    closed:meshbench) cmd=("$MB" run -q -c $CONNS -d ${DUR}s --json "$base.json" "$URL") ;;
    closed:baseline)  cmd=("$BASELINE" run -q -c $CONNS -d ${DUR}s --json "$base.json" "$URL") ;;
    closed:wrk)       cmd=(wrk -t1 -c$CONNS -d${DUR}s "$URL") ;;
    closed:h2load)    cmd=(h2load --h1 -t1 -c$CONNS -D${DUR}s "$URL") ;;
    open*:meshbench)  cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    open*:baseline)   cmd=("$BASELINE" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    open*:h2load)     cmd=(h2load --h1 -t1 -c$CONNS -D${DUR}s --rps=$per "$URL") ;;
    *) return 0 ;;
  esac
  timeout -k 5 $((DUR + 60)) taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S %M' -o "$base.time" \
    "${cmd[@]}" > "$base.out" 2> "$base.err" < /dev/null
  python3 - "$phase" "$tool" "$rep" "$base" >> "$OUT" <<'PY'
import json, re, sys
phase, tool, rep, base = sys.argv[1:5]
user, sys_, rss = open(base + ".time").read().split()[-3:]
cpu = float(user) + float(sys_)
out = open(base + ".out", errors="replace").read()
extra = ""
if tool in ("meshbench", "baseline"):
    r = json.load(open(base + ".json"))
    n, rps = r["requests"]["ok"], r["throughput_rps"]
    lag = r["schedule_lag_us"]
    extra = "saturated=%s" % r["generator"]["saturated"]
    if lag: extra += " lag_p99_us=%d" % lag["p99"]
elif tool == "wrk":
    n = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
else:
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    n = int(m.group(1))
    rps = float(re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out).group(1))
print("\t".join(map(str, [phase, tool, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, rss, round(rps, 1), extra])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

# warm-up, not recorded
timeout 20 taskset -c "$GEN_CPU" wrk -t1 -c$CONNS -d2s "$URL" > /dev/null 2>&1
for rep in $(seq 1 "$REPS"); do
  for phase in $PHASES; do
    case $phase in closed) tools="meshbench wrk h2load"; r=$RATE ;; open) tools="meshbench h2load"; r=$RATE ;; openhi) tools="meshbench h2load"; r=$RATE_HI ;; esac
    [ -n "$BASELINE" ] && tools="$tools baseline"
    for tool in $tools; do run_one "$phase" "$tool" "$rep" "$r"; done
  done
done

python3 "$HERE/summarize.py" "$OUT" "requests"

[ "$EXTRAS" = 1 ] || exit 0
echo >&2
echo "== peak RSS: 5 s vs 30 s run (closed loop, $CONNS connections)" >&2
for d in 5 30; do
  taskset -c "$GEN_CPU" /usr/bin/time -f '%M' -o "$WORK/rss-$d" "$MB" run -q -c $CONNS -d ${d}s "$URL" > /dev/null
done
python3 -c "a=int(open('$WORK/rss-5').read().split()[-1]); b=int(open('$WORK/rss-30').read().split()[-1]); print('peak RSS 5 s: %.1f MiB, 30 s: %.1f MiB, ratio %.2f' % (a/1024, b/1024, b/a))"

echo "== 10,000 concurrent connections from one process" >&2
"$MB" run -q -c 10000 -d 5s --json "$WORK/c10k.json" "$URL" > /dev/null
python3 -c "import json; r=json.load(open('$WORK/c10k.json')); print('10,000 connections: %d ok, %d errors, %.0f req/s, peak RSS %.1f MiB' % (r['requests']['ok'], r['requests']['errors'], r['throughput_rps'], r['generator']['rss_max_bytes']/2**20))"

echo "== backend vs nginx: requests per server CPU-second (wrk on CPU $GEN_CPU, server on CPU $SRV_CPU, 1 KiB)" >&2
BPORT=$((PORT + 1))
taskset -c "$SRV_CPU" "$MB" backend --listen 127.0.0.1:$BPORT --size 1024 > /dev/null &
BACKEND_PID=$!
sleep 0.5
srv_cpu() { python3 -c "import os; f=open('/proc/$1/stat').read().rsplit(')',1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf('SC_CLK_TCK'))"; }
NGINX_WORKER=$(cat /proc/$NGINX_PID/task/$NGINX_PID/children | awk '{print $1}')
for rep in $(seq 1 "$REPS"); do
  for srv in backend nginx; do
    if [ $srv = backend ]; then pid=$BACKEND_PID; u=http://127.0.0.1:$BPORT/; else pid=$NGINX_WORKER; u=$URL; fi
    c0=$(srv_cpu $pid)
    n=$(taskset -c "$GEN_CPU" wrk -t1 -c$CONNS -d${DUR}s "$u" | awk '/requests in/{print $1}')
    c1=$(srv_cpu $pid)
    python3 -c "print('$srv\t$rep\t%d requests\t%.2f CPU-s\t%.0f req per server CPU-s' % ($n, $c1-$c0, $n/max($c1-$c0,0.01)))"
    sleep 1
  done
done
