//! The rules: which requests may count, whose they are, and when a listener's bytes of a
//! track within one window add up to a play.
//!
//! A window is kept only while a request could still fall in it: windows are expired in
//! the order they close, so memory follows the listener × track pairs of the last day, not
//! the lines read.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};

use super::parse::{Asked, Method, Record, TrackId};

const DAY_S: u32 = 86_400;
const HOUR_MS: u64 = 3_600_000;

/// A window stays this long after it closed, for lines logged a little out of order (a
/// server logs a request when it ends; several servers' logs interleave).
const LATE_LINES_S: u32 = 3_600;

/// How often, in log time, closed windows are swept out: each sweep reads the whole
/// table: hourly keeps the table near the windows of the last day (a longer interval
/// lets it double) at a few per cent of the run.
const SWEEP_S: u32 = 3_600;

/// What the catalogue knows of a track.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct TrackFacts {
    /// Bytes.
    pub size: Option<u64>,
    /// Bits per second.
    pub bitrate: Option<u64>,
    /// Seconds.
    pub duration: Option<f64>,
    /// Where the first audio frame starts.
    pub audio_offset: Option<u64>,
}

impl TrackFacts {
    /// The bytes a listener must have been sent for a play: the header and `threshold_s`
    /// of audio, or the whole file when the track is shorter or its bitrate unknown.
    /// `None` when even the size is unknown: such a track cannot count.
    pub(crate) fn needed(&self, threshold_s: f64) -> Option<u64> {
        let size = self.size.filter(|&s| s > 0);
        let offset = self.audio_offset.unwrap_or(0);
        let bitrate = self.bitrate.filter(|&b| b > 0);
        let duration = self.duration.or_else(|| {
            // Without a duration, the audio's length at its bitrate stands for it.
            Some(size?.saturating_sub(offset) as f64 * 8.0 / bitrate? as f64)
        });
        match (bitrate, duration) {
            (Some(bitrate), Some(duration)) if duration >= threshold_s => {
                let audio = (bitrate as f64 * threshold_s / 8.0).ceil() as u64;
                let needed = offset.saturating_add(audio);
                Some(size.map_or(needed, |size| needed.min(size)))
            }
            _ => size,
        }
    }
}

/// How a listener's window for a track is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Window {
    /// 24 hours from the listener's first counted request for the track.
    Rolling,
    /// The UTC day.
    Calendar,
}

/// Why a line did not count towards a play. The order is the order the rules are applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Dropped {
    NotTrack,
    Head,
    NotModified,
    Error,
    Probe,
    Bot,
    Unparsed,
}

impl Dropped {
    pub(crate) const ALL: [Dropped; 7] = [
        Dropped::Head,
        Dropped::NotModified,
        Dropped::Probe,
        Dropped::Bot,
        Dropped::Error,
        Dropped::NotTrack,
        Dropped::Unparsed,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Dropped::NotTrack => "not_track",
            Dropped::Head => "head",
            Dropped::NotModified => "not_modified",
            Dropped::Error => "error",
            Dropped::Probe => "probe",
            Dropped::Bot => "bot",
            Dropped::Unparsed => "unparsed",
        }
    }
}

/// Whether a line may count, and if not why.
pub(crate) fn judge(record: &Record) -> Result<TrackId, Dropped> {
    let track = record.track.ok_or(Dropped::NotTrack)?;
    match (record.method, record.status) {
        (Method::Head, _) => Err(Dropped::Head),
        (_, 304) => Err(Dropped::NotModified),
        (Method::Get, 200 | 206) => {
            let probe = match record.range.and_then(Asked::len) {
                Some(asked) => asked <= 2,
                None => record.status == 206 && record.bytes <= 2,
            };
            if probe {
                Err(Dropped::Probe)
            } else if record.bot {
                Err(Dropped::Bot)
            } else {
                Ok(track)
            }
        }
        _ => Err(Dropped::Error),
    }
}

/// One listener's bytes of one track within one window.
#[derive(Debug, Default)]
struct Open {
    /// The first span of bytes sent, `[from, to)`: players fetch a track front to back, so
    /// contiguous ranges merge into this one and most windows need nothing more.
    first: (u64, u64),
    /// The spans disjoint from it (a seek ahead), merged and sorted; boxed, so a window
    /// without any costs 8 bytes for them (a `Vec` costs 24 in every window, and there
    /// are millions).
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<(u64, u64)>>>,
    /// Bytes sent whose place in the file is unknown (logs without ranges).
    unplaced: u64,
    /// When the window closes, seconds since the epoch.
    closes_s: u32,
    /// The day this pair last played (in this window or one before it), or [`NEVER`].
    last_play_day: u32,
    /// Whether it already counted a play (then its bytes no longer matter).
    played: bool,
}

/// No play yet.
const NEVER: u32 = u32::MAX;

