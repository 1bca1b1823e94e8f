//! `musicd`: the streaming daemon. Parses arguments and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use musicd::config::{Config, Sources};

/// Serve a music catalogue over HTTP by MongoDB ObjectId, cached in Redis.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Configuration file (TOML).
    #[arg(long, short, global = true, env = "MUSICD_CONFIG")]
    config: Option<PathBuf>,
    /// Override a configuration key, e.g. `--set redis.url=redis://127.0.0.1:6380` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    overrides: Vec<String>,
    /// Listen address (overrides `listen`).
    #[arg(long, global = true)]
    listen: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve in the foreground (systemd, containers, development).
    Run,
    /// Check the configuration and print it.
    CheckConfig,
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("musicd: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mut overrides = cli.overrides;
    if let Some(listen) = cli.listen {
        overrides.push(format!("listen=\"{listen}\""));
    }
    let config = Config::load(&Sources::from_process(cli.config, overrides))?;
    match cli.command {
        Command::Run => {
            musicd::daemon::init_logging(&config.log_level);
            musicd::daemon::run(config).context("musicd run")?;
        }
        Command::CheckConfig => println!("{config:#?}"),
    }
    Ok(())
}
