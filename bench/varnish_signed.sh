#!/usr/bin/env bash
# What musicd's authorization of every request costs a varnish hit: deploy/varnish.vcl as
# shipped (each request asks musicd first, then answers from the cache) against the same
# VCL without its `authorize` block (a plain hit), on the same cached track, alternated.
#   scripts/quickstart.sh && bench/varnish_signed.sh   (BENCH_SECONDS=5 BENCH_ROUNDS=3)
# Loopback only; every wrk run is bounded in time; the varnishd it starts are stopped by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${BENCH_SECONDS:-5}"
rounds="${BENCH_ROUNDS:-3}"
conns="${BENCH_CONNECTIONS:-50}"
var="$PWD/var"
bin="$PWD/target/release"
[ -x "$bin/musicctl" ] && [ -f "$var/musicd.toml" ] || { echo "run scripts/quickstart.sh first" >&2; exit 2; }
backend="${QUICKSTART_LISTEN:-127.0.0.1:23001}"
id=$("$bin/musicctl" --config "$var/musicd.toml" list | head -n 1 | cut -f 1)
work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
start() { # name port vcl
  sed -e "s/\.port = \"23001\";/.port = \"${backend##*:}\";/" "$3" > "$work/$1.vcl"
  varnishd -F -j none -a "127.0.0.1:$2" -f "$work/$1.vcl" -n "$work/$1" -s malloc,64m -T 127.0.0.1:0 \
    >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do curl -fs -o /dev/null "http://127.0.0.1:$2/healthz" && return; sleep 0.1; done
  echo "varnishd $1 did not start" >&2; exit 1
}
sed '/# authorize: begin/,/# authorize: end/d' deploy/varnish.vcl > "$work/plain.src.vcl"
start shipped 26081 deploy/varnish.vcl
start plain 26082 "$work/plain.src.vcl"
url() { echo "http://127.0.0.1:$1/musicdb/$id/track.mp3"; }
for port in 26081 26082; do curl -fs -o /dev/null "$(url $port)"; curl -fs -o /dev/null "$(url $port)"; done
rate() { wrk -t2 -c"$conns" -d"${seconds}s" "$(url "$1")" | awk '/Requests\/sec/ {print $2}'; }
shipped=(); plain=()
for r in $(seq "$rounds"); do
  shipped+=("$(rate 26081)"); plain+=("$(rate 26082)")
  echo "round $r: shipped ${shipped[-1]} req/s, without authorize ${plain[-1]} req/s"
done
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms=$(median "${shipped[@]}"); mp=$(median "${plain[@]}")
echo "median: shipped $ms req/s, without authorize $mp req/s, ratio $(awk -v a="$ms" -v b="$mp" 'BEGIN {printf "%.2f", a/b}')"
