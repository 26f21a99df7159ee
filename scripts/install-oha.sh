#!/usr/bin/env bash
# oha 1.16.0 (Rust, hyper, HTTP/3 feature), a peer for bench/pacer.sh (open loop `-q`) and
# bench/h3.sh. oha's lock file names crates newer than the toolchain here allows unless --locked.
# Cached in $OHA_ROOT/bin/oha.
set -euo pipefail
VERSION=1.16.0
OHA_ROOT=${OHA_ROOT:-/var/cache/meshbench/oha}
if [ -x "$OHA_ROOT/bin/oha" ] && "$OHA_ROOT/bin/oha" --version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
echo "install-oha: building oha $VERSION (several minutes)" >&2
nice -n 10 cargo install oha --version "$VERSION" --locked --features http3 --root "$OHA_ROOT"
