//! Progress output for long commands: a self-overwriting line on a terminal, a plain line
//! every few seconds otherwise (logs and pipes get no carriage returns), nothing with
//! `--json` so scripts read only the final report.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Where progress goes (stderr).
pub struct Progress {
    mode: Mode,
    last: Option<Instant>,
    started: Instant,
}

#[derive(PartialEq, Eq)]
enum Mode {
    Terminal,
    Lines,
    Quiet,
}

impl Progress {
    /// Terminal line if stderr is a terminal, plain lines otherwise, nothing if `quiet`.
    pub fn new(quiet: bool) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            Mode::Terminal
        } else {
            Mode::Lines
        };
        Progress {
            mode,
            last: None,
            started: Instant::now(),
        }
    }

    /// Reports `text` (with the elapsed time), rate-limited.
    pub fn update(&mut self, text: &str) {
        let every = match self.mode {
            Mode::Quiet => return,
            Mode::Terminal => Duration::from_millis(100),
            Mode::Lines => Duration::from_secs(5),
        };
        if self.last.is_some_and(|t| t.elapsed() < every) {
            return;
        }
        // Short runs print no progress at all into logs, only their final report.
        if self.mode == Mode::Lines && self.started.elapsed() < Duration::from_secs(2) {
            return;
        }
        self.last = Some(Instant::now());
        let elapsed = self.started.elapsed().as_secs_f64();
        let mut err = std::io::stderr().lock();
        let _ = match self.mode {
            Mode::Terminal => write!(err, "\r\x1b[K{text} ({elapsed:.1}s)"),
            _ => writeln!(err, "{text} ({elapsed:.1}s)"),
        };
        let _ = err.flush();
    }

    /// Ends the progress line.
    pub fn finish(&mut self) {
        if self.mode == Mode::Terminal && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
