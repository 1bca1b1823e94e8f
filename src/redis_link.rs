//! A self-healing link to Redis that never makes a request wait for a dead server.
//!
//! The cache is an optimisation, so Redis being down must cost a request nothing but the
//! cache: [`RedisLink::run`] fails fast when the link is down, and only one task at a time
//! tries to reconnect, at most every [`RECONNECT_INTERVAL`]. Transitions between up and down
//! are logged once each, not once per request.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisResult};

/// How often a down link tries to reconnect.
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(500);

/// Why a Redis command did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The URL could not be used.
    #[error("invalid redis url: {0}")]
    Url(#[source] redis::RedisError),
    /// The link is down and not due for a reconnect attempt yet.
    #[error("redis is unreachable (reconnecting)")]
    Down,
    /// The command did not answer within the configured timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error, or the connection broke.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

/// A shared, reconnecting Redis connection.
pub struct RedisLink {
    /// Where to connect.
    client: redis::Client,
    /// Bound on connecting and on each command.
    timeout: Duration,
    /// The live connection, if any; cloning it is cheap (it multiplexes one socket).
    connection: RwLock<Option<MultiplexedConnection>>,
    /// Held by the one task that is reconnecting; others fail fast meanwhile.
    reconnecting: tokio::sync::Mutex<()>,
    /// Earliest time of the next reconnect attempt.
    next_attempt: std::sync::Mutex<Instant>,
    /// Last known state, for logging transitions once.
    up: AtomicBool,
}

impl RedisLink {
    /// Creates a link; nothing is connected until the first command.
    pub fn new(url: &str, timeout: Duration) -> Result<RedisLink, LinkError> {
        let client = redis::Client::open(url).map_err(LinkError::Url)?;
        Ok(RedisLink {
            client,
            timeout,
            connection: RwLock::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            next_attempt: std::sync::Mutex::new(Instant::now()),
            up: AtomicBool::new(true),
        })
    }

    /// Whether the last command reached Redis.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Runs one command (or pipeline) on the shared connection.
    pub async fn run<T, F, Fut>(&self, command: F) -> Result<T, LinkError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let connection = self.connection().await?;
        match tokio::time::timeout(self.timeout, command(connection)).await {
            Ok(Ok(value)) => {
                self.mark_up();
                Ok(value)
            }
            Ok(Err(err)) => {
                if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
                    self.drop_connection(&err.to_string());
                }
                Err(LinkError::Redis(err))
            }
            Err(_) => {
                self.drop_connection("command timed out");
                Err(LinkError::Timeout(self.timeout))
            }
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, LinkError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let Ok(_guard) = self.reconnecting.try_lock() else {
            return Err(LinkError::Down);
        };
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        {
            let next = self.next_attempt.lock().unwrap_or_else(|p| p.into_inner());
            if Instant::now() < *next {
                return Err(LinkError::Down);
            }
        }
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        let attempt = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(conn)) => {
                *self.connection.write().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
                self.mark_up();
                Ok(conn)
            }
            Ok(Err(err)) => {
                self.schedule_retry();
                self.mark_down(&err.to_string());
                Err(LinkError::Redis(err))
            }
            Err(_) => {
                self.schedule_retry();
                self.mark_down("connect timed out");
                Err(LinkError::Timeout(self.timeout))
            }
        }
    }

    fn current(&self) -> Option<MultiplexedConnection> {
        self.connection
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn schedule_retry(&self) {
        *self.next_attempt.lock().unwrap_or_else(|p| p.into_inner()) =
            Instant::now() + RECONNECT_INTERVAL;
    }

    fn drop_connection(&self, why: &str) {
        *self.connection.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.schedule_retry();
        self.mark_down(why);
    }

    fn mark_up(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!("redis reachable again: cache back in use");
        }
    }

    fn mark_down(&self, why: &str) {
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                reason = why,
                "redis unreachable: serving from MongoDB (degraded)"
            );
        }
    }
}
