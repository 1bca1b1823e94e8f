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
use std::mem::MaybeUninit;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::http::Version;

use crate::catalog::CacheOutcome;
use crate::http::service::RequestId;
use crate::timing::unix_second_at;

/// What one line says.
pub(crate) struct Entry<'a> {
    /// The client, after trusted proxies.
    pub(crate) client: IpAddr,
    /// The method (`-` when the request line could not be read): a token (RFC 9110 §9.1,
    /// as `http::Method` checks it), so written as it is, never escaped.
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
    /// When the exchange ended: the line's time.
    pub(crate) at: Instant,
}

/// Appends `entry` as a combined-format line.
///
/// The room for the line's longest form is reserved once, then every part is a copy into
/// it: no growth check per part, one clock read shared with the latency, and plain runs
/// of the escaped fields copied whole.
pub(crate) fn combined(out: &mut Vec<u8>, entry: &Entry<'_>) {
    entry
        .request_id
        .with_bytes(|request_id| combined_with_id(out, entry, request_id));
}

fn combined_with_id(out: &mut Vec<u8>, entry: &Entry<'_>, request_id: &[u8]) {
    // Each escaped byte takes at most four; the rest (client, time, numbers, fields,
    // separators) at most `COMBINED_FIXED`.
    let escaped = entry.target.len() + entry.referer.len() + entry.user_agent.len();
    let most = COMBINED_FIXED + request_id.len() + entry.method.len() + 4 * escaped;
    write_reserved(out, most, |line| {
        line.client(entry.client);
        line.put(b" - - [");
        with_times(entry.at, |times| line.put(&times.clf));
        line.put(b"] \"");
        if entry.target.is_empty() {
            line.put(b"-");
        } else {
            debug_assert!(
                entry
                    .method
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
            );
            line.put(entry.method.as_bytes());
            line.put(b" ");
            line.escaped(entry.target);
            line.put(b" ");
            line.put(version(entry.version).as_bytes());
        }
        line.put(b"\" ");
        line.status(entry.status);
        line.put(b" ");
        line.number(entry.bytes);
        line.put(b" \"");
        line.dash_or_escaped(entry.referer);
        line.put(b"\" \"");
        line.dash_or_escaped(entry.user_agent);
        line.put(b"\" ");
        // Ids are short and plain (checked when received, hex when ours): no escaping.
        line.put(request_id);
        line.put(b" ");
        line.put(entry.cache.as_str().as_bytes());
        line.put(b" ");
        line.thousandths(millis_u64(entry.latency));
        line.put(b" ");
        line.thousandths(millis_u64(entry.ttfb));
        line.put(if entry.complete { b" 1\n" } else { b" 0\n" });
    });
}

/// The most a combined line takes besides its escaped fields and request id: an IPv6
/// client (45), the time (26), two latencies (u64 milliseconds as seconds), status, bytes
/// (u64), the cache outcome, version and separators, with room to spare.
const COMBINED_FIXED: usize = 512;

/// Writes into room reserved beforehand, uninitialised: [`write_reserved`] reserves the
/// longest form and keeps what the cursor wrote. Zeroing the room first (`resize`) cost
/// a memset of the longest form for every line.
struct Cursor<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    /// Everything before it has been written.
    at: usize,
}

