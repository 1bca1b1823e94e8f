#!/usr/bin/env python3
"""5,000 concurrent keep-alive connections against musicd (bench/connections.sh).

A mix of small files, a 4 MiB file and bad ids (invalid and unknown) for SOAK_SECONDS
(default 30) with wrk; reports requests, socket errors, non-2xx answers (the bad ids, by
design), p99 latency and musicd's peak RSS. Loopback only, bounded in time.
"""

import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import run as bench  # noqa: E402  (shares the process helpers of bench/run.py)

CONNS = int(os.environ.get("SOAK_CONNECTIONS", "5000"))
SECONDS = int(os.environ.get("SOAK_SECONDS", "30"))


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    work = Path(tempfile.mkdtemp(prefix="musicd-soak-"))
    media = work / "media"
    media.mkdir()
    rnd = random.Random(7)
    for i in range(50):
        (media / f"s{i}.mp3").write_bytes(rnd.randbytes(rnd.randint(2048, 16384)))
    (media / "big.mp3").write_bytes(rnd.randbytes(4 * 1024 * 1024))
    rport, mport, port = bench.free_port(), bench.free_port(), bench.free_port()
    bench.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(work), "--logfile", str(work / "redis.log")])
    (work / "db").mkdir()
    bench.start([str(bench.ROOT / ".tools/bin/mongod"), "--dbpath", str(work / "db"), "--port", str(mport),
                 "--bind_ip", "127.0.0.1", "--nounixsocket", "--wiredTigerCacheSizeGB", "0.25",
                 "--logpath", str(work / "mongod.log")])
    bench.wait_port(rport)
    bench.wait_port(mport)
    cfg = work / "musicd.toml"
    cfg.write_text(f'listen = "127.0.0.1:{port}"\nmedia_roots = ["{media}"]\nlog_level = "warn"\n'
                   f'[mongodb]\nuri = "mongodb://127.0.0.1:{mport}"\n[redis]\nurl = "redis://127.0.0.1:{rport}"\n'
                   f'[limits]\nmax_connections = {CONNS + 1000}\n')
    out = subprocess.run([str(bench.REL / "musicctl"), "--config", str(cfg), "import", str(media)],
                         capture_output=True, text=True, check=True).stdout
    ids = {Path(p).name: i for i, p in (l.split("\t") for l in out.splitlines())}
    musicd = bench.start([str(bench.REL / "musicd"), "--config", str(cfg), "run"])
    bench.wait_port(port)
    paths = [f"/musicdb/{ids[f's{i}.mp3']}/a.mp3" for i in range(50)] * 16
    paths += [f"/musicdb/{ids['big.mp3']}/big.mp3"] * 2
    paths += ["/musicdb/not-an-id/x.mp3"] * 40 + ["/musicdb/0123456789abcdef01234567/x.mp3"] * 40
    (work / "paths.txt").write_text("".join(p + "\n" for p in paths))
    env = dict(os.environ, PATHS=str(work / "paths.txt"))
    cmd = ["wrk", "-t2", f"-c{CONNS}", f"-d{SECONDS}s", "--latency", "--timeout", "10s",
           "-s", str(bench.ROOT / "bench/lua/random_path.lua"), f"http://127.0.0.1:{port}"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=SECONDS + 120).stdout
    status = Path(f"/proc/{musicd.pid}/status").read_text()
    peak = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) // 1024
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) // 1024
    print(result)
    requests = re.search(r"(\d+) requests in", result)
    p99 = re.search(r"99%\s+(\S+)", result)
    sock = re.search(r"Socket errors: (.*)", result)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", result)
    expected_bad = 80 / len(paths)
    print(f"soak: {CONNS} connections for {SECONDS}s (fd limit {hard}): "
          f"{requests.group(1) if requests else '?'} requests, p99 {p99.group(1) if p99 else '?'}, "
          f"socket errors: {sock.group(1) if sock else 'none'}, non-2xx {non2xx.group(1) if non2xx else 0} "
          f"(bad ids are {expected_bad:.0%} of requests by design), musicd RSS {rss} MiB (peak {peak} MiB)")
    ok = not sock and peak < 128
    bench.stop_all()
    time.sleep(0.2)
    subprocess.run(["rm", "-rf", str(work)])
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    try:
        main()
    finally:
        bench.stop_all()
