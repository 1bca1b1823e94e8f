#!/usr/bin/env bash
# Long load outside the test suite: 5,000 keep-alive connections against a release musicd.
#   bench/connections.sh   (SOAK_CONNECTIONS=5000 SOAK_SECONDS=30)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
cargo build --release --locked --bins 2>&1 | tail -n 1
exec python3 bench/connections.py "$@"
