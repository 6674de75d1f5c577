#!/usr/bin/env bash
# The memory test at full size (by hand; CI runs it with 320 MiB): a node holding MIB of chain
# data restarts, serves a backup download and sends a snapshot to a new learner, which installs
# it and restarts; every peak resident set must stay under CAP MiB.
# Usage: scripts/memory.sh [MIB, default 1100] [CAP, default 256]
# Needs about 4 × MIB of free disk (log, state, snapshot files, the learner's copy).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
export CHAINSTORE_MEMORY_TEST_MIB=${1:-1100}
export CHAINSTORE_MEMORY_TEST_RSS_MIB=${2:-256}
cargo test --workspace --test memory -- --nocapture 2>&1 | grep -E '^memory:|panicked|test result|FAILED|peak RSS'
