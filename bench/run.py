#!/usr/bin/env python3
"""musicd vs nginx with wrk, side by side in one run (called by bench/run.sh).

Starts private redis-server, mongod, nginx and three musicd instances (direct mode, direct
mode without the in-memory file cache, x-accel-redirect mode behind nginx) on free
loopback ports, over one generated media directory. Each cell runs wrk against nginx and
musicd in turn (in reverse order every other round), BENCH_ROUNDS times for BENCH_SECONDS
each, and reports medians,
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
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The build measured: bench/run.sh builds the `dist` profile (what ships) unless told.
REL = ROOT / "target" / os.environ.get("BENCH_PROFILE", "release")
SECONDS = int(os.environ.get("BENCH_SECONDS", "5"))
# Ten rounds: on this shared machine one 5 s round of a cell moves by up to 40 %; the
# verdicts come from the rounds' paired ratios, and ten give their median a usable interval.
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "10"))
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
# Pinned mode (BENCH_PIN=1): every server on core 0 and wrk on core 1, the same for all, as a
# low-noise cross-check of the default mode where the scheduler places everyone.
PIN = os.environ.get("BENCH_PIN") == "1"
SERVER_CPU, CLIENT_CPU = "0", "1"
# Other musicd configurations to measure beside the default in the same run, as
# "name:VAR=value,VAR=value|name2:..." with MUSICD_* variables (an A/B of a setting):
# each runs in the direct-mode cells, logs off like the default instance.
VARIANTS = [(v.split(":", 1)[0], dict(kv.split("=", 1) for kv in v.split(":", 1)[1].split(",") if kv))
            for v in os.environ.get("BENCH_VARIANTS", "").split("|") if ":" in v]
TICK = os.sysconf("SC_CLK_TCK")
procs = []
leftovers = []


def nginx_main(work, connections):
    """The main context of a bench nginx.conf under `work`, up to the opening `http {`."""
    user = "user root;" if os.geteuid() == 0 else ""
    return f"""{user}
