//! The front door: musicd built from a [`Config`] and served on its listeners. `musicd run`
//! (and so the supervisor's worker), the integration tests and the fuzz target all start
//! the server through [`Server::build`] and [`Server::serve`], so what they exercise is
//! what production runs: the per-core event loops, the ops listener, the access-log
//! buffers, the eviction subscriber and the change-stream follower.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::http::accept::{self, Admission, LoopBalance};
use crate::http::access_log::LogBuffer;
use crate::http::app::{App, ListenerRole};
use crate::http::client_ip::TrustedProxies;
use crate::http::endpoint::Endpoint;
use crate::http::h1::Settings;
use crate::http::{AppState, ServerError};

/// The listening sockets of a server.
pub struct Listeners {
    /// The public address (`listen`), already listening.
    pub http: TcpListener,
    /// The ops address (`ops_listen`), when configured.
    pub ops: Option<std::net::TcpListener>,
}

/// musicd, built and ready to serve.
pub struct Server {
    config: Config,
    app: App,
}

impl Server {
    /// Builds the state (resolver, file cache, access log) from a validated config.
    /// Connects to nothing: backends are reached on first use, so the server starts even
    /// while they are down.
    pub async fn build(config: &Config) -> Result<Server, ServerError> {
        let state = AppState::new(config).await?;
        Ok(Server {
            app: App::new(state, &config.route_prefixes),
            config: config.clone(),
        })
    }

    /// The state every request shares (readiness at start, the access log for SIGUSR1).
    pub(crate) fn state(&self) -> &AppState {
        &self.app.state
    }

    /// Serves until `shutdown` completes, then drains: one single-threaded event loop per
    /// core (`worker_threads`), this task being the first, plus the ops listener, the
    /// eviction subscriber and the change-stream follower on this loop.
    pub async fn serve(
        self,
        listeners: Listeners,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), ServerError> {
        let Server { config, app } = self;
        let config = &config;
        let Listeners {
            http: listener,
            ops: ops_listener,
        } = listeners;
        let settings = Settings::from_config(config);
        let trusted = Arc::new(TrustedProxies::new(config.trusted_proxies.clone()));
        let balance = Arc::new(LoopBalance::new(config.worker_threads));
        let admission = Admission {
            open_connections: Some(app.state.metrics.open_connections()),
            balance: Some((Arc::clone(&balance), 0)),
            ..Admission::from_config(config)
        };
        let public_role = if config.ops_listen.is_some() {
            ListenerRole::Public
        } else {
            ListenerRole::All
        };
        let loop_of = |app: &App, role, admission: Admission| LoopListener {
            app: app.clone(),
            role,
            settings,
            admission,
            trusted: Arc::clone(&trusted),
        };

        // One single-threaded event loop per core, each accepting on its own descriptor of
        // the same socket, like nginx's worker processes. Against tokio's work-stealing
        // scheduler this avoided most cross-thread wake-ups and measured ~20 % more
        // small-file requests per second on two cores. Shared state (caches, Redis and
        // MongoDB clients) is thread-safe; the clients' background tasks live on this
        // first loop.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let stopped = |mut stop: tokio::sync::watch::Receiver<bool>| async move {
            let _ = stop.wait_for(|stopping| *stopping).await;
        };
        // The ops endpoints on their own address: one more accept loop on this event loop.
        let ops_server = match ops_listener {
            Some(listener) => {
                listener.set_nonblocking(true)?;
                let listener = TcpListener::from_std(listener)?;
                tracing::info!(ops_listen = ?listener.local_addr().ok(), "ops endpoints on their own address");
                let ops = loop_of(
                    &app,
                    ListenerRole::Ops,
                    Admission {
                        balance: None,
                        ..admission.clone()
                    },
                );
                Some(tokio::spawn(ops.serve(listener, stopped(stop_rx.clone()))))
            }
            None => None,
        };
        // Every musicd hears the follower's evictions, whether or not it follows itself.
        let evictions = tokio::spawn(crate::catalog::evictions::follow(
            config.redis.target.clone(),
            config.redis.timeout,
            config.redis.prefix.clone(),
            Arc::clone(&app.state.resolver),
            Arc::clone(&app.state.access.signing.revoked),
            Arc::clone(&app.state.evictions),
            stopped(stop_rx.clone()),
        ));
        // Hot ids are read from Redis again before their in-process entries run out.
        let refresh = tokio::spawn(crate::catalog::refresh::run(
            Arc::clone(&app.state.resolver),
            stopped(stop_rx.clone()),
        ));
        // The change-stream follower (or standby) runs on this loop beside the accept loop.
        let follower = if config.mongodb.watch == crate::config::WatchMode::Off {
            None
        } else {
            match crate::follow::Follower::new(config, Arc::clone(&app.state.follower)).await {
                Ok(follower) => {
                    let follower = follower.hearing(Arc::clone(&app.state.access.signing.revoked));
                    Some(tokio::spawn(follower.run(stopped(stop_rx.clone()))))
                }
                Err(err) => {
                    tracing::error!(error = %err, "the change-stream follower cannot start");
                    None
                }
            }
        };
        let mut loops = Vec::new();
        let (pin_loops, loop_count) = (config.worker_cpu_affinity, config.worker_threads);
        for index in 1..config.worker_threads {
            let listener = another_descriptor(&listener)?;
            let other = loop_of(
                &app,
                public_role,
                Admission {
                    balance: Some((Arc::clone(&balance), index)),
                    ..admission.clone()
                },
            );
            let stop = stop_rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("musicd-loop-{index}"))
                .spawn(move || -> std::io::Result<()> {
                    if pin_loops {
                        pin_to_nth_cpu(index, loop_count);
                    }
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    runtime.block_on(async move {
                        let listener = TcpListener::from_std(listener)?;
                        other.serve(listener, stopped(stop)).await;
                        Ok(())
                    })
                })?;
            loops.push(spawned);
        }
        let stop = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        loop_of(&app, public_role, admission)
            .serve(listener, stop)
            .await;
        if let Some(ops) = ops_server
            && ops.await.is_err()
        {
            tracing::warn!("the ops listener panicked");
        }
        let _ = evictions.await;
        let _ = refresh.await;
        if let Some(follower) = follower {
            // It gives its lease up (one Redis round trip) so a standby takes over at once.
            let bound = config.redis.batch_timeout() + Duration::from_millis(100);
            if tokio::time::timeout(bound, follower).await.is_err() {
                tracing::warn!("the change-stream follower did not stop in time");
            }
        }
        // The other loops may still be draining and need this loop's Redis/MongoDB tasks.
        for handle in loops {
            match tokio::task::spawn_blocking(move || handle.join()).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(err))) => tracing::warn!(error = %err, "an event loop failed"),
                _ => tracing::warn!("an event loop panicked"),
            }
        }
        Ok(())
    }
}

