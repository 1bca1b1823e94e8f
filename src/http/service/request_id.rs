//! Request ids: a proxy's, when short and plain, or ours, unique across processes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, BytesMut};

/// A request's id: the proxy's, or ours (formatted only when written).
#[derive(Debug)]
pub(crate) enum RequestId {
    /// Sent by a proxy (already checked to be short and plain).
    Given(String),
    /// Ours: a per-process random prefix and a counter.
    Generated(u64),
}

/// Random per process, so ids from several musicd processes do not collide in one log.
static REQUEST_PREFIX: std::sync::LazyLock<u32> = std::sync::LazyLock::new(rand::random);
static REQUEST_BLOCKS: AtomicU64 = AtomicU64::new(0);
/// Ids handed out per visit to the shared counter: each event loop counts on its own, so
/// the request path touches no cache line another core writes.
const REQUEST_BLOCK: u64 = 4096;

thread_local! {
    static NEXT_REQUEST: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

impl RequestId {
    /// The proxy's id when it sent one, else a fresh one of ours.
    pub(crate) fn given_or_next(given: Option<String>) -> RequestId {
        match given {
            Some(given) => RequestId::Given(given),
            None => RequestId::next(),
        }
    }

    /// A fresh id of ours.
    pub(crate) fn next() -> RequestId {
        let n = NEXT_REQUEST.with(|slot| {
            let (mut next, mut end) = slot.get();
            if next == end {
                next = REQUEST_BLOCKS.fetch_add(1, Ordering::Relaxed) * REQUEST_BLOCK + 1;
                end = next + REQUEST_BLOCK;
            }
            slot.set((next + 1, end));
            next
        });
        RequestId::Generated(n)
    }

    /// Appends the id to `out` (what `Display` prints, without the formatting machinery).
    pub(crate) fn write_to(&self, out: &mut impl BufMut) {
        match self {
            RequestId::Given(id) => out.put_slice(id.as_bytes()),
            RequestId::Generated(n) => {
                put_hex(out, u64::from(*REQUEST_PREFIX), 8);
                out.put_u8(b'-');
                put_hex(out, *n, 1);
            }
        }
    }
}

/// `value` in lowercase hex, at least `width` digits.
fn put_hex(out: &mut impl BufMut, value: u64, width: usize) {
    let digits = (16 - value.leading_zeros() as usize / 4).max(width);
    for shift in (0..digits).rev() {
        out.put_u8(b"0123456789abcdef"[((value >> (shift * 4)) & 0xf) as usize]);
    }
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut text = BytesMut::with_capacity(32);
        self.write_to(&mut text);
        f.write_str(std::str::from_utf8(&text).unwrap_or("?"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_request_ids_are_unique_hex() {
        let ids: std::collections::HashSet<String> =
            (0..10_000).map(|_| RequestId::next().to_string()).collect();
        assert_eq!(ids.len(), 10_000);
        for id in ids.iter().take(5) {
            let (prefix, counter) = id.split_once('-').expect("prefix-counter");
            assert_eq!(prefix.len(), 8, "{id}");
            assert!(u32::from_str_radix(prefix, 16).is_ok(), "{id}");
            assert!(u64::from_str_radix(counter, 16).is_ok(), "{id}");
        }
        let mut out = BytesMut::new();
        put_hex(&mut out, 0xab, 8);
        put_hex(&mut out, 0, 1);
        put_hex(&mut out, u64::MAX, 1);
        assert_eq!(&out[..], b"000000ab0ffffffffffffffff");
    }
}
