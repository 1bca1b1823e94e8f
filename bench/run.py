#!/usr/bin/env python3
"""musicd vs nginx with wrk, side by side in one run (called by bench/run.sh).

Starts private redis-server, mongod, nginx and three musicd instances (direct mode, direct
mode without the in-memory file cache, x-accel-redirect mode behind nginx) on free
loopback ports, over one generated media directory. Each cell runs wrk against nginx and
musicd alternately, BENCH_ROUNDS times for BENCH_SECONDS each, and reports medians,
the musicd/nginx ratio, p99 latency, errors, and server CPU from /proc per request and
per GB. Everything is torn down at exit.
"""

import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REL = ROOT / "target" / "release"
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
# Five rounds: on this shared machine one 5 s round of a cell moves by up to 40 %, and
# three left ratios near 1 to chance.
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
# Each target of a cell first runs this long, not counted: the first round after another
# server ran was the slow one (caches, CPU frequency, the server's own warm-up).
WARMUP = int(os.environ.get("BENCH_WARMUP_SECONDS", "1"))
# "|"-separated substrings of cell names (names contain commas) to run (all by default); a partial run prints
# its table but does not replace the committed results file.
ONLY = [c for c in os.environ.get("BENCH_CELLS", "").split("|") if c]
# Also run h2o and lighttpd (Debian packages) in the cells that have peers (BENCH_PEERS=0: not).
PEERS = os.environ.get("BENCH_PEERS", "1") != "0"
# Another musicd build (e.g. the last commit's) to measure against in the same run: every
# direct-mode cell then also runs it, alternated with the others, and a second table gives
# this build's ratio to it.
BASELINE_BIN = os.environ.get("BENCH_BASELINE_BIN")
TICK = os.sysconf("SC_CLK_TCK")
procs = []
leftovers = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
    procs.append(p)
    return p


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"nothing listens on {port}")


def cpu_ticks(pids):
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except OSError:
            pass
    return total


def children(pid):
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def size(text):
    m = re.match(r"([\d.]+)([KMGT]?B)", text)
    return float(m.group(1)) * UNITS[m.group(2)] if m else 0.0


def latency_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    if not m:
        return float("nan")
    return float(m.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[m.group(2)]


def wrk(url, conns, pids, script=None, paths=None, seconds=SECONDS):
    threads = min(2, conns)
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--latency", "--timeout", "5s"]
    env = dict(os.environ)
    if script:
        cmd += ["-s", str(ROOT / "bench" / "lua" / script)]
        env["PATHS"] = str(paths)
    before = cpu_ticks(pids)
    out = subprocess.run(cmd + [url], capture_output=True, text=True, env=env, timeout=seconds + 60).stdout
    cpu = (cpu_ticks(pids) - before) / TICK
    m = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+\w+) read", out)
    requests, read = (int(m.group(1)), size(m.group(2))) if m else (0, 0.0)
    p99 = re.search(r"99%\s+(\S+)", out)
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors += int(non2xx.group(1)) if non2xx else 0
    return {
        "rps": requests / seconds,
        "mbps": read / seconds / 1e6,
        "p99": latency_ms(p99.group(1)) if p99 else float("nan"),
        "errors": errors,
        "cpu_us_req": cpu / requests * 1e6 if requests else float("nan"),
        "cpu_s_gb": cpu / (read / 1e9) if read else float("nan"),
    }


def backends(work):
    """A private redis-server and mongod under `work`, listening: their ports."""
    rport, mport = free_port(), free_port()
    start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
           "--dir", str(work), "--logfile", str(work / "redis.log")])
    (work / "db").mkdir()
    start([str(ROOT / ".tools/bin/mongod"), "--dbpath", str(work / "db"), "--port", str(mport), "--bind_ip",
           "127.0.0.1", "--nounixsocket", "--wiredTigerCacheSizeGB", "0.5", "--logpath", str(work / "mongod.log")])
    wait_port(rport)
    wait_port(mport)
    return rport, mport


