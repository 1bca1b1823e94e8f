//! Access logs read back as traffic: the lines of nginx's and varnishncsa's combined
//! format (musicd's own combined lines too, whose extra fields follow the agent), and
//! musicd's JSON lines, gzip or plain.
//!
//! Each line gives when the request came, what it asked for, what it was answered and how
//! many body bytes left; a musicd JSON line also gives its `Range`. Lines that are not a
//! request (a refusal logged as `"-"`) or cannot be read are counted, not fatal: a log
//! from production always has a few.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use crate::LoadError;

/// One request from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Logged {
    /// When it came, in milliseconds since the epoch.
    pub(crate) at_ms: u64,
    /// `GET` or `HEAD` (other methods are kept, and replayed as they were).
    pub(crate) method: String,
    /// The request target as logged (path and query).
    pub(crate) target: String,
    /// The status it was answered.
    pub(crate) status: u16,
    /// Body bytes sent.
    pub(crate) bytes: u64,
    /// Its `Range`, when the log says.
    pub(crate) range: Option<String>,
}

/// What a log held.
#[derive(Debug, Default)]
pub(crate) struct ReadLog {
    /// The requests, in log order.
    pub(crate) requests: Vec<Logged>,
    /// Lines that were not a request or could not be read.
    pub(crate) skipped: u64,
}

/// Reads every line of the logs at `paths` (each gzip or plain), in order.
pub(crate) fn read_logs(paths: &[impl AsRef<Path>]) -> Result<ReadLog, LoadError> {
    let mut log = ReadLog::default();
    for path in paths {
        let path = path.as_ref();
        let io = |source| LoadError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut file = BufReader::new(std::fs::File::open(path).map_err(io)?);
        let gzip = file.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let reader: Box<dyn Read> = if gzip {
            Box::new(flate2::bufread::MultiGzDecoder::new(file))
        } else {
            Box::new(file)
        };
        for line in BufReader::new(reader).split(b'\n') {
            let line = line.map_err(io)?;
            match parse_line(&line) {
                Some(request) => log.requests.push(request),
                None if line.iter().all(u8::is_ascii_whitespace) => {}
                None => log.skipped += 1,
            }
        }
    }
    Ok(log)
}

/// One line in any of the formats.
pub(crate) fn parse_line(line: &[u8]) -> Option<Logged> {
    let text = std::str::from_utf8(line).ok()?.trim();
    if text.starts_with('{') {
        parse_json(text)
    } else {
        parse_combined(text)
    }
}

/// `client - user [10/Oct/2000:13:55:36 -0700] "GET /path HTTP/1.1" 200 2326 "ref" "agent" …`
fn parse_combined(text: &str) -> Option<Logged> {
    let open = text.find('[')?;
    let close = open + text[open..].find(']')?;
    let at_ms = clf_time(&text[open + 1..close])? * 1000;
    let rest = text[close + 1..].trim_start().strip_prefix('"')?;
    let quote = rest.find('"')?;
    let mut request = rest[..quote].split(' ');
    let (method, target) = (request.next()?, request.next()?);
    if !target.starts_with('/') && !target.contains("://") {
        return None;
    }
    let mut numbers = rest[quote + 1..].split_whitespace();
    let status = numbers.next()?.parse().ok()?;
    // `-` is nginx's and varnishncsa's zero.
    let bytes = numbers.next()?.parse().unwrap_or(0);
    Some(Logged {
        at_ms,
        method: method.to_string(),
        target: unescape(target),
        status,
        bytes,
        range: None,
    })
}

/// musicd's JSON line: `{"time":"2026-12-01T08:35:23Z", "method", "path", "query", "status",
/// "bytes", "range", …}`.
fn parse_json(text: &str) -> Option<Logged> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    let time = value.get("time")?.as_str()?;
    let path = value.get("path")?.as_str()?;
    let query = value.get("query").and_then(|q| q.as_str()).unwrap_or("");
    let target = if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{query}")
    };
    let range = value
        .get("range")
        .and_then(|r| r.as_str())
        .filter(|r| !r.is_empty())
        .map(str::to_string);
    Some(Logged {
        at_ms: iso_time_ms(time)?,
        method: value.get("method")?.as_str()?.to_string(),
        target,
        status: u16::try_from(value.get("status")?.as_u64()?).ok()?,
        bytes: value.get("bytes")?.as_u64()?,
        range,
    })
}

