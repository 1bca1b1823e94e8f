//! Months, not minutes: the stack the docs tell operators to run, for as long as asked,
//! with faults that overlap. Run it through `scripts/soak.sh` (it builds first), as root.
//!
//! ```text
//! scripts/soak.sh --duration 1h --chaos --report soak.html
//! scripts/soak.sh --duration 3m --chaos --seed 7 --json
//! ```
//!
//! The fleet of `tests/integration/fleet.rs` (varnish → nginx → three `musicd run` → a
//! Redis Cluster of six and a MongoDB replica set of three, each in its own network
//! namespace) serves a small catalogue while, the whole time:
//! * checking players fetch through varnish, nginx and straight from each musicd, and
//!   every answer is kept (status, SHA-256 of the body, when sent and received);
//! * `musicctl players` (through varnish) and `musicctl replay` of a generated day (through
//!   varnish and straight to each musicd) add load;
//! * the catalogue changes several times a second (moves, deletes, inserts, broken paths
//!   and fixes; a few hot ids many times a minute), each change recorded with when it was
//!   sent and when MongoDB said it was done;
//! * with `--chaos`, every 30-90 s a fault drawn from the seed: a cut link, SIGSTOP of a
//!   Redis node, a mongod or a musicd, kill -9 of a musicd or of the follower's holder, a
//!   restart, a MongoDB step-down, a Redis failover, a purge or a reindex, a full access-log
//!   disk, a broken config with SIGHUP. Their holds overlap.
//!
//! Every minute (`--sample`), RSS and descriptors of each musicd (and which holds the
//! follower), Redis memory and keys, varnish's ban list and objects, and requests and
//! errors are sampled.
//!
//! The verdict is the history check's: an answer must be what some version of its track
//! answered, and, outside a fault window (a fault's hold plus [`GRACE`]), not more than
//! [`BOUND`] after that version ended. Errors outside fault windows fail the run, and so
//! do the budgets: after the warm-up (10 minutes, or a third of a shorter run) each
//! musicd's RSS within 10 % and its descriptors within 16 of their value then, Redis keys
//! within the key budget of `docs/stack.md`, varnish's ban list bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use mongodb::bson::oid::ObjectId;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use sha2::{Digest, Sha256};

#[allow(dead_code)]
#[path = "../tests/integration/harness/fleet.rs"]
mod fleet;

use fleet::{Fleet, MUSICDS, Programs, REDIS_NODES};

/// Tracks in the catalogue.
const TRACKS: usize = 40;
/// The first few ids change many times a minute.
const HOT: usize = 4;
/// How stale an answer may be outside fault windows: the history check's worst case.
const BOUND: Duration = Duration::from_secs(2);
/// What a fault window adds to a fault's hold: the configured timeouts it can set off
/// (an election after 2 s plus a new primary's catch-up, a Redis failover after its 2 s
/// node timeout, the follower's 3 s lease, nginx's 5 s `fail_timeout`, a client's 10 s
/// request timeout).
const GRACE: Duration = Duration::from_secs(15);
/// A checking player's request may take this long before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Checking players.
const PLAYERS: usize = 6;
/// Layers the checking players ask.
const LAYERS: [&str; 5] = ["varnish", "nginx", "m1", "m2", "m3"];
/// Each musicd's in-memory file cache: every change writes a new 8 KiB file (five a
/// second), so 16 MiB is full within minutes and the RSS budget, measured from minute 10,
/// judges what grows beyond the caches at their bounds. (At the default 256 MiB, the hour's
/// first soak saw RSS climb 2.7 MiB a minute: the cache filling, not yet full.)
const FILE_CACHE_BYTES: u64 = 16 << 20;
/// Each musicd's access-log disk (a tmpfs), in MiB.
const LOG_DISK_MB: u32 = 256;

/// What a track URL answers: a status, and the body's digest for a 200.
type Expect = (u16, Option<[u8; 32]>);

struct Version {
    issued: Instant,
    committed: Instant,
    expect: Expect,
}

struct Answer {
    layer: usize,
    id: usize,
    sent: Instant,
    received: Instant,
    got: Expect,
}

struct Failure {
    layer: usize,
    sent: Instant,
    received: Instant,
    what: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Live,
    Deleted,
    Broken,
}

#[derive(Clone, serde::Serialize)]
struct Fault {
    kind: String,
    target: String,
    at_s: f64,
    held_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

#[derive(Clone, serde::Serialize)]
struct ProcSample {
    role: String,
    pid: i32,
    age_s: f64,
    rss_kib: u64,
    fds: u64,
}

#[derive(Clone, serde::Serialize)]
struct Sample {
    at_s: f64,
    musicd: Vec<ProcSample>,
    follower: Option<usize>,
    redis_memory_bytes: u64,
    redis_keys: u64,
    varnish_bans: Option<u64>,
    varnish_objects: Option<u64>,
    requests: u64,
    errors: u64,
}

#[derive(serde::Serialize)]
struct Budget {
    limit: String,
    worst: String,
    ok: bool,
    /// Whether it counts for `passed`: memory is judged only in runs of [`RSS_JUDGED_FROM`]
    /// or more, since caches still fill in a few minutes (a short run reports it).
    judged: bool,
}

/// The shortest run whose RSS budget counts.
const RSS_JUDGED_FROM: Duration = Duration::from_secs(20 * 60);

struct Options {
    duration: Duration,
    chaos: bool,
    seed: u64,
    json: bool,
    report: Option<PathBuf>,
    sample_every: Duration,
    plan_only: bool,
    /// The fleet's index; `None`: the first free one. Two soaks run side by side with
    /// indexes of their own, so they cannot both pick the same free one at once.
    index: Option<u8>,
}

fn usage() -> &'static str {
    "usage: soak [--duration 1h] [--chaos] [--seed N] [--sample 60s] [--json] [--report F.html] [--plan] [--index N]"
}

