//! Each command of `musicctl`: its arguments (a `clap::Args` struct) and what it runs,
//! handing the work to `musicd::admin` (or the load generators) and returning the report
//! `main` prints.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use musicd::admin::progress::Progress;
use musicd::admin::purge::{self, PurgeOptions, PurgeTarget};
use musicd::admin::reindex::{self, RebuildOptions};
use musicd::admin::verify::Repairs;
use musicd::admin::{self, Backends};
use musicd::cli::Describe;
use musicd::config::Config;
use musicd_load::{players, plays, replay};

use crate::report::{Counted, Printed, Shown, Verify};

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Delete cache keys matching a glob (SCAN + UNLINK; any key bytes, any count, every
    /// cluster master). Exit 0 done, 1 some keys could not be removed, 2 error.
    Purge(Purge),
    /// Check Redis, MongoDB, the daemon and the media roots. Exit 0 healthy, 1 degraded,
    /// 2 down.
    Health(Health),
    /// Rebuild the cache from MongoDB (streamed, pipelined). Exit 0 done, 1 some entries
    /// could not be written, 2 error.
    Reindex(Reindex),
    /// Add every audio file under DIR to MongoDB (safe to run again); prints new ids.
    Import(Import),
    /// List tracks (id, path), in id order.
    List(List),
    /// Print a signed, expiring URL for a track (keys from the `[signing]` table), bound
    /// to a session (--sid) or an address (--ip) if asked.
    Sign(Sign),
    /// Take back every link of a session (--sid) or of a signing key (--kid) at every
    /// musicd and in the caches in front within a second; --list, --remove. Exit 0 done,
    /// 2 could not (no Redis).
    Revoke(Revoke),
    /// Cut-over check: fetch tracks from musicd and from another server with the same URL
    /// scheme (the old service) and compare status, length, type and body. Exit 0 when
    /// they agree, 1 when not.
    Compare(Compare),
    #[command(flatten)]
    Describe(Describe),
    /// Follow MongoDB's change stream in the foreground and keep the Redis index current
    /// (what musicd does by itself unless `mongodb.watch = "off"`); stops on SIGINT/SIGTERM.
    /// Takes part in the same lease as the daemons: one follower at a time.
    Watch,
    /// Check that the catalogue, the disk and the cache agree and that every file is what
    /// its name says: missing, outside_roots, unreadable, empty, type_mismatch, truncated,
    /// duplicate, orphan, cache_stale; warnings slow_start, no_seek_table, size_drift.
    /// Run it as musicd's user. Exit 0 nothing but warnings, 1 findings, 2 error.
    Verify(VerifyArgs),
    /// Replay access logs (nginx/varnishncsa combined or musicd JSON, gzip or plain)
    /// against a service: each track request at its original time / --speed, with its
    /// Range, abandoned where it was. Exit 0 all completed (and agreed), 1 errors or
    /// differences, 2 could not run.
    Replay(Replay),
    /// Synthetic listeners against a service: each picks tracks by Zipf popularity,
    /// probes, streams through a playback buffer at --bitrate, seeks and skips; stalls are
    /// counted. Exit 0 no error and no stall, 1 errors or stalls, 2 could not run.
    Players(Players),
    /// Show what Redis, MongoDB and the disk say about a track id.
    Resolve(Resolve),
    /// Count plays in access logs (nginx/varnishncsa/musicd combined or musicd JSON, gzip
    /// or plain): GET 200/206 track requests, probes, HEADs, 304s and bots dropped, one
    /// listener's ranges of a track stitched within a window until they reach the header
    /// plus --threshold of audio. Exit 0 counted, 1 some lines unreadable or a file cut
    /// short, 2 could not run.
    Plays(Plays),
}

impl Command {
    /// Whether the media roots must exist: only `import` writes what it finds under them;
    /// the commands that diagnose or clean up must run without.
    pub(crate) fn needs_media_roots(&self) -> bool {
        matches!(self, Command::Import(_))
    }

