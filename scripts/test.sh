#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, then format, lint and tests.
# Integration tests start their own private redis-server and mongod on free loopback ports.
#
# Where the time goes (two cores): compiling is bound by the processor, the tests and the
# soaks mostly wait on their servers. So the steps overlap:
#   the release build   from the start, niced so that it takes what the steps in front
#                       leave (cargo locks each profile's directory on its own);
#   fmt, clippy, the debug build of the tests, binaries and soak, in front;
#   the tests           then, beside the two soaks (one after the other): all but the
#                       ones that need the release build (the package, the image and the
#                       rollout of image containers), which run once it is done;
#   the fleet's partitions last and alone: they need the whole machine.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
# Each step says when it starts, so a slow suite shows where its time goes.
step() { echo "== $* (at $((SECONDS - started)) s)"; }
# A step that fails ends the suite; what still runs beside it is stopped.
trap 'kill $(jobs -p) 2>/dev/null || true; echo "== done in $((SECONDS - started)) s"' EXIT

scripts/install-deps.sh
export MUSICD_TEST_MONGOD="${MUSICD_TEST_MONGOD:-$PWD/.tools/bin/mongod}"
export PATH="$PWD/.tools/bin:$PATH"
logs=$(mktemp -d)
failed=()

step "the release build, niced, beside what follows"
nice -n 10 cargo build --release --locked --bins </dev/null >"$logs/release.log" 2>&1 &
release=$!
step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings
step "build the tests, the binaries and the soak (debug)"
cargo test --locked --workspace --all-targets --no-run
# `cargo test` builds the examples as tests only; the soak runs as the program it is.
cargo build --locked --example soak

step "side by side: the tests and the two soaks"
{
  echo "== soak: 3 minutes of overlapping faults on the fleet, seed 10 (scripts/soak.sh)"
  target/debug/examples/soak --duration 3m --chaos --seed 10 &&
    echo "== soak: 3 minutes of overlapping faults on the fleet, a random seed (printed first)" &&
    target/debug/examples/soak --duration 3m --chaos
} </dev/null >"$logs/soak.log" 2>&1 &
soak=$!
needs_release=(image:: package:: rollout::)
skips=(--skip fleet::)
for module in "${needs_release[@]}"; do skips+=(--skip "$module"); done
cargo test --locked --no-fail-fast --workspace --all-targets -- "${skips[@]}" </dev/null ||
  failed+=("cargo test")

step "the tests that need the release build, once it is done"
wait "$release" || { cat "$logs/release.log"; failed+=("the release build"); }
cargo test --locked --test integration -- "${needs_release[@]}" </dev/null ||
  failed+=("the package, image and rollout tests")

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