fn parse_options() -> Result<Options, String> {
    let mut options = Options {
        duration: Duration::from_secs(3600),
        chaos: false,
        seed: rand::random::<u64>() % 1_000_000,
        json: false,
        report: None,
        sample_every: Duration::ZERO,
        plan_only: false,
        index: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--duration" => {
                options.duration = humantime::parse_duration(&value("--duration")?)
                    .map_err(|e| format!("--duration: {e}"))?;
            }
            "--sample" => {
                options.sample_every = humantime::parse_duration(&value("--sample")?)
                    .map_err(|e| format!("--sample: {e}"))?;
            }
            "--seed" => {
                options.seed = value("--seed")?
                    .parse()
                    .map_err(|e| format!("--seed: {e}"))?;
            }
            "--report" => options.report = Some(PathBuf::from(value("--report")?)),
            "--chaos" => options.chaos = true,
            "--json" => options.json = true,
            "--plan" => options.plan_only = true,
            "--index" => {
                let index: u8 = value("--index")?
                    .parse()
                    .map_err(|e| format!("--index: {e}"))?;
                if !(1..15).contains(&index) {
                    return Err("--index: 1 to 14".into());
                }
                options.index = Some(index);
            }
            "-h" | "--help" => return Err(usage().into()),
            other => return Err(format!("unknown argument {other}\n{}", usage())),
        }
    }
    if options.duration < Duration::from_secs(60) {
        return Err("--duration: at least 1m".into());
    }
    if options.sample_every.is_zero() {
        // A minute, or a ninth of a short run, so even 3 minutes has its samples.
        options.sample_every = Duration::from_secs(60).min(options.duration / 9);
    }
    Ok(options)
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// A version's file: unique to the track and version, a few KiB.
fn body(track: usize, version: u64) -> Vec<u8> {
    let line = format!("track {track} version {version}\n");
    line.repeat(8192 / line.len() + 1).into_bytes()
}

/// How long after its version stopped being current an answer was asked for (zero when
/// some version that answers this was current while the request was under way); `None`
/// when no version ever answered that.
fn staleness(versions: &[Version], answer: &Answer) -> Option<Duration> {
    let mut best: Option<Duration> = None;
    for (k, version) in versions.iter().enumerate() {
        if version.expect != answer.got || version.issued > answer.received {
            continue;
        }
        let stale = match versions.get(k + 1).map(|next| next.committed) {
            Some(end) if end < answer.sent => answer.sent - end,
            _ => Duration::ZERO,
        };
        best = Some(best.map_or(stale, |b| b.min(stale)));
    }
    best
}

/// The catalogue as the change maker made it.
struct Catalogue {
    ids: Vec<ObjectId>,
    versions: Mutex<Vec<Vec<Version>>>,
    /// The track changed last: half of the checking requests ask for it.
    recent: AtomicU64,
}

/// Everything the run shares.
struct Run {
    /// Held only for quick calls, and only on the blocking pool ([`with_fleet`]).
    fleet: Mutex<Fleet>,
    /// The fleet's index, directory and media root, read without the lock.
    index: u8,
    dir: PathBuf,
    media: PathBuf,
    musicd_bases: Vec<String>,
    redis_hosts: Vec<String>,
    programs: Programs,
    started: Instant,
    catalogue: Catalogue,
    faults: Mutex<Vec<(Instant, Instant, Fault)>>,
    requests: AtomicU64,
    errors: AtomicU64,
    done: AtomicBool,
    mongo: mongodb::Collection<mongodb::bson::Document>,
}

impl Run {
    fn at_s(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.started).as_secs_f64()
    }

    /// `redis-cli` against node `n` (1-based), bounded by 2 s; empty when it does not answer.
    fn redis_cli(&self, n: usize, args: &[&str]) -> String {
        Command::new("timeout")
            .arg("2")
            .arg(&self.programs.redis_cli)
            .args(["-h", &self.redis_hosts[n - 1], "-p", "6379"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    }

    /// `musicctl` with musicd `i`'s config, in its namespace.
    fn musicctl(&self, i: usize, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new("ip")
            .args(["netns", "exec", &format!("mf{}-m{i}", self.index)])
            .arg(&self.programs.musicctl)
            .arg("--config")
            .arg(self.dir.join(format!("m{i}/musicd.toml")))
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .output()
    }
}

/// Runs `f` on the fleet from the blocking pool: its calls wait on processes and links.
async fn with_fleet<T: Send + 'static>(
    run: &Arc<Run>,
    f: impl FnOnce(&mut Fleet) -> T + Send + 'static,
) -> Option<T> {
    let run = run.clone();
    tokio::task::spawn_blocking(move || {
        let mut fleet = run
            .fleet
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut fleet)
    })
    .await
    .ok()
}

/// Writes a file under the media root.
fn write_media(media: &Path, relative: &str, bytes: &[u8]) -> PathBuf {
    let path = media.join(relative);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(&path, bytes);
    path
}

#[tokio::main]
async fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    eprintln!(
        "soak: seed {} duration {:?} chaos {}",
        options.seed, options.duration, options.chaos
    );
    if options.plan_only {
        // What this seed draws, without a fleet.
        for planned in plan(options.seed, options.duration) {
            println!(
                "{:>6}s {} (hold up to {}s, pick {})",
                planned.at.as_secs(),
                KINDS[planned.kind],
                planned.hold.as_secs(),
                planned.pick
            );
        }
        return ExitCode::SUCCESS;
    }
    let dir = match tempfile::Builder::new().prefix("musicd-soak-").tempdir() {
        Ok(dir) => dir,
        Err(err) => {
            eprintln!("soak: a work directory: {err}");
            return ExitCode::from(2);
        }
    };
    // The musicds run as root in their namespaces but read the media through a 0700 parent
    // only root enters: fine, they are root. (No `nobody` here.)
    let index = match options.index {
        Some(index) if fleet::free_index(index) != index => {
            eprintln!("soak: fleet index {index} is in use");
            return ExitCode::from(2);
        }
        Some(index) => index,
        None => fleet::free_index(1),
    };
    let fleet = Fleet::up_with_log_disks(
        index,
        dir.path(),
        &Programs::beside_this_example(),
        Some(LOG_DISK_MB),
        &format!("\n[cache]\nfile_total_bytes = {FILE_CACHE_BYTES}\n"),
    )
    .await;
    let outcome = soak(fleet, dir.path(), &options).await;
    match outcome {
        Ok(passed) => ExitCode::from(u8::from(!passed)),
        Err(err) => {
            eprintln!("soak: {err}");
            ExitCode::from(2)
        }
    }
}

