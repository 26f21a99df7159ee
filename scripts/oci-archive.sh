#!/usr/bin/env bash
# Packages a root filesystem directory as a one-layer OCI image archive (an image layout in a
# tar) that `ctr images import` loads, so a node can run the image without a registry:
#
#   scripts/oci-archive.sh ROOTFS NAME OUT.tar [--entrypoint PATH] [--user UID:GID] [--env K=V]...
#
# NAME is the full reference the runtime will know it by (e.g. localhost/meshbench:test); it is
# written as the `io.containerd.image.name` annotation. The layer is made reproducibly (sorted
# names, owner 0, fixed times), so the same ROOTFS gives the same digests.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
ROOTFS=$1 NAME=$2 OUT=$3
shift 3
ENTRYPOINT="" USER_="" ENV_=""
while [ $# -gt 0 ]; do
  case $1 in
    --entrypoint) ENTRYPOINT=$2; shift 2 ;;
    --user) USER_=$2; shift 2 ;;
    --env) ENV_+="${ENV_:+,}\"$2\""; shift 2 ;;
    *) echo "oci-archive: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -d "$ROOTFS" ] || { echo "oci-archive: $ROOTFS is not a directory" >&2; exit 2; }
WORK=$(mktemp -d /tmp/meshbench-oci.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/blobs/sha256"
blob() { # FILE MEDIA-TYPE -> a descriptor; the file moved into blobs/
  local digest size
  digest=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  mv "$1" "$WORK/blobs/sha256/$digest"
  printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$2" "$digest" "$size"
}
# Not ROOTFS itself: a temporary directory's 0700 would become the image's `/`.
(cd "$ROOTFS" && find . -mindepth 1 | LC_ALL=C sort) \
  | tar --no-recursion --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$ROOTFS" -cf "$WORK/layer.tar" -T -
diff_id=$(sha256sum "$WORK/layer.tar" | cut -d' ' -f1)
layer=$(blob "$WORK/layer.tar" application/vnd.oci.image.layer.v1.tar)
cfg='{"architecture":"amd64","os":"linux","config":{'
cfg+="\"Entrypoint\":[${ENTRYPOINT:+\"$ENTRYPOINT\"}]"
[ -n "$USER_" ] && cfg+=",\"User\":\"$USER_\""
[ -n "$ENV_" ] && cfg+=",\"Env\":[$ENV_]"
cfg+="},\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:$diff_id\"]}}"
printf '%s' "$cfg" > "$WORK/config.json"
config=$(blob "$WORK/config.json" application/vnd.oci.image.config.v1+json)
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}' \
  "$config" "$layer" > "$WORK/manifest.json"
manifest=$(blob "$WORK/manifest.json" application/vnd.oci.image.manifest.v1+json)
printf '{"schemaVersion":2,"manifests":[%s]}' \
  "${manifest%\}},\"annotations\":{\"io.containerd.image.name\":\"$NAME\",\"org.opencontainers.image.ref.name\":\"${NAME##*:}\"}}" \
  > "$WORK/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$WORK/oci-layout"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$WORK" -cf "$OUT.partial" oci-layout index.json blobs
mv "$OUT.partial" "$OUT"