/// Runs `write` over `most` bytes of room at the end of `out`, then keeps the bytes it
/// wrote. Panics (before anything is kept) if `write` goes past `most`.
fn write_reserved(out: &mut Vec<u8>, most: usize, write: impl FnOnce(&mut Cursor<'_>)) {
    out.reserve(most);
    let mut cursor = Cursor {
        buf: &mut out.spare_capacity_mut()[..most],
        at: 0,
    };
    write(&mut cursor);
    let written = cursor.at;
    // SAFETY: the cursor only moves `at` past bytes it has written (`put`, `number`), so
    // the first `written` bytes of the spare capacity are initialised, and `written` is
    // at most `most`, which was reserved.
    unsafe { out.set_len(out.len() + written) };
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        self.buf[self.at..end].write_copy_of_slice(bytes);
        self.at = end;
    }

    /// `n` in decimal: three digits at a time from tables, no loop per digit. The
    /// groups below the leading one are found first (right to left), then written after
    /// it.
    fn number(&mut self, n: impl Into<u64>) {
        let mut n = n.into();
        // u64::MAX has twenty digits: a leading group and six of three.
        let mut groups = [0u16; 6];
        let mut below = 0;
        while n >= 1000 {
            groups[below] = (n % 1000) as u16;
            n /= 1000;
            below += 1;
        }
        self.leading(n as u16);
        for group in groups[..below].iter().rev() {
            self.put(&DIGITS[usize::from(*group)]);
        }
    }

    /// A number below 1000 without leading zeros, from a table of the texts: no
    /// division. All three of the table's digit bytes are stored (a fixed-size store,
    /// where a copy of one to three bytes is a call to `memcpy`), and `at` moves past the
    /// digits only: a short number's padding is overwritten by what follows or left past
    /// the line's end.
    fn leading(&mut self, n: u16) {
        let [len, digits @ ..] = LEADING[usize::from(n)];
        self.buf[self.at..self.at + digits.len()].write_copy_of_slice(&digits);
        self.at += usize::from(len);
    }

    /// A status code: three digits (RFC 9110 §15), anything else as a plain number.
    fn status(&mut self, code: u16) {
        if (100..1000).contains(&code) {
            self.put(&DIGITS[usize::from(code)]);
        } else {
            self.number(code);
        }
    }

    /// The client's address. The text of the last one this thread wrote is kept: a
    /// loop's lines mostly name few clients (the proxy in front, or a player's run of
    /// requests), and a copy of it is a third of the instructions of writing it again.
    fn client(&mut self, ip: IpAddr) {
        let (last, len, text) = LAST_CLIENT.get();
        let (len, text) = if last == ip {
            (len, text)
        } else {
            let (len, text) = client_text(ip);
            LAST_CLIENT.set((ip, len, text));
            (len, text)
        };
        // The whole array, a fixed-size store; `at` moves past the text only.
        self.buf[self.at..self.at + text.len()].write_copy_of_slice(&text);
        self.at += usize::from(len);
    }

    /// nginx's escaping for `escape=default`: `"`, `\\` and bytes outside 0x20..0x7e as
    /// `\xHH`, plain runs copied whole.
    fn escaped(&mut self, mut value: &[u8]) {
        while let Some(at) = first_to_escape(value) {
            self.put(&value[..at]);
            let b = value[at];
            self.put(&[
                b'\\',
                b'x',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 15)],
            ]);
            value = &value[at + 1..];
        }
        self.put(value);
    }

    fn dash_or_escaped(&mut self, value: &[u8]) {
        if value.is_empty() {
            self.put(b"-");
        } else {
            self.escaped(value);
        }
    }

    /// `units` / 1000 with three decimals.
    fn thousandths(&mut self, units: u64) {
        // Nearly every latency is under a second: its leading `0` needs no table.
        if units < 1000 {
            self.put(b"0.");
        } else {
            self.number(units / 1000);
            self.put(b".");
        }
        self.put(&DIGITS[(units % 1000) as usize]);
    }
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Each number below 1000 as three digits, leading zeros kept.
const DIGITS: [[u8; 3]; 1000] = {
    let mut texts = [[0u8; 3]; 1000];
    let mut n = 0;
    while n < 1000 {
        texts[n] = [
            b'0' + (n / 100) as u8,
            b'0' + (n / 10 % 10) as u8,
            b'0' + (n % 10) as u8,
        ];
        n += 1;
    }
    texts
};

/// Each number below 1000 as written alone: its length, then its one to three digits.
const LEADING: [[u8; 4]; 1000] = {
    let mut texts = [[0u8; 4]; 1000];
    let mut n = 0;
    while n < 1000 {
        let [hundreds, tens, ones] = DIGITS[n];
        texts[n] = if n >= 100 {
            [3, hundreds, tens, ones]
        } else if n >= 10 {
            [2, tens, ones, 0]
        } else {
            [1, ones, 0, 0]
        };
        n += 1;
    }
    texts
};

/// The longest text of an IP address (an IPv6 one).
const CLIENT_TEXT: usize = 45;

thread_local! {
    /// The last client this thread wrote ([`Cursor::client`]), and its text.
    static LAST_CLIENT: std::cell::Cell<(IpAddr, u8, [u8; CLIENT_TEXT])> =
        const { std::cell::Cell::new((IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 7, UNSPECIFIED)) };
}

