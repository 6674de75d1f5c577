#!/usr/bin/env bash
# Mutation testing with cargo-mutants (installed from crates.io when missing), by hand, not in
# CI: each mutant of the chain store's rules, or of the node's write and read paths, is built
# and tested; a mutant that no test catches is a hole in the proof, or a change that cannot
# matter.
#
#   scripts/mutants.sh store|node [cargo-mutants flags, e.g. --shard 0/4 or --iterate]
#
# store: raft-store/src/chain/ (about 300 mutants) against raft-store's tests, about a minute
#        each on 2 cores.
# node:  node/src/node/ (about 100 mutants) against the node's process-cluster tests and the
#        scripted simulations, a few minutes each.
#
# Mutants are applied in a worktree of HEAD (target/mutants/tree, so uncommitted work is never
# touched) that builds into this checkout's target directory: dependencies, RocksDB among them,
# are built once per part (for the tested packages' features) and kept for later runs. Mutants run in a shuffled order, so a run stopped early is a fair
# sample. Results go to target/mutants/<part>/mutants.out/ (caught.txt, missed.txt,
# timeout.txt, unviable.txt, outcomes.json); --iterate resumes, skipping mutants already caught.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
if ! cargo mutants --version >/dev/null 2>&1; then
  cargo install --locked cargo-mutants
fi
part=${1:-}
shift || true
root=$(pwd)
tree="$root/target/mutants/tree"
mkdir -p "$root/target/mutants/store" "$root/target/mutants/node"
if [ -e "$tree" ]; then
  git worktree remove --force "$tree"
fi
git worktree add --detach --quiet "$tree" HEAD
trap 'git -C "$root" worktree remove --force "$tree"' EXIT
export CARGO_TARGET_DIR="$root/target"
case "$part" in
  store)
    cargo mutants -d "$tree" --in-place --shuffle --test-tool nextest --timeout 300 \
      --file 'raft-store/src/chain/*.rs' --file 'raft-store/src/chain/write/*.rs' --test-package raft-store \
      --output "$root/target/mutants/store" "$@"
    ;;
  node)
    cargo mutants -d "$tree" --in-place --shuffle --test-tool nextest --timeout 600 \
      --file 'node/src/node/*.rs' --test-package chainstore-node --test-package chaos \
      --output "$root/target/mutants/node" "$@" -- -E 'package(chainstore-node) | binary(scenarios)'
    ;;
  *)
    echo "usage: scripts/mutants.sh store|node [cargo-mutants flags]" >&2
    exit 2
    ;;
esac
