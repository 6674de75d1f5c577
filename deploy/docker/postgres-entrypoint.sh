#!/bin/sh
# The PostgreSQL image's entrypoint (build-postgres.sh substitutes the server's directory).
# On an empty data directory: initdb with the superuser's password from POSTGRES_PASSWORD_FILE
# (password logins only over the network), then every *.sql in /docker-entrypoint-initdb.d in
# name order, and the read-only role `populator` (password from POPULATOR_PASSWORD_FILE, SELECT on
# the public schema's tables). Then the server, in the foreground.
set -eu
bin=@BINDIR@
sockets=/var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD_FILE:?the superuser password file is required}"
  "$bin/initdb" -D "$PGDATA" -U postgres --pwfile="$POSTGRES_PASSWORD_FILE" --locale=C \
    --encoding=UTF8 --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  "$bin/pg_ctl" -D "$PGDATA" -w -s \
    -o "-c listen_addresses='' -c unix_socket_directories=$sockets" start
  for sql in /docker-entrypoint-initdb.d/*.sql; do
    [ -e "$sql" ] || continue
    "$bin/psql" -q -v ON_ERROR_STOP=1 -h "$sockets" -U postgres -f "$sql"
  done
  if [ -n "${POPULATOR_PASSWORD_FILE:-}" ]; then
    read -r pw <"$POPULATOR_PASSWORD_FILE" || true
    [ -n "$pw" ] || { echo "$POPULATOR_PASSWORD_FILE is empty" >&2; exit 1; }
    "$bin/psql" -q -v ON_ERROR_STOP=1 -h "$sockets" -U postgres -v pw="$pw" <<'SQL'
CREATE ROLE populator LOGIN PASSWORD :'pw';
GRANT SELECT ON ALL TABLES IN SCHEMA public TO populator;
SQL
  fi
  "$bin/pg_ctl" -D "$PGDATA" -w -s stop
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories="$sockets"
