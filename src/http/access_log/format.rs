//! Access-log lines, formatted into a byte buffer without allocating.
//!
//! * [`combined`] is the NCSA combined format nginx and Apache write:
//!   `client - - [01/Dec/2026:08:35:23 +0000] "GET /path HTTP/1.1" 200 4096 "referer" "agent"`,
//!   followed by musicd's own fields (request id, cache outcome, latency and time to
//!   first byte in seconds, whether the response was complete), which log readers that
//!   know the combined format ignore (GoAccess reads it with `--log-format=COMBINED`).
//!   Strings are escaped as nginx escapes them: `"`, `\` and bytes outside printable
//!   ASCII become `\xHH`.
//! * [`json`] is one object per line with every field, for log pipelines.
//!
//! Times are UTC; the formatted second is cached per thread.

use std::cell::RefCell;
use std::net::IpAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::Version;

use crate::catalog::CacheOutcome;
use crate::http::service::RequestId;

/// What one line says.
pub(crate) struct Entry<'a> {
    /// The client, after trusted proxies.
    pub(crate) client: IpAddr,
    /// The method (`-` when the request line could not be read).
    pub(crate) method: &'a str,
    /// The request target as received.
    pub(crate) target: &'a [u8],
    /// The request's version.
    pub(crate) version: Version,
    /// The status sent.
    pub(crate) status: u16,
    /// Body bytes sent.
    pub(crate) bytes: u64,
    /// `Referer`, or empty.
    pub(crate) referer: &'a [u8],
    /// `User-Agent`, or empty.
    pub(crate) user_agent: &'a [u8],
    /// `Range`, or empty.
    pub(crate) range: &'a [u8],
    /// The request's id.
    pub(crate) request_id: &'a RequestId,
    /// Where the track's path came from.
    pub(crate) cache: CacheOutcome,
    /// From the end of the request head to the end of the response.
    pub(crate) latency: Duration,
    /// From the end of the request head to the response head being written.
    pub(crate) ttfb: Duration,
    /// Whether the whole response left.
    pub(crate) complete: bool,
}

/// Appends `entry` as a combined-format line.
pub(crate) fn combined(out: &mut Vec<u8>, entry: &Entry<'_>) {
    write_ip(out, entry.client);
    out.extend_from_slice(b" - - [");
    with_times(|times| out.extend_from_slice(&times.clf));
    out.extend_from_slice(b"] \"");
    if entry.target.is_empty() {
        out.push(b'-');
    } else {
        escape_nginx(out, entry.method.as_bytes());
        out.push(b' ');
        escape_nginx(out, entry.target);
        out.push(b' ');
        out.extend_from_slice(version(entry.version).as_bytes());
    }
    out.extend_from_slice(b"\" ");
    number(out, entry.status);
    out.push(b' ');
    number(out, entry.bytes);
    out.extend_from_slice(b" \"");
    dash_or_escaped(out, entry.referer);
    out.extend_from_slice(b"\" \"");
    dash_or_escaped(out, entry.user_agent);
    out.extend_from_slice(b"\" ");
    request_id(out, entry.request_id);
    out.push(b' ');
    out.extend_from_slice(entry.cache.as_str().as_bytes());
    out.push(b' ');
    seconds(out, entry.latency);
    out.push(b' ');
    seconds(out, entry.ttfb);
    out.extend_from_slice(if entry.complete { b" 1\n" } else { b" 0\n" });
}

/// Appends a number in decimal.
fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `entry` as a JSON object on one line.
pub(crate) fn json(out: &mut Vec<u8>, entry: &Entry<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    with_times(|times| out.extend_from_slice(&times.iso));
    out.extend_from_slice(b"\",\"client\":\"");
    write_ip(out, entry.client);
    out.extend_from_slice(b"\",\"method\":");
    json_string(out, entry.method.as_bytes());
    let (path, query) = match entry.target.iter().position(|b| *b == b'?') {
        Some(at) => (&entry.target[..at], &entry.target[at + 1..]),
        None => (entry.target, &b""[..]),
    };
    out.extend_from_slice(b",\"path\":");
    json_string(out, path);
    out.extend_from_slice(b",\"query\":");
    json_string(out, query);
    out.extend_from_slice(b",\"protocol\":\"");
    out.extend_from_slice(version(entry.version).as_bytes());
    out.extend_from_slice(b"\",\"status\":");
    number(out, entry.status);
    out.extend_from_slice(b",\"bytes\":");
    number(out, entry.bytes);
    out.extend_from_slice(b",\"latency_ms\":");
    millis(out, entry.latency);
    out.extend_from_slice(b",\"ttfb_ms\":");
    millis(out, entry.ttfb);
    out.extend_from_slice(b",\"cache\":\"");
    out.extend_from_slice(entry.cache.as_str().as_bytes());
    out.extend_from_slice(b"\",\"range\":");
    json_string(out, entry.range);
    out.extend_from_slice(b",\"user_agent\":");
    json_string(out, entry.user_agent);
    out.extend_from_slice(b",\"referer\":");
    json_string(out, entry.referer);
    out.extend_from_slice(b",\"request_id\":\"");
    request_id(out, entry.request_id);
    out.extend_from_slice(b"\",\"complete\":");
    out.extend_from_slice(if entry.complete {
        b"true}\n"
    } else {
        b"false}\n"
    });
}

