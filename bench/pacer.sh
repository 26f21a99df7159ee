#!/usr/bin/env bash
# bench/pacer.sh - does the open loop keep time on THIS machine's clock, how evenly does its load
# reach the target, and at what CPU cost, beside the peers that also pace (issue 26)?
#
#   floor   : bench/wakeup_floor.rs, once per repetition (the medians are used): CPU per timer
#             wake-up and its lateness at 50 µs-5 ms periods, a syscall, a clock read (the floor
#             under any pacer that wakes per send), and what a write to an idle loopback peer on
#             CPU $SRV_CPU adds to a wake-up (the target's wake-up, billed to the sender)
#   closed  : meshbench's closed loop against the same target, $CONNS connections, $DUR s: the
#             CPU per request of the I/O alone, with no pacing at all
#             With both, per rate, the even-schedule floor: what an open loop that keeps every
#             send within $WINDOW_US µs of its instant must cost here (a wake-up per send while
#             sends are further apart, else one per window, at the measured cost of a wake-up
#             at that period, plus the closed loop's cost per request), and each meshbench
#             row's cost as a ratio to it. $WINDOW_US is the engine's lead window (idle.rs).
#             A second floor adds, per wake-up, the target's wake-up that a send to an idle
#             target pays on loopback (which a closed loop, whose target never idles, does not).
#   lag     : per rate in $RATES and per repetition, every generator against the SAME target: a
#             fresh `meshbench backend --size 64 --arrivals FILE` on CPU $SRV_CPU for each run
#             (its own arrivals file: the kernel's receive time of every request), the generator
#             alone on CPU $GEN_CPU with one thread, $CONNS connections, $DUR s:
#               meshbench (defaults), meshbench with each ';'-separated entry of $MB_VARIANTS
#               (its words passed as they are; a refused flag is a failed row), meshbench
#               --idle-strategy X for X in $IDLES, h2load (--rps per connection), fortio -qps
#               (its defaults, and each ';'-separated entry of $FORTIO_VARIANTS), oha -q, k6
#               (constant-arrival-rate), and with BASELINE=/path/to/meshbench an older build.
#             Per run: requests per generator CPU-second, the schedule lag the tool reports, and
#             the target's arrival gaps p50/p99 and largest 1-ms burst. A peer that is not
#             installed is skipped with a line (INSTALL=0: no install attempted).
#   truth   : the backend spinning ${WORK_MS} ms per request (not sleeping: a sleeping server
#             inherits the clock's lateness) on CPU $SRV_CPU; meshbench open loop at 200 req/s
#             vs wrk at one connection: their p50s should agree within 0.05 ms
#   reps    : $REPS, interleaved (rep 1 of every tool and phase, then rep 2, ...)
#
# Prints medians per rate and the issue's goals, met or MISSED; raw rows go to $OUT (and the
# floor to ${OUT%.tsv}-floor.tsv). Noisy shared machines: read ratios from one run.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PORT=${PORT:-18190}
DUR=${DUR:-10}
CONNS=${CONNS:-50}
REPS=${REPS:-3}
RATES=${RATES:-"200 1000 5000 50000"}
IDLES=${IDLES:-}
MB_VARIANTS=${MB_VARIANTS-"--pacing-slack=1ms"}
FORTIO_VARIANTS=${FORTIO_VARIANTS-"-uniform"}
WORK_MS=${WORK_MS:-2}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
PHASES=${PHASES:-"closed lag truth"}
WINDOW_US=${WINDOW_US:-750}
BASELINE=${BASELINE:-}
INSTALL=${INSTALL:-1}
FORTIO=${FORTIO:-/var/cache/meshbench/fortio/bin/fortio}
OHA=${OHA:-/var/cache/meshbench/oha/bin/oha}
K6=${K6:-/var/cache/meshbench/k6/bin/k6}
WORK=$(mktemp -d /tmp/meshbench-pacer.XXXXXX)
mkdir -p "$ROOT/bench/results"
OUT=${OUT:-$ROOT/bench/results/pacer-$(date +%Y%m%d-%H%M%S).tsv}
MB=$ROOT/target/release/meshbench
APORT=$((PORT + 2))
URL=http://127.0.0.1:$APORT/
IFS=';' read -r -a MB_VARIANT <<< "$MB_VARIANTS"
IFS=';' read -r -a FORTIO_VARIANT <<< "$FORTIO_VARIANTS"

