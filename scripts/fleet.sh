#!/usr/bin/env bash
# The partition tests' fleet, for a person (examples/fleet.rs): varnish → nginx → three
# musicd → a Redis Cluster of six and a MongoDB replica set of three, each in its own
# network namespace. Needs root and the test dependencies (scripts/install-deps.sh).
#
#   scripts/fleet.sh up              # until Ctrl-C
#   scripts/fleet.sh cut m1-redis    # from another terminal
#   scripts/fleet.sh heal m1-redis
#   scripts/fleet.sh links | down    # `--index N` before the command picks another fleet
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --locked --bins --example fleet
exec target/release/examples/fleet "$@"
