//! Real traffic against a service: what `musicctl replay` and `musicctl players` share.
//!
//! * [`log`] reads access logs back into requests;
//! * [`client`] makes one exchange and times it;
//! * [`Recorder`] counts what came back (statuses by class, errors by kind, bytes) and
//!   keeps latency and time-to-first-byte histograms (`hdrhistogram`: fixed memory
//!   whatever the number of requests), and a per-second timeline for the report's plots;
//!   [`Summary`] is what it says at the end.

pub(crate) mod client;
pub(crate) mod html;
pub(crate) mod log;

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use self::client::{ErrorKind, Outcome};

/// Percentiles of a latency, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Percentiles {
    /// Median.
    pub(crate) p50: f64,
    /// 90th percentile.
    pub(crate) p90: f64,
    /// 99th percentile.
    pub(crate) p99: f64,
    /// The largest.
    pub(crate) max: f64,
}

/// What a run saw, by the field names of `--json`.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Summary {
    /// Requests made.
    pub(crate) requests: u64,
    /// The target's answers, by class (`"2xx"` … `"5xx"`).
    pub(crate) statuses: BTreeMap<String, u64>,
    /// Requests that did not complete, by kind.
    pub(crate) errors: BTreeMap<String, u64>,
    /// From sending the request to the last byte read.
    pub(crate) latency_ms: Percentiles,
    /// From sending the request to the first byte of the answer.
    pub(crate) ttfb_ms: Percentiles,
    /// Body bytes read.
    pub(crate) bytes: u64,
    /// From the first request sent to the last answer finished.
    pub(crate) duration_s: f64,
}

/// One second of a run, for the report's plots.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Second {
    /// Requests finished in this second.
    pub(crate) requests: u64,
    /// Of those, errors.
    pub(crate) errors: u64,
    /// Their median latency, in milliseconds.
    pub(crate) p50_ms: f64,
    /// Their 99th-percentile latency, in milliseconds.
    pub(crate) p99_ms: f64,
}

/// Counts outcomes as they come.
pub(crate) struct Recorder {
    requests: u64,
    statuses: BTreeMap<String, u64>,
    errors: BTreeMap<ErrorKind, u64>,
    latency: Histogram<u64>,
    ttfb: Histogram<u64>,
    bytes: u64,
    first_sent: Option<std::time::Instant>,
    last_done: Option<std::time::Instant>,
    /// Each second's counts; the latency percentiles are filled in when it is over.
    seconds: Vec<Second>,
    /// The latencies of the second under way: one histogram at a time, so a day-long run
    /// holds a few bytes a second, not a histogram a second.
    current: Option<(usize, Histogram<u64>)>,
}

/// A second's latencies: 2 significant digits are enough for a plot, and a tenth the size.
fn second_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("constant bounds are valid")
}

/// A latency histogram in microseconds.
pub(crate) fn histogram() -> Histogram<u64> {
    // Microseconds, 1 µs to an hour, 3 significant digits: about 180 KiB each (a run keeps
    // a handful).
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant bounds are valid")
}

impl Default for Recorder {
    fn default() -> Recorder {
        Recorder {
            requests: 0,
            statuses: BTreeMap::new(),
            errors: BTreeMap::new(),
            latency: histogram(),
            ttfb: histogram(),
            bytes: 0,
            first_sent: None,
            last_done: None,
            seconds: Vec::new(),
            current: None,
        }
    }
}

impl Recorder {
    /// Marks a request sent at `at`.
    pub(crate) fn sent(&mut self, at: std::time::Instant) {
        if self.first_sent.is_none_or(|first| at < first) {
            self.first_sent = Some(at);
        }
    }

    /// Counts one outcome, finished at `done`.
    pub(crate) fn record(&mut self, outcome: &Outcome, done: std::time::Instant) {
        self.requests += 1;
        if let Some(status) = outcome.status {
            *self.statuses.entry(status_class(status)).or_default() += 1;
        }
        if let Some(kind) = outcome.error {
            *self.errors.entry(kind).or_default() += 1;
        }
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1);
        let _ = self.latency.record(micros(outcome.latency));
        if let Some(ttfb) = outcome.ttfb {
            let _ = self.ttfb.record(micros(ttfb));
        }
        self.bytes += outcome.bytes;
        if self.last_done.is_none_or(|last| done > last) {
            self.last_done = Some(done);
        }
        if let Some(first) = self.first_sent {
            let second = done.saturating_duration_since(first).as_secs() as usize;
            while self.seconds.len() <= second {
                self.seconds.push(Second::default());
            }
            let slot = &mut self.seconds[second];
            slot.requests += 1;
            slot.errors += u64::from(outcome.error.is_some());
            if self.current.as_ref().is_none_or(|(at, _)| *at < second) {
                self.close_second();
                self.current = Some((second, second_histogram()));
            }
            // A late finish of an earlier second is counted, its latency not plotted.
            if let Some((at, latency)) = &mut self.current
                && *at == second
            {
                let _ = latency.record(micros(outcome.latency));
            }
        }
    }

    /// What the run saw.
    pub(crate) fn summary(&self) -> Summary {
        Summary {
            requests: self.requests,
            statuses: self.statuses.clone(),
            errors: self
                .errors
                .iter()
                .map(|(kind, n)| (kind.as_str().to_string(), *n))
                .collect(),
            latency_ms: percentiles(&self.latency),
            ttfb_ms: percentiles(&self.ttfb),
            bytes: self.bytes,
            duration_s: match (self.first_sent, self.last_done) {
                (Some(first), Some(last)) => last.saturating_duration_since(first).as_secs_f64(),
                _ => 0.0,
            },
        }
    }

    /// Writes the percentiles of the second under way into its slot.
    fn close_second(&mut self) {
        if let Some((at, latency)) = &self.current
            && let Some(slot) = self.seconds.get_mut(*at)
        {
            slot.p50_ms = ms(latency.value_at_quantile(0.5));
            slot.p99_ms = ms(latency.value_at_quantile(0.99));
        }
    }

    /// The run second by second.
    pub(crate) fn timeline(&self) -> Vec<Second> {
        let mut seconds = self.seconds.clone();
        if let Some((at, latency)) = &self.current
            && let Some(slot) = seconds.get_mut(*at)
        {
            slot.p50_ms = ms(latency.value_at_quantile(0.5));
            slot.p99_ms = ms(latency.value_at_quantile(0.99));
        }
        seconds
    }
}