"$ROOT/scripts/install-deps.sh"
if [ "$INSTALL" = 1 ]; then
  "$ROOT/scripts/install-fortio.sh" || echo "fortio did not build" >&2
  "$ROOT/scripts/install-oha.sh" >/dev/null 2>&1 || echo "oha did not build" >&2
  "$ROOT/scripts/install-k6.sh" || echo "k6 did not build" >&2
fi
(cd "$ROOT" && cargo build --release --locked -q -p meshbench) || { echo "build failed" >&2; exit 1; }

rustc -O --edition 2021 -o "$WORK/floor" "$HERE/wakeup_floor.rs" || { echo "bench/wakeup_floor.rs did not build" >&2; exit 1; }
: > "$WORK/floor.tsv"
# The machine's floor, measured again in each repetition: a wake-up's cost drifts by 2x over
# minutes on a shared VM.
measure_floor() {
  echo "== floor, repetition $1: one timer wake-up on CPU $GEN_CPU, a peer on CPU $SRV_CPU" >&2
  taskset -c "$GEN_CPU,$SRV_CPU" "$WORK/floor" "$GEN_CPU" "$SRV_CPU" | tee -a "$WORK/floor.tsv" >&2
  cp "$WORK/floor.tsv" "${OUT%.tsv}-floor.tsv" 2>/dev/null
}

BPORT=$((PORT + 1))
taskset -c "$SRV_CPU" "$MB" backend --listen 127.0.0.1:$BPORT --size 64 --work ${WORK_MS}ms > /dev/null &
BACKEND_PID=$!
TARGET_PID=
cleanup() { kill $BACKEND_PID $TARGET_PID 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$BPORT/" && break; sleep 0.1; done

# The lag phase's target, fresh for each generator run: `start_target FILE`. Ready when it says
# so on stdout (a readiness request would be an arrival of its own).
start_target() {
  timeout -k 5 $((DUR + 120)) taskset -c "$SRV_CPU" "$MB" backend --listen 127.0.0.1:$APORT \
    --size 64 --arrivals "$1" > "$1.log" 2>&1 < /dev/null &
  TARGET_PID=$!
  for _ in $(seq 200); do
    grep -q "listening on" "$1.log" 2>/dev/null && return 0
    kill -0 $TARGET_PID 2>/dev/null || break
    sleep 0.05
  done
  echo "the target did not start: $(tail -n2 "$1.log")" >&2
  return 1
}
# SIGTERM, as a terminal or the lab stops it; it writes its arrivals file, then exits.
stop_target() { kill -TERM $TARGET_PID 2>/dev/null; wait $TARGET_PID 2>/dev/null; TARGET_PID=; }

# What a row calls a tool.
label() {
  case $1 in
    meshbench+*) echo "meshbench ${MB_VARIANT[${1#meshbench+}]}" ;;
    meshbench@*) echo "meshbench --idle-strategy ${1#meshbench@}" ;;
    fortio+*)    echo "fortio ${FORTIO_VARIANT[${1#fortio+}]}" ;;
    *)           echo "$1" ;;
  esac
}

# The k6 script for one rate: constant-arrival-rate, one GET per iteration.
k6_script() {
  cat > "$WORK/k6-$1.js" <<JS
import http from 'k6/http';
export const options = {
  scenarios: {
    open: {
      executor: 'constant-arrival-rate',
      rate: $1,
      timeUnit: '1s',
      duration: '${DUR}s',
      preAllocatedVUs: $CONNS,
    },
  },
};
export default function () {
  http.get('$URL');
}
JS
  echo "$WORK/k6-$1.js"
}

