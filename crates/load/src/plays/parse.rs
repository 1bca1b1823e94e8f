//! One access-log line read for counting, without an allocation: the three formats the
//! stack writes (nginx's and varnishncsa's combined lines, musicd's own combined lines,
//! whose extra fields follow the agent, and musicd's JSON lines), reduced to what the
//! rules look at.
//!
//! Combined lines are cut by hand, byte by byte: `plays` must read a million of them a
//! second on one core, and the general-purpose reader `replay` uses allocates a `String`
//! per field. The timestamp is parsed once per distinct second, which is once per several
//! hundred lines on a busy server.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::net::IpAddr;

use foldhash::HashMap;
use regex::Regex;

use crate::traffic::log::{clf_time, iso_time_ms};

/// A track's id: the 12 bytes of its ObjectId.
pub(crate) type TrackId = [u8; 12];

/// Which format a file's lines are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Decided per file from its first line: `{` is JSON, anything else combined.
    Auto,
    /// nginx, varnishncsa and musicd combined lines.
    Combined,
    /// musicd's JSON lines.
    Json,
}

/// The request method, as far as the rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Get,
    Head,
    Other,
}

/// The `Range` a request asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// None was sent.
    Whole,
    /// `bytes=S-E` (`end` inclusive) or `bytes=S-`.
    From { start: u64, end: Option<u64> },
    /// `bytes=-N`: the last N bytes.
    Last(u64),
    /// Several ranges, or one that does not parse: where its bytes lie is not known.
    Unplaced,
}

impl Asked {
    /// How many bytes it asks for, when the header alone says.
    pub(crate) fn len(self) -> Option<u64> {
        match self {
            Asked::From {
                start,
                end: Some(end),
            } => Some(end.saturating_sub(start) + 1),
            Asked::Last(n) => Some(n),
            _ => None,
        }
    }
}

/// What one line says, reduced to what is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    /// When, in milliseconds since the epoch.
    pub(crate) at_ms: u64,
    /// The listener: the client address (an IPv6 one cut to its /64) and a hash of the
    /// user agent.
    pub(crate) listener: Listener,
    /// Whether the user agent is a crawler or monitor.
    pub(crate) bot: bool,
    pub(crate) method: Method,
    /// The track asked for, or `None` for any other path.
    pub(crate) track: Option<TrackId>,
    pub(crate) status: u16,
    /// Body bytes sent.
    pub(crate) bytes: u64,
    /// The range asked for, when the log records it (musicd's JSON lines); `None` in a
    /// combined log.
    pub(crate) range: Option<Asked>,
}

/// Who listens: one address (a /64 for IPv6, as mobile clients change the rest) and one
/// user agent behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Listener {
    pub(crate) address: u128,
    pub(crate) agent: u64,
}

/// Which user agents are crawlers or monitors, remembered per agent: a log holds a few
/// thousand distinct agents and millions of lines.
pub(crate) struct Agents {
    extra: Vec<Regex>,
    verdicts: HashMap<u64, bool>,
    hasher: foldhash::quality::FixedState,
}

/// Substrings (lowercase) of the user agents of crawlers, uptime monitors, link
/// previewers and HTTP libraries: none of them is a person listening. `docs/musicctl.md`
/// lists them.
pub const BOT_AGENTS: &[&str] = &[
    "bot",
    "crawler",
    "spider",
    "slurp",
    "facebookexternalhit",
    "embedly",
    "curl/",
    "wget/",
    "python-requests",
    "python-urllib",
    "go-http-client",
    "java/",
    "okhttp",
    "libwww-perl",
    "headlesschrome",
    "phantomjs",
    "uptimerobot",
    "pingdom",
    "statuscake",
    "site24x7",
    "datadog",
    "newrelic",
    "nagios",
    "zabbix",
    "monitis",
    "blackbox-exporter",
    "kube-probe",
    "elb-healthchecker",
    "googlehc",
    "varnish-probe",
];

/// How many agents' verdicts are remembered before the memo starts over: a log of
/// random agents must not grow it without bound.
const AGENT_MEMO: usize = 1 << 16;

impl Agents {
    pub(crate) fn new(extra: Vec<Regex>) -> Agents {
        Agents {
            extra,
            verdicts: HashMap::default(),
            hasher: foldhash::quality::FixedState::with_seed(0x6d75_7369_6364),
        }
    }