impl Open {
    fn add(&mut self, from: u64, to: u64) {
        if from >= to {
            return;
        }
        let (a, b) = self.first;
        if self.more.is_none() {
            if a >= b {
                self.first = (from, to);
                return;
            }
            if from <= b && a <= to {
                self.first = (a.min(from), b.max(to));
                return;
            }
        }
        let (mut from, mut to) = (from, to);
        let mut spans: Vec<(u64, u64)> = self.more.take().map_or_else(Vec::new, |more| *more);
        if self.first.0 < self.first.1 {
            spans.push(self.first);
        }
        // Keep the spans disjoint: fold in every span that touches the new one.
        spans.retain(|&(a, b)| {
            let touches = a <= to && from <= b;
            if touches {
                from = from.min(a);
                to = to.max(b);
            }
            !touches
        });
        let at = spans.partition_point(|&(a, _)| a < from);
        spans.insert(at, (from, to));
        spans.sort_unstable();
        self.first = spans.remove(0);
        if !spans.is_empty() {
            self.more = Some(Box::new(spans));
        }
    }

    fn delivered(&self) -> u64 {
        let more = self
            .more
            .as_deref()
            .map_or(0, |more| more.iter().map(|(a, b)| b - a).sum::<u64>());
        self.first.1 - self.first.0 + more + self.unplaced
    }
}

/// A track's totals.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) plays: u64,
    pub(crate) listeners: u64,
    pub(crate) bytes: u64,
}

/// A listener × track pair, as a 64-bit hash of the listener (its address and agent) and
/// the track: two of a day's few million pairs share one with a chance of about 10^-7,
/// and an 8-byte key keeps the table of open windows small enough to stay fast.
type Pair = u64;

/// The counts so far.
pub(crate) struct Counter {
    /// Each known track's index, the bytes a play of it needs, and its id.
    index: HashMap<TrackId, u32>,
    needed: Vec<u64>,
    ids: Vec<TrackId>,
    window: Window,
    pair_hasher: foldhash::quality::FixedState,
    open: HashMap<Pair, Open>,
    /// When the closed windows are next swept out.
    next_sweep_s: u32,
    pub(crate) lines: u64,
    pub(crate) track_requests: u64,
    pub(crate) dropped: BTreeMap<Dropped, u64>,
    pub(crate) unknown_track: u64,
    pub(crate) plays: u64,
    /// Distinct listeners with a play (8 bytes each), and every pair whose windows were
    /// swept out with the last day it played (16): the distinct-listener figures, over
    /// the whole run. A pair with a window open keeps its last day there.
    listeners: HashSet<u64>,
    last_played: HashMap<Pair, u32>,
    /// Per track, over the run: distinct listeners with a play.
    track_listeners: Vec<u64>,
    /// Per UTC day (days since the epoch) and track.
    days: HashMap<(u32, u32), Totals>,
    /// The latest day's totals by track index, kept apart from `days` until a later day
    /// starts: almost every line is of that day, and a vector costs no hashing.
    today: (u32, Vec<Totals>),
    /// Plays per hour since the epoch.
    pub(crate) hours: BTreeMap<u64, u64>,
    /// The latest time seen, seconds.
    now_s: u32,
    /// Most windows open at once, as of the last sweep.
    most_open: usize,
}

impl Counter {
    pub(crate) fn new(
        facts: &HashMap<TrackId, TrackFacts>,
        threshold_s: f64,
        window: Window,
    ) -> Counter {
        let mut known: Vec<(TrackId, u64)> = facts
            .iter()
            .filter_map(|(id, facts)| Some((*id, facts.needed(threshold_s)?)))
            .collect();
        known.sort_unstable();
        let known_len = known.len();
        Counter {
            index: known
                .iter()
                .enumerate()
                .map(|(n, (id, _))| (*id, n as u32))
                .collect(),
            needed: known.iter().map(|(_, needed)| *needed).collect(),
            track_listeners: vec![0; known.len()],
            ids: known.into_iter().map(|(id, _)| id).collect(),
            window,
            pair_hasher: foldhash::quality::FixedState::with_seed(0x706c_6179),
            open: HashMap::new(),
            next_sweep_s: 0,
            lines: 0,
            track_requests: 0,
            dropped: BTreeMap::new(),
            unknown_track: 0,
            plays: 0,
            listeners: HashSet::new(),
            last_played: HashMap::new(),
            days: HashMap::new(),
            today: (0, vec![Totals::default(); known_len]),
            hours: BTreeMap::new(),
            now_s: 0,
            most_open: 0,
        }
    }

    pub(crate) fn unparsed(&mut self) {
        self.lines += 1;
        *self.dropped.entry(Dropped::Unparsed).or_default() += 1;
    }

