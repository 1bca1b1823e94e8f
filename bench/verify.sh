#!/usr/bin/env bash
# musicctl verify over a large library, the shallow pass and --deep: files per second and
# peak memory.
#   bench/verify.sh [TRACKS] [ROUNDS]      (defaults: 100000 tracks, 3 rounds)
# Builds a library of TRACKS real files (one encoded mp3, m4a, flac and ogg, hard-linked
# under TRACKS names: each name is its own path to check), imports it, caches it, then
# times `musicctl verify --json` and `musicctl verify --deep --json` (catalogue, disk and
# cache) with the page cache warm.
# Starts its own redis-server and mongod on free loopback ports in a temp dir; writes
# bench/results/verify.md.
set -euo pipefail
n=${1:-100000}
rounds=${2:-3}

# shellcheck source=bench/lib/backends.sh
. "$(dirname "$0")/lib/backends.sh"

tone="sine=frequency=440:duration=10"
ffmpeg -hide_banner -loglevel error -f lavfi -i "$tone" -c:a libmp3lame -b:a 192k "$work/src/a.mp3"
ffmpeg -hide_banner -loglevel error -f lavfi -i "$tone" -c:a aac -b:a 128k -movflags +faststart "$work/src/a.m4a"
ffmpeg -hide_banner -loglevel error -f lavfi -i "$tone" -c:a flac "$work/src/a.flac"
ffmpeg -hide_banner -loglevel error -f lavfi -i "$tone" -c:a libvorbis "$work/src/a.ogg"
exts=(mp3 m4a flac ogg)
for i in $(seq 0 $((n - 1))); do
  dir="$work/music/$((i / 1000))"
  [ $((i % 1000)) = 0 ] && mkdir -p "$dir"
  ext=${exts[$((i % 4))]}
  ln "$work/src/a.$ext" "$dir/t$i.$ext"
done
$ctl import "$work/music" >/dev/null 2>&1
$ctl reindex >/dev/null

run() { # LABEL FLAGS: medians of ROUNDS runs of verify FLAGS, as a table row
  local label=$1 flags=$2
  local -a times=() mems=() rates=()
  for r in $(seq "$rounds"); do
    read -r t m < <(measure "$ctl verify $flags --json > $work/verify.json")
    checked=$(python3 -c "import json;print(json.load(open('$work/verify.json'))['checked'])")
    found=$(python3 -c "import json;print(len(json.load(open('$work/verify.json'))['findings']))")
    [ "$checked" = "$n" ] || { echo "verify checked $checked of $n" >&2; exit 1; }
    [ "$found" = 0 ] || { echo "verify found $found findings in a clean library" >&2; exit 1; }
    times+=("$t"); mems+=("$m"); rates+=("$(python3 -c "print(round($n/$t))")")
    echo "round $r verify $flags: ${t}s ${m} MiB" >&2
  done
  echo "| $label | $(printf '%s\n' "${times[@]}" | median) | $(printf '%s\n' "${rates[@]}" | median) (spread $(printf '%s\n' "${rates[@]}" | sort -n | head -1)-$(printf '%s\n' "${rates[@]}" | sort -n | tail -1)) | $(printf '%s\n' "${mems[@]}" | median) |"
}
shallow=$(run "\`musicctl verify\` (catalogue + disk + cache)" "")
deep=$(run "\`musicctl verify --deep\` (every file demuxed to its end)" "--deep")
mkdir -p bench/results
{
  echo "# musicctl verify"
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores; $n tracks (10 s mp3, m4a, flac, ogg hard-linked under $n names), every one imported and cached; page cache warm; medians of $rounds rounds."
  echo
  echo "| task | wall time (s) | files/s | peak RSS (MiB) |"
  echo "|---|---|---|---|"
  echo "$shallow"
  echo "$deep"
} | tee bench/results/verify.md
