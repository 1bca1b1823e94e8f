//! A private varnishd (Debian's) on a free loopback port, running `deploy/varnish.vcl`
//! with its backend pointed at a test's server.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::backends::accepts;
use super::procs::{spawn, tempdir, wait_until};

/// A running varnishd.
pub struct Varnish {
    /// Its port.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Varnish {
    /// Runs `deploy/varnish.vcl` on `port` with its backend at `backend_port` on loopback.
    pub fn start_on(port: u16, backend_port: u16) -> Varnish {
        let vcl = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/varnish.vcl"),
        )
        .expect("deploy/varnish.vcl");
        let vcl = vcl.replace(
            ".port = \"23001\";",
            &format!(".port = \"{backend_port}\";"),
        );
        assert!(
            vcl.contains(&backend_port.to_string()),
            "backend substitution failed"
        );
        let dir = tempdir();
        let vcl_path = dir.path().join("musicd.vcl");
        std::fs::write(&vcl_path, vcl).expect("write vcl");
        let mut command = Command::new("varnishd");
        command
            .arg("-F")
            // No privilege separation jail: the test runs as whoever runs the tests.
            .args(["-j", "none"])
            .arg("-a")
            .arg(format!("127.0.0.1:{port}"))
            .arg("-f")
            .arg(&vcl_path)
            .arg("-n")
            .arg(dir.path().join("state"))
            .args(["-s", "malloc,64m", "-T", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = spawn(command);
        let up = wait_until(&mut child, Duration::from_secs(30), || accepts(port));
        assert!(up, "varnishd did not come up");
        Varnish {
            port,
            child,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:port{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Varnish {
    fn drop(&mut self) {
        // SIGTERM, so the manager takes its cache process down with it.
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) with the pid of a child we spawned and still own.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        let _ = self.child.wait();
    }
}
