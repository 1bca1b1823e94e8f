#!/usr/bin/env bash
# CPU per link check, plain against bound to a session, over a million revoked sessions
# (examples/link_check_cost.rs). Arguments pass through (--revoked N --rounds R --json).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --locked --example link_check_cost
exec target/release/examples/link_check_cost "$@"
