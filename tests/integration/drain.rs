//! Stopping behind a load balancer (`shutdown.drain_delay`): on SIGTERM musicd first says
//! it is draining (`/readyz` 503) while it still accepts and serves, and only then stops
//! accepting and finishes what is in flight. A second SIGTERM cuts the delay short.

use std::time::{Duration, Instant};

use crate::harness::daemon::Daemon;
use crate::harness::{TestEnv, client, pattern};
use reqwest::StatusCode;

/// `/readyz` on a new connection: its status and `status` field.
async fn readyz(base: &str) -> (StatusCode, String) {
    let answer = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz answers while draining");
    let code = answer.status();
    let body: serde_json::Value = answer.json().await.expect("readyz is JSON");
    (
        code,
        body["status"].as_str().unwrap_or_default().to_string(),
    )
}

/// Waits until `/readyz` says `draining`.
async fn until_draining(base: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, status) = readyz(base).await;
        if status == "draining" {
            assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
            return;
        }
        assert!(Instant::now() < deadline, "never draining: {code} {status}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_drains_for_the_delay_then_refuses_and_finishes_in_flight() {
    let env = TestEnv::shared_with(&["shutdown.drain_delay=3s"]).await;
    let big = pattern(24 * 1024 * 1024, 3);
    let (id, _) = env.track("drained.mp3", &big).await;
    let mut daemon = Daemon::start(&env).await;
    let url = format!("{}/musicdb/{}/drained.mp3", daemon.base, id.to_hex());
    let (code, status) = readyz(&daemon.base).await;
    assert_eq!((code, status.as_str()), (StatusCode::OK, "ready"));

    // In flight at the stop: read one chunk, then nothing until the stop is under way.
    let (download, received) = crate::harness::start_download(&url).await;
    let termed = Instant::now();
    daemon.signal(libc::SIGTERM);
    until_draining(&daemon.base).await;

    // Draining: new connections are still accepted and served, and liveness holds.
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .expect("client")
    };
    let health = fresh()
        .get(format!("{}/healthz", daemon.base))
        .send()
        .await
        .expect("healthz while draining");
    assert_eq!(health.status(), StatusCode::OK);
    let track = fresh()
        .get(&url)
        .send()
        .await
        .expect("a track while draining");
    assert_eq!(track.status(), StatusCode::OK);
    assert_eq!(track.bytes().await.expect("body").len(), big.len());

    // Then it stops accepting, and not before the delay.
    daemon.until_refusing(Duration::from_secs(20)).await;
    assert!(
        termed.elapsed() >= Duration::from_secs(3),
        "stopped accepting {:?} after SIGTERM, inside the 3 s delay",
        termed.elapsed()
    );

    // The download in flight at SIGTERM completes.
    crate::harness::finish_download(download, received, big.len()).await;
    daemon.exits_cleanly(Duration::from_secs(20));
    let log = daemon.log_text();
    assert_eq!(log.matches("draining for 3s").count(), 1, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_or_a_sigint_skips_the_rest_of_the_delay() {
    let env = TestEnv::shared_with(&["shutdown.drain_delay=10m"]).await;
    for (second, said) in [
        (libc::SIGTERM, "a second SIGTERM"),
        (libc::SIGINT, "SIGINT: stopping gracefully now"),
    ] {
        let mut daemon = Daemon::start(&env).await;
        daemon.signal(libc::SIGTERM);
        until_draining(&daemon.base).await;
        // Still serving, ten minutes to go.
        let health = client()
            .get(format!("{}/healthz", daemon.base))
            .send()
            .await
            .expect("healthz while draining");
        assert_eq!(health.status(), StatusCode::OK);
        daemon.signal(second);
        // Long before the 10 min delay.
        daemon.exits_cleanly(Duration::from_secs(60));
        let log = daemon.log_text();
        assert!(log.contains(said), "{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_delay_sigterm_stops_at_once() {
    // The default: nothing drains, /readyz never says so.
    let env = TestEnv::shared_with(&[]).await;
    let mut daemon = Daemon::start(&env).await;
    daemon.signal(libc::SIGTERM);
    daemon.exits_cleanly(Duration::from_secs(30));
    let log = daemon.log_text();
    assert!(log.contains("SIGTERM: stopping gracefully"), "{log}");
    assert!(!log.contains("draining for"), "{log}");
}
