//! The access log: one line per exchange, in a standard format, nearly free.
//!
//! Formats ([`format`](mod@format)): NCSA `combined` (what nginx and Apache write, read by GoAccess,
//! fail2ban, awstats) followed by musicd's own fields, or `json`, one object per line.
//!
//! Cost: a line is formatted into its event loop's [`LogBuffer`] (no allocation, a lock
//! no other core takes), and buffers are written out in batches: when one reaches
//! [`FLUSH_BYTES`], every [`FLUSH_INTERVAL`], when the server stops, and when the file is
//! reopened, like nginx's `access_log ... buffer=64k flush=1s`. So a request costs no
//! write of its own, and a worker killed with SIGKILL loses at most the last second of
//! lines; a graceful stop loses none.
//!
//! The sink is a file opened for appending (`O_APPEND`: batches from several loops and
//! processes never interleave inside a line), reopened on SIGUSR1 for logrotate, or stderr
//! (then batches are cut at line boundaries into pipe-sized writes, which a pipe keeps
//! whole). The application log (startup, warnings) is separate: it stays on `tracing`.
//!
//! [`finish`] is also where every exchange is counted in [`Metrics`], log or no log.

pub mod format;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use self::format::Entry;
use super::metrics::Metrics;
use super::routes::Route;
use crate::catalog::CacheOutcome;
use crate::config::{AccessLogConfig, AccessLogFormat};

/// A loop's buffer is written out when it holds this much.
pub const FLUSH_BYTES: usize = 64 * 1024;

/// And at least this often.
pub const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Writes larger than this to a pipe may be split by the kernel between writers.
const PIPE_BUF: usize = 4096;

/// The process's access log: format and sink, shared by every event loop.
pub struct AccessLog {
    format: AccessLogFormat,
    path: Option<PathBuf>,
    /// The open file; `None`: stderr.
    file: RwLock<Option<File>>,
    /// Whether the sink keeps large writes whole (a regular file).
    regular: bool,
    /// Failed writes, for a warning that does not repeat every second.
    failures: AtomicU64,
}

impl AccessLog {
    /// The log `config` asks for, opened; `None` when it is off.
    pub fn open(config: &AccessLogConfig) -> io::Result<Option<Arc<AccessLog>>> {
        if config.format == AccessLogFormat::Off {
            return Ok(None);
        }
        let (file, regular) = match &config.path {
            Some(path) => {
                let file = open_append(path)?;
                let regular = !file.metadata()?.file_type().is_fifo();
                (Some(file), regular)
            }
            None => {
                let regular = std::fs::metadata("/proc/self/fd/2")
                    .map(|m| m.file_type().is_file())
                    .unwrap_or(false);
                (None, regular)
            }
        };
        Ok(Some(Arc::new(AccessLog {
            format: config.format,
            path: config.path.clone(),
            file: RwLock::new(file),
            regular,
            failures: AtomicU64::new(0),
        })))
    }

    /// Opens the file again (after logrotate moved it). Lines still buffered go to the new
    /// file; none is lost.
    pub fn reopen(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let file = open_append(path)?;
        *self.file.write().unwrap_or_else(|p| p.into_inner()) = Some(file);
        Ok(())
    }

    fn write_batch(&self, batch: &[u8]) {
        let file = self.file.read().unwrap_or_else(|p| p.into_inner());
        let result = match &*file {
            Some(file) => write_lines(&mut &*file, batch, self.regular),
            None => write_lines(&mut io::stderr().lock(), batch, self.regular),
        };
        if let Err(err) = result
            && self
                .failures
                .fetch_add(1, Ordering::Relaxed)
                .is_multiple_of(60)
        {
            tracing::warn!(error = %err, "access log write failed; lines lost");
        }
    }
}

