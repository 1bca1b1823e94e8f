#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, then format, lint and tests.
# Integration tests start their own private redis-server and mongod on free loopback ports.
#
# Where the time goes (two cores): compiling is bound by the processor, the tests and the
# soaks mostly wait on their servers. So after the checks and the test build, three things
# run side by side: the release build (the package and image tests wait for it, on cargo's
# lock, and it runs niced so that it takes only what they leave), the tests, and the two
# soaks. The fleet's partitions then run alone: they need the whole machine.
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

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --locked --workspace --all-targets -- -D warnings
step "build the tests, the binaries and the soak (debug)"
# The test programs are run directly below, not through `cargo test`, which would wait on
# cargo's lock for the release build running beside them.
cargo test --locked --workspace --all-targets --no-run --message-format=json-render-diagnostics \
  >"$logs/build.json"
python3 - "$logs/build.json" >"$logs/programs" <<'PY'
import json, os, sys
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    message = json.loads(line)
    if (message.get("reason") == "compiler-artifact" and message["profile"]["test"]
            and message.get("executable") and "example" not in message["target"]["kind"]):
        print(os.path.dirname(message["manifest_path"]), message["executable"])
PY
# `cargo test` builds the examples as tests only; the soak runs as the program it is.
cargo build --locked --example soak

step "side by side: the release build, the two soaks, the tests"
# Only the build: the package and image tests run scripts/package.sh and scripts/image.sh
# themselves, and wait on cargo's lock until this is done.
nice -n 10 cargo build --release --locked --bins </dev/null >"$logs/release.log" 2>&1 &
release=$!
{
  echo "== soak: 3 minutes of overlapping faults on the fleet, seed 10 (scripts/soak.sh)"
  target/debug/examples/soak --duration 3m --chaos --seed 10 &&
    echo "== soak: 3 minutes of overlapping faults on the fleet, a random seed (printed first)" &&
    target/debug/examples/soak --duration 3m --chaos
} </dev/null >"$logs/soak.log" 2>&1 &
soak=$!
failed=()
while read -r dir program; do
  echo "== $program (in $dir)"
  # The fleet in network namespaces runs alone afterwards.
  (cd "$dir" && "$program" --skip fleet:: </dev/null) || failed+=("$program")
done <"$logs/programs"
wait "$release" || failed+=("the release build")
echo "== the release build (at $((SECONDS - started)) s)"
tail -n 3 "$logs/release.log"
wait "$soak" || failed+=("the soaks")
echo "== the soaks (at $((SECONDS - started)) s)"
cat "$logs/soak.log"
if [ ${#failed[@]} -gt 0 ]; then
  [[ " ${failed[*]} " == *release* ]] && cat "$logs/release.log"
  echo "test.sh: failed: ${failed[*]}" >&2
  exit 1
fi

step "the fleet: partitions under load in network namespaces (tests/integration/fleet.rs)"
cargo test --locked --test integration fleet:: -- --test-threads=1 --nocapture
rm -rf "$logs"
