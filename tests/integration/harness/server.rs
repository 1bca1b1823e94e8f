//! musicd in the test's own process, on a free port, started through the entry point
//! `musicd run` uses ([`musicd::server::Server`]): the per-core event loops, the ops
//! listener and the access-log buffers are the production ones.

use std::net::SocketAddr;
use std::time::Duration;

use mongodb::bson::oid::ObjectId;
use musicd::config::Config;
use musicd::http::ServerError;
use musicd::server::{Listeners, Server};

/// musicd running in this test's runtime.
pub struct Musicd {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), ServerError>>>,
}

impl Musicd {
    /// Binds a free port and serves `config` on it.
    pub async fn start(config: &Config) -> Musicd {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        // A test's stop should not wait the production grace period for a stuck client.
        let mut config = config.clone();
        config.daemon.stop_timeout = config.daemon.stop_timeout.min(Duration::from_secs(5));
        let server = Server::build(&config).await.expect("server");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let listeners = Listeners {
            http: listener,
            ops: None,
        };
        let task = tokio::spawn(async move {
            server
                .serve(listeners, async {
                    let _ = stopped.await;
                })
                .await
        });
        Musicd {
            addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// `http://addr{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The canonical track URL of an id.
    pub fn track_url(&self, id: &ObjectId) -> String {
        self.url(&format!("/musicdb/{}/song.mp3", id.to_hex()))
    }

    /// What `/metrics` says now.
    pub async fn metrics(&self) -> String {
        super::http::get_text(&self.url("/metrics")).await
    }

    /// What `/readyz` says now (its JSON body).
    pub async fn readyz(&self) -> serde_json::Value {
        super::http::get_json(&self.url("/readyz")).await.1
    }

    /// Stops accepting and drains.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Musicd {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
