#!/usr/bin/env bash
# Runs every test on a fresh machine: installs what the build needs, builds once, runs the
# workspace's tests with cargo-nextest (or cargo test where nextest is missing), a fault run of
# the real binary, validates the Kubernetes manifests, runs the compose cluster under failures,
# and the local cluster demo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/prereqs.sh
ensure_build_prereqs
ensure_postgres_server

# Lints first: clippy over every target with warnings as errors (`unwrap`/`expect` are denied
# in the libraries and binaries, see each crate root). The tidy tests (`tidy/`) run with the
# workspace's tests below.
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets --quiet -- -D warnings
  echo "clippy: clean"
else
  echo "clippy: not installed on this toolchain (rustup component add clippy); lints not run"
fi

if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --profile ci "$@"
else
  cargo test --workspace "$@"
fi

# A fault run of the real binary: SIGKILL, SIGSTOP and cuts from the peers under racing
# clients, the history checked for linearizability. A new seed each run (printed; longer runs
# and chosen seeds by hand: scripts/robustness.sh --seed N --duration S).
robustness_seed=${CHAINSTORE_ROBUSTNESS_SEED:-$(( $(date +%s) % 1000000 ))}
echo "robustness run: seed $robustness_seed"
scripts/robustness.sh --seed "$robustness_seed" --duration "${CHAINSTORE_ROBUSTNESS_SECS:-60}"

# The Kubernetes manifests against the Kubernetes schemas (offline: the tool ships them).
ensure_pip_command kubernetes-validate kubernetes-validate
kubernetes-validate --strict --quiet deploy/k8s/*.yaml
echo "kubernetes manifests: valid"

# The compose cluster in real containers, over TLS, under SIGKILL, partition and restart, then a
# backup restored into a second cluster. Needs a running Docker engine; CHAINSTORE_SKIP_DOCKER=1
# skips it on machines without one (CI never sets it). The image holds the binaries of the test
# build just made (its dependencies, RocksDB included, are optimised), so RocksDB is compiled
# once; CHAINSTORE_IMAGE_PROFILE=release tests the release build instead.
if [ "${CHAINSTORE_SKIP_DOCKER:-}" = 1 ]; then
  echo "compose test: SKIPPED (CHAINSTORE_SKIP_DOCKER=1)"
else
  CHAINSTORE_IMAGE_PROFILE=${CHAINSTORE_IMAGE_PROFILE:-debug} deploy/compose/test.sh
fi

# The README's first command must keep working: run the local cluster demo once, end to end.
CHAINSTORE_DEMO_PORT=${CHAINSTORE_DEMO_PORT:-17101} ./scripts/cluster.sh --exit >/dev/null
echo "local cluster demo: ok"
