//! `musicd`: the streaming daemon. Parses arguments and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

// glibc malloc showed up as ~12 % of the CPU of a small-file request; mimalloc's
// thread-local free lists make those allocations nearly free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use musicd::config::{Config, Sources};
use musicd::daemon::control::{self, Started, Stopped};
use musicd::daemon::{self, RunOptions};

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
    /// Serve in the foreground (systemd Type=notify, containers, development).
    Run {
        /// Append logs to this file and reopen it on SIGUSR1.
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Started by the supervisor (informational; the socket comes through LISTEN_FDS).
        #[arg(long, hide = true)]
        supervised: bool,
    },
    /// Start in the background under a supervisor that restarts crashed workers.
    Start,
    /// Stop gracefully (in-flight responses finish up to daemon.stop_timeout_secs).
    Stop,
    /// Replace the worker without refusing a connection (re-reads the config); starts
    /// musicd if it is not running.
    Restart,
    /// Report supervisor, worker, restarts and /readyz. Exit 0 running, 3 not running.
    Status {
        /// Print JSON (stable field names) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check the configuration and print it.
    CheckConfig,
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `musicd man > musicd.1`.
    Man,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Neither needs a configuration: they describe the command line itself.
    match cli.command {
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "musicd", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Command::Man => {
            return match clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => fail(&err),
            };
        }
        _ => {}
    }
    let mut overrides = cli.overrides;
    if let Some(listen) = cli.listen {
        overrides.push(format!("listen=\"{listen}\""));
    }
    let sources = Sources::from_process(cli.config, overrides);
    let loaded = match cli.command {
        Command::Stop | Command::Status { .. } => Config::load_for_control(&sources),
        _ => Config::load(&sources),
    };
    let config = match loaded {
        Ok(config) => config,
        Err(err) => {
            if matches!(cli.command, Command::Run { .. }) {
                // Under a supervisor or systemd this is how `status` learns why.
                daemon::notify::status(&format!("fatal: {err}"));
            }
            return fail(&err);
        }
    };
    match cli.command {
        Command::Run { log_file, .. } => match daemon::run(config, RunOptions { log_file }) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => fail(&err),
        },
        Command::Start => match control::start(config, sources) {
            Ok(Started::Ready { pid }) => {
                println!("musicd started (supervisor pid {pid})");
                ExitCode::SUCCESS
            }
            Ok(Started::NotReadyYet) => {
                println!("musicd started, but its worker is not ready yet: see `musicd status`");
                ExitCode::SUCCESS
            }
            Err(err) => fail(&err),
        },
        Command::Stop => match control::stop(&config) {
            Ok(Stopped::Stopped(pid)) => {
                println!("musicd stopped (supervisor pid {pid})");
                ExitCode::SUCCESS
            }
            Ok(Stopped::NotRunning) => {
                println!("musicd is not running");
                ExitCode::SUCCESS
            }
            Err(err) => fail(&err),
        },
        Command::Restart => match control::restart(config, sources) {
            Ok(message) => {
                println!("musicd {message}");
                ExitCode::SUCCESS
            }
            Err(err) => fail(&err),
        },
        Command::Status { json } => {
            let status = control::status(&config);
            if json {
                println!("{:#}", status.to_json());
            } else {
                print!("{}", status.render());
            }
            ExitCode::from(status.exit_code())
        }
        Command::CheckConfig => {
            println!("{config:#?}");
            ExitCode::SUCCESS
        }
        Command::Completions { .. } | Command::Man => ExitCode::SUCCESS,
    }
}

fn fail(err: &dyn std::error::Error) -> ExitCode {
    eprintln!("musicd: {err}");
    ExitCode::FAILURE
}