/// The address of `http://host[:port]` (a path is ignored), and the `Host` to ask for.
pub(crate) async fn resolve(url: &str) -> Result<(std::net::SocketAddr, String), crate::LoadError> {
    let usage = || crate::LoadError::Usage(format!("`{url}` is not an http://host:port URL"));
    let rest = url.strip_prefix("http://").ok_or_else(usage)?;
    let host = rest
        .split('/')
        .next()
        .filter(|h| !h.is_empty())
        .ok_or_else(usage)?;
    let with_port = if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let addr = tokio::net::lookup_host(&with_port)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| crate::LoadError::Usage(format!("`{host}` does not resolve")))?;
    Ok((addr, host.to_string()))
}

/// `"2xx"` for 204.
pub(crate) fn status_class(status: u16) -> String {
    format!("{}xx", status / 100)
}

fn ms(micros: u64) -> f64 {
    micros as f64 / 1000.0
}

/// A histogram's percentiles, in milliseconds.
pub(crate) fn percentiles(histogram: &Histogram<u64>) -> Percentiles {
    if histogram.is_empty() {
        return Percentiles::default();
    }
    Percentiles {
        p50: ms(histogram.value_at_quantile(0.5)),
        p90: ms(histogram.value_at_quantile(0.9)),
        p99: ms(histogram.value_at_quantile(0.99)),
        max: ms(histogram.max()),
    }
}

/// Plots of a run's timeline: requests, errors, and latency percentiles per second.
pub(crate) fn timeline_plots(sides: &[(&str, &[Second])]) -> Vec<html::Plot> {
    let series = |pick: fn(&Second) -> f64, suffix: &str| -> Vec<html::Series> {
        sides
            .iter()
            .map(|(name, seconds)| html::Series {
                name: format!("{name}{suffix}"),
                values: seconds.iter().map(pick).collect(),
            })
            .collect()
    };
    let mut latency = series(|s| s.p50_ms, " p50");
    latency.extend(series(|s| s.p99_ms, " p99"));
    vec![
        html::Plot {
            x_unit: "s",
            title: "Requests finished per second".into(),
            unit: "req/s".into(),
            series: series(|s| s.requests as f64, ""),
        },
        html::Plot {
            x_unit: "s",
            title: "Latency of the requests finished each second".into(),
            unit: "ms".into(),
            series: latency,
        },
        html::Plot {
            x_unit: "s",
            title: "Errors per second".into(),
            unit: "errors/s".into(),
            series: series(|s| s.errors as f64, ""),
        },
    ]
}

impl Summary {
    /// The summary as rows of the HTML report, each named `prefix` + its figure.
    pub(crate) fn rows(&self, prefix: &str) -> Vec<(String, String)> {
        let join = |map: &BTreeMap<String, u64>| {
            let parts: Vec<String> = map.iter().map(|(k, v)| format!("{k} {v}")).collect();
            if parts.is_empty() {
                "-".to_string()
            } else {
                parts.join(", ")
            }
        };
        let p = |p: &Percentiles| {
            format!(
                "p50 {:.1}, p90 {:.1}, p99 {:.1}, max {:.1}",
                p.p50, p.p90, p.p99, p.max
            )
        };
        vec![
            (format!("{prefix}requests"), self.requests.to_string()),
            (format!("{prefix}statuses"), join(&self.statuses)),
            (format!("{prefix}errors"), join(&self.errors)),
            (format!("{prefix}latency ms"), p(&self.latency_ms)),
            (format!("{prefix}time to first byte ms"), p(&self.ttfb_ms)),
            (format!("{prefix}bytes"), self.bytes.to_string()),
            (
                format!("{prefix}duration s"),
                format!("{:.2}", self.duration_s),
            ),
        ]
    }

    /// The summary as a table, one row per figure.
    pub(crate) fn render(&self, title: &str) -> String {
        let classes = |map: &BTreeMap<String, u64>| {
            if map.is_empty() {
                return "-".to_string();
            }
            map.iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let p = |p: &Percentiles| {
            format!(
                "p50 {:.1}  p90 {:.1}  p99 {:.1}  max {:.1}",
                p.p50, p.p90, p.p99, p.max
            )
        };
        format!(
            "{title}\n  requests     {}\n  statuses     {}\n  errors       {}\n  latency ms   {}\n  ttfb ms      {}\n  bytes        {}\n  duration s   {:.2}\n",
            self.requests,
            classes(&self.statuses),
            classes(&self.errors),
            p(&self.latency_ms),
            p(&self.ttfb_ms),
            self.bytes,
            self.duration_s,
        )
    }
}