async fn soak(fleet: Fleet, dir: &Path, options: &Options) -> Result<bool, String> {
    let client = mongodb::Client::with_uri_str(fleet.mongo_uri())
        .await
        .map_err(|e| format!("mongodb: {e}"))?;
    let mongo = client
        .database("fleet")
        .collection::<mongodb::bson::Document>("tracks");
    let mut ids = Vec::with_capacity(TRACKS);
    let mut versions = Vec::with_capacity(TRACKS);
    let now = Instant::now();
    for track in 0..TRACKS {
        let id = ObjectId::new();
        let bytes = body(track, 0);
        let path = fleet::write_media(&fleet, &format!("t{track}/v0.mp3"), &bytes);
        mongo
            .insert_one(doc! { "_id": id, "path": path.display().to_string() })
            .await
            .map_err(|e| format!("insert: {e}"))?;
        ids.push(id);
        versions.push(vec![Version {
            issued: now,
            committed: now,
            expect: (200, Some(digest(&bytes))),
        }]);
    }
    let bases: Vec<String> = vec![
        fleet.varnish_base(),
        fleet.nginx_base(),
        fleet.musicd_base(1),
        fleet.musicd_base(2),
        fleet.musicd_base(3),
    ];
    let ids_file = dir.join("ids.txt");
    std::fs::write(
        &ids_file,
        ids.iter().map(|id| format!("{id}\n")).collect::<String>(),
    )
    .map_err(|e| format!("ids file: {e}"))?;
    let programs = Programs::beside_this_example();
    let config = dir.join("m1/musicd.toml");
    let redis_hosts = (1..=REDIS_NODES as u8)
        .map(|n| fleet.addr(fleet::Segment::Redis, 10 + n).to_string())
        .collect();
    let run = Arc::new(Run {
        index: fleet.index,
        dir: fleet.dir.clone(),
        media: fleet.media.clone(),
        musicd_bases: (1..=MUSICDS).map(|i| fleet.musicd_base(i)).collect(),
        redis_hosts,
        programs: programs.clone(),
        fleet: Mutex::new(fleet),
        started: Instant::now(),
        catalogue: Catalogue {
            ids,
            versions: Mutex::new(versions),
            recent: AtomicU64::new(0),
        },
        faults: Mutex::new(Vec::new()),
        requests: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        done: AtomicBool::new(false),
        mongo,
    });

    // Load beside the checking players: listeners through varnish, and a day of the
    // replayed log through varnish and straight to each musicd.
    let seconds = options.duration.as_secs().to_string();
    let mut load = Vec::new();
    let players_out = dir.join("players.json");
    load.push((
        "players varnish".to_string(),
        spawn_logged(
            Command::new(&programs.musicctl)
                .arg("--config")
                .arg(&config)
                .args(["players", "--target", &bases[0], "--listeners", "10"])
                .args(["--duration", &format!("{seconds}s"), "--ids"])
                .arg(&ids_file)
                .arg("--json"),
            &players_out,
        )?,
        players_out,
    ));
    let day = dir.join("day.json");
    let speed = write_day(&day, &run.catalogue.ids, options.duration, options.seed)?;
    for (target, base) in [0, 2, 3, 4].map(|layer| (LAYERS[layer], &bases[layer])) {
        let out = dir.join(format!("replay-{target}.json"));
        load.push((
            format!("replay {target}"),
            spawn_logged(
                Command::new(&programs.musicctl)
                    .arg("--config")
                    .arg(&config)
                    .args(["replay", "--target", base, "--speed", &speed.to_string()])
                    .args(["--timeout", "10", "--json"])
                    .arg(&day),
                &out,
            )?,
            out,
        ));
    }

    let mut players = Vec::new();
    for player in 0..PLAYERS {
        players.push(tokio::spawn(check_player(
            run.clone(),
            bases.clone(),
            options.seed.wrapping_add(player as u64),
        )));
    }
    let changes = tokio::spawn(change_maker(run.clone(), options.seed));
    let chaos = options
        .chaos
        .then(|| tokio::spawn(chaos(run.clone(), options.seed, options.duration)));
    let sampler = tokio::spawn(sampler(run.clone(), options.sample_every));

    tokio::time::sleep(options.duration).await;
    run.done.store(true, Ordering::Relaxed);
    if let Some(chaos) = chaos {
        let _ = chaos.await;
    }
    let _ = changes.await;
    let mut answers = Vec::new();
    let mut failures = Vec::new();
    for player in players {
        if let Ok((a, f)) = player.await {
            answers.extend(a);
            failures.extend(f);
        }
    }
    let samples = sampler.await.unwrap_or_default();
    let mut load_reports = BTreeMap::new();
    for (name, mut child, out) in load {
        // Each was told to last the run; a replay of a day may finish a little later.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let value: serde_json::Value =
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
        load_reports.insert(name, summarize_load(&value));
    }
    let verdict = judge(&run, options, &answers, &failures, &samples, load_reports);
    let passed = verdict["passed"] == true;
    if options.json {
        println!("{verdict}");
    } else {
        print!("{}", render_text(&verdict));
    }
    if let Some(report) = &options.report {
        let html = render_html(&verdict, &samples, options.duration);
        std::fs::write(report, html).map_err(|e| format!("{}: {e}", report.display()))?;
    }
    if !passed {
        let keep = std::env::temp_dir().join(format!("musicd-soak-{}", options.seed));
        let _ = copy_logs(dir, &keep);
        eprintln!("soak: failed; the fleet's logs are in {}", keep.display());
    }
    Ok(passed)
}

/// Starts a load process with its stdout in `out`.
fn spawn_logged(command: &mut Command, out: &Path) -> Result<std::process::Child, String> {
    let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{command:?}: {e}"))
}

/// Writes a day of track requests (musicd JSON lines, busier in the evening, a third of
/// them abandoned or ranged) and returns the speed that fits it in `duration`.
fn write_day(path: &Path, ids: &[ObjectId], duration: Duration, seed: u64) -> Result<u64, String> {
    const DAY: f64 = 86_400.0;
    let speed = (DAY / duration.as_secs_f64()).ceil().max(1.0) as u64;
    // About three requests a second of the run.
    let lines = (duration.as_secs() * 3) as usize;
    let mut rng = StdRng::seed_from_u64(seed ^ 0xda7);
    let mut times: Vec<f64> = Vec::with_capacity(lines);
    while times.len() < lines {
        let t: f64 = rng.random_range(0.0..DAY);
        let rate = 1.0 + 0.8 * (2.0 * std::f64::consts::PI * (t / DAY - 0.375)).sin();
        if rng.random_range(0.0..1.8) < rate {
            times.push(t);
        }
    }
    times.sort_by(f64::total_cmp);
    let mut out = String::new();
    for t in times {
        let id = ids[rng.random_range(0..ids.len())];
        let seconds = t as u64;
        let stamp = format!(
            "2026-12-01T{:02}:{:02}:{:02}.{:03}Z",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60,
            (t.fract() * 1000.0) as u64
        );
        let (range, bytes) = match rng.random_range(0..3) {
            0 => ("bytes=0-1023", 1024),
            1 => ("bytes=1024-", 4096),
            _ => ("", 8192),
        };
        let _ = writeln!(
            out,
            "{}",
            serde_json::json!({
                "time": stamp, "client": "10.0.0.1", "method": "GET",
                "path": format!("/musicdb/{id}/song.mp3"), "query": "", "protocol": "HTTP/1.1",
                "status": if range.is_empty() { 200 } else { 206 }, "bytes": bytes,
                "latency_ms": 1.0, "ttfb_ms": 1.0, "cache": "-", "range": range,
                "user_agent": "soak", "referer": "", "request_id": "-", "complete": true,
            })
        );
    }
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(speed)
}

