#!/usr/bin/env bash
# bench/attribution.sh - what per-hop attribution costs, on THIS machine (issue 36).
#
#   off     : attribution off must cost nothing. The engine of this tree against the engine of
#             $BEFORE (the commit before attribution; or BEFORE_BIN=/path/to/meshbench), each
#             `meshbench run` alone on CPU $GEN_CPU against a `meshbench backend` on CPU
#             $SRV_CPU: an open loop at $RATE req/s and a closed loop, $CONNS connections,
#             $DUR s. Figures: requests per generator CPU-second, p50/p99 latency, lag p99.
#   on      : with attribution on, the figures stay within their noise. A lab step through
#             both sidecars ($PROXY: meshbench's Envoy, or `istio`: Istio's sidecars in pods,
#             configured by istiod, STRICT; mutual TLS; $QPS req/s x 16 connections, $EXP_DUR s),
#             without attribution and with `attribution.sample` $SAMPLES, interleaved: p50,
#             p90, p99 and each sidecar's CPU; the noise is the spread of the same setting
#             over the repetitions (max - min of the medians' inputs).
#   reps    : $REPS, interleaved (every variant once, then again), medians.
#
# Prints medians and ratios (after/before, on/off). Read ratios, not absolute times.
set -u -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=${REPS:-5}
DUR=${DUR:-8}
RATE=${RATE:-5000}
CONNS=${CONNS:-50}
QPS=${QPS:-1000}
EXP_DUR=${EXP_DUR:-8}
SAMPLES=${SAMPLES:-"0.01 0.1"}
GEN_CPU=${GEN_CPU:-0}
SRV_CPU=${SRV_CPU:-1}
PORT=${PORT:-18391}
BEFORE=${BEFORE:-9cbeb04}
PHASES=${PHASES:-"off on"}
PROXY=${PROXY:-envoy}
WORK=$(mktemp -d /tmp/meshbench-attrbench.XXXXXX)
cleanup() {
  [ -n "${BACKEND_PID:-}" ] && kill "$BACKEND_PID" 2>/dev/null
  git -C "$ROOT" worktree remove --force "$WORK/before" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
"$ROOT/scripts/install-deps.sh" >/dev/null
cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
MB="$ROOT/target/release/meshbench"

if [[ " $PHASES " == *" off "* ]]; then
  OLD=${BEFORE_BIN:-}
  if [ -z "$OLD" ]; then
    echo "== building $BEFORE (the engine before attribution)" >&2
    git -C "$ROOT" worktree add --detach "$WORK/before" "$BEFORE" -q
    CARGO_TARGET_DIR="$ROOT/target/bench-before" cargo build --release --locked \
      --manifest-path "$WORK/before/Cargo.toml" -q -p meshbench
    OLD="$ROOT/target/bench-before/release/meshbench"
  fi
  taskset -c "$SRV_CPU" "$MB" backend --listen "127.0.0.1:$PORT" --size 1024 >/dev/null &
  BACKEND_PID=$!
  sleep 1
  echo "== off: $RATE req/s open loop and a closed loop, $CONNS connections, $DUR s, $REPS reps" >&2
  for rep in $(seq 1 "$REPS"); do
    for who in before after; do
      bin=$MB; [ $who = before ] && bin=$OLD
      for mode in open closed; do
        rate=(--rate "$RATE"); [ $mode = closed ] && rate=()
        taskset -c "$GEN_CPU" "$bin" run "http://127.0.0.1:$PORT/" -c "$CONNS" -d "${DUR}s" \
          --threads 1 "${rate[@]}" --json "$WORK/off-$who-$mode-$rep.json" >/dev/null 2>&1 \
          || echo "off $who $mode $rep: failed" >&2
      done
    done
  done
  kill "$BACKEND_PID"; BACKEND_PID=
fi

if [[ " $PHASES " == *" on "* ]]; then
  cat > "$WORK/sidecars.yaml" <<EOF
name: attrbench
topologies: [both]
duration_secs: $EXP_DUR
warmup_secs: 2
cooldown_secs: 0.5
load:
  rate_rps: [$QPS]
  connections: [16]
  response_bytes: [1024]
proxy:
  type: $PROXY
  workers: 2
  mtls: true
EOF
  if [ "$PROXY" = istio ]; then
    printf '  peer_authentication: strict\nisolation: netns\n' >> "$WORK/sidecars.yaml"
  fi
  echo "== on: both $PROXY sidecars, $QPS req/s x 16 connections, off and sample $SAMPLES, $REPS reps" >&2
  for rep in $(seq 1 "$REPS"); do
    for sample in off $SAMPLES; do
      set_attr=(); [ "$sample" != off ] && set_attr=(--set "attribution.sample=$sample")
      "$MB" experiment "$WORK/sidecars.yaml" --store "$WORK/r.db" --quiet "${set_attr[@]}" \
        --set "name=on-$sample-$rep" >/dev/null 2>"$WORK/err" || echo "on $sample $rep: $(tail -1 "$WORK/err")" >&2
      "$MB" results export "on-$sample-$rep" --format json --store "$WORK/r.db" > "$WORK/on-$sample-$rep.json" 2>/dev/null
    done
  done
fi

python3 - "$WORK" "$REPS" "$PHASES" "$SAMPLES" "$PROXY" <<'PY'
import json, os, statistics, sys
work, reps, phases, samples, proxy = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5]
med = lambda xs: statistics.median(xs) if xs else float("nan")
spread = lambda xs: (max(xs) - min(xs)) if xs else float("nan")
def load(name):
    try:
        return json.load(open(os.path.join(work, name)))
    except Exception:
        return None
