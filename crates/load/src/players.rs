//! `musicctl players --target URL --listeners N --duration D`: synthetic listeners, each
//! behaving like a real player, and the capacity figure a streaming server is judged by:
//! listeners held without a stall.
//!
//! A listener picks a track (Zipf popularity over the catalogue, or over `--ids FILE`),
//! may probe it first (`HEAD`, or `bytes=0-1` as Safari does), then streams it with a
//! ranged GET through a playback-buffer model ([`Playback`]): it reads ahead of the
//! playhead at most `--buffer` seconds, playback starts once `--prebuffer` seconds are
//! buffered, and a stall is counted each time the buffer runs dry before the track's end.
//! Seeks and skips come at `--seek-rate` and `--skip-rate` per minute of listening; when a
//! track ends the next one starts. With `--ramp`, listeners are added in steps, and the
//! report gives the most that were held with stalls under 0.1 % of listener-seconds.
//!
//! Every listener is a task on one current-thread runtime, reading into one scratch
//! buffer per thread ([`crate::traffic::client`]): the tool's own CPU time is in the
//! report, so it is never the unmeasured bottleneck.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::Distribution;
use serde::Serialize;

use crate::LoadError;
use crate::traffic::client::{self, Ask, ErrorKind, Flow, Outcome};
use crate::traffic::{
    Percentiles, Recorder, Second, Summary, histogram, html, percentiles, resolve, timeline_plots,
};

/// What a listener sends before it streams a track.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Probe {
    /// Nothing.
    None,
    /// `HEAD`.
    Head,
    /// `GET` with `Range: bytes=0-1`, as Safari sends.
    Range,
}

/// A track a listener can pick.
#[derive(Debug, Clone)]
pub struct Track {
    /// Its id.
    pub id: String,
    /// The cosmetic name at the end of its URL.
    pub name: String,
}

/// How the listeners behave.
#[derive(Debug, Clone)]
pub struct PlayersOptions {
    /// The service (`http://host:port`).
    pub target: String,
    /// Listeners at the end of the run (all at once, or reached by `ramp`).
    pub listeners: usize,
    /// How long the run lasts.
    pub duration: Duration,
    /// Zipf exponent of track popularity.
    pub zipf: f64,
    /// Playback rate, bits per second.
    pub bitrate: u64,
    /// Buffered before playback starts (and restarts after a stall).
    pub prebuffer: Duration,
    /// Read ahead of the playhead at most this much.
    pub buffer: Duration,
    /// The probe before each track.
    pub probe: Probe,
    /// Seeks per minute of listening.
    pub seek_rate: f64,
    /// Skips per minute of listening.
    pub skip_rate: f64,
    /// Add listeners in this many equal steps over the run (1: all at once).
    pub ramp_steps: usize,
    /// Bound on a connect and on every silence of an answer.
    pub timeout: Duration,
    /// The track route prefix (`/musicdb`).
    pub prefix: String,
    /// Open files this process may have (a listener holds one): the caller raises the
    /// limit first, as a shell hands out only 1,024.
    pub open_files: u64,
    /// Fetch in bounded ranges of this many bytes instead of one open-ended range.
    pub chunk: Option<u64>,
    /// Keep what every listener was sent of every track ([`PlayersReport::listens`]).
    pub listens: bool,
}

/// One step of a ramp.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Step {
    /// Listeners during the step.
    pub(crate) listeners: usize,
    /// Stalled listener-seconds over listener-seconds in the step.
    pub(crate) stalled_share: f64,
    /// Errors in the step.
    pub(crate) errors: u64,
}

