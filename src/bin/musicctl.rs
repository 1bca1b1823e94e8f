//! `musicctl`: the operator's tool. Parses arguments and hands over to `musicd::admin`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use musicd::admin::{self, Backends};
use musicd::config::{Config, Sources};

/// Administer a musicd catalogue: import files, inspect ids.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Configuration file (TOML), shared with musicd.
    #[arg(long, short, global = true, env = "MUSICD_CONFIG")]
    config: Option<PathBuf>,
    /// Override a configuration key, e.g. `--set redis.prefix=test_` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    overrides: Vec<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
    let config = Config::load(&Sources::from_process(cli.config, cli.overrides))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async move {
        let backends = Backends::new(&config).await?;
        match cli.command {
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
            Command::Resolve { id, json } => {
                let report = admin::resolve::resolve(&backends, &id).await?;
                if json {
                    println!("{}", serde_json::to_string_pretty(&report)?);
                } else {
                    println!("id        {}", report.id);
                    println!("key       {}", report.key);
                    println!(
                        "redis     {} {}",
                        report.cache,
                        report.cached_path.as_deref().unwrap_or("")
                    );
                    println!(
                        "mongodb   {} {}",
                        report.database,
                        report.database_path.as_deref().unwrap_or("")
                    );
                    match (&report.file, &report.problem) {
                        (Some(file), _) => println!("file      {file} (served)"),
                        (None, Some(problem)) => println!("file      not served: {problem}"),
                        (None, None) => println!("file      not served"),
                    }
                }
                Ok(if report.servable {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                })
            }
        }
    })
}
