#!/usr/bin/env bash
# Builds the chainstore image from this checkout, with no registry: release binaries built here,
# staged with the shared libraries `ldd` names and a passwd entry for the non-root user.
#
# Environment: CHAINSTORE_IMAGE (tag, default chainstore:latest).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
tag=${CHAINSTORE_IMAGE:-chainstore:latest}

echo "building release binaries..."
cargo build -q --release --workspace --bins
bins=(target/release/chainstore-node target/release/chainctl)

stage=$(mktemp -d -t chainstore-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/rootfs/usr/local/bin" "$stage/rootfs/etc" "$stage/rootfs/tmp" "$stage/data"
chmod 1777 "$stage/rootfs/tmp"
for bin in "${bins[@]}"; do
  install -m 0755 "$bin" "$stage/rootfs/usr/local/bin/"
  strip --strip-debug "$stage/rootfs/usr/local/bin/$(basename "$bin")"
done
# Every library the binaries load, at the path the loader looks for it (the dynamic loader
# itself included).
ldd "${bins[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u |
  while read -r lib; do
    mkdir -p "$stage/rootfs$(dirname "$lib")"
    cp -L "$lib" "$stage/rootfs$lib"
  done
echo 'chainstore:x:10001:10001:chainstore:/data:/nonexistent' >"$stage/rootfs/etc/passwd"
echo 'chainstore:x:10001:' >"$stage/rootfs/etc/group"
cp deploy/docker/Dockerfile "$stage/"
docker build -q -t "$tag" "$stage" >/dev/null
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{ printf "%.1f MB", $1 / 1e6 }'))"
