//! HTTP from a test: a client, fetch helpers, `/metrics` series, test patterns.

use std::time::Duration;

/// The value of one series (name and labels, as printed) in a `/metrics` text.
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

/// A download of `url` that has read its first chunk and reads nothing more until it is
/// finished ([`finish_download`]): the server meanwhile has a response in flight. The
/// response, and the bytes received so far.
pub async fn start_download(url: &str) -> (reqwest::Response, usize) {
    let mut download = reqwest::get(url).await.expect("download starts");
    let received = download
        .chunk()
        .await
        .expect("chunk")
        .map_or(0, |c| c.len());
    (download, received)
}

/// Reads the rest of a download that had `received` bytes so far: it must end whole.
pub async fn finish_download(mut download: reqwest::Response, mut received: usize, whole: usize) {
    while let Some(chunk) = download.chunk().await.expect("download continues") {
        received += chunk.len();
    }
    assert_eq!(
        received, whole,
        "the download in flight at the stop was cut"
    );
}

/// deterministic pseudo-random bytes, so every offset has a distinct value to check.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407)
        | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// An HTTP client that does not follow redirects or decompress.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("http client")
}

/// GET `url` with the harness client: the response, its body not read yet.
pub async fn http_get(url: impl reqwest::IntoUrl) -> reqwest::Response {
    client().get(url).send().await.expect("GET sent")
}

/// GET `url` with extra headers: status, headers and the whole body.
pub async fn fetch_with(
    url: &str,
    headers: &[(&str, &str)],
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    bytes::Bytes,
) {
    let mut request = client().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("request sent");
    let status = response.status();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("body");
    (status, headers, body)
}

/// GET `url`: status, headers and the whole body.
pub async fn fetch(
    url: &str,
) -> (
    reqwest::StatusCode,
    reqwest::header::HeaderMap,
    bytes::Bytes,
) {
    fetch_with(url, &[]).await
}

/// GET `url`: its body as text (`/metrics`).
pub async fn get_text(url: &str) -> String {
    client()
        .get(url)
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("text body")
}

/// GET `url`: its status and body as JSON (`/readyz`, error bodies).
pub async fn get_json(url: &str) -> (reqwest::StatusCode, serde_json::Value) {
    let response = client().get(url).send().await.expect("GET");
    let status = response.status();
    (status, response.json().await.expect("JSON body"))
}

/// GET `url`: its status and body.
pub async fn get_body(url: &str) -> (reqwest::StatusCode, bytes::Bytes) {
    let (status, _, body) = fetch_with(url, &[]).await;
    (status, body)
}

/// Polls `url` until it answers `status` (with `body`, when given); how long that took,
/// or `None` when it did not within `within`.
pub async fn served_within(
    url: &str,
    status: reqwest::StatusCode,
    body: Option<&[u8]>,
    within: std::time::Duration,
) -> Option<std::time::Duration> {
    let started = std::time::Instant::now();
    while started.elapsed() < within {
        let (got, bytes) = get_body(url).await;
        if got == status && body.is_none_or(|b| b == bytes.as_ref()) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    None
}

/// The `p` quantile (nearest rank) of durations sorted ascending; zero for none.
pub fn percentile(sorted: &[std::time::Duration], p: f64) -> std::time::Duration {
    if sorted.is_empty() {
        return std::time::Duration::ZERO;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}
