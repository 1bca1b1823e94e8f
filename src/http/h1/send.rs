//! Sending answers: the head (framed by [`super::framing`]) and the body, from memory, from
//! an open file with `sendfile(2)` or copied, or from the router's body stream.
//!
//! Small answers cost one `write`: the head is formatted into the connection's output
//! buffer and leaves with the body in one `writev`; pipelined answers leave together.
//! Large file bodies go out with `sendfile` after the head is sent with `MSG_MORE` (nginx's
//! `sendfile` plus `tcp_nopush`). `sendfile` runs on the event loop, like nginx without
//! `aio`: a file not in the page cache makes the loop wait for the disk.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use axum::body::Body;
use axum::http::Version;
use bytes::{BufMut, Bytes};
use http_body_util::BodyExt;
use tokio::io::Interest;

use super::conn::Connection;
use super::framing::{self, Framing, ResponseHead};
use super::spare;
use super::zerocopy;
use crate::http::service::{Answer, FileBody, Identity, Payload, RequestId, Segment, Service};

/// Answers (heads and small bodies) are collected up to this size before a write.
const OUTPUT_COALESCE: usize = 64 * 1024;

/// Bytes read per step when a file body is copied rather than sent with `sendfile`.
const COPY_CHUNK: usize = 256 * 1024;

/// How many bytes a paced body sends at once: a tenth of a second's worth when the client
/// got no free start (the pace alone feeds its buffer), otherwise half the free start, up to
/// two seconds' worth.
///
/// Why: each send wakes the connection's loop once. At 320 kbps a tenth of a second is 4 KB,
/// and 10,000 listeners made 100,000 wakeups a second; in one or two-second sends they make
/// 5,000-10,000. A chunk leaves only once the pace has earned its last byte, so the player
/// ahead by the free start (`after`) dips to at least half of it before the next send
/// arrives and never runs dry (the listener model of `musicctl players`).
fn pace_chunk(rate: u64, after: u64) -> u64 {
    let tenth = (rate / 10).max(4096);
    (after / 2).min(rate.saturating_mul(2)).max(tenth)
}

/// Why a file body could not be sent to the end.
enum FileSendError {
    /// The file changed, shrank or could not be read: worth a warning.
    File(io::Error),
    /// The client went away or stopped reading: routine.
    Client(io::Error),
}

impl<S: Service> Connection<S> {
    /// Sends a response. `Ok((body bytes, keep the connection))`, or `Err(body bytes
    /// sent)` when the transfer failed part-way and the connection must be dropped.
    pub(super) async fn respond(
        &mut self,
        answer: Answer,
        head: bool,
        keep_alive: bool,
        version: Version,
        request_id: &RequestId,
    ) -> Result<(u64, bool), u64> {
        let Answer {
            status,
            lines,
            headers,
            payload,
            declared_len,
            pacing,
        } = answer;
        let len = if head {
            declared_len.or_else(|| payload.exact_len())
        } else {
            payload.exact_len()
        };
        let decision = framing::decide(status, head, len, version, keep_alive);
        if self.output.capacity() == 0 {
            self.output = spare::take(lines.len() + framing::HEAD_ROOM);
        }
        let now = std::time::Instant::now();
        self.current = Some(now);
        framing::write_head(
            &mut self.output,
            &ResponseHead {
                status,
                lines: &lines,
                headers: &headers,
                decision,
                version,
                request_id,
                at: now,
            },
        );
        self.head_written = Some(now);
        self.pacing = pacing;
        self.paced_since = None;
        if !decision.send_body {
            return Ok((0, decision.keep_alive));
        }
        // Files and streamed bodies are boxed: their futures are the largest, and every
        // small answer would otherwise carry (and copy) their size.
        let sent = match payload {
            Payload::Empty => Ok(0),
            Payload::Bytes(bytes) => self.send_bytes(bytes).await,
            Payload::File(body) => {
                let FileBody {
                    file,
                    segments,
                    opened,
                } = *body;
                Box::pin(self.send_file(&file, segments, opened)).await
            }
            Payload::Body(body) => {
                // Its frames may not be ready: the clock is read again at the end.
                self.current = None;
                Box::pin(self.send_body(body, decision.framing == Framing::Chunked)).await
            }
        };
        sent.map(|bytes| (bytes, decision.keep_alive))
    }

