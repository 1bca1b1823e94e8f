//! The binaries as an operator runs them: `musicd run` with a config file (access log,
//! graceful stop, config errors) and `musicctl import` / `resolve`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::daemon::Daemon;
use crate::harness::{TestEnv, fetch_with, free_port, http_get, pattern};
use mongodb::bson::{Bson, doc};
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn musicd_run_logs_every_request_and_stops_gracefully_on_sigterm() {
    let env = TestEnv::shared_with(&["access_log.format=combined"]).await;
    let big = pattern(24 * 1024 * 1024, 1);
    let (id, _) = env.track("big.mp3", &big).await;
    let mut daemon = Daemon::start(&env).await;
    let url = format!("{}/musicdb/{}/big.mp3", daemon.base, id.to_hex());

    let small = fetch_with(
        &url,
        &[("range", "bytes=0-99"), ("x-request-id", "req-abc-1")],
    )
    .await;
    assert_eq!(small.0, StatusCode::PARTIAL_CONTENT);
    fetch_with(&url, &[("range", "bytes=0-9")]).await;
    let bad = http_get(format!("{}/musicdb/nope", daemon.base)).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);

    // A slow download in flight when SIGTERM arrives still completes.
    let (download, received) = crate::harness::start_download(&url).await;
    daemon.signal(libc::SIGTERM);
    // Stopped accepting: a new connection is refused while the old one drains.
    daemon.until_refusing(Duration::from_secs(10)).await;
    let refused = reqwest::Client::new()
        .get(format!("{}/healthz", daemon.base))
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "new connections must be refused after SIGTERM"
    );
    crate::harness::finish_download(download, received, big.len()).await;
    daemon.exits_cleanly(Duration::from_secs(10));

    // The access log (combined format, on stderr by default) beside the application log.
    let log = daemon.log_text();
    let access: Vec<&str> = log.lines().filter(|l| l.contains(" - - [")).collect();
    assert!(access.len() >= 4, "one access line per request:\n{log}");
    let first = access
        .iter()
        .find(|l| l.contains(" req-abc-1 "))
        .expect("request id logged");
    assert!(first.starts_with("127.0.0.1 - - ["), "{first}");
    for field in ["\"GET /musicdb/", " HTTP/1.1\" 206 100 ", " miss "] {
        assert!(first.contains(field), "{field} missing in {first}");
    }
    assert!(
        access
            .iter()
            // Within a second of the first lookup the in-process cache answers.
            .any(|l| l.contains("\" 206 10 ") && l.contains(" local ")),
        "{log}"
    );
    assert!(access.iter().any(|l| l.contains("\" 400 ")), "{log}");
    assert!(log.contains("SIGTERM"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_stops_musicd_with_a_message_naming_the_key_and_the_file() {
    let env = TestEnv::new().await;
    let cases = [
        ("listen = \"127.0.0.1:1\"\n[redis]\nttl = 5\n", "ttl"),
        ("media_roots = [\"/no/such/music\"]\n", "media_roots"),
        ("serve_mode = \"carrier-pigeon\"\n", "serve_mode"),
        ("[mongodb]\nuri = \"http://x\"\n", "mongodb.uri"),
        ("listen = [\n", "TOML"),
    ];
    for (text, expected) in cases {
        let file = env.dir.path().join("bad.toml");
        let roots = format!("media_roots = [\"{}\"]\n", env.media.display());
        let text = if text.contains("media_roots") {
            text.to_string()
        } else {
            format!("{roots}{text}")
        };
        std::fs::write(&file, &text).expect("write");
        let output = crate::harness::clean_command("musicd")
            .args(["run", "--config"])
            .arg(&file)
            .output()
            .expect("run musicd");
        assert!(!output.status.success(), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text}: {stderr}");
        assert!(stderr.contains("bad.toml"), "{text}: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn musicctl_import_is_idempotent_and_resolve_explains_an_id() {
    let env = TestEnv::new().await;
    env.write_file("Artist/One.mp3", b"one");
    env.write_file("Artist/Two_Song.flac", b"two!");
    env.write_file("Artist/cover.jpg", b"not audio");
    env.write_file("Other/Three.m4a", b"three");

    let import = || {
        crate::harness::clean_command("musicctl")
            .arg("--config")
            .arg(&env.config_file)
            .arg("import")
            .arg(&env.media)
            .output()
            .expect("run musicctl")
    };
    let first = import();
    crate::harness::succeeded(&first);
    let stdout = String::from_utf8_lossy(&first.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines
            .iter()
            .all(|l| l.len() > 25 && l.as_bytes()[24] == b'\t')
    );
    assert!(!stdout.contains("cover.jpg"));

    let second = import();
    assert!(second.status.success());
    assert!(second.stdout.is_empty(), "nothing new on the second run");
    assert!(String::from_utf8_lossy(&second.stderr).contains("0 new, 3 already present"));
    assert_eq!(env.tracks.count_documents(doc! {}).await.expect("count"), 3);

    let two = env
        .tracks
        .find_one(doc! { "title": "Two Song" })
        .await
        .expect("query")
        .expect("document with title from the file name");
    assert_eq!(two.get("size"), Some(&Bson::Int64(4)));
    assert!(matches!(two.get("mtime"), Some(Bson::DateTime(_))));
    let id = two.get_object_id("_id").expect("id").to_hex();
    assert!(stdout.contains(&id));

    let list = crate::harness::clean_command("musicctl")
        .arg("--config")
        .arg(&env.config_file)
        .arg("list")
        .output()
        .expect("run musicctl");
    assert!(list.status.success());
    let listed = String::from_utf8_lossy(&list.stdout);
    assert_eq!(listed.lines().count(), 3, "{listed}");
    assert!(listed.contains(&format!(
        "{id}\t{}",
        env.media.join("Artist/Two_Song.flac").display()
    )));

    let resolve = |id: &str| {
        crate::harness::clean_command("musicctl")
            .arg("--config")
            .arg(&env.config_file)
            .args(["resolve", id, "--json"])
            .output()
            .expect("run musicctl")
    };
    let found = resolve(&id);
    assert!(found.status.success());
    let report: serde_json::Value = serde_json::from_slice(&found.stdout).expect("json");
    assert_eq!(report["database"], "found");
    assert_eq!(report["servable"], true);
    let file = report["file"].as_str().unwrap_or_default();
    assert!(file.ends_with("Artist/Two_Song.flac"), "{report}");

    let missing = resolve("0123456789abcdef01234567");
    assert_eq!(missing.status.code(), Some(1));
    let invalid = resolve("nope");
    assert_eq!(invalid.status.code(), Some(2));

    // A directory outside the media roots is refused: musicd could never serve it.
    let outside = crate::harness::clean_command("musicctl")
        .arg("--config")
        .arg(&env.config_file)
        .arg("import")
        .arg(env.dir.path())
        .output()
        .expect("run musicctl");
    assert_eq!(outside.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&outside.stderr).contains("not under any media root"));
}

/// Rotation as logrotate does it (`deploy/logrotate/musicd`: move, then SIGUSR1): every
/// request has its line, before the move in the old file, after the signal in the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr1_reopens_the_access_log_without_losing_a_line() {
    let scratch = crate::harness::tempdir();
    let path = scratch.path().join("access.log");
    let setting = format!("access_log.path={}", path.display());
    let env = TestEnv::shared_with(&[setting.as_str(), "access_log.format=combined"]).await;
    let (id, _) = env.track("r.mp3", &pattern(5000, 4)).await;
    let mut daemon = Daemon::start(&env).await;
    let url = format!("{}/musicdb/{}/r.mp3", daemon.base, id.to_hex());
    for _ in 0..150 {
        crate::harness::fetch(&url).await;
    }
    let rotated = scratch.path().join("access.log.1");
    std::fs::rename(&path, &rotated).expect("rotate");
    daemon.signal(libc::SIGUSR1);
    // The reopen is asynchronous to the signal: wait until the new file exists.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !path.exists() {
        assert!(Instant::now() < deadline, "SIGUSR1 did not reopen the log");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..150 {
        crate::harness::fetch(&url).await;
    }
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait(Duration::from_secs(10)).expect("musicd exits");
    assert!(status.success(), "{status:?}");
    let lines = |p: &std::path::Path| {
        std::fs::read_to_string(p)
            .expect("log")
            .lines()
            .filter(|l| l.contains("/r.mp3 HTTP/1.1\" 200 5000 "))
            .count()
    };
    let (old, new) = (lines(&rotated), lines(&path));
    assert_eq!(old + new, 300, "old {old} + new {new}");
    assert!(
        new >= 150,
        "lines after the signal went to the new file: {new}"
    );
    assert!(
        !daemon.log_text().contains(" - - ["),
        "the access log is not on stderr"
    );
}

/// Started with `ulimit -n 256` and hit by 600 keep-alive clients: musicd raises what it
/// can, fits `max_connections` to the descriptors it has, and says so; every client gets
/// either its track or the clean 503, never an error because descriptors ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_low_open_file_limit_caps_connections_instead_of_failing_tracks() {
    let env = TestEnv::new().await;
    let bytes = pattern(4096, 12);
    let (id, _) = env.track("fd.mp3", &bytes).await;
    let port = free_port();
    let log = env.dir.path().join("fd.stderr");
    let stderr = std::fs::File::create(&log).expect("log file");
    let inner = env.command("musicd");
    let mut command = common_sh(&inner);
    command
        .arg("run")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(stderr);
    let mut child = crate::harness::spawn(command);
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "musicd did not come up");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let path = format!("/musicdb/{}/fd.mp3", id.to_hex());
    let (served, refused) = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut streams = Vec::new();
        for _ in 0..600 {
            let mut stream = crate::harness::raw::connect(addr);
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
            stream.write_all(request.as_bytes()).expect("write");
            streams.push(stream);
        }
        let (mut served, mut refused) = (0, 0);
        for stream in &mut streams {
            let answer = crate::harness::raw::read_responses(stream, 1, &[false]);
            match answer[0].status {
                200 => {
                    assert_eq!(answer[0].body, bytes);
                    served += 1;
                }
                503 => refused += 1,
                other => panic!("a valid track got {other}: {answer:?}"),
            }
        }
        (served, refused)
    })
    .await
    .expect("clients");
    let _ = crate::harness::procs::kill_child(&mut child);
    assert!(served >= 30, "served {served}, refused {refused}");
    assert!(
        refused > 0,
        "600 connections cannot all fit in 256 descriptors"
    );
    let text = std::fs::read_to_string(&log).expect("log");
    assert!(
        text.contains("lowered to fit the open-file limit"),
        "{text}"
    );
}

