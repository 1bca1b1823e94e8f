//! `musicctl replay LOG… --target URL`: production traffic, replayed from access logs.
//!
//! Every track request of the logs (GET or HEAD under a route prefix) is sent to the
//! target with the same path and query, at its original time divided by `--speed` (or as
//! fast as `--concurrency` connections allow, with `--speed max`), with its `Range` when the
//! log has one. A 2xx whose logged bytes are fewer than the answer's length was abandoned
//! by its player: the replay reads that many bytes and closes, and counts it as the 2xx it
//! was. With `--against URL2` the same traffic goes to a second service side by side, and
//! the report adds where the two answered a track with a different status class.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc;

use crate::LoadError;
use crate::traffic::client::{self, Ask, Flow, Outcome};
use crate::traffic::log::{Logged, read_logs};
use crate::traffic::{Recorder, Second, Summary, html, status_class, timeline_plots};

/// How fast to replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Speed {
    /// The original timing divided by this.
    Times(f64),
    /// As fast as the connections allow.
    Max,
}

impl std::str::FromStr for Speed {
    type Err = String;

    fn from_str(text: &str) -> Result<Speed, String> {
        if text == "max" {
            return Ok(Speed::Max);
        }
        match text.parse::<f64>() {
            Ok(times) if (0.001..=1e9).contains(&times) => Ok(Speed::Times(times)),
            _ => Err(format!(
                "`{text}` is neither a number from 0.001 to 1e9 nor `max`"
            )),
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// The service replayed to (`http://host:port`).
    pub target: String,
    /// A second service that gets the same traffic, if any.
    pub against: Option<String>,
    /// How fast.
    pub speed: Speed,
    /// Connections at once with `--speed max`.
    pub concurrency: usize,
    /// Bound on a connect and on every silence of an answer.
    pub timeout: Duration,
    /// The track route prefixes (`/musicdb`): other lines are not replayed.
    pub prefixes: Vec<String>,
}

/// Where two services answered a track differently.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Difference {
    /// The track id.
    pub(crate) id: String,
    /// The request target.
    pub(crate) target: String,
    /// The status the target answered (0: none).
    pub(crate) status: u16,
    /// The status the other service answered (0: none).
    pub(crate) against: u16,
}

/// What a replay did.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The target's side.
    #[serde(flatten)]
    pub(crate) summary: Summary,
    /// Time to first byte of the first request for each track (the target's): what a
    /// cold cache costs a listener.
    pub(crate) first_play_ttfb_ms: crate::traffic::Percentiles,
    /// The statuses the log recorded for the requests replayed, by class.
    pub(crate) log_statuses: BTreeMap<String, u64>,
    /// Log lines not replayed: not a track request, not GET or HEAD, or unreadable.
    pub(crate) skipped_lines: u64,
    /// The other service's side, with `--against`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) against: Option<Summary>,
    /// Tracks whose status class differed between the two, with `--against` (at most 100
    /// listed; `differing` counts them all).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) differences: Option<Vec<Difference>>,
    /// How many requests the two answered with a different status class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) differing: Option<u64>,
    /// Second by second, the target's and the other service's.
    #[serde(skip)]
    pub(crate) timelines: Vec<(String, Vec<Second>)>,
}

impl ReplayReport {
    /// 0 when every request completed (and, with `--against`, both agreed), else 1.
    pub fn exit_code(&self) -> u8 {
        let errors = |s: &Summary| s.errors.values().sum::<u64>();
        let against_errors = self.against.as_ref().map_or(0, errors);
        u8::from(errors(&self.summary) + against_errors > 0 || self.differing.unwrap_or(0) > 0)
    }

    /// The `--report` page.
    pub fn html(&self) -> String {
        let mut rows = self.summary.rows("");
        let first = &self.first_play_ttfb_ms;
        rows.push((
            "time to first byte of first plays ms".into(),
            format!(
                "p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
                first.p50, first.p90, first.p99, first.max
            ),
        ));
        let classes: Vec<String> = self
            .log_statuses
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        rows.push(("statuses in the log".into(), classes.join(", ")));
        rows.push((
            "log lines not replayed".into(),
            self.skipped_lines.to_string(),
        ));
        if let Some(against) = &self.against {
            rows.extend(against.rows("against: "));
        }
        if let Some(differing) = self.differing {
            rows.push((
                "requests answered differently".into(),
                differing.to_string(),
            ));
        }
        let sides: Vec<(&str, &[Second])> = self
            .timelines
            .iter()
            .map(|(name, t)| (name.as_str(), t.as_slice()))
            .collect();
        html::page("musicctl replay", &rows, &timeline_plots(&sides))
    }

