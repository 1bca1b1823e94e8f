//! The accept loop: connections in, each served by `super::h1::conn` on the event loop
//! that accepted it, up to `max_connections` (beyond, `super::h1::busy`); on shutdown,
//! stop accepting and let in-flight responses finish for at most the grace period.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::TcpListener;

use super::App;
use super::access_log::LogBuffer;
use super::client::TrustedProxies;
use super::h1::{busy, conn, head::HeadLimits};
use super::metrics;

/// What a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRole {
    /// Everything (no `ops_listen`).
    All,
    /// Tracks and `/healthz`; `/metrics` and `/readyz` are on the ops listener.
    Public,
    /// The ops endpoints only (`ops_listen`).
    Ops,
}

/// Limits of the connection handling.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long in-flight responses may finish after shutdown starts.
    pub grace: Duration,
    /// How long a client may take to send its request headers.
    pub header_read_timeout: Duration,
    /// How long a client may take to send a request body, from the end of its head.
    pub body_read_timeout: Duration,
    /// Where to count open connections, if anywhere.
    pub metrics: Option<Arc<metrics::Metrics>>,
    /// Idle keep-alive connections are closed after this.
    pub idle_timeout: Duration,
    /// A response whose client stops reading for this long is dropped.
    pub write_timeout: Duration,
    /// Largest request head accepted (431 beyond).
    pub max_header_bytes: usize,
    /// Longest URL accepted (414 beyond).
    pub max_uri_bytes: usize,
    /// Connections served at once; beyond, a 503 and close. The slots are shared by every
    /// listener and event loop these options are cloned to, so the cap is per process.
    pub connection_slots: Arc<tokio::sync::Semaphore>,
    /// Peers whose forwarding headers name the client.
    pub trusted_proxies: Arc<TrustedProxies>,
    /// Connections start with a PROXY protocol header.
    pub proxy_protocol: bool,
    /// What this listener serves.
    pub role: ListenerRole,
    /// The event loops accepting on this socket, and which one this is: a loop holding
    /// more than its share of connections lets the others accept (see [`LoopBalance`]).
    pub balance: Option<(Arc<LoopBalance>, usize)>,
}

/// Spreads connections over event loops that accept on one socket.
///
/// Every loop polls the same listening socket, and the kernel wakes them all for each
/// connection; whichever runs first takes it. Under a burst of connects (a player fleet
/// reconnecting, wrk starting) one loop could take most of them and keep them for the
/// life of the keep-alive connections: that loop's core saturates while the other idles,
/// and tail latency doubles. Like nginx's `accept_mutex`/`accept_disabled`, a loop that
/// holds more than one connection above the least loaded loop stops accepting for a
/// moment and leaves the queue to the others. `SO_REUSEPORT` would balance by hash
/// instead, but needs a socket per loop, which the supervisor's and systemd's single
/// inherited socket do not give.
#[derive(Debug)]
pub struct LoopBalance {
    live: Box<[std::sync::atomic::AtomicUsize]>,
    /// Loops that are accepting now: one that never started or has stopped must not make
    /// the others wait for it.
    accepting: Box<[std::sync::atomic::AtomicBool]>,
}

impl LoopBalance {
    /// For `loops` event loops.
    pub fn new(loops: usize) -> LoopBalance {
        LoopBalance {
            live: (0..loops.max(1)).map(|_| Default::default()).collect(),
            accepting: (0..loops.max(1)).map(|_| Default::default()).collect(),
        }
    }

    /// Whether loop `me` should leave the next connection to a less loaded loop.
    fn over_share(&self, me: usize) -> bool {
        let load = |i: usize| self.live.get(i).map_or(0, |n| n.load(Ordering::Relaxed));
        let least = (0..self.live.len())
            .filter(|&i| self.accepting[i].load(Ordering::Relaxed))
            .map(load)
            .min()
            .unwrap_or(0);
        load(me) > least + 1
    }

    fn set_accepting(&self, me: usize, accepting: bool) {
        if let Some(flag) = self.accepting.get(me) {
            flag.store(accepting, Ordering::Relaxed);
        }
    }