    /// Runs a command that needs the backends.
    pub(crate) async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        match self {
            Command::Purge(command) => command.run(config, backends).await,
            Command::Health(command) => command.run(config, backends).await,
            Command::Reindex(command) => command.run(config, backends).await,
            Command::Import(command) => command.run(backends).await,
            Command::List(command) => command.run(backends).await,
            Command::Compare(command) => command.run(config, backends).await,
            Command::Watch => watch(config).await,
            Command::Verify(command) => command.run(config, backends).await,
            Command::Replay(command) => command.run(config).await,
            Command::Players(command) => command.run(config, backends).await,
            Command::Resolve(command) => command.run(backends).await,
            Command::Plays(command) => command.run(config, Some(backends)).await,
            Command::Revoke(command) => command.run(config, backends).await,
            Command::Sign(_) | Command::Describe(_) => {
                unreachable!("answered before the runtime starts")
            }
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct Purge {
    /// Redis glob, e.g. "track_*". Not needed with --id.
    #[arg(required_unless_present = "id")]
    pattern: Option<String>,
    /// Purge the entry of one track instead of a pattern.
    #[arg(long, conflicts_with = "pattern")]
    id: Option<String>,
    /// Count and show a sample of the matching keys; delete nothing.
    #[arg(long)]
    dry_run: bool,
    /// SCAN COUNT and keys per UNLINK.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Pause between batches in milliseconds (throttle on a busy server).
    #[arg(long, default_value_t = 0)]
    sleep: u64,
    /// Allow a pattern that matches every key.
    #[arg(long)]
    force: bool,
    /// Print the report as JSON (no progress output).
    #[arg(long)]
    json: bool,
}

impl Purge {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let target = match self.id {
            Some(id) => PurgeTarget::Id(id),
            None => PurgeTarget::Pattern {
                pattern: self.pattern.unwrap_or_default(),
                force: self.force,
            },
        };
        let options = PurgeOptions {
            pattern: Vec::new(),
            batch: self.batch.max(1),
            pause: Duration::from_millis(self.sleep),
            dry_run: self.dry_run,
            sample: 10,
        };
        let mut progress = Progress::new(self.json);
        let purged = purge::purge_everywhere(config, backends, target, &options, |p| {
            progress.update(&format!(
                "purge: {} matched, {} removed (node {}/{})",
                p.matched, p.removed, p.nodes_done, p.nodes
            ));
        })
        .await;
        progress.finish();
        Ok(Shown::new(purged?, self.json))
    }
}

#[derive(clap::Args)]
pub(crate) struct Health {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

impl Health {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let ops = musicd::daemon::control::readyz_address(config, None);
        let report = admin::health::health(backends, ops, &config.ban_urls).await;
        Ok(Shown::new(report, self.json))
    }
}

#[derive(clap::Args)]
pub(crate) struct Reindex {
    /// Check everything, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Also remove cache entries whose id or file is gone.
    #[arg(long)]
    prune: bool,
    /// Documents per batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Print the report as JSON (no progress output).
    #[arg(long)]
    json: bool,
}

impl Reindex {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let options = RebuildOptions {
            dry_run: self.dry_run,
            prune: self.prune,
            batch: self.batch.max(1),
            versioned: false,
        };
        let mut progress = Progress::new(self.json);
        let report = reindex::reindex(
            backends,
            &config.redis.target,
            config.redis.batch_timeout(),
            &options,
            |p| {
                progress.update(&format!(
                    "reindex: {} documents, {} indexed, {} pruned",
                    p.documents, p.indexed, p.pruned
                ));
            },
        )
        .await;
        progress.finish();
        Ok(Shown::new(report?, self.json))
    }
}

#[derive(clap::Args)]
pub(crate) struct Import {
    /// Directory under a media root.
    dir: PathBuf,
}

impl Import {
    async fn run(self, backends: &Backends) -> anyhow::Result<Shown> {
        let report = admin::import::import(backends, &self.dir).await?;
        print!("{}", report.render());
        eprintln!("{}", report.summary());
        Ok(Shown::new(Printed, false))
    }
}

#[derive(clap::Args)]
pub(crate) struct List {
    /// At most this many.
    #[arg(long, conflicts_with = "facts")]
    limit: Option<u64>,
    /// Write JSON lines `{"id","size","bitrate","duration","audio_offset"}` instead: the
    /// `--facts` file of `musicctl plays`.
    #[arg(long)]
    facts: bool,
}