def machine():
    """What the run ran on, for the report: cores, CPU, memory, OS, kernel, every server."""
    def first_line(cmd):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        out = (done.stdout or done.stderr).strip().splitlines()
        return out[0].strip() if out else None

    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"model name\s*:\s*(.+)", info)
    mem = re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text())
    release = Path("/etc/os-release").read_text() if Path("/etc/os-release").exists() else ""
    pretty = re.search(r'PRETTY_NAME="([^"]+)"', release)
    parts = [f"{os.cpu_count()} cores" + (f" ({model.group(1).strip()})" if model else ""),
             f"{int(mem.group(1)) // (1024 * 1024)} GiB" if mem else None,
             pretty.group(1) if pretty else None, f"Linux {os.uname().release}"]
    for cmd in (["nginx", "-v"], ["h2o", "--version"], ["lighttpd", "-v"], ["wrk", "--version"], ["node", "--version"]):
        if shutil.which(cmd[0]):
            version = first_line(cmd)
            if version:
                version = version.split(" - ")[0].split(" Copyright")[0]
            if version and cmd[0] == "node":
                version = f"node {version}"
            parts.append(version)
    return ", ".join(p for p in parts if p)


def med(runs, key):
    # wrk now and then prints no usable p99 (a "-nan" under a burst of long transfers):
    # the median is of the rounds that have one.
    values = [r[key] for r in runs if not math.isnan(r[key])]
    return statistics.median(values) if values else float("nan")


