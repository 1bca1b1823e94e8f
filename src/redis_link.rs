//! A self-healing link to Redis (a single server or a Cluster) that never makes a request
//! wait for a dead server.
//!
//! The cache is an optimisation, so Redis being down must cost a request nothing but the
//! cache: [`RedisLink::run`] fails fast when the link is down, and only one task at a time
//! tries to reconnect, at most every [`RECONNECT_INTERVAL`]. Transitions between up and down
//! are logged once each, not once per request.

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

/// How often a down link tries to reconnect.
pub(crate) const RECONNECT_INTERVAL: Duration = Duration::from_millis(500);

/// Why a Redis command did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The URL could not be used.
    #[error("invalid redis url: {0}")]
    Url(#[source] redis::RedisError),
    /// The link is down and not due for a reconnect attempt yet; `last` says why it went
    /// down, `hung` whether that was a timeout rather than a refusal.
    #[error("redis is unreachable (reconnecting; last: {last})")]
    Down {
        /// Why the link went down.
        last: String,
        /// Whether it went down by a timeout.
        hung: bool,
    },
    /// The command did not answer within the configured timeout: the server accepts but
    /// hangs (stopped, overloaded), or packets to it vanish (a partition).
    #[error("redis: no answer within {0:?}")]
    Timeout(Duration),
    /// Redis answered with an error, or the connection broke.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl LinkError {
    /// Whether Redis hangs (accepts, or at least does not refuse, and never answers) rather
    /// than refusing: what `/readyz` and `musicctl health` tell an operator.
    pub(crate) fn is_hang(&self) -> bool {
        match self {
            LinkError::Timeout(_) | LinkError::Down { hung: true, .. } => true,
            LinkError::Redis(err) => timed_out(err),
            _ => false,
        }
    }
}

/// Whether Redis failed by not answering. The cluster client reports nodes that never
/// answered its connect as an error of its own, whose text is all that says so.
fn timed_out(err: &redis::RedisError) -> bool {
    err.is_timeout() || err.to_string().contains("timed out")
}

/// Where Redis is: configuration, defined with the rest of it.
pub use crate::config::RedisTarget;

/// A connection to either kind of target; commands are routed by key in a cluster.
#[derive(Clone)]
pub(crate) enum RedisConn {
    /// One server.
    Single(MultiplexedConnection),
    /// A cluster.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
        }
    }
}

enum Client {
    Single(redis::Client),
    // Boxed: the cluster client is twice the size of the single one.
    Cluster(Box<ClusterClient>),
}

/// A shared, reconnecting Redis connection.
pub(crate) struct RedisLink {
    /// Where to connect.
    client: Client,
    /// Bound on connecting and on each command.
    timeout: Duration,
    /// The live connection, if any; cloning it is cheap (it multiplexes one socket).
    connection: RwLock<Option<RedisConn>>,
    /// Held by the one task that is reconnecting; others fail fast meanwhile.
    reconnecting: tokio::sync::Mutex<()>,
    /// Earliest time of the next reconnect attempt.
    next_attempt: std::sync::Mutex<Instant>,
    /// Last known state, for logging transitions once.
    up: AtomicBool,
    /// Why the link last went down, and whether by a timeout.
    last_failure: std::sync::Mutex<(String, bool)>,
    /// Commands that failed (for metrics).
    errors: AtomicU64,
    /// Whether any command ever succeeded (a wrong address never does).
    answered: AtomicBool,
}

impl RedisLink {
    /// Creates a link; nothing is connected until the first command.
    pub(crate) fn new(target: &RedisTarget, timeout: Duration) -> Result<RedisLink, LinkError> {
        let client = match target {
            RedisTarget::Single(url) => {
                Client::Single(redis::Client::open(url.as_str()).map_err(LinkError::Url)?)
            }
            RedisTarget::Cluster(nodes) => Client::Cluster(Box::new(
                ClusterClient::builder(nodes.iter().map(String::as_str))
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(1)
                    .build()
                    .map_err(LinkError::Url)?,
            )),
        };
        Ok(RedisLink {
            client,
            timeout,
            connection: RwLock::new(None),
            reconnecting: tokio::sync::Mutex::new(()),
            next_attempt: std::sync::Mutex::new(Instant::now()),
            up: AtomicBool::new(true),
            last_failure: std::sync::Mutex::new((String::new(), false)),
            errors: AtomicU64::new(0),
            answered: AtomicBool::new(false),
        })
    }

    /// Whether Redis has answered a command since this link was made.
    pub(crate) fn has_answered(&self) -> bool {
        self.answered.load(Ordering::Relaxed)
    }

