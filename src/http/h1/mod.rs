//! HTTP/1.1 on the wire, as musicd speaks it itself (hyper has no `sendfile` path, and
//! its buffers cost more memory per connection than a file server should).
//!
//! Split the way hyper's `proto/h1` is, one job per file, and like it knowing no route:
//! the one way up is [`Service::call`](crate::http::service::Service::call), with the
//! request read and the answer to send defined in [`crate::http::service`]. Nothing here
//! imports the application (a check in `scripts/test.sh` keeps it so).
//! * [`head`]: request heads in (parse, limits, Host, target form, body framing, Expect);
//! * `request_body`: request bodies read to their end (Content-Length or chunked);
//! * `framing`: response heads out, and the one decision of how a body is delimited;
//! * `conn`: the connection's state machine and its clocks, staged close;
//! * `send`: head and body senders (`writev`, `sendfile`, copies, pacing, router bodies);
//! * `busy`: the 503 for connections over the cap;
//! * `proxy_protocol`: the PROXY header a load balancer may put first;
//! * `spare`: the event loop's spare buffers, so a keep-alive request allocates none;
//! * `zerocopy`: the two syscalls.

pub(crate) mod busy;
pub(crate) mod conn;
pub(crate) mod framing;
pub mod head;
pub(crate) mod proxy_protocol;
pub(crate) mod request_body;
mod send;
mod spare;
pub(crate) mod zerocopy;

use std::time::Duration;

pub(crate) use head::HeadLimits;

/// How one connection is handled: the clocks, the head limits, and how files leave.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// How long a client may take to send its request head.
    pub(crate) header_read_timeout: Duration,
    /// How long a client may take to send a request body, from the end of its head.
    pub(crate) body_read_timeout: Duration,
    /// Idle keep-alive connections are closed after this.
    pub(crate) idle_timeout: Duration,
    /// A response whose client stops reading for this long is dropped.
    pub(crate) write_timeout: Duration,
    /// Size limits of a request head.
    pub(crate) head_limits: HeadLimits,
    /// Connections start with a PROXY protocol header.
    pub(crate) proxy_protocol: bool,
    /// File bodies leave with `sendfile(2)`; otherwise they are copied through a buffer.
    pub(crate) zero_copy: bool,
    /// `TCP_NOTSENT_LOWAT` of every accepted socket (0: left to the kernel).
    pub(crate) socket_unsent_bytes: u32,
}

impl Settings {
    /// The settings a config asks for.
    pub fn from_config(config: &crate::config::Config) -> Settings {
        Settings {
            header_read_timeout: config.limits.header_read_timeout,
            body_read_timeout: config.limits.body_read_timeout,
            idle_timeout: config.limits.idle_timeout,
            write_timeout: config.limits.write_timeout,
            head_limits: HeadLimits {
                max_uri_bytes: config.limits.max_uri_bytes,
                max_header_bytes: config.limits.max_header_bytes,
            },
            proxy_protocol: config.proxy_protocol,
            zero_copy: config.zero_copy,
            socket_unsent_bytes: config.limits.socket_unsent_bytes,
        }
    }
}