/// One listener on one event loop: the application in its role, and how connections are
/// handled and admitted.
struct LoopListener {
    app: App,
    role: ListenerRole,
    settings: Settings,
    admission: Admission,
    trusted: Arc<TrustedProxies>,
}

impl LoopListener {
    /// Accepts until `shutdown`, drains, then writes out this loop's access-log lines.
    async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        let grace = self.admission.grace;
        // One buffer per loop: its lock is never contended.
        let log = self
            .app
            .state
            .access_log
            .as_ref()
            .map(|log| Arc::new(LogBuffer::new(Arc::clone(log))));
        let flusher = log
            .as_ref()
            .map(|log| tokio::spawn(Arc::clone(log).flush_every_interval()));
        let endpoint = Endpoint {
            app: self.app,
            role: self.role,
            log: log.clone(),
            trusted_proxies: self.trusted,
        };
        accept::accept_loop(listener, endpoint, self.settings, self.admission, shutdown).await;
        if let Some(flusher) = flusher {
            flusher.abort();
        }
        // Every exchange that finished has its line, written within the stop's budget:
        // the drain may have used the grace already.
        if let Some(log) = &log {
            log.flush_and_settle(grace.clamp(Duration::from_secs(1), Duration::from_secs(5)))
                .await;
        }
    }
}

/// Keeps the calling thread, event loop `index`, on the `index`-th CPU this process may run
/// on, when `worker_cpu_affinity` is on and every loop has a CPU of its own. Left to the
/// scheduler, two loops sometimes shared a core while the other core ran something else,
/// and every connection of the waiting loop waited with it (see `WORKER_CPU_AFFINITY`).
/// Threads the loop starts later (its blocking pool) inherit the CPU.
pub(crate) fn pin_event_loop(config: &Config, index: usize) {
    if config.worker_cpu_affinity {
        pin_to_nth_cpu(index, config.worker_threads);
    }
}

fn pin_to_nth_cpu(index: usize, loops: usize) {
    // Read once, before the first loop is pinned: the loops started later inherit that
    // loop's single CPU, and would otherwise find only it to choose from.
    static ALLOWED: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    let cpus = ALLOWED.get_or_init(|| match rustix::thread::sched_getaffinity(None) {
        Ok(set) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&cpu| set.is_set(cpu))
            .collect(),
        Err(err) => {
            tracing::debug!(error = %err, "cannot read the CPUs allowed");
            Vec::new()
        }
    });
    let Some(&cpu) = cpus.get(index) else {
        return;
    };
    if loops > cpus.len() {
        return;
    }
    let mut only = rustix::thread::CpuSet::new();
    only.set(cpu);
    if let Err(err) = rustix::thread::sched_setaffinity(None, &only) {
        tracing::debug!(error = %err, cpu, "cannot pin the event loop");
    }
}

/// Another descriptor of the same listening socket, for another event loop.
fn another_descriptor(listener: &TcpListener) -> std::io::Result<std::net::TcpListener> {
    use std::os::fd::AsFd;
    let clone = std::net::TcpListener::from(listener.as_fd().try_clone_to_owned()?);
    clone.set_nonblocking(true)?;
    Ok(clone)
}
