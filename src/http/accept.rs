//! The accept loop: connections in, each served by `super::h1::conn` on the event loop
//! that accepted it, up to `max_connections` (beyond, `super::h1::busy`); on shutdown,
//! stop accepting and let in-flight responses finish for at most the grace period.
//!
//! Like h1 it knows no route: it is generic over the [`Service`] its connections call.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::net::TcpListener;

use super::h1::{Settings, busy, conn};
use super::service::Service;

/// Who gets in: the connection cap and the 503 answers beyond it, the event loops' balance,
/// and how long a stop waits for connections in flight. Cloned to every listener and
/// event loop of a process, so the cap is per process.
#[derive(Debug, Clone)]
pub struct Admission {
    /// How long in-flight responses may finish after shutdown starts.
    pub(crate) grace: Duration,
    /// Connections served at once; beyond, a 503 and close.
    pub(crate) connection_slots: Arc<tokio::sync::Semaphore>,
    /// Over-capacity answers being written at once (each holds a descriptor until its 503
    /// is out and the close staged). When they are all busy too, new connections wait in
    /// the kernel's queue: a slow answer, never a refused connection, and the descriptors
    /// a served request needs to open its file stay free.
    pub(crate) refusal_slots: Arc<tokio::sync::Semaphore>,
    /// Where to count open connections, if anywhere (`musicd_open_connections`).
    pub(crate) open_connections: Option<Arc<AtomicI64>>,
    /// The event loops accepting on this socket, and which one this is: a loop holding
    /// more than its share of connections lets the others accept (see [`LoopBalance`]).
    pub(crate) balance: Option<(Arc<LoopBalance>, usize)>,
}

impl Admission {
    /// The admission a config asks for, counted nowhere and balanced with no other loop.
    pub fn from_config(config: &crate::config::Config) -> Admission {
        Admission {
            grace: config.daemon.stop_timeout,
            connection_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.max_connections)),
            refusal_slots: Arc::new(tokio::sync::Semaphore::new(
                (config.limits.max_connections / 4).max(32),
            )),
            open_connections: None,
            balance: None,
        }
    }
}

/// Spreads connections over event loops that accept on one socket.
///
/// Every loop polls the same listening socket, and the kernel wakes them all for each
/// connection; whichever runs first takes it. Under a burst of connects (a player fleet
/// reconnecting, wrk starting) one loop could take most of them and keep them for the
/// life of the keep-alive connections: that loop's core saturates while the other idles,
/// and tail latency doubles. So a loop that accepts a connection while it holds more than
/// one above the least loaded loop hands it over to that loop (a channel send; the socket
/// moves to the other loop's reactor). Accepting never slows down: an earlier version
/// that instead stopped accepting while ahead (nginx's `accept_mutex` idea) measured a
/// 130-270 ms p99 at a 1,000-connection burst, against 25-40 ms. `SO_REUSEPORT` would
/// balance by hash instead, but needs a socket per loop, which the supervisor's and
/// systemd's single inherited socket do not give.
#[derive(Debug)]
pub(crate) struct LoopBalance {
    live: Box<[std::sync::atomic::AtomicUsize]>,
    /// Loops that are accepting now: one that never started or has stopped gets nothing.
    accepting: Box<[std::sync::atomic::AtomicBool]>,
    senders: Box<[tokio::sync::mpsc::UnboundedSender<Handoff>]>,
    inboxes: Box<[std::sync::Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Handoff>>>]>,
}

/// A connection accepted by one loop for another: the socket, its peer, its slot.
type Handoff = (
    std::net::TcpStream,
    std::net::SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
);

impl LoopBalance {
    /// For `loops` event loops.
    pub(crate) fn new(loops: usize) -> LoopBalance {
        let loops = loops.max(1);
        let (senders, inboxes): (Vec<_>, Vec<_>) = (0..loops)
            .map(|_| {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (tx, std::sync::Mutex::new(Some(rx)))
            })
            .unzip();
        LoopBalance {
            live: (0..loops).map(|_| Default::default()).collect(),
            accepting: (0..loops).map(|_| Default::default()).collect(),
            senders: senders.into(),
            inboxes: inboxes.into(),
        }
    }

    /// The loop that should serve a connection loop `me` just accepted, when not `me`:
    /// the least loaded accepting loop, if `me` holds more than one connection above it.
    fn destination(&self, me: usize) -> Option<usize> {
        let load = |i: usize| self.live.get(i).map_or(0, |n| n.load(Ordering::Relaxed));
        let least = (0..self.live.len())
            .filter(|&i| i != me && self.accepting[i].load(Ordering::Relaxed))
            .min_by_key(|&i| load(i))?;
        (load(me) > load(least) + 1).then_some(least)
    }