/// What the listeners saw.
#[derive(Debug, Clone, Serialize)]
pub struct PlayersReport {
    /// Every request's figures.
    #[serde(flatten)]
    pub(crate) summary: Summary,
    /// Listeners started.
    pub(crate) listeners: usize,
    /// Listeners that played to the end of the run without an error.
    pub(crate) held: usize,
    /// Times a playback buffer ran dry.
    pub(crate) stalls: u64,
    /// Listeners that stalled at least once.
    pub(crate) stalled_listeners: usize,
    /// Time from asking for a track to playback starting, first plays.
    pub(crate) start_ms: Percentiles,
    /// The same after a seek.
    pub(crate) seek_start_ms: Percentiles,
    /// Body bytes per second over the run.
    pub(crate) bytes_per_sec: f64,
    /// The tool's own CPU time (user + system) for the run, seconds.
    pub(crate) tool_cpu_s: f64,
    /// With a ramp: each step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) ramp: Vec<Step>,
    /// With a ramp: the most listeners held, every step up to them with stalls under 0.1 %
    /// of listener-seconds and errors under 0.1 % of listeners.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) most_held: Option<usize>,
    /// Second by second (for the HTML report).
    #[serde(skip)]
    pub(crate) timeline: Vec<Second>,
    /// Listeners playing, second by second.
    #[serde(skip)]
    pub(crate) listeners_by_second: Vec<f64>,
    /// Stalls, second by second.
    #[serde(skip)]
    pub(crate) stalls_by_second: Vec<f64>,
    /// With `listens`: what every listener was sent, exchange by exchange.
    #[serde(skip)]
    pub listens: Vec<Heard>,
}

impl PlayersReport {
    /// 0 when the run had no error and no stall, else 1.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.stalls > 0 || self.summary.errors.values().sum::<u64>() > 0)
    }

    /// The `--report` page.
    pub fn html(&self) -> String {
        let mut rows = self.summary.rows("");
        let p = |p: &Percentiles| format!("p50 {:.1}, p99 {:.1}", p.p50, p.p99);
        rows.extend([
            ("listeners".to_string(), self.listeners.to_string()),
            ("held".to_string(), self.held.to_string()),
            ("stalls".to_string(), self.stalls.to_string()),
            (
                "stalled listeners".to_string(),
                self.stalled_listeners.to_string(),
            ),
            ("time to start playback ms".to_string(), p(&self.start_ms)),
            ("after a seek ms".to_string(), p(&self.seek_start_ms)),
            (
                "bytes per second".to_string(),
                format!("{:.0}", self.bytes_per_sec),
            ),
            (
                "the tool's CPU s".to_string(),
                format!("{:.2}", self.tool_cpu_s),
            ),
        ]);
        if let Some(most) = self.most_held {
            rows.push(("most held (ramp)".into(), most.to_string()));
        }
        let mut plots = timeline_plots(&[("players", &self.timeline)]);
        plots.push(html::Plot {
            x_unit: "s",
            title: "Listeners and stalls".into(),
            unit: "per second".into(),
            series: vec![
                html::Series {
                    name: "listeners".into(),
                    values: self.listeners_by_second.clone(),
                },
                html::Series {
                    name: "stalls".into(),
                    values: self.stalls_by_second.clone(),
                },
            ],
        });
        html::page("musicctl players", &rows, &plots)
    }

    /// The report for a terminal.
    pub fn render(&self) -> String {
        let mut out = self.summary.render("players");
        out.push_str(&format!(
            "  listeners    {} ({} held, {} stalled, {} stalls)\n  start ms     p50 {:.1}  p99 {:.1} (after a seek: p50 {:.1}  p99 {:.1})\n  throughput   {:.0} bytes/s\n  tool CPU     {:.2} s\n",
            self.listeners,
            self.held,
            self.stalled_listeners,
            self.stalls,
            self.start_ms.p50,
            self.start_ms.p99,
            self.seek_start_ms.p50,
            self.seek_start_ms.p99,
            self.bytes_per_sec,
            self.tool_cpu_s,
        ));
        for step in &self.ramp {
            out.push_str(&format!(
                "  ramp {:>6} listeners: stalled {:.3} %, {} errors\n",
                step.listeners,
                step.stalled_share * 100.0,
                step.errors
            ));
        }
        if let Some(most) = self.most_held {
            out.push_str(&format!("  most held    {most}\n"));
        }
        out
    }
}

/// The tracks of an `--ids FILE`: one per line, the id first (`musicctl list` output is
/// such a file: `id<TAB>path`).
pub fn tracks_from_file(path: &std::path::Path) -> Result<Vec<Track>, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let id = fields.next()?.trim();
            if id.is_empty() || id.starts_with('#') {
                return None;
            }
            let name = fields
                .next()
                .and_then(|p| std::path::Path::new(p.trim()).file_name())
                .map_or("track".into(), |n| n.to_string_lossy().into_owned());
            Some(Track {
                id: id.to_string(),
                name,
            })
        })
        .collect())
}

