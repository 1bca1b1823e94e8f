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
//! A full batch does not wake the writer thread: it waits in the queue until
//! [`WAKE_AT_BATCHES`] have gathered or the loop's next interval flush, which does wake
//! it. Waking it for every 64 KiB cost more than the line itself: each wake-up put the
//! writer on a core the event loops and the clients share, and the loops, put off, went
//! to sleep in `epoll_wait` 50-80 times per 1,000 requests instead of 7 (per-thread
//! `voluntary_ctxt_switches`, 1,000 files, c=100, even with the log on `/dev/null`), which
//! was half of the log's cost per request.
//!
//! The sink is a file opened for appending (`O_APPEND`: batches from several loops and
//! processes never interleave inside a line), reopened on SIGUSR1 for logrotate, or stderr
//! (then batches are cut at line boundaries into pipe-sized writes, which a pipe keeps
//! whole). The application log (startup, warnings) is separate: it stays on `tracing`.
//!
//! [`finish`] is also where every exchange is counted in [`Metrics`], log or no log.

pub(crate) mod format;

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::IpAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use axum::http::Version;

use self::format::Entry;
use super::client_ip::TrustedProxies;
use super::metrics::Metrics;
use super::routes::Route;
use super::service::{Exchange, Received};
use crate::catalog::CacheOutcome;
use crate::config::{AccessLogConfig, AccessLogFormat};

/// A loop's buffer is written out when it holds this much.
pub(crate) const FLUSH_BYTES: usize = 64 * 1024;

/// And at least this often.
pub(crate) const FLUSH_INTERVAL: Duration = Duration::from_secs(1);

/// Writes larger than this to a pipe may be split by the kernel between writers.
const PIPE_BUF: usize = 4096;

/// At a stop, how long the writer may go without finishing a batch before its remaining
/// lines are given up.
const STALLED: Duration = Duration::from_secs(1);

/// Full batches that wake the writer thread; fewer wait for the next interval flush.
const WAKE_AT_BATCHES: u64 = 16;

/// Written batches kept for reuse: an event loop's next batch is one of these, so the log
/// allocates (and the kernel faults in) no fresh 64 KiB while it runs. The writer empties
/// up to [`WAKE_AT_BATCHES`] at a time, and each loop holds one.
const SPARE_BATCHES: usize = WAKE_AT_BATCHES as usize + 4;

/// Batches waiting for the writer thread. At 64 KiB a batch this bounds what a stuck sink
/// can hold in memory to 4 MiB; past it, batches are dropped and counted.
const QUEUE_BATCHES: usize = 64;

/// The process's access log: format and sink, shared by every event loop.
///
/// Event loops never write to the sink themselves: they hand whole batches to one writer
/// thread through a bounded queue. A sink that blocks (a pipe nobody reads, a stuck NFS
/// mount) or fails (`/dev/full`, a full disk) then costs lines, counted in `/metrics` as
/// `musicd_access_log_dropped_lines_total` and said once in the application log, but
/// never a request: serving comes before logging.
pub(crate) struct AccessLog {
    format: AccessLogFormat,
    path: Option<PathBuf>,
    sink: Arc<Sink>,
    queue: mpsc::SyncSender<Batch>,
    /// The writer thread, to unpark.
    writer: std::thread::Thread,
}

/// Whole lines waiting to be written, and how many: counted as they are added, so the
/// writer never scans a batch for its line ends.
#[derive(Default)]
struct Batch {
    bytes: Vec<u8>,
    lines: u64,
}

impl Batch {
    fn with_room() -> Batch {
        Batch {
            bytes: Vec::with_capacity(FLUSH_BYTES + 4096),
            lines: 0,
        }
    }
}

/// What the writer thread writes to, and what it lost. Only the writer thread touches the
/// file and the application log about it: an event loop only counts, so neither a stuck
/// sink nor a stuck stderr can hold one up (with no `path`, the access log and the
/// application log share stderr).
struct Sink {
    /// The open file; `None`: stderr. Locked by the writer thread only.
    file: Mutex<Option<File>>,
    /// A file opened again by SIGUSR1, for the writer to take before its next write: the
    /// signal's task never waits on a writer stuck in a write.
    reopened: Mutex<Option<File>>,
    /// Whether the sink keeps large writes whole (a regular file).
    regular: bool,
    written_lines: AtomicU64,
    dropped_lines: AtomicU64,
    /// Batches handed to the writer, and batches it is done with: equal when it is idle.
    queued_batches: AtomicU64,
    done_batches: AtomicU64,
    /// Times the writer found the queue empty and went to sleep.
    naps: AtomicU64,
    /// Whether lines are being lost now: the warning is logged when this turns true, and
    /// the recovery once the queue has drained, not once per batch.
    losing: AtomicBool,
    /// Why an event loop first refused a batch, for the writer to log.
    unreported: Mutex<Option<String>>,
    /// Emptied batch buffers, for the event loops' next batches.
    spare: Mutex<Vec<Vec<u8>>>,
}