    /// Sends a connection to loop `to`, counted there at once so the next decision sees
    /// it; gives it back when that loop has stopped.
    fn hand_off(&self, to: usize, handoff: Handoff) -> Result<(), Handoff> {
        self.add(to, 1);
        self.senders[to].send(handoff).map_err(|returned| {
            self.add(to, -1);
            returned.0
        })
    }

    fn take_inbox(&self, me: usize) -> Option<tokio::sync::mpsc::UnboundedReceiver<Handoff>> {
        self.inboxes
            .get(me)?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
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

/// The next connection handed to this loop; never, without an inbox.
async fn next_handoff(
    inbox: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Handoff>>,
) -> Option<Handoff> {
    match inbox {
        Some(inbox) => inbox.recv().await,
        None => std::future::pending().await,
    }
}

/// Counts live connections; the last one out wakes the drain.
#[derive(Clone, Default)]
struct Connections {
    live: Arc<std::sync::atomic::AtomicUsize>,
    drained: Arc<tokio::sync::Notify>,
    open_connections: Option<Arc<AtomicI64>>,
    balance: Option<(Arc<LoopBalance>, usize)>,
}

struct ConnectionGuard(Connections);

impl Connections {
    /// A connection this loop serves; `counted` when the balance already counted it here
    /// (handed over by another loop).
    fn enter(&self, counted: bool) -> ConnectionGuard {
        self.live.fetch_add(1, Ordering::SeqCst);
        if let Some(open) = &self.open_connections {
            open.fetch_add(1, Ordering::Relaxed);
        }
        if let Some((balance, me)) = &self.balance
            && !counted
        {
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
        if let Some(open) = &self.0.open_connections {
            open.fetch_sub(1, Ordering::Relaxed);
        }
        if let Some((balance, me)) = &self.0.balance {
            balance.add(*me, -1);
        }
        if self.0.live.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Bounds the bytes a socket holds not yet sent (`TCP_NOTSENT_LOWAT`), so the socket reads
/// as writable only when that much is left, and a large file is topped up as the client
/// takes it instead of filling megabytes of send buffer at once.
///
/// Why, measured on loopback (bench/results/large-files.md): with the buffer full, each ACK
/// transmits the queued bytes from softirq context, billed to whoever received the ACK
/// (often the client); bounded, `sendfile` transmits in the server's own call. A 4 MiB file
/// then leaves 1.6x faster for 0.6x the machine's CPU per GB. Thousands of slow listeners
/// also stop holding megabytes of kernel memory each, which under TCP memory pressure
/// made the kernel reset connections (`TCPAbortOnMemory`).
fn set_unsent_bound(stream: &tokio::net::TcpStream, bytes: u32) {
    if bytes > 0 {
        let _ = socket2::SockRef::from(stream).set_tcp_notsent_lowat(bytes);
    }
}

fn spawn_connection<S: Service>(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    slot: tokio::sync::OwnedSemaphorePermit,
    connections: &Connections,
    counted: bool,
    shared: &Arc<conn::Shared<S>>,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    let guard = connections.enter(counted);
    let (shared, stop) = (Arc::clone(shared), stop.clone());
    tokio::spawn(async move {
        let _guard = guard;
        let _slot = slot;
        conn::serve_connection(stream, peer, shared, stop).await;
    });
}

/// Serves a connection another loop handed over (already counted here); one that cannot
/// join this loop's reactor gives its count back.
fn adopt<S: Service>(
    (stream, peer, slot): Handoff,
    connections: &Connections,
    shared: &Arc<conn::Shared<S>>,
    stop: &tokio::sync::watch::Receiver<bool>,
) {
    match tokio::net::TcpStream::from_std(stream) {
        Ok(stream) => spawn_connection(stream, peer, slot, connections, true, shared, stop),
        Err(err) => {
            tracing::warn!(error = %err, "a handed-over connection could not join this loop");
            if let Some((balance, me)) = &connections.balance {
                balance.add(*me, -1);
            }
        }
    }
}

/// The connection back when this loop serves it: no balance, its fair share, or the loop
/// it was handed to has stopped meanwhile. `None`: handed over (or lost in the move).
fn keep_or_hand_off(
    balance: &Option<(Arc<LoopBalance>, usize)>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Option<(tokio::net::TcpStream, tokio::sync::OwnedSemaphorePermit)> {
    let Some((balance, me)) = balance else {
        return Some((stream, slot));
    };
    let Some(to) = balance.destination(*me) else {
        return Some((stream, slot));
    };
    match balance.hand_off(to, (stream.into_std().ok()?, peer, slot)) {
        Ok(()) => None,
        Err((stream, _, slot)) => Some((tokio::net::TcpStream::from_std(stream).ok()?, slot)),
    }
}

/// Serves `service` on `listener` until `shutdown` completes, then stops accepting and
/// lets in-flight responses finish for at most `admission.grace`.
pub async fn accept_loop<S: Service>(
    listener: TcpListener,
    service: S,
    settings: Settings,
    admission: Admission,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::clone(&admission.connection_slots);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let connections = Connections {
        open_connections: admission.open_connections.clone(),
        balance: admission.balance.clone(),
        ..Connections::default()
    };
    let grace = admission.grace;
    let shared = Arc::new(conn::Shared { service, settings });
    tokio::pin!(shutdown);
    let mut accept_backoff =
        crate::timing::Backoff::new(Duration::from_millis(5), Duration::from_secs(1));
    let mut inbox = admission
        .balance
        .as_ref()
        .and_then(|(balance, me)| balance.take_inbox(*me));
    if let Some((balance, me)) = &admission.balance {
        balance.set_accepting(*me, true);
    }
    let refusals = Arc::clone(&admission.refusal_slots);
    loop {
        if slots.available_permits() == 0 && refusals.available_permits() == 0 {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(2)) => continue,
                () = &mut shutdown => break,
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(handoff) = next_handoff(&mut inbox) => {
                adopt(handoff, &connections, &shared, &stop_rx);
                continue;
            }
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => {
                accept_backoff.reset();
                pair
            }
            Err(err) => {
                // Out of file descriptors and similar: wait and retry rather than spin.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(accept_backoff.next_pause()).await;
                continue;
            }
        };
        // Small responses wait 40 ms for delayed ACKs without this.
        let _ = stream.set_nodelay(true);
        set_unsent_bound(&stream, shared.settings.socket_unsent_bytes);
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            // Over the cap: a short, cheap refusal instead of an unbounded pile of tasks.
            let refusal = Arc::clone(&refusals).try_acquire_owned().ok();
            tokio::spawn(async move {
                let _refusal = refusal;
                busy::refuse_over_cap(stream).await;
            });
            continue;
        };
        let Some((stream, slot)) = keep_or_hand_off(&admission.balance, stream, peer, slot) else {
            continue;
        };
        spawn_connection(stream, peer, slot, &connections, false, &shared, &stop_rx);
    }
    drop(listener);
    if let Some((balance, me)) = &admission.balance {
        balance.set_accepting(*me, false);
        // Closed first, so a loop that sends from now on gets its connection back and
        // serves it itself; the ones already here were accepted and are served like any
        // connection accepted just before the stop (found by the supervisor's restart
        // test: dropping them reset a client).
        if let Some(inbox) = inbox.as_mut() {
            inbox.close();
            while let Ok(handoff) = inbox.try_recv() {
                adopt(handoff, &connections, &shared, &stop_rx);
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::LoopBalance;

    #[test]
    fn a_loop_more_than_one_ahead_hands_the_next_connection_to_the_least_loaded() {
        let balance = LoopBalance::new(3);
        for me in 0..3 {
            balance.set_accepting(me, true);
        }
        balance.add(0, 1);
        assert_eq!(
            balance.destination(0),
            None,
            "1 against 0: one ahead is fair"
        );
        balance.add(0, 1);
        balance.add(1, 1);
        assert_eq!(
            balance.destination(0),
            Some(2),
            "2 against 0: to the least loaded"
        );
        assert_eq!(
            balance.destination(2),
            None,
            "the least loaded keeps its own"
        );
        balance.add(2, 1);
        assert_eq!(balance.destination(0), None, "2 against 1");
        balance.add(1, -1);
        assert_eq!(
            balance.destination(0),
            Some(1),
            "closed connections count down"
        );
    }

    #[test]
    fn a_loop_that_is_not_accepting_gets_nothing() {
        let balance = LoopBalance::new(2);
        balance.set_accepting(0, true);
        for _ in 0..10 {
            balance.add(0, 1);
        }
        assert_eq!(balance.destination(0), None, "loop 1 never started");
        balance.set_accepting(1, true);
        assert_eq!(balance.destination(0), Some(1));
        balance.set_accepting(1, false);
        assert_eq!(balance.destination(0), None, "loop 1 stopped");
    }
}
