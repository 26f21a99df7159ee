#!/usr/bin/env bash
# bench/answers.sh - what the answers cost on THIS machine.
#
# 1. Report generation for an experiment of 100 steps (target: under 2 s).
#    meshbench  : `meshbench report` (HTML, 100+ charts as SVG and PNG)
#    matplotlib : the glue way (Istio's plotter): `results export --format json`, then a Python
#                 script drawing the same charts (4 latency-vs-QPS, 100 timelines) as PNG
#    The 100 steps are real: a 10-step experiment (baseline and an nginx sidecar, 5 rates) is
#    run once and its steps are copied ten times into a new experiment, each copy at new rates.
# 2. Capacity search vs a plain sweep of the same resolution, against `meshbench backend
#    --work 2ms --threads 1` (saturates near 500 req/s), SLO p99<20ms:
#    search : `meshbench capacity` (doubling, bisection to 2 %, one confirmation)
#    sweep  : `meshbench run` at 100, 110, 120 ... req/s (10 req/s = 2 % of the answer), each
#             step as long as a search step, stopping at the first failure (the sweep's best case)
# Both with $REPS interleaved repetitions; medians and ratios. Noisy shared machines: read the
# ratios.
set -u -o pipefail
BACKEND=
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
REPS=${REPS:-3}
WORK=$(mktemp -d /tmp/meshbench-answersbench.XXXXXX)
trap 'rm -rf "$WORK"; kill $BACKEND 2>/dev/null' EXIT
"$ROOT/scripts/install-deps.sh"
cargo build --release --locked --manifest-path "$ROOT/Cargo.toml" -q
MB="$ROOT/target/release/meshbench"
now_ms() { python3 -c 'import time; print(int(time.monotonic() * 1000))'; }
rows="$WORK/rows.tsv"

# A Python with matplotlib for the peer (PyPI), kept between runs.
VENV="$ROOT/target/bench-venv"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import matplotlib' 2>/dev/null || "$VENV/bin/pip" install -q matplotlib

# --- 1. report of 100 steps ---------------------------------------------------------------
cat > "$WORK/exp.yaml" <<EOF
name: reportbench
topologies: [baseline, serveronly]
duration_secs: 2
warmup_secs: 0.5
cooldown_secs: 0
load:
  rate_rps: [200, 400, 800, 1600, 3200]
  connections: [8]
proxy:
  type: nginx
EOF
"$MB" experiment "$WORK/exp.yaml" --store "$WORK/r.db" -q >/dev/null
python3 - "$WORK/r.db" <<'PY'
import sqlite3, sys, json
db = sqlite3.connect(sys.argv[1])
src = db.execute("SELECT id FROM experiments WHERE name='reportbench'").fetchone()[0]
cols = [r[1] for r in db.execute("PRAGMA table_info(experiments)") if r[1] != "id"]
db.execute(f"INSERT INTO experiments ({','.join(cols)}) SELECT {','.join(cols)} FROM experiments WHERE id=?", (src,))
dst = db.execute("SELECT max(id) FROM experiments").fetchone()[0]
db.execute("UPDATE experiments SET name='reportbench-100' WHERE id=?", (dst,))
steps = db.execute("SELECT id FROM steps WHERE experiment_id=? ORDER BY seq", (src,)).fetchall()
scols = [r[1] for r in db.execute("PRAGMA table_info(steps)") if r[1] not in ("id", "experiment_id", "seq", "params")]
seq = 0
for copy in range(10):
    for (sid,) in steps:
        params = json.loads(db.execute("SELECT params FROM steps WHERE id=?", (sid,)).fetchone()[0])
        params["rate_rps"] = params["rate_rps"] * (1 + copy / 10)
        db.execute(f"INSERT INTO steps (experiment_id, seq, params, {','.join(scols)}) SELECT ?, ?, ?, {','.join(scols)} FROM steps WHERE id=?",
                   (dst, seq, json.dumps(params), sid))
        new = db.execute("SELECT last_insert_rowid()").fetchone()[0]
        for t in ("histograms", "series", "usage", "samples"):
            tc = [r[1] for r in db.execute(f"PRAGMA table_info({t})") if r[1] != "step_id"]
            db.execute(f"INSERT INTO {t} (step_id, {','.join(tc)}) SELECT ?, {','.join(tc)} FROM {t} WHERE step_id=?", (new, sid))
        seq += 1
db.commit()
print(f"reportbench-100: {seq} steps", file=sys.stderr)
PY
"$MB" results export reportbench-100 --format json --store "$WORK/r.db" --out "$WORK/export.json"
cat > "$WORK/plot.py" <<'PY'
import json, sys, os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
doc = json.load(open(sys.argv[1])); out = sys.argv[2]; os.makedirs(out, exist_ok=True)
steps = [s for s in doc["steps"] if s["result"]]
for key, name in [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99_9", "p999")]:
    fig, ax = plt.subplots(figsize=(7.6, 4))
    for v in sorted({s["variant"] for s in steps}):
        pts = sorted((s["params"]["rate_rps"], s["result"]["latency_us"][key] / 1000) for s in steps if s["variant"] == v)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=v)
    ax.legend(); ax.set_xlabel("rps"); ax.set_ylabel(name + " ms")
    fig.savefig(f"{out}/latency_{name}.png"); fig.savefig(f"{out}/latency_{name}.svg"); plt.close(fig)
