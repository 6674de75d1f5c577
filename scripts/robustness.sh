#!/usr/bin/env bash
# A fault run of the real chainstore-node binary (robustness/): three nodes on loopback, racing
# clients on random nodes, and a nemesis that SIGKILLs the leader or a follower, SIGTERMs the
# leader, SIGSTOPs a node and cuts a node off from its peers while clients still reach it. Every answer is recorded and
# the history checked for linearizability; every acknowledged append must be found after
# healing; the report gives the write outage after each fault.
#
#   scripts/robustness.sh [--seed N] [--duration SECONDS] [--release] [--shards S] [--dir DIR]
#                         [-- node flags]
#
# Defaults: seed 1, 60 s of faults, the debug build, one shard, a fresh directory under
# target/robustness. With --shards S the cluster is made of S shards (a Raft group each); the
# nemesis's "leader" is then the leader of the nodes' first shard.
# Cutting a node off needs root (three Unix users, one per node, and iptables rules matching
# them); without root the run kills and pauses only, and says so. On failure the run directory
# (report.txt, history.jsonl, node logs and data directories) is kept and its path printed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh

seed=1
duration=60
profile=debug
dir=""
node_args=()
shards=1
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --release) profile=release; shift ;;
    --dir) dir=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --) shift; node_args=("$@"); break ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

ensure_build_prereqs
if [ "$profile" = release ]; then
  cargo build -q --release -p chainstore-node -p chainstore-robustness
else
  # The test build makes both binaries with the same features as the test run, so after
  # scripts/test.sh's build this compiles nothing.
  cargo test -q --workspace --no-run
fi
bin="target/$profile"

users=()
if [ "$(id -u)" -eq 0 ]; then
  ensure_command iptables iptables
  for n in 1 2 3; do
    user="chainstore-rb$n"
    id -u "$user" >/dev/null 2>&1 ||
      useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
    users+=("$user")
  done
else
  echo "robustness: not root, so no cuts (SIGKILL and SIGSTOP only)" >&2
fi

if [ -z "$dir" ]; then
  dir="$PWD/target/robustness/seed-$seed-$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$(dirname "$dir")"
# The nodes run as their own users: they must reach the binary and their directories.
chmod o+rx "$(dirname "$dir")"

args=(--node-bin "$PWD/$bin/chainstore-node" --dir "$dir" --seed "$seed" --duration "$duration")
if [ ${#users[@]} -eq 3 ]; then
  args+=(--users "$(IFS=,; echo "${users[*]}")")
fi
if [ "$shards" != 1 ]; then
  # The cluster is made with that many shards (its nodes' bootstrap makes it).
  node_args+=(--bootstrap-shards "$shards")
fi
if [ ${#node_args[@]} -gt 0 ]; then
  args+=(--node-args "${node_args[@]}")
fi
exec "$bin/chainstore-robustness" "${args[@]}"
