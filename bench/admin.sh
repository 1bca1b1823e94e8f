#!/usr/bin/env bash
# musicctl purge and reindex at scale, side by side with the shell pipeline they replace.
#   bench/admin.sh [KEYS] [ROUNDS]      (defaults: 1000000 keys/documents, 3 rounds)
# Starts its own redis-server and mongod on free loopback ports in a temp dir, prints a
# markdown table of medians, and writes it to bench/results/admin.md.
set -euo pipefail
n=${1:-1000000}
rounds=${2:-3}

# shellcheck source=bench/lib/backends.sh
. "$(dirname "$0")/lib/backends.sh"

files=()
for i in $(seq 1000); do f="$work/music/t$i.mp3"; printf x >"$f"; files+=("$f"); done

declare -a ours_t ours_m theirs_t theirs_m re_t re_m re_rate
for r in $(seq "$rounds"); do
  "$seed" redis "redis://127.0.0.1:$rport" track_ "$n"
  read -r t m < <(measure "$ctl purge 'track_*'")
  [ "$(redis-cli -p "$rport" dbsize)" = 0 ] || { echo "musicctl purge left keys"; exit 1; }
  ours_t+=("$t"); ours_m+=("$m")
  "$seed" redis "redis://127.0.0.1:$rport" track_ "$n"
  read -r t m < <(measure "redis-cli -p $rport --scan --pattern 'track_*' | xargs -d '\n' redis-cli -p $rport UNLINK")
  [ "$(redis-cli -p "$rport" dbsize)" = 0 ] || { echo "xargs pipeline left keys"; exit 1; }
  theirs_t+=("$t"); theirs_m+=("$m")
  echo "round $r purge: musicctl ${ours_t[-1]}s ${ours_m[-1]} MiB, redis-cli|xargs ${theirs_t[-1]}s ${theirs_m[-1]} MiB" >&2
done

"$seed" mongo "mongodb://127.0.0.1:$mport" bench tracks "$n" "${files[@]}"
for r in $(seq "$rounds"); do
  redis-cli -p "$rport" flushall >/dev/null
  read -r t m < <(measure "$ctl reindex --json > $work/reindex.json")
  indexed=$(python3 -c "import json;print(json.load(open('$work/reindex.json'))['indexed'])")
  [ "$indexed" = "$n" ] || { echo "reindex indexed $indexed of $n"; exit 1; }
  re_t+=("$t"); re_m+=("$m"); re_rate+=("$(python3 -c "print(round($n/$t))")")
  echo "round $r reindex: ${t}s ${m} MiB" >&2
done

mo_t=$(printf '%s\n' "${ours_t[@]}" | median); th_t=$(printf '%s\n' "${theirs_t[@]}" | median)
mo_m=$(printf '%s\n' "${ours_m[@]}" | median); th_m=$(printf '%s\n' "${theirs_m[@]}" | median)
r_t=$(printf '%s\n' "${re_t[@]}" | median); r_m=$(printf '%s\n' "${re_m[@]}" | median)
r_rate=$(printf '%s\n' "${re_rate[@]}" | median)
mkdir -p bench/results
{
  echo "# musicctl at scale"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(redis-server --version | awk '{print $3}'), mongod $("$root/.tools/bin/mongod" --version | awk 'NR==1 {print $3}'); medians of $rounds rounds, $n keys/documents."
  echo
  echo "| task | wall time (s) | peak RSS (MiB) | notes |"
  echo "|---|---|---|---|"
  echo "| \`musicctl purge 'track_*'\` | $mo_t | $mo_m | SCAN COUNT 1000 + UNLINK 1000 keys per round trip |"
  echo "| \`redis-cli --scan --pattern 'track_*' \\| xargs -d '\\n' redis-cli UNLINK\` | $th_t | $th_m | the shell pipeline it replaces |"
  echo "| ratio (pipeline / musicctl) | $(python3 -c "print(round($th_t/$mo_t, 2))") | | > 1 means musicctl is faster |"
  echo "| \`musicctl reindex\` | $r_t | $r_m | $r_rate documents/s, 1000 files on disk |"
} | tee bench/results/admin.md
