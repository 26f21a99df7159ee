#!/usr/bin/env bash
# What crates/meshbench/tests/it/istio_plotter.rs runs Istio's own graph plotter with, each at a
# pinned version:
#   - a Python virtual environment with pandas and matplotlib and everything they need, exactly
#     as scripts/istio-plotter-requirements.txt lists them, every wheel checked by its SHA-256
#     (pip install --require-hashes); about 80 MB of wheels from PyPI, once;
#   - istio/tools' perf/benchmark (graph_plotter/graph_plotter.py) from the Go module proxy:
#     the module istio.io/tools at $ISTIO_TOOLS, checked against its pinned go.sum hash, in a
#     module cache of its own, linked as $venv/istio-tools.
# The test finds both through $MESHBENCH_PLOTTER_VENV (default below). Does nothing when the
# pinned versions are already there.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
requirements="$here/istio-plotter-requirements.txt"
venv="${MESHBENCH_PLOTTER_VENV:-${HOME:-/root}/.cache/meshbench/istio-plotter}"
# The newest istio.io/tools the Go proxy serves whose graph_plotter.py is the plotter's last
# change upstream (commit 1beccaeb, 2024-03-06); its h1: hash as go.sum would record it.
ISTIO_TOOLS=v0.0.0-20250425075802-eb37ce9010c8
ISTIO_TOOLS_SUM=h1:5zljrWTZQBM4oueRc0okG1L70W3msGVdLHvKUT4dFBM=

# Every pinned package installed at its version, and nothing pinned missing.
pinned() {
  "$venv/bin/python" - "$requirements" <<'PY' 2>/dev/null
import importlib.metadata as m, re, sys
for line in open(sys.argv[1]):
    pin = re.match(r"^([A-Za-z0-9_.-]+)==([^ \\]+)", line)
    if pin and m.version(pin.group(1)) != pin.group(2):
        sys.exit(1)
PY
}

if ! pinned; then
  # pandas 3.1 needs Python 3.11 or newer; the hashes are for 3.11 to 3.13.
  python=""
  for p in python3 /usr/bin/python3 python3.13 python3.12 python3.11; do
    if command -v "$p" >/dev/null 2>&1 \
      && "$p" -c 'import sys, venv, ensurepip; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))' 2>/dev/null; then
      python="$p"
      break
    fi
  done
  if [ -z "$python" ]; then
    echo "installing: python3-venv" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends python3-venv >/dev/null \
      || { apt-get update >/dev/null && apt-get install -y --no-install-recommends python3-venv >/dev/null; }
    python=/usr/bin/python3
  fi
  echo "making $venv (pandas, matplotlib: the versions in $requirements)" >&2
  # Go makes its module cache read-only.
  chmod -R u+w "$venv" 2>/dev/null || true
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes \
    --only-binary=:all: -r "$requirements"
  pinned || { echo "install-istio-plotter: $venv does not hold the versions $requirements pins" >&2; exit 1; }
fi

plotter="$venv/istio-tools/perf/benchmark/graph_plotter/graph_plotter.py"
if [ ! -f "$plotter" ] || [ "$(cat "$venv/istio-tools.version" 2>/dev/null)" != "$ISTIO_TOOLS" ]; then
  command -v go >/dev/null || { echo "install-istio-plotter: go is needed to fetch istio.io/tools from the Go module proxy" >&2; exit 1; }
  echo "install-istio-plotter: fetching istio.io/tools@$ISTIO_TOOLS" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # Outside any module; the public checksum database does not know this pseudo-version, so the
  # module is checked against the pinned hash instead.
  (cd "$work" && GOFLAGS=-mod=mod GONOSUMDB=istio.io/tools GOTOOLCHAIN=local \
    GOMODCACHE="$venv/go-mod" go mod download -json "istio.io/tools@$ISTIO_TOOLS") > "$work/module.json"
  read -r dir sum < <(python3 -c '
import json, sys
m = json.load(open(sys.argv[1]))
if m.get("Error"):
    sys.exit("install-istio-plotter: " + m["Error"])
print(m["Dir"], m["Sum"])' "$work/module.json")
  [ "$sum" = "$ISTIO_TOOLS_SUM" ] \
    || { echo "install-istio-plotter: istio.io/tools@$ISTIO_TOOLS has hash $sum, not the pinned $ISTIO_TOOLS_SUM" >&2; exit 1; }
  ln -sfn "$dir" "$venv/istio-tools"
  echo "$ISTIO_TOOLS" > "$venv/istio-tools.version"
  [ -f "$plotter" ] || { echo "install-istio-plotter: istio.io/tools@$ISTIO_TOOLS has no $plotter" >&2; exit 1; }
fi
