#!/usr/bin/env bash
# bench/protocols.sh - meshbench beside its peers over TLS and HTTP/2, on THIS machine, side by
# side in one run (the HTTP/1.1 figures are bench/run.sh's).
#
#   server    : nginx 1 worker pinned to CPU $SRV_CPU, TLS (lab CA from `meshbench gen certs`),
#               HTTP/2, session cache and tickets on, 1 KiB body
#   generator : pinned to CPU $GEN_CPU, CPU time from /usr/bin/time (user + sys)
#   phases    : h2tls   - HTTP/2 over TLS, $CONNS connections x $STREAMS streams, $DUR s
#                         (meshbench, h2load)
#               newconn - a new TLS connection per request, $NEWCONN requests, HTTP/1.1
#                         (meshbench without and with session resumption, h2load with one
#                         request per client, ab without keep-alive)
#   reps      : $REPS, interleaved
#   baseline  : with BASELINE=/path/to/meshbench, an older build runs the h2tls phase beside them
#   extras    : peak RSS with one URL vs 1,000 hosts x 100 paths as targets; time to generate
#               1,000 x 100 gateway configurations (set EXTRAS=0 to skip)
#
# Figures are requests (newconn: connections) per generator CPU-second; ratios are medians of
# meshbench over the peer. Machines here are shared and noisy: compare ratios, not times.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18095}
DUR=${DUR:-10}
CONNS=${CONNS:-50}
STREAMS=${STREAMS:-10}
NEWCONN=${NEWCONN:-5000}
REPS=${REPS:-3}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
PHASES=${PHASES:-"h2tls newconn"}
EXTRAS=${EXTRAS:-1}
BASELINE=${BASELINE:-}
WORK=$(mktemp -d /tmp/meshbench-bench-proto.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/protocols-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
URL=https://127.0.0.1:$PORT/

"$ROOT/scripts/install-deps.sh"
(cd "$ROOT" && cargo build --release --locked -q) || { echo "build failed" >&2; exit 1; }
"$MB" gen certs --out "$WORK/tls" > /dev/null

body=$(python3 -c 'import string; s=(string.ascii_letters+string.digits)*20; print(s[:1024], end="")')
cat > "$WORK/nginx.conf" <<NGINX
worker_processes 1;
worker_cpu_affinity $(python3 -c "print(bin($((1 << SRV_CPU)))[2:])");
worker_rlimit_nofile 65536;
user root;
pid $WORK/nginx.pid;
error_log $WORK/error.log warn;
events { worker_connections 16384; }
http {
  access_log off; keepalive_requests 1000000; keepalive_timeout 65s;
  http2_max_concurrent_streams 128;
  default_type text/plain; server_tokens off;
  client_body_temp_path $WORK/b; proxy_temp_path $WORK/p; fastcgi_temp_path $WORK/f;
  uwsgi_temp_path $WORK/u; scgi_temp_path $WORK/s;
  ssl_certificate $WORK/tls/server.pem; ssl_certificate_key $WORK/tls/server-key.pem;
  ssl_session_cache shared:bench:20m; ssl_session_tickets on;
  server { listen 127.0.0.1:$PORT ssl http2 backlog=16384 default_server; location / { return 200 "$body"; } }
}
NGINX
taskset -c "$SRV_CPU" nginx -p "$WORK" -c "$WORK/nginx.conf" -e "$WORK/error.log" -g 'daemon off;' &
NGINX_PID=$!
cleanup() { kill -QUIT $NGINX_PID 2>/dev/null; wait $NGINX_PID 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do curl -skf -o /dev/null "$URL" && break; sleep 0.1; done
curl -skf -o /dev/null "$URL" || { echo "nginx did not start" >&2; cat "$WORK/error.log" >&2; exit 1; }
echo "nginx $(nginx -v 2>&1 | cut -d/ -f2) TLS+h2 pinned to CPU $SRV_CPU; generators on CPU $GEN_CPU; work $WORK" >&2

printf 'phase\ttool\trep\trequests\tgen_cpu_s\treq_per_cpu_s\trss_kib\trps\textra\n' > "$OUT"
run_one() {
  local phase=$1 tool=$2 rep=$3 base=$WORK/$1-$2-$3
  local cmd=()
  case $phase:$tool in
    h2tls:meshbench)       cmd=("$MB" run -q -k --http2 --streams $STREAMS -c $CONNS -d ${DUR}s --json "$base.json" "$URL") ;;
    h2tls:baseline)        cmd=("$BASELINE" run -q -k --http2 --streams $STREAMS -c $CONNS -d ${DUR}s --json "$base.json" "$URL") ;;
    h2tls:h2load)          cmd=(h2load -t1 -c$CONNS -m$STREAMS -D${DUR}s "$URL") ;;
    newconn:meshbench)     cmd=("$MB" run -q -k --requests-per-connection 1 --tls-resume off -c $CONNS -n $NEWCONN --json "$base.json" "$URL") ;;
    newconn:meshbench-resume) cmd=("$MB" run -q -k --requests-per-connection 1 --tls-resume on -c $CONNS -n $NEWCONN --json "$base.json" "$URL") ;;
    newconn:h2load)        cmd=(h2load --h1 -t1 -c$NEWCONN -n$NEWCONN "$URL") ;;
    newconn:ab)            cmd=(ab -q -n $NEWCONN -c $CONNS "$URL") ;;
    *) return 0 ;;
  esac
  timeout -k 5 $((DUR + 120)) taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S %M' -o "$base.time" \
    "${cmd[@]}" > "$base.out" 2> "$base.err" < /dev/null
  python3 - "$phase" "$tool" "$rep" "$base" >> "$OUT" <<'PY'