printf 'phase\ttool\trep\tstatus\trequests\tgen_cpu_s\treq_per_cpu_s\tlag_p50_us\tlag_p99_us\tp50_ms\tgap_p50_us\tgap_p99_us\tburst_1ms\ttarget_rps\textra\n' > "$OUT"
# one PHASE TOOL REP RATE
one() {
  local phase=$1 tool=$2 rep=$3 rate=$4 base cmd=() envs=() words=() rc
  base=$WORK/$phase-${tool//[^A-Za-z0-9_.-]/_}-$rep-$rate
  case $phase:$tool in
    lag:meshbench)    cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    lag:meshbench+*)  read -r -a words <<< "${MB_VARIANT[${tool#meshbench+}]}"
                      cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s "${words[@]}" --json "$base.json" "$URL") ;;
    lag:meshbench@*)  cmd=("$MB" run -q -c $CONNS -r $rate -d ${DUR}s --idle-strategy ${tool#meshbench@} --json "$base.json" "$URL") ;;
    lag:baseline)     cmd=("$BASELINE" run -q -c $CONNS -r $rate -d ${DUR}s --json "$base.json" "$URL") ;;
    lag:h2load)       cmd=(h2load --h1 -t1 -c$CONNS -D${DUR}s --rps=$(python3 -c "print($rate/$CONNS)") "$URL") ;;
    lag:fortio)       envs=(GOMAXPROCS=1); cmd=("$FORTIO" load -qps $rate -c $CONNS -t ${DUR}s -json "$base.json" "$URL") ;;
    lag:fortio+*)     read -r -a words <<< "${FORTIO_VARIANT[${tool#fortio+}]}"
                      envs=(GOMAXPROCS=1); cmd=("$FORTIO" load -qps $rate -c $CONNS -t ${DUR}s "${words[@]}" -json "$base.json" "$URL") ;;
    lag:oha)          cmd=("$OHA" -q $rate -c $CONNS -z ${DUR}s --no-tui --output-format json -o "$base.json" "$URL") ;;
    lag:k6)           envs=(GOMAXPROCS=1); cmd=("$K6" run -q --no-usage-report --summary-export "$base.json" "$(k6_script $rate)") ;;
    closed:meshbench) cmd=("$MB" run -q -c $CONNS -d ${DUR}s --json "$base.json" "$URL") ;;
    truth:meshbench)  cmd=("$MB" run -q -c 4 -r 200 -d ${DUR}s --json "$base.json" "http://127.0.0.1:$BPORT/") ;;
    truth:wrk)        cmd=(wrk -t1 -c1 -d${DUR}s --latency "http://127.0.0.1:$BPORT/") ;;
  esac
  case $phase in lag|closed) start_target "$base.arrivals.json" || return 0 ;; esac
  timeout -k 5 $((DUR + 60)) env "${envs[@]}" taskset -c "$GEN_CPU" /usr/bin/time -f '%U %S' -o "$base.time" \
    "${cmd[@]}" > "$base.out" 2> "$base.err" < /dev/null
  rc=$?
  case $phase in lag|closed) stop_target ;; esac
  python3 - "$phase" "$tool" "$(label "$tool")" "$rep" "$rate" "$base" "$rc" >> "$OUT" <<'PY'
import json, os, re, sys
phase, tool, name, rep, rate, base, rc = sys.argv[1:8]
cols = dict(status="ok", requests="", gen_cpu_s="", req_per_cpu_s="", lag50="", lag99="", p50="",
            gap50="", gap99="", burst="", target_rps="")
extra = []
def load(path):
    return json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else None