fn open_append(path: &std::path::Path) -> io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// Writes `batch` (whole lines): at once to a regular file, in pipe-sized pieces cut at
/// line ends otherwise.
fn write_lines(out: &mut impl Write, mut batch: &[u8], regular: bool) -> io::Result<()> {
    if regular {
        return out.write_all(batch);
    }
    while !batch.is_empty() {
        let cut = if batch.len() <= PIPE_BUF {
            batch.len()
        } else {
            batch[..PIPE_BUF]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(PIPE_BUF, |at| at + 1)
        };
        out.write_all(&batch[..cut])?;
        batch = &batch[cut..];
    }
    Ok(())
}

/// One event loop's lines waiting to be written.
pub struct LogBuffer {
    log: Arc<AccessLog>,
    lines: Mutex<Vec<u8>>,
}

impl LogBuffer {
    /// An empty buffer in front of `log`.
    pub fn new(log: Arc<AccessLog>) -> LogBuffer {
        LogBuffer {
            log,
            lines: Mutex::new(Vec::with_capacity(FLUSH_BYTES + 4096)),
        }
    }

    /// Adds a line; writes the batch out when it is full.
    pub fn push(&self, entry: &Entry<'_>) {
        let full = {
            let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            match self.log.format {
                AccessLogFormat::Json => format::json(&mut lines, entry),
                _ => format::combined(&mut lines, entry),
            }
            (lines.len() >= FLUSH_BYTES)
                .then(|| std::mem::replace(&mut *lines, Vec::with_capacity(FLUSH_BYTES + 4096)))
        };
        if let Some(batch) = full {
            self.log.write_batch(&batch);
        }
    }

    /// Writes out what is buffered.
    pub fn flush(&self) {
        let batch = {
            let mut lines = self.lines.lock().unwrap_or_else(|p| p.into_inner());
            if lines.is_empty() {
                return;
            }
            std::mem::take(&mut *lines)
        };
        self.log.write_batch(&batch);
    }

    /// Flushes every [`FLUSH_INTERVAL`] until dropped elsewhere (the task ends with its
    /// runtime).
    pub async fn flush_every_interval(self: Arc<Self>) {
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.flush();
        }
    }
}

/// What an exchange did, for the counters and the log line.
pub struct Finished<'a> {
    /// Which route answered.
    pub route: Route,
    /// The status sent.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// Where the id's path came from.
    pub cache: CacheOutcome,
    /// When the exchange began (its head was read).
    pub started: Instant,
    /// When its response head was written, if it was.
    pub head_written: Option<Instant>,
    /// The line's other fields, when logging.
    pub line: Option<Entry<'a>>,
}

/// Counts the exchange and writes its access-log line.
pub fn finish(metrics: &Metrics, log: Option<&LogBuffer>, done: Finished<'_>) {
    metrics.response_finished(done.route, done.status, done.bytes, done.cache);
    let duration = done.started.elapsed();
    let ttfb = done.head_written.map(|at| at.duration_since(done.started));
    metrics.observe_request(done.route, done.status, duration, ttfb);
    if let (Some(log), Some(mut line)) = (log, done.line) {
        line.latency = duration;
        line.ttfb = ttfb.unwrap_or(duration);
        log.push(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipe_writes_are_cut_at_line_ends() {
        let line = [b'a'; 99];
        let mut batch = Vec::new();
        for _ in 0..100 {
            batch.extend_from_slice(&line);
            batch.push(b'\n');
        }
        struct Writes(Vec<usize>, Vec<u8>);
        impl Write for Writes {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                self.0.push(buf.len());
                self.1.extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let mut writes = Writes(Vec::new(), Vec::new());
        write_lines(&mut writes, &batch, false).expect("written");
        assert_eq!(writes.1, batch);
        assert!(
            writes.0.iter().all(|n| *n <= PIPE_BUF && n % 100 == 0),
            "{:?}",
            writes.0
        );
        let mut whole = Writes(Vec::new(), Vec::new());
        write_lines(&mut whole, &batch, true).expect("written");
        assert_eq!(whole.0, vec![batch.len()]);
    }
}
