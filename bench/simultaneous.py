#!/usr/bin/env python3
"""Two running servers loaded at the same time, CPU per request compared round by round.

    bench/simultaneous.py SECONDS ROUNDS CONNS A B
    A, B: name=url=pid or name=url=pid=pathsfile (wrk picks a path of the file at random,
    bench/lua/random_path.lua)

The measure `bench/run.py` takes of the access log in its logged cells (`at_once`: why
alternated rounds cannot resolve a few tenths of a microsecond), for any two servers the
caller started and stops (bench/results/cpu-per-request.md says how they were run). Prints
the median of B's CPU per request minus A's and of B's throughput over A's, with 90 %
bootstrap intervals. Loopback only; each wrk run is bounded by SECONDS. The two go first
in turn, round by round.
"""
import sys

import run


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    seconds, rounds, conns = (int(x) for x in sys.argv[1:4])
    parts = [arg.split("=", 3) for arg in sys.argv[4:6]]
    if any(len(p) < 3 for p in parts):
        sys.exit(__doc__)
    targets = [(p[0], (p[1], [int(p[2])], "random_path.lua" if len(p) > 3 else None, p[3] if len(p) > 3 else None))
               for p in parts]
    (a, _), (b, _) = targets
    differences, ratios = [], []
    for r in range(rounds):
        figures = run.at_once(run.in_turn(targets, r), conns, seconds)
        differences.append(figures[b]["cpu_us_req"] - figures[a]["cpu_us_req"])
        ratios.append(figures[b]["rps"] / figures[a]["rps"] if figures[a]["rps"] else float("nan"))
        print(f"round {r}: " + "  ".join(f"{label} {f['rps']:.0f}/s {f['cpu_us_req']:.2f} us"
                                         for label, f in figures.items()), file=sys.stderr, flush=True)
    low, mid, high = run.interval(differences)
    print(f"{b} - {a} CPU per request: {mid:+.2f} ({low:+.2f}..{high:+.2f}) us")
    low, mid, high = run.interval(ratios)
    print(f"{b} / {a} throughput: {mid:.2f} ({low:.2f}-{high:.2f})")


if __name__ == "__main__":
    main()
