"""Listeners held at 320 kbps without a stall: musicd, nginx serving the same files by
path, and the seed's Node service (bench/peers/express.js), each ramped with
`musicctl players --ramp` to LISTENERS. Also the tool's own CPU per 1,000 listeners.

    bench/players.sh                      (PLAYERS_LISTENERS=4000 PLAYERS_SECONDS=40 by default)

Writes bench/results/players.md. Loopback only; every run is bounded in time.
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import run  # noqa: E402  (the servers and helpers of bench/run.py)

LISTENERS = int(os.environ.get("PLAYERS_LISTENERS", "4000"))
SECONDS = int(os.environ.get("PLAYERS_SECONDS", "40"))
STEPS = int(os.environ.get("PLAYERS_STEPS", "8"))
# "|"-separated server names to run (all by default), e.g. PLAYERS_SERVERS=musicd|nginx.
ONLY = [s for s in os.environ.get("PLAYERS_SERVERS", "").split("|") if s]
# Pacing for musicd, "rate:after" in bytes (limits.rate_bytes_per_sec, rate_after_bytes).
PACE = os.environ.get("PLAYERS_PACE", "")
# Another musicd binary to run instead of this build's (an A/B across builds).
MUSICD_BIN = os.environ.get("PLAYERS_MUSICD_BIN", str(run.REL / "musicd"))
TRACKS = 40
# 100 s at 320 kbps: a listener asks for a new track (or seeks) now and then, not once.
TRACK_BYTES = 4_000_000


def players(url, ids, listeners, extra=()):
    cmd = [str(run.REL / "musicctl"), "--config", str(CONFIG), "players", "--target", url, "--ids", str(ids),
           "--listeners", str(listeners), "--duration", f"{SECONDS}s", "--ramp", "--ramp-steps", str(STEPS),
           "--seek-rate", "0.5", "--skip-rate", "0.5", "--json", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=SECONDS + 120)
    try:
        return json.loads(out.stdout)
    except json.JSONDecodeError:
        sys.exit(f"musicctl players failed: {out.stdout}{out.stderr}")


def rss_kib(pids):
    total = 0
    for pid in pids:
        try:
            m = run.re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
            total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


class PeakRss:
    """The servers' largest resident set while the listeners run, sampled every 200 ms."""

    def __init__(self, pids):
        self.pids, self.peak, self.done = pids, rss_kib(pids), threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.done.wait(0.2):
            self.peak = max(self.peak, rss_kib(self.pids))

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak


def wakeups(pids):
    """Context switches of every thread of `pids` (voluntary ones: each is a sleep, so a
    wakeup): a server's wakeups."""
    total = 0
    for pid in pids:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                m = run.re.search(r"voluntary_ctxt_switches:\s+(\d+)", (task / "status").read_text())
                total += int(m.group(1)) if m else 0
        except OSError:
            pass
    return total


