#!/usr/bin/env bash
# musicd, nginx, h2o and lighttpd side by side, same files, same machine, same run.
#   bench/run.sh                 (BENCH_SECONDS=5 BENCH_ROUNDS=5 BENCH_WARMUP_SECONDS=1 by default)
#   BENCH_CELLS="4 MiB|healthz" bench/run.sh   (only cells whose "name c=conns" contains one)
#   BENCH_BASELINE_BIN=/path/to/old/musicd bench/run.sh   (also that build, same run)
#   BENCH_PROFILE=release bench/run.sh   (the suite's build; the default is `dist`, what ships)
# Writes bench/results/http.md. Loopback only; every wrk run is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh >/dev/null
# The peers (Debian's h2o and lighttpd) are for the benchmark only, not for the tests.
if ! command -v h2o >/dev/null || ! command -v lighttpd >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    policy=created
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends h2o lighttpd >/dev/null
  if [ "$policy" = created ]; then $sudo rm -f /usr/sbin/policy-rc.d; fi
fi
# What ships (the `dist` profile: LTO and profile guidance, scripts/build-dist.sh);
# BENCH_PROFILE=release measures the suite's build.
export BENCH_PROFILE=${BENCH_PROFILE:-dist}
if [ "$BENCH_PROFILE" = dist ]; then
  scripts/build-dist.sh --example seed 2>&1 | tail -n 1
else
  cargo build --profile "$BENCH_PROFILE" --locked --bins --example seed 2>&1 | tail -n 1
fi
exec python3 bench/run.py "$@"
