#!/usr/bin/env bash
# Builds the agent image from deploy/Containerfile with podman: the release binary, every shared
# library `ldd` lists (and the loader), /etc/passwd and /etc/group with the non-root user 65532.
# Podman here runs with runc (crun refuses this machine's cgroup layout) and a containers.conf
# with `default_ulimits = []`; building from scratch runs no container. The script installs
# podman if missing.
#
#   scripts/build-image.sh                                 # -> localhost/meshbench:VERSION
#   TAG=localhost/meshbench:test BIN=path/to/meshbench OCI_ARCHIVE=out.tar scripts/build-image.sh
#
# BIN packages that binary instead of building one (the tests give theirs). OCI_ARCHIVE also
# writes the image as an OCI archive, which `ctr -n k8s.io images import` loads into a node's
# containerd without a registry (tests/it/k8s_node.rs does); with RMI=1 the image is then removed
# from podman's own storage, so nothing is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-localhost/meshbench:$(grep -m1 '^version' Cargo.toml | cut -d'"' -f2)}
command -v podman >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc >/dev/null
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked -q
  BIN=target/release/meshbench
fi
CTX=$(mktemp -d /tmp/meshbench-image.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/rootfs/etc" "$CTX/rootfs/tmp"
chmod 1777 "$CTX/rootfs/tmp"
cp "$BIN" "$CTX/rootfs/meshbench"
for lib in $(ldd "$BIN" | grep -o '/[^ ]*'); do
  mkdir -p "$CTX/rootfs$(dirname "$lib")"
  cp -L "$lib" "$CTX/rootfs$lib"
done
echo 'meshbench:x:65532:65532:meshbench:/tmp:/meshbench' > "$CTX/rootfs/etc/passwd"
echo 'meshbench:x:65532:' > "$CTX/rootfs/etc/group"
cp deploy/Containerfile "$CTX/Containerfile"
podman --runtime runc build -q -t "$TAG" -f "$CTX/Containerfile" "$CTX" >/dev/null
if [ -n "${OCI_ARCHIVE:-}" ]; then
  rm -f "$OCI_ARCHIVE"
  podman save -q --format oci-archive -o "$OCI_ARCHIVE" "$TAG"
  [ "${RMI:-0}" = 1 ] && podman rmi -f "$TAG" >/dev/null
fi
echo "$TAG"
