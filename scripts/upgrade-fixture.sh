#!/usr/bin/env bash
# Writes the upgrade fixture: the data directories of a three-node cluster run by an EARLIER
# release of chainstore-node, for `node/tests/upgrade.rs` to open with this build.
#
#   scripts/upgrade-fixture.sh PATH/TO/OLD/chainstore-node [OUT]
#
# The cluster (loopback ports 17941-17943, which the test reuses: the members' addresses are
# stored in the data) takes genesis appends on two executions, a populate and a replicated
# delivery, with snapshots every 20 entries and a log purged behind them. The chains, the states
# and each node's applied index are written to `expected.json`; the nodes are then stopped,
# followers first (so no entry commits after the figures were read), and their directories
# packed into `data.tar.gz` (RocksDB's informational LOG files left out).
set -euo pipefail
old_bin=${1:?usage: $0 OLD_CHAINSTORE_NODE [OUT]}
out=${2:-node/tests/fixtures/upgrade-0.9}
work=$(mktemp -d -t chainstore-fixture.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

addr() { echo "127.0.0.1:$((17940 + $1))"; }
printf 'upgrade-fixture-cluster-secret' >"$work/secret"
for id in 1 2 3; do
  "$old_bin" --id "$id" --listen "$(addr "$id")" --data-dir "$work/node-$id" \
    --insecure-no-tls --insecure-no-client-auth --cluster-secret-file "$work/secret" \
    --snapshot-after-entries 20 --log-entries-kept 5 --purge-batch-entries 1 \
    >"$work/node-$id.log" 2>&1 &
  pids+=($!)
done
for id in 1 2 3; do
  for _ in $(seq 100); do curl -sf "http://$(addr "$id")/healthz" >/dev/null && break; sleep 0.1; done
done
post() { # NODE PATH BODY
  curl -sf -X POST -H 'content-type: application/json' --data "$3" "http://$(addr "$1")$2" >/dev/null
}
post 1 /v1/cluster/init "{\"nodes\": {\"1\": \"$(addr 1)\", \"2\": \"$(addr 2)\", \"3\": \"$(addr 3)\"}}"
for _ in $(seq 100); do curl -sf "http://$(addr 1)/readyz" >/dev/null && break; sleep 0.1; done
sleep 1

# Two chains by genesis appends, one event per entry (through every node: followers forward).
for exec in order-1 order-2; do
  link='"genesis": true'
  for n in $(seq 1 24); do
    node=$(( n % 3 + 1 ))
    post "$node" "/v1/executions/$exec/events" \
      "{\"event_id\": \"$exec-e$n\", $link, \"payload\": {\"n\": $n, \"exec\": \"$exec\"}}"
    link="\"prev_event_id\": \"$exec-e$n\""
  done
done
# A chain from the authoritative log (coverage from the log, a watermark).
post 2 /v1/executions/imported/populate '{"events": [
  {"event_id": "b", "prev_event_id": "a", "payload": {"n": 2}},
  {"event_id": "a", "prev_event_id": null, "payload": {"n": 1}},
  {"event_id": "c", "prev_event_id": "b", "payload": {"n": 3}}]}'
# Replicated events, out of order (stored, never served as authoritative).
post 3 /v1/executions/mirror/replicated '{"events": [
  {"execution_id": "mirror", "exec_seq": 2, "event_id": "m2", "prev_event_id": "m1", "payload": {}},
  {"execution_id": "mirror", "exec_seq": 1, "event_id": "m1", "prev_event_id": null, "payload": {}}]}'
sleep 2

python3 - "$work" <<'EOF'
import json, sys, urllib.request
work = sys.argv[1]
def get(node, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{17940 + node}{path}") as r:
        return json.load(r)
statuses = {str(n): get(n, "/v1/cluster") for n in (1, 2, 3)}
applied = {n: s["last_applied"] for n, s in statuses.items()}
assert len(set(applied.values())) == 1, f"the nodes have not applied alike: {applied}"
assert all(s["snapshot_index"] > 0 and s["purged_index"] > 0 for s in statuses.values()), statuses
expected = {
    "addresses": {n: s["nodes"][n] for n, s in statuses.items()},
    "leader": statuses["1"]["leader_id"],
    "applied": applied,
    "snapshot_index": {n: s["snapshot_index"] for n, s in statuses.items()},
    "purged_index": {n: s["purged_index"] for n, s in statuses.items()},
    "changes": get(1, "/v1/changes"),
    "executions": {
        e: {
            "chain": get(1, f"/v1/executions/{e}/chain"),
            "raw": get(1, f"/v1/executions/{e}/chain/raw"),
            "state": get(1, f"/v1/executions/{e}/state"),
        }
        for e in ("order-1", "order-2", "imported", "mirror")
    },
}
with open(f"{work}/expected.json", "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
    f.write("\n")
EOF

leader=$(python3 -c "import json; print(json.load(open('$work/expected.json'))['leader'])")
for id in 1 2 3; do
  [ "$id" = "$leader" ] && continue
  kill -TERM "${pids[$((id - 1))]}"; wait "${pids[$((id - 1))]}" || true
done
kill -TERM "${pids[$((leader - 1))]}"; wait "${pids[$((leader - 1))]}" || true
pids=()

mkdir -p "$out"
cp "$work/expected.json" "$out/expected.json"
tar -C "$work" --exclude='LOG*' --exclude='snapshots' -czf "$out/data.tar.gz" node-1 node-2 node-3
echo "fixture written to $out ($(du -sh "$out/data.tar.gz" | cut -f1))"
