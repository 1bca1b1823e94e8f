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
        self.with_bytes(|id| out.put_slice(id));
    }

    /// Calls `f` with the id's text: ours is rendered on the stack, not byte by byte into
    /// the caller's buffer.
    pub(crate) fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            RequestId::Given(id) => f(id.as_bytes()),
            RequestId::Generated(n) => {
                // An 8-digit prefix, '-', and at most 16 digits.
                let mut text = [0u8; 25];
                let mut len = put_hex(&mut text, u64::from(*REQUEST_PREFIX), 8);
                text[len] = b'-';
                len += 1;
                len += put_hex(&mut text[len..], *n, 1);
                f(&text[..len])
            }
        }
    }
}

/// Writes `value` in lowercase hex, at least `width` (at most 16) digits, at the start of
/// `out`; returns how many.
fn put_hex(out: &mut [u8], value: u64, width: usize) -> usize {
    let digits = (16 - value.leading_zeros() as usize / 4).max(width).min(16);
    for (i, slot) in out[..digits].iter_mut().enumerate() {
        let shift = (digits - 1 - i) * 4;
        *slot = b"0123456789abcdef"[((value >> shift) & 0xf) as usize];
    }
    digits
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
        let mut out = [0u8; 25];
        let mut len = put_hex(&mut out, 0xab, 8);
        len += put_hex(&mut out[len..], 0, 1);
        len += put_hex(&mut out[len..], u64::MAX, 1);
        assert_eq!(&out[..len], b"000000ab0ffffffffffffffff");
    }
}
