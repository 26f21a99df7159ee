#!/usr/bin/env bash
# bench/churn.sh - connection churn: new connections per generator CPU-second, meshbench beside
# ab, over a real link (a veth pair between network namespaces, not loopback), side by side.
#
#   server    : nginx, 1 worker pinned to CPU $SRV_CPU, 1 KiB body
#   link      : LINK=veth (default): nginx in namespace mbb-srv-PID; each run in a fresh client
#                 namespace joined to it by its own veth pair (10.78.K.2 -> 10.78.K.1), so that
#                 it starts with no TIME_WAIT socket and its own ports, as towards a real gateway
#               LINK=loopback: each run in a fresh namespace with its own nginx on 127.0.0.1,
#                 where the kernel reuses TIME_WAIT ports (tcp_tw_reuse = 2 is for loopback)
#               the TIME_WAIT sockets a run leaves on the client side are counted after it
#   generator : pinned to CPU $GEN_CPU, CPU time from /usr/bin/time (user + sys)
#   load      : $NEWCONN connections of one request each, $CONNS at a time (closed loop);
#               $NEWCONN stays below the 28,232 ports of the usual range, so that a client that
#               closes first can finish too
#   tools     : meshbench     --requests-per-connection 1 (the server closes first: the default)
#               meshbench-cf  the same with --close-first client (the client closes first)
#               ab            -n -c (HTTP/1.0 without keep-alive: the server closes first)
#               baseline      BASELINE=/path/to/an/older/meshbench with --requests-per-connection 1,
#                             interleaved with the others, so a change is measured before and
#                             after in the same run
#   reps      : $REPS, interleaved (rep 1 of every tool, then rep 2, ...)
#
# Prints the median of each figure and the ratios meshbench/peer; raw rows go to $OUT. Figures
# are connections per generator CPU-second = connections / (user + sys seconds); `tw` in the
# notes is the TIME_WAIT sockets left on the client side. Needs root (ip netns). Machines here are
# shared and noisy: compare ratios from the same run, not absolute figures.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18097}
NEWCONN=${NEWCONN:-20000}
CONNS=${CONNS:-32}
REPS=${REPS:-5}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
WORK=$(mktemp -d /tmp/meshbench-bench-churn.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/churn-$(date +%Y%m%d-%H%M%S).tsv}
MB=${MB:-$ROOT/target/release/meshbench}
BASELINE=${BASELINE:-}
SRV=mbb-srv-$$
LINK=${LINK:-veth}
TOOLS=${TOOLS:-"meshbench meshbench-cf ab"}
[ -n "$BASELINE" ] && TOOLS="$TOOLS baseline"

"$ROOT/scripts/install-deps.sh"
[ -n "${MB_SKIP_BUILD:-}" ] || (cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }

# ---------------------------------------------------------- namespaces ----
cleanup() {
  [ -n "${NGINX_PID:-}" ] && kill -QUIT "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
  for ns in $(ip netns list | awk '{print $1}' | grep -- "^mbb-c[0-9]*-$$\$"); do ip netns del "$ns"; done
  ip netns del "$SRV" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# client_ns K: a fresh client namespace mbb-cK-PID joined to the server's by its own veth pair.
client_ns() {
  local k=$1 ns=mbb-c$1-$$
  ip netns add "$ns"
  ip link add "mbbc$k" type veth peer name "mbbs$k"
  ip link set "mbbc$k" netns "$ns"
  ip link set "mbbs$k" netns "$SRV"
  ip -n "$SRV" addr add "10.78.$k.1/24" dev "mbbs$k"
  ip -n "$SRV" link set "mbbs$k" up
  ip -n "$ns" addr add "10.78.$k.2/24" dev "mbbc$k"
  ip -n "$ns" link set "mbbc$k" up
  ip -n "$ns" link set lo up
}

# ---------------------------------------------------------------- nginx ----
body=$(python3 -c 'import string; s=(string.ascii_letters+string.digits)*20; print(s[:1024], end="")')
. "$HERE/nginx.sh"
nginx_conf "$WORK" "$PORT" "$body"
# start_nginx_in NS: nginx in namespace NS, ready; stop_nginx: stopped.
start_nginx_in() {
  ip netns exec "$1" taskset -c "$SRV_CPU" nginx -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" -g 'daemon off;' &
  NGINX_PID=$!
  for _ in $(seq 50); do ip netns exec "$1" curl -sf -o /dev/null "http://127.0.0.1:$PORT/" && break; sleep 0.1; done
  ip netns exec "$1" curl -sf -o /dev/null "http://127.0.0.1:$PORT/" || { echo "nginx did not start" >&2; cat "$WORK/error.log" >&2; exit 1; }
}
stop_nginx() { kill -QUIT "$NGINX_PID" 2>/dev/null; wait "$NGINX_PID" 2>/dev/null; NGINX_PID=; }

case $LINK in
  veth)
    ip netns add "$SRV" || { echo "ip netns add failed: needs root" >&2; exit 1; }
    ip -n "$SRV" link set lo up
    start_nginx_in "$SRV" ;;
  loopback) ;;
  *) echo "LINK=$LINK: veth or loopback" >&2; exit 2 ;;
