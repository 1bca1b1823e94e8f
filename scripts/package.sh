#!/usr/bin/env bash
# Builds the Debian package into target/debian/: the binaries of the `dist` profile (fat
# LTO, profile-guided: scripts/build-dist.sh; BUILD_PROFILE=release for the suite's own
# build, the same code), then the man pages
# and shell completions generated from the same clap definitions (`musicd man`,
# `musicd completions SHELL`), then `cargo deb` with [package.metadata.deb] from
# Cargo.toml. Prints the path of the .deb. Needs cargo-deb (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${BUILD_PROFILE:-dist}
if [ "$profile" = dist ]; then
  scripts/build-dist.sh
else
  cargo build --profile "$profile" --locked --bins
fi
out=target/package
rm -rf "$out"
mkdir -p "$out/man" "$out/completions"
for bin in musicd musicctl; do
  "target/$profile/$bin" man --dir "$out/man"
  "target/$profile/$bin" completions bash > "$out/completions/$bin.bash"
  "target/$profile/$bin" completions zsh > "$out/completions/_$bin"
  "target/$profile/$bin" completions fish > "$out/completions/$bin.fish"
done
# -n: no name or time stamp in the gzip header, so the same input gives the same package.
gzip -9n "$out"/man/*.1
# --profile: cargo-deb reads the assets' target/release/ paths from that profile's directory.
cargo deb --no-build --locked --quiet --profile "$profile" --output target/debian/
ls -1 target/debian/musicd_*.deb | tail -n 1
