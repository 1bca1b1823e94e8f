"""A day of traffic against a cold musicd: `musicctl replay` of a generated day-shaped log
(100,000 tracks, Zipf popularity, whole plays, abandons, ranges, unknown ids) with Redis
empty and musicd just started, compressed by --speed into a minute or so. Reports what
listeners saw (TTFB of first plays included) and what it cost the backends: Redis and
MongoDB queries per second, from musicd's /metrics.

    bench/replay.sh        (REPLAY_REQUESTS=60000 REPLAY_SPEED=1440 by default)

Writes bench/results/replay.md. Loopback only; bounded in time.
"""
import gzip
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run  # noqa: E402

TRACKS = 100_000
REQUESTS = int(os.environ.get("REPLAY_REQUESTS", "60000"))
SPEED = float(os.environ.get("REPLAY_SPEED", "1440"))
FILES = 20
FILE_BYTES = 1_000_000
DAY = 86_400


def day_time(rnd):
    """A second of the day, busier in the evening than at night (rejection sampling)."""
    while True:
        t = rnd.uniform(0, DAY)
        rate = 1 + 0.8 * math.sin(2 * math.pi * (t / DAY - 0.375))
        if rnd.uniform(0, 1.8) < rate:
            return t


def id_cache(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'musicd_id_cache_total\{outcome="(\w+)"\} (\S+)', text)}


def main():
    work = Path(tempfile.mkdtemp(prefix="musicd-replay-"))
    media = work / "media"
    media.mkdir()
    rnd = random.Random(11)
    files = []
    for i in range(FILES):
        path = media / f"f{i:02}.mp3"
        path.write_bytes(rnd.randbytes(FILE_BYTES))
        files.append(str(path))
    os.chmod(work, 0o755)
    rport, mport = run.backends(work)
    port = run.free_port()
    config = work / "musicd.toml"
    config.write_text(
        f'listen = "127.0.0.1:{port}"\nmedia_roots = ["{media}"]\nlog_level = "warn"\n'
        f'[mongodb]\nuri = "mongodb://127.0.0.1:{mport}"\ndatabase = "day"\n'
        f'[redis]\nurl = "redis://127.0.0.1:{rport}"\n'
        f'[access_log]\nformat = "combined"\npath = "{work}/musicd-access.log"\n')
    subprocess.run([str(run.REL / "examples/seed"), "mongo", f"mongodb://127.0.0.1:{mport}", "day", "tracks",
                    str(TRACKS), *files], check=True, capture_output=True)
    listed = subprocess.run([str(run.REL / "musicctl"), "--config", str(config), "list"],
                            capture_output=True, text=True, check=True).stdout
    ids = [line.split("\t")[0] for line in listed.splitlines()]
    rnd.shuffle(ids)
    # Zipf, s = 1: the k-th most played track is played 1/k as often as the first.
    cumulative = []
    total = 0.0
    for k in range(1, len(ids) + 1):
        total += 1 / k
        cumulative.append(total)
    kinds = {"whole": 0, "abandoned": 0, "range": 0, "unknown": 0}
    lines = []
    for _ in range(REQUESTS):
        t = day_time(rnd)
        track = rnd.choices(ids, cum_weights=cumulative)[0]
        roll = rnd.random()
        status, size, range_ = 200, FILE_BYTES, ""
        if roll < 0.05:
            kinds["unknown"] += 1
            track, status, size = f"{rnd.getrandbits(96):024x}", 404, 60
        elif roll < 0.15:
            kinds["range"] += 1
            start = rnd.randrange(FILE_BYTES)
            status, size, range_ = 206, FILE_BYTES - start, f"bytes={start}-"
        elif roll < 0.35:
            kinds["abandoned"] += 1
            size = rnd.randrange(1, FILE_BYTES)
        else:
            kinds["whole"] += 1
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(1_796_083_200 + t)) + f".{int(t * 1000) % 1000:03}Z"
        lines.append((t, json.dumps({"time": stamp, "client": "10.0.0.1", "method": "GET",
                                     "path": f"/musicdb/{track}/song.mp3", "query": "", "protocol": "HTTP/1.1",
                                     "status": status, "bytes": size, "latency_ms": 1.0, "ttfb_ms": 1.0,
                                     "cache": "-", "range": range_, "user_agent": "", "referer": "",
                                     "request_id": "-", "complete": True})))
    lines.sort()
    log = work / "day.json.gz"
    with gzip.open(log, "wt") as out:
        out.writelines(line + "\n" for _, line in lines)
    musicd = run.start([str(run.REL / "musicd"), "--config", str(config), "run"])
    run.wait_port(port)
    url = f"http://127.0.0.1:{port}"
    before = id_cache(url)
    cpu_before = run.cpu_ticks([musicd.pid])
    out = subprocess.run([str(run.REL / "musicctl"), "--config", str(config), "replay", str(log), "--target", url,
                          "--speed", str(SPEED), "--json", "--report", str(work / "replay.html")],
                         capture_output=True, text=True, timeout=DAY / SPEED + 300)
    try:
        report = json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"musicctl replay failed: {out.stdout}{out.stderr}")
    cpu = (run.cpu_ticks([musicd.pid]) - cpu_before) / run.TICK
    after = id_cache(url)
    spent = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    seconds = report["duration_s"]
    redis_qps = (spent.get("hit", 0) + spent.get("miss", 0) + spent.get("negative", 0)) / seconds
    mongo_qps = spent.get("miss", 0) / seconds
    p = lambda d: f"p50 {d['p50']:.1f}, p90 {d['p90']:.1f}, p99 {d['p99']:.1f}, max {d['max']:.1f}"
    text = "\n".join([
        "# A day of traffic against a cold musicd", "",
        f"{time.strftime('%Y-%m-%d')}. The machine: {run.machine()}.", "",
        f"`bench/replay.sh`: {REQUESTS:,} requests spread over a day (busier in the evening), "
        f"Zipf (s = 1) over {TRACKS:,} tracks, {kinds['whole']:,} whole plays, {kinds['abandoned']:,} "
        f"abandoned, {kinds['range']:,} ranges, {kinds['unknown']:,} unknown ids; replayed with "
        f"`musicctl replay --speed {SPEED:g}` (a day in {DAY / SPEED:.0f} s) against musicd just started with "
        "Redis empty; access log on.", "",
        "| figure | value |", "|---|---|",
        f"| requests | {report['requests']:,} |",
        f"| statuses (the log's) | {report['statuses']} ({report['log_statuses']}) |",
        f"| errors | {report['errors'] or 0} |",
        f"| duration | {seconds:.1f} s |",
        f"| latency ms | {p(report['latency_ms'])} |",
        f"| time to first byte ms | {p(report['ttfb_ms'])} |",
        f"| time to first byte of first plays ms | {p(report['first_play_ttfb_ms'])} |",
        f"| id lookups by outcome | {', '.join(f'{k} {v:,.0f}' for k, v in sorted(spent.items()))} |",
        f"| Redis queries per second | {redis_qps:,.0f} |",
        f"| MongoDB queries per second | {mongo_qps:,.0f} |",
        f"| musicd CPU | {cpu:.1f} s ({cpu / seconds * 100:.0f} % of a core) |",
    ]) + "\n"
    (run.ROOT / "bench" / "results" / "replay.md").write_text(text)
    print(text)
    run.shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run.run_main(main)
