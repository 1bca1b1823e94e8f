#!/usr/bin/env bash
# Runs each cargo-fuzz target for FUZZ_SECONDS (default 60) and prints the executions.
# The machine has a stable toolchain only: RUSTC_BOOTSTRAP lets cargo-fuzz use the
# instrumentation flags it needs. The corpus stays in fuzz/corpus (not committed).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
seconds=${FUZZ_SECONDS:-60}
for target in range conditional track_id request_head connection; do
  RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none "$target" -- \
    -max_total_time="$seconds" -print_final_stats=1 2>&1 | grep -E "stat::number_of_executed_units|Done|ERROR|panicked" || true
done