impl List {
    async fn run(self, backends: &Backends) -> anyhow::Result<Shown> {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if self.facts {
            admin::list::write_facts(backends, &mut out).await?;
        } else {
            admin::list::write_tsv(backends, self.limit, &mut out).await?;
        }
        Ok(Shown::new(Printed, false))
    }
}

#[derive(clap::Args)]
pub(crate) struct Sign {
    /// The track's ObjectId.
    id: String,
    /// How long the link is valid: 1h, 30m, 2d, or seconds.
    #[arg(long, default_value = "1h")]
    ttl: String,
    /// Sign with this key (default: the first).
    #[arg(long)]
    kid: Option<String>,
    /// Scheme and host of the URL (default: http://{listen}).
    #[arg(long)]
    base: Option<String>,
    /// A cosmetic file name to end the path with (not signed).
    #[arg(long)]
    name: Option<String>,
    /// Bind the link to a session: `musicctl revoke --sid` takes every link of it back.
    #[arg(long)]
    sid: Option<String>,
    /// Bind the link to an address (an IPv6 one binds its /64) or a CIDR network.
    #[arg(long)]
    ip: Option<String>,
}

impl Sign {
    /// Needs no backend, so no runtime.
    pub(crate) fn run(&self, config: &Config) -> anyhow::Result<Shown> {
        let ttl = admin::sign::parse_ttl(&self.ttl)?;
        let url = admin::sign::signed_url(
            config,
            &self.id,
            &admin::sign::LinkOptions {
                ttl_secs: ttl,
                kid: self.kid.as_deref(),
                base: self.base.as_deref(),
                name: self.name.as_deref(),
                sid: self.sid.as_deref(),
                ip: self.ip.as_deref(),
            },
        )?;
        println!("{url}");
        Ok(Shown::new(Printed, false))
    }
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["sid", "kid", "list"])))]
pub(crate) struct Revoke {
    /// The session whose links to take back.
    #[arg(long)]
    sid: Option<String>,
    /// The signing key whose links to take back (a compromised key, retired at once).
    #[arg(long)]
    kid: Option<String>,
    /// Until when: a duration from now (7d, 12h) or a time (2026-12-31T00:00:00Z).
    /// Default: signing.revocation_ttl, the longest a session link may live.
    #[arg(long, conflicts_with_all = ["list", "remove"])]
    until: Option<String>,
    /// End the revocation of --sid or --kid now.
    #[arg(long, conflicts_with = "list")]
    remove: bool,
    /// List the revocations in force.
    #[arg(long)]
    list: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Revoke {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        use musicd::admin::revoke::{self, RevokeAction};
        let subject = match (&self.sid, &self.kid) {
            (Some(sid), _) => format!("sid:{sid}"),
            (None, Some(kid)) => format!("kid:{kid}"),
            (None, None) => String::new(),
        };
        let action = if self.list {
            RevokeAction::List
        } else if self.remove {
            RevokeAction::Remove { subject }
        } else {
            let until = self.until.as_deref().map(parse_until).transpose()?;
            RevokeAction::Add { subject, until }
        };
        let report = revoke::revoke(config, backends, action).await?;
        Ok(Shown::new(report, self.json))
    }
}

/// `--until`: a duration from now or an RFC 3339 time, as Unix seconds.
fn parse_until(text: &str) -> anyhow::Result<u64> {
    let now = std::time::SystemTime::now();
    let at = match humantime::parse_duration(text) {
        Ok(after) => now + after,
        Err(_) => humantime::parse_rfc3339_weak(text).map_err(|_| {
            anyhow::anyhow!(
                "--until `{text}` is neither a duration (7d) nor a time (2026-12-31T00:00:00Z)"
            )
        })?,
    };
    Ok(at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()))
}

#[derive(clap::Args)]
pub(crate) struct Compare {
    /// The other server, e.g. http://127.0.0.1:3000.
    #[arg(long)]
    against: String,
    /// musicd's URL (default: http://{listen}).
    #[arg(long)]
    base: Option<String>,
    /// Compare this many tracks, sampled at random (default: all).
    #[arg(long)]
    sample: Option<usize>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Compare {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let report = admin::compare::compare_catalogue(
            config,
            backends,
            &self.against,
            self.base,
            self.sample,
        )
        .await?;
        Ok(Shown::new(report, self.json))
    }
}