/// A checking player: asks every layer in turn, half the time for the track changed last.
async fn check_player(run: Arc<Run>, bases: Vec<String>, seed: u64) -> (Vec<Answer>, Vec<Failure>) {
    let http = reqwest::Client::builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .pool_max_idle_per_host(4)
        .build()
        .unwrap_or_default();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut answers = Vec::new();
    let mut failures = Vec::new();
    let mut layer = (seed as usize) % LAYERS.len();
    while !run.done.load(Ordering::Relaxed) {
        layer = (layer + 1) % LAYERS.len();
        let id = if rng.random_range(0..2) == 0 {
            run.catalogue.recent.load(Ordering::Relaxed) as usize
        } else {
            rng.random_range(0..TRACKS)
        };
        let url = format!("{}/musicdb/{}/t.mp3", bases[layer], run.catalogue.ids[id]);
        let sent = Instant::now();
        run.requests.fetch_add(1, Ordering::Relaxed);
        let outcome = match http.get(&url).send().await {
            Ok(response) => {
                let status = response.status().as_u16();
                match response.bytes().await {
                    Ok(body) if status < 500 => {
                        Ok((status, (status == 200).then(|| digest(&body))))
                    }
                    Ok(_) => Err(format!("{status}")),
                    Err(err) => Err(format!("body: {err}")),
                }
            }
            Err(err) => Err(if err.is_timeout() {
                "timeout".to_string()
            } else if err.is_connect() {
                "connect".to_string()
            } else {
                format!("{err}")
            }),
        };
        let received = Instant::now();
        match outcome {
            Ok(got) => answers.push(Answer {
                layer,
                id,
                sent,
                received,
                got,
            }),
            Err(what) => {
                run.errors.fetch_add(1, Ordering::Relaxed);
                failures.push(Failure {
                    layer,
                    sent,
                    received,
                    what,
                });
            }
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    (answers, failures)
}

/// Changes the catalogue several times a second until the run ends; a write that fails
/// (a fault) is sent again until MongoDB takes it, and the version counts from the first
/// send.
async fn change_maker(run: Arc<Run>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xc4a);
    let mut states = [State::Live; TRACKS];
    let mut pace = tokio::time::interval(Duration::from_millis(200));
    let mut version = 0u64;
    while !run.done.load(Ordering::Relaxed) {
        pace.tick().await;
        version += 1;
        let track = if rng.random_range(0..2) == 0 {
            rng.random_range(0..HOT)
        } else {
            rng.random_range(0..TRACKS)
        };
        let id = run.catalogue.ids[track];
        let roll = rng.random_range(0..10);
        let (next, expect, change) = match states[track] {
            State::Live if roll < 2 => (State::Deleted, (404, None), Change::Delete),
            State::Live if roll < 3 => {
                let missing = run.media.join(format!("t{track}/missing-{version}.mp3"));
                (State::Broken, (404, None), Change::Path(missing))
            }
            State::Live | State::Broken => {
                let bytes = body(track, version);
                let path = write_media(&run.media, &format!("t{track}/v{version}.mp3"), &bytes);
                (State::Live, (200, Some(digest(&bytes))), Change::Path(path))
            }
            State::Deleted => {
                let bytes = body(track, version);
                let path = write_media(&run.media, &format!("t{track}/v{version}.mp3"), &bytes);
                (
                    State::Live,
                    (200, Some(digest(&bytes))),
                    Change::Insert(path),
                )
            }
        };
        let issued = Instant::now();
        loop {
            let result = match &change {
                Change::Delete => run.mongo.delete_one(doc! { "_id": id }).await.map(|_| ()),
                Change::Path(path) => run
                    .mongo
                    .update_one(
                        doc! { "_id": id },
                        doc! { "$set": { "path": path.display().to_string() } },
                    )
                    .await
                    .map(|_| ()),
                Change::Insert(path) => match run
                    .mongo
                    .insert_one(doc! { "_id": id, "path": path.display().to_string() })
                    .await
                {
                    Ok(_) => Ok(()),
                    // A retry of an insert that was applied.
                    Err(err) if err.to_string().contains("E11000") => Ok(()),
                    Err(err) => Err(err),
                },
            };
            if result.is_ok() {
                break;
            }
            if run.done.load(Ordering::Relaxed) && issued.elapsed() > Duration::from_secs(60) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        states[track] = next;
        if let Ok(mut versions) = run.catalogue.versions.lock() {
            versions[track].push(Version {
                issued,
                committed: Instant::now(),
                expect,
            });
        }
        run.catalogue.recent.store(track as u64, Ordering::Relaxed);
    }
}

enum Change {
    Delete,
    Path(PathBuf),
    Insert(PathBuf),
}

/// A fault the seed drew: when it starts, what it is, how long it may be held.
struct Planned {
    at: Duration,
    kind: usize,
    hold: Duration,
    pick: usize,
}

/// The kinds of fault, by the number [`plan`] draws.
const KINDS: [&str; 11] = [
    "partition",
    "partition",
    "sigstop",
    "sigstop",
    "kill9",
    "restart",
    "stepdown",
    "redis-failover",
    "purge or reindex",
    "disk-full",
    "bad-restart",
];

/// The faults of a run: one every 30-90 s, held up to two minutes (a SIGSTOP one), none
/// in its last 30 s and none held past its last 10. The seed alone decides them.
fn plan(seed: u64, duration: Duration) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut at = Duration::ZERO;
    let mut planned = Vec::new();
    loop {
        at += Duration::from_secs(rng.random_range(30..=90));
        let kind = rng.random_range(0..KINDS.len());
        // Long enough that a fault is often still held when the next one starts.
        let hold = Duration::from_secs(rng.random_range(5..=120));
        let pick = rng.random_range(0..1000);
        if at + Duration::from_secs(30) > duration {
            return planned;
        }
        // Healed 10 s before the end at the latest, so the run sees the recovery.
        let hold = hold.min(duration - at - Duration::from_secs(10));
        planned.push(Planned {
            at,
            kind,
            hold,
            pick,
        });
    }
}

/// Runs the planned faults, each in its own task, so holds overlap.
async fn chaos(run: Arc<Run>, seed: u64, duration: Duration) {
    let mut running = Vec::new();
    for planned in plan(seed, duration) {
        let start = run.started + planned.at;
        tokio::time::sleep_until(start.into()).await;
        if run.done.load(Ordering::Relaxed) {
            break;
        }
        let run = run.clone();
        running.push(tokio::spawn(async move {
            fault(run, planned.kind, planned.hold, planned.pick).await
        }));
    }
    for task in running {
        let _ = task.await;
    }
}

/// One fault: made, held, undone, and recorded with its window.
async fn fault(run: Arc<Run>, kind: usize, hold: Duration, pick: usize) {
    let at = Instant::now();
    let musicd = pick % MUSICDS + 1;
    let (name, target, note): (&str, String, Option<String>) = match kind {
        0 | 1 => {
            let links = Fleet::links();
            let link = links[pick % links.len()].clone();
            let cut = fleet::set_link(run.index, &link, false);
            tokio::time::sleep(hold).await;
            // A heal must not be lost: a link left cut would fail the rest of the run.
            let mut healed = fleet::set_link(run.index, &link, true);
            for _ in 0..20 {
                if healed.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                healed = fleet::set_link(run.index, &link, true);
            }
            ("partition", link, cut.and(healed).err())
        }
        2 | 3 => {
            let roles: Vec<String> = (1..=REDIS_NODES)
                .map(|n| format!("r{n}"))
                .chain((1..=3).map(|n| format!("d{n}")))
                .chain((1..=MUSICDS).map(|n| format!("m{n}")))
                .collect();
            let role = roles[pick % roles.len()].clone();
            let hold = hold.min(Duration::from_secs(60));
            let stopped = role.clone();
            with_fleet(&run, move |f| f.signal_role(&stopped, libc::SIGSTOP)).await;
            tokio::time::sleep(hold).await;
            let stopped = role.clone();
            with_fleet(&run, move |f| f.signal_role(&stopped, libc::SIGCONT)).await;
            ("sigstop", role, None)
        }
        4 => {
            // kill -9 of the follower's holder (or of a musicd when none follows), then
            // started again a second later, as systemd's `Restart=always` does.
            let holder = follower(&run).await;
            let i = holder.unwrap_or(musicd);
            with_fleet(&run, move |f| {
                f.signal_role(&format!("m{i}"), libc::SIGKILL)
            })
            .await;
            tokio::time::sleep(Duration::from_secs(1)).await;
            with_fleet(&run, move |f| f.spawn_musicd(i)).await;
            let target = match holder {
                Some(_) => format!("m{i} (follower)"),
                None => format!("m{i}"),
            };
            ("kill9", target, None)
        }
        5 => {
            with_fleet(&run, move |f| {
                f.signal_role(&format!("m{musicd}"), libc::SIGTERM);
                f.spawn_musicd(musicd);
            })
            .await;
            ("restart", format!("m{musicd}"), None)
        }
        6 => {
            let note = step_down(&run).await;
            ("stepdown", "primary".into(), note)
        }
        7 => {
            let runner = run.clone();
            let note = tokio::task::spawn_blocking(move || {
                let replica = (1..=REDIS_NODES)
                    .find(|&n| runner.redis_cli(n, &["role"]).starts_with("slave"));
                match replica {
                    Some(node) => {
                        let said = runner.redis_cli(node, &["cluster", "failover"]);
                        (!said.contains("OK")).then(|| format!("r{node}: {}", said.trim()))
                    }
                    None => Some("no replica answered".into()),
                }
            })
            .await
            .unwrap_or(None);
            ("redis-failover", "a replica".into(), note)
        }
        8 => {
            let (what, args): (&str, &'static [&'static str]) = if pick.is_multiple_of(2) {
                ("purge", &["purge", "track_*", "--json"])
            } else {
                ("reindex", &["reindex", "--prune", "--json"])
            };
            let runner = run.clone();
            let output = tokio::task::spawn_blocking(move || runner.musicctl(musicd, args)).await;
            let note = match output {
                Ok(Ok(output)) if output.status.success() => None,
                Ok(Ok(output)) => Some(
                    String::from_utf8_lossy(&output.stderr)
                        .lines()
                        .last()
                        .unwrap_or_default()
                        .to_string(),
                ),
                Ok(Err(err)) => Some(err.to_string()),
                Err(err) => Some(err.to_string()),
            };
            (what, format!("from m{musicd}"), note)
        }
        9 => {
            let filler = run.dir.join(format!("m{musicd}/logs/filler"));
            let filling = filler.clone();
            let note = tokio::task::spawn_blocking(move || fill_disk(&filling))
                .await
                .map_err(|e| e.to_string())
                .and_then(|filled| filled)
                .err();
            tokio::time::sleep(hold).await;
            let _ = std::fs::remove_file(&filler);
            ("disk-full", format!("m{musicd} access log"), note)
        }
        _ => {
            // A restart into a broken config (`systemctl restart` after a bad edit): the
            // new process must refuse it and exit, the rest of the stack keeps serving, and
            // once the config is fixed the unit's next restart brings it back.
            let role = format!("m{musicd}");
            let exited = with_fleet(&run, move |f| {
                f.signal_role(&role, libc::SIGTERM);
                f.spawn_musicd_with(musicd, "\nbogus_key = 1\n");
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline {
                    if f.exited(&role) {
                        return true;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                false
            })
            .await
            .unwrap_or(false);
            tokio::time::sleep(hold.min(Duration::from_secs(60))).await;
            with_fleet(&run, move |f| {
                f.signal_role(&format!("m{musicd}"), libc::SIGKILL);
                f.spawn_musicd(musicd);
            })
            .await;
            let note = (!exited).then(|| "the broken config was not refused".to_string());
            ("bad-restart", format!("m{musicd}"), note)
        }
    };
    let end = Instant::now();
    let fault = Fault {
        kind: name.into(),
        target,
        at_s: run.at_s(at),
        held_s: (end - at).as_secs_f64(),
        note,
    };
    if let Ok(mut faults) = run.faults.lock() {
        faults.push((at, end + GRACE, fault));
    }
}

/// Writes zeros until the disk is full.
fn fill_disk(path: &Path) -> Result<(), String> {
    use std::io::Write as _;
    let mut file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let block = vec![0u8; 1 << 20];
    loop {
        match file.write_all(&block) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => return Ok(()),
            Err(err) => return Err(err.to_string()),
        }
    }
}

async fn step_down(run: &Arc<Run>) -> Option<String> {
    let uri = with_fleet(run, |f| f.mongo_uri()).await?;
    let client = mongodb::Client::with_uri_str(&uri).await.ok()?;
    let said = tokio::time::timeout(
        Duration::from_secs(10),
        client
            .database("admin")
            .run_command(doc! { "replSetStepDown": 10, "secondaryCatchUpPeriodSecs": 5 }),
    )
    .await;
    match said {
        Ok(Ok(_)) => None,
        // The primary closes its connections as it steps down: that is success too.
        Ok(Err(err)) if err.to_string().contains("closed") => None,
        Ok(Err(err)) => Some(err.to_string()),
        Err(_) => Some("no answer in 10 s".into()),
    }
}

async fn readyz(base: &str) -> Option<serde_json::Value> {
    reqwest::Client::new()
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()
}

/// The musicd whose follower holds the lease.
async fn follower(run: &Run) -> Option<usize> {
    for (i, base) in run.musicd_bases.iter().enumerate() {
        if let Some(body) = readyz(base).await
            && body["watch"]["state"] == "following"
        {
            return Some(i + 1);
        }
    }
    None
}

fn proc_sample(role: &str, pid: i32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let start_ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    // SAFETY: sysconf(3) reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(ProcSample {
        role: role.to_string(),
        pid,
        age_s: uptime - start_ticks / hz,
        rss_kib,
        fds,
    })
}

