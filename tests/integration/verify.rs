//! `musicctl verify` on a library of real encoded files (ffmpeg), with one planted case of
//! every kind it reports and a clean set it must leave alone.

use std::path::{Path, PathBuf};
use std::process::Command;

use mongodb::bson::{Bson, doc, oid::ObjectId};

use crate::harness::TestEnv;

/// Encodes two seconds of a tone into `path` with ffmpeg; `args` choose codec and
/// container.
fn encode(path: &Path, args: &[&str]) {
    encode_from(path, "sine=frequency=440:duration=2", args);
}

/// The same from another lavfi source.
fn encode_from(path: &Path, source: &str, args: &[&str]) {
    let output = Command::new("ffmpeg")
        .args(["-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi"])
        .args(["-i", source])
        .args(args)
        .arg(path)
        .output()
        .expect("ffmpeg runs");
    assert!(
        output.status.success(),
        "ffmpeg {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The clean set: one file of each common format, each as a careful encoder writes it.
fn clean_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).expect("dir");
    let files = [
        ("clean.mp3", vec!["-c:a", "libmp3lame", "-b:a", "128k"]),
        (
            "clean.m4a",
            vec!["-c:a", "aac", "-b:a", "96k", "-movflags", "+faststart"],
        ),
        ("clean.flac", vec!["-c:a", "flac"]),
        ("clean.ogg", vec!["-c:a", "libvorbis"]),
        ("clean.opus", vec!["-c:a", "libopus"]),
        ("clean.wav", vec!["-c:a", "pcm_s16le"]),
    ];
    files
        .iter()
        .map(|(name, args)| {
            let path = dir.join(name);
            encode(&path, args);
            path
        })
        .collect()
}

/// `musicctl import DIR`: the documents record size and mtime, as an operator's would.
fn import(env: &TestEnv, dir: &Path) -> Vec<(ObjectId, String)> {
    let output = env
        .command("musicctl")
        .arg("import")
        .arg(dir)
        .output()
        .expect("musicctl import");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| {
            let (id, path) = line.split_once('\t')?;
            Some((ObjectId::parse_str(id).ok()?, path.to_string()))
        })
        .collect()
}

fn verify(env: &TestEnv, extra: &[&str]) -> (i32, serde_json::Value) {
    let output = env
        .command("musicctl")
        .arg("verify")
        .arg("--json")
        .args(extra)
        .output()
        .expect("musicctl verify");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), report)
}