async fn watch(config: &Config) -> anyhow::Result<Shown> {
    musicd::daemon::init_logging("info");
    let mut config = config.clone();
    // Asked for explicitly: follow whatever the config says for the daemons.
    config.mongodb.watch = musicd::config::WatchMode::On;
    let status = std::sync::Arc::new(musicd::follow::FollowerStatus::new(&config));
    let follower = musicd::follow::Follower::new(&config, status).await?;
    tracing::info!(
        owner = follower.owner(),
        "musicctl watch: following (or standing by)"
    );
    follower.run(musicd::daemon::stop_signal()).await;
    Ok(Shown::new(Printed, false))
}

#[derive(clap::Args)]
pub(crate) struct VerifyArgs {
    /// Warnings count as findings for the exit code.
    #[arg(long)]
    strict: bool,
    /// Also demux every file to its end (finds streams cut short that no header
    /// declares); uses every core.
    #[arg(long)]
    deep: bool,
    /// Documents per batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Print `{"checked", "counts", "findings"}` as JSON (no progress output).
    #[arg(long)]
    json: bool,
    /// Make the safe repairs: remove stale cache entries, import orphans, backfill the
    /// `audio_offset` of documents imported without one. Shows what it would do unless
    /// `--yes` is given too.
    #[arg(long)]
    fix: bool,
    /// With `--fix`: do it.
    #[arg(long, requires = "fix")]
    yes: bool,
}

impl VerifyArgs {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let options = admin::verify::VerifyOptions {
            batch: self.batch.max(1),
            deep: self.deep,
        };
        let repairs = match (self.fix, self.yes) {
            (true, true) => Repairs::Make,
            (true, false) => Repairs::Show,
            (false, _) => Repairs::Ignore,
        };
        let total = backends
            .store
            .collection()
            .estimated_document_count()
            .await
            .ok();
        let mut progress = Progress::with_total(self.json, total);
        let verified = admin::verify::verify_and_repair(
            backends,
            &config.redis.target,
            config.redis.batch_timeout(),
            &options,
            repairs,
            |p| {
                progress.advance(
                    Some(p.checked),
                    &format!("verify: {} documents, {} findings", p.checked, p.findings),
                );
            },
        )
        .await;
        progress.finish();
        let report = Verify {
            verified: verified?,
            strict: self.strict,
        };
        Ok(Shown::new(report, self.json))
    }
}

/// What `replay` and `players` share: the bound on each wait, and how they report.
#[derive(clap::Args)]
pub(crate) struct TrafficOutput {
    /// Seconds a connect, or a silence of the server, may last.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
    /// Print JSON (no progress output).
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page: the summary and plots over time.
    #[arg(long)]
    report: Option<PathBuf>,
}

impl TrafficOutput {
    fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout.max(1))
    }

    /// Writes the `--report` page, when one was asked for.
    fn write_page(&self, html: impl FnOnce() -> String) -> anyhow::Result<()> {
        if let Some(path) = &self.report {
            std::fs::write(path, html()).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(())
    }
}

#[derive(clap::Args)]
pub(crate) struct Replay {
    /// The logs, in any order (requests are replayed in time order).
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// The service, e.g. http://127.0.0.1:23001.
    #[arg(long)]
    target: String,
    /// A second service to send the same traffic to, side by side.
    #[arg(long)]
    against: Option<String>,
    /// The original timing divided by this, or `max` (as fast as --concurrency allows).
    #[arg(long, default_value = "1")]
    speed: replay::Speed,
    /// Connections at once with --speed max.
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    #[command(flatten)]
    output: TrafficOutput,
}

impl Replay {
    async fn run(self, config: &Config) -> anyhow::Result<Shown> {
        let options = replay::ReplayOptions {
            target: self.target,
            against: self.against,
            speed: self.speed,
            concurrency: self.concurrency,
            timeout: self.output.timeout(),
            prefixes: config.route_prefixes.clone(),
        };
        let mut progress = Progress::new(self.output.json);
        let report = replay::replay(&self.logs, &options, |done, total| {
            progress.update(&format!("replay: {done} of {total} requests"));
        })
        .await;
        progress.finish();
        let report = report?;
        self.output.write_page(|| report.html())?;
        Ok(Shown::new(report, self.output.json))
    }
}

