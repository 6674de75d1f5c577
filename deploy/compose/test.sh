#!/usr/bin/env bash
# The compose cluster under real failures, with TLS on every connection and mutual TLS between
# the nodes (certificates and tokens from deploy/tls/gen-certs.sh). Builds the image, brings up
# the three nodes of docker-compose.yml as a cluster of CHAINSTORE_SHARDS shards (default 4), and
# runs a write load with `chainctl bench` while it
# SIGKILLs the leader's
# container, disconnects a follower from the network and reconnects it, and restarts a node.
# Then it checks that every acknowledged append is present, no chain forked, and the three nodes
# hold the same state in every shard; saves a backup with `chainctl snapshot save` (as an admin
# client certificate: a backup set, one file per shard, when there are several), seeds a second
# cluster from it (restore.yml) and checks the acknowledged appends there too. Everything it started is torn down on exit, failure included.
#
# Environment: CHAINSTORE_TEST_PORT (first of six host ports, default 17301),
# CHAINSTORE_SKIP_IMAGE_BUILD=1 (use an image already built), CHAINSTORE_LOAD_SECS (default 40),
# CHAINSTORE_IMAGE_PROFILE (release, the default, or debug: see deploy/docker/build.sh),
# CHAINSTORE_SHARDS (default 4; 1 tests a single-group cluster and a one-file backup).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/prereqs.sh
ensure_command curl curl
ensure_command python3 python3
ensure_command openssl openssl

