//! The files in `deploy/` work with the binaries: systemd accepts the units, socket
//! activation hands musicd its socket, and the samples agree with each other.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{TestEnv, bin, client, free_port};
use reqwest::StatusCode;

fn deploy(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn systemd_analyze_verify_accepts_the_units() {
    let dir = crate::harness::tempdir();
    // verify checks that ExecStart exists: point it at the binary this test built.
    let service =
        deploy("musicd.service").replace("/usr/bin/musicd", &bin("musicd").display().to_string());
    std::fs::write(dir.path().join("musicd.service"), service).expect("write");
    std::fs::write(dir.path().join("musicd.socket"), deploy("musicd.socket")).expect("write");
    let output = Command::new("systemd-analyze")
        .args(["verify", "./musicd.service", "./musicd.socket"])
        .current_dir(dir.path())
        .output()
        .expect("systemd-analyze (scripts/install-deps.sh installs systemd)");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.trim().is_empty(),
        "{stderr}"
    );
}

#[test]
fn the_samples_agree_on_addresses_and_paths() {
    let config: toml::Table = deploy("musicd.toml").parse().expect("toml");
    let listen = config["listen"].as_str().expect("listen");
    assert!(deploy("musicd.socket").contains(&format!("ListenStream={listen}")));
    let pid_file = config["daemon"]["pid_file"].as_str().expect("pid_file");
    assert!(deploy("logrotate/musicd").contains(&format!("cat {pid_file}")));
    let log_file = config["daemon"]["log_file"].as_str().expect("log_file");
    let log_dir = std::path::Path::new(log_file)
        .parent()
        .expect("dir")
        .display()
        .to_string();
    assert!(deploy("logrotate/musicd").contains(&format!("{log_dir}/*.log")));
    let service = deploy("musicd.service");
    assert!(service.contains("--config /etc/musicd/musicd.toml run"));
    let roots = config["media_roots"].as_array().expect("roots");
    for root in roots {
        let root = root.as_str().expect("root");
        assert!(service.contains(&format!("ReadOnlyPaths={root}")), "{root}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn musicd_run_serves_on_a_socket_passed_by_systemd_socket_activation() {
    let env = TestEnv::new().await;
    let (id, _) = env.track("s.mp3", b"socket activated").await;
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate");
    activator
        .args(["-l", &format!("127.0.0.1:{port}")])
        .arg(bin("musicd"))
        .arg("--config")
        .arg(&env.config_file)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = crate::harness::spawn(activator);
    // The config says listen = 127.0.0.1:0: only the passed socket can answer on `port`.
    let url = format!("http://127.0.0.1:{port}/musicdb/{}/s.mp3", id.to_hex());
    let deadline = Instant::now() + Duration::from_secs(20);
    let response = loop {
        match client().get(&url).send().await {
            Ok(response) => break response,
            Err(err) => {
                assert!(
                    Instant::now() < deadline,
                    "no answer on the activated socket: {err}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.bytes().await.expect("body").as_ref(),
        b"socket activated"
    );
    let _ = child.kill();
    let _ = child.wait();
}
