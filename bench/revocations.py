#!/usr/bin/env python3
"""For bench/revoke.sh.

    revocations.py SESSIONS            Redis protocol adding SESSIONS revoked sessions
                                       (for `redis-cli --pipe`), each for a day.
    revocations.py --report ROUNDS SESSIONS RSS_EMPTY_KIB RSS_FULL_KIB DELTA...
                                       the results page: the median paired difference in
                                       CPU per request with a 90 % bootstrap interval, and
                                       the set's memory.
"""

import datetime
import random
import statistics
import sys
import time


def command(*parts):
    out = ["*%d\r\n" % len(parts)]
    for part in parts:
        part = str(part)
        out.append("$%d\r\n%s\r\n" % (len(part.encode()), part))
    return "".join(out)


def protocol(sessions):
    until = int(time.time()) + 86400
    batch = 1000
    for start in range(0, sessions, batch):
        args = ["ZADD", "track_revoked"]
        for n in range(start, min(sessions, start + batch)):
            args += [until, "sid:revoked-session-%08d" % n]
        sys.stdout.write(command(*args))


def report(rounds, sessions, empty_kib, full_kib, deltas):
    median = statistics.median(deltas)
    boot = sorted(statistics.median(random.choices(deltas, k=len(deltas))) for _ in range(2000))
    low, high = boot[int(0.05 * len(boot))], boot[int(0.95 * len(boot)) - 1]
    print("# Links that name their listener: what they cost\n")
    print(f"`bench/revoke.sh {rounds} {sessions}` on {datetime.date.today()}: musicd (release) serving one")
    print("4 KiB track, signing required, wrk -t1 -c32 for 4 s a round. CPU per request is musicd's")
    print("user + system time over the requests wrk counted; the two links alternate round by round.\n")
    print("| | value |")
    print("|---|---|")
    print(f"| CPU per request with `sid` minus without, {sessions:,} sessions revoked (median of {rounds} paired rounds, 90 % bootstrap interval) | {median:+.3f} µs ({low:+.3f} to {high:+.3f}) |")
    print(f"| musicd RSS holding no revocation | {empty_kib / 1024:.1f} MiB |")
    print(f"| musicd RSS holding {sessions:,} revoked sessions | {full_kib / 1024:.1f} MiB |")
    print(f"| the set's cost | {(full_kib - empty_kib) / 1024:.1f} MiB |")


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        rounds, sessions, empty, full = (int(x) for x in sys.argv[2:6])
        report(rounds, sessions, empty, full, [float(x) for x in sys.argv[6:]])
    else:
        protocol(int(sys.argv[1]))
