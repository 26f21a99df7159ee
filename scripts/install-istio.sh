#!/usr/bin/env bash
# Istio's control plane for crates/meshbench/tests/it/istio_gateway.rs: istiod's `pilot-discovery`
# and the gateway's `pilot-agent`, built from the Go module istio.io/istio at a pinned
# pseudo-version (Istio publishes no tagged Go module; this one is `@latest` as resolved once),
# plus files taken from the same module: Istio's CRDs (so the test's kube-apiserver accepts
# Gateway, VirtualService and ServiceEntry objects), the Envoy bootstrap template pilot-agent
# renders (an Istio image carries it at /var/lib/istio/envoy/envoy_bootstrap_tmpl.json), and
# the sidecar and gateway injection templates and the chart values istiod's injector renders
# pods with (tests/it/common/istio_node.rs). Everything goes under $ISTIO_CACHE (default
# /var/cache/meshbench/istio/<version>): bin/pilot-discovery, bin/pilot-agent, crd-all.gen.yaml,
# envoy_bootstrap_tmpl.json, injection-template.yaml, gateway-injection-template.yaml,
# injection-values.yaml; and the Gateway API's Gateway CRD from the version of
# sigs.k8s.io/gateway-api Istio's go.mod requires (gateway-api-gateways.yaml: a waypoint is a
# Gateway API Gateway, tests/it/cluster_experiment.rs).
# Built once (a few minutes, at `nice -n 10`); nothing is done when both binaries are there.
set -euo pipefail
VERSION=v0.0.0-20260827124520-eed52ebb66ad
ISTIO_CACHE=${ISTIO_CACHE:-/var/cache/meshbench/istio/$VERSION}
ISTIO_BIN=$ISTIO_CACHE/bin
BINARIES="pilot-discovery pilot-agent"
build=()
for b in $BINARIES; do [ -x "$ISTIO_BIN/$b" ] || build+=("$b"); done
if [ ${#build[@]} -eq 0 ] && [ -s "$ISTIO_CACHE/crd-all.gen.yaml" ] \
  && [ -s "$ISTIO_CACHE/envoy_bootstrap_tmpl.json" ] \
  && [ -s "$ISTIO_CACHE/injection-template.yaml" ] && [ -s "$ISTIO_CACHE/injection-values.yaml" ] \
  && [ -s "$ISTIO_CACHE/gateway-injection-template.yaml" ] \
  && [ -s "$ISTIO_CACHE/gateway-api-gateways.yaml" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "install-istio: go is needed to build ${build[*]:-the CRDs}" >&2; exit 1; }
WORK=$(mktemp -d /tmp/meshbench-istio-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
# The two commands are `tool` dependencies of a scratch module: `go build` then uses exactly the
# versions istio.io/istio's own go.mod asks for (it has no replace directives to carry over).
{
  echo "module meshbench.test/istio"
  echo
  echo "go 1.26"
} > go.mod
echo "install-istio: resolving istio.io/istio@$VERSION (first time: a minute or two)" >&2
for b in $BINARIES; do
  go get -tool "istio.io/istio/pilot/cmd/$b@$VERSION" >/dev/null 2>"$WORK/get.log" \
    || { cat "$WORK/get.log" >&2; exit 1; }
done
mkdir -p "$ISTIO_BIN"
# Istio's CRDs, as its base chart installs them, and the proxy image's bootstrap template,
# from the module's own copies.
SRC=$(go list -m -f '{{.Dir}}' istio.io/istio)
for f in manifests/charts/base/files/crd-all.gen.yaml:crd-all.gen.yaml \
  tools/packaging/common/envoy_bootstrap.json:envoy_bootstrap_tmpl.json \
  manifests/charts/istio-control/istio-discovery/files/injection-template.yaml:injection-template.yaml \
  manifests/charts/istio-control/istio-discovery/files/gateway-injection-template.yaml:gateway-injection-template.yaml \
  manifests/charts/istio-control/istio-discovery/values.yaml:injection-values.yaml; do
  [ -s "$SRC/${f%%:*}" ] || { echo "install-istio: no ${f%%:*} in istio.io/istio@$VERSION" >&2; exit 1; }
  install -m 0644 "$SRC/${f%%:*}" "$ISTIO_CACHE/${f#*:}"
done
GATEWAY_API=$(go list -m -f '{{.Dir}}' sigs.k8s.io/gateway-api)
[ -s "$GATEWAY_API/config/crd/standard/gateway.networking.k8s.io_gateways.yaml" ] \
  || { echo "install-istio: no Gateway CRD in $GATEWAY_API" >&2; exit 1; }
install -m 0644 "$GATEWAY_API/config/crd/standard/gateway.networking.k8s.io_gateways.yaml" \
  "$ISTIO_CACHE/gateway-api-gateways.yaml"
[ ${#build[@]} -gt 0 ] || exit 0
pkgs=()
for b in "${build[@]}"; do pkgs+=("istio.io/istio/pilot/cmd/$b"); done
echo "install-istio: building ${build[*]} (several minutes the first time)" >&2
# Into a scratch directory first: a build cut short leaves no binary that looks complete.
mkdir -p "$WORK/out"
# No symbol table nor DWARF (-s -w): a faster link and smaller binaries; stack traces still name
# functions and lines (from the runtime's own tables).
nice -n 10 go build -ldflags="-s -w" -o "$WORK/out/" "${pkgs[@]}"
for b in "${build[@]}"; do mv "$WORK/out/$b" "$ISTIO_BIN/$b"; done
echo "install-istio: $ISTIO_BIN ready" >&2
