#!/usr/bin/env bash
# Months, not minutes: the fleet (varnish → nginx → three musicd → a Redis Cluster and a
# MongoDB replica set, in network namespaces) under steady traffic and catalogue changes,
# with overlapping faults drawn from a seed. Needs root. See examples/soak.rs.
#
#   scripts/soak.sh --duration 1h --chaos --report soak.html
#   scripts/soak.sh --duration 3m --chaos --seed 7 --json
#
# Exit 0 only when the run passed: no wrong answer, no error outside a fault window, every
# budget kept. The seed is printed first; the same seed draws the same faults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
export PATH="$PWD/.tools/bin:$PATH"
cargo build --quiet --release --locked --bins --example soak
exec target/release/examples/soak "$@"