#[derive(clap::Args)]
pub(crate) struct Players {
    /// The service, e.g. http://127.0.0.1:23001.
    #[arg(long)]
    target: String,
    /// Listeners (at the end of the ramp, with --ramp).
    #[arg(long, default_value_t = 100)]
    listeners: usize,
    /// How long: 15s, 2m, 1h.
    #[arg(long, default_value = "1m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Tracks from this file (an id per line, `musicctl list` output works) instead of
    /// the catalogue.
    #[arg(long)]
    ids: Option<PathBuf>,
    /// Zipf exponent of track popularity.
    #[arg(long, default_value_t = 1.0)]
    zipf: f64,
    /// Playback rate: 320k, 1.4M, or bits per second.
    #[arg(long, default_value = "320k", value_parser = parse_bitrate)]
    bitrate: u64,
    /// Buffered before playback starts (and after a stall).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    prebuffer: Duration,
    /// Read ahead of the playhead at most this much.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    buffer: Duration,
    /// What is sent before each track.
    #[arg(long, value_enum, default_value_t = players::Probe::Head)]
    probe: players::Probe,
    /// Seeks per minute of listening.
    #[arg(long, default_value_t = 0.0)]
    seek_rate: f64,
    /// Skips per minute of listening.
    #[arg(long, default_value_t = 0.0)]
    skip_rate: f64,
    /// Add the listeners in --ramp-steps steps and report the most held without stalls.
    #[arg(long)]
    ramp: bool,
    /// Steps of --ramp.
    #[arg(long, default_value_t = 10)]
    ramp_steps: usize,
    /// Fetch in bounded ranges of this many bytes (as AVPlayer and ExoPlayer do) instead
    /// of one open-ended range per track.
    #[arg(long)]
    chunk: Option<u64>,
    /// Write what every listener was sent to FILE, a JSON line per exchange
    /// `{"listener","id","start","bytes","status"}`: the truth to check `plays` against.
    #[arg(long)]
    listens: Option<PathBuf>,
    #[command(flatten)]
    output: TrafficOutput,
}

impl Players {
    async fn run(self, config: &Config, backends: &Backends) -> anyhow::Result<Shown> {
        let tracks = match &self.ids {
            Some(file) => players::tracks_from_file(file)?,
            None => admin::list::ids_and_names(backends)
                .await?
                .into_iter()
                .map(|(id, name)| players::Track { id, name })
                .collect(),
        };
        let options = players::PlayersOptions {
            target: self.target,
            listeners: self.listeners,
            duration: self.duration,
            zipf: self.zipf,
            bitrate: self.bitrate,
            prebuffer: self.prebuffer,
            buffer: self.buffer,
            probe: self.probe,
            seek_rate: self.seek_rate,
            skip_rate: self.skip_rate,
            ramp_steps: if self.ramp { self.ramp_steps.max(2) } else { 1 },
            timeout: self.output.timeout(),
            prefix: config.track_prefix().to_string(),
            // A shell hands out 1,024 descriptors; each listener holds one.
            open_files: musicd::daemon::raise_open_files_limit().unwrap_or(1024),
            chunk: self.chunk,
            listens: self.listens.is_some(),
        };
        let json = self.output.json;
        // One core drives every listener: their own event loop, on a thread of their own.
        let report = tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let mut progress = Progress::new(json);
            let ran = runtime.block_on(players::players(tracks, options, |tick| {
                progress.update(&format!(
                    "players: {} s, {} listeners, {} requests, {} stalls, {} errors",
                    tick.seconds, tick.listeners, tick.requests, tick.stalls, tick.errors
                ));
            }));
            progress.finish();
            anyhow::Ok(ran?)
        })
        .await??;
        self.output.write_page(|| report.html())?;
        if let Some(path) = &self.listens {
            write_json_lines(path, &report.listens)?;
        }
        Ok(Shown::new(report, json))
    }
}

