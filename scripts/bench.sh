#!/usr/bin/env bash
# chainstore and etcd side by side, in one run: a fresh three-node chainstore (release build)
# and a fresh three-member etcd (Debian's etcd-server, installed when missing) on loopback, both
# with their default durability; the same head-checked appends (~200-byte JSON events, W
# writers each on its own executions) and linearizable reads of ten-event executions against
# both, alternating between the two; then every acknowledged append is read back at its
# sequence on both, and only then is the table printed (ops/s, p50, p99, server CPU µs per
# operation, the ratio).
#
#   scripts/bench.sh [--seconds N] [--concurrency 1,16,64] [--shards S] [--dir DIR]
#
# Defaults: 10 s per phase, W = 1, 16, 64; a fresh directory under target/bench, removed after
# a run that passes. With --shards S (S > 1), a second three-node chainstore made with S shards
# runs the same appends in the same run, and a table sets its appends/s and CPU µs per append
# beside the single-shard cluster's, with how many shards each node leads.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh

seconds=10
concurrency=1,16,64
shards=1
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --shards) shards=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

ensure_build_prereqs
ensure_command etcd etcd-server
# etcd's Rust client compiles etcd's protocol files.
ensure_command protoc protobuf-compiler
# One build for both binaries, so RocksDB is compiled once with one set of features.
cargo build -q --release -p chainstore-node -p chainstore-robustness \
  --features chainstore-robustness/etcd --bin chainstore-node --bin chainstore-bench

if [ -z "$dir" ]; then
  dir="$PWD/target/bench/$(date +%Y%m%d-%H%M%S)"
fi
mkdir -p "$dir"
if target/release/chainstore-bench --node-bin "$PWD/target/release/chainstore-node" \
  --etcd-bin "$(command -v etcd)" --dir "$dir" --seconds "$seconds" \
  --concurrency "$concurrency" --shards "$shards"; then
  rm -rf "$dir"
else
  echo "bench: failed; data and logs kept in $dir" >&2
  exit 1
fi
