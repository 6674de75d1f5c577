#!/usr/bin/env python3
"""Checks a compose cluster after a load: every acknowledged append is present where it was
acknowledged, no chain forked, and every node holds the same state (every replica of each shard
at the same applied index).

usage: check.py [--ca CA_FILE] [--token TOKEN] ACKED_JSONL NODE_URL...

ACKED_JSONL is `chainctl bench --record`'s file; CA_FILE the CA that https:// nodes' certificates
chain to; TOKEN a bearer token with the read role. Prints one summary line; exits 1 on a
violation.
"""

import argparse
import json
import ssl
import sys
import urllib.request

CONTEXT = None
TOKEN = None


def get(url):
    request = urllib.request.Request(url)
    if TOKEN:
        request.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(request, timeout=10, context=CONTEXT) as response:
        return json.load(response)


def main():
    global CONTEXT, TOKEN
    parser = argparse.ArgumentParser()
    parser.add_argument("--ca")
    parser.add_argument("--token")
    parser.add_argument("acked")
    parser.add_argument("nodes", nargs="+")
    args = parser.parse_args()
    if args.ca:
        CONTEXT = ssl.create_default_context(cafile=args.ca)
    TOKEN = args.token
    acked_path, nodes = args.acked, args.nodes
    acked = {}
    with open(acked_path) as f:
        for line in f:
            if line.strip():
                a = json.loads(line)
                acked.setdefault(a["execution"], []).append(a)
    violations = []
    found = 0
    views = {}
    for node in nodes:
        views[node] = {}
        for execution in sorted(acked):
            # Each node's own applied state, not a forwarded read.
            answer = get(f"{node}/v1/executions/{execution}/chain?consistency=local")
            views[node][execution] = answer.get("events")
            if answer.get("answer") != "authoritative":
                violations.append(f"{node}: {execution} answers {answer}")
    reference = views[nodes[0]]
    for execution, appends in sorted(acked.items()):
        events = reference.get(execution) or []
        by_id = {e["event_id"]: e for e in events}
        # One linear chain: seqs 1..n, each event's prev the event before it.
        for i, event in enumerate(events):
            prev = events[i - 1]["event_id"] if i > 0 else None
            if event["exec_seq"] != i + 1 or event.get("prev_event_id") != prev:
                violations.append(f"{execution}: chain is not linear at {event['event_id']}")
                break
        for a in appends:
            event = by_id.get(a["event_id"])
            if event is None:
                violations.append(f"{execution}: acknowledged {a['event_id']} is missing")
            elif event["exec_seq"] != a["exec_seq"] or event.get("prev_event_id") != a["prev_event_id"]:
                violations.append(
                    f"{execution}: {a['event_id']} acknowledged at seq {a['exec_seq']}, "
                    f"stored at {event['exec_seq']}")
            else:
                found += 1
    for node in nodes[1:]:
        for execution in sorted(acked):
            if views[node][execution] != reference.get(execution):
                violations.append(f"{node} and {nodes[0]} differ on {execution}")
    # Every replica of a group applied the same index (a node of a sharded cluster lists the
    # groups it runs; one of a single-group cluster lists none and is group 0).
    applied = {}
    for node in nodes:
        status = get(f"{node}/v1/cluster")
        groups = status.get("groups") or [{"shard": 0, "last_applied": status["last_applied"]}]
        for group in groups:
            applied.setdefault(group["shard"], {})[node] = group["last_applied"]
    total = sum(len(v) for v in acked.values())
    summary = {shard: sorted(set(by_node.values())) for shard, by_node in sorted(applied.items())}
    print(f"acked appends: {total}, found: {found}, executions: {len(acked)}, "
          f"applied index per shard: {summary}")
    for shard, by_node in sorted(applied.items()):
        if len(set(by_node.values())) != 1:
            violations.append(f"shard {shard}'s replicas applied different indexes: {by_node}")
    for v in violations[:20]:
        print(f"VIOLATION {v}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