async fn sampler(run: Arc<Run>, every: Duration) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut next = Instant::now();
    while !run.done.load(Ordering::Relaxed) {
        next += every;
        while Instant::now() < next {
            if run.done.load(Ordering::Relaxed) {
                return samples;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let follower = follower(&run).await;
        let musicd = with_fleet(&run, |fleet| {
            (1..=MUSICDS)
                .filter_map(|i| {
                    let role = format!("m{i}");
                    proc_sample(&role, fleet.pid(&role)?)
                })
                .collect::<Vec<ProcSample>>()
        })
        .await
        .unwrap_or_default();
        let runner = run.clone();
        let redis = tokio::task::spawn_blocking(move || {
            let (mut memory, mut keys) = (0u64, 0u64);
            for node in 1..=REDIS_NODES {
                if !runner.redis_cli(node, &["role"]).starts_with("master") {
                    continue;
                }
                memory += runner
                    .redis_cli(node, &["info", "memory"])
                    .lines()
                    .find_map(|l| l.strip_prefix("used_memory:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                keys += runner
                    .redis_cli(node, &["dbsize"])
                    .trim()
                    .parse::<u64>()
                    .unwrap_or(0);
            }
            (memory, keys)
        })
        .await
        .unwrap_or_default();
        let (varnish_dir, index) = (run.dir.join("varnish/state"), run.index);
        let (varnish_bans, varnish_objects) = tokio::task::spawn_blocking(move || {
            let bans = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &format!("mf{index}-varnish"),
                    "varnishadm",
                    "-n",
                ])
                .arg(&varnish_dir)
                .arg("ban.list")
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .filter(|l| l.contains("  ") && !l.starts_with("Present bans"))
                        .count() as u64
                });
            let objects = Command::new("varnishstat")
                .arg("-n")
                .arg(&varnish_dir)
                .args(["-1", "-f", "MAIN.n_object"])
                .output()
                .ok()
                .and_then(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse().ok())
                });
            (bans, objects)
        })
        .await
        .unwrap_or_default();
        samples.push(Sample {
            at_s: run.at_s(Instant::now()),
            musicd,
            follower,
            redis_memory_bytes: redis.0,
            redis_keys: redis.1,
            varnish_bans,
            varnish_objects,
            requests: run.requests.load(Ordering::Relaxed),
            errors: run.errors.load(Ordering::Relaxed),
        });
    }
    samples
}

