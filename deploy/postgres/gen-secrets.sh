#!/usr/bin/env bash
# The secrets of the compose file's `populator` profile, written to DIR (kept when they exist):
#   postgres.password   the PostgreSQL superuser's password (read by the postgres container, uid 999)
#   populator.password  the password of the read-only role `populator` (same)
#   populator.dsn       the populator's connection string (read by the populator, uid 10001)
set -euo pipefail
out=${1:?usage: gen-secrets.sh DIR}
command -v openssl >/dev/null || { echo "gen-secrets.sh needs openssl" >&2; exit 1; }
mkdir -p "$out"
chmod 0755 "$out"
for name in postgres populator; do
  [ -s "$out/$name.password" ] || openssl rand -hex 24 >"$out/$name.password"
done
printf 'host=postgres port=5432 dbname=postgres user=populator password=%s\n' \
  "$(cat "$out/populator.password")" >"$out/populator.dsn"
chmod 0600 "$out"/*.password "$out/populator.dsn"
if [ "$(id -u)" = 0 ]; then
  chown 999:999 "$out"/*.password
  chown 10001:10001 "$out/populator.dsn"
else
  echo "as root, give the passwords to uid 999 and populator.dsn to uid 10001" >&2
fi
echo "wrote the PostgreSQL passwords and the populator's connection string to $out"
