//! `musicctl`: the operator's tool. Parses arguments and hands each command to its
//! `run` (`commands`), which calls `musicd::admin` and returns a report (`report`).

mod commands;
mod report;

use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use musicd::admin::Backends;
use musicd::cli::ConfigArgs;
use musicd::config::Config;

use commands::Command;

/// Administer a musicd catalogue and its cache.
#[derive(Parser)]
#[command(name = "musicctl", version)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
    #[command(subcommand)]
    command: Command,
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
    let command = match cli.command {
        // Neither needs a configuration: they describe the command line itself.
        Command::Describe(describe) => {
            describe.run(Cli::command())?;
            return Ok(ExitCode::SUCCESS);
        }
        command => command,
    };
    let sources = cli.config.sources([]);
    // A missing media root must not stop the commands that diagnose or clean up.
    let config = if command.needs_media_roots() {
        Config::load(&sources)?
    } else {
        Config::load_for_control(&sources)?
    };
    if let Command::Sign(sign) = &command {
        return sign.run(&config)?.print();
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    // With its facts in a file, `plays` needs no backend at all.
    if let Command::Plays(plays) = &command
        && plays.offline()
    {
        let Command::Plays(plays) = command else {
            unreachable!("matched above")
        };
        return runtime.block_on(plays.run(&config, None))?.print();
    }
    let shown = runtime.block_on(async {
        let backends = Backends::new(&config).await?;
        command.run(&config, &backends).await
    })?;
    shown.print()
}
