#!/usr/bin/env bash
# Runs each cargo-fuzz target for FUZZ_SECONDS (default 60) and prints the executions;
# FUZZ_TARGETS picks some (default: all). The machine has a stable toolchain only:
# RUSTC_BOOTSTRAP lets cargo-fuzz use the instrumentation flags it needs. The corpus grows
# in fuzz/corpus (not committed), seeded from fuzz/seeds where a target has seeds.
# FUZZ_DEV=1 builds without optimizations: the suite's brief run, where the release build
# with one codegen unit (about 12 minutes on two cores) would cost more than the fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
seconds=${FUZZ_SECONDS:-60}
build=()
[ "${FUZZ_DEV:-0}" = 1 ] && build=(--dev)
targets=${FUZZ_TARGETS:-range conditional track_id request_head connection media_probe}
status=0
for target in $targets; do
  mkdir -p "fuzz/corpus/$target"
  seeds=()
  [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
  echo "== fuzz $target for ${seconds}s"
  log=$(mktemp)
  if ! RUSTC_BOOTSTRAP=1 cargo fuzz run "${build[@]}" --sanitizer none "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$seconds" -print_final_stats=1 >"$log" 2>&1; then
    status=1
    grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -20 || true
  fi
  grep -E "stat::number_of_executed_units|^Done" "$log" || true
  rm -f "$log"
done
exit $status
