//! A private nginx (Debian's) on a free loopback port, configured from `deploy/nginx.conf`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::backends::accepts;
use super::procs::wait_until;
use super::{free_port, spawn, tempdir};

/// A running nginx.
pub struct Nginx {
    /// Its port.
    pub port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// Runs `deploy/nginx.conf` with the upstream pointed at `musicd` and the first media
    /// root at `media_root`, inside a minimal main config.
    pub fn start_deploy_config(musicd: &str, media_root: &Path) -> Nginx {
        Nginx::start_deploy_config_over(&[musicd], media_root)
    }

    /// The same, balancing over several musicd (the upstream's `server` lines).
    pub fn start_deploy_config_over(upstreams: &[&str], media_root: &Path) -> Nginx {
        let servers = upstreams
            .iter()
            .map(|u| format!("server {u} max_fails=1 fail_timeout=5s;"))
            .collect::<Vec<_>>()
            .join("\n    ");
        let musicd = upstreams.first().copied().unwrap_or_default();
        let site = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx.conf"),
        )
        .expect("deploy/nginx.conf");
        let port = free_port();
        let site = site
            .replace(
                "server 127.0.0.1:23001 max_fails=1 fail_timeout=5s;",
                &servers,
            )
            .replace("listen 8080;", &format!("listen 127.0.0.1:{port};"))
            .replace(
                "alias /srv/music/;",
                &format!("alias {}/;", media_root.display()),
            );
        assert!(
            site.contains(musicd) && site.contains(&port.to_string()),
            "substitutions failed"
        );
        Nginx::start(&site, port)
    }

    fn start(site: &str, port: u16) -> Nginx {
        let dir = tempdir();
        let d = dir.path().display();
        std::fs::write(dir.path().join("site.conf"), site).expect("write site");
        // Tests run as root in CI: workers must be able to read the 0700 temp dirs.
        let user = if unsafe_is_root() { "user root;" } else { "" };
        let main = format!(
            "{user}\n# One process: killing it on drop leaves no orphaned worker behind.\n\
             master_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  include /etc/nginx/mime.types;\n\
               client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
               include {d}/site.conf;\n}}\n"
        );
        std::fs::write(dir.path().join("nginx.conf"), main).expect("write conf");
        let mut command = Command::new("nginx");
        command
            .args([
                "-p",
                &d.to_string(),
                "-c",
                &format!("{d}/nginx.conf"),
                "-g",
                "daemon off;",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = spawn(command);
        let up = wait_until(&mut child, Duration::from_secs(10), || accepts(port));
        let log = || std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
        assert!(up, "nginx did not start: {}", log());
        Nginx {
            port,
            child,
            _dir: dir,
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn unsafe_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
