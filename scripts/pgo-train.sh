#!/usr/bin/env bash
# The training run of the profile-guided build (scripts/build-dist.sh): runs the musicd
# and musicctl in BINDIR over the traffic they ship for, so the compiler learns which
# paths are hot. Private redis-server and mongod on free loopback ports, in a temp dir
# removed on exit; every load is bounded in time.
#   scripts/pgo-train.sh BINDIR        (LLVM_PROFILE_FILE says where profiles go)
#   PGO_TRAIN_SECONDS=1 scripts/pgo-train.sh BINDIR   (a shorter mix; 3 by default)
# The mix follows the benchmark's cells (bench/run.py) and what players send: one small
# file many times and many small files, access logs on and off, a large file whole and in
# ranges, revalidations (304), unknown ids (404), HEAD, signed links and the ops
# endpoints. musicctl imports, lists, resolves, reindexes, counts plays and verifies.
# Run by the uninstrumented release binaries, it is also the suite's check that the
# training still drives every path (tests/integration/pgo.rs).
set -euo pipefail
bin=$(cd "${1:?usage: pgo-train.sh BINDIR}" && pwd)
cd "$(dirname "$0")/.."
root=$PWD
for tool in redis-server wrk curl "$root/.tools/bin/mongod"; do
  command -v "$tool" >/dev/null || { scripts/install-deps.sh >/dev/null; break; }
done
long=${PGO_TRAIN_SECONDS:-3}
short=$(( (long + 2) / 3 ))
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rport=$(free_port)
mport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --logfile "$work/redis.log" &
pids+=($!)
mkdir -p "$work/db" "$work/media/many"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/k1.key"
"$root/.tools/bin/mongod" --dbpath "$work/db" --port "$mport" --bind_ip 127.0.0.1 --nounixsocket \
  --wiredTigerCacheSizeGB 0.25 --logpath "$work/mongod.log" &
pids+=($!)
python3 - "$work/media" <<'PY'
import random, sys
from pathlib import Path
media, rng = Path(sys.argv[1]), random.Random(7)
(media / "small.mp3").write_bytes(rng.randbytes(4096))
(media / "big.mp3").write_bytes(rng.randbytes(4 << 20))
for i in range(300):
    (media / "many" / f"f{i:03}.mp3").write_bytes(rng.randbytes(rng.randint(2048, 8192)))
PY
for _ in $(seq 200); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/"$mport") 2>/dev/null && break; sleep 0.1; done

config() { # NAME ACCESS_LOG_TABLE: a musicd.toml for this run
  cat >"$work/$1.toml" <<TOML
listen = "127.0.0.1:$port"
media_roots = ["$work/media"]
log_level = "warn"
[mongodb]
uri = "mongodb://127.0.0.1:$mport"
database = "train"
[redis]
url = "redis://127.0.0.1:$rport"
[signing]
keys = [{ id = "k1", secret_file = "$work/k1.key" }]
[access_log]
$2
TOML
}
port=$(free_port)
config logged "format = \"combined\"
path = \"$work/access.log\""
ctl=("$bin/musicctl" --config "$work/logged.toml")
"${ctl[@]}" import "$work/media" >"$work/imported.txt" 2>"$work/import.err" || {
  cat "$work/import.err" >&2; exit 1; }
small=$(awk -F'\t' '/small.mp3/ {print $1}' "$work/imported.txt")
big=$(awk -F'\t' '/big.mp3/ {print $1}' "$work/imported.txt")
awk -F'\t' '/\/many\// {print "/musicdb/" $1 "/x.mp3"}' "$work/imported.txt" >"$work/paths.txt"
[ -n "$small" ] && [ -n "$big" ] && [ -s "$work/paths.txt" ] || {
  echo "pgo-train: the import gave no ids" >&2; exit 1; }
"${ctl[@]}" reindex >/dev/null
"${ctl[@]}" list >/dev/null
"${ctl[@]}" resolve "$small" >/dev/null

# serve NAME: one daemon's share of the mix; it stops by SIGTERM, as under systemd, so it
# exits through main and writes its profile.
serve() {
  "$bin/musicd" --config "$work/$1.toml" run >"$work/$1.out" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local base=http://127.0.0.1:$port
  for _ in $(seq 300); do curl -sf -o /dev/null "$base/readyz" && break; sleep 0.1; done
  curl -sf -o /dev/null "$base/readyz" || { cat "$work/$1.out" >&2; exit 1; }
  local s=$base/musicdb/$small/a.mp3 b=$base/musicdb/$big/b.mp3
  wrk -t1 -c32 -d"$long"s "$s" >/dev/null
  PATHS=$work/paths.txt wrk -t1 -c32 -d"$long"s -s bench/lua/random_path.lua "$base" >/dev/null
  wrk -t1 -c4 -d"$short"s "$b" >/dev/null
  wrk -t1 -c4 -d"$short"s -H 'Range: bytes=1000-200000' "$b" >/dev/null
  local etag
  etag=$(curl -sfI "$s" | awk -F': ' 'tolower($1) == "etag" {print $2}' | tr -d '\r')
  wrk -t1 -c4 -d"$short"s -H "If-None-Match: $etag" "$s" >/dev/null
  wrk -t1 -c4 -d"$short"s "$base/musicdb/000000000000000000000000/x.mp3" >/dev/null
  local signed
  signed=$("${ctl[@]}" sign "$small" --base "$base" 2>/dev/null | tail -n 1) || true
  [ -n "$signed" ] && wrk -t1 -c4 -d"$short"s "$signed" >/dev/null
  curl -sfI -o /dev/null "$s"
  curl -sf -o /dev/null "$base/healthz"
  curl -s -o /dev/null "$base/metrics"
  kill -TERM "$pid"
  wait "$pid" || { echo "pgo-train: musicd ($1) did not stop cleanly" >&2; cat "$work/$1.out" >&2; exit 1; }
}
serve logged
port=$(free_port)
config quiet 'format = "off"'
serve quiet
"${ctl[@]}" plays "$work/access.log" >/dev/null
"${ctl[@]}" verify >/dev/null || true
"${ctl[@]}" health >/dev/null || true
# A mix that stopped reaching a path (a renamed option, a changed CLI) would train the
# build on less than it ships for: every kind of answer must be in the log.
for want in '" 200 ' '" 206 ' '" 304 ' '" 404 ' 'sig=[^ ]* HTTP/1.1" 200 '; do
  grep -Eq -- "$want" "$work/access.log" || { echo "pgo-train: no '$want' in the access log" >&2; exit 1; }
done
echo "pgo-train: done ($(wc -l <"$work/access.log") requests logged)"
