//! Progress output for long commands: an `indicatif` bar (or spinner, when the total is
//! not known) on a terminal, a plain line every few seconds otherwise (logs and pipes get
//! no control characters), nothing with `--json` so scripts read only the final report.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Where progress goes (stderr).
pub struct Progress {
    mode: Mode,
    last: Option<Instant>,
    started: Instant,
}

enum Mode {
    Terminal(ProgressBar),
    Lines,
    Quiet,
}

impl Progress {
    /// A spinner with a message if stderr is a terminal, plain lines otherwise, nothing
    /// if `quiet`.
    pub fn new(quiet: bool) -> Progress {
        Progress::with_total(quiet, None)
    }

    /// The same with a bar towards `total` (when known).
    pub fn with_total(quiet: bool, total: Option<u64>) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if std::io::stderr().is_terminal() {
            let bar = match total {
                Some(total) => ProgressBar::with_draw_target(
                    Some(total),
                    ProgressDrawTarget::stderr_with_hz(10),
                )
                .with_style(
                    ProgressStyle::with_template("{bar:30} {pos}/{len} {per_sec} eta {eta} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10))
                    .with_style(
                        ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                    ),
            };
            Mode::Terminal(bar)
        } else {
            Mode::Lines
        };
        Progress {
            mode,
            last: None,
            started: Instant::now(),
        }
    }

    /// Reports `text`, rate-limited.
    pub fn update(&mut self, text: &str) {
        self.advance(None, text);
    }

    /// Reports the position towards the total, and `text`.
    pub fn advance(&mut self, position: Option<u64>, text: &str) {
        match &self.mode {
            Mode::Quiet => {}
            Mode::Terminal(bar) => {
                if let Some(position) = position {
                    bar.set_position(position);
                }
                bar.set_message(text.to_string());
            }
            Mode::Lines => {
                let every = Duration::from_secs(5);
                if self.last.is_some_and(|t| t.elapsed() < every) {
                    return;
                }
                // Short runs print no progress at all into logs, only their final report.
                if self.started.elapsed() < Duration::from_secs(2) {
                    return;
                }
                self.last = Some(Instant::now());
                let elapsed = self.started.elapsed().as_secs_f64();
                let mut err = std::io::stderr().lock();
                let _ = writeln!(err, "{text} ({elapsed:.1}s)");
                let _ = err.flush();
            }
        }
    }

    /// Ends the progress output (the bar is cleared).
    pub fn finish(&mut self) {
        if let Mode::Terminal(bar) = &self.mode {
            bar.finish_and_clear();
        }
    }
}