impl Sink {
    /// An empty batch with room for a full one: a spare if there is one.
    fn fresh_batch(&self) -> Batch {
        let spare = self.spare.lock().unwrap_or_else(|p| p.into_inner()).pop();
        match spare {
            Some(bytes) => Batch { bytes, lines: 0 },
            None => Batch::with_room(),
        }
    }

    /// Keeps a written batch's buffer for reuse (up to [`SPARE_BATCHES`]).
    fn recycle(&self, mut batch: Batch) {
        batch.bytes.clear();
        let mut spare = self.spare.lock().unwrap_or_else(|p| p.into_inner());
        if spare.len() < SPARE_BATCHES && batch.bytes.capacity() >= FLUSH_BYTES {
            spare.push(batch.bytes);
        }
    }

    /// A batch the queue refused (the writer is behind or gone): counted, and the first
    /// refusal of a spell is reported by the writer thread, not here on an event loop.
    fn refused(&self, batch: &Batch, why: &str) {
        self.dropped_lines.fetch_add(batch.lines, Ordering::Relaxed);
        if !self.losing.swap(true, Ordering::Relaxed) {
            *self.unreported.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_string());
        }
    }

    /// On the writer thread: a batch the sink did not take.
    fn failed(&self, batch: &Batch, err: &io::Error) {
        let before = self.dropped_lines.fetch_add(batch.lines, Ordering::Relaxed);
        if !self.losing.swap(true, Ordering::Relaxed) {
            warn_dropping(&err.to_string(), before);
        }
    }

    /// On the writer thread, between batches: takes a reopened file, reports a refusal.
    fn housekeeping(&self) {
        if let Some(file) = self
            .reopened
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            *self.file.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        }
        let why = self
            .unreported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(why) = why {
            warn_dropping(&why, 0);
        }
    }

    fn write(&self, batch: &Batch) {
        let result = {
            let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
            match &*file {
                Some(file) => write_lines(&mut &*file, &batch.bytes, self.regular),
                None => write_lines(&mut io::stderr().lock(), &batch.bytes, self.regular),
            }
        };
        match result {
            Ok(()) => {
                self.written_lines.fetch_add(batch.lines, Ordering::Relaxed);
                // Recovered only once nothing is waiting: a sink that keeps up with one
                // batch but not with the flow would otherwise flap between the two lines.
                let drained = self.done_batches.load(Ordering::Acquire) + 1
                    >= self.queued_batches.load(Ordering::Acquire);
                if drained && self.losing.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        dropped = self.dropped_lines.load(Ordering::Relaxed),
                        "access log written again"
                    );
                }
            }
            Err(err) => self.failed(batch, &err),
        }
    }
}

fn warn_dropping(why: &str, dropped_before: u64) {
    tracing::warn!(
        error = why,
        dropped_before,
        "access log lines are being dropped (counted in musicd_access_log_dropped_lines_total); serving goes on"
    );
}

impl AccessLog {
    /// The log `config` asks for, opened; `None` when it is off.
    pub(crate) fn open(config: &AccessLogConfig) -> io::Result<Option<Arc<AccessLog>>> {
        AccessLog::open_napping(config, FLUSH_INTERVAL)
    }