try:
    user, sys_ = open(base + ".time").read().split()[-2:]
    cpu = float(user) + float(sys_)
    cols["gen_cpu_s"] = round(cpu, 3)
    out = open(base + ".out", errors="replace").read()
    n = None
    if tool.startswith("meshbench") or tool == "baseline":
        r = load(base + ".json")
        if r is None:
            raise RuntimeError("no JSON")
        n = r["requests"]["ok"]
        lag = r["schedule_lag_us"] or {}
        cols["lag50"], cols["lag99"] = lag.get("p50", ""), lag.get("p99", "")
        cols["p50"] = r["latency_us"]["p50"] / 1000
        g = r["generator"]
        wake = g.get("wakeup_error_us") or {}
        extra.append("wake_p99_us=%s spin_s=%s valid=%s" % (wake.get("p99", "-"), g.get("spin_secs", "-"), g.get("check", {}).get("valid", "-")))
        pacing = g.get("pacing") or {}
        spw = pacing.get("sends_per_wake") or {}
        if spw:
            extra.append("sends_per_wake_p50=%s sends_per_wake_max=%s" % (spw.get("p50", "-"), spw.get("max", "-")))
        if "largest_burst_per_ms" in pacing:
            extra.append("gen_burst_1ms=%s" % pacing["largest_burst_per_ms"])
    elif tool == "wrk":
        n = int(re.search(r"(\d+) requests in", out).group(1))
        m = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        cols["p50"] = float(m.group(1)) * {"us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]
    elif tool == "h2load":
        n = int(re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out).group(1))
    elif tool.startswith("fortio"):
        n = int(load(base + ".json")["RetCodes"].get("200", 0))
        # fortio reports no lateness percentiles: the time slept before each call (negative
        # when the call was due already) as count/avg/min/max.
        err = open(base + ".err", errors="replace").read()
        m = re.search(r"Sleep times : count (\d+) avg (\S+) \+/- \S+ min (\S+) max (\S+)", out + err)
        if m:
            extra.append("sleep_avg_ms=%.3f sleep_min_ms=%.3f" % (float(m.group(2)) * 1e3, float(m.group(3)) * 1e3))
    elif tool == "oha":
        n = int(load(base + ".json")["statusCodeDistribution"].get("200", 0))
    elif tool == "k6":
        m = load(base + ".json")["metrics"]
        failed = (m.get("http_req_failed") or {}).get("passes", 0)
        n = int(m["http_reqs"]["count"]) - int(failed)
        extra.append("dropped_iterations=%d" % int((m.get("dropped_iterations") or {}).get("count", 0)))
    cols["requests"] = n
    cols["req_per_cpu_s"] = round(n / cpu) if cpu else 0
    if not n:
        cols["status"] = "failed"
except Exception as e:
    cols["status"] = "failed"
    err = open(base + ".err", errors="replace").read().strip().splitlines() if os.path.exists(base + ".err") else []
    extra.append("rc=%s %s: %s" % (rc, type(e).__name__, (err[-1] if err else str(e))[:160]))
if rc != "0" and cols["status"] == "ok":
    extra.append("rc=%s" % rc)
if phase == "lag":
    a = load(base + ".arrivals.json")
    if a and a.get("gap_us"):
        cols["gap50"], cols["gap99"] = round(a["gap_us"]["p50"], 1), round(a["gap_us"]["p99"], 1)
        cols["burst"] = a["largest_burst_per_ms"]
        cols["target_rps"] = round(a["rate_rps"])
        extra.append("target_requests=%d" % a["requests"])
print("\t".join(map(str, [phase + ("@" + rate if phase == "lag" else ""), name, rep] + list(cols.values()) + [" ".join(extra)])))
PY
  tail -n1 "$OUT" >&2
  sleep 1
}

available() {
  case $1 in
    fortio*) [ -x "$FORTIO" ] ;;
    oha)     [ -x "$OHA" ] ;;
    k6)      [ -x "$K6" ] ;;
    h2load)  command -v h2load >/dev/null ;;
    *)       true ;;
  esac
}

tools="meshbench"
for i in "${!MB_VARIANT[@]}"; do [ -n "${MB_VARIANT[$i]// /}" ] && tools="$tools meshbench+$i"; done
for i in $IDLES; do tools="$tools meshbench@$i"; done
[ -n "$BASELINE" ] && tools="$tools baseline"
tools="$tools h2load fortio"
for i in "${!FORTIO_VARIANT[@]}"; do [ -n "${FORTIO_VARIANT[$i]// /}" ] && tools="$tools fortio+$i"; done
tools="$tools oha k6"
lag_tools=""
for tool in $tools; do
  if available "$tool"; then lag_tools="$lag_tools $tool"; else echo "skipped: $(label "$tool") is not installed" >&2; fi
