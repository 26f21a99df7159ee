#!/usr/bin/env bash
# A real Kubernetes control plane for the tests of `meshbench gen k8s` and `meshbench k8s run`:
# Debian's etcd-server, and kube-apiserver and kube-controller-manager built from a Go module that
# requires k8s.io/kubernetes v1.34.2 with every k8s.io staging module replaced by its published
# v0.34.2. The binaries are cached in $K8S_BIN (default /var/cache/meshbench/k8s/v1.34.2/bin)
# and not built again. There is no scheduler and no kubelet: the tests play the node.
set -euo pipefail
VERSION=1.34.2
K8S_BIN=${K8S_BIN:-/var/cache/meshbench/k8s/v$VERSION/bin}
if ! command -v etcd >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q etcd-server >/dev/null
  # The package starts a system etcd on 2379; the tests start their own.
  systemctl disable --now etcd >/dev/null 2>&1 || true
  pkill -x etcd 2>/dev/null || true
fi
if [ -x "$K8S_BIN/kube-apiserver" ] && [ -x "$K8S_BIN/kube-controller-manager" ]; then
  exit 0
fi
command -v go >/dev/null || { echo "install-k8s: go is needed to build the control plane" >&2; exit 1; }
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
cat > "$WORK/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)
GO
cd "$WORK"
echo "install-k8s: resolving k8s.io/kubernetes v$VERSION (first time: several minutes)" >&2
go mod tidy >/dev/null 2>"$WORK/tidy.log" || { cat "$WORK/tidy.log" >&2; exit 1; }
mkdir -p "$K8S_BIN"
echo "install-k8s: building kube-apiserver and kube-controller-manager (about 5 minutes)" >&2
nice -n 10 go build -o "$K8S_BIN/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
nice -n 10 go build -o "$K8S_BIN/kube-controller-manager" k8s.io/kubernetes/cmd/kube-controller-manager
echo "install-k8s: $K8S_BIN ready" >&2