if "off" in phases:
    print("\noff: attribution off, this tree (after) vs the engine before it; medians of %d interleaved reps" % reps)
    print("%-7s %-7s %12s %9s %9s %10s" % ("mode", "build", "req/CPU-s", "p50 ms", "p99 ms", "lag p99 ms"))
    fig = {}
    for mode in ("open", "closed"):
        for who in ("before", "after"):
            rows = [load("off-%s-%s-%d.json" % (who, mode, r)) for r in range(1, reps + 1)]
            rows = [r for r in rows if r]
            per_cpu = [r["requests"]["total"] / max(r["generator"]["cpu_secs"], 1e-9) for r in rows]
            p50 = [r["latency_us"]["p50"] / 1000 for r in rows]
            p99 = [r["latency_us"]["p99"] / 1000 for r in rows]
            lag = [r["schedule_lag_us"]["p99"] / 1000 for r in rows if r.get("schedule_lag_us")]
            fig[(mode, who)] = (med(per_cpu), med(p50), med(p99))
            print("%-7s %-7s %12.0f %9.3f %9.3f %10s" % (mode, who, med(per_cpu), med(p50), med(p99),
                  ("%.3f" % med(lag)) if lag else "-"))
        b, a = fig[(mode, "before")], fig[(mode, "after")]
        print("%-7s after/before: req/CPU-s %.3fx, p50 %.3fx, p99 %.3fx" % (mode, a[0] / b[0], a[1] / b[1], a[2] / b[2]))
if "on" in phases:
    print("\non: both %s sidecars, attribution off and on; medians of %d interleaved reps (spread: max - min)" % (proxy, reps))
    print("%-8s %16s %16s %16s %14s %8s" % ("sample", "p50 ms", "p90 ms", "p99 ms", "sidecar mc", "split"))
    base = None
    for s in ["off"] + samples:
        docs = [load("on-%s-%d.json" % (s, r)) for r in range(1, reps + 1)]
        steps = [d["steps"][0] for d in docs if d and d["steps"] and d["steps"][0]["status"] == "ok"]
        q = lambda k: [st["summary"][k] / 1000 for st in steps]
        mc = [sum(u["cpu_millicores_avg"] for u in st["usage"] if u["role"] in ("client_proxy", "server_proxy")) / 2 for st in steps]
        split = [len(st.get("attribution", {}).get("requests", [])) for st in steps]
        cell = lambda xs, f="%.3f": (f + " ±" + f) % (med(xs), spread(xs) / 2)
        print("%-8s %16s %16s %16s %14s %8s" % (s, cell(q("p50_us")), cell(q("p90_us")), cell(q("p99_us")), cell(mc, "%.0f"), med(split) if split else "-"))
        row = (med(q("p50_us")), med(q("p90_us")), med(q("p99_us")), med(mc))
        if base is None:
            base = row
        else:
            print("%-8s on/off: p50 %.3fx, p90 %.3fx, p99 %.3fx, sidecar CPU %.3fx" % (s, row[0] / base[0], row[1] / base[1], row[2] / base[2], row[3] / base[3]))
PY
