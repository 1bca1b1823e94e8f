#!/usr/bin/env bash
# What links that name their listener cost musicd: the memory of a million revoked
# sessions, and CPU per request of a signed link with a session (`sid`, checked against
# that set) against the same link without one, in paired alternating rounds.
#   bench/revoke.sh [ROUNDS] [SESSIONS]     (defaults: 10 rounds, 1000000 sessions)
# Starts its own redis-server, mongod and musicd (release) on free loopback ports; every
# wrk run is bounded in time; writes bench/results/revoke.md.
set -euo pipefail
rounds=${1:-10}
sessions=${2:-1000000}
seconds=${BENCH_SECONDS:-4}

# shellcheck source=bench/lib/backends.sh
. "$(dirname "$0")/lib/backends.sh"

head -c 4096 /dev/urandom > "$work/music/small.mp3"
id=$($ctl import "$work/music" | cut -f 1 | head -n 1)
head -c 32 /dev/urandom | base64 > "$work/k1.key"
port=$(free_port)
{
  echo "listen = \"127.0.0.1:$port\""
  cat "$work/musicd.toml"
  echo "[signing]"
  echo "required = true"
  echo "keys = [{ id = \"k1\", secret_file = \"$work/k1.key\" }]"
} > "$work/m.toml"
mv "$work/m.toml" "$work/musicd.toml"

musicd_pid=
start_musicd() {
  "$bin/musicd" --config "$work/musicd.toml" run >"$work/musicd.log" 2>&1 &
  musicd_pid=$!
  for _ in $(seq 200); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && return; sleep 0.05; done
  echo "musicd did not start" >&2; cat "$work/musicd.log" >&2; exit 1
}
stop_musicd() { [ -n "$musicd_pid" ] && kill "$musicd_pid" && wait "$musicd_pid" 2>/dev/null || true; musicd_pid=; }
trap 'stop_musicd; cleanup' EXIT
# utime + stime in clock ticks (100 a second), counted after the command name's `)`.
cpu_ticks() { sed 's/.*) //' "/proc/$musicd_pid/stat" | awk '{print $12 + $13}'; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$musicd_pid/status"; }

# The revocations, as Redis protocol for `redis-cli --pipe`.
python3 "$root/bench/revocations.py" "$sessions" > "$work/revocations.resp"

# Memory: RSS of a musicd holding no revocation, then of one that read them all.
start_musicd; sleep 1
rss_empty=$(rss_kib)
stop_musicd
redis-cli -p "$rport" --pipe < "$work/revocations.resp" >/dev/null
start_musicd
for _ in $(seq 600); do
  held=$(curl -fs "http://127.0.0.1:$port/metrics" | awk '/^musicd_revoked_sessions / {print $2}')
  [ "${held:-0}" -ge "$sessions" ] && break
  sleep 0.1
done
sleep 1
rss_full=$(rss_kib)

# CPU: the sid is checked against the full set, so each request pays a real lookup.
plain=$($ctl sign "$id" --ttl 1d --base "http://127.0.0.1:$port")
bound=$($ctl sign "$id" --ttl 1d --sid "bench-session-0001" --base "http://127.0.0.1:$port")
curl -fs -o /dev/null "$plain"
curl -fs -o /dev/null "$bound"
round() { # URL: CPU microseconds per request over one wrk run
  local before after requests
  before=$(cpu_ticks)
  requests=$(wrk -t1 -c32 -d"${seconds}s" "$1" | awk '/requests in/ {print $1}')
  after=$(cpu_ticks)
  python3 -c "print(($after - $before) * 10000 / $requests)"
}
deltas=()
for r in $(seq "$rounds"); do
  a=$(round "$plain")
  b=$(round "$bound")
  deltas+=("$(python3 -c "print($b - $a)")")
  echo "round $r: without sid $a us/request, with sid $b us/request" >&2
done

python3 "$root/bench/revocations.py" --report "$rounds" "$sessions" "$rss_empty" "$rss_full" \
  "${deltas[@]}" | tee "$root/bench/results/revoke.md"
