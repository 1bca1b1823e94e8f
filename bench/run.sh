#!/usr/bin/env bash
# musicd and nginx side by side, same files, same machine, same run.
#   bench/run.sh                 (BENCH_SECONDS=5 BENCH_ROUNDS=3 by default)
#   BENCH_CELLS="4 MiB|healthz" bench/run.sh   (only cells whose "name c=conns" contains one)
#   BENCH_BASELINE_BIN=/path/to/old/musicd bench/run.sh   (also that build, same run)
# Writes bench/results/http.md. Loopback only; every wrk run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
cargo build --release --locked --bins --example seed 2>&1 | tail -n 1
exec python3 bench/run.py "$@"