import json, re, sys
phase, tool, rep, base = sys.argv[1:5]
user, sys_, rss = open(base + ".time").read().split()[-3:]
cpu = float(user) + float(sys_)
out = open(base + ".out", errors="replace").read()
extra = ""
if tool.startswith("meshbench") or tool == "baseline":
    r = json.load(open(base + ".json"))
    n, rps = r["requests"]["ok"], r["throughput_rps"]
    c = r["connections"]
    extra = "saturated=%s errors=%d" % (r["generator"]["saturated"], r["requests"]["errors"])
    if phase == "newconn":
        extra += " opened=%d resumed=%.2f handshake_p50_us=%d" % (c["opened"], c["resumption_ratio"], c["tls_handshake_us"]["p50"])
elif tool == "ab":
    n = int(re.search(r"Complete requests:\s+(\d+)", out).group(1)) - int(re.search(r"Failed requests:\s+(\d+)", out).group(1))
    rps = float(re.search(r"Requests per second:\s+([\d.]+)", out).group(1))
else:
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    n = int(m.group(1))
    rps = float(re.search(r"finished in [\d.]+s, ([\d.]+) req/s", out).group(1))
print("\t".join(map(str, [phase, tool, rep, n, round(cpu, 3), round(n / cpu) if cpu else 0, rss, round(rps, 1), extra])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

timeout 20 taskset -c "$GEN_CPU" h2load -t1 -c$CONNS -m$STREAMS -D2s "$URL" > /dev/null 2>&1
for rep in $(seq 1 "$REPS"); do
  for phase in $PHASES; do
    case $phase in h2tls) tools="meshbench ${BASELINE:+baseline }h2load" ;; newconn) tools="meshbench meshbench-resume h2load ab" ;; esac
    for tool in $tools; do run_one "$phase" "$tool" "$rep"; done
  done
done

python3 "$HERE/summarize.py" "$OUT" "requests (h2tls) or connections (newconn)"

[ "$EXTRAS" = 1 ] || exit 0
echo >&2
echo "== peak RSS: one URL vs 1,000 hosts x 100 paths (HTTP/1.1 over TLS, $CONNS connections, 5 s)" >&2
TEMPLATE="https://workspace-{1..10}-domain-{1..100}.com:$PORT/get/{1..100}"
for rep in $(seq 1 "$REPS"); do
  taskset -c "$GEN_CPU" /usr/bin/time -f '%M' -o "$WORK/rss-one" "$MB" run -q -k -c $CONNS -d 5s "$URL" > /dev/null
  taskset -c "$GEN_CPU" /usr/bin/time -f '%M' -o "$WORK/rss-many" "$MB" run -q -k -c $CONNS -d 5s \
    --connect-to "::127.0.0.1:$PORT" --target-order random "$TEMPLATE" > /dev/null
  python3 -c "a=int(open('$WORK/rss-one').read().split()[-1]); b=int(open('$WORK/rss-many').read().split()[-1]); print('rep $rep: one URL %.1f MiB, 100,000 targets on 1,000 hosts %.1f MiB, difference %.1f MiB' % (a/1024, b/1024, (b-a)/1024))"
done

echo "== generating 1,000 domains x 100 paths with TLS" >&2
for f in nginx haproxy caddy envoy istio; do
  /usr/bin/time -f '%e s wall, %M KiB peak' -o "$WORK/gen-$f.time" "$MB" gen gateway --for $f --domains 1000 --paths 100 --tls \
    --backend 127.0.0.1:8080 --out "$WORK/gen-$f" > /dev/null
  echo "$f: $(cat "$WORK/gen-$f.time"), $(du -sh "$WORK/gen-$f" | cut -f1) written"
  rm -rf "$WORK/gen-$f"
done
