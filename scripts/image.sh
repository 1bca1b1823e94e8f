#!/usr/bin/env bash
# Builds the OCI image musicd:VERSION (and musicd:latest) with podman, from Debian's
# packages: no base image is pulled. Stages a root filesystem in target/image/rootfs:
#   /usr/bin/musicd, /usr/bin/musicctl   the binaries of the `dist` profile, stripped
#                                        (fat LTO, profile-guided: scripts/build-dist.sh;
#                                        BUILD_PROFILE=release: the suite's build)
#   the shared libraries they link       (ldd), from the packages that own them
#   /etc/ssl/certs/ca-certificates.crt   from ca-certificates
#   /etc/passwd, /etc/group              root, musicd (uid 10001) and nobody
#   /usr/share/doc/musicd/image-packages.txt   which package and version each file came from
# then runs `podman build` on deploy/image/Containerfile. Prints the image's name and
# size. Needs podman (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
image="musicd:$version"
command -v podman >/dev/null || scripts/install-deps.sh >/dev/null
# Cargo's output on stderr: the last line of stdout is the image, for scripts and tests.
profile=${BUILD_PROFILE:-dist}
if [ "$profile" = dist ]; then
  scripts/build-dist.sh >&2
else
  cargo build --profile "$profile" --locked --bins >&2
fi

context=target/image
rootfs=$context/rootfs
rm -rf "$context"
mkdir -p "$rootfs/usr/bin" "$rootfs/etc/ssl/certs" "$rootfs/etc/musicd" \
  "$rootfs/usr/share/doc/musicd"
for bin in musicd musicctl; do
  objcopy --strip-all "target/$profile/$bin" "$rootfs/usr/bin/$bin"
done

# The shared libraries as the binaries name them (the dynamic loader included), each
# copied to the same path, and the Debian package that owns it.
packages=$rootfs/usr/share/doc/musicd/image-packages.txt
: >"$packages"
owner() { # FILE: "package version" of the Debian package that holds it
  local pkg
  pkg=$(dpkg -S "$1" 2>/dev/null || dpkg -S "$(readlink -f "$1")" 2>/dev/null) || {
    echo "image.sh: no Debian package holds $1" >&2; exit 1; }
  pkg=${pkg%%:*}
  echo "$pkg $(dpkg-query -W -f='${Version}' "$pkg")"
}
libs=$(ldd "target/$profile/musicd" "target/$profile/musicctl" | awk '/=> \// {print $3} /^\t\// {print $1}' | sort -u)
# (An assignment, so that a file no package holds stops the build under `set -e`.)
for lib in $libs; do
  mkdir -p "$rootfs$(dirname "$lib")"
  cp -L "$lib" "$rootfs$lib"
  from=$(owner "$lib")
  echo "$lib $from" >>"$packages"
done
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
from=$(owner /usr/share/ca-certificates)
echo "/etc/ssl/certs/ca-certificates.crt $from" >>"$packages"

cat >"$rootfs/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
musicd:x:10001:10001:musicd:/nonexistent:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
PASSWD
cat >"$rootfs/etc/group" <<'GROUP'
root:x:0:
musicd:x:10001:
nogroup:x:65534:
GROUP
cp deploy/image/Containerfile "$context/Containerfile"

# No RUN step: nothing is executed inside the image while it is built, so no runtime or
# base image is needed (crun and pulls are both unavailable on some build machines).
podman build --quiet --tag "$image" --tag musicd:latest \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.title=musicd" \
  --file "$context/Containerfile" "$context" >/dev/null
size=$(podman image inspect --format '{{.Size}}' "$image")
echo "$image $size"
