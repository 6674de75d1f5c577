#!/usr/bin/env bash
# Scale-out where CPU, not fsync, is the limit: the same sharded cluster made of 3 nodes and of
# 6, every node a container capped at the same CPU share, under the same write load, in one run.
#
# For each size it generates a compose file (TLS and mutual TLS as deploy/compose, certificates
# from deploy/tls/gen-certs.sh), brings the nodes up with `--bootstrap-shards`, waits until every
# shard is led by its preferred node, runs `chainctl bench` against all of them (on the host,
# outside the caps), reads every acknowledged append back (deploy/compose/check.py), and takes
# the cluster down. It prints one table and the 6-node/3-node ratio of appends/s; the target is
# 1.6× (exit 1 below it, so a regression shows).
#
# usage: scripts/scale.sh [--shards S] [--cpus C] [--concurrency W] [--duration SECS]
#   defaults: 12 shards, 0.25 CPU per node, 64 writers, 30 s per size
#
# Environment: CHAINSTORE_SKIP_IMAGE_BUILD=1 (use an image already built), CHAINSTORE_IMAGE
# (default chainstore:scale), CHAINSTORE_IMAGE_PROFILE (release, the default, or debug),
# CHAINSTORE_SCALE_PORT (first of six host ports, default 17401), CHAINSTORE_SCALE_SIZES
# (default "3 6").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_command python3 python3
ensure_command openssl openssl
ensure_command curl curl

shards=12 cpus=0.25 concurrency=64 duration=30
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --cpus) cpus=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    *) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
done
read -r -a sizes <<<"${CHAINSTORE_SCALE_SIZES:-3 6}"
largest=0
for n in "${sizes[@]}"; do [ "$n" -gt "$largest" ] && largest=$n; done

compose() {
  if docker compose version >/dev/null 2>&1; then docker compose "$@"; else docker-compose "$@"; fi
}

export CHAINSTORE_IMAGE=${CHAINSTORE_IMAGE:-chainstore:scale}
profile=${CHAINSTORE_IMAGE_PROFILE:-release}
[ "${CHAINSTORE_SKIP_IMAGE_BUILD:-}" = 1 ] || CHAINSTORE_IMAGE_PROFILE=$profile deploy/docker/build.sh
ctl_bin=target/$profile/chainctl
base=${CHAINSTORE_SCALE_PORT:-17401}