def main():
    for tool in ["wrk", "nginx", "redis-server"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: run scripts/install-deps.sh")
    work = Path(tempfile.mkdtemp(prefix="musicd-bench-"))
    media = work / "media"
    media.mkdir()
    rnd = random.Random(42)
    (media / "small.mp3").write_bytes(rnd.randbytes(4096))
    (media / "big.mp3").write_bytes(rnd.randbytes(4 * 1024 * 1024))
    many = media / "many"
    many.mkdir()
    for i in range(1000):
        (many / f"f{i:04}.mp3").write_bytes(rnd.randbytes(rnd.randint(2048, 8192)))
    os.chmod(work, 0o755)

    rport, mport = backends(work)

    def config(name, port, extra="", database="bench", access_log='format = "off"'):
        path = work / f"{name}.toml"
        path.write_text(
            f'listen = "127.0.0.1:{port}"\nmedia_roots = ["{media}"]\nlog_level = "warn"\n{extra}\n'
            f'[mongodb]\nuri = "mongodb://127.0.0.1:{mport}"\ndatabase = "{database}"\n'
            f'[redis]\nurl = "redis://127.0.0.1:{rport}"\n'
            f'[access_log]\n{access_log}\n'
        )
        return path

    base = config("base", free_port())
    imported = subprocess.run([str(REL / "musicctl"), "--config", str(base), "import", str(media)],
                              capture_output=True, text=True, check=True).stdout
    ids = {Path(p).relative_to(media).as_posix(): i for i, p in (l.split("\t") for l in imported.splitlines())}
    # The cache-miss cell uses its own database: 300,000 documents naming the same small file
    # (the imported catalogue has a unique index on the path).
    miss_port = free_port()
    miss_cfg = config("miss", miss_port, database="bench_miss")
    subprocess.run([str(REL / "examples/seed"), "mongo", f"mongodb://127.0.0.1:{mport}", "bench_miss", "tracks",
                    "300000", str(media / "small.mp3")], check=True)
    listed = subprocess.run([str(REL / "musicctl"), "--config", str(miss_cfg), "list"],
                            capture_output=True, text=True, check=True).stdout
    miss_ids = [l.split("\t")[0] for l in listed.splitlines()]

    nginx_paths = work / "nginx_paths.txt"
    nginx_paths.write_text("".join(f"/media/many/f{i:04}.mp3\n" for i in range(1000)))
    musicd_paths = work / "musicd_paths.txt"
    musicd_paths.write_text("".join(f"/musicdb/{ids[f'many/f{i:04}.mp3']}/x.mp3\n" for i in range(1000)))
    miss_paths = work / "miss_paths.txt"
    miss_paths.write_text("".join(f"/musicdb/{i}/x.mp3\n" for i in miss_ids))

    direct_port, nocache_port, accel_port, nginx_port = free_port(), free_port(), free_port(), free_port()
    nginx_log_port = free_port()
    musicd = {}
    musicd = {}
    musicd["miss"] = start([str(REL / "musicd"), "--config", str(miss_cfg), "run"])
    wait_port(miss_port)
    for name, port, extra in [
        ("direct", direct_port, ""),
        ("nocache", nocache_port, "[cache]\nfile_total_bytes = 0\nopen_files = 0\n"),
        ("accel", accel_port, 'serve_mode = "x-accel-redirect"\n'),
    ]:
        cfg = config(name, port, extra if not extra.startswith("[") else "")
        if extra.startswith("["):
            cfg.write_text(cfg.read_text() + extra)
        musicd[name] = start([str(REL / "musicd"), "--config", str(cfg), "run"])
        wait_port(port)
    # The same server with the access log on, as production runs it.
    logged_port = free_port()
    musicd["logged"] = start([str(REL / "musicd"), "--config", str(config(
        "logged", logged_port, access_log=f'format = "combined"\npath = "{work}/musicd-access.log"')), "run"])
    wait_port(logged_port)
    # Signing on (not required): signed and unsigned links to the same file, same server.
    signed_port = free_port()
    (work / "k1.key").write_text("a bench secret of sufficient length\n")
    signed_cfg = config("signed", signed_port)
    signed_cfg.write_text(signed_cfg.read_text() + f'[signing]\nkeys = [{{ id = "k1", secret_file = "{work}/k1.key" }}]\n')
    musicd["signed"] = start([str(REL / "musicd"), "--config", str(signed_cfg), "run"])
    wait_port(signed_port)
    baseline_port = free_port()
    if BASELINE_BIN:
        # An older build may not know [access_log]: its log is off through log_level.
        base_cfg = config("baseline", baseline_port)
        base_cfg.write_text(base_cfg.read_text().replace('[access_log]\nformat = "off"\n', ""))
        musicd["baseline"] = start([BASELINE_BIN, "--config", str(base_cfg), "run"])
        wait_port(baseline_port)

    user = "user root;" if os.geteuid() == 0 else ""
    (work / "nginx.conf").write_text(f"""{user}
worker_processes 2;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  include /etc/nginx/mime.types;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_requests 1000000;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fcgi; uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  upstream musicd {{ server 127.0.0.1:{accel_port}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{nginx_port} backlog=4096;
    location /media/ {{ alias {media}/; }}
    location = /healthz {{ default_type application/json; return 200 '{{"status":"ok"}}'; }}
    location /musicdb/ {{ proxy_pass http://musicd; proxy_http_version 1.1; proxy_set_header Connection ""; }}
    location /internal/0/ {{ internal; alias {media}/; }}
  }}
  # The same files with the access log on, buffered as production runs it.
  server {{
    listen 127.0.0.1:{nginx_log_port} backlog=4096;
    access_log {work}/nginx-access.log combined buffer=64k flush=1s;
    location /media/ {{ alias {media}/; }}
  }}
}}
""")
    nginx = start(["nginx", "-p", str(work), "-c", str(work / "nginx.conf"), "-g", "daemon off;"])
    wait_port(nginx_port)
    time.sleep(0.3)
    nginx_pids = [nginx.pid] + children(nginx.pid)
    # Workers outlive a master that dies abruptly: remember them so teardown can end them.
    leftovers.extend(nginx_pids[1:])

    # The other fast static servers, each tuned as its documentation recommends for
    # static files (2 threads / workers like nginx, sendfile, long keep-alive), with access
    # logs off, and a second instance of each with them on.
    peers = {}
    if PEERS and shutil.which("h2o") and shutil.which("lighttpd"):
        for logged in (False, True):
            tag = "log" if logged else "nolog"
            port = free_port()
            conf = work / f"h2o-{tag}.conf"
            log_line = f"access-log: {work}/h2o-access.log\n" if logged else ""
            conf.write_text(
                (f"user: root\n" if os.geteuid() == 0 else "") +
                f"num-threads: 2\nlisten:\n  host: 127.0.0.1\n  port: {port}\n{log_line}"
                f"file.send-compressed: OFF\nhosts:\n  default:\n    paths:\n"
                f"      /media:\n        file.dir: {media}\n")
            proc = start(["h2o", "-c", str(conf)])
            wait_port(port)
            peers[f"h2o-{tag}"] = (f"http://127.0.0.1:{port}", proc)
            port = free_port()
            conf = work / f"lighttpd-{tag}.conf"
            log_conf = (f'accesslog.filename = "{work}/lighttpd-access.log"\n'
                        f'accesslog.format = "%h %V %u %t \\"%r\\" %>s %b \\"%{{Referer}}i\\" \\"%{{User-Agent}}i\\""\n'
                        if logged else "")
            conf.write_text(
                f'server.modules = ("mod_alias", "mod_accesslog")\n'
                f'server.document-root = "{media}"\nserver.bind = "127.0.0.1"\nserver.port = {port}\n'
                f'server.errorlog = "{work}/lighttpd-{tag}-error.log"\n'
                f'server.max-worker = 2\nserver.max-keep-alive-requests = 1000000\n'
                f'server.max-keep-alive-idle = 60\nserver.max-fds = 16384\n'
                f'server.network-backend = "sendfile"\n'
                f'alias.url = ("/media/" => "{media}/")\n{log_conf}')
            proc = start(["lighttpd", "-D", "-f", str(conf)])
            wait_port(port)
            peers[f"lighttpd-{tag}"] = (f"http://127.0.0.1:{port}", proc)
        time.sleep(0.3)

    # The /healthz mark: a plain Node `http` server answering a JSON hello, what the old
    # service's health check ran on (one process, as express ran).
    node_url, node_pids = None, []
    if shutil.which("node"):
        node_port = free_port()
        hello = ("require('http').createServer((q, s) => { s.setHeader('content-type', 'application/json'); "
                 "s.end(JSON.stringify({status: 'ok'})); })"
                 f".listen({node_port}, '127.0.0.1');")
        node = start(["node", "-e", hello])
        wait_port(node_port)
        node_url, node_pids = f"http://127.0.0.1:{node_port}/healthz", [node.pid]

    n = f"http://127.0.0.1:{nginx_port}"
    d = f"http://127.0.0.1:{direct_port}"
    nc = f"http://127.0.0.1:{nocache_port}"
    nl = f"http://127.0.0.1:{nginx_log_port}"
    lg = f"http://127.0.0.1:{logged_port}"
    lp = [musicd["logged"].pid]
    sg = f"http://127.0.0.1:{signed_port}"
    sp = [musicd["signed"].pid]
    small, big = ids["small.mp3"], ids["big.mp3"]
    dp, ncp, ap = [musicd["direct"].pid], [musicd["nocache"].pid], [musicd["accel"].pid]
    signed_url = subprocess.run(
        [str(REL / "musicctl"), "--config", str(signed_cfg), "sign", small, "--ttl", "1d", "--base", sg, "--name", "a.mp3"],
        capture_output=True, text=True, check=True).stdout.strip()
    # (cell, connections, baseline (url, pids, script, paths), contender (url, pids, script, paths))
    cells = [
        ("4 KiB file", 10, (f"{n}/media/small.mp3", nginx_pids, None, None), (f"{d}/musicdb/{small}/a.mp3", dp, None, None)),
        ("4 KiB file", 100, (f"{n}/media/small.mp3", nginx_pids, None, None), (f"{d}/musicdb/{small}/a.mp3", dp, None, None)),
        ("1,000 files of 2-8 KiB", 100, (n, nginx_pids, "random_path.lua", nginx_paths), (d, dp, "random_path.lua", musicd_paths)),
        ("4 KiB file, access logs on", 100, (f"{nl}/media/small.mp3", nginx_pids, None, None), (f"{lg}/musicdb/{small}/a.mp3", lp, None, None)),
        ("1,000 files of 2-8 KiB, access logs on", 100, (nl, nginx_pids, "random_path.lua", nginx_paths), (lg, lp, "random_path.lua", musicd_paths)),
        ("4 MiB file", 10, (f"{n}/media/big.mp3", nginx_pids, None, None), (f"{d}/musicdb/{big}/a.mp3", dp, None, None)),
        ("4 MiB file, musicd file cache off", 10, (f"{n}/media/big.mp3", nginx_pids, None, None), (f"{nc}/musicdb/{big}/a.mp3", ncp, None, None)),
        ("4 KiB, musicd x-accel behind nginx", 100, (f"{n}/media/small.mp3", nginx_pids, None, None), (f"{n}/musicdb/{small}/a.mp3", nginx_pids + ap, None, None)),
        ("4 MiB, musicd x-accel behind nginx", 10, (f"{n}/media/big.mp3", nginx_pids, None, None), (f"{n}/musicdb/{big}/a.mp3", nginx_pids + ap, None, None)),
        # Not against nginx: the "nginx" columns are the same musicd with an unsigned link.
        ("4 KiB, signed link vs unsigned (same musicd)", 100, (f"{sg}/musicdb/{small}/a.mp3", sp, None, None), (signed_url, sp, None, None)),
        ("/healthz", 10, (f"{n}/healthz", nginx_pids, None, None), (f"{d}/healthz", dp, None, None)),
        ("/healthz", 1000, (f"{n}/healthz", nginx_pids, None, None), (f"{d}/healthz", dp, None, None)),
        ("cache miss (MongoDB lookup)", 10, None, (d, dp, "each_path_once.lua", miss_paths)),
    ]
    if node_url:
        # Not against nginx: the "nginx" columns are a Node `http` JSON hello server.
        cells.insert(-1, ("/healthz vs a Node http hello server", 1000,
                          (node_url, node_pids, None, None), (f"{d}/healthz", dp, None, None)))
    if ONLY:
        cells = [c for c in cells if any(o in f"{c[0]} c={c[1]}" for o in ONLY)]
    rows = []
    b = f"http://127.0.0.1:{baseline_port}"
    for name, conns, baseline, contender in cells:
        runs = {"nginx": [], "musicd": [], "baseline": [], "h2o": [], "lighttpd": []}
        previous = None
        # Not the cache-miss cell: its ids must be new to the shared Redis in every round.
        if BASELINE_BIN and contender and contender[0].startswith(d) and not name.startswith("cache miss"):
            bp = [musicd["baseline"].pid]
            previous = (b + contender[0][len(d):], bp, contender[2], contender[3])
        for r in range(ROUNDS):
            if name.startswith("cache miss"):
                # Fresh ids for every round: shift the list so no id repeats.
                shifted = work / f"miss_{r}.txt"
                chunk = len(miss_ids) // ROUNDS
                shifted.write_text("".join(f"/musicdb/{i}/x.mp3\n" for i in miss_ids[r * chunk:(r + 1) * chunk]))
                contender = (f"http://127.0.0.1:{miss_port}", [musicd["miss"].pid], "each_path_once.lua", shifted)
            extra = []
            under = lambda url, base: url == base or url.startswith(base + "/")
            if peers and baseline is not None and (under(baseline[0], n) or under(baseline[0], nl)) \
                    and "x-accel" not in name and "signed" not in name and not name.startswith("/healthz"):
                logged = under(baseline[0], nl)
                for peer in ("h2o", "lighttpd"):
                    url, proc = peers[f"{peer}-{'log' if logged else 'nolog'}"]
                    base_url = baseline[0].replace(nl if logged else n, url, 1)
                    pids = [proc.pid] + children(proc.pid)
                    extra.append((peer, (base_url, pids, baseline[2], baseline[3])))
            for label, target in (("nginx", baseline), ("musicd", contender), ("baseline", previous), *extra):
                if target is None:
                    continue
                url, pids, script, paths = target
                if r == 0 and WARMUP and not name.startswith("cache miss"):
                    wrk(url, conns, pids, script, paths, seconds=WARMUP)
                result = wrk(url, conns, pids, script, paths)
                runs[label].append(result)
                print(f"{name} c={conns} round {r + 1} {label}: {result['rps']:.0f} req/s "
                      f"{result['mbps']:.0f} MB/s p99 {result['p99']:.2f} ms errors {result['errors']}", file=sys.stderr)
        rows.append((name, conns, runs))

    lines = [
        "# musicd against nginx, h2o and lighttpd",
        "",
        f"{time.strftime('%Y-%m-%d')}. The machine: {machine()}.",
        "",
        "wrk 2 threads on the same machine, loopback; medians of "
        f"{ROUNDS} runs of {SECONDS} s (each target first warmed up for {WARMUP} s, not counted), "
        "targets alternated. CPU is the servers' own (utime+stime from /proc; for x-accel it is "
        "nginx + musicd). Access logs are off except in the cells that say \"access logs on\" "
        "(nginx `access_log ... combined buffer=64k flush=1s`, musicd `format = \"combined\"` to a file).",
        "",
        "| cell | conns | nginx req/s | musicd req/s | ratio | nginx MB/s | musicd MB/s | p99 ms nginx / musicd | errors nginx / musicd | CPU µs/req nginx / musicd | CPU s/GB nginx / musicd |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    summary = {}
    for name, conns, runs in rows:
        m, ng = runs["musicd"], runs["nginx"]

        def cell(key, fmt):
            a = fmt.format(med(ng, key)) if ng else "-"
            b = fmt.format(med(m, key))
            return f"{a} / {b}"

        ratio = med(m, "rps") / med(ng, "rps") if ng else float("nan")
        summary[f"{name} c={conns}"] = round(ratio, 2) if ng else None
        lines.append(
            f"| {name} | {conns} | {med(ng, 'rps'):,.0f} | {med(m, 'rps'):,.0f} | {ratio:.2f} | "
            f"{med(ng, 'mbps'):,.0f} | {med(m, 'mbps'):,.0f} | {cell('p99', '{:.2f}')} | "
            f"{sum(r['errors'] for r in ng)} / {sum(r['errors'] for r in m)} | {cell('cpu_us_req', '{:.1f}')} | "
            f"{cell('cpu_s_gb', '{:.2f}')} |"
            if ng else
            f"| {name} | {conns} | - | {med(m, 'rps'):,.0f} | - | - | {med(m, 'mbps'):,.0f} | - / {med(m, 'p99'):.2f} | "
            f"- / {sum(r['errors'] for r in m)} | - / {med(m, 'cpu_us_req'):.1f} | - |"
        )
    if BASELINE_BIN:
        lines += ["", f"This build against {BASELINE_BIN} (same run, alternated):", "",
                  "| cell | conns | baseline req/s | this build req/s | ratio | p99 ms baseline / this | CPU µs/req baseline / this |",
                  "|---|---|---|---|---|---|---|"]
        for name, conns, runs in rows:
            m, old = runs["musicd"], runs["baseline"]
            if not old:
                continue
            lines.append(
                f"| {name} | {conns} | {med(old, 'rps'):,.0f} | {med(m, 'rps'):,.0f} | "
                f"{med(m, 'rps') / med(old, 'rps'):.2f} | {med(old, 'p99'):.2f} / {med(m, 'p99'):.2f} | "
                f"{med(old, 'cpu_us_req'):.1f} / {med(m, 'cpu_us_req'):.1f} |")
    if any(runs["h2o"] for _, _, runs in rows):
        lines += ["", "Against every peer (same run, alternated; ratio = musicd / the best peer):", "",
                  "| cell | conns | nginx | h2o | lighttpd | musicd | musicd / best | CPU µs/req nginx / h2o / lighttpd / musicd | p99 ms nginx / h2o / lighttpd / musicd |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, conns, runs in rows:
            if not runs["h2o"]:
                continue
            servers = ["nginx", "h2o", "lighttpd", "musicd"]
            rps = {s: med(runs[s], "rps") for s in servers}
            best = max(rps[s] for s in servers[:3])
            big = "4 MiB" in name
            fmt = (lambda v: f"{v * 1e-3:,.2f} GB/s") if big else (lambda v: f"{v:,.0f}")
            value = (lambda s: med(runs[s], "mbps")) if big else (lambda s: rps[s])
            best_value = max(value(s) for s in servers[:3])
            lines.append(
                f"| {name} | {conns} | " + " | ".join(fmt(value(s)) for s in servers) +
                f" | {value('musicd') / best_value:.2f} | " +
                " / ".join(f"{med(runs[s], 'cpu_us_req'):.1f}" for s in servers) + " | " +
                " / ".join(f"{med(runs[s], 'p99'):.2f}" for s in servers) + " |")
    by_name = {(name, conns): runs for name, conns, runs in rows}
    for plain, logged in [(("4 KiB file", 100), ("4 KiB file, access logs on", 100)),
                          (("1,000 files of 2-8 KiB", 100), ("1,000 files of 2-8 KiB, access logs on", 100))]:
        if plain in by_name and logged in by_name:
            off, on = by_name[plain], by_name[logged]
            lines.append(
                f"\n{plain[0]}, {plain[1]} conns, access log on / off (same run): musicd "
                f"{med(on['musicd'], 'rps') / med(off['musicd'], 'rps'):.2f}, nginx "
                f"{med(on['nginx'], 'rps') / med(off['nginx'], 'rps'):.2f}; musicd CPU µs/req "
                f"{med(off['musicd'], 'cpu_us_req'):.1f} off, {med(on['musicd'], 'cpu_us_req'):.1f} on")
    rss = Path(f"/proc/{musicd['direct'].pid}/status").read_text()
    vmrss = re.search(r"VmRSS:\s+(\d+)", rss)
    lines += ["", f"musicd (direct) RSS after the run: {int(vmrss.group(1)) // 1024 if vmrss else '?'} MiB "
              "(includes the in-memory file cache: the 4 KiB file and the 1,000 small files; the 4 MiB "
              "file is kept open, not in memory)."]
    text = "\n".join(lines) + "\n"
    if not ONLY and not BASELINE_BIN:
        out = ROOT / "bench" / "results" / "http.md"
        out.parent.mkdir(exist_ok=True)
        out.write_text(text)
    print(text)
    print(json.dumps(summary), file=sys.stderr)
    shutil.rmtree(work, ignore_errors=True)


def stop_all(*_):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
    for pid in leftovers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_main(main):
    """Runs a benchmark's `main` with every descriptor allowed, and stops what it started
    however it ends."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    signal.signal(signal.SIGTERM, lambda *a: (stop_all(), sys.exit(1)))
    try:
        main()
    finally:
        stop_all()


if __name__ == "__main__":
    run_main(main)
