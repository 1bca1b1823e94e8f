//! A rolling deploy under load, as a scheduler does it: players fetch through the suite's
//! nginx (`deploy/nginx.conf`), whose upstream is a Service, an L4 balancer over the ready
//! pods that does not retry (what kube-proxy is). Each old container is replaced by a new
//! one: start it, wait for its `/readyz` (the readiness gate), add it to the Service; then
//! stop the old one with SIGTERM and take it out of the Service a moment later, as the
//! endpoints controller does. With `shutdown.drain_delay` nothing fails; without it,
//! connections the Service still routes to the stopped container are refused, and players
//! see 502s.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use tokio::net::{TcpListener, TcpStream};

use crate::harness::nginx::Nginx;
use crate::harness::{TestEnv, free_port, succeeded};
use crate::image::{Container, open_media, podman, start_container, until_ok};

/// How long the Service keeps routing to a container after it was told to stop: the
/// endpoints controller's and the proxies' propagation.
const PROPAGATION: Duration = Duration::from_secs(1);

/// A Service: new connections go round-robin to the current endpoints; a connection the
/// chosen endpoint refuses is closed, never retried elsewhere.
struct Service {
    port: u16,
    endpoints: Arc<Mutex<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Service {
    async fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let endpoints: Arc<Mutex<Vec<SocketAddr>>> = Arc::default();
        let shared = Arc::clone(&endpoints);
        let next = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let chosen = {
                    let endpoints = shared.lock().unwrap_or_else(|p| p.into_inner());
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    (!endpoints.is_empty()).then(|| endpoints[n % endpoints.len()])
                };
                tokio::spawn(async move {
                    let Some(endpoint) = chosen else { return };
                    if let Ok(mut backend) = TcpStream::connect(endpoint).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
                    }
                });
            }
        });
        Service {
            port,
            endpoints,
            task,
        }
    }

    fn add(&self, endpoint: SocketAddr) {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(endpoint);
    }

    fn remove(&self, endpoint: SocketAddr) {
        self.endpoints
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|e| *e != endpoint);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One musicd container of a generation: its name and addresses.
struct Pod {
    container: Container,
    port: u16,
    ops: u16,
}

impl Pod {
    fn start(env: &TestEnv, media: &std::path::Path, drain: &str, what: &str) -> Pod {
        let (port, ops) = (free_port(), free_port());
        let overrides = [
            ("MUSICD_SHUTDOWN_DRAIN_DELAY", drain.to_string()),
            ("MUSICD_ACCESS_LOG_FORMAT", "json".to_string()),
        ];
        let container = start_container(env, media, (port, ops), what, &overrides);
        Pod {
            container,
            port,
            ops,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Sends a signal; false when the container had already exited.
    fn signal(&self, signal: &str) -> bool {
        podman()
            .args(["kill", "--signal", signal, &self.container.0])
            .output()
            .expect("podman kill")
            .status
            .success()
    }

    /// Track requests it answered (its access log on stdout).
    fn served(&self) -> usize {
        let output = podman()
            .args(["logs", &self.container.0])
            .output()
            .expect("podman logs");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| l.contains("/musicdb/"))
            .count()
    }

    /// Waits until the container has exited.
    async fn exited(&self) {
        let output = podman()
            .args(["wait", &self.container.0])
            .output()
            .expect("podman wait");
        succeeded(&output);
    }
}

/// What the players saw during a rollout, and what each generation served.
struct Rollout {
    ok: u64,
    failed: u64,
    /// What the first failures were.
    failures: Vec<String>,
    served: [usize; 2],
}

/// Replaces two containers one by one under load; `drain` is their `shutdown.drain_delay`.
async fn roll(drain: &str) -> Rollout {
    let env = TestEnv::new().await;
    let (media, id, bytes) = open_media(&env, "rolled.mp3").await;
    let service = Service::start().await;
    let nginx = Nginx::start_deploy_config(&format!("127.0.0.1:{}", service.port), media.path());
    let mut old = Vec::new();
    for i in 0..2 {
        let pod = Pod::start(&env, media.path(), drain, &format!("old{i}"));
        until_ok(&format!("http://127.0.0.1:{}/readyz", pod.ops)).await;
        service.add(pod.addr());
        old.push(pod);
    }

    // Players: a few at once, each fetching the track again as soon as it has it.
    let url = nginx.url(&format!("/musicdb/{}/rolled.mp3", id.to_hex()));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut players = Vec::new();
    for _ in 0..6 {
        let (url, ok, failed, stop) = (url.clone(), ok.clone(), failed.clone(), stop.clone());
        let (bytes, failures) = (bytes.clone(), failures.clone());
        players.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            while !stop.load(Ordering::Relaxed) {
                let failure = match client.get(&url).send().await {
                    Ok(answer) if answer.status() == StatusCode::OK => match answer.bytes().await {
                        Ok(body) if body == bytes => None,
                        Ok(body) => Some(format!("200 with {} bytes", body.len())),
                        Err(err) => Some(format!("200, then its body failed: {err:?}")),
                    },
                    Ok(answer) => Some(format!("status {}", answer.status())),
                    Err(err) => Some(format!("no answer: {err:?}")),
                };
                let counter = match failure {
                    None => &ok,
                    Some(failure) => {
                        let mut failures = failures.lock().unwrap_or_else(|p| p.into_inner());
                        if failures.len() < 5 {
                            failures.push(failure);
                        }
                        &failed
                    }
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    let mut new = Vec::new();
    for (i, retiring) in old.iter().enumerate() {
        let pod = Pod::start(&env, media.path(), drain, &format!("new{i}"));
        until_ok(&format!("http://127.0.0.1:{}/readyz", pod.ops)).await;
        service.add(pod.addr());
        // The scheduler stops the old pod, and the Service hears of it a moment later.
        assert!(retiring.signal("TERM"), "the old container was running");
        tokio::time::sleep(PROPAGATION).await;
        service.remove(retiring.addr());
        // Nothing routes to it now: its drain has done its work. A SIGINT ends what is
        // left of it (the test need not wait the whole delay); it finishes in flight.
        let _ = retiring.signal("INT");
        retiring.exited().await;
        new.push(pod);
    }
    stop.store(true, Ordering::Relaxed);
    for player in players {
        let _ = player.await;
    }
    // Stopped, so their access logs are complete.
    for pod in &new {
        let _ = pod.signal("INT");
        pod.exited().await;
    }
    let served = [
        old.iter().map(Pod::served).sum(),
        new.iter().map(Pod::served).sum(),
    ];
    let failures = failures.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Rollout {
        ok: ok.load(Ordering::Relaxed),
        failed: failed.load(Ordering::Relaxed),
        failures,
        served,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_deploy_under_load_fails_no_request_with_the_drain_and_some_without() {
    let drained = roll("5s").await;
    eprintln!(
        "drain 5s: {} played, {} failed; served by the old generation {}, by the new {}",
        drained.ok, drained.failed, drained.served[0], drained.served[1]
    );
    assert_eq!(
        drained.failed, 0,
        "requests failed during a drained rollout: {:?}",
        drained.failures
    );
    assert!(drained.served[0] > 0 && drained.served[1] > 0);

    let abrupt = roll("0s").await;
    eprintln!(
        "no drain: {} played, {} failed; served by the old generation {}, by the new {}",
        abrupt.ok, abrupt.failed, abrupt.served[0], abrupt.served[1]
    );
    assert!(
        abrupt.failed > 0,
        "without the drain the Service routes to stopped containers: failures expected"
    );
}