fn summarize_load(value: &serde_json::Value) -> serde_json::Value {
    let pick = |key: &str| value.get(key).cloned().unwrap_or(serde_json::Value::Null);
    serde_json::json!({
        "requests": pick("requests"),
        "errors": pick("errors"),
        "statuses": pick("statuses"),
        "stalls": pick("stalls"),
    })
}

/// The key budget of `docs/stack.md`: per id requested in the last 30 minutes an entry,
/// a version key and a fill lease at most, and a few keys of the follower's.
fn key_budget() -> u64 {
    3 * TRACKS as u64 + 32
}

/// The verdict: answers, errors, budgets.
fn judge(
    run: &Run,
    options: &Options,
    answers: &[Answer],
    failures: &[Failure],
    samples: &[Sample],
    load: BTreeMap<String, serde_json::Value>,
) -> serde_json::Value {
    let faults: Vec<(Instant, Instant, Fault)> =
        run.faults.lock().map(|f| f.clone()).unwrap_or_default();
    let in_fault =
        |from: Instant, to: Instant| faults.iter().any(|(a, b, _)| from <= *b && to >= *a);
    let versions = run.catalogue.versions.lock();
    let Ok(versions) = versions else {
        return serde_json::json!({"passed": false, "error": "versions poisoned"});
    };
    let (mut wrong, mut stale_beyond, mut stale_in_faults) = (0u64, 0u64, 0u64);
    let mut worst_stale = Duration::ZERO;
    let mut wrong_examples = Vec::new();
    let mut by_layer = vec![0u64; LAYERS.len()];
    for answer in answers {
        by_layer[answer.layer] += 1;
        match staleness(&versions[answer.id], answer) {
            None => {
                wrong += 1;
                if wrong_examples.len() < 5 {
                    wrong_examples.push(format!(
                        "{} track {} at {:.1}s: status {}",
                        LAYERS[answer.layer],
                        answer.id,
                        run.at_s(answer.sent),
                        answer.got.0
                    ));
                }
            }
            Some(stale) if stale > BOUND => {
                if in_fault(answer.sent, answer.received) {
                    stale_in_faults += 1;
                } else {
                    stale_beyond += 1;
                    worst_stale = worst_stale.max(stale);
                }
            }
            Some(_) => {}
        }
    }
    let (mut errors_in, mut errors_out) = (0u64, 0u64);
    let mut outside_examples = Vec::new();
    for failure in failures {
        if in_fault(failure.sent, failure.received) {
            errors_in += 1;
        } else {
            errors_out += 1;
            if outside_examples.len() < 5 {
                outside_examples.push(format!(
                    "{} at {:.1}s: {}",
                    LAYERS[failure.layer],
                    run.at_s(failure.sent),
                    failure.what
                ));
            }
        }
    }

    // Budgets. Each process is judged from its own warm-up on: one started again by a
    // fault gets its own baseline.
    let warmup = (options.duration / 3)
        .min(Duration::from_secs(600))
        .as_secs_f64();
    let mut baselines: BTreeMap<i32, (u64, u64)> = BTreeMap::new();
    let (mut rss_worst, mut fd_worst) = (0.0f64, 0i64);
    let mut judged = 0;
    // A sample taken in a fault window is not judged: a cut link's reconnections, a Redis
    // master that does not yet know it was replaced (its keys counted twice), bans owed
    // to a cache that was away. The budgets are about what the stack settles to.
    let calm = |at_s: f64| {
        !faults
            .iter()
            .any(|(_, _, f)| at_s >= f.at_s && at_s <= f.at_s + f.held_s + GRACE.as_secs_f64())
    };
    let calm_samples: Vec<&Sample> = samples.iter().filter(|s| calm(s.at_s)).collect();
    for sample in &calm_samples {
        for p in &sample.musicd {
            if p.age_s < warmup {
                continue;
            }
            match baselines.get(&p.pid) {
                None => {
                    baselines.insert(p.pid, (p.rss_kib, p.fds));
                }
                Some(&(rss, fds)) => {
                    judged += 1;
                    rss_worst = rss_worst.max(p.rss_kib as f64 / rss.max(1) as f64);
                    fd_worst = fd_worst.max(p.fds as i64 - fds as i64);
                }
            }
        }
    }
    let keys_worst = samples.iter().map(|s| s.redis_keys).max().unwrap_or(0);
    let bans_worst = samples
        .iter()
        .filter_map(|s| s.varnish_bans)
        .max()
        .unwrap_or(0);
    const BAN_LIMIT: u64 = 2000;
    let budgets = serde_json::json!({
        "musicd_rss": Budget {
            limit: format!("1.10x its value after {warmup:.0}s"),
            worst: format!("{rss_worst:.3}x ({judged} samples judged)"),
            ok: rss_worst <= 1.10,
            judged: options.duration >= RSS_JUDGED_FROM,
        },
        "musicd_fds": Budget {
            limit: format!("+16 after {warmup:.0}s"),
            worst: format!("{fd_worst:+}"),
            ok: fd_worst <= 16,
            judged: true,
        },
        "redis_keys": Budget {
            limit: key_budget().to_string(),
            worst: keys_worst.to_string(),
            ok: keys_worst <= key_budget(),
            judged: true,
        },
        "varnish_bans": Budget {
            limit: BAN_LIMIT.to_string(),
            worst: bans_worst.to_string(),
            ok: bans_worst <= BAN_LIMIT,
            judged: true,
        },
    });
    let budgets_ok = budgets
        .as_object()
        .is_some_and(|b| b.values().all(|v| v["ok"] == true || v["judged"] == false));
    let passed = wrong == 0 && stale_beyond == 0 && errors_out == 0 && budgets_ok;
    let changes: usize = versions.iter().map(|v| v.len() - 1).sum();
    serde_json::json!({
        "seed": options.seed,
        "duration_s": options.duration.as_secs(),
        "chaos": options.chaos,
        "requests": answers.len() + failures.len(),
        "answers_by_layer": LAYERS.iter().zip(&by_layer).map(|(l, n)| (l.to_string(), *n)).collect::<BTreeMap<_, _>>(),
        "changes": changes,
        "bound_ms": BOUND.as_millis() as u64,
        "grace_s": GRACE.as_secs(),
        "wrong": wrong,
        "wrong_examples": wrong_examples,
        "stale_beyond_bound": stale_beyond,
        "worst_stale_ms": worst_stale.as_millis() as u64,
        "stale_in_faults": stale_in_faults,
        "errors_in_faults": errors_in,
        "errors_outside_faults": errors_out,
        "errors_outside_examples": outside_examples,
        "faults": faults.iter().map(|(_, _, f)| f.clone()).collect::<Vec<_>>(),
        "budgets": budgets,
        "load": load,
        "samples": samples.len(),
        "samples_outside_faults": calm_samples.len(),
        "passed": passed,
    })
}