fn version(version: Version) -> &'static str {
    if version == Version::HTTP_10 {
        "HTTP/1.0"
    } else {
        "HTTP/1.1"
    }
}

fn request_id(out: &mut Vec<u8>, id: &RequestId) {
    // Ids are short and plain (checked when received, hex when ours): no escaping.
    id.write_to(out);
}

fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    use std::io::Write;
    // An IPv4-mapped IPv6 peer (dual-stack sockets) is logged as the IPv4 it is.
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    match ip {
        // Nearly every line's client: four numbers, without the formatting machinery.
        IpAddr::V4(v4) => {
            let [a, b, c, d] = v4.octets();
            number(out, a);
            for octet in [b, c, d] {
                out.push(b'.');
                number(out, octet);
            }
        }
        IpAddr::V6(_) => {
            let _ = write!(out, "{ip}");
        }
    }
}

/// Seconds with millisecond precision, like nginx's `$request_time`.
fn seconds(out: &mut Vec<u8>, duration: Duration) {
    thousandths(out, duration.as_millis());
}

/// Milliseconds with microsecond precision.
fn millis(out: &mut Vec<u8>, duration: Duration) {
    thousandths(out, duration.as_micros());
}

/// `units` / 1000 with three decimals.
fn thousandths(out: &mut Vec<u8>, units: u128) {
    number(out, units / 1000);
    out.push(b'.');
    let rest = (units % 1000) as u16;
    out.push(b'0' + (rest / 100) as u8);
    out.push(b'0' + (rest / 10 % 10) as u8);
    out.push(b'0' + (rest % 10) as u8);
}

fn dash_or_escaped(out: &mut Vec<u8>, value: &[u8]) {
    if value.is_empty() {
        out.push(b'-');
    } else {
        escape_nginx(out, value);
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// nginx's escaping for `escape=default`: `"`, `\` and bytes outside 0x20..0x7e as `\xHH`.
fn escape_nginx(out: &mut Vec<u8>, mut value: &[u8]) {
    // Nearly every value needs no escape: plain runs are copied whole, not byte by byte.
    let needs_escape = |b: &u8| *b == b'"' || *b == b'\\' || !(0x20..0x7f).contains(b);
    while let Some(at) = value.iter().position(needs_escape) {
        out.extend_from_slice(&value[..at]);
        let b = value[at];
        out.extend_from_slice(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        value = &value[at + 1..];
    }
    out.extend_from_slice(value);
}

/// A JSON string; bytes that are not UTF-8 become U+FFFD.
fn json_string(out: &mut Vec<u8>, value: &[u8]) {
    out.push(b'"');
    for chunk in value.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '"' => out.extend_from_slice(b"\\\""),
                '\\' => out.extend_from_slice(b"\\\\"),
                c if (c as u32) < 0x20 || c == '\u{7f}' => {
                    let code = c as u32;
                    out.extend_from_slice(b"\\u00");
                    out.push(HEX[(code >> 4) as usize & 15]);
                    out.push(HEX[code as usize & 15]);
                }
                c => {
                    let mut utf8 = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
                }
            }
        }
        if !chunk.invalid().is_empty() {
            out.extend_from_slice("\u{fffd}".as_bytes());
        }
    }
    out.push(b'"');
}

/// The current second, formatted both ways.
struct Times {
    second: u64,
    /// `01/Dec/2026:08:35:23 +0000`
    clf: [u8; 26],
    /// `2026-12-01T08:35:23Z`
    iso: [u8; 20],
}

thread_local! {
    static TIMES: RefCell<Times> = const {
        RefCell::new(Times { second: u64::MAX, clf: [b' '; 26], iso: [b' '; 20] })
    };
}

fn with_times(write: impl FnOnce(&Times)) {
    let second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    TIMES.with(|cell| {
        let mut times = cell.borrow_mut();
        if times.second != second {
            format_times(second, &mut times);
        }
        write(&times);
    });
}

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

fn format_times(second: u64, times: &mut Times) {
    let (year, month, day) = civil_from_days((second / 86_400) as i64);
    let in_day = second % 86_400;
    let (hour, minute, sec) = (in_day / 3600, in_day / 60 % 60, in_day % 60);
    let two = |n: u64| [b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8];
    let year_digits = {
        let y = year.clamp(0, 9999) as u64;
        [
            b'0' + (y / 1000) as u8,
            b'0' + (y / 100 % 10) as u8,
            b'0' + (y / 10 % 10) as u8,
            b'0' + (y % 10) as u8,
        ]
    };
    let mut clf = Vec::with_capacity(26);
    clf.extend_from_slice(&two(day));
    clf.push(b'/');
    clf.extend_from_slice(MONTHS[(month - 1) as usize]);
    clf.push(b'/');
    clf.extend_from_slice(&year_digits);
    for (sep, n) in [(b':', hour), (b':', minute), (b':', sec)] {
        clf.push(sep);
        clf.extend_from_slice(&two(n));
    }
    clf.extend_from_slice(b" +0000");
    let mut iso = Vec::with_capacity(20);
    iso.extend_from_slice(&year_digits);
    for (sep, n) in [
        (b'-', month),
        (b'-', day),
        (b'T', hour),
        (b':', minute),
        (b':', sec),
    ] {
        iso.push(sep);
        iso.extend_from_slice(&two(n));
    }
    iso.push(b'Z');
    times.clf.copy_from_slice(&clf);
    times.iso.copy_from_slice(&iso);
    times.second = second;
}

