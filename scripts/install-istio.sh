#!/usr/bin/env bash
# Istio's control plane for the tests (tests/it/istio_gateway.rs and the others): istiod's
# `pilot-discovery` and the gateway's `pilot-agent`, built by scripts/build-go.sh from deploy/go,
# which requires istio.io/istio at a pinned pseudo-version (Istio publishes no tagged Go module;
# this one is `@latest` as resolved once); and files from the same module, under $ISTIO_CACHE
# (default /var/cache/meshbench/istio/<version>):
#  - crd-all.gen.yaml, Istio's CRDs (the test's kube-apiserver accepts Gateway, VirtualService
#    and ServiceEntry objects);
#  - envoy_bootstrap_tmpl.json, the bootstrap template pilot-agent renders (an Istio image
#    carries it at /var/lib/istio/envoy/envoy_bootstrap_tmpl.json);
#  - injection-template.yaml, gateway-injection-template.yaml and injection-values.yaml: the
#    templates and chart values istiod's injector renders pods with (tests/it/common/istio_node.rs);
#  - gateway-api-gateways.yaml, the Gateway API's Gateway CRD at the version Istio's go.mod
#    requires (a waypoint is a Gateway API Gateway, tests/it/cluster_experiment.rs).
# Nothing is done when both binaries and every file are there.
set -euo pipefail
cd "$(dirname "$0")/.."
MODULE=deploy/go
VERSION=$(awk '$1 == "istio.io/istio" { print $2 }' "$MODULE/go.mod")
ISTIO_CACHE=${ISTIO_CACHE:-/var/cache/meshbench/istio/$VERSION}
export ISTIO_BIN=$ISTIO_CACHE/bin
FILES="manifests/charts/base/files/crd-all.gen.yaml:crd-all.gen.yaml
  tools/packaging/common/envoy_bootstrap.json:envoy_bootstrap_tmpl.json
  manifests/charts/istio-control/istio-discovery/files/injection-template.yaml:injection-template.yaml
  manifests/charts/istio-control/istio-discovery/files/gateway-injection-template.yaml:gateway-injection-template.yaml
  manifests/charts/istio-control/istio-discovery/values.yaml:injection-values.yaml"
GATEWAY_CRD=config/crd/standard/gateway.networking.k8s.io_gateways.yaml
have_files() {
  local f
  for f in $FILES; do [ -s "$ISTIO_CACHE/${f#*:}" ] || return 1; done
  [ -s "$ISTIO_CACHE/gateway-api-gateways.yaml" ]
}
if ! have_files; then
  command -v go >/dev/null || { echo "install-istio: go is needed to fetch istio.io/istio" >&2; exit 1; }
  # The module's source, at the versions deploy/go resolves (the Gateway API's is the one
  # Istio's go.mod requires).
  dir() { (cd "$MODULE" && go mod download "$1" && go list -m -f '{{.Dir}}' "$1"); }
  SRC=$(dir istio.io/istio)
  GATEWAY_API=$(dir sigs.k8s.io/gateway-api)
  mkdir -p "$ISTIO_CACHE"
  for f in $FILES; do
    [ -s "$SRC/${f%%:*}" ] || { echo "install-istio: no ${f%%:*} in istio.io/istio@$VERSION" >&2; exit 1; }
    install -m 0644 "$SRC/${f%%:*}" "$ISTIO_CACHE/${f#*:}"
  done
  [ -s "$GATEWAY_API/$GATEWAY_CRD" ] || { echo "install-istio: no Gateway CRD in $GATEWAY_API" >&2; exit 1; }
  install -m 0644 "$GATEWAY_API/$GATEWAY_CRD" "$ISTIO_CACHE/gateway-api-gateways.yaml"
fi
# The two binaries, from deploy/go (shared with the node's build: scripts/build-go.sh says why).
exec scripts/build-go.sh istio