/// nginx writes `"` and bytes outside printable ASCII as `\xHH`.
fn unescape(text: &str) -> String {
    if !text.contains("\\x") {
        return text.to_string();
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && bytes.get(i + 1) == Some(&b'x')
            && let Some(value) = text
                .get(i + 2..i + 4)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(value);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `10/Oct/2000:13:55:36 -0700` in seconds since the epoch.
pub(crate) fn clf_time(text: &str) -> Option<u64> {
    let (stamp, zone) = text.split_once(' ').unwrap_or((text, "+0000"));
    let mut parts = stamp.splitn(4, [':', '/']);
    let day: i64 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.parse().ok()?;
    let sign = match zone.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let zone_hours: i64 = zone.get(1..3)?.parse().ok()?;
    let zone_minutes: i64 = zone.get(3..5)?.parse().ok()?;
    let local = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    u64::try_from(local - sign * (zone_hours * 3600 + zone_minutes * 60)).ok()
}

/// `2026-12-01T08:35:23Z` (fractions of a second kept) in milliseconds since the epoch.
pub(crate) fn iso_time_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, clock) = text.split_once('T')?;
    let mut date = date.split('-');
    let year: i64 = date.next()?.parse().ok()?;
    let month: i64 = date.next()?.parse().ok()?;
    let day: i64 = date.next()?.parse().ok()?;
    let mut clock = clock.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let seconds: f64 = clock.next()?.parse().ok()?;
    let whole = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60;
    let ms = whole as f64 * 1000.0 + seconds * 1000.0;
    (ms >= 0.0).then_some(ms as u64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn combined_lines_of_nginx_varnish_and_musicd_are_read() {
        let nginx = br#"10.0.0.1 - - [01/Dec/2026:08:35:23 +0000] "GET /musicdb/6b0dc37d3ba0d873deac9381/a%20b.mp3 HTTP/1.1" 206 4096 "-" "VLC/3.0""#;
        let line = parse_line(nginx).expect("nginx line");
        assert_eq!(line.at_ms, 1_796_114_123_000);
        assert_eq!(line.method, "GET");
        assert_eq!(line.target, "/musicdb/6b0dc37d3ba0d873deac9381/a%20b.mp3");
        assert_eq!((line.status, line.bytes), (206, 4096));
        let shifted =
            br#"10.0.0.1 - - [01/Dec/2026:09:35:23 +0100] "HEAD /x HTTP/1.1" 200 - "-" "-""#;
        let line = parse_line(shifted).expect("varnishncsa line");
        assert_eq!((line.at_ms, line.bytes), (1_796_114_123_000, 0));
        let musicd = br#"127.0.0.1 - - [01/Dec/2026:08:35:23 +0000] "GET /a\x22b HTTP/1.1" 200 10 "-" "-" 4f-1 redis 0.001 0.000 1"#;
        assert_eq!(parse_line(musicd).expect("musicd line").target, "/a\"b");
        assert_eq!(
            parse_line(br#"1.1.1.1 - - [01/Dec/2026:08:35:23 +0000] "-" 400 0 "-" "-""#),
            None
        );
    }

    #[test]
    fn musicd_json_lines_keep_their_range_and_query() {
        let json = br#"{"time":"2026-12-01T08:35:23Z","client":"1.1.1.1","method":"GET","path":"/musicdb/x/a.mp3","query":"sig=1","protocol":"HTTP/1.1","status":206,"bytes":100,"latency_ms":1.0,"ttfb_ms":0.5,"cache":"redis","range":"bytes=0-99","user_agent":"","referer":"","request_id":"r","complete":true}"#;
        let line = parse_line(json).expect("json line");
        assert_eq!(line.at_ms, 1_796_114_123_000);
        assert_eq!(line.target, "/musicdb/x/a.mp3?sig=1");
        assert_eq!(line.range.as_deref(), Some("bytes=0-99"));
        assert_eq!((line.status, line.bytes), (206, 100));
    }
}