    /// The agent's hash and whether it is a bot.
    pub(crate) fn classify(&mut self, agent: &[u8]) -> (u64, bool) {
        let hash = self.hasher.hash_one(agent);
        if let Some(&bot) = self.verdicts.get(&hash) {
            return (hash, bot);
        }
        let text = String::from_utf8_lossy(agent);
        let lower = text.to_ascii_lowercase();
        let bot = BOT_AGENTS.iter().any(|token| lower.contains(token))
            || self.extra.iter().any(|re| re.is_match(&text));
        if self.verdicts.len() >= AGENT_MEMO {
            self.verdicts.clear();
        }
        self.verdicts.insert(hash, bot);
        (hash, bot)
    }

    /// The listener's address as a key: an IPv6 address cut to its /64; anything else
    /// (an IPv4 address, as logged: one text per address) hashed as it is written, which
    /// spares parsing the address of every line.
    fn address(&self, client: &[u8]) -> u128 {
        if memchr::memchr(b':', client).is_some()
            && let Some(IpAddr::V6(v6)) = std::str::from_utf8(client)
                .ok()
                .and_then(|c| c.parse().ok())
        {
            return u128::from(v6) & !u128::from(u64::MAX);
        }
        u128::from(self.hasher.hash_one(client)) | 1 << 127
    }
}

/// Reads lines of one file: the route prefixes, and the last timestamp seen.
pub(crate) struct LineParser {
    prefixes: Vec<Vec<u8>>,
    last_time: Vec<u8>,
    last_ms: u64,
}

impl LineParser {
    pub(crate) fn new(prefixes: &[String]) -> LineParser {
        LineParser {
            prefixes: prefixes
                .iter()
                .map(|p| p.trim_end_matches('/').as_bytes().to_vec())
                .collect(),
            last_time: Vec::new(),
            last_ms: 0,
        }
    }

    /// One line in `format` (`Auto` is decided by the caller).
    pub(crate) fn parse(
        &mut self,
        line: &[u8],
        format: LogFormat,
        agents: &mut Agents,
    ) -> Option<Record> {
        match format {
            LogFormat::Json => self.json(line, agents),
            _ => self.combined(line, agents),
        }
    }

    /// `client - user [10/Oct/2000:13:55:36 -0700] "GET /path HTTP/1.1" 200 2326 "ref" "agent" …`
    fn combined(&mut self, line: &[u8], agents: &mut Agents) -> Option<Record> {
        let space = memchr::memchr(b' ', line)?;
        let client = &line[..space];
        let open = space + memchr::memchr(b'[', &line[space..])?;
        let close = open + memchr::memchr(b']', &line[open..])?;
        let stamp = &line[open + 1..close];
        if stamp != self.last_time.as_slice() {
            self.last_ms = clf_time(std::str::from_utf8(stamp).ok()?)? * 1000;
            self.last_time.clear();
            self.last_time.extend_from_slice(stamp);
        }
        let at_ms = self.last_ms;
        let rest = line.get(close + 1..)?.strip_prefix(b" \"")?;
        let end = quoted_end(rest)?;
        let request = &rest[..end];
        let mut rest = &rest[end + 1..];
        let (method, target) = match request {
            b"-" => (Method::Other, &b""[..]),
            _ => {
                let mut words = request.split(|&b| b == b' ');
                let method = match words.next()? {
                    b"GET" => Method::Get,
                    b"HEAD" => Method::Head,
                    _ => Method::Other,
                };
                (method, words.next()?)
            }
        };
        rest = rest.strip_prefix(b" ")?;
        let (status, after) = number(rest)?;
        rest = after.strip_prefix(b" ")?;
        // `-` is nginx's and varnishncsa's zero.
        let bytes = match rest.strip_prefix(b"-") {
            Some(after) => {
                rest = after;
                0
            }
            None => {
                let (bytes, after) = number(rest)?;
                rest = after;
                bytes
            }
        };
        // The referer and the agent; a common-format line (without them) is one agent.
        let agent = quoted_field(rest)
            .and_then(|(_, after)| quoted_field(after))
            .map_or(&b""[..], |(agent, _)| agent);
        let (agent, bot) = agents.classify(agent);
        Some(Record {
            at_ms,
            listener: Listener {
                address: agents.address(client),
                agent,
            },
            bot,
            method,
            track: self.track(target),
            status: u16::try_from(status).ok()?,
            bytes,
            range: None,
        })
    }