/// Where a run is, once a second (for a progress line).
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Seconds since the start.
    pub seconds: u64,
    /// Listeners playing.
    pub listeners: usize,
    /// Requests finished.
    pub requests: u64,
    /// Stalls so far.
    pub stalls: u64,
    /// Errors so far.
    pub errors: u64,
}

/// What every listener shares.
struct Shared {
    addr: SocketAddr,
    host: String,
    options: PlayersOptions,
    tracks: Vec<Track>,
    zipf: rand_distr::Zipf<f64>,
    started: Instant,
    stop_at: Instant,
    results: Mutex<Results>,
}

/// What the listeners report, as they go.
struct Results {
    recorder: Recorder,
    starts: Histogram<u64>,
    seek_starts: Histogram<u64>,
    stalls: u64,
    /// Stalled time per ramp step, and errors per ramp step.
    stalled_by_step: Vec<Duration>,
    errors_by_step: Vec<u64>,
    /// Stalls by the second of the run they were seen in.
    stalls_by_second: Vec<f64>,
    /// With `listens`: every exchange's bytes.
    heard: Vec<Heard>,
}

/// How one listener's life went.
#[derive(Default)]
struct Life {
    stalls: u64,
    failed: bool,
}

/// Runs the listeners against `target` on this thread's runtime and reports.
pub async fn players(
    tracks: Vec<Track>,
    options: PlayersOptions,
    mut each_second: impl FnMut(Tick),
) -> Result<PlayersReport, LoadError> {
    if tracks.is_empty() {
        return Err(LoadError::Usage(
            "no tracks to play (an empty catalogue or --ids file)".into(),
        ));
    }
    if options.listeners == 0 {
        return Err(LoadError::Usage("--listeners must be at least 1".into()));
    }
    let zipf = rand_distr::Zipf::new(tracks.len() as f64, options.zipf.max(0.0))
        .map_err(|err| LoadError::Usage(format!("--zipf {}: {err}", options.zipf)))?;
    let (addr, host) = resolve(&options.target).await?;
    // A listener holds a connection: thousands need more than a shell's 1,024 descriptors.
    let descriptors = options.open_files;
    if options.listeners as u64 + 64 > descriptors {
        return Err(LoadError::Usage(format!(
            "{} listeners need more open files than this process may have ({descriptors}); raise ulimit -n",
            options.listeners
        )));
    }
    let cpu_before = thread_cpu();
    let started = Instant::now();
    let steps = options.ramp_steps.max(1);
    let shared = Arc::new(Shared {
        addr,
        host,
        zipf,
        tracks,
        started,
        stop_at: started + options.duration,
        results: Mutex::new(Results {
            recorder: Recorder::default(),
            starts: histogram(),
            seek_starts: histogram(),
            stalls: 0,
            stalled_by_step: vec![Duration::ZERO; steps],
            errors_by_step: vec![0; steps],
            stalls_by_second: vec![0.0; shared_seconds(options.duration)],
            heard: Vec::new(),
        }),
        options,
    });
    let listeners = shared.options.listeners;
    let step_length = shared.options.duration.div_f64(steps as f64);
    let mut handles = Vec::with_capacity(listeners);
    for index in 0..listeners {
        // Listener i joins in step i * steps / listeners.
        let step = index * steps / listeners;
        let start = started + step_length.mul_f64(step as f64);
        handles.push(tokio::spawn(listen(Arc::clone(&shared), index, start)));
    }
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    let mut lives = std::pin::pin!(futures_util::future::join_all(handles));
    let lives = loop {
        tokio::select! {
            lives = &mut lives => break lives,
            _ = every_second.tick() => {
                let elapsed = started.elapsed();
                let step = ((elapsed.as_secs_f64() / step_length.as_secs_f64().max(1e-9)) as usize).min(steps - 1);
                let results = shared.results.lock().unwrap_or_else(|p| p.into_inner());
                let summary = results.recorder.summary();
                each_second(Tick {
                    seconds: elapsed.as_secs(),
                    listeners: ((step + 1) * listeners).div_ceil(steps),
                    requests: summary.requests,
                    stalls: results.stalls,
                    errors: summary.errors.values().sum(),
                });
            }
        }
    };
    let (mut held, mut stalled_listeners) = (0, 0);
    for life in lives {
        let life = life.unwrap_or(Life {
            stalls: 0,
            failed: true,
        });
        held += usize::from(!life.failed);
        stalled_listeners += usize::from(life.stalls > 0);
    }
    let tool_cpu_s = thread_cpu() - cpu_before;
    let results = shared.results.lock().unwrap_or_else(|p| p.into_inner());
    let summary = results.recorder.summary();
    let duration_s = shared.options.duration.as_secs_f64();
    let mut ramp = Vec::new();
    let mut most_held = None;
    if steps > 1 {
        let mut holding = true;
        for step in 0..steps {
            let listening = ((step + 1) * listeners).div_ceil(steps);
            let listener_seconds = listening as f64 * step_length.as_secs_f64();
            let stalled_share =
                results.stalled_by_step[step].as_secs_f64() / listener_seconds.max(1e-9);
            let errors = results.errors_by_step[step];
            // Held: stalls under 0.1 % of listener-seconds, and errors under 0.1 % of the
            // listeners; the first step that fails ends the count.
            holding &= stalled_share < 0.001 && (errors as f64) < 0.001 * listening as f64;
            if holding {
                most_held = Some(listening);
            }
            ramp.push(Step {
                listeners: listening,
                stalled_share,
                errors,
            });
        }
    }
    Ok(PlayersReport {
        bytes_per_sec: summary.bytes as f64 / duration_s.max(1e-9),
        summary,
        listeners,
        held,
        stalls: results.stalls,
        stalled_listeners,
        start_ms: percentiles(&results.starts),
        seek_start_ms: percentiles(&results.seek_starts),
        tool_cpu_s,
        ramp,
        most_held,
        timeline: results.recorder.timeline(),
        listeners_by_second: (0..shared_seconds(shared.options.duration))
            .map(|second| {
                // Listener i joins in step i * steps / listeners (see above).
                let step =
                    ((second as f64 / step_length.as_secs_f64().max(1e-9)) as usize).min(steps - 1);
                (((step + 1) * listeners).div_ceil(steps)) as f64
            })
            .collect(),
        stalls_by_second: results.stalls_by_second.clone(),
        listens: results.heard.clone(),
    })
}

