#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, then format, lint and tests.
# Integration tests start their own private redis-server and mongod on free loopback ports.
#
# Where the time goes (two cores): compiling is bound by the processor, the tests and the
# soaks mostly wait on their servers. So the steps overlap:
#   the release build      from the start (the package and image tests need it);
#   the debug build        beside it; then, once it is done, side by side:
#   the tests              all but the package and image tests, which run once the
#                          release build is done, and the fleet, which runs last;
#   the two soaks          one after the other;
#   clippy                 niced, in its own target directory (its checks share nothing
#                          with a build, and it blocks nothing).
# The fleet's partitions then run alone: they need the whole machine. Cargo locks each
# profile's directory on its own, so the builds do not wait for each other.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
# Each step says when it starts, so a slow suite shows where its time goes.
step() { echo "== $* (at $((SECONDS - started)) s)"; }
trap 'echo "== done in $((SECONDS - started)) s"' EXIT

scripts/install-deps.sh
export MUSICD_TEST_MONGOD="${MUSICD_TEST_MONGOD:-$PWD/.tools/bin/mongod}"
export PATH="$PWD/.tools/bin:$PATH"
logs=$(mktemp -d)
failed=()

step "cargo fmt --check"
cargo fmt --all -- --check

step "the release build, beside the debug build of the tests, binaries and soak"
cargo build --release --locked --bins </dev/null >"$logs/release.log" 2>&1 &
release=$!
cargo test --locked --workspace --all-targets --no-run
# `cargo test` builds the examples as tests only; the soak runs as the program it is.
cargo build --locked --example soak

step "side by side: the tests, the two soaks, clippy"
{
  echo "== soak: 3 minutes of overlapping faults on the fleet, seed 10 (scripts/soak.sh)"
  target/debug/examples/soak --duration 3m --chaos --seed 10 &&
    echo "== soak: 3 minutes of overlapping faults on the fleet, a random seed (printed first)" &&
    target/debug/examples/soak --duration 3m --chaos
} </dev/null >"$logs/soak.log" 2>&1 &
soak=$!
CARGO_TARGET_DIR=target/clippy nice -n 10 \
  cargo clippy --locked --workspace --all-targets -- -D warnings </dev/null >"$logs/clippy.log" 2>&1 &
clippy=$!
cargo test --locked --no-fail-fast --workspace --all-targets -- \
  --skip fleet:: --skip image:: --skip package:: </dev/null || failed+=("cargo test")

step "the package and image tests, once the release build is done"
wait "$release" || { cat "$logs/release.log"; failed+=("the release build"); }
cargo test --locked --test integration -- image:: package:: </dev/null || failed+=("image and package tests")

wait "$clippy" || failed+=("cargo clippy -D warnings")
echo "== cargo clippy -D warnings (at $((SECONDS - started)) s)"
cat "$logs/clippy.log"
wait "$soak" || failed+=("the soaks")
echo "== the soaks (at $((SECONDS - started)) s)"
cat "$logs/soak.log"
if [ ${#failed[@]} -gt 0 ]; then
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi

step "the fleet: partitions under load in network namespaces (tests/integration/fleet.rs)"
cargo test --locked --test integration fleet:: -- --test-threads=1 --nocapture
rm -rf "$logs"
