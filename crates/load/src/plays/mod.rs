//! `musicctl plays LOG…`: how many times each track was played, counted from access logs
//! by the rules the audio industry audits (the IAB Podcast Measurement Guidelines,
//! §5.5), with a music threshold.
//!
//! A request counts only if it is a `GET` of a track answered 200 or 206 that is not a
//! probe of two bytes or fewer and not from a crawler or monitor ([`count::judge`]). The
//! bytes one listener (address, an IPv6 one cut to its /64, and user agent) was sent of
//! one track within one window (24 hours from its first counted request, or the UTC day)
//! are stitched together, and once they reach the file's header plus `--threshold` of
//! audio at its bitrate (the whole file for a shorter track, or one whose bitrate is not
//! known) that window holds one play.
//!
//! * [`parse`] reads a line of any format the stack writes, without allocating;
//! * [`count`] applies the rules and keeps the windows;
//! * this module reads the files, merged in time order, and writes what was counted.

mod count;
mod parse;

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use foldhash::HashMap;
use serde::Serialize;

pub use count::{TrackFacts, Window};
pub use parse::{BOT_AGENTS, LogFormat};

use crate::LoadError;
use crate::traffic::html;
use count::{Counter, Dropped};
use parse::{Agents, LineParser, Record, TrackId, track_hex, track_id};

/// What each catalogue track is, by id: what a play of it needs.
#[derive(Debug, Default, Clone)]
pub struct Facts {
    by_id: HashMap<TrackId, TrackFacts>,
}

impl Facts {
    /// Adds a track; false when `id` is not 24 hex digits.
    pub fn insert(&mut self, id: &str, facts: TrackFacts) -> bool {
        match track_id(id.as_bytes()) {
            Some(id) => {
                self.by_id.insert(id, facts);
                true
            }
            None => false,
        }
    }

    /// How many tracks.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Reads a `--facts` file: JSON lines `{"id","size","bitrate","duration","audio_offset"}`
    /// (`null` or absent where unknown).
    pub fn read(path: &Path) -> Result<Facts, LoadError> {
        let io = |source| LoadError::Io {
            path: path.display().to_string(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let mut facts = Facts::default();
        for (index, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                continue;
            }
            let bad = |why: String| {
                LoadError::Usage(format!("{} line {}: {why}", path.display(), index + 1))
            };
            let entry: FactsLine =
                serde_json::from_str(&line).map_err(|err| bad(err.to_string()))?;
            if !facts.insert(&entry.id, entry.facts) {
                return Err(bad(format!("`{}` is not a track id", entry.id)));
            }
        }
        Ok(facts)
    }
}

/// One line of a facts file.
#[derive(Debug, serde::Deserialize, Serialize)]
pub struct FactsLine {
    /// The track id.
    pub id: String,
    /// What is known of it.
    #[serde(flatten)]
    pub facts: TrackFacts,
}

/// How to count.
#[derive(Debug, Clone)]
pub struct PlaysOptions {
    /// Seconds of audio a play needs.
    pub threshold_s: f64,
    /// How windows are drawn.
    pub window: Window,
    /// The format of the logs (`Auto`: decided per file).
    pub format: LogFormat,
    /// User agents that are bots besides the built-in list.
    pub exclude_agents: Vec<regex::Regex>,
    /// The track route prefixes (`/musicdb`).
    pub prefixes: Vec<String>,
}

/// A track's counts.
#[derive(Debug, Clone, Serialize)]
pub struct TrackPlays {
    /// The track id.
    pub id: String,
    /// Plays counted.
    pub plays: u64,
    /// Distinct listeners with at least one play.
    pub listeners: u64,
    /// Body bytes sent on its requests that could count.
    pub bytes: u64,
}

/// A row of `--csv`: one UTC day and one track.
#[derive(Debug, Clone, Serialize)]
pub struct DayPlays {
    /// `YYYY-MM-DD`, the day a play counted.
    pub day: String,
    /// The track's counts that day.
    #[serde(flatten)]
    pub track: TrackPlays,
}

/// What the logs held.
#[derive(Debug, Clone, Serialize)]
pub struct PlaysReport {
    /// Lines read (blank ones aside).
    pub lines: u64,
    /// Lines asking for a track, whatever their method or status.
    pub track_requests: u64,
    /// Lines that could not count, by reason.
    pub dropped: std::collections::BTreeMap<&'static str, u64>,
    /// Distinct listeners with at least one play.
    pub listeners: u64,
    /// Plays counted.
    pub plays: u64,
    /// Requests that could count but for a track whose size is not known.
    pub unknown_track: u64,
    /// `rolling` (24 h from a listener's first request for a track) or `calendar`.
    pub window: Window,
    /// Seconds of audio a play needs.
    pub threshold_s: f64,
    /// Every track with a request that could count, by plays, then id.
    pub tracks: Vec<TrackPlays>,
    /// Files that could not be read to their end (the counts hold what came before).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_errors: Vec<String>,
    /// Most listener × track windows open at once: what the run's memory follows.
    pub most_open_windows: usize,
    /// Per day and track, for `--csv`.
    #[serde(skip)]
    pub days: Vec<DayPlays>,
    /// Plays per hour from the first hour with one (for the report).
    #[serde(skip)]
    hours: (u64, Vec<f64>),
}

impl PlaysReport {
    /// 0 counted; 1 when a line could not be read or a file ended early.
    pub fn exit_code(&self) -> u8 {
        let unparsed = self.dropped.get("unparsed").copied().unwrap_or(0);
        u8::from(unparsed > 0 || !self.read_errors.is_empty())
    }

