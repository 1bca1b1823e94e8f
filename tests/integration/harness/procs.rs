//! Processes and places: scratch dirs under `target/`, the spawner thread whose children
//! die with the test process, free loopback ports, and this package's binaries run with a
//! clean environment.

use std::collections::HashSet;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{LazyLock, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Where test data lives: inside `target/`, so nothing leaks into the system temp dir.
pub fn scratch_root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// A temp dir under [`scratch_root`], removed on drop.
pub fn tempdir() -> tempfile::TempDir {
    tempdir_named("musicd-test-")
}

pub(crate) fn tempdir_named(prefix: &str) -> tempfile::TempDir {
    std::fs::create_dir_all(scratch_root()).expect("create scratch root");
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(scratch_root())
        .expect("tempdir")
}

/// Shared servers live in statics, which are never dropped: their dirs carry the pid, and
/// each run removes those of test processes that are gone.
pub(crate) fn shared_tempdir() -> tempfile::TempDir {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    SWEEP.call_once(|| {
        let Ok(entries) = std::fs::read_dir(scratch_root()) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("musicd-shared-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    tempdir_named(&format!("musicd-shared-{}-", std::process::id()))
}

pub(crate) type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// The thread that spawns every server; it never exits, so `PDEATHSIG` fires only when the
/// whole test process ends (the signal is tied to the spawning *thread*).
pub(crate) static SPAWNER: LazyLock<Mutex<mpsc::Sender<SpawnRequest>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("test-spawner".into())
        .spawn(move || {
            for (mut command, reply) in rx {
                let _ = reply.send(spawn_with_death_signal(&mut command));
            }
        })
        .expect("spawner thread");
    Mutex::new(tx)
});

pub(crate) fn spawn_with_death_signal(command: &mut Command) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let die_with_parent = || {
        // SAFETY: prctl with integer arguments, async-signal-safe.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    };
    // SAFETY: the hook only calls prctl, which is async-signal-safe and touches no memory
    // of the parent; it runs in the child between fork and exec, as pre_exec requires.
    unsafe {
        command.pre_exec(die_with_parent);
    }
    command.spawn()
}

/// Spawns a child that dies with the test process.
pub fn spawn(command: Command) -> Child {
    let (tx, rx) = mpsc::channel();
    SPAWNER
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send((command, tx))
        .expect("spawner alive");
    rx.recv().expect("spawner reply").expect("spawn server")
}

pub(crate) static HANDED_OUT: LazyLock<Mutex<HashSet<u16>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// A loopback port that was free a moment ago and that no other test of this process got.
pub fn free_port() -> u16 {
    loop {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind probe")
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}

pub(crate) fn find_binary(env: &str, name: &str, fallback: &[PathBuf]) -> PathBuf {
    if let Ok(path) = std::env::var(env) {
        return PathBuf::from(path);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return candidate;
            }
        }
    }
    for candidate in fallback {
        if candidate.is_file() {
            return candidate.clone();
        }
    }
    panic!("{name} not found: install it (scripts/install-deps.sh) or set {env}");
}

pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Waits until `ready` is true or the child exits; false if it exited or timed out.
pub(crate) fn wait_until(
    child: &mut Child,
    timeout: Duration,
    mut ready: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if ready() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A command for one of this package's binaries with a clean environment (only `PATH`).
pub fn clean_command(binary: &str) -> Command {
    let mut command = Command::new(bin(binary));
    command.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        command.env("PATH", path);
    }
    command
}

/// One of the repository's scripts (`scripts/package.sh`, `scripts/image.sh`), run from the
/// repository as an operator runs it: without the variables `cargo test` sets for the test
/// process. The `cargo build --release` inside such a script must find the build the suite
/// made before the tests; with `CARGO_MANIFEST_DIR` set, ring's build script (which tracks
/// it) counts as changed, and the release tree was compiled again inside the tests (about
/// 3 minutes of the suite), then once more by the next build outside them.
pub fn repo_script(script: &str) -> Command {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new(root.join(script));
    command.current_dir(root);
    for (name, _) in std::env::vars_os() {
        let set_by_cargo_test = name.to_str().is_some_and(|name| {
            name == "CARGO"
                || name == "LD_LIBRARY_PATH"
                || (name.starts_with("CARGO_")
                    && name != "CARGO_HOME"
                    && name != "CARGO_TARGET_DIR")
        });
        if set_by_cargo_test {
            command.env_remove(name);
        }
    }
    command
}

/// Path to a built binary of this package.
pub fn bin(name: &str) -> PathBuf {
    match name {
        "musicd" => PathBuf::from(env!("CARGO_BIN_EXE_musicd")),
        "musicctl" => PathBuf::from(env!("CARGO_BIN_EXE_musicctl")),
        other => panic!("no binary {other}"),
    }
}

/// Stops a child this test spawned (SIGKILL, then reaps it).
pub fn kill_child(child: &mut Child) -> std::io::Result<()> {
    child.kill()?;
    child.wait().map(|_| ())
}

/// Asserts that a command succeeded, showing what it printed if not; its stdout.
pub fn succeeded(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Polls `check` every few milliseconds until it holds; panics with `what` if it does not
/// within `within`. For waiting on a condition, never on a clock.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + within;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
