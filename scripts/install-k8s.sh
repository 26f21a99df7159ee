#!/usr/bin/env bash
# A real one-node Kubernetes cluster for the tests of `meshbench gen k8s` and `meshbench k8s run`
# (crates/meshbench/tests/it/common/cluster.rs starts and stops it):
#  - Debian's etcd-server, containerd, runc, the CNI plugins (bridge, host-local, loopback),
#    iptables and conntrack (kube-proxy), at pinned versions;
#  - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy built by
#    scripts/build-go.sh from deploy/go, which requires k8s.io/kubernetes v1.36.1 with every
#    k8s.io staging module replaced by its published v0.36.1, cached in $K8S_BIN (default
#    /var/cache/meshbench/k8s/v1.36.1/bin); only the missing ones are built;
#  - the node's sandbox ("pause") image, deploy/pause/pause.c built static and packaged by
#    scripts/oci-archive.sh as $K8S_CACHE/images/pause.tar (the node needs no registry).
# No service is started: the packages' own etcd and containerd stay off (the tests start theirs).
# `--debian-only` installs the Debian packages and stops there (scripts/install-deps.sh installs
# every Debian package first, then builds beside the other parts).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' deploy/go/go.mod)
K8S_CACHE=${K8S_CACHE:-/var/cache/meshbench/k8s/$VERSION}
export K8S_BIN=${K8S_BIN:-$K8S_CACHE/bin}
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

# The five binaries, from deploy/go (shared with istiod's build: scripts/build-go.sh says why).
exec scripts/build-go.sh k8s