    /// The report for a terminal, with the `top` tracks.
    pub fn render(&self, top: usize) -> String {
        let mut out = format!(
            "plays: {} by {} listeners ({} window, {} s threshold)\n  lines           {}\n  track requests  {}\n  unknown track   {}\n  dropped        ",
            self.plays,
            self.listeners,
            match self.window {
                Window::Rolling => "rolling 24 h",
                Window::Calendar => "calendar-day",
            },
            self.threshold_s,
            self.lines,
            self.track_requests,
            self.unknown_track,
        );
        for (reason, n) in &self.dropped {
            let _ = write!(out, " {reason} {n}");
        }
        out.push('\n');
        if !self.tracks.is_empty() {
            let _ = writeln!(
                out,
                "  {:<24}  {:>8}  {:>9}  {:>14}",
                "track", "plays", "listeners", "bytes"
            );
        }
        for track in self.tracks.iter().take(top) {
            let _ = writeln!(
                out,
                "  {:<24}  {:>8}  {:>9}  {:>14}",
                track.id, track.plays, track.listeners, track.bytes
            );
        }
        for error in &self.read_errors {
            let _ = writeln!(out, "  read error      {error}");
        }
        out
    }

    /// `--csv`: `day,id,plays,listeners,bytes`, a row per UTC day and track with a play.
    pub fn csv(&self) -> String {
        let mut out = String::from("day,id,plays,listeners,bytes\n");
        for row in &self.days {
            let _ = writeln!(
                out,
                "{},{},{},{},{}",
                row.day, row.track.id, row.track.plays, row.track.listeners, row.track.bytes
            );
        }
        out
    }