    /// [`AccessLog::open`], with the writer sleeping up to `nap` when it has nothing to do
    /// and nobody wakes it.
    fn open_napping(config: &AccessLogConfig, nap: Duration) -> io::Result<Option<Arc<AccessLog>>> {
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
        let sink = Arc::new(Sink {
            file: Mutex::new(file),
            reopened: Mutex::new(None),
            unreported: Mutex::new(None),
            spare: Mutex::new(Vec::new()),
            regular,
            written_lines: AtomicU64::new(0),
            dropped_lines: AtomicU64::new(0),
            queued_batches: AtomicU64::new(0),
            done_batches: AtomicU64::new(0),
            naps: AtomicU64::new(0),
            losing: AtomicBool::new(false),
        });
        let (queue, batches) = mpsc::sync_channel::<Batch>(QUEUE_BATCHES);
        let writer = {
            let sink = Arc::clone(&sink);
            // Detached: it ends when the last `AccessLog` is dropped, or with the process.
            // It sleeps parked, not in `recv`, so that handing it a batch wakes nobody;
            // it wakes when unparked and at least every FLUSH_INTERVAL, to take a
            // reopened file and report.
            std::thread::Builder::new()
                .name("musicd-access-log".into())
                .spawn(move || {
                    loop {
                        match batches.try_recv() {
                            Ok(batch) => {
                                sink.housekeeping();
                                sink.write(&batch);
                                sink.done_batches.fetch_add(1, Ordering::Release);
                                sink.recycle(batch);
                            }
                            Err(mpsc::TryRecvError::Empty) => {
                                sink.housekeeping();
                                sink.naps.fetch_add(1, Ordering::Relaxed);
                                std::thread::park_timeout(nap);
                            }
                            Err(mpsc::TryRecvError::Disconnected) => break,
                        }
                    }
                })?
                .thread()
                .clone()
        };
        Ok(Some(Arc::new(AccessLog {
            format: config.format,
            path: config.path.clone(),
            sink,
            queue,
            writer,
        })))
    }

