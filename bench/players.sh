#!/usr/bin/env bash
# Listeners held at 320 kbps without a stall: musicd, nginx and the seed's Node service
# (see bench/players.py). Writes bench/results/players.md.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
cargo build --release --locked --bins 2>&1 | tail -n 1
exec python3 bench/players.py "$@"