done

for rep in $(seq 1 "$REPS"); do
  measure_floor "$rep"
  for phase in $PHASES; do
    if [ "$phase" = lag ]; then
      for rate in $RATES; do for tool in $lag_tools; do one lag "$tool" "$rep" "$rate"; done; done
    elif [ "$phase" = closed ]; then
      one closed meshbench "$rep" 0
    else
      for tool in meshbench wrk; do one truth "$tool" "$rep" 200; done
    fi
  done
done

python3 - "$OUT" "$WORK/floor.tsv" "$CONNS" "$WINDOW_US" <<'PY'
import csv, math, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
# The floor's medians over the repetitions: per period, (CPU per wake-up, late p50, late p99),
# and per period what a write to an idle peer adds to a wake-up.
floor_reps, peer_reps = {}, {}
if os.path.exists(sys.argv[2]):
    for line in open(sys.argv[2]):
        f = line.rstrip("\n").split("\t")
        if len(f) == 5 and f[0].isdigit():
            floor_reps.setdefault(int(f[0]), []).append((float(f[2]), float(f[3]), float(f[4])))
        elif len(f) == 4 and f[0] == "idle_peer_send":
            peer_reps.setdefault(int(f[1]), []).append(float(f[3]))
floor = {p: tuple(statistics.median(v[i] for v in vs) for i in range(3)) for p, vs in floor_reps.items()}
peer_extra = {p: statistics.median(vs) for p, vs in peer_reps.items()}
if floor:
    print("\nfloor, medians of %d repetitions: a wake-up costs %s us of CPU at periods of %s us;"
          " a write to an idle peer adds %s us at %s us"
          % (max(len(v) for v in floor_reps.values()), " / ".join("%.1f" % floor[p][0] for p in sorted(floor)),
             " / ".join(str(p) for p in sorted(floor)), " / ".join("%.1f" % peer_extra[p] for p in sorted(peer_extra)),
             " / ".join(str(p) for p in sorted(peer_extra))))
groups = {}
for r in rows:
    groups.setdefault((r["phase"], r["tool"]), []).append(r)

def med(rs, k):
    v = [float(r[k]) for r in rs if r["status"] == "ok" and r[k] not in ("", "None")]
    return statistics.median(v) if v else None

def fmt(x, digits=0):
    return "-" if x is None else ("%.*f" % (digits, x))

print("\nmedians of %d interleaved repetitions" % max(len(v) for v in groups.values()))
rates = sorted({int(p.split("@")[1]) for p, _ in groups if p.startswith("lag@")})
window_us = float(sys.argv[4])
closed_rpc = med(groups.get(("closed", "meshbench"), []), "req_per_cpu_s")
if closed_rpc:
    print("\nclosed loop (meshbench, %s connections, same target): %.0f req/CPU-s = %.1f us of CPU per request with no pacing"
          % (sys.argv[3], closed_rpc, 1e6 / closed_rpc))

def wake_cost(period_us):
    """The measured CPU of a wake-up at the measured period nearest to this one."""
    p = min(floor, key=lambda q: abs(math.log(q / max(period_us, 1))))
    return floor[p][0], p

def even_floor(rate):
    """CPU per request (us) of an even schedule within the window: (wake-ups per request) x
    (a wake-up's CPU at that period) + the closed loop's CPU per request."""
    if not floor or not closed_rpc:
        return None
    wakes = rate if 1e6 / rate >= window_us else 1e6 / window_us
    cost, period = wake_cost(1e6 / wakes)
    return wakes / rate * cost + 1e6 / closed_rpc, wakes, cost, period

def target_floor(rate):
    """The even-schedule floor plus the target's wake-up at each of the schedule's wake-ups
    (the first send of a wake-up finds the target idle; on loopback the sender pays for it)."""
    ef = even_floor(rate)
    if not ef or not peer_extra:
        return None
    f_us, wakes, _, period = ef
    p = min(peer_extra, key=lambda q: abs(math.log(q / period)))
    return f_us + wakes / rate * peer_extra[p], peer_extra[p]
