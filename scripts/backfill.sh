#!/usr/bin/env bash
# The populator's initial backfill, measured: a PostgreSQL table of 100,000 executions x 10
# events (CHAINSTORE_BACKFILL_EXECUTIONS to change it) filled before the populator starts, three
# release chainstore-node processes, the release populator; prints the time, the rate and the
# populator's peak memory. Minutes of work, so not part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
ensure_postgres_server
# The test binary finds chainstore-node beside itself, in target/release.
cargo build -q --release -p chainstore-node --bin chainstore-node
cargo test -q --release -p chainstore-populator --test populator -- --ignored --exact backfill --nocapture