/// One listener, from `start` to the end of the run.
async fn listen(shared: Arc<Shared>, index: usize, start: Instant) -> Life {
    tokio::time::sleep_until(start.into()).await;
    let mut life = Life::default();
    // A transfer under way stops itself at the run's end (and is counted): its reads wake
    // at least every quarter second. This bound only cuts a listener stuck in a connect or
    // waiting for a response head.
    let bound = shared.stop_at + Duration::from_secs(1);
    let inner = listen_until_stopped(&shared, index, &mut life);
    if tokio::time::timeout_at(bound.into(), inner).await.is_err() {
        // Still waiting for a connection or a response head a second after the end: the
        // server stopped answering it, so it was not held.
        life.failed = true;
    }
    life
}

async fn listen_until_stopped(shared: &Shared, index: usize, life: &mut Life) {
    let options = &shared.options;
    let mut rng = StdRng::seed_from_u64(index as u64 ^ 0x6d75_7369_6364);
    let rate = options.bitrate as f64 / 8.0;
    let stop_at = shared.stop_at;
    // Each listener its own agent: a log then tells them apart, as it tells real players.
    let agent = format!("musicctl-players/{index}");
    while Instant::now() < stop_at {
        let rank = shared.zipf.sample(&mut rng) as usize;
        let track = &shared.tracks[rank.clamp(1, shared.tracks.len()) - 1];
        let target = format!("{}/{}/{}", options.prefix, track.id, track.name);
        if options.probe != Probe::None {
            let ask = Ask {
                method: if options.probe == Probe::Head {
                    "HEAD"
                } else {
                    "GET"
                },
                target: &target,
                host: &shared.host,
                range: (options.probe == Probe::Range).then_some("bytes=0-1"),
                read_at_most: None,
                agent: &agent,
            };
            let outcome = client::exchange(shared.addr, &ask, options.timeout, |_, _| async {
                Flow::Continue
            })
            .await;
            if !record(shared, &outcome, life) {
                backoff().await;
                continue;
            }
        }
        // The track plays from `offset` until it ends, is skipped, or is sought elsewhere.
        let mut offset = 0u64;
        let mut sought = false;
        loop {
            let mut per_minute = |rate: f64| {
                if rate > 0.0 {
                    Some(Duration::from_secs_f64(
                        -(1.0 - rng.random::<f64>()).ln() / rate * 60.0,
                    ))
                } else {
                    None
                }
            };
            let (seek_after, skip_after) =
                (per_minute(options.seek_rate), per_minute(options.skip_rate));
            let leave_after = match (seek_after, skip_after) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let mut playback = Playback::new(rate, options.prebuffer, options.buffer, leave_after);
            let asked = Instant::now();
            let stream = Stream {
                shared,
                agent: &agent,
                track,
                target: &target,
                offset,
            };
            let (ok, transfer_length) = match options.chunk {
                None => stream.open_ended(&mut playback, life).await,
                Some(chunk) => stream.in_chunks(chunk.max(1), &mut playback, life).await,
            };
            let now = Instant::now();
            let run_over = now >= stop_at;
            if run_over {
                playback.finish(now);
            }
            if let Some(started) = playback.started_at {
                let mut results = shared.results.lock().unwrap_or_else(|p| p.into_inner());
                let histogram = if sought {
                    &mut results.seek_starts
                } else {
                    &mut results.starts
                };
                let _ = histogram.record(micros(started.saturating_duration_since(asked)));
            }
            let step = step_of(shared, now);
            if playback.stalls > 0 {
                life.stalls += playback.stalls;
                let mut results = shared.results.lock().unwrap_or_else(|p| p.into_inner());
                results.stalls += playback.stalls;
                results.stalled_by_step[step] += playback.stalled;
                let second = now.saturating_duration_since(shared.started).as_secs() as usize;
                if let Some(slot) = results.stalls_by_second.get_mut(second) {
                    *slot += playback.stalls as f64;
                }
            }
            if run_over {
                return;
            }
            if !ok {
                backoff().await;
                break;
            }
            if playback.left_early {
                // A seek (anywhere in the track) or a skip (the next track).
                let seek = seek_after.is_some_and(|s| Some(s) == leave_after);
                let length = transfer_length.map_or(0, |d| d + offset);
                if seek && length > 0 {
                    offset = rng.random_range(0..length);
                    sought = true;
                    continue;
                }
                break;
            }
            // The whole track is buffered: the next one is asked for when it has played.
            let left = playback.left_to_play(now);
            tokio::time::sleep(left.min(stop_at.saturating_duration_since(now))).await;
            break;
        }
    }
}

