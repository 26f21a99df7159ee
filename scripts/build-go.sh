#!/usr/bin/env bash
# build-go.sh PART...: the Go programs the tests run, built from one Go module, deploy/go (its
# go.mod and go.sum pin every version). PART is `k8s` (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy) or `istio` (pilot-discovery, pilot-agent); only the
# missing binaries of the parts named are built, all in one `go build`, at `nice -n 10`.
#
# One module because istiod is built on the Kubernetes libraries the node is built from
# (client-go, api, apimachinery, apiserver, and under them grpc, protobuf, OpenTelemetry): with
# one set of versions each of those packages compiles once, and a later build of the other part
# finds it in Go's build cache. Two modules resolved their versions apart and compiled them twice
# (docs/decisions.md, "One Go module for the Go programs").
#
# scripts/install-k8s.sh and scripts/install-istio.sh call this; run side by side (as
# scripts/install-deps.sh runs them) the second waits on a lock for the first, then builds only
# what is left, from the cache.
# Into $K8S_BIN (default /var/cache/meshbench/k8s/<version>/bin) and $ISTIO_BIN (default
# /var/cache/meshbench/istio/<version>/bin), the versions being deploy/go's.
set -euo pipefail
MODULE="$(cd "$(dirname "$0")/../deploy/go" && pwd)"
version() { awk -v m="$1" '$1 == m { print $2 }' "$MODULE/go.mod"; }
K8S_VERSION=$(version k8s.io/kubernetes)
ISTIO_VERSION=$(version istio.io/istio)
K8S_BIN=${K8S_BIN:-/var/cache/meshbench/k8s/$K8S_VERSION/bin}
ISTIO_BIN=${ISTIO_BIN:-/var/cache/meshbench/istio/$ISTIO_VERSION/bin}

# missing: "package destination-directory" for each binary of the parts asked that is not there.
missing() {
  local part b
  for part in "$@"; do
    case $part in
      k8s)
        for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
          [ -x "$K8S_BIN/$b" ] || echo "k8s.io/kubernetes/cmd/$b $K8S_BIN"
        done ;;
      istio)
        for b in pilot-discovery pilot-agent; do
          [ -x "$ISTIO_BIN/$b" ] || echo "istio.io/istio/pilot/cmd/$b $ISTIO_BIN"
        done ;;
      *) echo "build-go: unknown part '$part': k8s or istio" >&2; return 2 ;;
    esac
  done
}
[ $# -gt 0 ] || { echo "build-go: name the parts to build: k8s, istio or both" >&2; exit 2; }
todo=$(missing "$@") || exit 2
[ -n "$todo" ] || exit 0
command -v go >/dev/null || { echo "build-go: go is needed to build the $* binaries" >&2; exit 1; }

# One build at a time: a second one beside it would compile the shared packages again.
mkdir -p /var/cache/meshbench
exec 9> /var/cache/meshbench/.build-go.lock
if ! flock -n 9; then
  echo "build-go: waiting for the Go build beside this one (what it compiles is shared)" >&2
  flock 9
fi
mapfile -t todo < <(missing "$@")
[ ${#todo[@]} -gt 0 ] || exit 0

WORK=$(mktemp -d /tmp/meshbench-go-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pkgs=()
for t in "${todo[@]}"; do pkgs+=("${t%% *}"); done
echo "build-go: building ${pkgs[*]##*/} (k8s.io/kubernetes $K8S_VERSION, istio.io/istio" \
  "$ISTIO_VERSION; the first time: about 15 minutes on 2 cores)" >&2
# Into a scratch directory first: a build cut short leaves no binary that looks complete.
# No symbol table nor DWARF (-s -w): a faster link and smaller binaries; stack traces still name
# functions and lines (from the runtime's own tables).
(cd "$MODULE" && nice -n 10 go build -ldflags="-s -w" -o "$WORK/" "${pkgs[@]}")
for t in "${todo[@]}"; do
  mkdir -p "${t#* }"
  mv "$WORK/$(basename "${t%% *}")" "${t#* }/"
done
echo "build-go: built ${pkgs[*]##*/}" >&2