    /// Commands that failed since start (unreachable, timed out, or refused).
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Runs one command (or pipeline) on the shared connection.
    pub(crate) async fn run<T, F, Fut>(&self, command: F) -> Result<T, LinkError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let result = self.run_once(command).await;
        if result.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    async fn run_once<T, F, Fut>(&self, command: F) -> Result<T, LinkError>
    where
        F: FnOnce(RedisConn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let connection = self.connection().await?;
        match tokio::time::timeout(self.timeout, command(connection)).await {
            Ok(Ok(value)) => {
                self.answered.store(true, Ordering::Relaxed);
                self.mark_up();
                Ok(value)
            }
            Ok(Err(err)) => {
                if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
                    self.drop_connection(&err.to_string(), timed_out(&err));
                }
                Err(LinkError::Redis(err))
            }
            Err(_) => {
                self.drop_connection(&format!("no answer within {:?}", self.timeout), true);
                Err(LinkError::Timeout(self.timeout))
            }
        }
    }

    async fn connection(&self) -> Result<RedisConn, LinkError> {
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        let Ok(_guard) = self.reconnecting.try_lock() else {
            return Err(self.down());
        };
        if let Some(conn) = self.current() {
            return Ok(conn);
        }
        {
            let next = self.next_attempt.lock().unwrap_or_else(|p| p.into_inner());
            if Instant::now() < *next {
                return Err(self.down());
            }
        }
        let attempt = async {
            match &self.client {
                Client::Single(client) => {
                    let config = AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(self.timeout))
                        .set_response_timeout(Some(self.timeout));
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map(RedisConn::Single)
                }
                Client::Cluster(client) => {
                    client.get_async_connection().await.map(RedisConn::Cluster)
                }
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok(conn)) => {
                *self.connection.write().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
                self.mark_up();
                Ok(conn)
            }
            Ok(Err(err)) => {
                self.schedule_retry();
                self.mark_down(&err.to_string(), timed_out(&err));
                Err(LinkError::Redis(err))
            }
            Err(_) => {
                self.schedule_retry();
                self.mark_down(
                    &format!("connecting got no answer within {:?}", self.timeout),
                    true,
                );
                Err(LinkError::Timeout(self.timeout))
            }
        }
    }

    fn current(&self) -> Option<RedisConn> {
        self.connection
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn schedule_retry(&self) {
        *self.next_attempt.lock().unwrap_or_else(|p| p.into_inner()) =
            Instant::now() + RECONNECT_INTERVAL;
    }

    fn drop_connection(&self, why: &str, hung: bool) {
        *self.connection.write().unwrap_or_else(|p| p.into_inner()) = None;
        self.schedule_retry();
        self.mark_down(why, hung);
    }

    fn down(&self) -> LinkError {
        let (last, hung) = self
            .last_failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        LinkError::Down { last, hung }
    }

    fn mark_up(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            tracing::info!("redis reachable again: cache back in use");
        }
    }

    fn mark_down(&self, why: &str, hung: bool) {
        *self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) = (why.to_string(), hung);
        if self.up.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                reason = why,
                "redis unreachable: serving from MongoDB (degraded)"
            );
        }
    }
}

/// The URLs of every master of the target: the one server, or each master of the cluster
/// (read from `CLUSTER NODES` of the first seed that answers). Scans that must see every
/// key (purge, prune) run once per master.
pub(crate) async fn masters(
    target: &RedisTarget,
    timeout: Duration,
) -> Result<Vec<String>, LinkError> {
    let seeds = match target {
        RedisTarget::Single(url) => return Ok(vec![url.clone()]),
        RedisTarget::Cluster(seeds) => seeds,
    };
    let mut last_error = LinkError::Down {
        last: "no seed node tried".into(),
        hung: false,
    };
    for seed in seeds {
        let nodes = async {
            let mut conn = connect_node(seed, timeout).await?;
            let text: String = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async(&mut conn)
                .await?;
            Ok::<_, LinkError>(text)
        };
        match tokio::time::timeout(timeout, nodes).await {
            Ok(Ok(text)) => return Ok(parse_masters(&text, seed)),
            Ok(Err(err)) => last_error = err,
            Err(_) => last_error = LinkError::Timeout(timeout),
        }
    }
    Err(last_error)
}

/// A plain connection to one node (no cluster routing).
pub(crate) async fn connect_node(
    url: &str,
    timeout: Duration,
) -> Result<MultiplexedConnection, LinkError> {
    let client = redis::Client::open(url).map_err(LinkError::Url)?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout));
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// Masters with slots from `CLUSTER NODES` output, as URLs built on the seed's URL (so
/// credentials and options carry over).
fn parse_masters(nodes: &str, seed: &str) -> Vec<String> {
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // id addr flags master-id ping pong epoch link-state [slot ...]
        if fields.len() < 9 {
            continue;
        }
        let flags = fields[2];
        if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
            continue;
        }
        let addr = fields[1].split('@').next().unwrap_or_default();
        let Some((host, port)) = addr.rsplit_once(':') else {
            continue;
        };
        let (Some(mut url), Ok(port)) = (redis::parse_redis_url(seed), port.parse::<u16>()) else {
            continue;
        };
        if url.set_host(Some(host)).is_err() || url.set_port(Some(port)).is_err() {
            continue;
        }
        masters.push(url.to_string());
    }
    masters.sort();
    masters
}

/// The channel an index (its key prefix) announces on: the ids the follower changed (the
/// evictions, `catalog::evictions`) and the links revoked (`signing::revoked`), so one
/// subscription per musicd hears both, in order.
pub(crate) fn channel(prefix: &str) -> String {
    format!("{prefix}evict")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masters_are_read_from_cluster_nodes() {
        let nodes = "\
a1 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b2 127.0.0.1:7002@17002 master - 0 1 2 connected 5461-10922
c3 127.0.0.1:7003@17003 master,fail - 0 1 3 disconnected 10923-16383
d4 127.0.0.1:7004@17004 slave a1 0 1 1 connected
e5 127.0.0.1:7005@17005 master - 0 1 5 connected
";
        assert_eq!(
            parse_masters(nodes, "redis://:secret@127.0.0.1:7001/"),
            vec![
                "redis://:secret@127.0.0.1:7001/",
                "redis://:secret@127.0.0.1:7002/"
            ]
        );
    }
}
