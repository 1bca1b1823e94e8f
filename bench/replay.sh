#!/usr/bin/env bash
# A day of traffic against a cold musicd (see bench/replay.py). Writes
# bench/results/replay.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
cargo build --release --locked --bins --example seed 2>&1 | tail -n 1
exec python3 bench/replay.py "$@"