    /// Counts one line.
    pub(crate) fn add(&mut self, record: &Record) {
        self.lines += 1;
        if record.track.is_some() {
            self.track_requests += 1;
        }
        let track = match judge(record) {
            Ok(track) => track,
            Err(why) => {
                *self.dropped.entry(why).or_default() += 1;
                return;
            }
        };
        let at_s = u32::try_from(record.at_ms / 1000).unwrap_or(u32::MAX);
        self.expire(at_s);
        let Some(&track) = self.index.get(&track) else {
            self.unknown_track += 1;
            return;
        };
        let needed = self.needed[track as usize];
        let day = at_s / DAY_S;
        self.day(day, track).bytes += record.bytes;
        let listener = self.pair_hasher.hash_one(record.listener);
        let pair = self.pair_hasher.hash_one((listener, track));
        let closes_s = match self.window {
            Window::Rolling => at_s.saturating_add(DAY_S),
            Window::Calendar => (day + 1).saturating_mul(DAY_S),
        };
        let open = self.open.entry(pair).or_insert_with(|| Open {
            last_play_day: NEVER,
            ..Open::default()
        });
        if open.closes_s <= at_s {
            *open = Open {
                closes_s,
                last_play_day: open.last_play_day,
                ..Open::default()
            };
        }
        if open.played {
            return;
        }
        match (record.status, record.range) {
            (200, Some(_)) => open.add(0, record.bytes),
            (206, Some(Asked::From { start, .. })) => {
                open.add(start, start.saturating_add(record.bytes));
            }
            _ => open.unplaced += record.bytes,
        }
        if open.delivered() < needed {
            return;
        }
        open.played = true;
        open.more = None;
        let last_day = match open.last_play_day {
            NEVER => self.last_played.get(&pair).copied(),
            day => Some(day),
        };
        open.last_play_day = day;
        self.play(listener, track, day, record.at_ms, last_day);
    }

    /// A play of `track` by `listener` on `day`; the pair last played on `last_day`.
    fn play(&mut self, listener: u64, track: u32, day: u32, at_ms: u64, last_day: Option<u32>) {
        self.plays += 1;
        *self.hours.entry(at_ms / HOUR_MS).or_default() += 1;
        self.listeners.insert(listener);
        if last_day.is_none() {
            self.track_listeners[track as usize] += 1;
        }
        let daily = self.day(day, track);
        daily.plays += 1;
        // Lines come in time order (within the late-line allowance), so a pair's plays
        // come day after day: a day other than its last is a new listener for that day.
        if last_day != Some(day) {
            daily.listeners += 1;
        }
    }

    /// The totals of `track` on `day`.
    fn day(&mut self, day: u32, track: u32) -> &mut Totals {
        if day > self.today.0 {
            self.close_today();
            self.today.0 = day;
        }
        if day == self.today.0 {
            &mut self.today.1[track as usize]
        } else {
            // A line logged late, from the day before.
            self.days.entry((day, track)).or_default()
        }
    }

    /// Moves the latest day's totals into `days`.
    fn close_today(&mut self) {
        let day = self.today.0;
        for (track, totals) in self.today.1.iter_mut().enumerate() {
            if totals.bytes > 0 || totals.plays > 0 {
                let kept = self.days.entry((day, track as u32)).or_default();
                kept.bytes += totals.bytes;
                kept.plays += totals.plays;
                kept.listeners += totals.listeners;
                *totals = Totals::default();
            }
        }
    }

    /// Forgets the windows no request can fall in any more, once an hour of log time: a
    /// sweep of the table then costs less than keeping every window in a queue.
    fn expire(&mut self, at_s: u32) {
        self.now_s = self.now_s.max(at_s);
        if self.now_s < self.next_sweep_s {
            return;
        }
        // The table only shrinks here: its largest size is the one just before a sweep.
        self.most_open = self.most_open.max(self.open.len());
        let now_s = self.now_s;
        let last_played = &mut self.last_played;
        self.open.retain(|pair, open| {
            let open_still = open.closes_s.saturating_add(LATE_LINES_S) > now_s;
            if !open_still && open.last_play_day != NEVER {
                last_played.insert(*pair, open.last_play_day);
            }
            open_still
        });
        self.next_sweep_s = now_s.saturating_add(SWEEP_S);
    }

    /// Most windows open at once.
    pub(crate) fn most_open(&self) -> usize {
        self.most_open.max(self.open.len())
    }

    pub(crate) fn listeners(&self) -> u64 {
        self.listeners.len() as u64
    }

    /// Ends the run: the latest day's totals join the others.
    pub(crate) fn finish(&mut self) {
        self.close_today();
    }