/// `command` run under `sh` after `ulimit -n 256` (soft and hard), its program and
/// arguments and environment kept.
fn common_sh(command: &std::process::Command) -> std::process::Command {
    let mut sh = std::process::Command::new("sh");
    sh.env_clear();
    for (key, value) in command.get_envs() {
        if let Some(value) = value {
            sh.env(key, value);
        }
    }
    sh.arg("-c")
        .arg("ulimit -n 256 && exec \"$@\"")
        .arg("sh")
        .arg(command.get_program())
        .args(command.get_args());
    sh
}

/// Shell completions and man pages come from the same clap definitions as the commands.
#[test]
fn completions_and_man_pages_describe_the_commands() {
    for (binary, subcommand) in [("musicd", "restart"), ("musicctl", "purge")] {
        for (shell, marker) in [
            ("bash", format!("complete -F _{binary} ")),
            ("zsh", format!("#compdef {binary}\n")),
            ("fish", format!("complete -c {binary} ")),
        ] {
            let output = crate::harness::clean_command(binary)
                .args(["completions", shell])
                .output()
                .expect("run");
            assert!(output.status.success(), "{binary} completions {shell}");
            let text = String::from_utf8_lossy(&output.stdout);
            assert!(text.contains(&marker), "{binary} {shell}: {text}");
            assert!(
                text.contains(subcommand),
                "{binary} {shell} lacks {subcommand}"
            );
        }
        let man = crate::harness::clean_command(binary)
            .arg("man")
            .output()
            .expect("run");
        assert!(man.status.success());
        let text = String::from_utf8_lossy(&man.stdout);
        assert!(text.contains(&format!(".TH {binary} 1 ")), "{text}");
        assert!(text.contains(subcommand), "{binary} man lacks {subcommand}");

        // `musicctl completions bash | head` : a reader that goes away is no crash.
        for args in [&["completions", "bash"][..], &["man"][..]] {
            let mut child = crate::harness::clean_command(binary)
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn");
            drop(child.stdout.take());
            let output = child.wait_with_output().expect("wait");
            assert!(
                output.status.success() && output.stderr.is_empty(),
                "{binary} {args:?} into a closed pipe: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

/// A stand-in for the old Node service: the files it knows by id, `200 "no file"` for the
/// rest (what express + mongoose + sendfile did).
fn old_service(known: std::collections::HashMap<String, Vec<u8>>) -> u16 {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let id = line.split('/').nth(2).unwrap_or_default().to_string();
            let mut stream = reader.into_inner();
            let (kind, body) = match known.get(&id) {
                Some(bytes) => ("audio/mpeg", bytes.clone()),
                None => ("text/html; charset=utf-8", b"no file".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    port
}

/// `musicctl compare --against`: per track, whether musicd and the old service agree;
/// the old service's "no file" answers are flagged; exit 0 only when all agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_checks_a_cut_over_track_by_track() {
    let env = TestEnv::new().await;
    let same = pattern(3000, 31);
    let (agreeing, _) = env.track("a.mp3", &same).await;
    let (changed, _) = env.track("b.mp3", &pattern(3000, 32)).await;
    let (missing, _) = env.track("c.mp3", &pattern(3000, 33)).await;
    let server = env.musicd().await;
    let mut known = std::collections::HashMap::new();
    known.insert(agreeing.to_hex(), same.clone());
    known.insert(changed.to_hex(), pattern(3000, 99));
    let port = old_service(known);
    let output = env
        .command("musicctl")
        .args(["compare", "--json", "--against"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--base")
        .arg(server.url(""))
        .output()
        .expect("musicctl compare");
    assert_eq!(
        output.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["compared"], 3, "{report}");
    assert_eq!(report["agree"], 1, "{report}");
    assert_eq!(report["no_file_with_200"], 1, "{report}");
    let by_id = |id: &mongodb::bson::oid::ObjectId| {
        report["tracks"]
            .as_array()
            .expect("tracks")
            .iter()
            .find(|t| t["id"] == id.to_hex())
            .cloned()
            .expect("track in report")
    };
    assert_eq!(by_id(&agreeing)["agree"], true);
    assert!(
        by_id(&changed)["differences"]
            .to_string()
            .contains("body differs")
    );
    let missing = by_id(&missing);
    assert_eq!(missing["other"]["no_file"], true, "{missing}");
    assert_eq!(missing["musicd"]["status"], 200);

    // A sample of one that the old service serves identically: exit 0.
    let only = TestEnv::new().await;
    let (id, _) = only.track("o.mp3", &same).await;
    let server = only.musicd().await;
    let mut known = std::collections::HashMap::new();
    known.insert(id.to_hex(), same.clone());
    let port = old_service(known);
    let output = only
        .command("musicctl")
        .args(["compare", "--sample", "1", "--against"])
        .arg(format!("http://127.0.0.1:{port}"))
        .arg("--base")
        .arg(server.url(""))
        .output()
        .expect("musicctl compare");
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("1 tracks, 1 agree, 0 differ"), "{text}");
}

/// The CPUs a thread may run on, from `Cpus_allowed_list` ("0-1", "0,2-3").
fn cpus_allowed(status: &str) -> Vec<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let (from, to) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(from), Ok(to)) = (from.parse::<usize>(), to.parse::<usize>()) {
            cpus.extend(from..=to);
        }
    }
    cpus
}

/// The CPUs each named thread of process `pid` may run on.
fn thread_cpus(pid: u32) -> Vec<(String, Vec<usize>)> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            Some((name.trim().to_string(), cpus_allowed(&status)))
        })
        .collect()
}