    /// The report for a terminal.
    pub fn render(&self) -> String {
        let mut out = self.summary.render("target");
        out.push_str(&format!(
            "  first plays  ttfb p50 {:.1}  p99 {:.1}\n",
            self.first_play_ttfb_ms.p50, self.first_play_ttfb_ms.p99
        ));
        let classes: Vec<String> = self
            .log_statuses
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "  log said     {}\n  skipped      {} log lines\n",
            classes.join(", "),
            self.skipped_lines
        ));
        if let Some(against) = &self.against {
            out.push_str(&against.render("against"));
        }
        if let (Some(differing), Some(differences)) = (self.differing, &self.differences) {
            out.push_str(&format!("differences: {differing} requests\n"));
            for d in differences.iter().take(20) {
                out.push_str(&format!(
                    "  {} {}: {} vs {}\n",
                    d.id, d.target, d.status, d.against
                ));
            }
        }
        out
    }
}

/// Replays the logs at `paths`; `progress` hears the requests done so far.
pub async fn replay(
    paths: &[std::path::PathBuf],
    options: &ReplayOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<ReplayReport, LoadError> {
    let (requests, skipped) = replayable(paths, &options.prefixes)?;
    let mut log_statuses = BTreeMap::new();
    for request in &requests {
        *log_statuses
            .entry(status_class(request.status))
            .or_default() += 1;
    }
    let target = Service::resolve(&options.target).await?;
    let against = match &options.against {
        Some(url) => Some(Service::resolve(url).await?),
        None => None,
    };
    let requests = Arc::new(requests);
    let total = requests.len() as u64 * if against.is_some() { 2 } else { 1 };
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(usize, bool, Instant, Outcome)>();
    let mut recorders = [Recorder::default(), Recorder::default()];
    let sides: Vec<(bool, Service)> = std::iter::once((false, target))
        .chain(against.map(|a| (true, a)))
        .collect();
    let limit = Arc::new(tokio::sync::Semaphore::new(match options.speed {
        // Each request takes a permit per side: at least that many, or none ever starts.
        Speed::Max => options.concurrency.max(2),
        Speed::Times(_) => tokio::sync::Semaphore::MAX_PERMITS,
    }));
    let started = Instant::now();
    let first_ms = requests.first().map_or(0, |r| r.at_ms);
    let mut statuses: Vec<[Option<u16>; 2]> = vec![[None, None]; requests.len()];
    let mut seen = std::collections::HashSet::new();
    let first_play: Vec<bool> = requests
        .iter()
        .map(|r| seen.insert(track_id(&options.prefixes, &r.target)))
        .collect();
    drop(seen);
    let mut first_play_ttfb = crate::traffic::histogram();
    let mut finished = 0u64;
    let mut next = 0usize;
    while next < requests.len() || finished < total {
        // Send what is due, then take what finished, never blocking one on the other.
        let due = requests.get(next).map(|request| match options.speed {
            Speed::Max => started,
            Speed::Times(times) => {
                let offset = (request.at_ms - first_ms) as f64 / 1000.0 / times;
                started + Duration::from_secs_f64(offset)
            }
        });
        let wait_for_due = async {
            match due {
                Some(due) => {
                    tokio::time::sleep_until(due.into()).await;
                    Arc::clone(&limit)
                        .acquire_many_owned(sides.len() as u32)
                        .await
                        .ok()
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some((index, is_against, done, outcome)) = done_rx.recv() => {
                recorders[usize::from(is_against)].record(&outcome, done);
                if first_play[index] && !is_against
                    && let Some(ttfb) = outcome.ttfb
                {
                    let _ = first_play_ttfb.record(u64::try_from(ttfb.as_micros()).unwrap_or(u64::MAX).max(1));
                }
                statuses[index][usize::from(is_against)] = Some(outcome.status.unwrap_or(0));
                finished += 1;
                progress(finished, total);
            }
            permit = wait_for_due => {
                let Some(permit) = permit else { break };
                let permit = Arc::new(permit);
                for (is_against, service) in &sides {
                    let (requests, service, done_tx) = (Arc::clone(&requests), service.clone(), done_tx.clone());
                    let (index, is_against, timeout, permit) = (next, *is_against, options.timeout, Arc::clone(&permit));
                    let sent = Instant::now();
                    recorders[usize::from(is_against)].sent(sent);
                    tokio::spawn(async move {
                        let request = &requests[index];
                        let ask = Ask {
                            method: &request.method,
                            target: &request.target,
                            host: &service.host,
                            range: request.range.as_deref(),
                            // A 2xx cut short in the log is read as far as it went.
                            read_at_most: (200..300).contains(&request.status).then_some(request.bytes),
                            agent: "musicctl",
                        };
                        let outcome = client::exchange(service.addr, &ask, timeout, |_, _| async { Flow::Continue }).await;
                        drop(permit);
                        let _ = done_tx.send((index, is_against, Instant::now(), outcome));
                    });
                }
                next += 1;
            }
        }
    }
    let [target_recorder, against_recorder] = recorders;
    let mut report = ReplayReport {
        summary: target_recorder.summary(),
        first_play_ttfb_ms: crate::traffic::percentiles(&first_play_ttfb),
        log_statuses,
        skipped_lines: skipped,
        against: None,
        differences: None,
        differing: None,
        timelines: vec![("target".into(), target_recorder.timeline())],
    };
    if options.against.is_some() {
        let (differences, differing) = differences(&requests, &statuses, &options.prefixes);
        report.against = Some(against_recorder.summary());
        report
            .timelines
            .push(("against".into(), against_recorder.timeline()));
        report.differences = Some(differences);
        report.differing = Some(differing);
    }
    Ok(report)
}

/// The track requests of the logs (GET and HEAD), in time order, and how many lines were
/// skipped.
fn replayable(
    paths: &[std::path::PathBuf],
    prefixes: &[String],
) -> Result<(Vec<Logged>, u64), LoadError> {
    let log = read_logs(paths)?;
    let mut skipped = log.skipped;
    let mut requests: Vec<Logged> = Vec::with_capacity(log.requests.len());
    for request in log.requests {
        let replayable = (request.method == "GET" || request.method == "HEAD")
            && track_id(prefixes, &request.target).is_some();
        if replayable {
            requests.push(request);
        } else {
            skipped += 1;
        }
    }
    // Several logs (or a log of several processes) interleave: replay in time order.
    requests.sort_by_key(|r| r.at_ms);
    Ok((requests, skipped))
}

/// The requests whose two answers differ in status class: the first 100, and how many.
fn differences(
    requests: &[Logged],
    statuses: &[[Option<u16>; 2]],
    prefixes: &[String],
) -> (Vec<Difference>, u64) {
    let mut differences = Vec::new();
    let mut differing = 0;
    for (request, [ours, theirs]) in requests.iter().zip(statuses) {
        let (ours, theirs) = (ours.unwrap_or(0), theirs.unwrap_or(0));
        if ours / 100 != theirs / 100 {
            differing += 1;
            if differences.len() < 100 {
                differences.push(Difference {
                    id: track_id(prefixes, &request.target).unwrap_or_default(),
                    target: request.target.clone(),
                    status: ours,
                    against: theirs,
                });
            }
        }
    }
    (differences, differing)
}

/// A service to send to: its address and the `Host` it is asked for.
#[derive(Debug, Clone)]
struct Service {
    addr: SocketAddr,
    host: String,
}

impl Service {
    async fn resolve(url: &str) -> Result<Service, LoadError> {
        let (addr, host) = crate::traffic::resolve(url).await?;
        Ok(Service { addr, host })
    }
}

/// The id of a track URL under one of `prefixes`.
fn track_id(prefixes: &[String], target: &str) -> Option<String> {
    let path = target.split('?').next().unwrap_or(target);
    let path = match path.find("://") {
        Some(scheme) => {
            let rest = &path[scheme + 3..];
            &rest[rest.find('/')?..]
        }
        None => path,
    };
    prefixes.iter().find_map(|prefix| {
        let rest = path.strip_prefix(prefix.as_str())?.strip_prefix('/')?;
        let id = rest.split('/').next()?;
        (!id.is_empty()).then(|| id.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speeds_and_track_ids_are_read() {
        assert_eq!("10".parse::<Speed>(), Ok(Speed::Times(10.0)));
        assert_eq!("max".parse::<Speed>(), Ok(Speed::Max));
        assert!("0".parse::<Speed>().is_err());
        assert!("fast".parse::<Speed>().is_err());
        let prefixes = vec!["/musicdb".to_string()];
        assert_eq!(
            track_id(&prefixes, "/musicdb/abc/x.mp3?sig=1").as_deref(),
            Some("abc")
        );
        assert_eq!(
            track_id(&prefixes, "http://h/musicdb/abc").as_deref(),
            Some("abc")
        );
        assert_eq!(track_id(&prefixes, "/healthz"), None);
        assert_eq!(track_id(&prefixes, "/musicdbx/abc"), None);
    }
}
