#!/usr/bin/env python3
"""Two running servers loaded at the same time, CPU per request compared round by round.

    bench/simultaneous.py SECONDS ROUNDS CONNS A B
    A, B: name=url=pid or name=url=pid=pathsfile (wrk picks a path of the file at random,
    bench/lua/random_path.lua)

Alternated rounds (bench/run.py) put two servers in different windows of time, and on a
shared machine a window's CPU per request moves by about 10 %: the difference of two
windows cannot resolve a cost of a few tenths of a microsecond, such as the access log's.
Here one wrk per server runs in the same window, so what the machine does to one it does
to the other. Each gets about half the machine, so absolute figures are higher than in
bench/run.py's cells; the difference is what this measures. Prints the median of B's CPU
per request minus A's and of B's throughput over A's, with 90 % bootstrap intervals.
Loopback only; each wrk run is bounded by SECONDS. The servers are the caller's to start
and stop (bench/results/cpu-per-request.md says how they were run).
"""
import os
import random
import re
import statistics
import subprocess
import sys

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime, every thread


def wrk(target, seconds, conns):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s"]
    env = dict(os.environ)
    if len(target) > 3:
        cmd += ["-s", os.path.join(os.path.dirname(__file__), "lua", "random_path.lua")]
        env["PATHS"] = target[3]
    return subprocess.Popen(cmd + [target[1]], env=env, stdout=subprocess.PIPE, text=True)


def interval(values):
    rng = random.Random(1)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(2000))
    return statistics.median(values), medians[100], medians[1899]


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    seconds, rounds, conns = (int(x) for x in sys.argv[1:4])
    targets = [arg.split("=", 3) for arg in sys.argv[4:6]]
    if any(len(t) < 3 for t in targets):
        sys.exit(__doc__)
    differences, ratios = [], []
    for r in range(rounds):
        before = [cpu_seconds(t[2]) for t in targets]
        runs = [wrk(t, seconds, conns) for t in targets]
        outputs = [run.communicate()[0] for run in runs]
        after = [cpu_seconds(t[2]) for t in targets]
        counts = [int(re.search(r"(\d+) requests in", out).group(1)) for out in outputs]
        per = [(after[i] - before[i]) / counts[i] * 1e6 for i in range(2)]
        differences.append(per[1] - per[0])
        ratios.append(counts[1] / counts[0])
        print(f"round {r}: " + "  ".join(
            f"{t[0]} {counts[i] / seconds:.0f}/s {per[i]:.2f} us" for i, t in enumerate(targets)),
            file=sys.stderr, flush=True)
    a, b = targets[0][0], targets[1][0]
    print("%s - %s CPU per request: %+.2f (%+.2f..%+.2f) us" % (b, a, *interval(differences)))
    print("%s / %s throughput: %.2f (%.2f-%.2f)" % (b, a, *interval(ratios)))


if __name__ == "__main__":
    main()