    /// Opens the file again (after logrotate moved it). Lines still buffered go to the new
    /// file; none is lost. The writer takes the new file before its next batch.
    pub(crate) fn reopen(&self) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let file = open_append(path)?;
        *self.sink.reopened.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
        Ok(())
    }

    /// Lines written to the sink, and lines dropped (the sink failed or did not keep up).
    pub(crate) fn lines(&self) -> (u64, u64) {
        (
            self.sink.written_lines.load(Ordering::Relaxed),
            self.sink.dropped_lines.load(Ordering::Relaxed),
        )
    }

    /// Waits until every batch handed over so far is written (or dropped): a graceful stop
    /// loses no line. It waits at most `patience`, and gives up sooner when the writer
    /// makes no progress for [`STALLED`]: a stuck sink will not take those lines anyway,
    /// and must not hold the stop up.
    pub(crate) async fn settle(&self, patience: Duration) {
        let target = self.sink.queued_batches.load(Ordering::Acquire);
        let deadline = Instant::now() + patience;
        let mut done = self.sink.done_batches.load(Ordering::Acquire);
        let mut progressed = Instant::now();
        while done < target {
            let now = Instant::now();
            if now >= deadline || now.duration_since(progressed) >= STALLED {
                tracing::warn!(
                    batches = target - done,
                    "access log writer blocked at stop; its last lines are lost"
                );
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            let now_done = self.sink.done_batches.load(Ordering::Acquire);
            if now_done > done {
                done = now_done;
                progressed = Instant::now();
            }
        }
    }

    /// Wakes the writer if batches are waiting for it.
    fn wake_if_waiting(&self) {
        let queued = self.sink.queued_batches.load(Ordering::Acquire);
        if queued > self.sink.done_batches.load(Ordering::Acquire) {
            self.writer.unpark();
        }
    }

    /// Queues `batch` for the writer; wakes it when `wake` says so or enough are waiting.
    fn write_batch(&self, batch: Batch, wake: bool) {
        let queued = self.sink.queued_batches.fetch_add(1, Ordering::AcqRel) + 1;
        let refused = match self.queue.try_send(batch) {
            Ok(()) => {
                let waiting = queued.saturating_sub(self.sink.done_batches.load(Ordering::Acquire));
                if wake || waiting >= WAKE_AT_BATCHES {
                    self.writer.unpark();
                }
                return;
            }
            Err(mpsc::TrySendError::Full(batch)) => (batch, "the sink is not keeping up"),
            Err(mpsc::TrySendError::Disconnected(batch)) => (batch, "the writer stopped"),
        };
        self.sink.done_batches.fetch_add(1, Ordering::Release);
        self.sink.refused(&refused.0, refused.1);
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
pub(crate) struct LogBuffer {
    log: Arc<AccessLog>,
    batch: Mutex<Batch>,
}

impl LogBuffer {
    /// An empty buffer in front of `log`.
    pub(crate) fn new(log: Arc<AccessLog>) -> LogBuffer {
        LogBuffer {
            log,
            batch: Mutex::new(Batch::with_room()),
        }
    }

    /// Adds a line; writes the batch out when it is full.
    pub(crate) fn push(&self, entry: &Entry<'_>) {
        let full = {
            let mut batch = self.batch.lock().unwrap_or_else(|p| p.into_inner());
            match self.log.format {
                AccessLogFormat::Json => format::json(&mut batch.bytes, entry),
                _ => format::combined(&mut batch.bytes, entry),
            }
            batch.lines += 1;
            (batch.bytes.len() >= FLUSH_BYTES)
                .then(|| std::mem::replace(&mut *batch, self.log.sink.fresh_batch()))
        };
        if let Some(batch) = full {
            self.log.write_batch(batch, false);
        }
    }

    /// Writes out what is buffered and waits, at most `patience`, until it is written.
    pub(crate) async fn flush_and_settle(&self, patience: Duration) {
        self.flush();
        self.log.settle(patience).await;
    }

    /// Hands what is buffered to the writer, and wakes it for whatever is waiting.
    pub(crate) fn flush(&self) {
        let batch = {
            let mut batch = self.batch.lock().unwrap_or_else(|p| p.into_inner());
            if batch.lines == 0 {
                drop(batch);
                self.log.wake_if_waiting();
                return;
            }
            std::mem::replace(&mut *batch, self.log.sink.fresh_batch())
        };
        self.log.write_batch(batch, true);
    }

    /// Flushes every [`FLUSH_INTERVAL`] until dropped elsewhere (the task ends with its
    /// runtime).
    pub(crate) async fn flush_every_interval(self: Arc<Self>) {
        let mut tick = tokio::time::interval(FLUSH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.flush();
        }
    }
}

/// What an exchange did, for the counters and the log line.
pub(crate) struct Finished<'a> {
    /// Which route answered.
    pub(crate) route: Route,
    /// The status sent.
    pub(crate) status: u16,
    /// Body bytes sent.
    pub(crate) bytes: u64,
    /// Where the id's path came from.
    pub(crate) cache: CacheOutcome,
    /// When the exchange began (its head was read).
    pub(crate) started: Instant,
    /// When its response head was written, if it was.
    pub(crate) head_written: Option<Instant>,
    /// When it ended.
    pub(crate) ended: Instant,
    /// The line's other fields, when logging.
    pub(crate) line: Option<Entry<'a>>,
}

/// The line of `exchange`. Its header fields (`User-Agent`, `Referer`, `Range`) were noted
/// as the head was parsed; the head is read again only when it has forwarding headers,
/// which name the client when the peer is a trusted proxy.
pub(crate) fn entry<'a>(
    exchange: &'a Exchange<'a>,
    cache: CacheOutcome,
    proxies: &TrustedProxies,
) -> Entry<'a> {
    let mut line = Entry {
        client: IpAddr::from([0, 0, 0, 0]),
        method: "-",
        target: b"",
        version: Version::HTTP_11,
        status: exchange.status.as_u16(),
        bytes: exchange.bytes,
        referer: b"",
        user_agent: b"",
        range: b"",
        request_id: exchange.request_id,
        cache,
        latency: Duration::ZERO,
        ttfb: Duration::ZERO,
        complete: exchange.complete,
        at: exchange.started,
    };
    let request = match exchange.received {
        Received::Request(request) => request,
        // The request could not be read, so the line has no request; its client is the
        // peer (forwarding headers were not read either).
        Received::Refused { peer, head } => {
            line.client = peer;
            if head {
                line.method = "HEAD";
            }
            return line;
        }
    };
    line.method = request.method.as_str();
    line.target = request.target.as_bytes();
    line.version = request.version;
    let noted = &request.noted;
    line.user_agent = noted.user_agent.unwrap_or_default();
    line.referer = noted.referer.unwrap_or_default();
    line.range = noted.range.unwrap_or_default();
    line.client = if noted.forwarded {
        proxies.client_of(request)
    } else {
        request.peer
    };
    line
}

