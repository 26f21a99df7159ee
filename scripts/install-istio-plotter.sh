#!/usr/bin/env bash
# A Python virtual environment with pandas and matplotlib, for the test that runs Istio's own
# graph plotter on meshbench's CSV (crates/meshbench/tests/istio_plotter.rs, which finds it
# through $MESHBENCH_PLOTTER_PYTHON or at the default place below). Does nothing when the
# environment is already there. About 80 MB of wheels from PyPI, once.
set -euo pipefail
venv="${MESHBENCH_PLOTTER_VENV:-${HOME:-/root}/.cache/meshbench/istio-plotter}"
if "$venv/bin/python" -c 'import pandas, matplotlib' >/dev/null 2>&1; then
  exit 0
fi
# The plotter uses `match` (Python 3.10).
python=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null 2>&1 \
    && "$p" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
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
echo "making $venv (pandas, matplotlib)" >&2
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check 'pandas>=1.5,<4' 'matplotlib>=3.6,<4'
"$venv/bin/python" -c 'import pandas, matplotlib; print("pandas", pandas.__version__, "matplotlib", matplotlib.__version__)' >&2
