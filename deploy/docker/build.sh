#!/usr/bin/env bash
# Builds the chainstore image from this checkout, with no registry: release binaries built here,
# staged with the shared libraries `ldd` names and a passwd entry for the non-root user.
#
# Environment: CHAINSTORE_IMAGE (tag, default chainstore:latest); CHAINSTORE_IMAGE_PROFILE
# (release, the default and what to ship; or debug: the binaries of the test build, whose
# dependencies are optimised too, so that CI compiles RocksDB once).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
tag=${CHAINSTORE_IMAGE:-chainstore:latest}

profile=${CHAINSTORE_IMAGE_PROFILE:-release}
case "$profile" in
  release) echo "building release binaries..."; cargo build -q --release --workspace --bins ;;
  # The same build as the tests (same features), so that it reuses their compiled RocksDB.
  debug) echo "building the test build's binaries..."; cargo build -q --workspace --tests ;;
  *) echo "CHAINSTORE_IMAGE_PROFILE must be release or debug" >&2; exit 2 ;;
esac
bins=("target/$profile/chainstore-node" "target/$profile/chainctl" "target/$profile/chainstore-populator")

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