    /// The `--report` page: the counts, plays per hour, and the top tracks.
    pub fn html(&self) -> String {
        let mut rows = vec![
            ("plays".to_string(), self.plays.to_string()),
            ("listeners".to_string(), self.listeners.to_string()),
            (
                "window".to_string(),
                match self.window {
                    Window::Rolling => "rolling, 24 h from a listener's first request".into(),
                    Window::Calendar => "the UTC day".to_string(),
                },
            ),
            ("threshold s".to_string(), self.threshold_s.to_string()),
            ("lines".to_string(), self.lines.to_string()),
            (
                "track requests".to_string(),
                self.track_requests.to_string(),
            ),
            ("unknown track".to_string(), self.unknown_track.to_string()),
        ];
        for (reason, n) in &self.dropped {
            rows.push((format!("dropped: {reason}"), n.to_string()));
        }
        if let Some(first) = self.hours.1.first().map(|_| self.hours.0) {
            rows.push((
                "first hour (UTC)".into(),
                format!("{} {:02}:00", day_text(first / 24), first % 24),
            ));
        }
        for (rank, track) in self.tracks.iter().take(20).enumerate() {
            rows.push((
                format!("#{} {}", rank + 1, track.id),
                format!(
                    "{} plays, {} listeners, {} bytes",
                    track.plays, track.listeners, track.bytes
                ),
            ));
        }
        let plot = html::Plot {
            title: "Plays per hour".into(),
            x_unit: "h",
            unit: "plays".into(),
            series: vec![html::Series {
                name: "plays".into(),
                values: self.hours.1.clone(),
            }],
        };
        html::page("musicctl plays", &rows, &[plot])
    }
}

/// One log file being read.
struct Source {
    name: String,
    reader: Box<dyn Read>,
    format: LogFormat,
    parser: LineParser,
    /// Bytes read and not yet parsed: `block[start..end]`. Lines are cut from it in place,
    /// a megabyte at a time, rather than copied out one by one.
    block: Vec<u8>,
    start: usize,
    end: usize,
    at_end: bool,
    record: Option<Record>,
}

/// How much of a file is read at once.
const BLOCK: usize = 1 << 20;

impl Source {
    fn open(path: &Path, options: &PlaysOptions) -> Result<Source, LoadError> {
        let io = |source| LoadError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = BufReader::with_capacity(1 << 16, std::fs::File::open(path).map_err(io)?);
        let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn Read> = if gzip {
            Box::new(flate2::bufread::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        Ok(Source {
            name: path.display().to_string(),
            reader,
            format: options.format,
            parser: LineParser::new(&options.prefixes),
            block: vec![0; BLOCK],
            start: 0,
            end: 0,
            at_end: false,
            record: None,
        })
    }

    /// The next line's bounds in `block` (without its newline), reading more as needed;
    /// `None` at the end of the file.
    fn next_line(&mut self) -> Result<Option<(usize, usize)>, String> {
        loop {
            if let Some(newline) = memchr::memchr(b'\n', &self.block[self.start..self.end]) {
                let line = (self.start, self.start + newline);
                self.start += newline + 1;
                return Ok(Some(line));
            }
            if self.at_end {
                // The last line may lack its newline.
                if self.start < self.end {
                    let line = (self.start, self.end);
                    self.start = self.end;
                    return Ok(Some(line));
                }
                return Ok(None);
            }
            // Keep the partial line, make room after it (a line longer than the block
            // grows it), and read on.
            self.block.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            if self.end == self.block.len() {
                self.block.resize(self.block.len() * 2, 0);
            }
            match self.reader.read(&mut self.block[self.end..]) {
                Ok(0) => self.at_end = true,
                Ok(read) => self.end += read,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                Err(err) => {
                    // What was read stays counted; the rest of the file is lost.
                    self.at_end = true;
                    self.start = self.end;
                    return Err(format!("{}: {err}", self.name));
                }
            }
        }
    }

    /// Reads up to the next line that parses, counting those that do not; `Err` when the
    /// file cannot be read on.
    fn advance(&mut self, counter: &mut Counter, agents: &mut Agents) -> Result<(), String> {
        self.record = None;
        while let Some((from, to)) = self.next_line()? {
            let line = self.block[from..to].trim_ascii();
            if line.is_empty() {
                continue;
            }
            if self.format == LogFormat::Auto {
                self.format = if line.starts_with(b"{") {
                    LogFormat::Json
                } else {
                    LogFormat::Combined
                };
            }
            match self.parser.parse(line, self.format, agents) {
                Some(record) => {
                    self.record = Some(record);
                    return Ok(());
                }
                None => counter.unparsed(),
            }
        }
        Ok(())
    }
}

/// Counts the plays in the logs at `paths` (each gzip or plain), merged in time order.
/// A file that cannot be opened stops the run; one that ends early (a truncated gzip) is
/// named in `read_errors`, and what it held up to there is counted.
pub fn plays(
    paths: &[PathBuf],
    facts: &Facts,
    options: &PlaysOptions,
) -> Result<PlaysReport, LoadError> {
    if !(options.threshold_s.is_finite() && options.threshold_s >= 0.0) {
        return Err(LoadError::Usage("the threshold must be a duration".into()));
    }
    let mut sources = paths
        .iter()
        .map(|path| Source::open(path, options))
        .collect::<Result<Vec<_>, _>>()?;
    let mut counter = Counter::new(&facts.by_id, options.threshold_s, options.window);
    let mut agents = Agents::new(options.exclude_agents.clone());
    let mut read_errors = Vec::new();
    // The next line of every file, earliest first (ties in the order the files were
    // given, so one file's lines keep their order).
    let mut next = BinaryHeap::new();
    for (index, source) in sources.iter_mut().enumerate() {
        if let Err(err) = source.advance(&mut counter, &mut agents) {
            read_errors.push(err);
        }
        if let Some(record) = &source.record {
            next.push(Reverse((record.at_ms, index)));
        }
    }
    while let Some(Reverse((_, index))) = next.pop() {
        let source = &mut sources[index];
        if let Some(record) = source.record.take() {
            counter.add(&record);
        }
        if let Err(err) = source.advance(&mut counter, &mut agents) {
            read_errors.push(err);
        }
        if let Some(record) = &source.record {
            next.push(Reverse((record.at_ms, index)));
        }
    }
    Ok(report(counter, options, read_errors))
}

fn report(mut counter: Counter, options: &PlaysOptions, read_errors: Vec<String>) -> PlaysReport {
    counter.finish();
    let mut tracks: Vec<TrackPlays> = counter
        .tracks()
        .into_iter()
        .map(|(id, totals)| TrackPlays {
            id: track_hex(&id),
            plays: totals.plays,
            listeners: totals.listeners,
            bytes: totals.bytes,
        })
        .collect();
    tracks.sort_by(|a, b| b.plays.cmp(&a.plays).then_with(|| a.id.cmp(&b.id)));
    let days = counter
        .days()
        .into_iter()
        .map(|(day, id, totals)| DayPlays {
            day: day_text(u64::from(day)),
            track: TrackPlays {
                id: track_hex(&id),
                plays: totals.plays,
                listeners: totals.listeners,
                bytes: totals.bytes,
            },
        })
        .collect();
    let hours = match (
        counter.hours.keys().next(),
        counter.hours.keys().next_back(),
    ) {
        (Some(&first), Some(&last)) => (
            first,
            (first..=last)
                .map(|hour| counter.hours.get(&hour).copied().unwrap_or(0) as f64)
                .collect(),
        ),
        _ => (0, Vec::new()),
    };
    let mut dropped: std::collections::BTreeMap<&'static str, u64> =
        Dropped::ALL.iter().map(|why| (why.name(), 0)).collect();
    for (why, n) in &counter.dropped {
        dropped.insert(why.name(), *n);
    }
    PlaysReport {
        lines: counter.lines,
        track_requests: counter.track_requests,
        dropped,
        listeners: counter.listeners(),
        plays: counter.plays,
        unknown_track: counter.unknown_track,
        window: options.window,
        threshold_s: options.threshold_s,
        tracks,
        read_errors,
        most_open_windows: counter.most_open(),
        days,
        hours,
    }
}

/// `YYYY-MM-DD` of a day since the epoch (Howard Hinnant's `civil_from_days`).
fn day_text(days: u64) -> String {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_written_as_dates() {
        assert_eq!(day_text(0), "1970-01-01");
        assert_eq!(day_text(1_796_114_123 / 86_400), "2026-12-01");
        assert_eq!(day_text(11_016), "2000-02-29");
    }
}
