//! Running the server as a process: logging, the runtime, the listener, and signals.
//!
//! [`run`] is `musicd run`: it builds the tokio runtime itself (rather than `#[tokio::main]`)
//! so that a supervisor can fork before any runtime thread exists.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use crate::config::Config;
use crate::http::{self, AppState, ServeOptions};

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The runtime could not be built.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server could not be built or failed.
    #[error(transparent)]
    Server(#[from] http::ServerError),
}

/// Sets up `tracing` output: `RUST_LOG` if set, else the configured level.
pub fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Serves in the foreground until SIGTERM or SIGINT.
pub fn run(config: Config) -> Result<(), DaemonError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("musicd-worker")
        .build()
        .map_err(DaemonError::Runtime)?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(config.listen)
            .await
            .map_err(|source| DaemonError::Bind {
                addr: config.listen,
                source,
            })?;
        let state = AppState::new(&config).await?;
        let app = http::router(state, &config.route_prefixes);
        tracing::info!(listen = %config.listen, roots = ?config.media_roots, mode = ?config.serve_mode, "musicd serving");
        let options = ServeOptions {
            grace: config.shutdown_grace,
            ..ServeOptions::default()
        };
        http::serve(listener, app, stop_signal(), options)
            .await
            .map_err(|e| DaemonError::Server(e.into()))?;
        tracing::info!("musicd stopped");
        Ok(())
    })
}

/// Completes on the first SIGTERM or SIGINT.
pub async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping gracefully"),
        _ = int.recv() => tracing::info!("SIGINT: stopping gracefully"),
    }
}