/// The text of `0.0.0.0`, [`LAST_CLIENT`]'s first value.
const UNSPECIFIED: [u8; CLIENT_TEXT] = {
    let mut text = [0u8; CLIENT_TEXT];
    let written = *b"0.0.0.0";
    let mut i = 0;
    while i < written.len() {
        text[i] = written[i];
        i += 1;
    }
    text
};

/// `ip` as text (an IPv4-mapped IPv6 address, from a dual-stack socket, as the IPv4 it
/// is), and its length.
fn client_text(ip: IpAddr) -> (u8, [u8; CLIENT_TEXT]) {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let mut text = [0u8; CLIENT_TEXT];
    match ip {
        IpAddr::V4(v4) => {
            // Each octet's three table bytes stored whole, as in `Cursor::leading`.
            let mut at = 0;
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[at] = b'.';
                    at += 1;
                }
                let [len, digits @ ..] = LEADING[usize::from(octet)];
                text[at..at + digits.len()].copy_from_slice(&digits);
                at += usize::from(len);
            }
            (at as u8, text)
        }
        IpAddr::V6(v6) => {
            use std::io::Write;
            let mut rest = &mut text[..];
            let len = match write!(rest, "{v6}") {
                Ok(()) => CLIENT_TEXT - rest.len(),
                Err(_) => 0,
            };
            (len as u8, text)
        }
    }
}

/// Where the first byte nginx escapes is in `value`: sixteen bytes at a time in one
/// SSE2 register, the position read from the mask of the bytes flagged. SSE2 is part of
/// every x86-64. The word-at-a-time search it replaced was about 190 instructions for a
/// 40-byte target, the line's largest part (callgrind); this is about a third of that.
/// Values shorter than a register go by words.
#[cfg(target_arch = "x86_64")]
fn first_to_escape(value: &[u8]) -> Option<usize> {
    if value.len() < 16 {
        return first_to_escape_by_words(value);
    }
    // One bit per byte of `value[at..at + 16]` that needs escaping.
    let flagged = |at: usize| {
        let chunk: &[u8; 16] = value[at..at + 16].try_into().expect("sixteen bytes");
        // SAFETY: SSE2 is part of every x86-64.
        unsafe { escapes_in(chunk) }
    };
    let mut at = 0;
    while at + 16 <= value.len() {
        let mask = flagged(at);
        if mask != 0 {
            return Some(at + mask.trailing_zeros() as usize);
        }
        at += 16;
    }
    // The last 1-15 bytes: the register that ends with them. What it shares with the
    // registers before is plain, so its first flagged byte is the value's.
    if at < value.len() {
        let last = value.len() - 16;
        let mask = flagged(last);
        if mask != 0 {
            return Some(last + mask.trailing_zeros() as usize);
        }
    }
    None
}

/// A bit for each byte of `chunk` that needs escaping, in one register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn escapes_in(chunk: &[u8; 16]) -> u32 {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8,
    };
    // SAFETY: `chunk` is sixteen readable bytes, and this load needs no alignment.
    let bytes = unsafe { _mm_loadu_si128(chunk.as_ptr().cast()) };
    // Compared as signed: below 0x20, or 0x80 and above (negative).
    let outside = _mm_cmplt_epi8(bytes, _mm_set1_epi8(0x20));
    let delete = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(0x7f));
    let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
    let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
    let any = _mm_or_si128(
        _mm_or_si128(outside, delete),
        _mm_or_si128(quote, backslash),
    );
    _mm_movemask_epi8(any) as u32
}

#[cfg(not(target_arch = "x86_64"))]
fn first_to_escape(value: &[u8]) -> Option<usize> {
    first_to_escape_by_words(value)
}

