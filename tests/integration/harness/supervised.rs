//! A musicd started with `musicd start` (daemonized supervisor + worker) for tests, stopped
//! (or killed) when dropped.

use std::process::Output;
use std::time::{Duration, Instant};

use super::TestEnv;

/// A running supervisor.
pub struct Supervised<'a> {
    /// The env whose config it runs.
    pub env: &'a TestEnv,
}

impl<'a> Supervised<'a> {
    /// Runs `musicd start` and waits until it reports ready.
    pub fn start(env: &'a TestEnv) -> Supervised<'a> {
        let output = env
            .command("musicd")
            .arg("start")
            .output()
            .expect("run musicd start");
        assert!(
            output.status.success(),
            "musicd start failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let supervised = Supervised { env };
        assert!(
            supervised.state()["phase"] == "running",
            "{}",
            supervised.state()
        );
        supervised
    }

    /// Runs `musicd <command>`.
    pub fn ctl(&self, command: &str) -> Output {
        self.env
            .command("musicd")
            .arg(command)
            .output()
            .expect("run musicd")
    }

    /// The state file.
    pub fn state(&self) -> serde_json::Value {
        self.try_state().expect("readable state file")
    }

    /// The state file, if readable.
    pub fn try_state(&self) -> Option<serde_json::Value> {
        let path = self.env.config.daemon.state_dir.join("musicd.state.json");
        let text = std::fs::read(&path).ok()?;
        serde_json::from_slice(&text).ok()
    }

    /// `http://127.0.0.1:PORT` of the supervisor's socket.
    pub fn base_url(&self) -> String {
        format!(
            "http://{}",
            self.state()["listen"].as_str().expect("listen")
        )
    }

    /// The serving worker's pid.
    pub fn worker_pid(&self) -> Option<i32> {
        self.state()["worker_pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
    }

    /// The supervisor's pid.
    pub fn supervisor_pid(&self) -> i32 {
        self.state()["supervisor_pid"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .expect("supervisor pid")
    }

    /// The log file's text.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.env.config.daemon.log_file).unwrap_or_default()
    }

    /// Waits until `check` holds on the state file.
    pub fn wait_for(&self, timeout: Duration, check: impl Fn(&serde_json::Value) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if check(&self.state()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// Whether every thread of `pid` is stopped (`T` in `/proc/PID/task/*/stat`).
pub fn every_thread_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state != Some("T") {
            return false;
        }
        any = true;
    }
    any
}

/// Stops `pid` with SIGSTOP and waits (at most 5 s) until every thread of it is stopped: a
/// thread may finish an `accept` or a reply before the stop takes it.
pub async fn freeze(pid: i32) {
    signal(pid, libc::SIGSTOP);
    let asked = std::time::Instant::now();
    while !every_thread_stopped(pid) {
        assert!(
            asked.elapsed() < std::time::Duration::from_secs(5),
            "SIGSTOP not taken"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Sends a signal to a pid.
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: kill(2) with plain integers.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Whether a pid exists.
pub fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

impl Drop for Supervised<'_> {
    fn drop(&mut self) {
        let state = self.try_state();
        let _ = self.ctl("stop");
        if let Some(state) = state {
            for key in ["supervisor_pid", "worker_pid"] {
                if let Some(pid) = state[key].as_i64().and_then(|p| i32::try_from(p).ok())
                    && alive(pid)
                {
                    signal(pid, libc::SIGKILL);
                }
            }
        }
    }
}