worker_processes 2;
pid {work}/nginx.pid;
error_log {work}/nginx-error.log warn;
worker_rlimit_nofile 65536;
events {{ worker_connections {connections}; }}
http {{"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, **kw):
    if PIN:
        cmd = ["taskset", "-c", SERVER_CPU] + cmd
    # Its own session: lighttpd stops its workers with kill(0, SIGTERM), which reached this
    # script too (its SIGTERM handler then exited 1 after a complete run).
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, **kw)
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


def box_ticks():
    """Whole-machine CPU from /proc/stat: (busy, softirq) ticks over every core."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return user + nice + system + irq + softirq + steal, softirq


def socket_figures(port, out, delay):
    """`ss -tmi` of the server's established connections on `port`, `delay` s into a run:
    the medians over connections of the send buffer (tb), the bytes queued in it (w) and
    those not yet sent (notsent), in KiB."""
    time.sleep(delay)
    try:
        text = subprocess.run(["ss", "-tmiHn", "state", "established", f"( sport = :{port} )"],
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return
    tb, queued, notsent = [], [], []
    for m in re.finditer(r"skmem:\(([^)]*)\)([^\n]*)", text):
        mem = dict(re.findall(r"([a-z]+)(\d+)", m.group(1)))
        tb.append(int(mem.get("tb", 0)) / 1024)
        queued.append(int(mem.get("w", 0)) / 1024)
        ns = re.search(r"notsent:(\d+)", m.group(2))
        notsent.append(int(ns.group(1)) / 1024 if ns else 0.0)
    if tb:
        out.update(sndbuf_kib=statistics.median(tb), queued_kib=statistics.median(queued),
                   notsent_kib=statistics.median(notsent))


def wrk_command(threads, conns, seconds, script=None, paths=None):
    """wrk's command (without the URL) and environment: `script` (in bench/lua) picks each
    request's path from the file `paths`."""
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{seconds}s", "--timeout", "5s"]
    env = dict(os.environ)
    if script:
        cmd += ["-s", str(ROOT / "bench" / "lua" / script)]
        env["PATHS"] = str(paths)
    return cmd, env


def wrk(url, conns, pids, script=None, paths=None, seconds=SECONDS, sockets=False):
    cmd, env = wrk_command(min(2, conns), conns, seconds, script, paths)
    cmd.append("--latency")
    if PIN:
        cmd = ["taskset", "-c", CLIENT_CPU] + cmd
    figures = {}
    sampler = None
    if sockets:
        port = int(re.match(r"http://[^:/]+:(\d+)", url).group(1))
        sampler = threading.Thread(target=socket_figures, args=(port, figures, seconds / 2), daemon=True)
    before, box_before, wall = cpu_ticks(pids), box_ticks(), time.monotonic()
    proc = subprocess.Popen(cmd + [url], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    if sampler:
        sampler.start()
    out = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    box_after = box_ticks()
    cpu = (cpu_ticks(pids) - before) / TICK
    box = (box_after[0] - box_before[0]) / TICK
    softirq = (box_after[1] - box_before[1]) / TICK
    client = usage.ru_utime + usage.ru_stime
    if sampler:
        sampler.join()
    m = re.search(r"(\d+) requests in [\d.]+\w+, ([\d.]+\w+) read", out)
    requests, read = (int(m.group(1)), size(m.group(2))) if m else (0, 0.0)
    p99 = re.search(r"99%\s+(\S+)", out)
    # Each kind kept apart, for the progress line: 97 errors in one round of 350,000
    # (2026-12-07, never seen again in 8 rounds of the same server alone) could not be
    # told apart afterwards.
    kinds = {kind: int(n) for kind, n in re.findall(r"(connect|read|write|timeout) (\d+)", out) if int(n)}
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if non2xx:
        kinds["non-2xx"] = int(non2xx.group(1))
    errors = sum(kinds.values())
    per = lambda total, count: total / count if count else float("nan")
    return {
        "rps": requests / seconds,
        "mbps": read / seconds / 1e6,
        "p99": latency_ms(p99.group(1)) if p99 else float("nan"),
        "errors": errors,
        "error_kinds": " ".join(f"{kind} {n}" for kind, n in kinds.items()),
        "cpu_us_req": per(cpu, requests) * 1e6,
        "cpu_s_gb": per(cpu, read / 1e9),
        "wrk_us_req": per(client, requests) * 1e6,
        "wrk_s_gb": per(client, read / 1e9),
        "box_us_req": per(box, requests) * 1e6,
        "box_s_gb": per(box, read / 1e9),
        "softirq_s_gb": per(softirq, read / 1e9),
        "box_busy": box / (time.monotonic() - wall) / (os.cpu_count() or 1),
        **figures,
    }


def at_once(targets, conns, seconds=SECONDS):
    """Loads every target at the same time, one single-threaded wrk each: {label: figures}.

    Alternated rounds put two servers in different windows of time, and on a shared machine
    a window's CPU per request moves by about 10 %: their difference cannot resolve a cost
    of a few tenths of a microsecond, such as the access log's (intervals of +-0.6-0.8 us,
    2026-12-07). In one window what the machine does to one it does to the other. Each gets
    about half the machine, so the absolute figures are higher than alternated ones; the
    difference and the ratio are what this measures."""
    runs, before = {}, {}
    for label, (url, pids, script, paths) in targets:
        cmd, env = wrk_command(1, conns, seconds, script, paths)
        before[label] = cpu_ticks(pids)
        runs[label] = subprocess.Popen(cmd + [url], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       text=True, env=env)
    outputs = {label: run.communicate()[0] for label, run in runs.items()}
    figures = {}
    for label, (url, pids, script, paths) in targets:
        m = re.search(r"(\d+) requests in", outputs[label])
        requests = int(m.group(1)) if m else 0
        cpu = (cpu_ticks(pids) - before[label]) / TICK
        figures[label] = {"rps": requests / seconds,
                          "cpu_us_req": cpu / requests * 1e6 if requests else float("nan")}
    return figures


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
        # Two event loops, as every peer and the limit server run two workers. Left to
        # `worker_threads = 0`, a musicd started pinned to one core (BENCH_PIN=1) counted one
        # CPU and ran one loop, where the others switched between two.
        path.write_text(
            f'listen = "127.0.0.1:{port}"\nmedia_roots = ["{media}"]\nlog_level = "warn"\n'
            f'worker_threads = 2\n{extra}\n'
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
    baseline_port, baseline_logged_port = free_port(), free_port()
    if BASELINE_BIN:
        # Its access log off like the contender's. (Left out, the log defaults to combined
        # lines on stderr, and a baseline so configured paid for a log the contender did
        # not: an A/A run of one build showed 9.0 against 7.6 µs per request.) An older
        # build that refuses the [access_log] section exits at once, and is started
        # without it.
        base_cfg = config("baseline", baseline_port)
        musicd["baseline"] = start([BASELINE_BIN, "--config", str(base_cfg), "run"])
        try:
            musicd["baseline"].wait(timeout=1)
            sys.stderr.write("baseline refused [access_log]: started without it (it logs to stderr)\n")
            base_cfg.write_text(base_cfg.read_text().replace('[access_log]\nformat = "off"\n', ""))
            musicd["baseline"] = start([BASELINE_BIN, "--config", str(base_cfg), "run"])
        except subprocess.TimeoutExpired:
            pass
        wait_port(baseline_port)
        # And as production runs it, for the logged cells: the same log as "logged".
        musicd["baseline logged"] = start([BASELINE_BIN, "--config", str(config(
            "baseline-logged", baseline_logged_port,
            access_log=f'format = "combined"\npath = "{work}/baseline-access.log"')), "run"])
        wait_port(baseline_logged_port)

    variant_ports = {}
    for vname, venv in VARIANTS:
        port = free_port()
        cfg = config(f"variant-{vname}", port)
        musicd[f"variant {vname}"] = start([str(REL / "musicd"), "--config", str(cfg), "run"],
                                           env={**os.environ, **venv})
        wait_port(port)
        variant_ports[vname] = port

    # The ceiling: limitd (bench/limitd.c), the least an HTTP file server can do, one
    # instance per cell's answers: the 4 KiB file, the 4 MiB file, and the 1,000 files
    # themselves, answered in turn whatever the path (not one file of their mean size:
    # the kernel's cost grows faster than an answer's size, so the mean file is less work
    # than the mix; measured 0.95x the mix's CPU per request, bench/limitd.c).
    limits = {}
    if shutil.which("cc"):
        limitd = work / "limitd"
        subprocess.run(["cc", "-O2", "-pthread", "-o", str(limitd), str(ROOT / "bench" / "limitd.c")], check=True)
        for key, file in (("small", "small.mp3"), ("big", "big.mp3"), ("many", "many")):
            port = free_port()
            proc = start([str(limitd), str(port), str(media / file), "2"])
            wait_port(port)
            limits[key] = (f"http://127.0.0.1:{port}", proc)

    (work / "nginx.conf").write_text(nginx_main(work, 8192) + f"""
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

    def peers_for(path, logged, script=None, paths=None):
        found = []
        for peer in ("h2o", "lighttpd"):
            if f"{peer}-nolog" in peers:
                url, proc = peers[f"{peer}-{'log' if logged else 'nolog'}"]
                found.append((peer, (url + path, [proc.pid] + children(proc.pid), script, paths)))
        return found

    def limit_for(key, script=None, paths=None):
        if key not in limits:
            return []
        url, proc = limits[key]
        return [("limit", (url + ("" if script else "/a.mp3"), [proc.pid], script, paths))]

    def direct_others(path, script=None, paths=None):
        """The baseline build and the variants, on the same request as the direct musicd."""
        found = []
        if BASELINE_BIN:
            found.append(("baseline", (f"http://127.0.0.1:{baseline_port}{path}", [musicd["baseline"].pid],
                                       script, paths)))
        for vname, port in variant_ports.items():
            found.append((f"musicd {vname}", (f"http://127.0.0.1:{port}{path}", [musicd[f"variant {vname}"].pid],
                                              script, paths)))
        return found

    S, B = f"/musicdb/{small}/a.mp3", f"/musicdb/{big}/a.mp3"
    many = ("random_path.lua", nginx_paths)
    mine = ("random_path.lua", musicd_paths)
    file_cell = lambda file, key, conns: [
        ("nginx", (f"{n}/media/{file}", nginx_pids, None, None)), *peers_for(f"/media/{file}", False),
        *limit_for(key), ("musicd", (f"{d}/musicdb/{ids[file]}/a.mp3", dp, None, None)),
        *direct_others(f"/musicdb/{ids[file]}/a.mp3")]
    def logged_baseline(path, script=None, paths=None):
        """The baseline build with its access log on, beside the logged musicd."""
        if not BASELINE_BIN:
            return []
        return [("baseline", (f"http://127.0.0.1:{baseline_logged_port}{path}",
                              [musicd["baseline logged"].pid], script, paths))]

    logged_cell = lambda file, key: [
        ("nginx", (f"{nl}/media/{file}", nginx_pids, None, None)), *peers_for(f"/media/{file}", True),
        *limit_for(key), ("musicd", (f"{lg}/musicdb/{ids[file]}/a.mp3", lp, None, None)),
        # The same request to the musicd that logs nothing, in the same rounds: what the
        # access log costs is then a paired difference.
        ("musicd logs off", (f"{d}/musicdb/{ids[file]}/a.mp3", dp, None, None)),
        *logged_baseline(f"/musicdb/{ids[file]}/a.mp3")]
    # (cell, connections, [(label, (url, pids, script, paths))]): "nginx" is the ratio's
    # reference in the first table, "musicd" the contender.
    cells = [
        ("4 KiB file", 10, file_cell("small.mp3", "small", 10)),
        ("4 KiB file", 100, file_cell("small.mp3", "small", 100)),
        ("1,000 files of 2-8 KiB", 100, [
            ("nginx", (n, nginx_pids, *many)), *peers_for("", False, *many), *limit_for("many", *many),
            ("musicd", (d, dp, *mine)), *direct_others("", *mine)]),
        ("4 KiB file, access logs on", 100, logged_cell("small.mp3", "small")),
        ("1,000 files of 2-8 KiB, access logs on", 100, [
            ("nginx", (nl, nginx_pids, *many)), *peers_for("", True, *many), *limit_for("many", *many),
            ("musicd", (lg, lp, *mine)), ("musicd logs off", (d, dp, *mine)), *logged_baseline("", *mine)]),
        ("4 MiB file", 10, file_cell("big.mp3", "big", 10)),
        ("4 MiB file, access logs on", 10, logged_cell("big.mp3", "big")),
        ("4 MiB file, musicd file cache off", 10, [
            ("nginx", (f"{n}/media/big.mp3", nginx_pids, None, None)), ("musicd", (f"{nc}{B}", ncp, None, None))]),
        ("4 KiB, musicd x-accel behind nginx", 100, [
            ("nginx", (f"{n}/media/small.mp3", nginx_pids, None, None)),
            ("musicd", (f"{n}{S}", nginx_pids + ap, None, None))]),
        ("4 MiB, musicd x-accel behind nginx", 10, [
            ("nginx", (f"{n}/media/big.mp3", nginx_pids, None, None)),
            ("musicd", (f"{n}{B}", nginx_pids + ap, None, None))]),
        # Not against nginx: the "nginx" columns are the same musicd with an unsigned link.
        ("4 KiB, signed link vs unsigned (same musicd)", 100, [
            ("nginx", (f"{sg}{S}", sp, None, None)), ("musicd", (signed_url, sp, None, None))]),
        ("/healthz", 10, [("nginx", (f"{n}/healthz", nginx_pids, None, None)), ("musicd", (f"{d}/healthz", dp, None, None))]),
        ("/healthz", 1000, [("nginx", (f"{n}/healthz", nginx_pids, None, None)), ("musicd", (f"{d}/healthz", dp, None, None))]),
        ("cache miss (MongoDB lookup)", 10, [("musicd", None)]),
    ]
    if node_url:
        # Not against nginx: the "nginx" columns are a Node `http` JSON hello server.
        cells.insert(-1, ("/healthz vs a Node http hello server", 1000,
                          [("nginx", (node_url, node_pids, None, None)), ("musicd", (f"{d}/healthz", dp, None, None))]))
    if ONLY:
        cells = [c for c in cells if any(o in f"{c[0]} c={c[1]}" for o in ONLY)]
    rows = []
    # The logged cells' musicd with and without its log, loaded at the same time: (cell,
    # conns) -> rounds of at_once figures.
    together = {}
    for name, conns, targets in cells:
        runs = {label: [] for label, _ in targets}
        big_cell = "4 MiB" in name
        for r in range(ROUNDS):
            if name.startswith("cache miss"):
                # Fresh ids for every round, new to musicd and to the shared Redis: a slice
                # of the list per round, so no id repeats.
                shifted = work / f"miss_{r}.txt"
                chunk = len(miss_ids) // ROUNDS
                shifted.write_text("".join(f"/musicdb/{i}/x.mp3\n" for i in miss_ids[r * chunk:(r + 1) * chunk]))
                targets = [("musicd", (f"http://127.0.0.1:{miss_port}", [musicd["miss"].pid], "each_path_once.lua",
                                       shifted))]
            for label, (url, pids, script, paths) in in_turn(targets, r):
                if r == 0 and WARMUP and not name.startswith("cache miss"):
                    wrk(url, conns, pids, script, paths, seconds=WARMUP)
                result = wrk(url, conns, pids, script, paths, sockets=big_cell)
                runs[label].append(result)
                print(f"{name} c={conns} round {r + 1} {label}: {result['rps']:.0f} req/s "
                      f"{result['mbps']:.0f} MB/s p99 {result['p99']:.2f} ms errors {result['errors']} "
                      f"{'(' + result['error_kinds'] + ') ' if result['errors'] else ''}"
                      f"box {result['box_busy'] * 100:.0f} %", file=sys.stderr)
        if runs.get("musicd") and runs.get("musicd logs off"):
            pair = [t for t in targets if t[0] in ("musicd", "musicd logs off")]
            for r in range(ROUNDS):
                figures = at_once(in_turn(pair, r), conns)
                together.setdefault((name, conns), []).append(figures)
                print(f"{name} c={conns} at once, round {r + 1}: " + "  ".join(
                    f"{label} {f['rps']:.0f} req/s {f['cpu_us_req']:.2f} us" for label, f in figures.items()),
                    file=sys.stderr)
        rows.append((name, conns, runs))
    text = report(rows, musicd, together)
    if not ONLY and not BASELINE_BIN and not VARIANTS:
        out = ROOT / "bench" / "results" / ("http-pinned.md" if PIN else "http.md")
        out.parent.mkdir(exist_ok=True)
        out.write_text(text)
    print(text)
    shutil.rmtree(work, ignore_errors=True)


def in_turn(targets, r):
    """The order of round `r`: as listed in even rounds, reversed in odd ones.

    In one fixed order each target always ran right after the same one, and two copies of
    one build (`BENCH_BASELINE_BIN` given the very binary measured) were called apart in two
    of four cells: 1.04 (1.01-1.09), "lead", on 4 KiB and 0.89 (0.82-0.98), "behind", on
    4 KiB with logs on (10 rounds, 2026-12-07). Reversing every other round puts each of a
    pair first as often as second, so a drift within the round, or what one target leaves
    the next (sockets in TIME_WAIT, a page cache to refill), falls on both alike, and the
    targets next to each other stay close in time."""
    return targets if r % 2 == 0 else targets[::-1]


# The bars of issue 38: musicd's CPU per request against the limit server's, and what the
# access log may cost.
CPU_BAR = 1.3
LOG_THROUGHPUT_BAR = 0.95
LOG_CPU_BAR = 0.3
# The confidence of an interval, and how many resamples estimate it.
CONFIDENCE = 0.90
RESAMPLES = 4000


def interval(values):
    """The median of `values` with its bootstrap confidence interval: (low, median, high).
    Resampling is seeded, so the same rounds give the same interval."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return float("nan"), float("nan"), float("nan")
    draw = random.Random(len(values))
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(RESAMPLES))
    tail = (1 - CONFIDENCE) / 2
    return (medians[int(tail * RESAMPLES)], statistics.median(values),
            medians[min(RESAMPLES - 1, int((1 - tail) * RESAMPLES))])


def paired(a_runs, b_runs, key):
    """Round-by-round ratios of a to b (rounds alternate the targets, so round r of each ran
    close in time): their median and its 90 % interval, (low, median, high)."""
    return interval([a[key] / b[key] for a, b in zip(a_runs, b_runs) if b[key]])


def paired_difference(a_runs, b_runs, key):
    """Round-by-round differences a - b: their median and its 90 % interval."""
    return interval([a[key] - b[key] for a, b in zip(a_runs, b_runs)])


def verdict(low, high):
    """A difference is called only when its whole interval is on one side of 1."""
    if low > 1:
        return "lead"
    if high < 1:
        return "behind"
    return "inside noise"


def report(rows, musicd, together):
    mode = ("pinned: every server on core 0, wrk on core 1 (`taskset`)" if PIN
            else "unpinned: the scheduler places servers and wrk on the 2 cores")
    lines = [
        "# musicd against nginx, h2o, lighttpd and the limit server",
        "",
        f"{time.strftime('%Y-%m-%d')}. The machine: {machine()}. Mode: {mode}.",
        "",
        "wrk 2 threads on the same machine, loopback; "
        f"{ROUNDS} rounds of {SECONDS} s (each target first warmed up for {WARMUP} s, not counted), "
        "the targets in turn within each round, in reverse order every other round. \"limit\" is `bench/limitd.c`: the least an HTTP file "
        "server can do (per-thread listeners, a request recognised by its blank line, precomputed "
        "answers: the cell's file, or the 1,000 files in turn), the practical ceiling of this machine and client; it logs nothing, so it is the "
        "ceiling of the logged cells too. CPU: the servers' own (utime+stime from /proc; for x-accel "
        "nginx + musicd), wrk's own, and the whole box's busy time from /proc/stat (every core, softirq "
        "included), per request (µs) or per GB (s). Access logs are off except in the cells that say "
        "\"access logs on\" (nginx `access_log ... combined buffer=64k flush=1s`, h2o and lighttpd their "
        "default access logs, musicd `format = \"combined\"` to a file).",
        "",
        "Ratios are paired: rounds alternate the targets, so round r of each ran close in time, and a "
        "ratio is the median of the round-by-round ratios with its 90 % bootstrap interval. A lead "
        "or a lag is called only when the whole interval is on one side of 1 (\"lead\", "
        "\"behind\"), otherwise \"inside noise\".",
        "",
        "## Every server",
        "",
        "| cell | conns | server | median | min | max | p99 ms | errors | server CPU | wrk CPU | box CPU | of limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, conns, runs in rows:
        big = "4 MiB" in name
        key, cost, fmt = (("mbps", "s_gb", lambda v: f"{v * 1e-3:.2f} GB/s") if big
                          else ("rps", "us_req", lambda v: f"{v:,.0f}"))
        unit = "s/GB" if big else "µs/req"
        for label, series in runs.items():
            if not series:
                continue
            values = [r[key] for r in series]
            of_limit = (f"{med(series, key) / med(runs['limit'], key):.2f}" if runs.get("limit") else "-")
            lines.append(
                f"| {name} | {conns} | {label} | {fmt(statistics.median(values))} | {fmt(min(values))} | "
                f"{fmt(max(values))} | {med(series, 'p99'):.2f} | {sum(r['errors'] for r in series)} | "
                f"{med(series, 'cpu_' + cost):.{2 if big else 1}f} {unit} | {med(series, 'wrk_' + cost):.{2 if big else 1}f} | "
                f"{med(series, 'box_' + cost):.{2 if big else 1}f} | {of_limit} |")
    lines += ["", "## musicd against the best peer and the limit", "",
              "The best peer is the fastest of nginx, h2o and lighttpd by median in that cell. "
              "Whole-box CPU per unit is musicd's over the best peer's.", "",
              "| cell | conns | best peer | musicd / best (median) | 90 % interval | verdict | box CPU musicd / best | "
              "musicd / limit | best peer / limit | p99 ms musicd / nginx |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    summary = {}
    for name, conns, runs in rows:
        present = [p for p in ("nginx", "h2o", "lighttpd") if runs.get(p)]
        if not runs.get("musicd") or len(present) < 3:
            continue
        big = "4 MiB" in name
        key, cost = ("mbps", "box_s_gb") if big else ("rps", "box_us_req")
        best = max(present, key=lambda p: med(runs[p], key))
        low, mid, high = paired(runs["musicd"], runs[best], key)
        limit = runs.get("limit")
        of = lambda label: f"{med(runs[label], key) / med(limit, key):.2f}" if limit else "-"
        summary[f"{name} c={conns}"] = round(mid, 2)
        lines.append(
            f"| {name} | {conns} | {best} | {mid:.2f} | {low:.2f}-{high:.2f} | {verdict(low, high)} | "
            f"{med(runs['musicd'], cost) / med(runs[best], cost):.2f} | {of('musicd')} | {of(best)} | "
            f"{med(runs['musicd'], 'p99'):.2f} / {med(runs['nginx'], 'p99'):.2f} |")
    lines += ["", "## musicd against nginx in every cell", "",
              "(In the signed-link cell the reference is the same musicd with an unsigned link; in the "
              "Node cell, a Node `http` hello server.)", "",
              "p99 is judged the same way: \"lower\" when the whole interval of musicd's p99 over the "
              "reference's is below 1, \"higher\" when above.", "",
              "| cell | conns | reference | musicd | musicd / reference (median) | 90 % interval | verdict | p99 ms reference / musicd | p99 musicd / reference (interval) | p99 verdict |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for name, conns, runs in rows:
        m, ref = runs.get("musicd"), runs.get("nginx")
        key = "mbps" if "4 MiB" in name else "rps"
        show = (lambda v: f"{v * 1e-3:.2f} GB/s") if key == "mbps" else (lambda v: f"{v:,.0f}")
        if not ref:
            lines.append(f"| {name} | {conns} | - | {show(med(m, key))} | - | - | - | - / {med(m, 'p99'):.2f} | - | - |")
            continue
        low, mid, high = paired(m, ref, key)
        p_low, p_mid, p_high = paired(m, ref, "p99")
        p_verdict = "lower" if p_high < 1 else "higher" if p_low > 1 else "inside noise"
        lines.append(f"| {name} | {conns} | {show(med(ref, key))} | {show(med(m, key))} | {mid:.2f} | "
                     f"{low:.2f}-{high:.2f} | {verdict(low, high)} | {med(ref, 'p99'):.2f} / {med(m, 'p99'):.2f} | "
                     f"{p_mid:.2f} ({p_low:.2f}-{p_high:.2f}) | {p_verdict} |")
    others = sorted({label for _, _, runs in rows for label in runs if label == "baseline" or label.startswith("musicd ")})
    if others:
        lines += ["", "## Other musicd builds and settings against this one (same run, alternated)", "",
                  (f"baseline: {BASELINE_BIN}. " if BASELINE_BIN else "") +
                  "; ".join(f"musicd {v}: {', '.join(f'{k}={x}' for k, x in e.items())}" for v, e in VARIANTS), "",
                  "| cell | conns | build | median | other / this musicd (median) | 90 % interval | verdict | server CPU | box CPU | p99 ms |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for name, conns, runs in rows:
            big = "4 MiB" in name
            key, cost = ("mbps", "s_gb") if big else ("rps", "us_req")
            show = (lambda v: f"{v * 1e-3:.2f} GB/s") if big else (lambda v: f"{v:,.0f}")
            for label in ["musicd", *others]:
                if not runs.get(label):
                    continue
                low, mid, high = paired(runs[label], runs["musicd"], key)
                lines.append(
                    f"| {name} | {conns} | {label} | {show(med(runs[label], key))} | {mid:.2f} | {low:.2f}-{high:.2f} | "
                    f"{verdict(low, high) if label != 'musicd' else '-'} | {med(runs[label], 'cpu_' + cost):.2f} | "
                    f"{med(runs[label], 'box_' + cost):.2f} | {med(runs[label], 'p99'):.2f} |")
    socket_rows = [(name, conns, label, series) for name, conns, runs in rows if "4 MiB" in name
                   for label, series in runs.items() if series and "sndbuf_kib" in series[0]]
    if socket_rows:
        lines += ["", "## Large files: where the CPU goes and what the sockets hold", "",
                  "CPU in s per GB sent; socket figures from `ss -tmi` half-way through each round (medians over the "
                  "server's connections, then over rounds): the send buffer's size, the bytes queued in it, and those "
                  "not yet sent.", "",
                  "| cell | server | GB/s | server s/GB | wrk s/GB | softirq s/GB | box s/GB | box busy | send buffer KiB | queued KiB | not sent KiB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, conns, label, series in socket_rows:
            lines.append(
                f"| {name} | {label} | {med(series, 'mbps') * 1e-3:.2f} | {med(series, 'cpu_s_gb'):.3f} | "
                f"{med(series, 'wrk_s_gb'):.3f} | {med(series, 'softirq_s_gb'):.3f} | {med(series, 'box_s_gb'):.3f} | "
                f"{med(series, 'box_busy') * 100:.0f} % | {med(series, 'sndbuf_kib'):,.0f} | {med(series, 'queued_kib'):,.0f} | "
                f"{med(series, 'notsent_kib'):,.0f} |")
    limit_rows = [(name, conns, runs) for name, conns, runs in rows
                  if runs.get("limit") and runs.get("musicd") and "4 MiB" not in name]
    if limit_rows:
        lines += ["", "## Server CPU per request against the limit server", "",
                  "Each server's own CPU (user + system) over the requests it answered, paired round by "
                  f"round with the limit server's. The bar: musicd at most {CPU_BAR}x the limit server, "
                  "the interval's upper end included.", "",
                  "| cell | conns | server | µs/req (median) | / limit (median) | 90 % interval | within the bar |",
                  "|---|---|---|---|---|---|---|"]
        for name, conns, runs in limit_rows:
            for label in ("musicd", "nginx", "h2o", "lighttpd"):
                if not runs.get(label):
                    continue
                low, mid, high = paired(runs[label], runs["limit"], "cpu_us_req")
                lines.append(f"| {name} | {conns} | {label} | {med(runs[label], 'cpu_us_req'):.1f} | {mid:.2f} | "
                             f"{low:.2f}-{high:.2f} | {('yes' if high <= CPU_BAR else 'no') if label == 'musicd' else '-'} |")
    log_rows = [(name, conns, runs) for name, conns, runs in rows if runs.get("musicd logs off") and runs.get("musicd")]
    if log_rows:
        lines += ["", "## What the access log costs musicd", "",
                  "The musicd that logs (`format = \"combined\"` to a file) and the one that logs nothing, "
                  "measured two ways in the same run: alternated in the cell's rounds, and then loaded at once "
                  f"({ROUNDS} rounds of {SECONDS} s, one single-threaded wrk each with the cell's connections, "
                  "so both share every moment of the machine). The bars: logs-on throughput at least "
                  f"{LOG_THROUGHPUT_BAR}x logs-off, the interval's lower end included, and at most "
                  f"{LOG_CPU_BAR} µs of CPU a request, the interval's upper end included. The bars are judged "
                  "on the rounds at once, whose intervals are a few times narrower; with no such rounds, on "
                  "the alternated ones.", "",
                  "| cell | conns | on / off throughput, alternated | at once | within the bar | "
                  "CPU µs/req off, on (alternated) | on - off µs/req, alternated | at once | within the bar |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for name, conns, runs in log_rows:
            on, off = runs["musicd"], runs["musicd logs off"]
            low, mid, high = paired(on, off, "rps")
            d_low, d_mid, d_high = paired_difference(on, off, "cpu_us_req")
            rounds = together.get((name, conns), [])
            if rounds:
                t_on, t_off = [r["musicd"] for r in rounds], [r["musicd logs off"] for r in rounds]
                t_low, t_mid, t_high = paired(t_on, t_off, "rps")
                td_low, td_mid, td_high = paired_difference(t_on, t_off, "cpu_us_req")
                at_once_rps = f"{t_mid:.2f} ({t_low:.2f}-{t_high:.2f})"
                at_once_cpu = f"{td_mid:+.2f} ({td_low:+.2f}..{td_high:+.2f})"
                judged_rps, judged_cpu = t_low, td_high
            else:
                at_once_rps = at_once_cpu = "-"
                judged_rps, judged_cpu = low, d_high
            lines.append(
                f"| {name} | {conns} | {mid:.2f} ({low:.2f}-{high:.2f}) | {at_once_rps} | "
                f"{'yes' if judged_rps >= LOG_THROUGHPUT_BAR else 'no'} | "
                f"{med(off, 'cpu_us_req'):.2f}, {med(on, 'cpu_us_req'):.2f} | "
                f"{d_mid:+.2f} ({d_low:+.2f}..{d_high:+.2f}) | {at_once_cpu} | "
                f"{'yes' if judged_cpu <= LOG_CPU_BAR else 'no'} |")
    rss = Path(f"/proc/{musicd['direct'].pid}/status").read_text()
    vmrss = re.search(r"VmRSS:\s+(\d+)", rss)
    lines += ["", f"musicd (direct) RSS after the run: {int(vmrss.group(1)) // 1024 if vmrss else '?'} MiB "
              "(includes the in-memory file cache: the 4 KiB file and the 1,000 small files; the 4 MiB "
              "file is kept open, not in memory)."]
    print(json.dumps(summary), file=sys.stderr)
    return "\n".join(lines) + "\n"


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