def tcp_ext(name):
    """A TcpExt counter from /proc/net/netstat (what `nstat` shows), e.g. TCPAbortOnMemory."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        if head.startswith("TcpExt:"):
            return dict(zip(head.split()[1:], map(int, values.split()[1:]))).get(name, 0)
    return 0


def main():
    global CONFIG
    work = Path(tempfile.mkdtemp(prefix="musicd-players-"))
    media = work / "media"
    media.mkdir()
    rnd = random.Random(7)
    for i in range(TRACKS):
        (media / f"t{i:02}.mp3").write_bytes(rnd.randbytes(TRACK_BYTES))
    os.chmod(work, 0o755)
    rport, mport = run.backends(work)
    musicd_port, nginx_port, node_port = run.free_port(), run.free_port(), run.free_port()
    CONFIG = work / "musicd.toml"
    CONFIG.write_text(
        f'listen = "127.0.0.1:{musicd_port}"\nmedia_roots = ["{media}"]\nlog_level = "warn"\n'
        f'[limits]\nmax_connections = 30000\n'
        + (f'rate_bytes_per_sec = {PACE.split(":")[0]}\nrate_after_bytes = {PACE.split(":")[1]}\n' if PACE else '')
        +
        f'[mongodb]\nuri = "mongodb://127.0.0.1:{mport}"\ndatabase = "players"\n'
        f'[redis]\nurl = "redis://127.0.0.1:{rport}"\n'
        f'[access_log]\nformat = "combined"\npath = "{work}/musicd-access.log"\n')
    imported = subprocess.run([str(run.REL / "musicctl"), "--config", str(CONFIG), "import", str(media)],
                              capture_output=True, text=True, check=True).stdout
    rows = [line.split("\t") for line in imported.splitlines()]
    ids = work / "ids.tsv"
    ids.write_text("".join(f"{i}\t{p}\n" for i, p in rows))
    by_path = work / "by-path.tsv"
    by_path.write_text("".join(f"{Path(p).name}\t{p}\n" for _, p in rows))
    (work / "paths.json").write_text(json.dumps({i: p for i, p in rows}))
    musicd = run.start([MUSICD_BIN, "--config", str(CONFIG), "run"])
    run.wait_port(musicd_port)
    (work / "nginx.conf").write_text(run.nginx_main(work, 30000) + f"""
  access_log {work}/nginx-access.log combined buffer=64k flush=1s;
  sendfile on; tcp_nopush on; tcp_nodelay on;
  keepalive_requests 1000000;
  open_file_cache max=10000 inactive=60s; open_file_cache_valid 60s;
  client_body_temp_path {work}/body; proxy_temp_path {work}/proxy;
  fastcgi_temp_path {work}/fcgi; uwsgi_temp_path {work}/uwsgi; scgi_temp_path {work}/scgi;
  server {{
    listen 127.0.0.1:{nginx_port} backlog=4096;
    # The same files by path: /musicdb/t07.mp3/any-name is /media/t07.mp3.
    location /musicdb/ {{ rewrite ^/musicdb/([^/]+)/ /$1 break; root {media}; }}
  }}
}}
""")
    nginx = run.start(["nginx", "-p", str(work), "-c", str(work / "nginx.conf"), "-g", "daemon off;"])
    run.wait_port(nginx_port)
    time.sleep(0.3)
    nginx_pids = [nginx.pid] + run.children(nginx.pid)
    run.leftovers.extend(nginx_pids[1:])
    targets = [("musicd", f"http://127.0.0.1:{musicd_port}", ids, [musicd.pid])]
    targets.append(("nginx", f"http://127.0.0.1:{nginx_port}", by_path, nginx_pids))
    if run.shutil.which("node"):
        node = run.start(["node", str(run.ROOT / "bench/peers/express.js"), str(node_port), str(work / "paths.json")])
        run.wait_port(node_port)
        targets.append(("seed (Node)", f"http://127.0.0.1:{node_port}", ids, [node.pid]))
    if ONLY:
        targets = [t for t in targets if t[0] in ONLY]
    rows_out = []
    for name, url, track_ids, pids in targets:
        before = run.cpu_ticks(pids)
        idle_rss = rss_kib(pids)
        aborts = tcp_ext("TCPAbortOnMemory")
        woken = wakeups(pids)
        peak = PeakRss(pids)
        report = players(url, track_ids, LISTENERS)
        report["peak_rss_kib"], report["idle_rss_kib"] = peak.stop(), idle_rss
        report["aborts_on_memory"] = tcp_ext("TCPAbortOnMemory") - aborts
        report["server_wakeups"] = wakeups(pids) - woken
        server_cpu = (run.cpu_ticks(pids) - before) / run.TICK
        listener_seconds = sum(step["listeners"] for step in report.get("ramp", [])) * SECONDS / STEPS
        rows_out.append((name, report, server_cpu, listener_seconds))
        print(name, json.dumps({k: report.get(k) for k in
                                ("most_held", "listeners", "held", "stalls", "stalled_listeners", "errors", "tool_cpu_s",
                                 "peak_rss_kib", "aborts_on_memory", "server_wakeups")}),
              file=sys.stderr)
    lines = ["# Listeners held at 320 kbps without a stall", "",
             f"{time.strftime('%Y-%m-%d')}. The machine: {run.machine()}.", "",
             f"`bench/players.sh`: `musicctl players --ramp --ramp-steps {STEPS}` to {LISTENERS} listeners over "
             f"{SECONDS} s against each server in turn, the same {TRACKS} files of {TRACK_BYTES // 1_000_000} MB "
             "(100 s at 320 kbps each); listeners probe with HEAD, read at most 10 s ahead, start after 2 s "
             "buffered, seek and skip 0.5 times a minute each. Access logs on everywhere. \"Most held\" is the "
             "listeners of the last step before the first whose stalled listener-seconds or errors reached 0.1 %; the tool and the "
             "servers share the machine's 2 cores.", "",
             "Memory per 1,000 listeners is the server's peak resident set during the run less its "
             "resident set before it, over the listeners at the end. \"Aborts\" is the kernel's "
             "`TcpExtTCPAbortOnMemory` during the run (connections reset under TCP memory pressure). "
             "Server wakeups are its threads' voluntary context switches (each a sleep ended) per "
             "listener-second." + (f" musicd paced at {PACE.split(':')[0]} bytes/s after "
                                   f"{PACE.split(':')[1]} bytes." if PACE else ""), "",
             "| server | most held | listeners at the end | stalls | stalled listeners | errors | aborts | server CPU s | peak RSS MiB | MiB per 1,000 listeners | tool CPU s | tool CPU ms per 1,000 listener-s | server wakeups per listener-s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, report, server_cpu, listener_seconds in rows_out:
        errors = sum(report.get("errors", {}).values())
        per_1000 = report["tool_cpu_s"] * 1000 / max(listener_seconds, 1e-9) * 1000
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(report.get("errors", {}).items()) if v)
        grown = (report["peak_rss_kib"] - report["idle_rss_kib"]) / 1024
        lines.append(f"| {name} | {report.get('most_held') or 0:,} | {report['listeners']:,} | {report['stalls']} | "
                     f"{report['stalled_listeners']} | {errors}{f' ({kinds})' if kinds else ''} | "
                     f"{report['aborts_on_memory']} | {server_cpu:.1f} | {report['peak_rss_kib'] / 1024:.0f} | "
                     f"{grown / max(report['listeners'], 1) * 1000:.1f} | {report['tool_cpu_s']:.1f} | {per_1000:.1f} | "
                     f"{report['server_wakeups'] / max(listener_seconds, 1e-9):.2f} |")
    lines += ["", "Each step (listeners: stalled share of listener-seconds, errors):", ""]
    for name, report, _, _ in rows_out:
        steps = ", ".join(f"{s['listeners']}: {s['stalled_share'] * 100:.2f} %/{s['errors']}" for s in report.get("ramp", []))
        lines.append(f"- {name}: {steps}")
    text = "\n".join(lines) + "\n"
    if not ONLY and not PACE and MUSICD_BIN == str(run.REL / "musicd"):
        (run.ROOT / "bench" / "results" / "players.md").write_text(text)
    print(text)
    run.shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    run.run_main(main)