    fn add(&self, me: usize, delta: isize) {
        if let Some(n) = self.live.get(me) {
            if delta > 0 {
                n.fetch_add(1, Ordering::Relaxed);
            } else {
                n.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

/// How long a loop over its share waits before looking at the queue again.
const YIELD_ACCEPT: Duration = Duration::from_micros(500);

impl ServeOptions {
    /// The options a config asks for.
    pub fn from_config(config: &crate::config::Config) -> ServeOptions {
        ServeOptions {
            grace: config.daemon.stop_timeout,
            header_read_timeout: config.limits.header_read_timeout,
            body_read_timeout: config.limits.body_read_timeout,
            metrics: None,
            idle_timeout: config.limits.idle_timeout,
            write_timeout: config.limits.write_timeout,
            max_header_bytes: config.limits.max_header_bytes,
            max_uri_bytes: config.limits.max_uri_bytes,
            connection_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.max_connections)),
            trusted_proxies: Arc::new(TrustedProxies::new(config.trusted_proxies.clone())),
            proxy_protocol: config.proxy_protocol,
            role: if config.ops_listen.is_some() {
                ListenerRole::Public
            } else {
                ListenerRole::All
            },
            balance: None,
        }
    }
}

/// Counts live connections; the last one out wakes the drain.
#[derive(Clone, Default)]
struct Connections {
    live: Arc<std::sync::atomic::AtomicUsize>,
    drained: Arc<tokio::sync::Notify>,
    metrics: Option<Arc<metrics::Metrics>>,
    balance: Option<(Arc<LoopBalance>, usize)>,
}

struct ConnectionGuard(Connections);

impl Connections {
    fn enter(&self) -> ConnectionGuard {
        self.live.fetch_add(1, Ordering::SeqCst);
        if let Some(metrics) = &self.metrics {
            metrics.connections(1);
        }
        if let Some((balance, me)) = &self.balance {
            balance.add(*me, 1);
        }
        ConnectionGuard(self.clone())
    }

    fn count(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        if let Some(metrics) = &self.0.metrics {
            metrics.connections(-1);
        }
        if let Some((balance, me)) = &self.0.balance {
            balance.add(*me, -1);
        }
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting and lets
/// in-flight responses finish for at most `options.grace`.
pub async fn serve(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> std::io::Result<()> {
    let slots = Arc::clone(&options.connection_slots);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = Connections {
        metrics: options.metrics.clone(),
        balance: options.balance.clone(),
        ..Connections::default()
    };
    let grace = options.grace;
    // One buffer per call, so per event loop in `musicd run`: its lock is never contended.
    let log = app
        .state
        .access_log
        .as_ref()
        .map(|log| Arc::new(LogBuffer::new(Arc::clone(log))));
    let flusher = log
        .as_ref()
        .map(|log| tokio::spawn(Arc::clone(log).flush_every_interval()));
    let shared = Arc::new(conn::Shared {
        app,
        limits: HeadLimits {
            max_uri_bytes: options.max_uri_bytes,
            max_header_bytes: options.max_header_bytes,
        },
        options,
        log: log.clone(),
    });
    tokio::pin!(shutdown);
    let mut accept_backoff = Duration::from_millis(5);
    if let Some((balance, me)) = &shared.options.balance {
        balance.set_accepting(*me, true);
    }
    loop {
        if let Some((balance, me)) = &shared.options.balance
            && balance.over_share(*me)
        {
            tokio::select! {
                () = tokio::time::sleep(YIELD_ACCEPT) => continue,
                () = &mut shutdown => break,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => {
                accept_backoff = Duration::from_millis(5);
                pair
            }
            Err(err) => {
                // Out of file descriptors and similar: wait and retry rather than spin.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(accept_backoff).await;
                accept_backoff = (accept_backoff * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        // Small responses wait 40 ms for delayed ACKs without this.
        let _ = stream.set_nodelay(true);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: a short, cheap refusal instead of an unbounded pile of tasks.
            tokio::spawn(busy::refuse_over_cap(stream));
            continue;
        };
        let guard = connections.enter();
        let shared = Arc::clone(&shared);
        let stop = stop_rx.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let _slot = slot;
            conn::serve_connection(stream, peer, shared, stop).await;
        });
    }
    drop(listener);
    if let Some((balance, me)) = &shared.options.balance {
        balance.set_accepting(*me, false);
    }
    let _ = stop_tx.send(true);
    let deadline = tokio::time::Instant::now() + grace;
    loop {
        let drained = connections.drained.notified();
        if connections.count() == 0 {
            tracing::info!("all connections drained");
            break;
        }
        tokio::select! {
            () = drained => {}
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(?grace, open = connections.count(), "shutdown grace expired, closing remaining connections");
                break;
            }
        }
    }
    if let Some(flusher) = flusher {
        flusher.abort();
    }
    // Every exchange that finished has its line.
    if let Some(log) = &log {
        log.flush();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::LoopBalance;

    #[test]
    fn a_loop_more_than_one_ahead_of_the_least_loaded_leaves_the_next_connection() {
        let balance = LoopBalance::new(2);
        balance.set_accepting(0, true);
        balance.set_accepting(1, true);
        balance.add(0, 1);
        assert!(!balance.over_share(0), "1 against 0: one ahead is fair");
        balance.add(0, 1);
        assert!(balance.over_share(0), "2 against 0");
        assert!(!balance.over_share(1), "the least loaded never waits");
        balance.add(1, 1);
        assert!(!balance.over_share(0), "2 against 1");
        balance.add(1, -1);
        assert!(balance.over_share(0), "closed connections count down");
    }

    #[test]
    fn a_loop_that_is_not_accepting_makes_nobody_wait() {
        let balance = LoopBalance::new(2);
        balance.set_accepting(0, true);
        for _ in 0..10 {
            balance.add(0, 1);
        }
        assert!(!balance.over_share(0), "loop 1 never started");
        balance.set_accepting(1, true);
        assert!(balance.over_share(0));
        balance.set_accepting(1, false);
        assert!(!balance.over_share(0), "loop 1 stopped");
    }
}
