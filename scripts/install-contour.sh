#!/usr/bin/env bash
# Contour, the gateway's control plane for `gateway.type: contour` (crates/lab/src/contour,
# tests/it/contour_gateway.rs), under $CONTOUR_CACHE (default
# /var/cache/meshbench/contour/<version>):
#  - bin/contour, built from its Go module at a pinned release by `go install ...@VERSION`, so
#    that every module under it is at the version that release's own go.mod pins (the Go proxy
#    serves them all). Not in deploy/go: Contour v1.33 is built on the Kubernetes libraries
#    v0.34, controller-runtime v0.22 and the Gateway API v1.3, where deploy/go's Istio and node
#    need v0.36 and v1.6, and one Go build takes one version of each module;
#  - crds.yaml, Contour's CRDs from the same module (examples/contour/01-crds.yaml: HTTPProxy,
#    TLSCertificateDelegation, ExtensionService, ContourConfiguration, ContourDeployment).
# The lab's API server is scripts/install-k8s.sh's, Contour's Envoy scripts/install-envoy.sh's.
# Nothing is done when both are there.
set -euo pipefail
VERSION=v1.33.8
MODULE=github.com/projectcontour/contour
CONTOUR_CACHE=${CONTOUR_CACHE:-/var/cache/meshbench/contour/$VERSION}
BIN=$CONTOUR_CACHE/bin/contour
CRDS=$CONTOUR_CACHE/crds.yaml
[ -x "$BIN" ] && [ -s "$CRDS" ] && exit 0
command -v go >/dev/null || { echo "install-contour: go is needed to build contour" >&2; exit 1; }
mkdir -p "$CONTOUR_CACHE/bin"
if [ ! -s "$CRDS" ]; then
  src=$(go mod download -json "$MODULE@$VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -s "$src/examples/contour/01-crds.yaml" ] \
    || { echo "install-contour: no examples/contour/01-crds.yaml in $MODULE@$VERSION" >&2; exit 1; }
  install -m 0644 "$src/examples/contour/01-crds.yaml" "$CRDS"
fi
if [ ! -x "$BIN" ]; then
  echo "install-contour: building contour $VERSION (the first time: about 5 minutes on 2 cores)" >&2
  # Into a scratch directory first: a build cut short leaves no binary that looks complete. No
  # symbol table nor DWARF (-s -w), as scripts/build-go.sh builds; the version stamped as
  # Contour's own release build stamps it (`contour version`).
  work=$(mktemp -d /tmp/meshbench-contour.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  GOBIN=$work nice -n 10 go install \
    -ldflags="-s -w -X $MODULE/internal/build.Version=$VERSION" "$MODULE/cmd/contour@$VERSION"
  mv "$work/contour" "$BIN"
fi
