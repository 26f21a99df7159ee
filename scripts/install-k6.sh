#!/usr/bin/env bash
# k6 v1.8.1, built from its Go module, a peer for bench/pacer.sh (the constant-arrival-rate
# executor). Cached in $K6_BIN.
set -euo pipefail
VERSION=1.8.1
K6_BIN=${K6_BIN:-/var/cache/meshbench/k6/bin}
if [ -x "$K6_BIN/k6" ] && "$K6_BIN/k6" version 2>/dev/null | grep -q "v$VERSION"; then
  exit 0
fi
command -v go >/dev/null || { echo "install-k6: go is needed to build k6" >&2; exit 1; }
mkdir -p "$K6_BIN"
echo "install-k6: building k6 v$VERSION" >&2
GOBIN="$K6_BIN" nice -n 10 go install "go.k6.io/k6@v$VERSION"
