#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, then format, lint and tests.
# Integration tests start their own private redis-server and mongod on free loopback ports.
#
# One build: the tests, the fleet and the soaks run against the release binaries, the
# code the Debian package and the image ship (they link it with LTO, the `dist` profile;
# Cargo.toml pins the features the dev-dependencies add, so `cargo test --release` reuses
# that build instead of compiling a debug tree).
# The steps run one after the other but for the two soaks, which each get a fleet of their
# own, and clippy, which runs niced beside them: the soaks leave about two thirds of the
# processors idle, and a niced compiler gets only what they leave. Where the time goes:
# bench/results/suite-time.md.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
# Each step says when it starts, so a slow suite shows where its time goes.
step() { echo "== $* (at $((SECONDS - started)) s)"; }
trap 'echo "== done in $((SECONDS - started)) s"' EXIT

scripts/install-deps.sh
export MUSICD_TEST_MONGOD="${MUSICD_TEST_MONGOD:-$PWD/.tools/bin/mongod}"

step "cargo fmt --check"
cargo fmt --all -- --check
step "the release build and the Debian package (scripts/package.sh; tests/integration/package.rs checks it)"
# The release profile: the `dist` one that ships adds LTO, minutes more for every link.
BUILD_PROFILE=release scripts/package.sh
step "cargo test --release"
# The fleet in network namespaces runs alone afterwards: it needs the whole machine.
cargo test --release --locked --workspace --all-targets -- --skip fleet::
step "the fleet: partitions under load in network namespaces (tests/integration/fleet.rs)"
cargo test --release --locked --test integration fleet:: -- --test-threads=1 --nocapture
step "soak: 3 minutes of overlapping faults, seed 10 and a random seed, a fleet each (scripts/soak.sh); clippy beside them"
cargo build --quiet --release --locked --bins --example soak
random_seed=$((RANDOM % 1000000))
echo "soak: the random seed is $random_seed"
soak_logs=$(mktemp -d)
scripts/soak.sh --duration 3m --chaos --seed 10 --index 1 >"$soak_logs/fixed" 2>&1 &
fixed=$!
scripts/soak.sh --duration 3m --chaos --seed "$random_seed" --index 2 >"$soak_logs/random" 2>&1 &
random=$!
# Clippy only once both soaks are past their `cargo build` (they print their seed): it
# would hold cargo's lock on target/ and keep them waiting.
for _ in $(seq 600); do
  grep -q '^soak: seed' "$soak_logs/fixed" && grep -q '^soak: seed' "$soak_logs/random" && break
  kill -0 "$fixed" 2>/dev/null && kill -0 "$random" 2>/dev/null || break
  sleep 0.2
done
nice -n 19 cargo clippy --locked --workspace --all-targets -- -D warnings >"$soak_logs/clippy" 2>&1 &
clippy=$!
failed=0
wait "$fixed" || failed=1
wait "$random" || failed=1
for run in fixed random; do
  echo "-- soak, the $run seed:"
  cat "$soak_logs/$run"
done
step "cargo clippy -D warnings (started niced beside the soaks)"
wait "$clippy" || failed=1
cat "$soak_logs/clippy"
rm -rf "$soak_logs"
exit "$failed"
