//! `musicd`: the streaming daemon. Parses arguments and hands over to the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

// glibc malloc showed up as ~12 % of the CPU of a small-file request; mimalloc's
// thread-local free lists make those allocations nearly free.
#[global_allocator]
static ALLOCATOR: musicd::allocator::MiMalloc = musicd::allocator::MiMalloc;
use musicd::cli::{ConfigArgs, Describe};
use musicd::config::Config;
use musicd::daemon::control::{self, Started, Stopped};
use musicd::daemon::{self, RunOptions};

/// Serve a music catalogue over HTTP by MongoDB ObjectId, cached in Redis.
#[derive(Parser)]
#[command(name = "musicd", version)]
struct Cli {
    #[command(flatten)]
    config: ConfigArgs,
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
    #[command(flatten)]
    Describe(Describe),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Neither needs a configuration: they describe the command line itself.
    if let Command::Describe(describe) = &cli.command {
        return match describe.run(Cli::command()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => fail(&err),
        };
    }
    let listen = cli.listen.map(|listen| format!("listen=\"{listen}\""));
    let sources = cli.config.sources(listen);
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
        Command::Start => say(
            control::start(config, sources).map(|started| match started {
                Started::Ready { pid } => format!("musicd started (supervisor pid {pid})"),
                Started::NotReadyYet => {
                    "musicd started, but its worker is not ready yet: see `musicd status`".into()
                }
            }),
        ),
        Command::Stop => say(control::stop(&config).map(|stopped| match stopped {
            Stopped::Stopped(pid) => format!("musicd stopped (supervisor pid {pid})"),
            Stopped::NotRunning => "musicd is not running".into(),
        })),
        Command::Restart => say(control::restart(config, sources).map(|m| format!("musicd {m}"))),
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
            use std::io::Write;
            // `musicd check-config | head` is fine: a closed pipe is not a config error.
            match writeln!(std::io::stdout(), "{config:#?}") {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => fail(&e),
                _ => ExitCode::SUCCESS,
            }
        }
        Command::Describe(_) => ExitCode::SUCCESS,
    }
}

/// Prints what a control command did (success), or why it failed.
fn say<E: std::error::Error + 'static>(outcome: Result<String, E>) -> ExitCode {
    match outcome {
        Ok(message) => {
            println!("{message}");
            ExitCode::SUCCESS
        }
        Err(err) => fail(&err),
    }
}

fn fail(err: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!(
        "musicd: {}",
        musicd::cli::error_line(musicd::cli::causes(err))
    );
    ExitCode::FAILURE
}
