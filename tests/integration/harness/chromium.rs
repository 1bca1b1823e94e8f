//! Headless Chromium, for what only a real browser can say: a page on another origin
//! playing a track (CORS), a report page that renders its plots.

use std::path::PathBuf;
use std::process::Command;

/// Loads `url` in headless Chromium and returns the page's `data-result`.
pub fn dom_result(url: &str) -> String {
    let profile = super::tempdir();
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .expect("chromium (scripts/install-deps.sh installs it)");
    let output = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(url)
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&output.stdout).to_string();
    dom.split("data-result=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| {
            panic!(
                "no result in {dom}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .to_string()
}
