#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: installs what the build needs, builds
# once, then runs the tests with cargo-nextest (or cargo test where nextest is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --profile ci "$@"
else
  cargo test --workspace "$@"
fi

# The README's first command must keep working: run the local cluster demo once, end to end.
CHAINSTORE_DEMO_PORT=${CHAINSTORE_DEMO_PORT:-17101} ./scripts/cluster.sh --exit >/dev/null
echo "local cluster demo: ok"