work=$(mktemp -d -t chainstore-scale.XXXXXX)
chmod 755 "$work"
hosts=()
for id in $(seq "$largest"); do hosts+=("n$id"); done
deploy/tls/gen-certs.sh "$work/tls" "${hosts[@]}" >/dev/null
ca=$work/tls/ca.crt
token() { grep "^$1:" "$work/tls/tokens" | cut -d: -f2; }
read_token=$(token read)
write_token=$(token write)
if [ "$(id -u)" = 0 ]; then chown -R 10001:10001 "$work/tls"; else chmod 0644 "$work"/tls/*.key "$work/tls/tokens"; fi
project=
cleanup() {
  local status=$?
  if [ -n "$project" ]; then
    [ "$status" -ne 0 ] && compose -p "$project" -f "$work/compose-$project.yml" logs --tail=20 >&2 2>/dev/null
    compose -p "$project" -f "$work/compose-$project.yml" down -v --remove-orphans >/dev/null 2>&1 || true
  fi
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT

# compose_file N: a cluster of N nodes, each capped at $cpus.
compose_file() {
  local n=$1 voters="" id
  for id in $(seq "$n"); do voters+="${voters:+,}$id=n$id:7001"; done
  cat <<EOF
x-node: &node
  image: $CHAINSTORE_IMAGE
  networks: [chainstore]
  read_only: true
  cap_drop: [ALL]
  security_opt: ["no-new-privileges:true"]
  cpus: $cpus
  healthcheck:
    test: ["CMD", "/usr/local/bin/chainstore-node", "probe"]
    interval: 2s
    timeout: 3s
    start_period: 10s
    retries: 3
x-env: &env
  CHAINSTORE_BOOTSTRAP_VOTERS: "$voters"
  CHAINSTORE_BOOTSTRAP_SHARDS: "$shards"
  CHAINSTORE_TLS_CLIENT_CA: /tls/ca.crt
  CHAINSTORE_CLIENT_TOKENS_FILE: /tls/tokens
networks:
  chainstore: {}
volumes:
EOF
  for id in $(seq "$n"); do echo "  n$id-data: {}"; done
  echo "services:"
  for id in $(seq "$n"); do
    cat <<EOF
  n$id:
    <<: *node
    hostname: n$id
    environment:
      <<: *env
      CHAINSTORE_ID: "$id"
      CHAINSTORE_ADVERTISE: n$id:7001
      CHAINSTORE_TLS_CERT: /tls/node-$id.crt
      CHAINSTORE_TLS_KEY: /tls/node-$id.key
    volumes: ["n$id-data:/data", "$work/tls:/tls:ro"]
    ports: ["127.0.0.1:$((base + id - 1)):7001"]
EOF
  done
}

urls() {
  local n=$1 out="" id
  for id in $(seq "$n"); do out+="${out:+,}https://127.0.0.1:$((base + id - 1))"; done
  echo "$out"
}
get() { curl -sf --max-time 5 --cacert "$ca" -H "authorization: Bearer $read_token" "$1"; }

# settled N: whether every shard is led by its preferred leader, as node 1 sees it, and every
# node is healthy.
settled() {
  local n=$1 id
  for id in $(seq "$n"); do
    [ "$(docker inspect -f '{{.State.Health.Status}}' "$(compose -p "$project" -f "$work/compose-$project.yml" ps -q "n$id")" 2>/dev/null)" = healthy ] || return 1
  done
  # A node lists only the groups it runs: ask every node and merge.
  for id in $(seq "$n"); do get "https://127.0.0.1:$((base + id - 1))/v1/cluster" || return 1; echo; done |
    python3 -c '
import json, sys
shards = int(sys.argv[1])
led = {}
for line in sys.stdin:
    if line.strip():
        for g in json.loads(line).get("groups") or []:
            if g["leader_id"] is not None and g["leader_id"] == g["preferred_leader"]:
                led[g["shard"]] = g["leader_id"]
sys.exit(0 if len(led) == shards else 1)' "$shards"
}

# leaders N: how many shards each node leads, "n1=4 n2=4 ...".
leaders() {
  local n=$1 id
  for id in $(seq "$n"); do get "https://127.0.0.1:$((base + id - 1))/v1/cluster"; echo; done |
    python3 -c '
import json, sys
led = {}
for line in sys.stdin:
    if line.strip():
        c = json.loads(line)
        led[c["node_id"]] = sum(1 for g in c.get("groups") or [] if g["leader_id"] == c["node_id"])
print(" ".join(f"n{k}={v}" for k, v in sorted(led.items())))'
}

rows=()
declare -A rate
for n in "${sizes[@]}"; do
  project=chainstore-scale-$n-$$
  compose_file "$n" >"$work/compose-$project.yml"
  echo "== $n nodes, $cpus CPU each, $shards shards: up"
  compose -p "$project" -f "$work/compose-$project.yml" up -d >/dev/null 2>&1
  for _ in $(seq 180); do settled "$n" && break; sleep 1; done
  settled "$n" || { echo "the $n-node cluster never settled (every shard led by its preferred node)" >&2; exit 1; }
  led=$(leaders "$n")
  echo "   shards led: $led"
  echo "== $n nodes: chainctl bench, $concurrency writers, ${duration}s"
  CHAINCTL_TOKEN=$write_token "$ctl_bin" --ca-file "$ca" --nodes "$(urls "$n")" --json --attempts 60 \
    --timeout-ms 5000 bench --concurrency "$concurrency" --duration "$duration" \
    --record "$work/acked-$n.jsonl" --prefix "scale-$n" --genesis >"$work/bench-$n.json"
  mapfile -t nodes < <(tr ',' '\n' <<<"$(urls "$n")")
  # Read back once the followers have applied the last entries (the load has ended).
  for attempt in 1 2 3 4 5; do
    if checked=$(python3 deploy/compose/check.py --ca "$ca" --token "$read_token" "$work/acked-$n.jsonl" "${nodes[@]}"); then
      break
    fi
    [ "$attempt" = 5 ] && { echo "$checked" >&2; exit 1; }
    sleep 2
  done
  echo "   $checked"
  rate[$n]=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["appends_per_second"]))' "$work/bench-$n.json")
  rows+=("$(python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))
n, cpus = int(sys.argv[2]), float(sys.argv[3])
cells = (n, cpus, n * cpus, b["appends"], b["appends_per_second"], b["p50_ms"], b["p99_ms"], b["errors"], sys.argv[4])
print("{:>5}  {:>8.2f}  {:>9.2f}  {:>8}  {:>9.0f}  {:>7.1f}  {:>7.1f}  {:>6}  {}".format(*cells))' \
    "$work/bench-$n.json" "$n" "$cpus" "$led")")
  compose -p "$project" -f "$work/compose-$project.yml" down -v --remove-orphans >/dev/null 2>&1
  project=
done

echo
echo "scale-out: $shards shards, $concurrency writers, ${duration}s per size, every container capped at $cpus CPU"
echo "NODES  CPU/NODE  CPU TOTAL   APPENDS  APPENDS/S   P50 MS   P99 MS  ERRORS  SHARDS LED"
printf '%s\n' "${rows[@]}"
if [ "${#sizes[@]}" -ge 2 ]; then
  small=${sizes[0]} big=${sizes[-1]}
  python3 -c '
import sys
small, big, a, b = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
ratio = b / a if a else 0.0
verdict = "PASS" if ratio >= 1.6 else "BELOW TARGET"
print("{} nodes / {} nodes: {:.2f}x appends/s (target 1.6x): {}".format(big, small, ratio, verdict))
sys.exit(0 if ratio >= 1.6 else 1)' "$small" "$big" "${rate[$small]}" "${rate[$big]}"
fi
