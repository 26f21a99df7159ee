#!/usr/bin/env bash
# A real one-node Kubernetes cluster for the tests of `meshbench gen k8s` and `meshbench k8s run`
# (crates/meshbench/tests/it/common/cluster.rs starts and stops it):
#  - Debian's etcd-server, containerd, runc, the CNI plugins (bridge, host-local, loopback),
#    iptables and conntrack (kube-proxy), at pinned versions;
#  - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from a
#    Go module that requires k8s.io/kubernetes v1.34.2 with every k8s.io staging module replaced
#    by its published v0.34.2, cached in $K8S_BIN (default /var/cache/meshbench/k8s/v1.34.2/bin);
#    only the missing ones are built (all five at once: about 10 minutes the first time);
#  - the node's sandbox ("pause") image, deploy/pause/pause.c built static and packaged by
#    scripts/oci-archive.sh as $K8S_CACHE/images/pause.tar (the node needs no registry).
# No service is started: the packages' own etcd and containerd stay off (the tests start theirs).
# `--debian-only` installs the Debian packages and stops there (scripts/install-deps.sh installs
# every Debian package first, then builds beside the other parts).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=1.34.2
K8S_CACHE=${K8S_CACHE:-/var/cache/meshbench/k8s/v$VERSION}
K8S_BIN=${K8S_BIN:-$K8S_CACHE/bin}
DEBS="etcd-server=3.4.23-4+b4 containerd=1.6.20~ds1-1+deb12u3 runc=1.1.5+ds1-1+deb12u1
  containernetworking-plugins=1.1.1+ds1-3+b5 iptables=1.8.9-2 conntrack=1:1.4.7-1+b2
  podman=4.3.1+ds1-8+deb12u1+b3"
missing=()
for d in $DEBS; do
  [ "$(dpkg-query -W -f='${Status}' "${d%%=*}" 2>/dev/null)" = "install ok installed" ] || missing+=("$d")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-k8s: installing ${missing[*]}" >&2
  # Keep the packages' services from starting (no init system here to stop them again).
  made_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
  [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
fi
[ "${1:-}" != --debian-only ] || exit 0

# The sandbox image, rebuilt when its source changed.
PAUSE=$K8S_CACHE/images/pause.tar
if [ ! -s "$PAUSE" ] || [ deploy/pause/pause.c -nt "$PAUSE" ]; then
  mkdir -p "$K8S_CACHE/images"
  ROOT=$(mktemp -d /tmp/meshbench-pause.XXXXXX)
  gcc -static -Os -o "$ROOT/pause" deploy/pause/pause.c
  strip "$ROOT/pause"
  scripts/oci-archive.sh "$ROOT" localhost/meshbench-pause:1 "$PAUSE" --entrypoint /pause
  rm -rf "$ROOT"
fi

BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
build=()
for b in $BINARIES; do [ -x "$K8S_BIN/$b" ] || build+=("$b"); done
[ ${#build[@]} -gt 0 ] || exit 0
command -v go >/dev/null || { echo "install-k8s: go is needed to build ${build[*]}" >&2; exit 1; }
WORK=$(mktemp -d /tmp/meshbench-k8s-build.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
STAGING="api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client csi-translation-lib dynamic-resource-allocation endpointslice externaljwt kms
  kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller"
{
  echo "module meshbench.test/k8s"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes v$VERSION"
  echo
  echo "replace ("
  for m in $STAGING; do echo "	k8s.io/$m => k8s.io/$m v0.${VERSION#1.}"; done
  echo ")"
} > "$WORK/go.mod"
{
  echo "//go:build tools"
  echo
  echo "package tools"
  echo
  echo "import ("
  for b in $BINARIES; do echo "	_ \"k8s.io/kubernetes/cmd/$b/app\""; done
  echo ")"
} > "$WORK/tools.go"
cd "$WORK"
echo "install-k8s: resolving k8s.io/kubernetes v$VERSION (first time: several minutes)" >&2
go mod tidy >/dev/null 2>"$WORK/tidy.log" || { cat "$WORK/tidy.log" >&2; exit 1; }
mkdir -p "$K8S_BIN"
echo "install-k8s: building ${build[*]} (about 10 minutes for all five)" >&2
pkgs=()
for b in "${build[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
# Into a scratch directory first: a build cut short leaves no binary that looks complete.
mkdir -p "$WORK/out"
# No symbol table nor DWARF (-s -w): a faster link and smaller binaries; stack traces still name
# functions and lines (from the runtime's own tables).
nice -n 10 go build -ldflags="-s -w" -o "$WORK/out/" "${pkgs[@]}"
for b in "${build[@]}"; do mv "$WORK/out/$b" "$K8S_BIN/$b"; done
echo "install-k8s: $K8S_BIN ready" >&2
