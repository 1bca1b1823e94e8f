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
use mongodb::bson::oid::ObjectId;
use musicd::admin::progress::Progress;
use musicd::admin::purge::{self, PurgeOptions};
use musicd::admin::reindex::{self, ReindexOptions};
use musicd::admin::{self, Backends};
use musicd::catalog::evictions;
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
    /// Show what Redis, MongoDB and the disk say about a track id.
    Resolve {
        /// The track's ObjectId.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("musicctl: {err:#}");
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
            Command::Purge { pattern, id, dry_run, batch, sleep, force, json } => {
                purge_command(&config, &backends, pattern, id, dry_run, batch, sleep, force, json).await
            }
            Command::Health { json } => {
                let report = admin::health::health(
                    &backends,
                    musicd::daemon::control::readyz_address(&config, None),
                    &config.ban_urls,
                )
                .await;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    print!("{}", report.render());
                }
                Ok(ExitCode::from(report.exit_code()))
            }
            Command::Reindex { dry_run, prune, batch, json } => {
                let options = ReindexOptions { dry_run, prune, batch: batch.max(1) };
                let mut progress = Progress::new(json);
                let report = reindex::reindex(&backends, &config.redis.target, config.redis.batch_timeout(), &options, |p| {
                    progress.update(&format!("reindex: {} documents, {} indexed, {} pruned", p.documents, p.indexed, p.pruned));
                })
                .await?;
                progress.finish();
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    let verb = if dry_run { "would index" } else { "indexed" };
                    println!(
                        "reindex: {} documents in {:.2}s ({:.0}/s): {verb} {}, missing file {}, outside roots {}, invalid document {}, write failed {}",
                        report.documents,
                        report.seconds,
                        report.documents as f64 / report.seconds.max(1e-9),
                        report.indexed,
                        report.missing_file,
                        report.outside_roots,
                        report.invalid_document,
                        report.write_failed
                    );
                    if prune {
                        let verb = if dry_run { "would prune" } else { "pruned" };
                        println!("prune: {} cache entries examined, {verb} {}", report.cache_entries, report.pruned);
                    }
                }
                Ok(if report.write_failed > 0 { ExitCode::from(1) } else { ExitCode::SUCCESS })
            }
            Command::Import { dir } => {
                let report = admin::import::import(&backends, &dir).await?;
                for track in &report.inserted {
                    println!("{}\t{}", track.id.to_hex(), track.path.display());
                }
                eprintln!(
                    "import: {} audio files, {} new, {} already present",
                    report.found,
                    report.inserted.len(),
                    report.already_present
                );
                Ok(ExitCode::SUCCESS)
            }
            Command::List { limit } => {
                use musicd::catalog::StoredPath;
                use std::io::Write;
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                let mut write_error = None;
                admin::list::list(&backends, limit, |track| {
                    let path = match track.path {
                        StoredPath::Path(p) => p,
                        StoredPath::Invalid(why) => format!("(invalid: {why})"),
                    };
                    if let Err(e) = writeln!(out, "{}\t{path}", track.id.to_hex()) {
                        write_error.get_or_insert(e);
                    }
                })
                .await?;
                out.flush()?;
                if let Some(e) = write_error {
                    return Err(e.into());
                }
                Ok(ExitCode::SUCCESS)
            }
            Command::Compare { against, base, sample, json } => {
                compare_command(&config, &backends, &against, base, sample, json).await
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
                tracing::info!(owner = follower.owner(), "musicctl watch: following (or standing by)");
                follower.run(musicd::daemon::stop_signal()).await;
                Ok(ExitCode::SUCCESS)
            }
            Command::Verify { strict, deep, batch, json, fix, yes } => {
                let options = admin::verify::VerifyOptions { batch: batch.max(1), deep };
                let total = backends.store.collection().estimated_document_count().await.ok();
                let mut progress = Progress::with_total(json, total);
                let report = admin::verify::verify(&backends, &config.redis.target, config.redis.batch_timeout(), &options, |p| {
                    progress.advance(Some(p.checked), &format!("verify: {} documents, {} findings", p.checked, p.findings));
                })
                .await?;
                progress.finish();
                let fixed = if fix && yes { Some(admin::verify::fix(&backends, &report).await?) } else { None };
                if json {
                    let mut value = serde_json::to_value(&report)?;
                    if let Some(fixed) = &fixed {
                        value["fixed"] = serde_json::to_value(fixed)?;
                    }
                    println!("{}", serde_json::to_string_pretty(&value)?);
                } else {
                    print!("{}", report.render());
                    let (stale, orphans) = report.repairs();
                    match &fixed {
                        Some(fixed) => println!("fixed: removed {} stale cache entries, imported {} orphans", fixed.pruned, fixed.imported),
                        None if fix => println!("--fix would remove {} stale cache entries and import {} orphans (add --yes to do it)", stale.len(), orphans.len()),
                        None => {}
                    }
                }
                Ok(ExitCode::from(match &fixed {
                    Some(fixed) => report.exit_code_after(fixed, strict),
                    None => report.exit_code(strict),
                }))
            }
            Command::Resolve { id, json } => {
                let report = admin::resolve::resolve(&backends, &id).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    println!("id        {}", report.id);
                    println!("key       {}", report.key);
                    println!("redis     {} {}", report.cache, report.cached_path.as_deref().unwrap_or(""));
                    println!("mongodb   {} {}", report.database, report.database_path.as_deref().unwrap_or(""));
                    match (&report.file, &report.problem) {
                        (Some(file), _) => println!("file      {file} (served)"),
                        (None, Some(problem)) => println!("file      not served: {problem}"),
                        (None, None) => println!("file      not served"),
                    }
                }
                Ok(if report.servable { ExitCode::SUCCESS } else { ExitCode::from(1) })
            }
        }
    })
}

