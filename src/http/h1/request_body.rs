//! Request bodies: read to their end and dropped, framed by `Content-Length` or chunked.
//!
//! musicd's routes take no body, but a request may still carry one, and the next request
//! starts where it ends: a body read wrongly is how a connection desynchronises (request
//! smuggling). [`BodyReader`] consumes exactly one body from the connection's buffer and
//! says when it ended; anything it cannot frame with certainty is an error that closes the
//! connection. Bodies are bounded by [`MAX_DISCARDED_BODY`] bytes of data, chunk lines and
//! trailers by [`MAX_CHUNK_LINE`] and [`MAX_TRAILERS`].

use bytes::{Buf, BytesMut};

use super::head::{BodyFraming, HeadError, MAX_DISCARDED_BODY};

/// Longest chunk-size line (with extensions) accepted.
pub(crate) const MAX_CHUNK_LINE: usize = 1024;

/// Most bytes of trailer fields accepted after the last chunk.
pub(crate) const MAX_TRAILERS: usize = 8 * 1024;

/// Reads one request body out of the connection's input.
#[derive(Debug)]
pub(crate) enum BodyReader {
    /// This many bytes are still to come.
    Length(u64),
    /// A chunked body, part-way.
    Chunked(Chunked),
}

/// Where a chunked body is.
#[derive(Debug, Default)]
pub(crate) struct Chunked {
    state: ChunkState,
    data: u64,
    trailers: usize,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    #[default]
    Size,
    /// Inside a chunk's data, this many bytes left.
    Data(u64),
    /// Expecting the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
}

impl BodyReader {
    /// The reader for a body framed this way; `None` when there is no body.
    pub(crate) fn new(framing: BodyFraming) -> Option<BodyReader> {
        match framing {
            BodyFraming::None => None,
            BodyFraming::Length(length) => Some(BodyReader::Length(length)),
            BodyFraming::Chunked => Some(BodyReader::Chunked(Chunked::default())),
        }
    }

    /// Consumes what `input` holds of the body. `Ok(true)`: the body ended (what follows in
    /// `input` is the next request); `Ok(false)`: more is needed.
    pub(crate) fn consume(&mut self, input: &mut BytesMut) -> Result<bool, HeadError> {
        match self {
            BodyReader::Length(remaining) => {
                let here = (*remaining).min(input.len() as u64) as usize;
                input.advance(here);
                *remaining -= here as u64;
                Ok(*remaining == 0)
            }
            BodyReader::Chunked(chunked) => chunked.consume(input),
        }
    }
}

impl Chunked {
    fn consume(&mut self, input: &mut BytesMut) -> Result<bool, HeadError> {
        loop {
            match self.state {
                ChunkState::Size => {
                    // An empty size (httparse reads it as 0) would end the body early.
                    if input.first().is_some_and(|b| !b.is_ascii_hexdigit()) {
                        return Err(HeadError::BodyFraming);
                    }
                    match httparse::parse_chunk_size(input) {
                        Ok(httparse::Status::Complete((used, size))) => {
                            input.advance(used);
                            self.data = self.data.saturating_add(size);
                            if self.data > MAX_DISCARDED_BODY {
                                return Err(HeadError::BodyTooLarge);
                            }
                            self.state = if size == 0 {
                                ChunkState::Trailers
                            } else {
                                ChunkState::Data(size)
                            };
                        }
                        Ok(httparse::Status::Partial) if input.len() <= MAX_CHUNK_LINE => {
                            return Ok(false);
                        }
                        Ok(httparse::Status::Partial) | Err(_) => {
                            return Err(HeadError::BodyFraming);
                        }
                    }
                }
                ChunkState::Data(left) => {
                    let here = left.min(input.len() as u64);
                    input.advance(here as usize);
                    if here < left {
                        self.state = ChunkState::Data(left - here);
                        return Ok(false);
                    }
                    self.state = ChunkState::DataEnd;
                }
                ChunkState::DataEnd => {
                    match input.get(..2) {
                        None if input.first().is_none_or(|b| *b == b'\r') => return Ok(false),
                        Some(b"\r\n") => input.advance(2),
                        _ => return Err(HeadError::BodyFraming),
                    }
                    self.state = ChunkState::Size;
                }
                ChunkState::Trailers => {
                    let Some(end) = input.windows(2).position(|w| w == b"\r\n") else {
                        if self.trailers + input.len() > MAX_TRAILERS {
                            return Err(HeadError::TooLarge);
                        }
                        return Ok(false);
                    };
                    input.advance(end + 2);
                    if end == 0 {
                        return Ok(true);
                    }
                    self.trailers += end + 2;
                    if self.trailers > MAX_TRAILERS {
                        return Err(HeadError::TooLarge);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes; the result and what is left over.
    fn read(wire: &[u8], step: usize) -> (Result<bool, HeadError>, Vec<u8>) {
        let mut reader = BodyReader::new(BodyFraming::Chunked).expect("a body");
        let mut input = BytesMut::new();
        for piece in wire.chunks(step) {
            input.extend_from_slice(piece);
            match reader.consume(&mut input) {
                Ok(false) => {}
                other => return (other, input.to_vec()),
            }
        }
        (Ok(false), input.to_vec())
    }

    #[test]
    fn chunked_bodies_end_exactly_where_they_end_however_they_arrive() {
        let wire = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\nGET /next";
        for step in [1, 2, 3, 7, wire.len()] {
            let (result, rest) = read(wire, step);
            assert_eq!(result, Ok(true), "step {step}");
            // Done exactly at the body's end: only (a start of) the next request is left.
            assert!(b"GET /next".starts_with(&rest), "step {step}: {rest:?}");
        }
        assert_eq!(read(wire, wire.len()).1, b"GET /next");
        let (result, rest) = read(b"0\r\n\r\nGET", 100);
        assert_eq!((result, rest), (Ok(true), b"GET".to_vec()));
    }

    #[test]
    fn ambiguous_chunk_framing_is_refused() {
        for bad in [
            &b"\r\n\r\n"[..],
            b"x\r\n",
            b"5\r\nhelloXX",
            b"5\nhello\r\n0\r\n\r\n",
            b"-1\r\n",
            b"ffffffffffffffffff\r\n",
            b" 5\r\nhello\r\n",
        ] {
            assert_eq!(read(bad, 100).0, Err(HeadError::BodyFraming), "{bad:?}");
        }
        assert_eq!(read(b"10001\r\n", 100).0, Err(HeadError::BodyTooLarge));
        let long = [b"1;".as_slice(), &[b'a'; 2000]].concat();
        assert_eq!(read(&long, 100).0, Err(HeadError::BodyFraming));
        let trailers = [b"0\r\n".as_slice(), &[b'a'; 9000]].concat();
        assert_eq!(read(&trailers, 100).0, Err(HeadError::TooLarge));
    }

    #[test]
    fn a_length_body_takes_exactly_its_bytes() {
        let mut reader = BodyReader::new(BodyFraming::Length(4)).expect("a body");
        let mut input = BytesMut::from(&b"ab"[..]);
        assert_eq!(reader.consume(&mut input), Ok(false));
        input.extend_from_slice(b"cdGET");
        assert_eq!(reader.consume(&mut input), Ok(true));
        assert_eq!(&input[..], b"GET");
        assert!(BodyReader::new(BodyFraming::None).is_none());
    }
}
