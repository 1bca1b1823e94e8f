//! `musicctl plays`: listeners whose plays are known, written as nginx, musicd combined
//! and musicd JSON logs, are counted exactly, reason by reason; real listeners
//! (`musicctl players`) against a real musicd are counted as their own record says; and
//! bad input is counted or named, never fatal to the count.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::harness::{TestEnv, clean_command, pattern, tempdir};

const LONG: &str = "6b0dc37d3ba0d873deac9381";
const SHORT: &str = "6b0dc37d3ba0d873deac9382";
const UNKNOWN: &str = "6b0dc37d3ba0d873deac9383";
/// 128 kbit/s: 16,000 bytes a second of audio, after a 1,000-byte header.
const RATE: u64 = 16_000;
const HEADER: u64 = 1_000;
/// 200 s of audio, and 20 s (shorter than the 30 s threshold: it needs its whole size).
const LONG_SIZE: u64 = HEADER + 200 * RATE;
const SHORT_SIZE: u64 = HEADER + 20 * RATE;
/// 2026-12-01 22:00 UTC.
const T0: u64 = 1_796_162_400;

/// One logged request.
struct Req {
    at: u64,
    client: &'static str,
    agent: &'static str,
    method: &'static str,
    path: String,
    status: u16,
    /// The range asked for (`start`, inclusive `end`), for a 206.
    range: Option<(u64, u64)>,
    bytes: u64,
}

fn get(at: u64, client: &'static str, agent: &'static str, id: &str, from: u64, to: u64) -> Req {
    let size = if id == SHORT { SHORT_SIZE } else { LONG_SIZE };
    let whole = from == 0 && to == size;
    Req {
        at,
        client,
        agent,
        method: "GET",
        path: format!("/musicdb/{id}/track.mp3"),
        status: if whole { 200 } else { 206 },
        range: (!whole).then_some((from, to - 1)),
        bytes: to - from,
    }
}

fn other(at: u64, method: &'static str, path: &str, status: u16, agent: &'static str) -> Req {
    Req {
        at,
        client: "10.0.0.99",
        agent,
        method,
        path: path.to_string(),
        status,
        range: None,
        bytes: 0,
    }
}

/// Listeners whose plays are known (threshold 30 s: 481,000 bytes of the long track, the
/// whole short one), as the comments count them.
fn listeners() -> Vec<Req> {
    let long = |s: u64| HEADER + s * RATE;
    let mut reqs = vec![
        // A probe, then a whole listen: 1 play; the probe dropped.
        get(T0, "10.0.0.1", "Player/1", LONG, 0, 2),
        get(T0 + 1, "10.0.0.1", "Player/1", LONG, 0, LONG_SIZE),
        // Three ranges adding up to 31 s: 1 play.
        get(T0 + 10, "10.0.0.2", "Player/2", LONG, 0, long(10)),
        get(T0 + 20, "10.0.0.2", "Player/2", LONG, long(10), long(20)),
        get(T0 + 30, "10.0.0.2", "Player/2", LONG, long(20), long(31)),
        // A skip after 5 s: none.
        get(T0 + 40, "10.0.0.3", "Player/3", LONG, 0, long(5)),
        // The same listener within the window and after it: 2 plays (3 by calendar
        // day: the second listen is on the next UTC day).
        get(T0 + 50, "10.0.0.4", "Player/4", LONG, 0, LONG_SIZE),
        get(T0 + 2 * 3600, "10.0.0.4", "Player/4", LONG, 0, LONG_SIZE),
        get(T0 + 26 * 3600, "10.0.0.4", "Player/4", LONG, 0, LONG_SIZE),
        // Two user agents behind one address: 2 listeners, 2 plays.
        get(T0 + 60, "10.0.0.5", "Phone/1", LONG, 0, LONG_SIZE),
        get(T0 + 61, "10.0.0.5", "Desktop/2", LONG, 0, LONG_SIZE),
        // An IPv6 listener whose last 64 bits change halfway: stitched, 1 play.
        get(T0 + 70, "2001:db8:1:2::a", "Mobile/6", LONG, 0, 250_000),
        get(
            T0 + 80,
            "2001:db8:1:2:ffff::b",
            "Mobile/6",
            LONG,
            250_000,
            500_000,
        ),
        // Bots, built in and by --exclude-ua: dropped.
        get(T0 + 90, "10.0.0.7", "Googlebot/2.1", LONG, 0, LONG_SIZE),
        get(T0 + 91, "10.0.0.7", "Lavf/58.29.100", LONG, 0, LONG_SIZE),
        // The short track: 300,000 of its 321,000 bytes is none, all of it is 1.
        get(T0 + 100, "10.0.0.8", "Player/8", SHORT, 0, 300_000),
        get(T0 + 110, "10.0.0.9", "Player/9", SHORT, 0, SHORT_SIZE),
        // A track the facts do not know.
        get(T0 + 120, "10.0.0.10", "Player/10", UNKNOWN, 0, 600_000),
    ];
    reqs.extend([
        other(
            T0 + 130,
            "HEAD",
            &format!("/musicdb/{LONG}/a.mp3"),
            200,
            "Player/11",
        ),
        other(
            T0 + 131,
            "GET",
            &format!("/musicdb/{LONG}/a.mp3"),
            304,
            "Player/11",
        ),
        other(
            T0 + 132,
            "GET",
            &format!("/musicdb/{LONG}/a.mp3"),
            404,
            "Player/11",
        ),
        other(
            T0 + 133,
            "GET",
            &format!("/musicdb/{SHORT}/a.mp3"),
            503,
            "Player/11",
        ),
        other(T0 + 134, "GET", "/healthz", 200, "kube"),
        other(T0 + 135, "GET", "/favicon.ico", 404, "Player/11"),
    ]);
    reqs
}

