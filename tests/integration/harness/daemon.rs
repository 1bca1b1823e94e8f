//! `musicd run` as a child process (what systemd runs), with its stderr in a file.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use super::env::TestEnv;
use super::http::client;
use super::procs::{free_port, spawn};
use reqwest::StatusCode;

/// A `musicd run` child process with its stderr captured to a file.
pub struct Daemon {
    child: std::process::Child,
    log: std::path::PathBuf,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
}

impl Daemon {
    /// `musicd run` with the env's config, on a free port, once `/healthz` answers.
    pub async fn start(env: &TestEnv) -> Daemon {
        Daemon::start_with(env, &[]).await
    }

    /// The same with more `--set key=value` overrides.
    pub async fn start_with(env: &TestEnv, overrides: &[&str]) -> Daemon {
        let port = free_port();
        let log = env.dir.path().join(format!("musicd-{port}.stderr"));
        let stderr = std::fs::File::create(&log).expect("log file");
        let mut command = env.command("musicd");
        for set in overrides {
            command.arg("--set").arg(set);
        }
        command
            .arg("run")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr);
        let child = spawn(command);
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = client().get(format!("{base}/healthz")).send().await
                && r.status() == StatusCode::OK
            {
                break;
            }
            assert!(Instant::now() < deadline, "musicd did not come up");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Daemon { child, log, base }
    }

    /// Its pid.
    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// Sends it a signal.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) with a pid we spawned and still own; no memory is involved.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// Waits up to `timeout` for it to exit.
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits until its port refuses connections: every event loop has dropped its copy of
    /// the listener. Panics if it still accepts `within` after the call.
    pub async fn until_refusing(&self, within: Duration) {
        let port: u16 = self
            .base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        let asked = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            assert!(asked.elapsed() < within, "still accepting after {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits up to `within` for it to exit, successfully.
    pub fn exits_cleanly(&mut self, within: Duration) {
        let status = self.wait(within).expect("musicd exits");
        assert!(status.success(), "{status:?}");
    }

    /// What it wrote to stderr so far.
    pub fn log_text(&self) -> String {
        let mut text = String::new();
        std::fs::File::open(&self.log)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read log");
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