fn media(env: &TestEnv) -> PathBuf {
    env.media.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_library_has_no_findings_and_exits_0() {
    let env = TestEnv::new().await;
    clean_files(&media(&env).join("album"));
    let imported = import(&env, &media(&env));
    assert_eq!(imported.len(), 6);
    // Import records what players and reports need, from the files' own headers.
    let mp3 = imported
        .iter()
        .find(|(_, path)| path.ends_with("clean.mp3"))
        .map(|(id, _)| *id)
        .expect("mp3 imported");
    let document = env
        .tracks
        .find_one(doc! { "_id": mp3 })
        .await
        .expect("find")
        .expect("document");
    assert_eq!(document.get_str("codec").ok(), Some("mp3"), "{document}");
    assert_eq!(
        document.get_i64("sample_rate").ok(),
        Some(44_100),
        "{document}"
    );
    let duration = document.get_f64("duration").expect("duration");
    assert!((1.9..2.2).contains(&duration), "{document}");
    let bitrate = document.get_i64("bitrate").expect("bitrate");
    assert!((110_000..150_000).contains(&bitrate), "{document}");
    // Cached as musicd caches them: entries that agree are not findings.
    let reindex = env
        .command("musicctl")
        .arg("reindex")
        .output()
        .expect("reindex");
    assert!(reindex.status.success());
    let (code, report) = verify(&env, &["--strict"]);
    assert_eq!(report["findings"], serde_json::json!([]), "{report:#}");
    assert_eq!(report["checked"], 6);
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_finding_is_reported_with_its_kind_and_id() {
    let env = TestEnv::new().await;
    let root = media(&env);
    let clean = clean_files(&root.join("clean"));
    let planted = root.join("planted");
    std::fs::create_dir_all(&planted).expect("dir");
    // A second of PCM, the source of several plants.
    let wav = planted.join("source.wav");
    encode(&wav, &["-c:a", "pcm_s16le"]);
    let wav_bytes = std::fs::read(&wav).expect("wav");
    std::fs::remove_file(&wav).expect("rm");
    std::fs::write(planted.join("empty.mp3"), b"").expect("empty");
    std::fs::write(planted.join("wav_named.mp3"), &wav_bytes).expect("mismatch");
    std::fs::write(planted.join("cut.wav"), &wav_bytes[..wav_bytes.len() / 2]).expect("cut");
    encode(&planted.join("slow.m4a"), &["-c:a", "aac", "-b:a", "96k"]);
    let slow = std::fs::read(planted.join("slow.m4a")).expect("m4a");
    std::fs::write(planted.join("cut.m4a"), &slow[..slow.len() - 200]).expect("cut m4a");
    // A second of tone, then a second of silence: frames of different bitrates, and no
    // Xing header to seek by.
    encode_from(
        &planted.join("vbr.mp3"),
        "aevalsrc=if(lt(t\\,1)\\,sin(2*PI*440*t)\\,0):d=2",
        &["-c:a", "libmp3lame", "-q:a", "0", "-write_xing", "0"],
    );
    encode(&planted.join("dup.flac"), &["-c:a", "flac"]);
    // Cut short where no header declares a length the shallow pass could check: only
    // demuxing to the end (`--deep`) sees it.
    encode(&planted.join("whole.flac"), &["-c:a", "flac"]);
    let flac = std::fs::read(planted.join("whole.flac")).expect("flac");
    std::fs::remove_file(planted.join("whole.flac")).expect("rm");
    std::fs::write(planted.join("cut.flac"), &flac[..flac.len() / 2]).expect("cut flac");
    encode(&planted.join("drift.flac"), &["-c:a", "flac"]);
    let imported = import(&env, &root);
    let id_of = |name: &str| {
        imported
            .iter()
            .find(|(_, path)| path.ends_with(name))
            .map(|(id, _)| *id)
            .unwrap_or_else(|| panic!("{name} not imported"))
    };
    // Planted in the catalogue and the cache, not on disk.
    let missing = env
        .insert(&root.join("planted/gone.mp3").display().to_string())
        .await;
    let outside = env.insert(&env.config_file.display().to_string()).await;
    // Another spelling of the same file (import's unique index is on the path text).
    let duplicate = env
        .insert(&format!("{}//dup.flac", planted.display()))
        .await;
    env.tracks
        .update_one(
            doc! { "_id": id_of("drift.flac") },
            doc! { "$set": { "size": Bson::Int64(1) } },
        )
        .await
        .expect("drift");
    // Written after import, so no document names it.
    encode(&planted.join("orphan.ogg"), &["-c:a", "libvorbis"]);
    let reindex = env
        .command("musicctl")
        .arg("reindex")
        .output()
        .expect("reindex");
    assert!(reindex.status.success());
    let stale_path = id_of("clean.mp3");
    let negative = id_of("clean.flac");
    {
        let mut conn = env
            .redis
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        for (id, value) in [(&stale_path, "/somewhere/else.mp3"), (&negative, "")] {
            let _: () = redis::cmd("SET")
                .arg(env.key(id))
                .arg(value)
                .query_async(&mut conn)
                .await
                .expect("SET");
        }
    }

    let (code, report) = verify(&env, &[]);
    let findings = report["findings"].as_array().expect("findings").clone();
    let has = |kind: &str, id: Option<ObjectId>, path_end: &str| {
        findings.iter().any(|f| {
            f["kind"] == kind
                && f["id"] == id.map_or(serde_json::Value::Null, |i| i.to_hex().into())
                && f["path"].as_str().is_some_and(|p| p.ends_with(path_end))
        })
    };
    let expected: Vec<(&str, Option<ObjectId>, &str)> = vec![
        ("missing", Some(missing), "gone.mp3"),
        ("outside_roots", Some(outside), "musicd.toml"),
        ("empty", Some(id_of("empty.mp3")), "empty.mp3"),
        (
            "type_mismatch",
            Some(id_of("wav_named.mp3")),
            "wav_named.mp3",
        ),
        ("truncated", Some(id_of("cut.wav")), "cut.wav"),
        ("truncated", Some(id_of("cut.m4a")), "cut.m4a"),
        ("duplicate", Some(id_of("dup.flac")), "dup.flac"),
        ("duplicate", Some(duplicate), "dup.flac"),
        ("orphan", None, "orphan.ogg"),
        ("cache_stale", Some(stale_path), "else.mp3"),
        ("cache_stale", Some(negative), ""),
        ("slow_start", Some(id_of("slow.m4a")), "slow.m4a"),
        ("no_seek_table", Some(id_of("vbr.mp3")), "vbr.mp3"),
        ("size_drift", Some(id_of("drift.flac")), "drift.flac"),
    ];
    for (kind, id, path) in &expected {
        assert!(has(kind, *id, path), "no {kind} for {path}: {report:#}");
    }
    // `empty` implies neither a mismatch nor truncation; `missing` nothing else.
    for id in [id_of("empty.mp3"), missing] {
        let about: Vec<_> = findings
            .iter()
            .filter(|f| f["id"] == id.to_hex().as_str())
            .collect();
        assert_eq!(about.len(), 1, "{about:?}");
    }
    // Nothing about the clean files but the two cache entries planted on them.
    for path in &clean {
        let about: Vec<_> = findings
            .iter()
            .filter(|f| {
                f["path"] == path.display().to_string().as_str() && f["kind"] != "cache_stale"
            })
            .collect();
        assert!(about.is_empty(), "{path:?}: {about:?}");
    }
    assert_eq!(findings.len(), expected.len(), "{report:#}");
    assert_eq!(report["counts"]["truncated"], 2);
    assert_eq!(code, 1);

    // `--deep` adds what only demuxing finds, and nothing else (every core shares it).
    let (deep_code, deep) = verify(&env, &["--deep"]);
    let deep_findings = deep["findings"].as_array().expect("findings");
    assert!(
        deep_findings
            .iter()
            .any(|f| f["kind"] == "truncated" && f["id"] == id_of("cut.flac").to_hex().as_str()),
        "{deep:#}"
    );
    assert_eq!(deep_findings.len(), expected.len() + 1, "{deep:#}");
    assert_eq!(deep_code, 1);

    // `--fix` alone changes nothing; with `--yes` it removes the stale entries and imports
    // the orphan, and the next run finds neither (the rest is the operator's to decide).
    let (_, shown) = verify(&env, &["--fix"]);
    assert_eq!(shown["counts"], report["counts"]);
    let (code, fixed) = verify(&env, &["--fix", "--yes"]);
    assert_eq!(fixed["fixed"]["pruned"], 2, "{fixed:#}");
    assert_eq!(fixed["fixed"]["imported"], 1, "{fixed:#}");
    assert_eq!(code, 1, "what --fix does not repair still fails the run");
    let (_, after) = verify(&env, &[]);
    assert!(after["counts"].get("cache_stale").is_none(), "{after:#}");
    assert!(after["counts"].get("orphan").is_none(), "{after:#}");
    assert_eq!(after["checked"], report["checked"].as_u64().expect("n") + 1);
    assert_eq!(
        after["findings"].as_array().map(Vec::len),
        Some(expected.len() - 3),
        "{after:#}"
    );
}

/// A file the user verify runs as cannot open is `unreadable` (as root, which reads
/// everything, verify runs as `nobody` through `setpriv`, the way an operator runs it as
/// musicd's user).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_its_user_cannot_open_is_unreadable() {
    use std::os::unix::fs::PermissionsExt;
    // Run as `nobody` when root: its world must be where `nobody` can reach it, whatever
    // directory the checkout sits in (a regression: under a 0700 clone this failed).
    let env = TestEnv::open_to_all().await;
    let dir = media(&env).join("locked");
    clean_files(&dir);
    let imported = import(&env, &media(&env));
    let locked = dir.join("clean.flac");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut command = if root {
        // Everything else must be readable by `nobody`: the test's own tree is 0700.
        for path in [env.dir.path(), &media(&env), &dir] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        for entry in std::fs::read_dir(&dir).expect("dir").flatten() {
            if entry.path() != locked {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o644))
                    .expect("chmod");
            }
        }
        std::fs::set_permissions(&env.config_file, std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        // The binary too: target/ is inside the checkout.
        let musicctl = env.dir.path().join("musicctl");
        std::fs::copy(crate::harness::bin("musicctl"), &musicctl).expect("copy musicctl");
        std::fs::set_permissions(&musicctl, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(&musicctl);
        command
    } else {
        Command::new(crate::harness::bin("musicctl"))
    };
    command
        .env_clear()
        .arg("--config")
        .arg(&env.config_file)
        .args(["verify", "--json"]);
    let output = command.output().expect("musicctl verify");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let id = imported
        .iter()
        .find(|(_, path)| path.ends_with("clean.flac"))
        .map(|(id, _)| id.to_hex())
        .expect("flac imported");
    let findings = report["findings"].as_array().expect("findings");
    assert_eq!(findings.len(), 1, "{report:#}");
    assert_eq!(findings[0]["kind"], "unreadable", "{report:#}");
    assert_eq!(findings[0]["id"], id.as_str());
    assert_eq!(output.status.code(), Some(1));
}

/// Import records where each file's first audio frame starts (an mp3's: right after its
/// ID3 tag), and `verify --fix --yes` fills it in for documents imported without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_offsets_are_recorded_and_backfilled() {
    let env = TestEnv::new().await;
    let dir = media(&env).join("offsets");
    let mut files = clean_files(&dir);
    let tagged = dir.join("tagged.mp3");
    encode(
        &tagged,
        &[
            "-c:a",
            "libmp3lame",
            "-id3v2_version",
            "3",
            "-metadata",
            "title=Offsets",
        ],
    );
    files.push(tagged.clone());
    let imported = import(&env, &media(&env));
    assert_eq!(imported.len(), files.len());
    let offset_of = |document: &mongodb::bson::Document| {
        document
            .get_i64("audio_offset")
            .unwrap_or_else(|_| panic!("no audio_offset: {document}"))
    };
    let offsets = || async {
        let mut found = Vec::new();
        for (id, path) in &imported {
            let document = env
                .tracks
                .find_one(doc! { "_id": id })
                .await
                .expect("find")
                .expect("document");
            found.push((path.clone(), offset_of(&document)));
        }
        found
    };
    let recorded = offsets().await;
    for (path, offset) in &recorded {
        let bytes = std::fs::read(path).expect("read");
        let at = usize::try_from(*offset).expect("offset");
        assert!(at < bytes.len(), "{path}: {at}");
        // Each where its format says the audio starts.
        let starts = match path.rsplit_once('.').map(|(_, ext)| ext) {
            Some("mp3") => {
                assert_eq!(&bytes[..3], b"ID3", "{path}: no ID3 tag");
                let size = bytes[6..10]
                    .iter()
                    .fold(0usize, |acc, b| acc << 7 | usize::from(*b));
                let footer = if bytes[5] & 0x10 != 0 { 10 } else { 0 };
                assert_eq!(at, 10 + size + footer, "{path}: not the tag's length");
                bytes[at] == 0xFF && bytes[at + 1] & 0xE0 == 0xE0
            }
            Some("flac") => bytes[at] == 0xFF && bytes[at + 1] & 0xFE == 0xF8,
            Some("ogg" | "opus") => at > 0 && &bytes[at..at + 4] == b"OggS",
            Some("m4a") => &bytes[at - 4..at] == b"mdat",
            Some("wav") => &bytes[at - 8..at - 4] == b"data",
            _ => panic!("{path}: unexpected"),
        };
        assert!(starts, "{path}: {at} is not where its audio starts");
    }

    // Documents imported before import recorded it.
    env.tracks
        .update_many(doc! {}, doc! { "$unset": { "audio_offset": "" } })
        .await
        .expect("unset");
    let (code, report) = verify(&env, &[]);
    assert_eq!(report["findings"], serde_json::json!([]), "not a finding");
    assert_eq!(code, 0);
    let shown = env
        .command("musicctl")
        .args(["verify", "--fix"])
        .output()
        .expect("verify --fix");
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains(&format!("backfill {} audio offsets", files.len())),
        "{text}"
    );
    assert_eq!(shown.status.code(), Some(0), "{text}");
    let still = env
        .tracks
        .count_documents(doc! { "audio_offset": { "$exists": true } })
        .await
        .expect("count");
    assert_eq!(still, 0, "--fix alone changes nothing");
    let (code, fixed) = verify(&env, &["--fix", "--yes"]);
    assert_eq!(fixed["fixed"]["backfilled"], files.len(), "{fixed:#}");
    assert_eq!(code, 0);
    assert_eq!(offsets().await, recorded);
    // Nothing is left to backfill.
    let (_, again) = verify(&env, &["--fix", "--yes"]);
    assert_eq!(again["fixed"]["backfilled"], 0, "{again:#}");
}