esac
echo "nginx $(nginx -v 2>&1 | cut -d/ -f2) pinned to CPU $SRV_CPU, link $LINK; generators on CPU $GEN_CPU, each run in a fresh namespace; work $WORK" >&2

# ------------------------------------------------------------- one run ----
# run_one TOOL REP K: runs the generator in client namespace K under /usr/bin/time, counts the
# TIME_WAIT sockets it left, appends a row to $OUT.
printf 'phase\ttool\trep\trequests\tgen_cpu_s\treq_per_cpu_s\trss_kib\trps\textra\n' > "$OUT"
run_one() {
  local tool=$1 rep=$2 k=$3 base=$WORK/$1-$2 ns=mbb-c$3-$$ url=http://10.78.$3.1:$PORT/
  if [ "$LINK" = veth ]; then
    client_ns "$k"
  else
    ip netns add "$ns" && ip -n "$ns" link set lo up
    start_nginx_in "$ns"
    url=http://127.0.0.1:$PORT/
  fi
  local cmd=()
  case $tool in
    meshbench)    cmd=("$MB" run -q --requests-per-connection 1 -c $CONNS -n $NEWCONN --json "$base.json" "$url") ;;
    meshbench-cf) cmd=("$MB" run -q --requests-per-connection 1 --close-first client -c $CONNS -n $NEWCONN --json "$base.json" "$url") ;;
    baseline)     cmd=("$BASELINE" run -q --requests-per-connection 1 -c $CONNS -n $NEWCONN --json "$base.json" "$url") ;;
    ab)           cmd=(ab -q -n $NEWCONN -c $CONNS "$url") ;;
  esac
  timeout -k 5 300 ip netns exec "$ns" taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S %M' -o "$base.time" \
    "${cmd[@]}" > "$base.out" 2> "$base.err" < /dev/null
  # Client side only: on loopback nginx's own TIME_WAIT sockets are in the same table.
  ip netns exec "$ns" ss -Htan state time-wait "( dport = :$PORT )" | wc -l > "$base.tw"
  [ "$LINK" = veth ] || stop_nginx
  python3 - churn "$tool" "$rep" "$base" >> "$OUT" <<'PY'
import json, re, sys
phase, tool, rep, base = sys.argv[1:5]
user, sys_, rss = open(base + ".time").read().split()[-3:]
cpu = float(user) + float(sys_)
out = open(base + ".out", errors="replace").read()
tw = int(open(base + ".tw").read())
if tool == "ab":
    failed = int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    n = int(re.search(r"Complete requests:\s+(\d+)", out).group(1)) - failed
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
    extra = "tw=%d errors=%d" % (tw, failed)
else:
    r = json.load(open(base + ".json"))
    n, rps = r["requests"]["ok"], r["throughput_rps"]
    c = r["connections"]
    extra = "tw=%d errors=%d by_client=%d by_server=%s" % (
        tw, r["requests"]["errors"], c["closed_by_client"], c.get("closed_by_server", "-"))
print("\t".join(map(str, [phase, tool, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, rss, round(rps, 1), extra])))
PY
  tail -n1 "$OUT" >&2
  ip netns del "$ns"
  sleep 1
}

k=0
for rep in $(seq 1 "$REPS"); do
  for tool in $TOOLS; do
    k=$((k + 1))
    run_one "$tool" "$rep" "$k"
  done
done

python3 "$HERE/summarize.py" "$OUT" "connections"