fn render_text(verdict: &serde_json::Value) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "soak: seed {} for {} s{}: {} requests, {} changes",
        verdict["seed"],
        verdict["duration_s"],
        if verdict["chaos"] == true {
            " with chaos"
        } else {
            ""
        },
        verdict["requests"],
        verdict["changes"]
    );
    let _ = writeln!(
        out,
        "answers: wrong {}, stale beyond {} ms {} (worst {} ms), stale in fault windows {}",
        verdict["wrong"],
        verdict["bound_ms"],
        verdict["stale_beyond_bound"],
        verdict["worst_stale_ms"],
        verdict["stale_in_faults"]
    );
    let _ = writeln!(
        out,
        "errors: {} in fault windows, {} outside",
        verdict["errors_in_faults"], verdict["errors_outside_faults"]
    );
    for example in verdict["errors_outside_examples"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let _ = writeln!(out, "  outside: {}", example.as_str().unwrap_or_default());
    }
    for example in verdict["wrong_examples"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  wrong: {}", example.as_str().unwrap_or_default());
    }
    for fault in verdict["faults"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "fault at {:>7.1}s held {:>5.1}s: {} {}{}",
            fault["at_s"].as_f64().unwrap_or_default(),
            fault["held_s"].as_f64().unwrap_or_default(),
            fault["kind"].as_str().unwrap_or_default(),
            fault["target"].as_str().unwrap_or_default(),
            fault["note"]
                .as_str()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        );
    }
    if let Some(budgets) = verdict["budgets"].as_object() {
        for (name, budget) in budgets {
            let _ = writeln!(
                out,
                "budget {name}: worst {} (limit {}) {}",
                budget["worst"].as_str().unwrap_or_default(),
                budget["limit"].as_str().unwrap_or_default(),
                match (budget["ok"] == true, budget["judged"] == true) {
                    (true, _) => "ok",
                    (false, true) => "EXCEEDED",
                    (false, false) => "over, not judged in a run this short",
                }
            );
        }
    }
    let _ = writeln!(
        out,
        "{}",
        if verdict["passed"] == true {
            "soak: passed"
        } else {
            "soak: FAILED"
        }
    );
    out
}