fn clf(at: u64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (year, month, day) = civil(at / 86_400);
    let second = at % 86_400;
    format!(
        "{day:02}/{}/{year}:{:02}:{:02}:{:02} +0000",
        MONTHS[month as usize - 1],
        second / 3600,
        second / 60 % 60,
        second % 60
    )
}

fn iso(at: u64) -> String {
    let (year, month, day) = civil(at / 86_400);
    let second = at % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        second / 3600,
        second / 60 % 60,
        second % 60
    )
}

/// Year, month and day of a day since the epoch.
fn civil(days: u64) -> (i64, i64, i64) {
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The lines nginx (and varnishncsa) writes.
fn nginx_line(r: &Req) -> String {
    format!(
        "{} - - [{}] \"{} {} HTTP/1.1\" {} {} \"-\" \"{}\"",
        r.client,
        clf(r.at),
        r.method,
        r.path,
        r.status,
        if r.bytes == 0 {
            "-".to_string()
        } else {
            r.bytes.to_string()
        },
        r.agent
    )
}

/// musicd's combined line: the same, then its own fields.
fn musicd_line(r: &Req) -> String {
    format!(
        "{} - - [{}] \"{} {} HTTP/1.1\" {} {} \"-\" \"{}\" 4f-1 redis 0.001 0.000 1",
        r.client,
        clf(r.at),
        r.method,
        r.path,
        r.status,
        r.bytes,
        r.agent
    )
}

/// musicd's JSON line, with the range asked for.
fn json_line(r: &Req) -> String {
    serde_json::json!({
        "time": iso(r.at),
        "client": r.client,
        "method": r.method,
        "path": r.path,
        "query": "",
        "protocol": "HTTP/1.1",
        "status": r.status,
        "bytes": r.bytes,
        "latency_ms": 1.0,
        "ttfb_ms": 0.5,
        "cache": "redis",
        "range": r.range.map_or(String::new(), |(a, b)| format!("bytes={a}-{b}")),
        "user_agent": r.agent,
        "referer": "",
        "request_id": "r",
        "complete": true,
    })
    .to_string()
}

/// The facts file: the long and the short track (the third is unknown).
fn facts_file(dir: &Path) -> PathBuf {
    let path = dir.join("facts.jsonl");
    let line = |id: &str, size: u64| {
        serde_json::json!({
            "id": id,
            "size": size,
            "bitrate": RATE * 8,
            "duration": (size - HEADER) as f64 / RATE as f64,
            "audio_offset": HEADER,
        })
        .to_string()
    };
    std::fs::write(
        &path,
        format!("{}\n{}\n", line(LONG, LONG_SIZE), line(SHORT, SHORT_SIZE)),
    )
    .expect("facts");
    path
}

/// Writes the listeners' log in one format, a garbage line in the middle; gzip if asked.
fn write_log(dir: &Path, name: &str, line: fn(&Req) -> String, gzip: bool) -> PathBuf {
    let mut text = String::new();
    for (n, request) in listeners().iter().enumerate() {
        text += &line(request);
        text.push('\n');
        if n == 5 {
            text += "this is not a log line\n";
        }
    }
    let path = dir.join(name);
    if gzip {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(text.as_bytes()).expect("gzip");
        std::fs::write(&path, encoder.finish().expect("gzip")).expect("write log");
    } else {
        std::fs::write(&path, text).expect("write log");
    }
    path
}

/// `musicctl plays` without a configuration or a catalogue: exit code, stdout, stderr.
fn plays(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (Option<i32>, String, String) {
    let output = clean_command("musicctl")
        .arg("plays")
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("musicctl runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn json(stdout: &str, stderr: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|err| panic!("{err}: {stdout}{stderr}"))
}

#[test]
fn known_listeners_are_counted_exactly_in_every_format_the_stack_writes() {
    let dir = tempdir();
    let facts = facts_file(dir.path());
    for (name, line, gzip) in [
        ("nginx.log", nginx_line as fn(&Req) -> String, false),
        ("musicd.log.gz", musicd_line, true),
        ("musicd.json", json_line, false),
    ] {
        let log = write_log(dir.path(), name, line, gzip);
        let (code, stdout, stderr) = plays(&[
            &log,
            &"--facts",
            &facts,
            &"--exclude-ua",
            &"^Lavf",
            &"--json",
        ]);
        let report = json(&stdout, &stderr);
        assert_eq!(code, Some(1), "an unparsed line exits 1: {name}: {report}");
        assert_eq!(report["lines"], 25, "{name}: {report}");
        assert_eq!(report["track_requests"], 22, "{name}: {report}");
        assert_eq!(
            report["dropped"],
            serde_json::json!({
                "head": 1, "not_modified": 1, "probe": 1, "bot": 2, "error": 2,
                "not_track": 2, "unparsed": 1,
            }),
            "{name}"
        );
        let keys: Vec<&str> = report
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            keys,
            [
                "dropped",
                "lines",
                "listeners",
                "most_open_windows",
                "plays",
                "threshold_s",
                "track_requests",
                "tracks",
                "unknown_track",
                "window",
            ],
            "scripts parse these keys: {name}"
        );
        assert_eq!(report["plays"], 8, "{name}: {report}");
        assert_eq!(report["listeners"], 7, "{name}: {report}");
        assert_eq!(report["unknown_track"], 1, "{name}: {report}");
        assert_eq!(report["window"], "rolling", "{name}");
        assert_eq!(report["threshold_s"], 30.0, "{name}");
        let tracks = report["tracks"].as_array().expect("tracks");
        assert_eq!(tracks[0]["id"], LONG, "most played first: {report}");
        assert_eq!(
            (&tracks[0]["plays"], &tracks[0]["listeners"]),
            (&7.into(), &6.into())
        );
        assert_eq!(
            (&tracks[1]["id"], &tracks[1]["plays"]),
            (&SHORT.into(), &1.into())
        );
        let sent = SHORT_SIZE + 300_000;
        assert_eq!(tracks[1]["bytes"], sent, "{name}: {report}");
        // By calendar day the listener of the day after is a play of its own.
        let (_, stdout, stderr) = plays(&[
            &log,
            &"--facts",
            &facts,
            &"--exclude-ua",
            &"^Lavf",
            &"--window",
            &"calendar",
            &"--json",
        ]);
        assert_eq!(json(&stdout, &stderr)["plays"], 9, "{name}");
        // IAB's 60 s: the 31 s of three ranges and the stitched IPv6 listen are not plays.
        let (_, stdout, stderr) = plays(&[
            &log,
            &"--facts",
            &facts,
            &"--exclude-ua",
            &"^Lavf",
            &"--threshold",
            &"60s",
            &"--json",
        ]);
        assert_eq!(json(&stdout, &stderr)["plays"], 6, "{name}");
    }
}

#[test]
fn csv_rows_are_days_and_the_report_page_draws_in_chromium() {
    let dir = tempdir();
    let facts = facts_file(dir.path());
    let log = write_log(dir.path(), "nginx.log", nginx_line, false);
    let page = dir.path().join("plays.html");
    let (code, stdout, stderr) = plays(&[
        &log,
        &"--facts",
        &facts,
        &"--exclude-ua",
        &"^Lavf",
        &"--csv",
        &"--report",
        &page,
    ]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        rows,
        [
            "day,id,plays,listeners,bytes",
            &format!(
                "2026-12-01,{LONG},6,6,{}",
                LONG_SIZE * 4 + 161_000 + 160_000 + 176_000 + 81_000 + 500_000
            ),
            &format!("2026-12-01,{SHORT},1,1,{}", SHORT_SIZE + 300_000),
            &format!("2026-12-03,{LONG},1,1,{LONG_SIZE}"),
        ],
        "{stdout}"
    );
    let page_url = format!("file://{}", page.display());
    let rendered = crate::harness::chromium::dom_result(&page_url);
    crate::replay::assert_plots(&rendered, 1);
}

#[test]
fn a_log_with_ranges_stitches_what_a_log_without_them_can_only_add() {
    let dir = tempdir();
    let facts = facts_file(dir.path());
    // The same first 300,000 bytes twice: 600,000 sent, 300,000 delivered.
    let twice = [
        get(T0, "10.0.0.1", "Player/1", LONG, 0, 300_000),
        get(T0 + 5, "10.0.0.1", "Player/1", LONG, 0, 300_000),
    ];
    for (name, line, expected) in [
        ("nginx.log", nginx_line as fn(&Req) -> String, 1),
        ("musicd.json", json_line, 0),
    ] {
        let path = dir.path().join(name);
        let text: String = twice.iter().map(|r| line(r) + "\n").collect();
        std::fs::write(&path, text).expect("log");
        let (code, stdout, stderr) = plays(&[&path, &"--facts", &facts, &"--json"]);
        assert_eq!(code, Some(0), "{stderr}");
        assert_eq!(json(&stdout, &stderr)["plays"], expected, "{name}");
    }
}

#[test]
fn a_cut_gzip_is_named_and_a_missing_facts_file_stops_with_one_line() {
    let dir = tempdir();
    let facts = facts_file(dir.path());
    let log = write_log(dir.path(), "cut.log.gz", nginx_line, true);
    let bytes = std::fs::read(&log).expect("log");
    std::fs::write(&log, &bytes[..bytes.len() * 2 / 3]).expect("cut");
    let (code, stdout, stderr) = plays(&[&log, &"--facts", &facts, &"--json"]);
    let report = json(&stdout, &stderr);
    assert_eq!(code, Some(1), "{report}");
    assert!(stderr.contains("cut.log.gz"), "the file is named: {stderr}");
    let errors = report["read_errors"].as_array().expect("read errors");
    assert!(errors[0].as_str().is_some_and(|e| e.contains("cut.log.gz")));
    assert!(
        report["lines"].as_u64().is_some_and(|n| n > 0 && n < 25),
        "what came before the cut is counted: {report}"
    );
    let missing = dir.path().join("no-such-facts.jsonl");
    let (code, stdout, stderr) = plays(&[&log, &"--facts", &missing]);
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no-such-facts.jsonl"), "{stderr}");
}

/// Real listeners, fetching 16 KiB ranges as AVPlayer does, skipping and seeking, against
/// a musicd writing its JSON access log: `plays` over that log, with the catalogue's
/// facts, counts exactly the listener × track pairs whose bytes received (their own
/// record) reach the threshold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plays_of_real_listeners_agree_with_what_they_received() {
    let scratch = tempdir();
    let access_log = scratch.path().join("access.json");
    let settings = [
        format!("access_log.path={}", access_log.display()),
        "access_log.format=json".to_string(),
    ];
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    let env = TestEnv::shared_with(&settings).await;
    // 320 kbit/s: 40,000 bytes a second; a play is 3 s after a 500-byte header.
    let rate = 40_000u64;
    let mut sizes = std::collections::HashMap::new();
    let mut list = String::new();
    for (n, seconds) in [12u64, 8, 2].into_iter().enumerate() {
        let size = 500 + seconds * rate;
        let (id, path) = env
            .track(&format!("t{n}.mp3"), &pattern(size as usize, n as u64))
            .await;
        env.tracks
            .update_one(
                mongodb::bson::doc! { "_id": id },
                mongodb::bson::doc! { "$set": {
                    "size": size as i64,
                    "bitrate": (rate * 8) as i64,
                    "duration": seconds as f64,
                    "audio_offset": 500i64,
                }},
            )
            .await
            .expect("facts");
        sizes.insert(id.to_hex(), size);
        list += &format!("{}\t{}\n", id.to_hex(), path.display());
    }
    let ids = env.write_file("ids.tsv", list.as_bytes());
    let server = env.musicd().await;
    let url = server.url("");
    let listens = scratch.path().join("listens.jsonl");
    let listens_arg = listens.display().to_string();
    let ids_arg = ids.display().to_string();
    let env = tokio::task::spawn_blocking(move || {
        let (code, report) = env.musicctl_json([
            "players",
            "--target",
            &url,
            "--ids",
            &ids_arg,
            "--listeners",
            "12",
            "--duration",
            "6s",
            "--bitrate",
            "320k",
            "--prebuffer",
            "500ms",
            "--buffer",
            "1s",
            "--chunk",
            "16384",
            "--skip-rate",
            "20",
            "--seek-rate",
            "10",
            "--probe",
            "range",
            "--listens",
            &listens_arg,
        ]);
        assert_eq!(report["errors"], serde_json::json!({}), "{report}");
        assert!(code.is_some(), "{report}");
        env
    })
    .await
    .expect("players");
    server.shutdown().await;

    // What each listener received of each track: the union of its ranges.
    let mut received: std::collections::BTreeMap<(String, String), Vec<(u64, u64)>> =
        Default::default();
    for line in std::fs::read_to_string(&listens).expect("listens").lines() {
        let heard: serde_json::Value = serde_json::from_str(line).expect("listen line");
        let start = heard["start"].as_u64().expect("start");
        let end = start + heard["bytes"].as_u64().expect("bytes");
        let key = (
            heard["listener"].as_str().expect("listener").to_string(),
            heard["id"].as_str().expect("id").to_string(),
        );
        received.entry(key).or_default().push((start, end));
    }
    let mut expected: std::collections::BTreeMap<String, u64> = Default::default();
    let mut short_of_it = 0;
    for ((_, id), mut spans) in received {
        spans.sort_unstable();
        let (mut covered, mut reach) = (0u64, 0u64);
        for (start, end) in spans {
            let start = start.max(reach);
            if end > start {
                covered += end - start;
                reach = end;
            }
        }
        let size = sizes[&id];
        let needed = (500 + 3 * rate).min(size);
        if covered >= needed {
            *expected.entry(id).or_default() += 1;
        } else {
            short_of_it += 1;
        }
    }
    let (code, report) = env.musicctl_json([
        "plays",
        &access_log.display().to_string(),
        "--threshold",
        "3s",
    ]);
    assert_eq!(code, Some(0), "{report}");
    let counted: std::collections::BTreeMap<String, u64> = report["tracks"]
        .as_array()
        .expect("tracks")
        .iter()
        .filter(|t| t["plays"].as_u64() > Some(0))
        .map(|t| {
            (
                t["id"].as_str().unwrap_or("").to_string(),
                t["plays"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(counted, expected, "{report}");
    assert!(report["plays"].as_u64() > Some(0), "{report}");
    assert!(
        report["dropped"]["probe"].as_u64() > Some(0),
        "the players' probes are dropped: {report}"
    );
    eprintln!(
        "plays: {} listener-track pairs played, {short_of_it} short of the threshold",
        report["plays"]
    );
    // The catalogue's facts as a file give the same count, without MongoDB.
    let facts = scratch.path().join("facts.jsonl");
    let output = env
        .command("musicctl")
        .args(["list", "--facts"])
        .output()
        .expect("list --facts");
    std::fs::write(&facts, &output.stdout).expect("facts");
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 3);
    let (_, stdout, stderr) = plays(&[
        &access_log,
        &"--facts",
        &facts,
        &"--threshold",
        &"3s",
        &"--json",
    ]);
    assert_eq!(json(&stdout, &stderr)["plays"], report["plays"]);
}