/// Howard Hinnant's days-to-civil: (year, month 1-12, day 1-31) of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(id: &'a RequestId) -> Entry<'a> {
        Entry {
            client: "192.0.2.7".parse().expect("ip"),
            method: "GET",
            target: b"/musicdb/abc/x.mp3?q=\"1\"",
            version: Version::HTTP_11,
            status: 206,
            bytes: 4096,
            referer: b"",
            user_agent: b"VLC/3.0 \"x\"\n",
            range: b"bytes=0-4095",
            request_id: id,
            cache: CacheOutcome::Hit,
            latency: Duration::from_micros(1_234_567),
            ttfb: Duration::from_micros(890),
            complete: true,
        }
    }

    #[test]
    fn combined_lines_are_what_nginx_writes_plus_musicd_fields() {
        let id = RequestId::Given("r-1".into());
        let mut out = Vec::new();
        combined(&mut out, &entry(&id));
        let line = String::from_utf8(out).expect("ascii");
        let (head, rest) = line.split_once(" - - [").expect("client");
        assert_eq!(head, "192.0.2.7");
        let (time, rest) = rest.split_once("] ").expect("time");
        assert_eq!(time.len(), 26, "{time}");
        assert!(time.ends_with(" +0000"));
        assert_eq!(
            rest,
            "\"GET /musicdb/abc/x.mp3?q=\\x221\\x22 HTTP/1.1\" 206 4096 \"-\" \
             \"VLC/3.0 \\x22x\\x22\\x0A\" r-1 hit 1.234 0.000 1\n"
        );
    }

    #[test]
    fn escaping_copies_plain_runs_and_escapes_every_other_byte() {
        let every_byte: Vec<u8> = (0..=255u8).chain(*b"plain \"q\" tail").collect();
        let mut out = Vec::new();
        escape_nginx(&mut out, &every_byte);
        let mut expected = Vec::new();
        for &b in &every_byte {
            if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
                expected.extend_from_slice(format!("\\x{b:02X}").as_bytes());
            } else {
                expected.push(b);
            }
        }
        assert_eq!(String::from_utf8(out), String::from_utf8(expected));
    }

    #[test]
    fn clients_are_written_as_their_addresses_read() {
        for (ip, text) in [
            ("0.0.0.0", "0.0.0.0"),
            ("255.255.255.255", "255.255.255.255"),
            ("10.9.100.1", "10.9.100.1"),
            ("2001:db8::1", "2001:db8::1"),
            ("::ffff:192.0.2.9", "192.0.2.9"),
            ("::1", "::1"),
        ] {
            let mut out = Vec::new();
            write_ip(&mut out, ip.parse().expect("ip"));
            assert_eq!(String::from_utf8(out).expect("ascii"), text);
        }
    }

    #[test]
    fn json_lines_parse_and_carry_every_field() {
        let id = RequestId::Given("r-2".into());
        let mut out = Vec::new();
        let mut e = entry(&id);
        e.referer = b"http://x/\xff";
        json(&mut out, &e);
        assert_eq!(out.last(), Some(&b'\n'));
        let value: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(value["client"], "192.0.2.7");
        assert_eq!(value["path"], "/musicdb/abc/x.mp3");
        assert_eq!(value["query"], "q=\"1\"");
        assert_eq!(value["status"], 206);
        assert_eq!(value["bytes"], 4096);
        assert_eq!(value["range"], "bytes=0-4095");
        assert_eq!(value["user_agent"], "VLC/3.0 \"x\"\n");
        assert_eq!(value["referer"], "http://x/\u{fffd}");
        assert_eq!(value["cache"], "hit");
        assert_eq!(value["latency_ms"], 1234.567);
        assert_eq!(value["ttfb_ms"], 0.89);
        assert_eq!(value["request_id"], "r-2");
        assert_eq!(value["complete"], true);
        let time = value["time"].as_str().expect("time");
        assert!(time.ends_with('Z') && time.len() == 20, "{time}");
    }

    #[test]
    fn dates_are_civil_utc() {
        let mut times = Times {
            second: 0,
            clf: [0; 26],
            iso: [0; 20],
        };
        // 2026-12-01T08:35:23Z and a leap day.
        format_times(1_796_114_123, &mut times);
        assert_eq!(&times.clf, b"01/Dec/2026:08:35:23 +0000");
        assert_eq!(&times.iso, b"2026-12-01T08:35:23Z");
        format_times(951_782_400, &mut times);
        assert_eq!(&times.iso, b"2000-02-29T00:00:00Z");
    }
}