/// One transfer of a track into a playback buffer, from `offset`.
struct Stream<'a> {
    shared: &'a Shared,
    agent: &'a str,
    track: &'a Track,
    target: &'a str,
    offset: u64,
}

impl Stream<'_> {
    fn ask<'r>(&'r self, range: &'r str) -> Ask<'r> {
        Ask {
            method: "GET",
            target: self.target,
            host: &self.shared.host,
            range: Some(range),
            read_at_most: None,
            agent: self.agent,
        }
    }

    /// One open-ended request (`bytes=offset-`), read as the buffer has room, as browsers
    /// and most desktop players do: whether it went well, and the transfer's length.
    async fn open_ended(&self, playback: &mut Playback, life: &mut Life) -> (bool, Option<u64>) {
        let stop_at = self.shared.stop_at;
        let range = format!("bytes={}-", self.offset);
        let ask = self.ask(&range);
        let outcome = client::exchange(
            self.shared.addr,
            &ask,
            self.shared.options.timeout,
            |got, declared| {
                let now = Instant::now();
                let (flow, wait) = if now >= stop_at {
                    (Flow::Stop, None)
                } else {
                    playback.arrived(got, declared, now)
                };
                let wait = wait.map(|w| w.min(stop_at.saturating_duration_since(now)));
                async move {
                    if let Some(wait) = wait {
                        tokio::time::sleep(wait).await;
                    }
                    flow
                }
            },
        )
        .await;
        let ok = record(self.shared, &outcome, life);
        self.heard(self.offset, &outcome);
        if ok {
            playback.arrived(outcome.bytes, outcome.declared, Instant::now());
        }
        (ok, outcome.declared)
    }

    /// Bounded ranges of `chunk` bytes, each read whole, the next asked for once the
    /// buffer has room for it, as AVPlayer and ExoPlayer fetch: a skip or a seek stops
    /// between chunks, so the server sends exactly what the player read.
    async fn in_chunks(
        &self,
        chunk: u64,
        playback: &mut Playback,
        life: &mut Life,
    ) -> (bool, Option<u64>) {
        let stop_at = self.shared.stop_at;
        let mut got = 0u64;
        let mut length: Option<u64> = None;
        loop {
            let from = self.offset + got;
            let range = format!("bytes={from}-{}", from + chunk - 1);
            let outcome = client::exchange(
                self.shared.addr,
                &self.ask(&range),
                self.shared.options.timeout,
                |_, _| async { Flow::Continue },
            )
            .await;
            let ok = record(self.shared, &outcome, life);
            self.heard(from, &outcome);
            if !ok {
                return (false, length);
            }
            got += outcome.bytes;
            if outcome.status == Some(200) {
                // The range was ignored: the whole file came at once.
                length = Some(got);
            } else if let Some(total) = outcome.total {
                length = Some(total.saturating_sub(self.offset));
            }
            loop {
                let now = Instant::now();
                let (flow, wait) = playback.arrived(got, length, now);
                let all_here = length.is_some_and(|length| got >= length);
                if flow == Flow::Stop || now >= stop_at || all_here || outcome.bytes == 0 {
                    return (true, length);
                }
                match wait {
                    None => break,
                    Some(wait) => {
                        tokio::time::sleep(wait.min(stop_at.saturating_duration_since(now))).await;
                    }
                }
            }
        }
    }

    /// Notes what this listener was sent of the track, for `--listens`.
    fn heard(&self, start: u64, outcome: &Outcome) {
        if !self.shared.options.listens || outcome.bytes == 0 {
            return;
        }
        let mut results = self
            .shared
            .results
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        results.heard.push(Heard {
            listener: self.agent.to_string(),
            id: self.track.id.clone(),
            start,
            bytes: outcome.bytes,
            status: outcome.status.unwrap_or(0),
        });
    }
}

