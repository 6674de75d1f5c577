#!/usr/bin/env bash
# Starts a local three-node chainstore cluster on loopback, initializes it, and runs a short
# demo: appends (one through a follower), a not_head rejection, guarded reads, a populate, and
# the cluster status. The cluster keeps running until Ctrl-C; pass --exit to stop after the demo.
#
# The demo cluster is deliberately insecure (plaintext, no client credentials: anyone who can
# reach 127.0.0.1 may do anything) and says so with the flags it starts the nodes with. See the
# README's "Security" section and deploy/ for a cluster with TLS, mutual TLS and roles.
#
# Environment: CHAINSTORE_DEMO_PORT (first port, default 7101), CHAINSTORE_DEMO_DIR (data
# directory, default a fresh temporary one), CHAINSTORE_NODE_BIN (a chainstore-node binary to run
# instead of building one, for example target/release/chainstore-node).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
ensure_command curl curl

exit_after_demo=false
[ "${1:-}" = "--exit" ] && exit_after_demo=true

bin=${CHAINSTORE_NODE_BIN:-}
if [ -z "$bin" ]; then
  echo "building chainstore-node..."
  # The same build as the tests (same features), so the two share one compiled RocksDB.
  cargo build -q --workspace --tests
  bin=target/debug/chainstore-node
fi
port=${CHAINSTORE_DEMO_PORT:-7101}
data=${CHAINSTORE_DEMO_DIR:-$(mktemp -d -t chainstore-demo.XXXXXX)}
pids=()

stop_cluster() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_cluster EXIT

addr() { echo "127.0.0.1:$((port + $1 - 1))"; }

# A fresh secret for the peers of this run, in a file only this user can read.
mkdir -p "$data"
(umask 077 && od -An -N24 -tx1 /dev/urandom | tr -d ' \n' >"$data/cluster-secret")
for id in 1 2 3; do
  "$bin" --id "$id" --listen "$(addr "$id")" --data-dir "$data/node-$id" \
    --insecure-no-tls --insecure-no-client-auth --cluster-secret-file "$data/cluster-secret" \
    >"$data/node-$id.log" 2>&1 &
  pids+=($!)
done
for id in 1 2 3; do
  for _ in $(seq 100); do
    curl -sf "http://$(addr "$id")/healthz" >/dev/null && break
    sleep 0.1
  done
done

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
call() { # METHOD NODE PATH [BODY]
  local method=$1 node=$2 path=$3 body=${4:-}
  say "$method node $node $path ${body}"
  if [ -n "$body" ]; then
    curl -s -w '  [HTTP %{http_code}]\n' -X "$method" -H 'content-type: application/json' \
      --data "$body" "http://$(addr "$node")$path"
  else
    curl -s -w '  [HTTP %{http_code}]\n' -X "$method" "http://$(addr "$node")$path"
  fi
}

call POST 1 /v1/cluster/init "{\"nodes\": {\"1\": \"$(addr 1)\", \"2\": \"$(addr 2)\", \"3\": \"$(addr 3)\"}}"
for _ in $(seq 100); do
  curl -sf "http://$(addr 1)/readyz" >/dev/null && curl -sf "http://$(addr 2)/readyz" >/dev/null && break
  sleep 0.1
done

call POST 1 /v1/executions/order-42/events '{"event_id": "created", "prev_event_id": null, "payload": {"type": "order.created"}}'
call POST 2 /v1/executions/order-42/events '{"event_id": "paid", "prev_event_id": "created", "payload": {"type": "order.paid", "amount": 30}}'
call POST 1 /v1/executions/order-42/events '{"event_id": "shipped", "prev_event_id": "created", "payload": {"type": "order.shipped"}}'
call GET 3 /v1/executions/order-42/chain
call GET 1 /v1/executions/order-42/state
call POST 1 /v1/executions/order-43/populate '{"events": [
  {"event_id": "b", "prev_event_id": "a", "payload": {"n": 2}},
  {"event_id": "a", "prev_event_id": null, "payload": {"n": 1}},
  {"event_id": "c", "prev_event_id": "b", "payload": {"n": 3}}]}'
call GET 2 /v1/executions/order-43/chain
call GET 2 /v1/executions/never-seen/chain
for id in 1 2 3; do call GET "$id" /v1/cluster; done

echo
echo "data in $data; node logs in $data/node-*.log"
if $exit_after_demo; then
  exit 0
fi
echo "the cluster keeps running on $(addr 1), $(addr 2), $(addr 3); Ctrl-C stops it"
wait
