#!/usr/bin/env bash
# Builds the PostgreSQL image of the compose file's `populator` profile, with no registry: Debian's
# PostgreSQL server programs (installed here when missing), the shared libraries `ldd` names, a
# POSIX shell for the entrypoint, and a passwd entry for the non-root `postgres` user, on an empty
# base.
#
# Environment: CHAINSTORE_POSTGRES_IMAGE (tag, default chainstore-postgres:latest).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/prereqs.sh
ensure_postgres_server
tag=${CHAINSTORE_POSTGRES_IMAGE:-chainstore-postgres:latest}

bindir=$(compgen -G '/usr/lib/postgresql/*/bin/initdb' | sort -V | tail -1 | xargs dirname)
version=$(basename "$(dirname "$bindir")")
stage=$(mktemp -d -t chainstore-pg-image.XXXXXX)
trap 'rm -rf "$stage"' EXIT
root=$stage/rootfs
mkdir -p "$root/etc" "$root/tmp" "$root/bin" "$root/usr/local/bin" "$root/usr/lib/postgresql" \
  "$root/usr/share/postgresql" "$root/usr/share/zoneinfo/Etc" "$stage/data"
chmod 1777 "$root/tmp"
cp -a "/usr/lib/postgresql/$version" "$root/usr/lib/postgresql/"
cp -a "/usr/share/postgresql/$version" "$root/usr/share/postgresql/"
# No JIT (it brings LLVM, most of the size): the server runs without it when the module is absent.
rm -rf "$root/usr/lib/postgresql/$version/lib/bitcode" "$root/usr/lib/postgresql/$version"/lib/llvmjit*
cp -L /usr/share/zoneinfo/UTC "$root/usr/share/zoneinfo/UTC"
cp -L /usr/share/zoneinfo/UTC "$root/usr/share/zoneinfo/Etc/UTC"
cp -L "$(command -v dash)" "$root/bin/sh"
for tool in psql pg_isready; do
  ln -s "/usr/lib/postgresql/$version/bin/$tool" "$root/usr/local/bin/$tool"
done
sed "s|@BINDIR@|/usr/lib/postgresql/$version/bin|" deploy/docker/postgres-entrypoint.sh \
  >"$root/usr/local/bin/entrypoint"
chmod 0755 "$root/usr/local/bin/entrypoint"
# Every library the programs and the server's modules load, at the path the loader looks for it.
{
  ldd "$root/bin/sh"
  find "$root/usr/lib/postgresql/$version" -type f \( -perm -u+x -o -name '*.so' \) \
    -exec ldd {} \; 2>/dev/null
} | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u |
  while read -r lib; do
    [ -e "$root$lib" ] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
echo 'postgres:x:999:999:PostgreSQL:/var/lib/postgresql:/nonexistent' >"$root/etc/passwd"
echo 'postgres:x:999:' >"$root/etc/group"
cat >"$stage/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
COPY --chown=999:999 data/ /var/lib/postgresql/data/
COPY --chown=999:999 data/ /var/run/postgresql/
USER 999:999
ENV PGDATA=/var/lib/postgresql/data TZ=UTC LANG=C
EXPOSE 5432
VOLUME ["/var/lib/postgresql/data"]
HEALTHCHECK --interval=2s --timeout=3s --start-period=20s --retries=5 \
    CMD ["/usr/local/bin/pg_isready", "-h", "/var/run/postgresql", "-U", "postgres"]
ENTRYPOINT ["/bin/sh", "/usr/local/bin/entrypoint"]
DOCKERFILE
docker build -q -t "$tag" "$stage" >/dev/null
echo "built $tag (PostgreSQL $version, $(docker image inspect -f '{{.Size}}' "$tag" | awk '{ printf "%.1f MB", $1 / 1e6 }'))"
