#!/usr/bin/env bash
# Builds the Debian package into target/debian/: the release binaries, then the man pages
# and shell completions generated from the same clap definitions (`musicd man`,
# `musicd completions SHELL`), then `cargo deb` with [package.metadata.deb] from
# Cargo.toml. Prints the path of the .deb. Needs cargo-deb (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked --bins
out=target/package
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"
for bin in musicd musicctl; do
  "target/release/$bin" man --dir "$out/man"
  "target/release/$bin" completions bash > "$out/completions/$bin.bash"
  "target/release/$bin" completions zsh > "$out/completions/_$bin"
  "target/release/$bin" completions fish > "$out/completions/$bin.fish"
done
# -n: no name or time stamp in the gzip header, so the same input gives the same package.
gzip -9n "$out"/man/*.1
cargo deb --no-build --locked --quiet --output target/debian/
ls -1 target/debian/musicd_*.deb | tail -n 1