/// [`first_to_escape`] a word at a time: sixteen bytes at a time while none is (every
/// value but a rare user agent), then byte by byte from the first word that has one.
///
/// Each word is judged without a branch per kind of byte: the four tests set the high bit
/// of a byte that needs escaping (a borrow can also set it in a byte above one that does,
/// which only ever flags a word that has one), and one test of the two words' union
/// decides. The earlier loop, eight bytes and four branches at a time, was a fifth of the
/// access-log line's instructions (callgrind).
fn first_to_escape_by_words(value: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let flagged = |word: u64| {
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let high_or_delete = ((word & !HIGHS) + ONES) | word;
        let quote = word ^ (ONES * u64::from(b'"'));
        let backslash = word ^ (ONES * u64::from(b'\\'));
        let zero = |x: u64| x.wrapping_sub(ONES) & !x;
        (control | high_or_delete | zero(quote) | zero(backslash)) & HIGHS
    };
    let word = |bytes: &[u8]| {
        let mut word = [0u8; 8];
        word.copy_from_slice(bytes);
        u64::from_ne_bytes(word)
    };
    let mut checked = 0;
    for chunk in value.chunks_exact(16) {
        if flagged(word(&chunk[..8])) | flagged(word(&chunk[8..])) != 0 {
            break;
        }
        checked += 16;
    }
    // The last 1-15 bytes of a value of eight or more: the two words that cover them
    // (overlapping what was checked), so a plain value never goes byte by byte.
    let rest = value.len() - checked;
    if rest < 16 && value.len() >= 8 {
        let (first, last) = (checked.min(value.len() - 8), value.len() - 8);
        if flagged(word(&value[first..first + 8])) | flagged(word(&value[last..])) == 0 {
            return None;
        }
    }
    value[checked..]
        .iter()
        .position(|b| !PLAIN[usize::from(*b)])
        .map(|at| checked + at)
}

