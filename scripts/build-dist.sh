#!/usr/bin/env bash
# Builds what ships: the `dist` profile (fat LTO, one codegen unit) of every binary into
# target/dist/, profile-guided. scripts/package.sh, scripts/image.sh and bench/run.sh
# build through it; BUILD_PROFILE=release (the suite's build) goes straight to cargo.
#   1. an instrumented build, into target/pgo/gen/ (its own directory: other flags);
#   2. the training run (scripts/pgo-train.sh) of those binaries, and `llvm-profdata merge`;
#   3. the build into target/dist/ with the merged profile.
# Why: the profile cut a cached GET by 23 % of its instructions (callgrind, 1,000 files,
# access log on: 10,274 -> 7,896) and its CPU by 3-10 % (docs/performance.md). Costs: a
# second fat-LTO build (about 7 minutes from nothing here, 2.5 after a change to musicd
# only) and half a minute of training. The training is run again only when the
# instrumented binaries changed.
# llvm-profdata must be of rustc's LLVM: Debian's llvm-N package, installed if missing.
# Without it (or with BUILD_PGO=0) the build is the plain `dist` one, and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

plain() { cargo build --profile dist --locked --bins "$@"; }
llvm=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=$(command -v "llvm-profdata-$llvm" || true)
if [ "${BUILD_PGO:-1}" != 0 ] && [ -z "$profdata" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "build-dist: apt-get install llvm-$llvm (llvm-profdata for rustc's LLVM $llvm)" >&2
  get_llvm() { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "llvm-$llvm"; }
  get_llvm >/dev/null 2>&1 || { $sudo apt-get update -qq && get_llvm >/dev/null; } || true
  profdata=$(command -v "llvm-profdata-$llvm" || true)
fi
if [ "${BUILD_PGO:-1}" = 0 ] || [ -z "$profdata" ]; then
  echo "build-dist: without profile guidance (BUILD_PGO=${BUILD_PGO:-1}, llvm-profdata-$llvm ${profdata:-missing})" >&2
  plain "$@"
  exit 0
fi

pgo=$PWD/target/pgo
gen=$pgo/gen
# Build scripts and proc macros are instrumented too (RUSTFLAGS reaches them): they write
# profiles while compiling, which the training's directory must not take in.
RUSTFLAGS="-Cprofile-generate=$pgo/compile" CARGO_TARGET_DIR=$gen \
  cargo build --profile dist --locked --bins
# A fixed path: flags that changed with every profile would rebuild every dependency.
# Cargo rebuilds what changed, and that reads the new profile; an unchanged dependency
# keeps the counts of the training before, which still match its code.
profile=$pgo/musicd.profdata
if [ ! -s "$profile" ] || [ "$gen/dist/musicd" -nt "$profile" ] || [ "$gen/dist/musicctl" -nt "$profile" ]; then
  rm -rf "$pgo/raw"
  LLVM_PROFILE_FILE="$pgo/raw/%m-%p.profraw" scripts/pgo-train.sh "$gen/dist" >&2
  "$profdata" merge --output "$profile.new" "$pgo"/raw/*.profraw
  mv "$profile.new" "$profile"
fi
RUSTFLAGS="-Cprofile-use=$profile" plain "$@"