#[allow(clippy::too_many_arguments)]
async fn purge_command(
    config: &Config,
    backends: &Backends,
    pattern: Option<String>,
    id: Option<String>,
    dry_run: bool,
    batch: usize,
    sleep: u64,
    force: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    if let Some(id) = id {
        let oid = ObjectId::parse_str(&id)
            .map_err(|_| anyhow::anyhow!("`{id}` is not a 24-digit hex ObjectId"))?;
        let key = backends.cache.key(&oid);
        let removed = if dry_run {
            false
        } else {
            let removed = backends.cache.forget(&oid).await?;
            // Every musicd forgets it now rather than at the end of its in-process TTL.
            evictions::publish(backends.cache.link(), backends.cache.prefix(), Some(&[oid]))
                .await?;
            removed
        };
        let regex = admin::ban::id_regex(&config.route_prefixes, &oid.to_hex());
        let (bans, bans_ok) = ban_caches(config, dry_run, Some(regex));
        if json {
            println!(
                "{}",
                serde_json::json!({ "key": key, "removed": removed, "dry_run": dry_run, "bans": bans })
            );
        } else {
            println!(
                "purge: {key} {}",
                if dry_run {
                    "(dry run)"
                } else if removed {
                    "removed"
                } else {
                    "was not cached"
                }
            );
            print_bans(&bans);
        }
        return Ok(if bans_ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let pattern = pattern.unwrap_or_default();
    if pattern.is_empty() {
        anyhow::bail!(
            "an empty pattern matches nothing; did you mean \"{}*\"?",
            config.redis.prefix
        );
    }
    if purge::matches_everything(pattern.as_bytes()) && !force {
        anyhow::bail!(
            "`{pattern}` matches every key in Redis, not just musicd's; add --force if you mean it"
        );
    }
    let options = PurgeOptions {
        pattern: pattern.into_bytes(),
        batch: batch.max(1),
        pause: Duration::from_millis(sleep),
        dry_run,
        sample: 10,
    };
    let mut progress = Progress::new(json);
    let report = purge::purge(
        &config.redis.target,
        config.redis.batch_timeout(),
        &options,
        |p| {
            progress.update(&format!(
                "purge: {} matched, {} removed (node {}/{})",
                p.matched, p.removed, p.nodes_done, p.nodes
            ));
        },
    )
    .await?;
    progress.finish();
    if !dry_run {
        evictions::publish(backends.cache.link(), backends.cache.prefix(), None).await?;
    }
    let regex = admin::ban::glob_regex(
        &config.route_prefixes,
        &config.redis.prefix,
        &String::from_utf8_lossy(&options.pattern),
    );
    let (bans, bans_ok) = ban_caches(config, dry_run, regex);
    if json {
        let mut value = serde_json::to_value(&report)?;
        value["bans"] = serde_json::Value::Array(bans.clone());
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else if dry_run {
        println!(
            "purge (dry run): {} keys match on {} node(s); nothing deleted ({:.2}s)",
            report.matched, report.nodes, report.seconds
        );
        for key in &report.sample {
            println!("  \"{key}\"");
        }
    } else {
        println!(
            "purge: removed {} of {} matching keys on {} node(s) in {:.2}s{}",
            report.removed,
            report.matched,
            report.nodes,
            report.seconds,
            if report.failed > 0 {
                format!("; {} could not be removed", report.failed)
            } else {
                String::new()
            }
        );
    }
    if !json {
        print_bans(&bans);
    }
    Ok(if report.failed > 0 || !bans_ok {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn compare_command(
    config: &Config,
    backends: &Backends,
    against: &str,
    base: Option<String>,
    sample: Option<usize>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use musicd::catalog::StoredPath;
    use rand::RngExt;
    let base = base.unwrap_or_else(|| format!("http://{}", config.listen));
    let prefix = config
        .route_prefixes
        .first()
        .cloned()
        .unwrap_or_else(|| "/musicdb".into());
    // Reservoir sampling: a random sample of any size without holding the catalogue.
    let mut picked: Vec<(String, String)> = Vec::new();
    let mut seen = 0usize;
    let mut rng = rand::rng();
    admin::list::list(backends, None, |track| {
        let name = match &track.path {
            StoredPath::Path(p) => std::path::Path::new(p)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "track".into()),
            StoredPath::Invalid(_) => "track".into(),
        };
        let encoded =
            percent_encoding::utf8_percent_encode(&name, percent_encoding::NON_ALPHANUMERIC);
        let entry = (
            track.id.to_hex(),
            format!("{prefix}/{}/{encoded}", track.id.to_hex()),
        );
        seen += 1;
        match sample {
            Some(n) if picked.len() >= n => {
                let at = rng.random_range(0..seen);
                if at < n {
                    picked[at] = entry;
                }
            }
            _ => picked.push(entry),
        }
    })
    .await?;
    let results: Vec<admin::compare::Comparison> = tokio::task::spawn_blocking({
        let (base, against) = (base.clone(), against.to_string());
        move || {
            picked
                .iter()
                .map(|(id, path)| admin::compare::compare(&base, &against, id, path))
                .collect()
        }
    })
    .await?;
    let disagree = results.iter().filter(|c| !c.agree).count();
    let no_file = results.iter().filter(|c| c.other.no_file).count();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "compared": results.len(),
                "agree": results.len() - disagree,
                "disagree": disagree,
                "no_file_with_200": no_file,
                "tracks": results,
            }))?
        );
    } else {
        for result in &results {
            if result.agree {
                println!(
                    "{}  agree  {} {} bytes",
                    result.id, result.musicd.status, result.musicd.length
                );
            } else {
                println!("{}  DIFFER {}", result.id, result.differences.join("; "));
            }
        }
        println!(
            "compare: {} tracks, {} agree, {} differ ({} answered 200 \"no file\" by the other server)",
            results.len(),
            results.len() - disagree,
            disagree,
            no_file
        );
    }
    Ok(if disagree == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Bans `regex` in every `[http_caches] ban_urls` cache: one JSON report per cache, and
/// whether all of them took it.
fn ban_caches(
    config: &Config,
    dry_run: bool,
    regex: Option<String>,
) -> (Vec<serde_json::Value>, bool) {
    let Some(regex) = regex else {
        return (Vec::new(), true);
    };
    let mut ok = true;
    let bans = config
        .ban_urls
        .iter()
        .map(|url| {
            if dry_run {
                return serde_json::json!({ "url": url, "regex": regex, "dry_run": true });
            }
            match admin::ban::ban(url, &regex) {
                Ok(status) => {
                    ok &= status == 200;
                    serde_json::json!({ "url": url, "regex": regex, "status": status })
                }
                Err(err) => {
                    ok = false;
                    serde_json::json!({ "url": url, "regex": regex, "error": err.to_string() })
                }
            }
        })
        .collect();
    (bans, ok)
}

fn print_bans(bans: &[serde_json::Value]) {
    for ban in bans {
        let url = ban["url"].as_str().unwrap_or_default();
        let regex = ban["regex"].as_str().unwrap_or_default();
        match (&ban["status"], &ban["error"]) {
            (serde_json::Value::Number(status), _) => println!("ban: {url} {regex} -> {status}"),
            (_, serde_json::Value::String(error)) => println!("ban: {url} failed: {error}"),
            _ => println!("ban: {url} {regex} (dry run)"),
        }
    }
}