/// What a listener was sent in one exchange (`--listens`): the ground truth a count of
/// plays from the server's log is checked against.
#[derive(Debug, Clone, Serialize)]
pub struct Heard {
    /// The listener's user agent.
    pub listener: String,
    /// The track.
    pub id: String,
    /// The first byte's offset in the file.
    pub start: u64,
    /// Body bytes read.
    pub bytes: u64,
    /// The status.
    pub status: u16,
}

/// Counts an exchange; whether it went well (a 2xx or 3xx that completed).
fn record(shared: &Shared, outcome: &Outcome, life: &mut Life) -> bool {
    let mut outcome = *outcome;
    if outcome.error.is_none() && !outcome.status.is_some_and(|s| (200..300).contains(&s)) {
        // An answer that is not the track is an error for a player.
        outcome.error = Some(ErrorKind::Status);
    }
    let now = Instant::now();
    let mut results = shared.results.lock().unwrap_or_else(|p| p.into_inner());
    results
        .recorder
        .sent(now.checked_sub(outcome.latency).unwrap_or(now));
    results.recorder.record(&outcome, now);
    if outcome.error.is_some() {
        life.failed = true;
        let step = step_of(shared, now);
        results.errors_by_step[step] += 1;
    }
    outcome.error.is_none()
}

/// Seconds in a run of `duration`, a started one included.
fn shared_seconds(duration: Duration) -> usize {
    duration.as_secs_f64().ceil().max(1.0) as usize
}

fn step_of(shared: &Shared, at: Instant) -> usize {
    let steps = shared.options.ramp_steps.max(1);
    let elapsed = at.saturating_duration_since(shared.started).as_secs_f64();
    let length = shared.options.duration.as_secs_f64() / steps as f64;
    ((elapsed / length.max(1e-9)) as usize).min(steps - 1)
}