    /// musicd's JSON line: `{"time", "client", "method", "path", "status", "bytes",
    /// "range", "user_agent", …}`.
    fn json(&mut self, line: &[u8], agents: &mut Agents) -> Option<Record> {
        let line: JsonLine = serde_json::from_slice(line).ok()?;
        let (agent, bot) = agents.classify(line.user_agent.as_bytes());
        let method = match line.method.as_ref() {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            _ => Method::Other,
        };
        Some(Record {
            at_ms: iso_time_ms(&line.time)?,
            listener: Listener {
                address: agents.address(line.client.as_bytes()),
                agent,
            },
            bot,
            method,
            track: self.track(line.path.as_bytes()),
            status: line.status,
            bytes: line.bytes,
            range: Some(line.range.as_deref().map_or(Asked::Whole, asked)),
        })
    }

    /// The track a request target names: `{prefix}/{24 hex digits}` then `/name` or the
    /// end.
    fn track(&self, target: &[u8]) -> Option<TrackId> {
        let path = match memchr::memchr(b'?', target) {
            Some(query) => &target[..query],
            None => target,
        };
        // An absolute-form target (`http://host/path`) as a proxy may log it.
        let path = match path.first() {
            Some(b'/') => path,
            _ => {
                let host = &path[memchr::memmem::find(path, b"://")? + 3..];
                &host[memchr::memchr(b'/', host)?..]
            }
        };
        self.prefixes.iter().find_map(|prefix| {
            let rest = path.strip_prefix(prefix.as_slice())?.strip_prefix(b"/")?;
            let hex = rest.get(..24)?;
            if !matches!(rest.get(24), None | Some(b'/')) {
                return None;
            }
            track_id(hex)
        })
    }
}

#[derive(serde::Deserialize)]
struct JsonLine<'a> {
    #[serde(borrow)]
    time: Cow<'a, str>,
    #[serde(borrow, default)]
    client: Cow<'a, str>,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    path: Cow<'a, str>,
    status: u16,
    bytes: u64,
    #[serde(borrow, default)]
    range: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    user_agent: Cow<'a, str>,
}

/// 24 hex digits as the 12 bytes of an ObjectId.
pub(crate) fn track_id(hex: &[u8]) -> Option<TrackId> {
    if hex.len() != 24 {
        return None;
    }
    let digit = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let mut id = [0u8; 12];
    for (byte, pair) in id.iter_mut().zip(hex.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(id)
}

/// The 24 hex digits of a track id.
pub(crate) fn track_hex(id: &TrackId) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A `Range` header's value.
pub(crate) fn asked(value: &str) -> Asked {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Asked::Unplaced;
    };
    if spec.contains(',') {
        return Asked::Unplaced;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Asked::Unplaced;
    };
    match (first.trim().parse::<u64>(), last.trim()) {
        (Ok(start), "") => Asked::From { start, end: None },
        (Ok(start), last) => match last.parse::<u64>() {
            Ok(end) if end >= start => Asked::From {
                start,
                end: Some(end),
            },
            _ => Asked::Unplaced,
        },
        (Err(_), last) if first.trim().is_empty() => {
            last.parse().map_or(Asked::Unplaced, Asked::Last)
        }
        _ => Asked::Unplaced,
    }
}

/// Where the quoted field that `text` starts inside ends (the index of its closing
/// quote). nginx writes a quote inside as `\x22`, varnishncsa as `\"`.
fn quoted_end(text: &[u8]) -> Option<usize> {
    let mut from = 0;
    loop {
        let at = from + memchr::memchr(b'"', &text[from..])?;
        if at == 0 || text[at - 1] != b'\\' {
            return Some(at);
        }
        from = at + 1;
    }
}

/// ` "value"` at the start of `text`: the value and what follows its closing quote.
fn quoted_field(text: &[u8]) -> Option<(&[u8], &[u8])> {
    let inside = text.strip_prefix(b" \"")?;
    let end = quoted_end(inside)?;
    Some((&inside[..end], &inside[end + 1..]))
}

