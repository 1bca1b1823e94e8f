#!/usr/bin/env python3
"""A generated day of access-log lines for `bench/plays.sh`: listeners over a catalogue
with Zipf popularity, each listen a probe, one to four ranges (some skipped early), a few
seeks back, HEADs, 304s, bots and health checks between them, in time order.

    plays_gen.py LINES TRACKS LISTENERS OUT.log FACTS.jsonl [--format combined|json] [--days N]

Deterministic (seeded), so two runs count the same plays.
"""

import bisect
import json
import random
import sys

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
DAY0 = 1_796_083_200  # 2026-12-01 00:00 UTC
AGENTS = [
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
    "AppleCoreMedia/1.0.0.22B83 (iPhone; U; CPU OS 18_1 like Mac OS X; en_us)",
    "VLC/3.0.21 LibVLC/3.0.21",
    "Dalvik/2.1.0 (Linux; U; Android 14; Pixel 8 Build/AP2A.240905.003) ExoPlayer/2.19.1",
]
BOTS = ["Googlebot/2.1 (+http://www.google.com/bot.html)", "UptimeRobot/2.0"]


def main():
    lines, tracks, listeners, out_path, facts_path = sys.argv[1:6]
    fmt = "json" if "--format" in sys.argv and sys.argv[sys.argv.index("--format") + 1] == "json" else "combined"
    lines, tracks, listeners = int(lines), int(tracks), int(listeners)
    days = int(sys.argv[sys.argv.index("--days") + 1]) if "--days" in sys.argv else 1
    rng = random.Random(7)
    ids = ["%024x" % (0x6B0DC37D3BA0D873DEAC0000 + n) for n in range(tracks)]
    sizes = []
    with open(facts_path, "w") as facts:
        for track_id in ids:
            seconds = rng.randint(20, 420)
            size = 1_500 + seconds * 40_000
            sizes.append(size)
            facts.write(json.dumps({"id": track_id, "size": size, "bitrate": 320_000,
                                    "duration": float(seconds), "audio_offset": 1_500}) + "\n")
    # Zipf over tracks by a cumulative table.
    weights = [1.0 / (rank + 1) for rank in range(tracks)]
    cumulative, total = [], 0.0
    for weight in weights:
        total += weight
        cumulative.append(total)
    clients = ["10.%d.%d.%d" % (n >> 16 & 255, n >> 8 & 255, n & 255) for n in range(listeners)]
    agents = [AGENTS[n % len(AGENTS)] for n in range(listeners)]
    stamps = {}

    def clf(second):
        stamp = stamps.get(second)
        if stamp is None:
            day, rest = divmod(second - DAY0, 86_400)
            stamp = "%02d/Dec/2026:%02d:%02d:%02d +0000" % (1 + day, rest // 3600, rest // 60 % 60, rest % 60)
            stamps[second] = stamp
        return stamp

    # Every event: (second, line). Listens are drawn until the day holds enough lines, then
    # sorted by time (a server writes them about in order).
    events = []
    per_second = lines / 86_400.0 / days
    while len(events) < lines:
        listener = rng.randrange(listeners)
        track = bisect.bisect_left(cumulative, rng.random() * total)
        size = sizes[track]
        start = DAY0 + int(rng.random() * 86_400 * days)
        client, agent = clients[listener], agents[listener]
        path = "/musicdb/%s/track.mp3" % ids[track]
        kind = rng.random()
        requests = []
        if kind < 0.02:
            requests.append((start, "HEAD", path, 200, 0, None, agent))
        elif kind < 0.04:
            requests.append((start, "GET", path, 304, 0, None, agent))
        elif kind < 0.05:
            requests.append((start, "GET", path, 200, size, None, BOTS[listener % 2]))
        elif kind < 0.06:
            requests.append((start, "GET", "/healthz", 200, 15, None, "kube-probe/1.30"))
        else:
            requests.append((start, "GET", path, 206, 2, (0, 1), agent))
            offset, at = 0, start
            for _ in range(rng.randint(1, 4)):
                if offset >= size:
                    break
                take = min(size - offset, rng.randint(40_000, 1_600_000))
                requests.append((at, "GET", path, 206, take, (offset, offset + take - 1), agent))
                at += max(1, take // 40_000)
                offset += take
                if rng.random() < 0.1:
                    offset = rng.randrange(0, max(1, offset))
        for second, method, target, status, sent, asked, who in requests:
            events.append((second, client, method, target, status, sent, asked, who))
    events.sort(key=lambda e: e[0])
    del events[lines:]
    with open(out_path, "w", buffering=1 << 20) as out:
        write = out.write
        for second, client, method, target, status, sent, asked, who in events:
            if fmt == "combined":
                write('%s - - [%s] "%s %s HTTP/1.1" %d %d "-" "%s"\n'
                      % (client, clf(second), method, target, status, sent, who))
            else:
                day, rest = divmod(second - DAY0, 86_400)
                write(json.dumps({
                    "time": "2026-12-%02dT%02d:%02d:%02dZ" % (1 + day, rest // 3600, rest // 60 % 60, rest % 60),
                    "client": client, "method": method, "path": target, "query": "",
                    "status": status, "bytes": sent,
                    "range": "bytes=%d-%d" % asked if asked else "",
                    "user_agent": who,
                }) + "\n")
    print("%d lines, %.0f per second of the day" % (len(events), per_second), file=sys.stderr)


if __name__ == "__main__":
    main()