/// Counts the exchange and writes its access-log line.
pub(crate) fn finish(metrics: &Metrics, log: Option<&LogBuffer>, done: Finished<'_>) {
    metrics.response_finished(done.route, done.status, done.bytes, done.cache);
    let ended = done.ended;
    let duration = ended.saturating_duration_since(done.started);
    let ttfb = done
        .head_written
        .map(|at| at.saturating_duration_since(done.started));
    metrics.observe_request(done.route, done.status, duration, ttfb);
    if let (Some(log), Some(mut line)) = (log, done.line) {
        line.latency = duration;
        line.ttfb = ttfb.unwrap_or(duration);
        line.at = ended;
        log.push(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_takes_its_fields_from_the_head_and_its_client_from_trusted_proxies() {
        use crate::http::service::{Request, RequestId};
        let head = "GET /a?b HTTP/1.1\r\nHost: h\r\nUser-Agent: VLC\r\nReferer: http://r/\r\n\
X-Forwarded-For: 9.9.9.9\r\nX-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\
X-Real-IP: 4.4.4.4\r\n\r\n";
        let method = axum::http::Method::GET;
        let request = Request::new(
            &method,
            Version::HTTP_11,
            "/a?b",
            "/a?b",
            IpAddr::from([10, 0, 0, 1]),
            Instant::now(),
            head.as_bytes(),
        );
        let request_id = RequestId::next();
        let exchange = Exchange {
            received: Received::Request(&request),
            request_id: &request_id,
            status: axum::http::StatusCode::PARTIAL_CONTENT,
            bytes: 10,
            complete: true,
            started: Instant::now(),
            head_written: None,
            ended: Instant::now(),
        };
        let proxies = TrustedProxies::new(vec!["10.0.0.0/8".parse().expect("net")]);
        let line = entry(&exchange, CacheOutcome::None, &proxies);
        assert_eq!(line.user_agent, b"VLC");
        assert_eq!(line.referer, b"http://r/");
        assert_eq!(line.range, b"");
        assert_eq!(line.target, b"/a?b");
        assert_eq!(
            line.client,
            IpAddr::from([3, 3, 3, 3]),
            "the right end, via the proxy"
        );
        let untrusted = entry(&exchange, CacheOutcome::None, &TrustedProxies::default());
        assert_eq!(untrusted.client, IpAddr::from([10, 0, 0, 1]), "the peer");
        let refused = Exchange {
            received: Received::Refused {
                peer: IpAddr::from([10, 0, 0, 1]),
                head: true,
            },
            ..exchange
        };
        let line = entry(&refused, CacheOutcome::None, &proxies);
        assert_eq!((line.method, line.target), ("HEAD", &b""[..]));
        assert_eq!(line.client, IpAddr::from([10, 0, 0, 1]));
    }

    /// A log on a fresh file whose writer, once idle, sleeps for an hour unless woken,
    /// and has gone to sleep at least once.
    fn log_with_a_sleepy_writer() -> (tempfile::TempDir, PathBuf, Arc<AccessLog>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("access.log");
        let config = AccessLogConfig {
            format: AccessLogFormat::Combined,
            path: Some(path.clone()),
        };
        let log = AccessLog::open_napping(&config, Duration::from_secs(3600))
            .expect("opened")
            .expect("on");
        wait_for("the writer to go idle", || {
            log.sink.naps.load(Ordering::Relaxed) > 0
        });
        (dir, path, log)
    }

    fn full_batch(n: usize) -> Batch {
        let mut batch = Batch::with_room();
        batch
            .bytes
            .extend_from_slice(format!("line {n}\n").as_bytes());
        batch.lines = 1;
        batch
    }

    fn wait_for(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(Instant::now() < deadline, "gave up waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_full_batch_is_written_at_its_loops_next_flush_even_with_nothing_new() {
        let (_dir, path, log) = log_with_a_sleepy_writer();
        let buffer = LogBuffer::new(Arc::clone(&log));
        log.write_batch(full_batch(1), false);
        buffer.flush();
        wait_for("the batch in the file", || {
            std::fs::read(&path).unwrap_or_default() == b"line 1\n"
        });
    }

    #[test]
    fn enough_waiting_batches_wake_the_writer_without_a_flush() {
        let (_dir, path, log) = log_with_a_sleepy_writer();
        let mut expected = Vec::new();
        for n in 0..WAKE_AT_BATCHES as usize {
            expected.extend_from_slice(format!("line {n}\n").as_bytes());
            log.write_batch(full_batch(n), false);
        }
        wait_for("every batch in the file", || {
            std::fs::read(&path).unwrap_or_default() == expected
        });
    }

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