/// Whole milliseconds, in 64 bits: u128 arithmetic is a library call per division.
fn millis_u64(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a byte is written as itself by nginx's default escaping: printable ASCII but
/// `"` and `\`.
const PLAIN: [bool; 256] = {
    let mut plain = [false; 256];
    let mut b = 0x20;
    while b < 0x7f {
        plain[b] = b != b'"' as usize && b != b'\\' as usize;
        b += 1;
    }
    plain
};

/// Appends a number in decimal.
fn number(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `entry` as a JSON object on one line.
pub(crate) fn json(out: &mut Vec<u8>, entry: &Entry<'_>) {
    out.extend_from_slice(b"{\"time\":\"");
    with_times(entry.at, |times| out.extend_from_slice(&times.iso));
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

/// The client as [`combined`] writes it, for the JSON line.
fn write_ip(out: &mut Vec<u8>, ip: IpAddr) {
    // The longest text of an IPv6 address is 45 bytes.
    write_reserved(out, 45, |text| text.client(ip));
}

/// Milliseconds with microsecond precision.
fn millis(out: &mut Vec<u8>, duration: Duration) {
    thousandths(out, u64::try_from(duration.as_micros()).unwrap_or(u64::MAX));
}

/// `units` / 1000 with three decimals.
fn thousandths(out: &mut Vec<u8>, units: u64) {
    number(out, units / 1000);
    out.push(b'.');
    let rest = (units % 1000) as u16;
    out.push(b'0' + (rest / 100) as u8);
    out.push(b'0' + (rest / 10 % 10) as u8);
    out.push(b'0' + (rest % 10) as u8);
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

/// Calls `write` with the wall-clock second of `at` (a recent instant), formatted once per
/// second per thread.
fn with_times(at: Instant, write: impl FnOnce(&Times)) {
    let second = unix_second_at(at);
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
            at: Instant::now(),
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
    fn the_longest_line_fits_the_room_it_reserves() {
        // Every field at its longest: an IPv6 client, a proxy's request id, values made
        // only of bytes that take four each, and the largest numbers.
        let id = RequestId::Given("i".repeat(64));
        let every_byte: Vec<u8> = (0..=255u8).cycle().take(8192).collect();
        let mut e = entry(&id);
        e.client = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"
            .parse()
            .expect("ip");
        e.method = "PROPFIND";
        e.target = &every_byte;
        e.referer = &every_byte;
        e.user_agent = &every_byte;
        e.status = u16::MAX;
        e.bytes = u64::MAX;
        e.latency = Duration::MAX;
        e.ttfb = Duration::MAX;
        let mut out = b"earlier line\n".to_vec();
        combined(&mut out, &e);
        let text = String::from_utf8(out).expect("escaped to ASCII");
        let (earlier, line) = text.split_once('\n').expect("two lines");
        assert_eq!(earlier, "earlier line");
        assert!(
            line.starts_with("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe - - ["),
            "{line}"
        );
        let tail = format!(" 65535 {} \"", u64::MAX);
        assert!(line.contains(&tail), "status and bytes");
        assert!(line.ends_with(&format!(
            " {} hit {max}.{rest:03} {max}.{rest:03} 1\n",
            "i".repeat(64),
            max = u64::MAX / 1000,
            rest = u64::MAX % 1000
        )));
        let escapes = every_byte
            .iter()
            .filter(|b| !(0x20..0x7f).contains(*b) || **b == b'"' || **b == b'\\')
            .count();
        assert_eq!(line.matches("\\x").count(), 3 * escapes);
    }

    #[test]
    fn escaping_copies_plain_runs_and_escapes_every_other_byte() {
        let every_byte: Vec<u8> = (0..=255u8).chain(*b"plain \"q\" tail").collect();
        let mut out = Vec::new();
        write_reserved(&mut out, every_byte.len() * 4, |line| {
            line.escaped(&every_byte)
        });
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
    fn the_first_byte_to_escape_is_found_wherever_it_is() {
        // Every byte value at every place of values of every length up to three words
        // (whole words, a tail, values shorter than a word), among plain bytes that sit
        // next to the values the word test watches for.
        let plain: Vec<u8> = b"~ !#[]{}^_`|0aZ/?=&%-+.,;:@$'()*<>"
            .iter()
            .copied()
            .cycle()
            .take(48)
            .collect();
        for find in [first_to_escape, first_to_escape_by_words] {
            every_first_byte_to_escape_is_found(find, &plain);
        }
    }

    fn every_first_byte_to_escape_is_found(
        first_to_escape: fn(&[u8]) -> Option<usize>,
        plain: &[u8],
    ) {
        for len in 1..=plain.len() {
            let plain = &plain[..len];
            assert_eq!(first_to_escape(plain), None, "{len} plain bytes");
            for b in 0..=255u8 {
                for at in 0..len {
                    let mut value = plain.to_vec();
                    value[at] = b;
                    let expected = (!PLAIN[usize::from(b)]).then_some(at);
                    assert_eq!(first_to_escape(&value), expected, "{b:#x} at {at} of {len}");
                    // A second one later does not hide the first.
                    let last = len - 1;
                    value[last] = b'"';
                    let expected = expected.filter(|at| *at < last).unwrap_or(last);
                    let found = first_to_escape(&value);
                    assert_eq!(
                        found,
                        Some(expected),
                        "{b:#x} at {at} of {len}, then a quote"
                    );
                }
            }
        }
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
    fn the_combined_line_writes_every_octet_and_status_as_their_numbers() {
        let write = |part: &dyn Fn(&mut Cursor<'_>)| {
            let mut out = Vec::new();
            write_reserved(&mut out, 64, |cursor| part(cursor));
            String::from_utf8(out).expect("ascii")
        };
        for n in 0..=255u8 {
            let ip = IpAddr::from([n, 0, 255, n.wrapping_mul(7)]);
            assert_eq!(write(&|c| c.client(ip)), ip.to_string());
        }
        for code in [
            100u16, 200, 206, 304, 404, 499, 503, 999, 0, 99, 1000, 65535,
        ] {
            assert_eq!(write(&|c| c.status(code)), code.to_string());
        }
        // Every group boundary of the three-digit tables, and both ends.
        let mut numbers = vec![0u64, 4096, u64::MAX, u64::MAX - 999];
        for power in 0..=19u32 {
            let p = 10u64.pow(power);
            numbers.extend([p - 1, p, p + 1, p.checked_mul(7).map_or(p, |m| m + 3)]);
        }
        for n in numbers {
            assert_eq!(write(&|c| c.number(n)), n.to_string());
            assert_eq!(
                write(&|c| c.thousandths(n)),
                format!("{}.{:03}", n / 1000, n % 1000)
            );
        }
    }

    #[test]
    fn a_client_written_again_is_written_as_itself() {
        // The thread keeps the last client's text: each in turn, repeated, and the
        // address it starts with.
        let clients = [
            "198.51.100.23",
            "198.51.100.23",
            "::ffff:198.51.100.23",
            "2001:db8::7",
            "198.51.100.24",
            "0.0.0.0",
            "2001:db8::7",
            "2001:db8::7",
            "0.0.0.0",
        ];
        for client in clients {
            let ip: IpAddr = client.parse().expect("ip");
            let mut out = Vec::new();
            write_ip(&mut out, ip);
            let expected = client.trim_start_matches("::ffff:");
            assert_eq!(String::from_utf8(out).expect("ascii"), expected);
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