/// One plot: lines over the run's seconds, fault windows shaded.
fn chart(
    title: &str,
    series: &[(String, Vec<(f64, f64)>)],
    faults: &[serde_json::Value],
    duration: f64,
) -> String {
    let (w, h, pad) = (720.0, 200.0, 40.0);
    let max_y = series
        .iter()
        .flat_map(|(_, points)| points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max)
        .max(1.0)
        * 1.1;
    let x = |t: f64| pad + (w - 2.0 * pad) * t / duration.max(1.0);
    let y = |v: f64| h - pad + (2.0 * pad - h) * v / max_y;
    let mut svg = format!(
        "<h3>{title}</h3><svg width=\"{w}\" height=\"{h}\" style=\"border:1px solid #ccc\">"
    );
    for fault in faults {
        let at = fault["at_s"].as_f64().unwrap_or_default();
        let held = fault["held_s"].as_f64().unwrap_or_default() + GRACE.as_secs_f64();
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{pad}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f4cccc\" opacity=\"0.5\"><title>{} {}</title></rect>",
            x(at),
            (x(at + held) - x(at)).max(1.0),
            h - 2.0 * pad,
            fault["kind"].as_str().unwrap_or_default(),
            fault["target"].as_str().unwrap_or_default()
        );
    }
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"];
    for (k, (name, points)) in series.iter().enumerate() {
        let path: Vec<String> = points
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let color = colors[k % colors.len()];
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/><text x=\"{:.0}\" y=\"{:.0}\" fill=\"{color}\" font-size=\"12\">{name}</text>",
            path.join(" "),
            pad + 120.0 * k as f64,
            pad - 8.0
        );
    }
    let _ = write!(
        svg,
        "<text x=\"4\" y=\"{:.0}\" font-size=\"11\">{max_y:.0}</text><text x=\"4\" y=\"{:.0}\" font-size=\"11\">0</text><text x=\"{:.0}\" y=\"{:.0}\" font-size=\"11\">{duration:.0} s</text></svg>",
        pad,
        h - pad,
        w - pad - 30.0,
        h - 10.0
    );
    svg
}

fn render_html(verdict: &serde_json::Value, samples: &[Sample], duration: Duration) -> String {
    let faults: Vec<serde_json::Value> = verdict["faults"].as_array().cloned().unwrap_or_default();
    let duration = duration.as_secs_f64();
    let per_musicd = |value: &dyn Fn(&ProcSample) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        (1..=MUSICDS)
            .map(|i| {
                let role = format!("m{i}");
                let points = samples
                    .iter()
                    .filter_map(|s| {
                        s.musicd
                            .iter()
                            .find(|p| p.role == role)
                            .map(|p| (s.at_s, value(p)))
                    })
                    .collect();
                (role, points)
            })
            .collect()
    };
    let one = |name: &str, value: &dyn Fn(&Sample) -> Option<f64>| {
        vec![(
            name.to_string(),
            samples
                .iter()
                .filter_map(|s| Some((s.at_s, value(s)?)))
                .collect::<Vec<_>>(),
        )]
    };
    let mut html = String::from(
        "<!doctype html><meta charset=\"utf-8\"><title>musicd soak</title><body style=\"font-family:sans-serif\">",
    );
    let _ = write!(
        html,
        "<h1>musicd soak: {}</h1><pre>{}</pre>",
        if verdict["passed"] == true {
            "passed"
        } else {
            "FAILED"
        },
        render_text(verdict)
            .replace('&', "&amp;")
            .replace('<', "&lt;")
    );
    html.push_str(&chart(
        "musicd RSS (MiB)",
        &per_musicd(&|p| p.rss_kib as f64 / 1024.0),
        &faults,
        duration,
    ));
    html.push_str(&chart(
        "musicd open descriptors",
        &per_musicd(&|p| p.fds as f64),
        &faults,
        duration,
    ));
    html.push_str(&chart(
        "Redis keys",
        &one("keys", &|s| Some(s.redis_keys as f64)),
        &faults,
        duration,
    ));
    html.push_str(&chart(
        "Redis memory (MiB)",
        &one("used_memory", &|s| {
            Some(s.redis_memory_bytes as f64 / 1048576.0)
        }),
        &faults,
        duration,
    ));
    html.push_str(&chart(
        "varnish bans",
        &one("bans", &|s| s.varnish_bans.map(|b| b as f64)),
        &faults,
        duration,
    ));
    html.push_str(&chart(
        "varnish objects",
        &one("objects", &|s| s.varnish_objects.map(|b| b as f64)),
        &faults,
        duration,
    ));
    let mut rates = Vec::new();
    for pair in samples.windows(2) {
        let dt = (pair[1].at_s - pair[0].at_s).max(1.0);
        rates.push((
            pair[1].at_s,
            (pair[1].requests - pair[0].requests) as f64 / dt,
            (pair[1].errors - pair[0].errors) as f64 / dt,
        ));
    }
    html.push_str(&chart(
        "checked requests and errors per second",
        &[
            (
                "requests/s".into(),
                rates.iter().map(|r| (r.0, r.1)).collect(),
            ),
            (
                "errors/s".into(),
                rates.iter().map(|r| (r.0, r.2)).collect(),
            ),
        ],
        &faults,
        duration,
    ));
    html.push_str("</body>");
    html
}

/// Keeps the fleet's logs of a failed run.
fn copy_logs(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "out" || e == "json") {
            std::fs::copy(&path, to.join(&name))?;
        } else if path.is_dir() && name.to_string_lossy().starts_with('m') {
            let log = path.join("musicd.log");
            if log.is_file() {
                std::fs::copy(&log, to.join(format!("{}.log", name.to_string_lossy())))?;
            }
        }
    }
    Ok(())
}