async fn backoff() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// A player's buffer: bytes arrive, the playhead moves at the bitrate once playback has
/// started, and the buffer running dry before the end is a stall.
#[derive(Debug)]
pub(crate) struct Playback {
    rate: f64,
    prebuffer: f64,
    ahead_max: f64,
    received: u64,
    /// The transfer's length, once known.
    length: Option<u64>,
    /// When playing: the instant the playhead was at `played`.
    playing: Option<(Instant, f64)>,
    /// When buffering: where the playhead waits.
    played: f64,
    /// When playback first started.
    pub(crate) started_at: Option<Instant>,
    /// Times the buffer ran dry.
    pub(crate) stalls: u64,
    /// Time spent stalled.
    pub(crate) stalled: Duration,
    stalled_since: Option<Instant>,
    /// Leave after this much playback (a seek or a skip).
    leave_at: Option<f64>,
    /// Whether the transfer was left before its end.
    pub(crate) left_early: bool,
}

impl Playback {
    /// A buffer playing `rate` bytes per second, starting after `prebuffer`, reading at
    /// most `buffer` ahead, and leaving after `leave_after` of playback, if given.
    pub(crate) fn new(
        rate: f64,
        prebuffer: Duration,
        buffer: Duration,
        leave_after: Option<Duration>,
    ) -> Playback {
        Playback {
            rate,
            prebuffer: rate * prebuffer.as_secs_f64(),
            ahead_max: (rate * buffer.as_secs_f64()).max(rate * prebuffer.as_secs_f64()),
            received: 0,
            length: None,
            playing: None,
            played: 0.0,
            started_at: None,
            stalls: 0,
            stalled: Duration::ZERO,
            stalled_since: None,
            leave_at: leave_after.map(|after| rate * after.as_secs_f64()),
            left_early: false,
        }
    }

    fn playhead(&self, now: Instant) -> f64 {
        match self.playing {
            Some((since, at)) => {
                at + self.rate * now.saturating_duration_since(since).as_secs_f64()
            }
            None => self.played,
        }
    }

    /// `got` bytes have arrived by `now` (of `declared`, when known): whether to read on,
    /// and how long to wait before the next read.
    pub(crate) fn arrived(
        &mut self,
        got: u64,
        declared: Option<u64>,
        now: Instant,
    ) -> (Flow, Option<Duration>) {
        // Did the playhead catch up with what had arrived before this? Then it stopped
        // there, at the instant it reached it.
        if let Some((since, at)) = self.playing {
            let dry_at =
                since + Duration::from_secs_f64(((self.received as f64 - at) / self.rate).max(0.0));
            let ended = declared.is_some_and(|d| self.received >= d);
            // Dry: also while nothing arrives (the client wakes its pace during a silence).
            if self.playhead(now) > self.received as f64 && !ended {
                self.stalls += 1;
                self.playing = None;
                self.played = self.received as f64;
                self.stalled_since = Some(dry_at);
            }
        }
        self.received = self.received.max(got);
        self.length = self.length.or(declared);
        let complete = declared.is_some_and(|d| self.received >= d);
        if self.playing.is_none()
            && (self.received as f64 - self.played >= self.prebuffer || complete)
        {
            if let Some(since) = self.stalled_since.take() {
                self.stalled += now.saturating_duration_since(since);
            }
            self.playing = Some((now, self.played));
            self.started_at.get_or_insert(now);
        }
        let head = self.playhead(now);
        if self
            .leave_at
            .is_some_and(|leave| self.playing.is_some() && head >= leave)
        {
            self.left_early = true;
            return (Flow::Stop, None);
        }
        if self.playing.is_none() {
            return (Flow::Continue, None);
        }
        let ahead = self.received as f64 - head;
        let mut wait = (ahead > self.ahead_max)
            .then(|| Duration::from_secs_f64((ahead - self.ahead_max) / self.rate));
        // A seek or skip comes while the player waits: wake for it.
        if let (Some(leave), Some(w)) = (self.leave_at, wait) {
            let until_leave = Duration::from_secs_f64(((leave - head) / self.rate).max(0.0));
            wait = Some(w.min(until_leave));
        }
        (Flow::Continue, wait)
    }