#[derive(clap::Args)]
pub(crate) struct Resolve {
    /// The track's ObjectId.
    id: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl Resolve {
    async fn run(self, backends: &Backends) -> anyhow::Result<Shown> {
        let report = admin::resolve::resolve(backends, &self.id).await?;
        Ok(Shown::new(report, self.json))
    }
}

/// `320k`, `1.4M` or a number: bits per second.
fn parse_bitrate(text: &str) -> Result<u64, String> {
    let (number, unit) = match text.strip_suffix(['k', 'K']) {
        Some(number) => (number, 1_000.0),
        None => match text.strip_suffix('M') {
            Some(number) => (number, 1_000_000.0),
            None => (text, 1.0),
        },
    };
    match number.parse::<f64>() {
        Ok(value) if value.is_finite() && value * unit >= 1.0 => Ok((value * unit) as u64),
        _ => Err(format!("`{text}` is not a bitrate (320k, 1.4M, 320000)")),
    }
}

#[derive(clap::Args)]
pub(crate) struct Plays {
    /// The logs, in any order: their lines are counted in time order.
    #[arg(required = true)]
    logs: Vec<PathBuf>,
    /// Seconds of audio a play needs (IAB's podcast rule is 60s).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    threshold: Duration,
    /// `rolling`: 24 h from a listener's first request for a track; `calendar`: the UTC
    /// day.
    #[arg(long, value_enum, default_value_t = plays::Window::Rolling)]
    window: plays::Window,
    /// The logs' format (`auto`: decided per file from its first line).
    #[arg(long, value_enum, default_value_t = plays::LogFormat::Auto)]
    format: plays::LogFormat,
    /// User agents to drop as bots besides the built-in list (a regex; repeatable).
    #[arg(long = "exclude-ua", value_name = "REGEX")]
    exclude_ua: Vec<regex::Regex>,
    /// Tracks' facts from this file (`musicctl list --facts`) instead of the catalogue:
    /// then neither MongoDB nor a configuration file is needed.
    #[arg(long)]
    facts: Option<PathBuf>,
    /// Tracks in the table.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Print JSON.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Print CSV: `day,id,plays,listeners,bytes`, a row per UTC day and track.
    #[arg(long)]
    csv: bool,
    /// Also write a self-contained HTML page: plays per hour and the top tracks.
    #[arg(long)]
    report: Option<PathBuf>,
}

impl Plays {
    /// Whether it runs without MongoDB (its facts come from a file).
    pub(crate) fn offline(&self) -> bool {
        self.facts.is_some()
    }

    pub(crate) async fn run(
        self,
        config: &Config,
        backends: Option<&Backends>,
    ) -> anyhow::Result<Shown> {
        let mut facts = plays::Facts::default();
        match (&self.facts, backends) {
            (Some(file), _) => facts = plays::Facts::read(file)?,
            (None, Some(backends)) => {
                admin::list::facts(backends, |track| {
                    facts.insert(
                        &track.id,
                        plays::TrackFacts {
                            size: track.size,
                            bitrate: track.bitrate,
                            duration: track.duration,
                            audio_offset: track.audio_offset,
                        },
                    );
                })
                .await?;
            }
            (None, None) => anyhow::bail!("no --facts file and no catalogue"),
        }
        let options = plays::PlaysOptions {
            threshold_s: self.threshold.as_secs_f64(),
            window: self.window,
            format: self.format,
            exclude_agents: self.exclude_ua,
            prefixes: config.route_prefixes.clone(),
        };
        let report = plays::plays(&self.logs, &facts, &options)?;
        if let Some(path) = &self.report {
            std::fs::write(path, report.html())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        for error in &report.read_errors {
            eprintln!("musicctl: {error}");
        }
        Ok(Shown::new(
            Counted {
                report,
                top: self.top,
                csv: self.csv,
            },
            self.json,
        ))
    }
}

/// Writes `items` to `path`, a JSON object per line.
fn write_json_lines<T: serde::Serialize>(
    path: &std::path::Path,
    items: &[T],
) -> anyhow::Result<()> {
    use std::io::Write;
    let writing = || format!("writing {}", path.display());
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).with_context(writing)?);
    for item in items {
        serde_json::to_writer(&mut out, item).with_context(writing)?;
        out.write_all(b"\n").with_context(writing)?;
    }
    out.flush().with_context(writing)
}
