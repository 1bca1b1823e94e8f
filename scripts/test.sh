#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, then format, lint and tests.
# Integration tests start their own private redis-server and mongod on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
export MUSICD_TEST_MONGOD="${MUSICD_TEST_MONGOD:-$PWD/.tools/bin/mongod}"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings
echo "== the Debian package (scripts/package.sh; tests/integration/package.rs checks it)"
scripts/package.sh
echo "== cargo test"
# The fleet in network namespaces runs alone afterwards: it needs the whole machine.
cargo test --locked --workspace --all-targets -- --skip fleet::
echo "== the fleet: partitions under load in network namespaces (tests/integration/fleet.rs)"
cargo test --locked --test integration fleet:: -- --test-threads=1 --nocapture
echo "== fuzz the connection briefly (scripts/fuzz.sh runs every target, longer)"
FUZZ_SECONDS="${TEST_FUZZ_SECONDS:-30}" FUZZ_TARGETS=connection scripts/fuzz.sh
