//! `musicctl`: the operator's tool. Parses arguments and hands over to `musicd::admin`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

// glibc malloc showed up as ~12 % of the CPU of a small-file request; mimalloc's
// thread-local free lists make those allocations nearly free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use musicd::admin::progress::Progress;
use musicd::admin::purge::{self, PurgeOptions, PurgeTarget};
use musicd::admin::reindex::{self, ReindexOptions};
use musicd::admin::verify::Repairs;
use musicd::admin::{self, Backends};
use musicd::cli::{ConfigArgs, Describe};
use musicd::config::Config;

/// Administer a musicd catalogue and its cache.
#[derive(Parser)]
#[command(name = "musicctl", version)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Delete cache keys matching a glob (SCAN + UNLINK; any key bytes, any count, every
    /// cluster master). Exit 0 done, 1 some keys could not be removed, 2 error.
    Purge {
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
    },
    /// Check Redis, MongoDB, the daemon and the media roots. Exit 0 healthy, 1 degraded,
    /// 2 down.
    Health {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Rebuild the cache from MongoDB (streamed, pipelined). Exit 0 done, 1 some entries
    /// could not be written, 2 error.
    Reindex {
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
    },
    /// Add every audio file under DIR to MongoDB (safe to run again); prints new ids.
    Import {
        /// Directory under a media root.
        dir: PathBuf,
    },
    /// List tracks (id, path), in id order.
    List {
        /// At most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Print a signed, expiring URL for a track (keys from the `[signing]` table).
    Sign {
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
    },
    /// Cut-over check: fetch tracks from musicd and from another server with the same URL
    /// scheme (the old service) and compare status, length, type and body. Exit 0 when
    /// they agree, 1 when not.
    Compare {
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
    },
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
    Verify {
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
        /// Make the safe repairs: remove stale cache entries, import orphans. Shows what
        /// it would do unless `--yes` is given too.
        #[arg(long)]
        fix: bool,
        /// With `--fix`: do it.
        #[arg(long, requires = "fix")]
        yes: bool,
    },
    /// Replay access logs (nginx/varnishncsa combined or musicd JSON, gzip or plain)
    /// against a service: each track request at its original time / --speed, with its
    /// Range, abandoned where it was. Exit 0 all completed (and agreed), 1 errors or
    /// differences, 2 could not run.
    Replay {
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
        speed: musicd::admin::replay::Speed,
        /// Connections at once with --speed max.
        #[arg(long, default_value_t = 256)]
        concurrency: usize,
        #[command(flatten)]
        output: TrafficOutput,
    },
    /// Synthetic listeners against a service: each picks tracks by Zipf popularity,
    /// probes, streams through a playback buffer at --bitrate, seeks and skips; stalls are
    /// counted. Exit 0 no error and no stall, 1 errors or stalls, 2 could not run.
    Players {
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
        #[arg(long, value_enum, default_value_t = admin::players::Probe::Head)]
        probe: admin::players::Probe,
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
        #[command(flatten)]
        output: TrafficOutput,
    },
    /// Show what Redis, MongoDB and the disk say about a track id.
    Resolve {
        /// The track's ObjectId.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// What `replay` and `players` share: the bound on each wait, and how they report.
#[derive(clap::Args)]
struct TrafficOutput {
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

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("musicctl: {}", musicd::cli::error_line(err.chain()));
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    // Neither needs a configuration: they describe the command line itself.
    if let Command::Describe(describe) = &cli.command {
        describe.run(Cli::command())?;
        return Ok(ExitCode::SUCCESS);
    }
    let sources = cli.config.sources([]);
    // A missing media root must not stop the commands that diagnose or clean up.
    let config = match cli.command {
        Command::Import { .. } => Config::load(&sources)?,
        _ => Config::load_for_control(&sources)?,
    };
    if let Command::Sign {
        id,
        ttl,
        kid,
        base,
        name,
    } = &cli.command
    {
        let ttl = admin::sign::parse_ttl(ttl)?;
        println!(
            "{}",
            admin::sign::signed_url(
                &config,
                id,
                ttl,
                kid.as_deref(),
                base.as_deref(),
                name.as_deref()
            )?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let backends = Backends::new(&config).await?;
        match cli.command {
            Command::Purge {
                pattern,
                id,
                dry_run,
                batch,
                sleep,
                force,
                json,
            } => {
                let target = match id {
                    Some(id) => PurgeTarget::Id(id),
                    None => PurgeTarget::Pattern {
                        pattern: pattern.unwrap_or_default(),
                        force,
                    },
                };
                let options = PurgeOptions {
                    pattern: Vec::new(),
                    batch: batch.max(1),
                    pause: Duration::from_millis(sleep),
                    dry_run,
                    sample: 10,
                };
                let mut progress = Progress::new(json);
                let purged = purge::purge_everywhere(&config, &backends, target, &options, |p| {
                    progress.update(&format!(
                        "purge: {} matched, {} removed (node {}/{})",
                        p.matched, p.removed, p.nodes_done, p.nodes
                    ));
                })
                .await;
                progress.finish();
                let purged = purged?;
                emit(json, &purged, purged.render(), purged.exit_code())
            }
            Command::Health { json } => {
                let ops = musicd::daemon::control::readyz_address(&config, None);
                let report = admin::health::health(&backends, ops, &config.ban_urls).await;
                emit(json, &report, report.render(), report.exit_code())
            }
            Command::Reindex {
                dry_run,
                prune,
                batch,
                json,
            } => {
                let options = ReindexOptions {
                    dry_run,
                    prune,
                    batch: batch.max(1),
                };
                let mut progress = Progress::new(json);
                let report = reindex::reindex(
                    &backends,
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
                let report = report?;
                emit(json, &report, report.render(), report.exit_code())
            }
            Command::Import { dir } => {
                let report = admin::import::import(&backends, &dir).await?;
                print!("{}", report.render());
                eprintln!("{}", report.summary());
                Ok(ExitCode::SUCCESS)
            }
            Command::List { limit } => {
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                admin::list::write_tsv(&backends, limit, &mut out).await?;
                Ok(ExitCode::SUCCESS)
            }
            Command::Compare {
                against,
                base,
                sample,
                json,
            } => {
                let report =
                    admin::compare::compare_catalogue(&config, &backends, &against, base, sample)
                        .await?;
                emit(json, &report, report.render(), report.exit_code())
            }
            Command::Sign { .. } | Command::Describe(_) => {
                unreachable!("answered before the runtime starts")
            }
            Command::Watch => {
                musicd::daemon::init_logging("info");
                let mut config = config.clone();
                // Asked for explicitly: follow whatever the config says for the daemons.
                config.mongodb.watch = musicd::config::WatchMode::On;
                let status = std::sync::Arc::new(musicd::watch::WatchStatus::new(&config));
                let follower = musicd::watch::Follower::new(&config, status).await?;
                tracing::info!(
                    owner = follower.owner(),
                    "musicctl watch: following (or standing by)"
                );
                follower.run(musicd::daemon::stop_signal()).await;
                Ok(ExitCode::SUCCESS)
            }
            Command::Verify {
                strict,
                deep,
                batch,
                json,
                fix,
                yes,
            } => {
                let options = admin::verify::VerifyOptions {
                    batch: batch.max(1),
                    deep,
                };
                let repairs = match (fix, yes) {
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
                let mut progress = Progress::with_total(json, total);
                let verified = admin::verify::verify_and_repair(
                    &backends,
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
                let verified = verified?;
                emit(
                    json,
                    &verified,
                    verified.render(),
                    verified.exit_code(strict),
                )
            }
            Command::Replay {
                logs,
                target,
                against,
                speed,
                concurrency,
                output:
                    TrafficOutput {
                        timeout,
                        json,
                        report: page,
                    },
            } => {
                let options = admin::replay::ReplayOptions {
                    target,
                    against,
                    speed,
                    concurrency,
                    timeout: Duration::from_secs(timeout.max(1)),
                    prefixes: config.route_prefixes.clone(),
                };
                let mut progress = Progress::new(json);
                let report = admin::replay::replay(&logs, &options, |done, total| {
                    progress.update(&format!("replay: {done} of {total} requests"));
                })
                .await;
                progress.finish();
                let report = report?;
                write_page(page.as_deref(), || report.html())?;
                emit(json, &report, report.render(), report.exit_code())
            }
            Command::Players {
                target,
                listeners,
                duration,
                ids,
                zipf,
                bitrate,
                prebuffer,
                buffer,
                probe,
                seek_rate,
                skip_rate,
                ramp,
                ramp_steps,
                output:
                    TrafficOutput {
                        timeout,
                        json,
                        report: page,
                    },
            } => {
                let tracks = match ids {
                    Some(file) => admin::players::tracks_from_file(&file)?,
                    None => admin::players::tracks_from_catalogue(&backends).await?,
                };
                let options = admin::players::PlayersOptions {
                    target,
                    listeners,
                    duration,
                    zipf,
                    bitrate,
                    prebuffer,
                    buffer,
                    probe,
                    seek_rate,
                    skip_rate,
                    ramp_steps: if ramp { ramp_steps.max(2) } else { 1 },
                    timeout: Duration::from_secs(timeout.max(1)),
                    prefix: config
                        .route_prefixes
                        .first()
                        .cloned()
                        .unwrap_or_else(|| "/musicdb".into()),
                };
                // One core drives every listener: their own event loop, on a thread of their own.
                let report = tokio::task::spawn_blocking(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    let mut progress = Progress::new(json);
                    let ran = runtime.block_on(admin::players::players(tracks, options, |tick| {
                        progress.update(&format!(
                            "players: {} s, {} listeners, {} requests, {} stalls, {} errors",
                            tick.seconds, tick.listeners, tick.requests, tick.stalls, tick.errors
                        ));
                    }));
                    progress.finish();
                    anyhow::Ok(ran?)
                })
                .await??;
                write_page(page.as_deref(), || report.html())?;
                emit(json, &report, report.render(), report.exit_code())
            }
            Command::Resolve { id, json } => {
                let report = admin::resolve::resolve(&backends, &id).await?;
                emit(json, &report, report.render(), report.exit_code())
            }
        }
    })
}

/// Writes the `--report` page, when one was asked for.
fn write_page(path: Option<&std::path::Path>, html: impl FnOnce() -> String) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, html()).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
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

/// Prints a command's report, as JSON or as text, and exits with its code.
fn emit(
    json: bool,
    report: &impl serde::Serialize,
    text: String,
    code: u8,
) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print!("{text}");
    }
    Ok(ExitCode::from(code))
}
