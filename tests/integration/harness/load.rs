//! A bounded client load that checks every response: status and body bytes.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// What a load run saw.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Requests completed (including retries' final outcome).
    pub sent: u64,
    /// 200 with the exact bytes.
    pub ok: u64,
    /// Connection refused: nobody was accepting on the socket.
    pub refused: u64,
    /// Requests retried once after a reset of a request in flight.
    pub retried: u64,
    /// Requests that failed even after the retry, or answered wrongly.
    pub failed: u64,
    /// Of those, answers that arrived complete but wrong (status or bytes).
    pub wrong: u64,
    /// A few failure descriptions.
    pub samples: Vec<String>,
}

/// Decides whether one answer is right: `Ok` or a description of what is wrong.
pub type Check = Arc<
    dyn Fn(&str, reqwest::StatusCode, &reqwest::header::HeaderMap, &[u8]) -> Result<(), String>
        + Send
        + Sync,
>;

/// Runs `concurrency` clients doing `total` GETs of `url` in all, each on a fresh
/// connection, until done or `stop` is set. A request that fails after it was sent (its
/// worker was killed mid-response) is retried once, as a player would.
pub async fn hammer(
    url: String,
    expected: Arc<Vec<u8>>,
    total: u64,
    concurrency: u64,
    stop: Arc<AtomicBool>,
) -> LoadReport {
    let check: Check = Arc::new(move |_, status, _, body| {
        if status != reqwest::StatusCode::OK {
            return Err(format!("status {status}"));
        }
        if body != expected.as_slice() {
            return Err(format!("body of {} bytes differs", body.len()));
        }
        Ok(())
    });
    hammer_checked(vec![url], check, total, concurrency, stop, false).await
}

/// Like [`hammer`], over several URLs round-robin, every answer judged by `check`;
/// `keep_alive` reuses connections (as players do) instead of one per request.
pub async fn hammer_checked(
    urls: Vec<String>,
    check: Check,
    total: u64,
    concurrency: u64,
    stop: Arc<AtomicBool>,
    keep_alive: bool,
) -> LoadReport {
    let urls = Arc::new(urls);
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (urls, check, next, stop) = (urls.clone(), check.clone(), next.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            // Without keep-alive every request opens a connection, so a refused accept shows.
            let client = reqwest::Client::builder()
                .pool_max_idle_per_host(if keep_alive { 4 } else { 0 })
                .timeout(Duration::from_secs(20))
                .build()
                .expect("client");
            let mut report = LoadReport::default();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total || stop.load(Ordering::Relaxed) {
                    break;
                }
                let url = &urls[(n as usize) % urls.len()];
                report.sent += 1;
                let mut outcome = attempt(&client, url, &check).await;
                if matches!(outcome, Err(Failure::Reset(_))) {
                    report.retried += 1;
                    outcome = attempt(&client, url, &check).await;
                }
                match outcome {
                    Ok(()) => report.ok += 1,
                    Err(Failure::Refused(e)) => {
                        report.refused += 1;
                        report.samples.push(e);
                    }
                    Err(Failure::Reset(e)) => {
                        report.failed += 1;
                        report.samples.push(e);
                    }
                    Err(Failure::Wrong(e)) => {
                        report.failed += 1;
                        report.wrong += 1;
                        report.samples.push(e);
                    }
                }
            }
            report
        }));
    }
    let mut total_report = LoadReport::default();
    for task in tasks {
        let r = task.await.expect("load task");
        total_report.sent += r.sent;
        total_report.ok += r.ok;
        total_report.refused += r.refused;
        total_report.retried += r.retried;
        total_report.failed += r.failed;
        total_report.wrong += r.wrong;
        total_report.samples.extend(r.samples.into_iter().take(3));
    }
    total_report
}

enum Failure {
    Refused(String),
    Reset(String),
    Wrong(String),
}

async fn attempt(client: &reqwest::Client, url: &str, check: &Check) -> Result<(), Failure> {
    let response = client.get(url).send().await.map_err(|e| {
        if e.is_connect() {
            Failure::Refused(format!("{e:?}"))
        } else {
            Failure::Reset(format!("{e:?}"))
        }
    })?;
    let status = response.status();
    let headers = response.headers().clone();
    let body = response
        .bytes()
        .await
        .map_err(|e| Failure::Reset(format!("body: {e:?}")))?;
    check(url, status, &headers, &body).map_err(|e| Failure::Wrong(format!("{url}: {e}")))
}