    /// Sends `output` now, whatever it holds.
    pub(super) async fn flush(&mut self) -> io::Result<()> {
        if self.output.is_empty() {
            return Ok(());
        }
        let output = std::mem::take(&mut self.output);
        // Once written the buffer goes back to the loop, not kept: `flush` runs before the
        // connection waits for its next request, and a waiting connection holds nothing.
        let sent = self.send_all(&output, false).await;
        spare::give(output);
        sent
    }

    async fn send_bytes(&mut self, bytes: Bytes) -> Result<u64, u64> {
        let len = bytes.len() as u64;
        // Tiny bodies join the head; larger ones go out with it in one vectored write.
        if bytes.len() <= 1024 && self.output.len() + bytes.len() <= OUTPUT_COALESCE {
            self.output.put_slice(&bytes);
            return Ok(len);
        }
        let free = match self.pacing {
            Some(pacing) if len > pacing.after_bytes => pacing.after_bytes,
            _ => {
                let result = self.write_head_and(&bytes).await;
                return result.map(|()| len).map_err(|_| 0);
            }
        };
        // Paced: the head and the free part, then a chunk at a time.
        let mut sent = 0u64;
        let first = usize::try_from(free).unwrap_or(usize::MAX);
        self.write_head_and(&bytes[..first])
            .await
            .map_err(|_| 0u64)?;
        sent += first as u64;
        while sent < len {
            let want = self.pace(sent, len - sent).await;
            let start = sent as usize;
            let end = start
                + usize::try_from(want)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - start);
            self.send_all(&bytes[start..end], false)
                .await
                .map_err(|_| sent)?;
            sent = end as u64;
        }
        Ok(len)
    }

    /// How many of `left` body bytes may leave now, after `sent`: all of them without
    /// pacing or before its free start; otherwise a chunk ([`pace_chunk`]), once the clock
    /// allows its last byte (sleeping, never spinning), so the client never holds more than
    /// the free start plus the pace has earned.
    async fn pace(&mut self, sent: u64, left: u64) -> u64 {
        let Some(pacing) = self.pacing else {
            return left;
        };
        let (rate, after) = (pacing.rate_bytes_per_sec.get(), pacing.after_bytes);
        if sent < after {
            return left.min(after - sent);
        }
        let chunk = pace_chunk(rate, after).min(left);
        let started = *self.paced_since.get_or_insert_with(std::time::Instant::now);
        // The chunk may leave once `after + rate * elapsed` covers it.
        let due = Duration::from_secs_f64((sent + chunk - after) as f64 / rate as f64);
        let elapsed = started.elapsed();
        if due > elapsed {
            self.current = None;
            tokio::time::sleep(due - elapsed).await;
        }
        chunk
    }

    /// Writes `output` and then `body` with vectored writes, without copying the body.
    async fn write_head_and(&mut self, body: &[u8]) -> io::Result<()> {
        let output = std::mem::take(&mut self.output);
        let mut head = &output[..];
        let mut rest = body;
        while !head.is_empty() || !rest.is_empty() {
            let slices = [io::IoSlice::new(head), io::IoSlice::new(rest)];
            let stream = &self.stream;
            match stream.try_io(Interest::WRITABLE, || {
                zerocopy::send_vectored(stream.as_fd(), &slices)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(mut n) => {
                    let from_head = n.min(head.len());
                    head = &head[from_head..];
                    n -= from_head;
                    rest = &rest[n..];
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        spare::give(output);
        Ok(())
    }

    /// The head (with `MSG_MORE`, so it shares the first packet with the body), then every
    /// segment: file slices with `sendfile` (or copied, without `zero_copy`), part headers
    /// from memory. A file found changed since it was opened aborts the transfer.
    async fn send_file(
        &mut self,
        file: &File,
        segments: Vec<Segment>,
        opened: Identity,
    ) -> Result<u64, u64> {
        let zero_copy = self.shared.settings.zero_copy;
        let mut sent = 0u64;
        let output = std::mem::take(&mut self.output);
        let head = self.send_all(&output, true).await;
        spare::give(output);
        head.map_err(|_| 0u64)?;
        for segment in segments {
            let result = match segment {
                Segment::Bytes(bytes) => {
                    let written = self.send_all(&bytes, true).await;
                    sent += if written.is_ok() {
                        bytes.len() as u64
                    } else {
                        0
                    };
                    written.map_err(FileSendError::Client)
                }
                Segment::File { offset, len } if zero_copy => {
                    self.send_file_slice(file, offset, len, &mut sent).await
                }
                Segment::File { offset, len } => {
                    self.copy_file_slice(file, opened, offset, len, &mut sent)
                        .await
                }
            };
            match result {
                Ok(()) => {}
                Err(FileSendError::File(err)) => {
                    tracing::warn!(error = %err, "file transfer aborted");
                    self.shared.service.file_changed(file);
                    return Err(sent);
                }
                Err(FileSendError::Client(err)) => {
                    // Players seek and skip: a client leaving mid-file is routine.
                    tracing::debug!(error = %err, "client left during a file transfer");
                    return Err(sent);
                }
            }
        }
        if zero_copy && opened.changed(file) {
            // sendfile reads the page cache as the bytes leave: a file rewritten in place
            // meanwhile may have sent changed bytes. A reset makes the client discard the
            // transfer instead of keeping a body with a success status.
            tracing::warn!("file changed while it was being sent; resetting the connection");
            self.shared.service.file_changed(file);
            let _ = socket2::SockRef::from(&self.stream).set_linger(Some(Duration::ZERO));
            return Err(sent);
        }
        Ok(sent)
    }

    /// Sends a file slice by copying it through a buffer, checking after each read that
    /// the file is still the one opened, so a changed chunk is never sent.
    async fn copy_file_slice(
        &mut self,
        file: &File,
        opened: Identity,
        mut offset: u64,
        len: u64,
        sent: &mut u64,
    ) -> Result<(), FileSendError> {
        let mut buffer = vec![0u8; usize::try_from(len).unwrap_or(COPY_CHUNK).min(COPY_CHUNK)];
        let mut left = len;
        while left > 0 {
            let allowed = self.pace(*sent, left).await;
            let want = usize::try_from(left.min(allowed))
                .unwrap_or(usize::MAX)
                .min(buffer.len());
            let chunk = &mut buffer[..want];
            file.read_exact_at(chunk, offset).map_err(|err| {
                FileSendError::File(if err.kind() == io::ErrorKind::UnexpectedEof {
                    io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")
                } else {
                    err
                })
            })?;
            // A truncation updates the size before it zeroes pages, and a write the
            // modification time before it copies: a chunk read during either shows here.
            if opened.changed(file) {
                return Err(FileSendError::File(io::Error::other(
                    "file changed while being sent",
                )));
            }
            self.send_all(chunk, false)
                .await
                .map_err(FileSendError::Client)?;
            *sent += want as u64;
            offset += want as u64;
            left -= want as u64;
            tokio::task::consume_budget().await;
        }
        Ok(())
    }

    async fn send_file_slice(
        &mut self,
        file: &File,
        mut offset: u64,
        len: u64,
        sent: &mut u64,
    ) -> Result<(), FileSendError> {
        let mut left = len;
        while left > 0 {
            // One call moves at most what the socket buffer takes; the cap only keeps the
            // count within what sendfile accepts.
            let allowed = self.pace(*sent, left).await;
            let want = usize::try_from(left.min(allowed))
                .unwrap_or(usize::MAX)
                .min(1 << 30);
            match self.stream.try_io(Interest::WRITABLE, || {
                zerocopy::send_file(self.stream.as_fd(), file, offset, want)
            }) {
                Ok(0) => {
                    return Err(FileSendError::File(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "file shrank while being sent",
                    )));
                }
                Ok(n) => {
                    *sent += n as u64;
                    offset += n as u64;
                    left -= n as u64;
                    // A fast client must not keep the other connections of this loop
                    // waiting for a whole large file.
                    tokio::task::consume_budget().await;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.wait_writable().await.map_err(FileSendError::Client)?
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                // sendfile reports the socket's errors and the file's alike; a file that
                // cannot be read is the rare one.
                Err(err) if err.kind() == io::ErrorKind::InvalidInput => {
                    return Err(FileSendError::File(err));
                }
                Err(err) => return Err(FileSendError::Client(err)),
            }
        }
        Ok(())
    }

    /// Streams a router body, chunked when its length was not known up front.
    async fn send_body(&mut self, mut body: Body, chunked: bool) -> Result<u64, u64> {
        let mut sent = 0u64;
        loop {
            let frame = match body.frame().await {
                None => break,
                Some(Ok(frame)) => frame,
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "response body failed");
                    return Err(sent);
                }
            };
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if data.is_empty() {
                continue;
            }
            if chunked {
                let _ =
                    fmt::Write::write_fmt(&mut self.output, format_args!("{:x}\r\n", data.len()));
            }
            self.output.put_slice(&data);
            if chunked {
                self.output.put_slice(b"\r\n");
            }
            sent += data.len() as u64;
            if self.output.len() > OUTPUT_COALESCE && self.flush().await.is_err() {
                return Err(sent);
            }
        }
        if chunked {
            self.output.put_slice(b"0\r\n\r\n");
        }
        Ok(sent)
    }

    /// Sends all of `data`; with `more`, the kernel holds a partial packet back for what
    /// follows (`MSG_MORE`).
    pub(super) async fn send_all(&mut self, mut data: &[u8], more: bool) -> io::Result<()> {
        while !data.is_empty() {
            match self.stream.try_io(Interest::WRITABLE, || {
                zerocopy::send(self.stream.as_fd(), data, more)
            }) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.wait_writable().await?,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Waits until the socket takes bytes again, for at most the write timeout: a client
    /// that stopped reading is dropped instead of holding a file and a task forever.
    async fn wait_writable(&mut self) -> io::Result<()> {
        self.current = None;
        match tokio::time::timeout(self.shared.settings.write_timeout, self.stream.writable()).await
        {
            Ok(ready) => ready,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "client stopped reading",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::pace_chunk;

    #[test]
    fn a_paced_body_leaves_in_sends_of_up_to_two_seconds_within_half_the_free_start() {
        let rate = 40_000; // 320 kbps
        // No free start: a tenth of a second at a time (at least a page), as before.
        assert_eq!(pace_chunk(rate, 0), 4096);
        assert_eq!(pace_chunk(400_000, 0), 40_000);
        // A free start of 10 s of audio: sends of 2 s (the cap), never more than half of it.
        assert_eq!(pace_chunk(rate, 400_000), 80_000);
        // A free start of 1 s: half a second at a time.
        assert_eq!(pace_chunk(rate, 40_000), 20_000);
        // Slow paces still send at least a page.
        assert_eq!(pace_chunk(1_000, 0), 4096);
        for after in [0, 1, 4096, 100_000, 10_000_000, u64::MAX] {
            let chunk = pace_chunk(rate, after);
            assert!(chunk <= 2 * rate, "{after}: {chunk}");
            assert!(
                chunk <= after / 2 || chunk == 4096.max(rate / 10),
                "{after}: {chunk}"
            );
        }
    }
}
