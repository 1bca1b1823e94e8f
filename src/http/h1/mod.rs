//! HTTP/1.1 on the wire, as musicd speaks it itself (hyper has no `sendfile` path, and
//! its buffers cost more memory per connection than a file server should).
//!
//! Split the way hyper's `proto/h1` is, one job per file:
//! * [`head`]: request heads in (parse, limits, Host, target form, body framing, Expect);
//! * `request_body`: request bodies read to their end (Content-Length or chunked);
//! * `framing`: response heads out, and the one decision of how a body is delimited;
//! * `conn`: the connection's state machine and its clocks, staged close;
//! * `dispatch`: which handler answers (track route, router, 405/501);
//! * `send`: head and body senders (`writev`, `sendfile`, copies, router bodies);
//! * `busy`: the 503 for connections over the cap;
//! * `request_id`: `X-Request-Id`; `zerocopy`: the two syscalls.

pub(crate) mod busy;
pub(crate) mod conn;
mod dispatch;
pub(crate) mod framing;
pub mod head;
pub(crate) mod proxy_protocol;
pub(crate) mod request_body;
pub(crate) mod request_id;
mod send;
pub(crate) mod zerocopy;
