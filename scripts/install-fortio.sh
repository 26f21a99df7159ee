#!/usr/bin/env bash
# fortio, built from its Go module, as an independent gRPC and HTTP peer for tests/it/grpc.rs and
# bench/grpc.sh: its server answers meshbench's calls, its client calls meshbench's backend.
# v1.68.2 is the newest whose dependencies the Go proxy here serves. Cached in $FORTIO_BIN.
set -euo pipefail
VERSION=1.68.2
FORTIO_BIN=${FORTIO_BIN:-/var/cache/meshbench/fortio/bin}
if [ -x "$FORTIO_BIN/fortio" ] && "$FORTIO_BIN/fortio" version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
command -v go >/dev/null || { echo "install-fortio: go is needed to build fortio" >&2; exit 1; }
mkdir -p "$FORTIO_BIN"
echo "install-fortio: building fortio v$VERSION" >&2
GOBIN="$FORTIO_BIN" nice -n 10 go install -ldflags="-s -w" "fortio.org/fortio@v$VERSION"
