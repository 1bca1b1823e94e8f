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

/// Random per process, so ids from several musicd processes do not collide in one log:
/// eight hex digits and the `-`, rendered once.
static REQUEST_PREFIX: std::sync::LazyLock<[u8; 9]> = std::sync::LazyLock::new(|| {
    let mut prefix = [b'-'; 9];
    prefix[..8].copy_from_slice(&hex_digits(u64::from(rand::random::<u32>()))[8..]);
    prefix
});
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
                // The prefix with its '-', then the counter's digits without leading zeros.
                let mut text = [0u8; 25];
                text[..9].copy_from_slice(&*REQUEST_PREFIX);
                let digits = hex_digits(*n);
                let len = (16 - n.leading_zeros() as usize / 4).max(1);
                text[9..9 + len].copy_from_slice(&digits[16 - len..]);
                f(&text[..9 + len])
            }
        }
    }
}

/// `value` as sixteen lowercase hex digits, most significant first, computed a word at a
/// time: each nibble spread into a byte, then each byte moved to its ASCII digit.
fn hex_digits(value: u64) -> [u8; 16] {
    const LOW_NIBBLES: u64 = 0x0F0F_0F0F_0F0F_0F0F;
    let spread = |half: u32| {
        let x = u64::from(half);
        let x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
        let x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
        // Nibble k now at bit 8k: read big-endian, the first byte is the top nibble.
        (x | (x << 4)) & LOW_NIBBLES
    };
    let to_ascii = |nibbles: u64| {
        // 0x01 in each byte whose nibble is 10 or more: those become 'a'..'f'.
        let letters = ((nibbles + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        nibbles + 0x3030_3030_3030_3030 + letters * u64::from(b'a' - b'0' - 10)
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&to_ascii(spread((value >> 32) as u32)).to_be_bytes());
    out[8..].copy_from_slice(&to_ascii(spread(value as u32)).to_be_bytes());
    out
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
        for value in [0, 1, 0xab, 0x9a, 0x0123_4567_89ab_cdef, u64::MAX, 1 << 63] {
            assert_eq!(
                String::from_utf8_lossy(&hex_digits(value)),
                format!("{value:016x}")
            );
            let text = RequestId::Generated(value).to_string();
            let counter = text.split_once('-').map(|(_, n)| n.to_string());
            assert_eq!(counter, Some(format!("{value:x}")));
        }
    }
}
