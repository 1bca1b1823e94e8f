//! The OCI image as an operator runs it: built by `scripts/image.sh` (podman, no base
//! image), run non-root on a read-only root without capabilities, configured by `MUSICD_*`
//! variables; `musicctl` from the same image; and the Kubernetes manifests of
//! `deploy/kubernetes/` played by `podman kube play`.
//!
//! On this kind of machine podman needs `--runtime runc` (crun fails on its hybrid cgroups)
//! and explicit `--ulimit nofile=...` and `--ulimit nproc=...` (the defaults it asks for
//! exceed the hard limits a sandbox gives). Containers use the host's network, so they
//! reach the suite's private Redis and MongoDB on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use mongodb::bson::oid::ObjectId;
use reqwest::StatusCode;

use crate::harness::{TestEnv, free_port, pattern, repo_script, succeeded};

/// The image, built once per test run: its name and its size in bytes.
pub(crate) fn image() -> &'static (String, u64) {
    static IMAGE: OnceLock<(String, u64)> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let output = repo_script("scripts/image.sh")
            // The suite's build: what ships is the `dist` profile, the same code linked
            // with LTO, which would take minutes more to build here.
            .env("BUILD_PROFILE", "release")
            .output()
            .expect("scripts/image.sh");
        let stdout = succeeded(&output);
        let last = stdout.lines().last().expect("image.sh prints the image");
        let (name, size) = last.split_once(' ').expect("NAME SIZE");
        (name.to_string(), size.trim().parse().expect("size"))
    })
}

/// `podman` with what this machine needs, from a `containers.conf` of the suite's own
/// (`CONTAINERS_CONF`): the runc runtime, and ulimits within the hard limits.
pub(crate) fn podman() -> Command {
    static CONF: OnceLock<PathBuf> = OnceLock::new();
    let conf = CONF.get_or_init(|| {
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("containers.conf");
        // Enough for the tests' few connections and threads, and under any sandbox's hard
        // limits (podman's own defaults ask for a million open files).
        let nofile = hard_limit(libc::RLIMIT_NOFILE).min(16384);
        let nproc = 4096;
        let text = format!(
            "[containers]\ndefault_ulimits = [\"nofile={nofile}:{nofile}\", \"nproc={nproc}:{nproc}\"]\n\
             [engine]\nruntime = \"runc\"\n"
        );
        std::fs::write(&path, text).expect("containers.conf");
        path
    });
    let mut command = Command::new("podman");
    command.env("CONTAINERS_CONF", conf);
    command
}

/// `podman run` on the host's network.
pub(crate) fn podman_run() -> Command {
    let mut command = podman();
    command.args(["run", "--network", "host"]);
    command
}

/// This process's hard limit of a resource.
fn hard_limit(resource: libc::__rlimit_resource_t) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes into the struct we own and pass by pointer.
    let ok = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
    if ok { limit.rlim_max } else { 1024 }
}

/// A container removed when dropped.
pub(crate) struct Container(pub(crate) String);

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--time", "0", &self.0])
            .output();
    }
}