/// With `worker_cpu_affinity` (the default) each event loop of `musicd run` keeps to a CPU
/// of its own: left to the scheduler, two loops sometimes shared a core and p99 latency
/// went from a few to tens of milliseconds. Off, every loop may run anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_loop_keeps_to_a_cpu_of_its_own() {
    let allowed = cpus_allowed(&std::fs::read_to_string("/proc/self/status").expect("status"));
    let loops = allowed.len().min(2);
    for pinned in [true, false] {
        let env = TestEnv::shared_with(&[
            &format!("worker_cpu_affinity={pinned}"),
            &format!("worker_threads={loops}"),
        ])
        .await;
        let port = free_port();
        let mut command = env.command("musicd");
        command
            .arg("run")
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = crate::harness::spawn(command);
        let pid = child.id();
        let expected: Vec<(&str, Vec<usize>)> = [("musicd", 0), ("musicd-loop-1", 1)]
            .into_iter()
            .take(loops)
            .map(|(name, nth)| {
                (
                    name,
                    if pinned {
                        vec![allowed[nth]]
                    } else {
                        allowed.clone()
                    },
                )
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let seen = thread_cpus(pid);
            let all = expected.iter().all(|(name, cpus)| {
                seen.iter()
                    .any(|(thread, allowed)| thread == name && allowed == cpus)
            });
            if all {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "pinned {pinned}: expected {expected:?}, threads {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = crate::harness::procs::kill_child(&mut child);
    }
}

/// The top-level keys of a JSON object, sorted.
fn keys(report: &serde_json::Value) -> Vec<String> {
    let mut keys: Vec<String> = report
        .as_object()
        .map(|object| object.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_report_keeps_its_shape() {
    // Scripts parse these: a key renamed or dropped breaks them, so each command's keys
    // are pinned here (`replay` and `players` pin theirs in their own tests).
    let env = TestEnv::new().await;
    let (id, _) = env.track("shape.mp3", &pattern(4096, 7)).await;
    let id = id.to_hex();
    let server = env.musicd().await;
    let base = server.url("");
    let key_glob = format!("{}*", env.config.redis.prefix);
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (
            vec!["purge", "--dry-run", &key_glob],
            &[
                "bans",
                "dry_run",
                "failed",
                "leases_revoked",
                "matched",
                "nodes",
                "removed",
                "sample",
                "seconds",
            ],
        ),
        (
            vec!["purge", "--dry-run", "--id", &id],
            &["bans", "dry_run", "key", "removed"],
        ),
        (vec!["health"], &["checks", "status"]),
        (
            vec!["reindex", "--dry-run"],
            &[
                "cache_entries",
                "changed_meanwhile",
                "documents",
                "dry_run",
                "indexed",
                "invalid_document",
                "leases_revoked",
                "missing_file",
                "outside_roots",
                "pruned",
                "seconds",
                "write_failed",
            ],
        ),
        (
            vec!["resolve", &id],
            &[
                "cache",
                "cached_path",
                "database",
                "database_path",
                "file",
                "id",
                "key",
                "problem",
                "servable",
            ],
        ),
        (
            vec!["compare", "--base", &base, "--against", &base],
            &[
                "agree",
                "compared",
                "disagree",
                "no_file_with_200",
                "tracks",
            ],
        ),
        (vec!["verify"], &["checked", "counts", "findings"]),
    ];
    let mut wrong = Vec::new();
    for (args, expected) in cases {
        // A report is printed whatever it says (`health` is down here: no daemon listens
        // where the config says); a command that could not run prints no JSON and fails
        // in `musicctl_json`.
        let (code, report) = tokio::task::block_in_place(|| env.musicctl_json(&args));
        assert!(code.is_some(), "{args:?}: killed: {report}");
        let found = keys(&report);
        if found != *expected {
            wrong.push(format!("{args:?}: {found:?}"));
        }
    }
    server.shutdown().await;
    assert!(
        wrong.is_empty(),
        "JSON shapes changed:\n{}",
        wrong.join("\n")
    );
}
