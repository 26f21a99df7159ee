#!/usr/bin/env bash
# Builds the agent image from deploy/Containerfile with podman: the release binary, every shared
# library `ldd` lists (and the loader), /etc/passwd and /etc/group with the non-root user 65532.
# Podman here runs with runc (crun refuses this machine's cgroup layout) and a containers.conf
# with `default_ulimits = []`; the script installs podman if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${TAG:-localhost/meshbench:$(grep -m1 '^version' Cargo.toml | cut -d'"' -f2)}
command -v podman >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc >/dev/null
cargo build --release --locked -q
CTX=$(mktemp -d /tmp/meshbench-image.XXXXXX)
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/rootfs/etc" "$CTX/rootfs/tmp"
chmod 1777 "$CTX/rootfs/tmp"
cp target/release/meshbench "$CTX/rootfs/meshbench"
for lib in $(ldd target/release/meshbench | grep -o '/[^ ]*'); do
  mkdir -p "$CTX/rootfs$(dirname "$lib")"
  cp -L "$lib" "$CTX/rootfs$lib"
done
echo 'meshbench:x:65532:65532:meshbench:/tmp:/meshbench' > "$CTX/rootfs/etc/passwd"
echo 'meshbench:x:65532:' > "$CTX/rootfs/etc/group"
cp deploy/Containerfile "$CTX/Containerfile"
podman --runtime runc build -q -t "$TAG" -f "$CTX/Containerfile" "$CTX"
echo "$TAG"