    /// The run ends at `now`: a buffer that is dry then is a stall still under way.
    pub(crate) fn finish(&mut self, now: Instant) {
        let ended = self.length.is_some_and(|length| self.received >= length);
        if let Some((since, at)) = self.playing
            && self.playhead(now) > self.received as f64
            && !ended
        {
            let dry_at =
                since + Duration::from_secs_f64(((self.received as f64 - at) / self.rate).max(0.0));
            self.stalls += 1;
            self.playing = None;
            self.played = self.received as f64;
            self.stalled_since = Some(dry_at);
        }
        if let Some(since) = self.stalled_since.take() {
            self.stalled += now.saturating_duration_since(since);
        }
    }

    /// How long the buffered rest takes to play.
    pub(crate) fn left_to_play(&self, now: Instant) -> Duration {
        let left = self.received as f64 - self.playhead(now);
        Duration::from_secs_f64((left / self.rate).max(0.0))
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// This thread's CPU time (user + system), seconds, from `/proc/thread-self/stat`.
fn thread_cpu() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) close with ')'.
    let Some(rest) = stat.rsplit_once(')').map(|(_, rest)| rest) else {
        return 0.0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name, in
    // clock ticks: 100 a second on every Linux this runs on (USER_HZ).
    (ticks(11) + ticks(12)) / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_fed_faster_than_it_plays_never_stalls_and_one_fed_slower_does() {
        let start = Instant::now();
        let second = |s: f64| start + Duration::from_secs_f64(s);
        // 1,000 bytes/s, 2 s of prebuffer, 10 s ahead at most.
        let mut fast = Playback::new(
            1000.0,
            Duration::from_secs(2),
            Duration::from_secs(10),
            None,
        );
        for s in 0..30 {
            let (flow, _) = fast.arrived((s + 1) * 2000, Some(100_000), second(s as f64));
            assert_eq!(flow, Flow::Continue);
        }
        assert_eq!(fast.stalls, 0);
        assert_eq!(fast.started_at, Some(second(0.0)), "2 s buffered at once");
        // Half the bitrate: it starts after 4 s, then runs dry every few seconds.
        let mut slow = Playback::new(
            1000.0,
            Duration::from_secs(2),
            Duration::from_secs(10),
            None,
        );
        for s in 0..30 {
            slow.arrived((s + 1) * 500, Some(100_000), second(s as f64));
        }
        assert_eq!(slow.started_at, Some(second(3.0)));
        assert!(slow.stalls >= 3, "{slow:?}");
        assert!(slow.stalled > Duration::from_secs(5), "{slow:?}");
    }

    #[test]
    fn a_server_gone_silent_is_a_stall_as_soon_as_the_buffer_runs_dry() {
        let start = Instant::now();
        let mut playback = Playback::new(
            1000.0,
            Duration::from_secs(2),
            Duration::from_secs(10),
            None,
        );
        playback.arrived(3000, Some(100_000), start);
        // Nothing more arrives; the client wakes its pace every quarter second.
        playback.arrived(3000, Some(100_000), start + Duration::from_millis(2500));
        assert_eq!(playback.stalls, 0, "half a second of music left");
        playback.arrived(3000, Some(100_000), start + Duration::from_millis(3250));
        assert_eq!(playback.stalls, 1, "dry at 3 s, seen at the next wake");
        playback.arrived(3000, Some(100_000), start + Duration::from_secs(5));
        assert_eq!(playback.stalls, 1, "one stall, not one per wake");
        playback.finish(start + Duration::from_secs(6));
        assert!(
            (playback.stalled.as_secs_f64() - 3.0).abs() < 0.01,
            "{playback:?}"
        );
    }

    #[test]
    fn a_full_buffer_holds_reads_back_and_a_skip_stops_the_transfer() {
        let start = Instant::now();
        let mut playback = Playback::new(
            1000.0,
            Duration::from_secs(2),
            Duration::from_secs(10),
            Some(Duration::from_secs(5)),
        );
        let (_, wait) = playback.arrived(15_000, Some(100_000), start);
        let wait = wait.expect("15 s buffered is 5 s over the 10 s allowed");
        assert!((wait.as_secs_f64() - 5.0).abs() < 0.01, "{wait:?}");
        let (flow, _) = playback.arrived(15_000, Some(100_000), start + Duration::from_secs(5));
        assert_eq!(flow, Flow::Stop);
        assert!(playback.left_early);
    }
}
