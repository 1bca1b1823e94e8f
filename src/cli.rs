//! What both binaries share on the command line: the arguments that locate the
//! configuration, and the commands that describe the command line itself (shell
//! completions and man pages, generated from the same clap definitions the binaries parse,
//! so they cannot drift from the real options).

use std::io::Write;
use std::path::PathBuf;

use crate::config::Sources;

/// Where the configuration comes from; `global`, so it goes before or after the command.
#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    /// Configuration file (TOML), shared by musicd and musicctl.
    #[arg(long, short, global = true, env = "MUSICD_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Override a configuration key, e.g. `--set redis.url=redis://127.0.0.1:6380` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    pub(crate) overrides: Vec<String>,
}

impl ConfigArgs {
    /// The sources to load: the file, this process's `MUSICD_*` environment, the `--set`s
    /// (and any `extra` overrides a binary derives from its own flags, applied last).
    pub fn sources(self, extra: impl IntoIterator<Item = String>) -> Sources {
        let mut overrides = self.overrides;
        overrides.extend(extra);
        Sources::from_process(self.config, overrides)
    }
}

/// The commands that need no configuration: they print the command line's own docs.
#[derive(clap::Subcommand, Debug)]
pub enum Describe {
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff); with `--dir`, write one page per command and subcommand
    /// there instead (what the Debian package ships).
    Man {
        /// Write `NAME.1`, `NAME-COMMAND.1`, ... into this directory.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

impl Describe {
    /// Prints (or writes) what was asked for about `command`, the binary's full clap command.
    pub fn run(&self, mut command: clap::Command) -> std::io::Result<()> {
        let stdout = &mut std::io::stdout().lock();
        let written = match self {
            Describe::Completions { shell } => {
                // Into memory first: clap_complete panics on a write error (a closed pipe).
                let name = command.get_name().to_owned();
                let mut script = Vec::new();
                clap_complete::generate(*shell, &mut command, name, &mut script);
                stdout.write_all(&script).and_then(|()| stdout.flush())
            }
            Describe::Man { dir: None } => clap_mangen::Man::new(command).render(stdout),
            Describe::Man { dir: Some(dir) } => {
                std::fs::create_dir_all(dir)?;
                clap_mangen::generate_to(command, dir)
            }
        };
        match written {
            // `musicd man | head` is not an error.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
            other => other,
        }
    }
}

/// An error and its causes on one line, each cause said once: a message that already
/// quotes its cause (`cannot read config file x: No such file…`) is not followed by the
/// same cause again, as `{:#}` would print it.
pub fn error_line<'a>(
    chain: impl IntoIterator<Item = &'a (dyn std::error::Error + 'static)>,
) -> String {
    let mut line = String::new();
    for cause in chain {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// The causes of `err`, itself first.
pub fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |err| err.source())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("cannot read x: {source}")]
        struct Quoting {
            source: std::io::Error,
        }
        #[derive(Debug, thiserror::Error)]
        #[error("loading failed")]
        struct Wrapping(#[source] Quoting);
        let err = Wrapping(Quoting {
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
        let line = error_line(causes(&err));
        assert_eq!(line, "loading failed: cannot read x: entity not found");
    }
}