/// The decimal number at the start of `text`, and what follows it.
fn number(text: &[u8]) -> Option<(u64, &[u8])> {
    let digits = text.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let value = text[..digits]
        .iter()
        .fold(0u64, |acc, b| acc * 10 + u64::from(b - b'0'));
    Some((value, &text[digits..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[u8], format: LogFormat) -> Option<Record> {
        LineParser::new(&["/musicdb".to_string()]).parse(line, format, &mut Agents::new(vec![]))
    }

    #[test]
    fn the_combined_lines_of_nginx_varnish_and_musicd_are_read() {
        let nginx = br#"2001:db8::1:2:3:4 - - [01/Dec/2026:08:35:23 +0000] "GET /musicdb/6b0dc37d3ba0d873deac9381/a%20b.mp3?sig=x HTTP/1.1" 206 4096 "-" "VLC/3.0""#;
        let line = parse(nginx, LogFormat::Combined).expect("nginx line");
        assert_eq!(line.at_ms, 1_796_114_123_000);
        assert_eq!(line.method, Method::Get);
        assert_eq!(
            line.track.map(|t| track_hex(&t)).as_deref(),
            Some("6b0dc37d3ba0d873deac9381")
        );
        assert_eq!((line.status, line.bytes, line.range), (206, 4096, None));
        // The /64 is the listener: the rest of the address does not matter.
        let moved = br#"2001:db8::9:9:9:9 - - [01/Dec/2026:08:35:23 +0000] "GET /musicdb/6b0dc37d3ba0d873deac9381/x.mp3 HTTP/1.1" 206 4096 "-" "VLC/3.0""#;
        let moved = parse(moved, LogFormat::Combined).expect("nginx line");
        assert_eq!(moved.listener, line.listener);
        let varnish = br#"10.0.0.1 - - [01/Dec/2026:09:35:23 +0100] "HEAD /musicdb/6b0dc37d3ba0d873deac9381 HTTP/1.1" 200 - "-" "say \"hi\" bot""#;
        let line = parse(varnish, LogFormat::Combined).expect("varnishncsa line");
        assert_eq!(
            (line.at_ms, line.bytes, line.method),
            (1_796_114_123_000, 0, Method::Head)
        );
        assert!(line.bot && line.track.is_some());
        let musicd = br#"127.0.0.1 - - [01/Dec/2026:08:35:23 +0000] "GET /other/6b0dc37d3ba0d873deac9381/a HTTP/1.1" 200 10 "-" "-" 4f-1 redis 0.001 0.000 1"#;
        assert_eq!(
            parse(musicd, LogFormat::Combined).expect("musicd").track,
            None
        );
        let refusal = br#"1.1.1.1 - - [01/Dec/2026:08:35:23 +0000] "-" 400 0 "-" "-""#;
        assert_eq!(
            parse(refusal, LogFormat::Combined).expect("refusal").track,
            None
        );
        assert_eq!(parse(b"garbage", LogFormat::Combined), None);
        assert_eq!(parse(&nginx[..60], LogFormat::Combined), None);
    }

    #[test]
    fn musicd_json_lines_keep_their_range() {
        let json = br#"{"time":"2026-12-01T08:35:23.250Z","client":"1.1.1.1","method":"GET","path":"/musicdb/6b0dc37d3ba0d873deac9381/a.mp3","query":"sig=1","protocol":"HTTP/1.1","status":206,"bytes":100,"latency_ms":1.0,"ttfb_ms":0.5,"cache":"redis","range":"bytes=100-199","user_agent":"Mozilla/5.0","referer":"","request_id":"r","complete":true}"#;
        let line = parse(json, LogFormat::Json).expect("json line");
        assert_eq!(line.at_ms, 1_796_114_123_250);
        assert_eq!(
            line.range,
            Some(Asked::From {
                start: 100,
                end: Some(199)
            })
        );
        assert!(!line.bot);
    }

    #[test]
    fn ranges_are_read_as_players_send_them() {
        assert_eq!(asked("bytes=0-1").len(), Some(2));
        assert_eq!(asked("bytes=-2"), Asked::Last(2));
        assert_eq!(
            asked("bytes=5-"),
            Asked::From {
                start: 5,
                end: None
            }
        );
        assert_eq!(asked("bytes=0-1,5-9"), Asked::Unplaced);
        assert_eq!(asked("bytes=9-5"), Asked::Unplaced);
        assert_eq!(asked("items=0-1"), Asked::Unplaced);
    }
}