for rate in rates:
    phase = "lag@%d" % rate
    tools = [t for p, t in groups if p == phase]
    h2 = med(groups.get((phase, "h2load"), []), "req_per_cpu_s")
    print("\n== %d req/s, %s connections: target = meshbench backend (arrivals by the kernel's receive time)" % (rate, sys.argv[3]))
    if floor:
        period = min(floor, key=lambda p: abs(math.log(p * rate / 1e6)))
        cpu, l50, l99 = floor[period]
        print("   clock: a timer wake-up every %d us costs %.1f us of CPU, lands late p50 %.0f / p99 %.0f us;"
              " one wake per send at %d/s = %.3f CPU-s per s, at most %.0f req/CPU-s"
              % (period, cpu, l50, l99, rate, cpu * rate / 1e6, 1e6 / cpu if cpu else 0))
    ef = even_floor(rate) if floor else None
    if ef:
        f_us, wakes, cost, period = ef
        print("   even-schedule floor (every send within %.0f us): %.0f wake-ups/s x %.1f us (at %d us) / %d req/s + %.1f us closed-loop I/O"
              " = %.1f us per request = %.0f req/CPU-s" % (window_us, wakes, cost, period, rate, 1e6 / closed_rpc, f_us, 1e6 / f_us))
    tf = target_floor(rate) if ef else None
    if tf:
        print("   with the idle target's wake-up billed to the sender (+%.1f us a wake-up): %.1f us per request = %.0f req/CPU-s"
              % (tf[1], tf[0], 1e6 / tf[0]))
    print("   %-30s %5s %10s %8s %7s %8s %8s %8s %9s %9s %6s %7s  %s" % ("generator", "ok/n", "req/CPU-s", "x h2load", "x floor", "x tfloor", "lag p50", "lag p99", "gap p50", "gap p99", "burst", "at tgt", "notes (last rep)"))
    for t in tools:
        rs = groups[(phase, t)]
        ok = [r for r in rs if r["status"] == "ok"]
        rpc = med(rs, "req_per_cpu_s")
        ratio = "%.2fx" % (rpc / h2) if rpc and h2 else "-"
        mine = rpc and t.startswith(("meshbench", "baseline"))
        over_floor = "%.2fx" % (1e6 / ef[0] / rpc) if mine and ef else "-"
        over_tfloor = "%.2fx" % (1e6 / tf[0] / rpc) if mine and tf else "-"
        notes = rs[-1]["extra"]
        notes = " ".join(w for w in notes.split() if not w.startswith(("valid=", "spin_s=", "target_rps=")))
        print("   %-30s %2d/%-2d %10s %8s %7s %8s %8s %8s %9s %9s %6s %7s  %s" % (
            t, len(ok), len(rs), fmt(rpc), ratio, over_floor, over_tfloor, fmt(med(rs, "lag_p50_us")), fmt(med(rs, "lag_p99_us")),
            fmt(med(rs, "gap_p50_us"), 1), fmt(med(rs, "gap_p99_us"), 1), fmt(med(rs, "burst_1ms")),
            fmt(med(rs, "target_rps")), notes))
    # The goals (issues 26 and 37), for meshbench with its defaults and for each variant.
    peers = [t for t in tools if not t.startswith("meshbench") and t != "baseline"]
    def goal(ok, text):
        print("   %-6s %s" % ("met" if ok else "MISSED", text))
    # Evenness is compared with the peers that delivered the rate (at least 95 % of it arrived):
    # a peer that fell behind is sparse, not even.
    kept = [t for t in peers if (med(groups[(phase, t)], "target_rps") or 0) >= 0.95 * rate]
    short = [t for t in peers if t not in kept]
    if short:
        print("   (evenness not compared with %s: less than 95 %% of the rate arrived)" % ", ".join(short))
    # The peer whose cost the issue names at this rate: fortio (its defaults) at 1,000 and 5,000
    # req/s, h2load above.
    named = "fortio" if rate <= 5000 else "h2load"
    named_rpc = med(groups.get((phase, named), []), "req_per_cpu_s")
    least_gap = [(p_, med(groups[(phase, p_)], "gap_p99_us")) for p_ in kept]
    least_gap = min([tv for tv in least_gap if tv[1] is not None], key=lambda tv: tv[1], default=None)
    # The arithmetic: can any pacer on this machine be as cheap as the named peer and as even
    # as the most even one? Cheaper than the peer leaves (its cost - the closed loop's) per
    # request for wake-ups; as even as the most even peer needs a wake-up at least every gap
    # p99 of its (sends of one wake-up reach the target together).
    if named_rpc and least_gap and closed_rpc and floor:
        spare = 1e6 / named_rpc - 1e6 / closed_rpc
        need_period = least_gap[1]
        wakes = rate if 1e6 / rate >= need_period else 1e6 / need_period
        cost, period = wake_cost(1e6 / wakes)
        # Each wake-up also finds the target idle and pays for its wake-up (loopback).
        if peer_extra:
            cost += peer_extra[min(peer_extra, key=lambda q: abs(math.log(q / period)))]
        need = wakes / rate * cost
        print("   arithmetic: as cheap as %s (%.1f us/request) leaves %.1f us/request for wake-ups; as even as %s"
              " (gap p99 %.0f us) needs %.0f wake-ups/s x %.1f us (with the target's) = %.1f us/request: %s"
              % (named, 1e6 / named_rpc, spare, least_gap[0], need_period, wakes, cost, need,
                 "possible" if need <= spare else "impossible on this machine, both at once"))
    for t in [t for t in tools if t.startswith("meshbench")]:
        mb = groups.get((phase, t), [])
        print("   goals for %s:" % t)
        rpc = med(mb, "req_per_cpu_s")
        if not rpc:
            print("   MISSED its own run failed")
            continue
        if ef:
            goal(1e6 / ef[0] / rpc <= 1.25, "cost %.2fx the even-schedule floor <= 1.25x%s" % (
                1e6 / ef[0] / rpc, " (%.2fx the floor with the target's wake-up)" % (1e6 / tf[0] / rpc) if tf else ""))
        if named_rpc and rate in (1000, 5000, 50000):
            goal(rpc >= named_rpc, "req/CPU-s %.0f >= %s's %.0f" % (rpc, named, named_rpc))
        elif h2:
            goal(rpc >= h2, "req/CPU-s %.0f >= h2load's %.0f" % (rpc, h2))
        for key, what, digits in (("gap_p99_us", "target gap p99 (us)", 1), ("burst_1ms", "target largest 1-ms burst", 0)):
            mine = med(mb, key)
            theirs = [(p_, med(groups[(phase, p_)], key)) for p_ in kept]
            theirs = [(p_, v) for p_, v in theirs if v is not None]
            if mine is None or not theirs:
                print("   -      %s: not measured" % what)
                continue
            least = min(theirs, key=lambda tv: tv[1])
            goal(mine <= least[1], "%s %s <= every peer's (least: %s %s)" % (what, fmt(mine, digits), least[0], fmt(least[1], digits)))
        if rate in (200, 1000, 5000):
            lag = med(mb, "lag_p99_us")
            goal(lag is not None and lag < 100, "schedule lag p99 %s us < 100 us" % fmt(lag))
t_mb, t_wrk = groups.get(("truth", "meshbench")), groups.get(("truth", "wrk"))
if t_mb and t_wrk and med(t_mb, "p50_ms") is not None and med(t_wrk, "p50_ms") is not None:
    d = med(t_mb, "p50_ms") - med(t_wrk, "p50_ms")
    print("\ntruth: p50 meshbench %.3f ms, wrk (1 connection) %.3f ms, difference %+.3f ms (goal within 0.05)" % (med(t_mb, "p50_ms"), med(t_wrk, "p50_ms"), d))
print("\nraw rows: %s" % sys.argv[1])
PY