    /// Every track with a request that could count: its id and totals (after
    /// [`Counter::finish`]).
    pub(crate) fn tracks(&self) -> Vec<(TrackId, Totals)> {
        let mut totals: HashMap<u32, Totals> = HashMap::new();
        for (&(_, track), day) in &self.days {
            let total = totals.entry(track).or_default();
            total.plays += day.plays;
            total.bytes += day.bytes;
        }
        totals
            .into_iter()
            .map(|(track, mut total)| {
                total.listeners = self.track_listeners[track as usize];
                (self.ids[track as usize], total)
            })
            .collect()
    }

    /// Per UTC day and track, in day order, with a play.
    pub(crate) fn days(&self) -> Vec<(u32, TrackId, Totals)> {
        let mut days: Vec<(u32, TrackId, Totals)> = self
            .days
            .iter()
            .filter(|(_, totals)| totals.plays > 0)
            .map(|(&(day, track), totals)| (day, self.ids[track as usize], *totals))
            .collect();
        days.sort_unstable_by_key(|&(day, id, _)| (day, id));
        days
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plays::parse::Listener;
    use proptest::prelude::*;

    const TRACK: TrackId = [7; 12];
    const FACTS: TrackFacts = TrackFacts {
        size: Some(2_000_000),
        bitrate: Some(128_000),
        duration: Some(125.0),
        audio_offset: Some(1_000),
    };

    fn request(at_ms: u64, start: u64, bytes: u64) -> Record {
        Record {
            at_ms,
            listener: Listener {
                address: 1,
                agent: 2,
            },
            bot: false,
            method: Method::Get,
            track: Some(TRACK),
            status: 206,
            bytes,
            range: Some(Asked::From { start, end: None }),
        }
    }

    fn plays(requests: &[Record]) -> u64 {
        let facts = HashMap::from_iter([(TRACK, FACTS)]);
        let mut counter = Counter::new(&facts, 30.0, Window::Rolling);
        for request in requests {
            counter.add(request);
        }
        counter.plays
    }

    #[test]
    fn a_play_needs_the_header_and_the_threshold_of_audio() {
        // 1,000 bytes of header and 30 s at 128 kbit/s.
        assert_eq!(FACTS.needed(30.0), Some(481_000));
        assert_eq!(plays(&[request(0, 0, 480_999)]), 0);
        assert_eq!(plays(&[request(0, 0, 481_000)]), 1);
        let short = TrackFacts {
            duration: Some(20.0),
            ..FACTS
        };
        assert_eq!(short.needed(30.0), Some(2_000_000));
        let no_rate = TrackFacts {
            bitrate: None,
            ..FACTS
        };
        assert_eq!(no_rate.needed(30.0), Some(2_000_000));
        assert_eq!(TrackFacts::default().needed(30.0), None);
    }

    #[test]
    fn overlapping_ranges_count_once_and_a_window_reopens_after_a_day() {
        // The same first 300,000 bytes twice are not 600,000.
        assert_eq!(
            plays(&[request(0, 0, 300_000), request(1_000, 0, 300_000)]),
            0
        );
        // A day later the second half starts a new window.
        assert_eq!(
            plays(&[
                request(0, 0, 300_000),
                request(u64::from(DAY_S) * 1000, 300_000, 300_000)
            ]),
            0
        );
        assert_eq!(
            plays(&[
                request(0, 0, 300_000),
                request(u64::from(DAY_S) * 1000 - 1000, 300_000, 300_000)
            ]),
            1
        );
        // At most one play per window, however much more is fetched.
        assert_eq!(
            plays(&[request(0, 0, 600_000), request(5_000, 0, 600_000)]),
            1
        );
    }

    proptest! {
        /// Splitting a listener's bytes into ranges, and sending those in any order within
        /// the window, never changes whether they make a play.
        #[test]
        fn splitting_or_reordering_ranges_never_changes_the_count(
            covered in 0u64..1_200_000,
            cuts in proptest::collection::vec(0u64..1_200_000, 0..6),
            order in proptest::collection::vec(any::<u32>(), 7),
            overlap in 0u64..50_000,
        ) {
            let whole = plays(&[request(0, 0, covered)]);
            let mut edges: Vec<u64> = cuts.into_iter().filter(|&c| c < covered).collect();
            edges.push(0);
            edges.push(covered);
            edges.sort_unstable();
            edges.dedup();
            let mut pieces: Vec<(u64, u64)> = edges
                .windows(2)
                .map(|w| (w[0].saturating_sub(overlap), w[1]))
                .collect();
            // Any order: sort by the drawn keys.
            let mut keyed: Vec<(u32, (u64, u64))> =
                order.iter().copied().zip(pieces.drain(..)).collect();
            keyed.sort_unstable();
            let requests: Vec<Record> = keyed
                .iter()
                .enumerate()
                .map(|(i, (_, (from, to)))| request(i as u64 * 60_000, *from, to - from))
                .collect();
            prop_assert_eq!(plays(&requests), whole);
        }
    }
}
