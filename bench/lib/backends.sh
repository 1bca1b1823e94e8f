# Sourced by bench/admin.sh and bench/verify.sh: a private redis-server and mongod on free
# loopback ports in a temp dir ($work, removed on exit), a musicd.toml for them
# ($work/musicd.toml, media under $work/music), `measure` and `median`.
# Works from the checkout. Sets: root, bin, seed, work, rport, mport, ctl (musicctl with
# that config). Installs what is missing and builds the release binaries first.

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
scripts/install-deps.sh >/dev/null
cargo build --release --locked --bins --example seed 2>&1 | tail -n 1
seed=$root/target/release/examples/seed
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time >/dev/null; }
bin=$root/target/release
work=$(mktemp -d)
cleanup() {
  [ -n "${redis_pid:-}" ] && kill "$redis_pid" 2>/dev/null
  [ -n "${mongo_pid:-}" ] && kill "$mongo_pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port); mport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
mkdir -p "$work/db" "$work/music" "$work/src"
"$root/.tools/bin/mongod" --dbpath "$work/db" --port "$mport" --bind_ip 127.0.0.1 --nounixsocket \
  --wiredTigerCacheSizeGB 1 --logpath "$work/mongod.log" &
mongo_pid=$!
for _ in $(seq 200); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$mport") 2>/dev/null && break; sleep 0.1; done
cat >"$work/musicd.toml" <<TOML
media_roots = ["$work/music"]
[mongodb]
uri = "mongodb://127.0.0.1:$mport"
database = "bench"
[redis]
url = "redis://127.0.0.1:$rport"
TOML
ctl="$bin/musicctl --config $work/musicd.toml"

# measure COMMAND: wall seconds and peak RSS (MiB) of the command and its children; a
# failing command stops the bench with its error output.
measure() {
  local out=$work/time.txt
  /usr/bin/time -f '%e %M' -o "$out" bash -c "$1" >/dev/null 2>"$work/err.txt" || { cat "$work/err.txt" >&2; exit 1; }
  read -r secs kb <"$out"
  echo "$secs $((kb / 1024))"
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