compose() {
  if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

export CHAINSTORE_IMAGE=${CHAINSTORE_IMAGE:-chainstore:test}
# Both clusters are made with this many shards (the restored one must match its backup set).
export CHAINSTORE_SHARDS=${CHAINSTORE_SHARDS:-4}
[ "${CHAINSTORE_SKIP_IMAGE_BUILD:-}" = 1 ] || deploy/docker/build.sh
ctl_bin=target/${CHAINSTORE_IMAGE_PROFILE:-release}/chainctl
load_secs=${CHAINSTORE_LOAD_SECS:-40}
base=${CHAINSTORE_TEST_PORT:-17301}
file=deploy/compose/docker-compose.yml
project=chainstore-test-$$
restored=chainstore-restored-$$

work=$(mktemp -d -t chainstore-compose.XXXXXX)
chmod 755 "$work"
deploy/tls/gen-certs.sh "$work/tls" n1 n2 n3 >/dev/null
export CHAINSTORE_TLS_DIR=$work/tls
ca=$work/tls/ca.crt
token() { grep "^$1:" "$work/tls/tokens" | cut -d: -f2; }
read_token=$(token read)
write_token=$(token write)
# The nodes run as uid 10001 and must read their keys; this script (root, or the files' owner)
# still can.
if [ "$(id -u)" = 0 ]; then chown -R 10001:10001 "$work/tls"; else chmod 0644 "$work"/tls/*.key "$work/tls/tokens"; fi
bench_pid=

cleanup() {
  local status=$?
  [ -n "$bench_pid" ] && kill "$bench_pid" 2>/dev/null
  if [ "$status" -ne 0 ]; then
    echo "FAILED; the nodes' last log lines:" >&2
    compose -p "$project" -f "$file" --profile populator logs --tail=20 >&2 2>/dev/null || true
  fi
  for p in "$project" "$restored"; do
    compose -p "$p" -f "$file" --profile populator down -v --remove-orphans >/dev/null 2>&1 || true
  done
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# up PROJECT FIRST_PORT [extra compose args...]: starts a cluster and waits until all three are
# healthy.
up() {
  local p=$1 port=$2
  shift 2
  CHAINSTORE_PORT_1=$port CHAINSTORE_PORT_2=$((port + 1)) CHAINSTORE_PORT_3=$((port + 2)) \
    compose -p "$p" -f "$file" "$@" up -d >/dev/null 2>&1
  for _ in $(seq 120); do
    local healthy=0
    for n in n1 n2 n3; do
      [ "$(docker inspect -f '{{.State.Health.Status}}' "$(container "$p" "$n")" 2>/dev/null)" = healthy ] &&
        healthy=$((healthy + 1))
    done
    [ "$healthy" = 3 ] && return 0
    sleep 1
  done
  echo "the cluster $p did not become healthy" >&2
  return 1
}
container() { compose -p "$1" -f "$file" ps -q "$2"; }
urls() { echo "https://127.0.0.1:$1,https://127.0.0.1:$(($1 + 1)),https://127.0.0.1:$(($1 + 2))"; }
node_url() { echo "https://127.0.0.1:$((base + $1 - 1))"; }
get() { curl -sf --max-time "${2:-2}" --cacert "$ca" -H "authorization: Bearer $read_token" "$1"; }
ctl() { "$ctl_bin" --ca-file "$ca" "$@"; }
leader_of() { # the leader id as some node reports it, or empty
  for id in 1 2 3; do
    local l
    l=$(get "$(node_url "$id")/v1/cluster" |
      python3 -c 'import json,sys; l=json.load(sys.stdin)["leader_id"]; print(l if l else "")' 2>/dev/null) || continue
    [ -n "$l" ] && { echo "$l"; return; }
  done
}
now_ms() { date +%s%3N; }

echo "== compose cluster up ($project)"
up "$project" "$base"
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$(container "$project" n1)")

echo "== write load: chainctl bench, 8 writers, ${load_secs}s"
CHAINCTL_TOKEN=$write_token ctl --nodes "$(urls "$base")" --attempts 60 --timeout-ms 3000 bench \
  --concurrency 8 --duration "$load_secs" --record "$work/acked.jsonl" --prefix compose --genesis \
  >"$work/bench.txt" 2>"$work/bench.err" &
bench_pid=$!
sleep 5

leader=$(leader_of)
[ -n "$leader" ] || { echo "no leader before the kill" >&2; exit 1; }
echo "== SIGKILL the leader's container (n$leader)"
killed_at=$(now_ms)
docker kill -s KILL "$(container "$project" "n$leader")" >/dev/null
failover_ms=
while [ $(($(now_ms) - killed_at)) -lt 30000 ]; do
  for id in 1 2 3; do
    [ "$id" = "$leader" ] && continue
    new=$(curl -sf --max-time 1 --cacert "$ca" "$(node_url "$id")/readyz" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["leader_id"] or "")' 2>/dev/null) || continue
    if [ -n "$new" ] && [ "$new" != "$leader" ]; then
      failover_ms=$(($(now_ms) - killed_at))
      break 2
    fi
  done
  sleep 0.05
done
[ -n "$failover_ms" ] || { echo "no new leader within 30 s of the kill" >&2; exit 1; }
echo "   new leader n$new after ${failover_ms} ms"
sleep 3
docker start "$(container "$project" "n$leader")" >/dev/null

sleep 5
follower=$(for id in 1 2 3; do [ "$id" != "$(leader_of)" ] && { echo "$id"; break; }; done)
echo "== partition: disconnect n$follower from the network for 8 s"
docker network disconnect "$network" "$(container "$project" "n$follower")"
sleep 8
docker network connect --alias "n$follower" "$network" "$(container "$project" "n$follower")"

sleep 5
victim=$(( (follower % 3) + 1 ))
echo "== restart n$victim"
docker restart -t 10 "$(container "$project" "n$victim")" >/dev/null

echo "== waiting for the load to end"
wait "$bench_pid" || { cat "$work/bench.err" >&2; bench_pid=; exit 1; }
bench_pid=
cat "$work/bench.txt"

# Healed: all three healthy and at the same applied index in every shard (no write is in flight
# any more).
up "$project" "$base"
applied_indexes='import json,sys; c=json.load(sys.stdin); print([g["last_applied"] for g in c.get("groups") or []] or c["last_applied"])'
for _ in $(seq 60); do
  applied=$(for id in 1 2 3; do get "$(node_url "$id")/v1/cluster" 10 |
    python3 -c "$applied_indexes"; done | sort -u | wc -l)
  [ "$applied" = 1 ] && break
  sleep 1
done
echo "== checks"
check() { python3 deploy/compose/check.py --ca "$ca" --token "$read_token" "$work/acked.jsonl" "$@"; }
check "$(node_url 1)" "$(node_url 2)" "$(node_url 3)"
echo "   failover after the leader kill: ${failover_ms} ms"

echo "== backup: chainctl snapshot save ($CHAINSTORE_SHARDS shards), then a new cluster restored from it"
ctl --cert "$work/tls/client-admin.crt" --key "$work/tls/client-admin.key" \
  --nodes "$(urls "$base")" snapshot save "$work/backup"
chmod -R a+rX "$work/backup"
restored_base=$((base + 3))
CHAINSTORE_BACKUP_DIR=$work CHAINSTORE_BACKUP_FILE=backup \
  up "$restored" "$restored_base" -f deploy/compose/restore.yml
shards_restored=$(get "https://127.0.0.1:$restored_base/v1/cluster" 10 |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["shards"])')
[ "$shards_restored" = "$CHAINSTORE_SHARDS" ] ||
  { echo "the restored cluster has $shards_restored shards, not $CHAINSTORE_SHARDS" >&2; exit 1; }
check "https://127.0.0.1:$restored_base" "https://127.0.0.1:$((restored_base + 1))" \
  "https://127.0.0.1:$((restored_base + 2))"
CHAINCTL_TOKEN=$write_token ctl --nodes "$(urls "$restored_base")" append after-restore first --genesis >/dev/null
echo "   the restored cluster accepts new appends"
echo "== security: plaintext, no credential, a read token writing, a certificate of another CA"
url=$(node_url 1)
if curl -s --max-time 2 "http://127.0.0.1:$base/healthz" | grep -q ok; then
  echo "a node answered plaintext HTTP" >&2; exit 1
fi
status=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" "$url/v1/cluster")
[ "$status" = 401 ] || { echo "no credential: HTTP $status, not 401" >&2; exit 1; }
status=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$ca" -H "authorization: Bearer $read_token" \
  -H 'content-type: application/json' -d '{"event_id": "x", "prev_event_id": null, "payload": {}}' \
  "$url/v1/executions/sec/events")
[ "$status" = 403 ] || { echo "a read token writing: HTTP $status, not 403" >&2; exit 1; }
deploy/tls/gen-certs.sh "$work/other" n1 n2 >/dev/null
if curl -s --max-time 2 --cacert "$ca" --cert "$work/other/node-2.crt" --key "$work/other/node-2.key" \
  -H 'content-type: application/json' -d '{}' "$url/raft/vote" >/dev/null; then
  echo "a certificate of another CA reached /raft/vote" >&2; exit 1
fi
echo "   plaintext refused, 401 without a credential, 403 for a read token's write, other CA refused"

echo "== populator profile: a PostgreSQL event log followed into the cluster"
export CHAINSTORE_POSTGRES_IMAGE=${CHAINSTORE_POSTGRES_IMAGE:-chainstore-postgres:test}
[ "${CHAINSTORE_SKIP_IMAGE_BUILD:-}" = 1 ] || deploy/docker/build-postgres.sh
deploy/postgres/gen-secrets.sh "$work/pg" >/dev/null 2>&1
if [ "$(id -u)" != 0 ]; then chmod 0644 "$work"/pg/*; fi
populator_port=$((base + 7))
CHAINSTORE_PG_SECRETS_DIR=$work/pg CHAINSTORE_POSTGRES_PORT=$((base + 6)) \
  CHAINSTORE_POPULATOR_PORT=$populator_port \
  compose -p "$project" -f "$file" --profile populator up -d postgres populator >/dev/null 2>&1
populator_url=http://127.0.0.1:$populator_port
for _ in $(seq 90); do
  curl -sf --max-time 1 "$populator_url/healthz" >/dev/null && break
  sleep 1
done
curl -sf --max-time 2 "$populator_url/healthz" >/dev/null ||
  { echo "the populator never became healthy" >&2; exit 1; }
docker exec "$(container "$project" postgres)" /usr/local/bin/psql -q -v ON_ERROR_STOP=1 \
  -h /var/run/postgresql -U postgres -c "INSERT INTO events (execution_id, event_id,
  prev_event_id, payload) VALUES ('pg-order-1', 'created', NULL, '{\"step\": 1}'),
  ('pg-order-1', 'paid', 'created', '{\"step\": 2}')"
populated=
for _ in $(seq 60); do
  if CHAINCTL_TOKEN=$read_token ctl --nodes "$(urls "$base")" --json chain pg-order-1 2>/dev/null |
    python3 -c 'import json,sys; a=json.load(sys.stdin); sys.exit(0 if [e["event_id"] for e in a["events"]] == ["created", "paid"] else 1)' 2>/dev/null; then
    populated=1
    break
  fi
  sleep 1
done
[ -n "$populated" ] || { echo "the table's rows never became an authoritative chain" >&2; exit 1; }
curl -sf --max-time 2 "$populator_url/metrics" |
  grep -q '^chainstore_populator_executions_populated_total [1-9]' ||
  { echo "the populator's metrics do not count the populate" >&2; exit 1; }
echo "   rows inserted into PostgreSQL became pg-order-1's authoritative chain; populator metrics up"
echo "compose test: ok"
