#!/usr/bin/env bash
# musicctl plays over a generated day of access-log lines: lines per second on one core
# from a warm page cache, and peak memory; then two days at the same daily rate, to show
# that memory follows the windows open at once, not the lines read.
#   bench/plays.sh [LINES_PER_DAY] [ROUNDS]      (defaults: 10000000 lines, 3 rounds)
# The logs (bench/plays_gen.py: 100,000 tracks, 500,000 listeners, Zipf popularity,
# probes, ranges, skips, seeks back, HEADs, 304s, bots, health checks) are generated once
# under $PLAYS_WORK (default /tmp/musicd-plays-bench) and kept for the next run.
# Writes bench/results/plays.md.
set -euo pipefail
lines=${1:-10000000}
rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=${PLAYS_WORK:-/tmp/musicd-plays-bench}
mkdir -p "$work"
cargo build --release --quiet --bin musicctl --manifest-path "$root/Cargo.toml"
ctl="$root/target/release/musicctl"
gen="python3 $root/bench/plays_gen.py"

day="$work/day-$lines.log"
two="$work/two-days-$lines.log"
json="$work/day-$lines.json"
facts="$work/facts.jsonl"
[ -s "$day" ] || $gen "$lines" 100000 500000 "$day" "$facts"
[ -s "$two" ] || $gen $((lines * 2)) 100000 500000 "$two" "$facts" --days 2
[ -s "$json" ] || $gen $((lines / 10)) 100000 500000 "$json" "$facts" --format json
[ -s "$day.gz" ] || gzip -1 -c "$day" > "$day.gz"

run() { # LABEL LOG LINES: the median of ROUNDS runs on one core, as a table row
  local label=$1 log=$2 n=$3
  local -a secs=() mems=() cpus=()
  cat "$log" > /dev/null # the page cache, warm
  for _ in $(seq "$rounds"); do
    /usr/bin/time -f "%e %M %U %S" -o "$work/time" \
      taskset -c 0 "$ctl" plays "$log" --facts "$facts" --json > "$work/report.json"
    read -r wall kb user sys < "$work/time"
    secs+=("$wall"); mems+=("$kb"); cpus+=("$(echo "$user + $sys" | bc)")
  done
  median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
  local wall mem cpu
  wall=$(median "${secs[@]}"); mem=$(median "${mems[@]}"); cpu=$(median "${cpus[@]}")
  python3 - "$label" "$n" "$wall" "$mem" "$cpu" "$work/report.json" <<'EOF'
import json, sys
label, n, wall, kb, cpu, report = sys.argv[1:]
r = json.load(open(report))
assert r["lines"] == int(n), (r["lines"], n)
print("| %s | %s | %.2f | %.0f | %.2f | %d | %s | %s | %s |" % (
    label, f"{int(n):,}", float(wall), int(n) / float(wall), float(cpu),
    int(kb) // 1024, f"{r['most_open_windows']:,}", f"{r['plays']:,}", f"{r['listeners']:,}"))
EOF
}

{
  echo "# musicctl plays: lines per second and memory"
  echo
  echo "\`bench/plays.sh $lines $rounds\` on $(date -u +%Y-%m-%d), $(nproc) cores, pinned to one"
  echo "(\`taskset -c 0\`), page cache warm; medians of $rounds runs. Facts from a file"
  echo "(\`--facts\`, 100,000 tracks), default rules (rolling window, 30 s)."
  echo
  echo "| log | lines | wall s | lines/s | CPU s | peak RSS MiB | most open windows | plays | listeners |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
  run "combined, 1 day" "$day" "$lines"
  run "combined, 2 days (same daily rate)" "$two" $((lines * 2))
  run "combined, 1 day, gzip" "$day.gz" "$lines"
  run "musicd JSON, 1/10 day" "$json" $((lines / 10))
} | tee "$root/bench/results/plays.md.new"
mv "$root/bench/results/plays.md.new" "$root/bench/results/plays.md"
