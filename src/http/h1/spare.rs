//! The event loop's spare buffers. A connection gives its input and output buffers back
//! when it has used them, and takes one when it needs one again, so a keep-alive request
//! on a loop that is serving allocates no buffer, while a connection that waits for its
//! next request still holds none (thousands of them wait for every one that is busy).
//!
//! One list per thread: an event loop is one thread, so taking and giving touch nothing
//! another core shares.

use std::cell::RefCell;

use bytes::BytesMut;

/// Buffers kept per loop: more than the connections a loop serves at the same moment.
const KEPT: usize = 64;

/// A buffer larger than this (a big pipelined batch, a chunked body's coalesced output) is
/// freed instead of kept, so the spares stay small.
const LARGEST_KEPT: usize = 64 * 1024;

thread_local! {
    static SPARE: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for at least `room` bytes: a spare one when the loop has it.
pub(super) fn take(room: usize) -> BytesMut {
    let spare = SPARE
        .try_with(|spare| spare.borrow_mut().pop())
        .ok()
        .flatten();
    match spare {
        Some(mut buffer) => {
            // A spare is unique once the bytes split from it are gone, and then this
            // reclaims its whole allocation without allocating.
            buffer.reserve(room);
            buffer
        }
        None => BytesMut::with_capacity(room),
    }
}

/// Gives `buffer` back to the loop; what it held is discarded.
pub(super) fn give(mut buffer: BytesMut) {
    if buffer.capacity() == 0 || buffer.capacity() > LARGEST_KEPT {
        return;
    }
    buffer.clear();
    let _ = SPARE.try_with(|spare| {
        let mut spare = spare.borrow_mut();
        if spare.len() < KEPT {
            spare.push(buffer);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again_without_allocating() {
        let mut first = take(1024);
        first.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let head = first.split_to(18).freeze();
        let allocation = first.as_ptr() as usize - 18;
        drop(head);
        give(first);
        let again = take(1024);
        assert!(again.is_empty());
        assert!(again.capacity() >= 1024);
        assert_eq!(
            again.as_ptr() as usize,
            allocation,
            "the spare was reclaimed"
        );
    }

    #[test]
    fn large_buffers_are_not_kept() {
        give(BytesMut::with_capacity(LARGEST_KEPT + 1));
        assert!(take(16).capacity() < LARGEST_KEPT);
    }
}