/// A fresh container name.
pub(crate) fn container_name(what: &str) -> String {
    format!(
        "musicd-test-{what}-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// A media directory every user can read (the clone may sit under a directory only root
/// enters, where the image's uid 10001 could not reach its files), with one track in it,
/// recorded in the env's catalogue: the directory, the track's id and its bytes.
pub(crate) async fn open_media(
    env: &TestEnv,
    name: &str,
) -> (tempfile::TempDir, ObjectId, Vec<u8>) {
    let dir = tempfile::Builder::new()
        .prefix("musicd-media-")
        .tempdir_in("/tmp")
        .expect("media dir");
    set_mode(dir.path(), 0o755);
    let bytes = pattern(200_000, 11);
    let path = dir.path().join(name);
    std::fs::write(&path, &bytes).expect("track");
    set_mode(&path, 0o644);
    let id = ObjectId::new();
    env.tracks
        .insert_one(doc! { "_id": id, "path": path.display().to_string() })
        .await
        .expect("insert");
    (dir, id, bytes)
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The `MUSICD_*` variables that point a container at the env's backends and `media`,
/// listening on `port` (tracks) and `ops` (probes, metrics).
pub(crate) fn env_vars(env: &TestEnv, media: &Path, port: u16, ops: u16) -> Vec<(String, String)> {
    let redis = match &env.config.redis.target {
        musicd::redis_link::RedisTarget::Single(url) => url.clone(),
        musicd::redis_link::RedisTarget::Cluster(nodes) => nodes.join(","),
    };
    [
        ("MUSICD_LISTEN", format!("127.0.0.1:{port}")),
        ("MUSICD_OPS_LISTEN", format!("127.0.0.1:{ops}")),
        ("MUSICD_MEDIA_ROOTS", media.display().to_string()),
        ("MUSICD_REDIS_URL", redis),
        ("MUSICD_REDIS_PREFIX", env.config.redis.prefix.clone()),
        ("MUSICD_MONGODB_URI", env.config.mongodb.uri.clone()),
        (
            "MUSICD_MONGODB_DATABASE",
            env.config.mongodb.database.clone(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Starts the image detached as `name`, non-root on a read-only root without
/// capabilities, `media` mounted read-only, configured by [`env_vars`] with `overrides`
/// (`MUSICD_...` pairs) applied.
pub(crate) fn start_container(
    env: &TestEnv,
    media: &Path,
    (port, ops): (u16, u16),
    name: &str,
    overrides: &[(&str, String)],
) -> Container {
    let container = Container(container_name(name));
    let mut command = podman_run();
    command.args([
        "--detach",
        "--name",
        &container.0,
        "--read-only",
        "--cap-drop",
        "ALL",
    ]);
    command.args(["--volume", &format!("{0}:{0}:ro", media.display())]);
    let mut vars = env_vars(env, media, port, ops);
    for (key, value) in overrides {
        vars.retain(|(k, _)| k != key);
        vars.push((key.to_string(), value.clone()));
    }
    for (key, value) in vars {
        command.args(["--env", &format!("{key}={value}")]);
    }
    command.arg(&image().0);
    succeeded(&run(&mut command));
    container
}

/// Waits until `GET url` answers 200 (30 s at most).
pub(crate) async fn until_ok(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(answer) = reqwest::get(url).await
            && answer.status() == StatusCode::OK
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn inspect(container: &str, format: &str) -> String {
    let output = podman()
        .args(["inspect", "--format", format, container])
        .output()
        .expect("podman inspect");
    succeeded(&output).trim().to_string()
}

/// A line of `/proc/PID/status` (`Uid`, `CapEff`, ...), its value.
fn proc_status(pid: &str, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .expect("field")
        .trim()
        .to_string()
}

fn run(command: &mut Command) -> Output {
    command.output().expect("podman runs")
}

#[test]
fn the_image_is_small_and_holds_only_the_binaries_their_libraries_and_certificates() {
    let (name, size) = image();
    // musicd, musicctl (with the load and play-counting tools), their few libraries and
    // the CA certificates: no distribution (36.8 MB before `plays` and its regex engine).
    assert!(*size < 45 * 1000 * 1000, "{name} is {size} bytes");
    // No shell, no package manager: a command that is not ours does not exist.
    let output = run(podman_run().args(["--rm", name, "/bin/sh", "-c", "true"]));
    assert!(!output.status.success(), "the image has a shell");
    let output = run(podman_run().args(["--rm", name, "musicctl", "--version"]));
    assert!(
        succeeded(&output).starts_with("musicctl "),
        "musicctl runs from the same image"
    );
}

#[test]
fn the_image_without_config_or_media_says_what_is_missing_and_exits_at_once() {
    let (name, _) = image();
    let started = Instant::now();
    let output = run(podman_run().args(["--rm", "--read-only", "--cap-drop", "ALL", name]));
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("media_roots") && lines[0].contains("/srv/music"),
        "{stderr}"
    );
    // podman's own start is most of it; a crash loop's backoff would be seconds.
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_serves_a_track_as_uid_10001_on_a_read_only_root_without_capabilities() {
    let (image, _) = image();
    let env = TestEnv::new().await;
    let (media, id, bytes) = open_media(&env, "image.mp3").await;
    let (port, ops) = (free_port(), free_port());
    let json = [("MUSICD_ACCESS_LOG_FORMAT", "json".to_string())];
    let container = start_container(&env, media.path(), (port, ops), "serve", &json);

    until_ok(&format!("http://127.0.0.1:{ops}/readyz")).await;
    let url = format!("http://127.0.0.1:{port}/musicdb/{}/image.mp3", id.to_hex());
    let answer = reqwest::get(&url).await.expect("track");
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.bytes().await.expect("body"), bytes);

    // Who it runs as, what it may do, and what it may write.
    let pid = inspect(&container.0, "{{.State.Pid}}");
    let uids = proc_status(&pid, "Uid");
    assert!(
        uids.split_whitespace().all(|uid| uid == "10001"),
        "Uid: {uids}"
    );
    assert_eq!(proc_status(&pid, "CapEff"), "0000000000000000");
    assert_eq!(
        inspect(&container.0, "{{.HostConfig.ReadonlyRootfs}}"),
        "true"
    );

    // The access log goes to stdout, the application log to stderr.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = run(podman().args(["logs", &container.0]));
        let stdout = String::from_utf8_lossy(&logs.stdout);
        if stdout.contains(&id.to_hex()) {
            assert!(stdout.lines().any(|l| l.starts_with('{')), "{stdout}");
            assert!(
                String::from_utf8_lossy(&logs.stderr).contains("musicd serving"),
                "{logs:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no access line on stdout: {stdout}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // musicctl from the same image, against the same backends and this musicd.
    let mut health = podman_run();
    health.args(["--rm", "--read-only"]);
    for (key, value) in env_vars(&env, media.path(), port, ops) {
        health.args(["--env", &format!("{key}={value}")]);
    }
    health.args([image, "musicctl", "health", "--json"]);
    let output = run(&mut health);
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {output:?}"));
    let state = |name: &str| {
        report["checks"]
            .as_array()
            .and_then(|checks| checks.iter().find(|c| c["name"] == name))
            .map(|c| c["state"].clone())
    };
    assert_eq!(state("redis"), Some("ok".into()), "{report}");
    assert_eq!(state("daemon"), Some("ok".into()), "{report}");
    drop(container);
    drop(media);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_redis_address_is_not_ready_and_names_redis_without_a_crash_loop() {
    let env = TestEnv::new().await;
    let (media, _, _) = open_media(&env, "wrong.mp3").await;
    let (port, ops) = (free_port(), free_port());
    let away = [(
        "MUSICD_REDIS_URL",
        format!("redis://127.0.0.1:{}", free_port()),
    )];
    let container = start_container(&env, media.path(), (port, ops), "wrong-redis", &away);
    let readyz = format!("http://127.0.0.1:{ops}/readyz");
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        if let Ok(answer) = reqwest::get(&readyz).await {
            assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
            break answer.json::<serde_json::Value>().await.expect("json");
        }
        assert!(Instant::now() < deadline, "the ops port never answered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        body["reason"].as_str().is_some_and(|r| r.contains("redis")),
        "{body}"
    );
    // Alive and not restarting: liveness holds, the container is still the first run.
    let health = reqwest::get(format!("http://127.0.0.1:{ops}/healthz"))
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    assert_eq!(inspect(&container.0, "{{.State.Status}}"), "running");
    assert_eq!(inspect(&container.0, "{{.RestartCount}}"), "0");
}

/// `deploy/kubernetes/NAME` with every `  KEY: value` line of `values` replaced (the
/// manifests are YAML, but flat enough for that), and `replace` pairs applied.
pub(crate) fn manifest(
    name: &str,
    values: &[(String, String)],
    replace: &[(&str, &str)],
) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/kubernetes")
        .join(name);
    let mut text = std::fs::read_to_string(&path).expect("manifest");
    for (from, to) in replace {
        assert!(text.contains(from), "{name} has no `{from}`");
        text = text.replace(from, to);
    }
    text.lines()
        .map(|line| {
            let key = line.trim_start().split(':').next().unwrap_or_default();
            match values.iter().find(|(k, _)| k == key) {
                Some((k, v)) if line.starts_with("  ") => format!("  {k}: \"{v}\""),
                _ => line.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_play_of_the_manifests_serves_a_track_and_passes_its_probes() {
    let (image, _) = image();
    let env = TestEnv::new().await;
    let (media, id, bytes) = open_media(&env, "kube.mp3").await;
    let (port, ops) = (free_port(), free_port());
    let work = tempfile::tempdir().expect("dir");
    let values = env_vars(&env, media.path(), port, ops);
    let configmap = work.path().join("configmap.yaml");
    std::fs::write(&configmap, manifest("configmap.yaml", &values, &[])).expect("write");
    // The operator's media volume is this test's directory; one replica (host network).
    let media_path = media.path().display().to_string();
    let volume = format!("hostPath:\n            path: {media_path}");
    let mount = format!("mountPath: {media_path}");
    let deployment = work.path().join("deployment.yaml");
    let text = manifest(
        "deployment.yaml",
        &[],
        &[
            ("replicas: 2", "replicas: 1"),
            ("image: musicd:0.1.0", &format!("image: {image}")),
            (
                "persistentVolumeClaim:\n            claimName: musicd-media\n            readOnly: true",
                &volume,
            ),
            ("mountPath: /srv/music", &mount),
            // On the host's network podman maps no ports: the probes name the port.
            (
                "          ports:\n            - name: http\n              containerPort: 23001\n            - name: ops\n              containerPort: 23002\n",
                "",
            ),
            (
                "port: ops\n            periodSeconds: 10",
                &format!("port: {ops}\n            periodSeconds: 10"),
            ),
            (
                "port: ops\n            periodSeconds: 2",
                &format!("port: {ops}\n            periodSeconds: 2"),
            ),
        ],
    );
    std::fs::write(&deployment, text).expect("write");
    let played = run(podman().args([
        "kube",
        "play",
        "--replace",
        "--network",
        "host",
        "--configmap",
        &configmap.display().to_string(),
        &deployment.display().to_string(),
    ]));
    let down = KubeDown(deployment.clone());
    succeeded(&played);

    // The probes as the kubelet asks them, from the manifest: liveness /healthz and
    // readiness /readyz on the ops port.
    let text = std::fs::read_to_string(&deployment).expect("read");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let at = text.find(probe).expect("probe");
        assert!(text[at..].contains(&format!("path: {path}")), "{probe}");
        until_ok(&format!("http://127.0.0.1:{ops}{path}")).await;
    }
    let url = format!("http://127.0.0.1:{port}/musicdb/{}/kube.mp3", id.to_hex());
    let answer = reqwest::get(&url).await.expect("track");
    assert_eq!(answer.status(), StatusCode::OK);
    assert_eq!(answer.bytes().await.expect("body"), bytes);
    // The pod runs as the manifest says.
    let ps = run(podman().args(["ps", "--format", "{{.Names}}"]));
    let names = succeeded(&ps);
    let name = names
        .lines()
        .find(|n| n.starts_with("musicd-pod") && n.ends_with("-musicd"))
        .expect("the musicd container");
    let pid = inspect(name, "{{.State.Pid}}");
    assert!(proc_status(&pid, "Uid").starts_with("10001"));
    assert_eq!(proc_status(&pid, "CapEff"), "0000000000000000");
    drop(down);
    drop(media);
}

/// `podman kube down` of a played manifest when dropped.
struct KubeDown(PathBuf);

impl Drop for KubeDown {
    fn drop(&mut self) {
        let _ = podman().args(["kube", "down"]).arg(&self.0).output();
    }
}
