#!/usr/bin/env bash
# Runs every decoder fuzz target with a large budget (by hand; CI runs 20,000 inputs per decoder
# as part of the tests). Usage: scripts/fuzz.sh [INPUTS_PER_DECODER] [SEED]
# Prints one line per decoder: inputs run, panics found. Exits non-zero on any panic.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
export FUZZ_INPUTS=${1:-1000000}
export FUZZ_SEED=${2:-$(( $(date +%s) % 1000000 ))}
echo "fuzzing with $FUZZ_INPUTS inputs per decoder, FUZZ_SEED=$FUZZ_SEED"
cargo test --workspace --test fuzz -- --nocapture --test-threads 1 2>&1 | grep -oE 'fuzz: .*|panicked.*|test result.*|FAILED.*'