for i, s in enumerate(steps):
    tl = s["result"]["timeline"]
    fig, ax = plt.subplots(figsize=(7.6, 2.6)); ax2 = ax.twinx()
    ax.plot([p["second"] for p in tl], [p["requests"] for p in tl])
    ax2.plot([p["second"] for p in tl], [p["p99_us"] / 1000 for p in tl], color="red")
    fig.savefig(f"{out}/timeline_{i:03}.png"); fig.savefig(f"{out}/timeline_{i:03}.svg"); plt.close(fig)
PY
for rep in $(seq "$REPS"); do
  t0=$(now_ms); "$MB" report reportbench-100 --store "$WORK/r.db" --out "$WORK/rep" >/dev/null; t1=$(now_ms)
  printf 'report\tmeshbench\t%s\t%s\n' "$rep" "$(( t1 - t0 ))" >> "$rows"
  t0=$(now_ms); "$VENV/bin/python" "$WORK/plot.py" "$WORK/export.json" "$WORK/mpl" >/dev/null; t1=$(now_ms)
  printf 'report\tmatplotlib\t%s\t%s\n' "$rep" "$(( t1 - t0 ))" >> "$rows"
done
charts=$(ls "$WORK/rep/plots" | grep -c '\.png$')

# --- 2. capacity search vs plain sweep ----------------------------------------------------
"$MB" backend -l 127.0.0.1:0 --work 2ms --threads 1 > "$WORK/backend.out" &
BACKEND=$!
for _ in $(seq 50); do grep -q listening "$WORK/backend.out" && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' "$WORK/backend.out")
for rep in $(seq "$REPS"); do
  t0=$(now_ms)
  answer=$("$MB" capacity "$URL" --slo 'p99<20ms,errors<0.1%' --start 100 --step-duration 1s --warmup 0.3s \
    -c 32 --store "$WORK/c.db" -q 2>/dev/null | sed -n 's/^capacity: \([0-9.]*\) req\/s.*/\1/p')
  t1=$(now_ms)
  nsteps=$(python3 -c "import sqlite3; print(sqlite3.connect('$WORK/c.db').execute('SELECT count(*) FROM steps WHERE experiment_id=(SELECT max(id) FROM experiments)').fetchone()[0])")
  printf 'capacity\tsearch\t%s\t%s\t%s\t%s\n' "$rep" "$(( t1 - t0 ))" "$nsteps" "$answer" >> "$rows"
  t0=$(now_ms); best=0; n=0
  for rate in $(seq 100 10 1000); do
    n=$((n + 1))
    "$MB" run "$URL" --rate "$rate" -d 1s --warmup 0.3s -c 32 -q --json "$WORK/s.json" >/dev/null 2>&1
    ok=$(python3 -c "
import json; r = json.load(open('$WORK/s.json'))
print(int(r['latency_us']['p99'] < 20000 and r['requests']['errors'] <= 0.001 * max(1, r['requests']['total']) and r['throughput_rps'] >= 0.95 * $rate))")
    [ "$ok" = 1 ] || break
    best=$rate
  done
  t1=$(now_ms)
  printf 'capacity\tsweep\t%s\t%s\t%s\t%s\n' "$rep" "$(( t1 - t0 ))" "$n" "$best" >> "$rows"
done

python3 - "$rows" "$charts" <<'PY'
import sys, statistics, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
by = collections.defaultdict(list)
for r in rows:
    by[(r[0], r[1])].append(r)
med = lambda k, i: statistics.median(float(x[i]) for x in by[k])
print(f"reps: {len(by[('report', 'meshbench')])}, medians (raw rows below)")
m, p = med(("report", "meshbench"), 3), med(("report", "matplotlib"), 3)
print(f"report of 100 steps: meshbench {m / 1000:.2f} s ({sys.argv[2]} charts, SVG+PNG, and the HTML)  "
      f"matplotlib {p / 1000:.2f} s (104 charts, SVG+PNG)  meshbench/matplotlib {m / p:.2f}x  target < 2 s: {'met' if m < 2000 else 'MISSED'}")
s, w = med(("capacity", "search"), 3), med(("capacity", "sweep"), 3)
print(f"capacity: search {s / 1000:.1f} s in {med(('capacity', 'search'), 4):.0f} steps -> {med(('capacity', 'search'), 5):.1f} req/s;  "
      f"sweep {w / 1000:.1f} s in {med(('capacity', 'sweep'), 4):.0f} steps -> {med(('capacity', 'sweep'), 5):.0f} req/s;  search/sweep {s / w:.2f}x")
for r in rows:
    print("  " + "\t".join(r))
PY
