#!/usr/bin/env bash
# Mutation testing with cargo-mutants (installed from crates.io when missing), by hand, not in
# CI: every mutant of the chain store's rules and of the node's write and read paths is built
# and tested; a mutant that no test catches is a hole in the proof or a harmless change.
#
#   scripts/mutants.sh [store|node|all] [extra cargo-mutants flags]
#
# store: raft-store/src/chain/ against raft-store's tests (minutes per mutant: seconds).
# node:  node/src/node.rs and node/src/api/executions.rs against the node's process-cluster
#        tests and the simulations' fixed seeds (minutes per mutant; hours in all).
# Results go to target/mutants/<part>/mutants.out (caught.txt, missed.txt, timeout.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants
fi
part=${1:-all}
shift || true

run_store() {
  cargo mutants --no-shuffle -j 1 --timeout 300 \
    --package raft-store --file 'raft-store/src/chain/*.rs' \
    --output target/mutants/store "$@" -- --package raft-store
}

run_node() {
  cargo mutants --no-shuffle -j 1 --timeout 900 \
    --package chainstore-node --file node/src/node.rs --file node/src/api/executions.rs \
    --output target/mutants/node "$@" -- --package chainstore-node --package chaos
}

case "$part" in
  store) run_store "$@" ;;
  node) run_node "$@" ;;
  all) run_store "$@" || true; run_node "$@" ;;
  *) echo "usage: scripts/mutants.sh [store|node|all] [cargo-mutants flags]" >&2; exit 2 ;;
esac
