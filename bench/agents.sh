#!/usr/bin/env bash
# bench/agents.sh - two agents against one process with the same CPU, side by side in one run.
#
#   server    : nginx, 1 worker pinned to CPU $SRV_CPU, 127.0.0.1:$PORT, 1 KiB body
#   generator : everything on CPU $GEN_CPU (one core in total for either variant):
#               one    - `meshbench run --threads 2`, one process
#               agents - two `meshbench agent --listen` processes and the coordinator
#                        (`run --threads 1 --agents A1,A2`: each agent one worker thread)
#   load      : $MODE: closed (-c $CONNS) or an open loop at $RATE req/s; $DUR s, no warm-up
#   reps      : $REPS, interleaved (one, agents, then again)
#
# Prints the median of each variant's requests per second and per generator CPU-second (the
# agents' CPU is read from /proc, the coordinator's from /usr/bin/time), and agents/one.
# The issue's bar: two agents deliver within 5 % of one process with the same CPU.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18196}
DUR=${DUR:-8}
CONNS=${CONNS:-64}
REPS=${REPS:-5}
MODE=${MODE:-closed}
RATE=${RATE:-40000}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
WORK=$(mktemp -d /tmp/meshbench-agents.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/agents-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
URL=http://127.0.0.1:$PORT/
A1=127.0.0.1:$((PORT + 1)); A2=127.0.0.1:$((PORT + 2))
export MESHBENCH_AGENT_TOKEN=bench-token-0123456789abcdef

"$ROOT/scripts/install-deps.sh"
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

body=$(python3 -c 'import string; s=(string.ascii_letters+string.digits)*20; print(s[:1024], end="")')
. "$HERE/nginx.sh"
start_nginx "$WORK" "$PORT" "$SRV_CPU" "$body" || exit 1
taskset -c "$GEN_CPU" "$MB" agent --listen "$A1" --name one > "$WORK/a1.log" 2>&1 &
AG1=$!
taskset -c "$GEN_CPU" "$MB" agent --listen "$A2" --name two > "$WORK/a2.log" 2>&1 &
AG2=$!
cleanup() {
  kill -QUIT $NGINX_PID 2>/dev/null; wait $NGINX_PID 2>/dev/null
  kill $AG1 $AG2 2>/dev/null; wait $AG1 $AG2 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sleep 0.5
echo "nginx on CPU $SRV_CPU, generators on CPU $GEN_CPU, $MODE; work $WORK" >&2

load=(-c "$CONNS")
[ "$MODE" = open ] && load+=(-r "$RATE")
# CPU seconds a process has used (user + system), from /proc.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

printf 'variant\trep\trequests\tgen_cpu_s\treq_per_cpu_s\trps\tskew_us\n' > "$OUT"
run_one() {
  local variant=$1 rep=$2 base=$WORK/$1-$2 args=() before=0
  case $variant in
    one) args=(--threads 2) ;;
    agents) args=(--threads 1 --agents "$A1,$A2")
            before=$(python3 -c "print($(cpu_of $AG1) + $(cpu_of $AG2))") ;;
  esac
  timeout -k 5 $((DUR + 60)) taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S %M' -o "$base.time" \
    "$MB" run -q "${load[@]}" -d ${DUR}s --json "$base.json" "${args[@]}" "$URL" \
    > "$base.out" 2> "$base.err" < /dev/null
  local agents_cpu=0
  [ "$variant" = agents ] && agents_cpu=$(python3 -c "print($(cpu_of $AG1) + $(cpu_of $AG2) - $before)")
  python3 - "$variant" "$rep" "$base" "$agents_cpu" >> "$OUT" <<'PY'
import json, sys
variant, rep, base, agents_cpu = sys.argv[1:5]
user, sys_, rss = open(base + ".time").read().split()[-3:]
cpu = float(user) + float(sys_) + float(agents_cpu)
r = json.load(open(base + ".json"))
n = r["requests"]["ok"]
skew = (r.get("agents") or {}).get("start_skew_us", "")
print("\t".join(map(str, [variant, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, r["throughput_rps"], skew])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

for rep in $(seq 1 "$REPS"); do
  for variant in one agents; do run_one "$variant" "$rep"; done
done

python3 - "$OUT" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = {}
for v in ("one", "agents"):
    rps = [float(r["rps"]) for r in rows if r["variant"] == v]
    per = [float(r["req_per_cpu_s"]) for r in rows if r["variant"] == v]
    med[v] = (statistics.median(rps), statistics.median(per))
    print("%-6s median %8.0f req/s, %8.0f req per generator CPU-s over %d reps" % (v, med[v][0], med[v][1], len(rps)))
skews = [float(r["skew_us"]) for r in rows if r["variant"] == "agents" and r["skew_us"]]
if skews:
    print("agents' start skew: median %.0f µs, max %.0f µs" % (statistics.median(skews), max(skews)))
print("agents/one: %.3f req/s, %.3f req per CPU-s (bar: within 5 %%)" % (med["agents"][0] / med["one"][0], med["agents"][1] / med["one"][1]))
PY
