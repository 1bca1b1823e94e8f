//! A history check over the whole stack the docs tell operators to run: varnish ->
//! nginx -> two `musicd run` -> Redis and a MongoDB replica set. Players fetch through
//! varnish and straight from each musicd while 1,000 changes are made (moves, deletes,
//! inserts after a 404, paths broken and fixed). Every answer and every change is
//! recorded; each answer must be what some version of its track answered while that
//! version was current, at most a bound before the request was sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mongodb::bson::doc;
use sha2::{Digest, Sha256};

use crate::harness::daemon::Daemon;
use crate::harness::nginx::Nginx;
use crate::harness::varnish::Varnish;
use crate::harness::{TestEnv, client, free_port, percentile, shared_redis, shared_replica_set};

/// What a track URL answers: a status, and the body's digest for a 200.
type Expect = (u16, Option<[u8; 32]>);

/// One version of a track: what it answers, made current at some moment between
/// `issued` (the change was sent to MongoDB) and `committed` (MongoDB said done).
struct Version {
    issued: Instant,
    committed: Instant,
    expect: Expect,
}

/// What each id looks like now, for the change maker.
#[derive(Clone, Copy)]
enum State {
    Live,
    Deleted,
    Broken,
}

/// One answer a player got.
struct Answer {
    layer: usize,
    id: usize,
    sent: Instant,
    received: Instant,
    got: Expect,
}

const LAYERS: [&str; 3] = ["varnish", "musicd a", "musicd b"];

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// How long after its version stopped being current an answer was asked for (0 when it
/// was current at some moment while the request was under way); `None` if no version
/// ever answered that.
fn staleness(versions: &[Version], answer: &Answer) -> Option<Duration> {
    let mut best: Option<Duration> = None;
    for (k, version) in versions.iter().enumerate() {
        if version.expect != answer.got {
            continue;
        }
        // Current from (at the earliest) its change being sent, until (at the latest) the
        // next change was committed.
        if version.issued > answer.received {
            continue;
        }
        let end = versions.get(k + 1).map(|next| next.committed);
        let stale = match end {
            Some(end) if end < answer.sent => answer.sent - end,
            _ => Duration::ZERO,
        };
        best = Some(best.map_or(stale, |b| b.min(stale)));
    }
    best
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_through_the_stack_is_a_recent_version_of_its_track() {
    let varnish_port = free_port();
    let ban = format!("http_caches.ban_urls=[\"http://127.0.0.1:{varnish_port}\"]");
    let env = Arc::new(
        TestEnv::with(
            &shared_redis().redis_url(),
            &shared_replica_set().uri(),
            &["mongodb.watch_lease_ms=1500", &ban],
        )
        .await,
    );
    let tracks = 100;
    let mut ids = Vec::new();
    let mut versions: Vec<Vec<Version>> = Vec::new();
    let mut states = Vec::new();
    let started = Instant::now();
    for t in 0..tracks {
        let body = format!("track {t} version 0");
        ids.push(env.track(&format!("t{t}/v0.mp3"), body.as_bytes()).await.0);
        versions.push(vec![Version {
            issued: started,
            committed: started,
            expect: (200, Some(digest(body.as_bytes()))),
        }]);
        states.push(State::Live);
    }
    let a = Daemon::start(&env).await;
    let b = Daemon::start(&env).await;
    let upstreams = [
        a.base.trim_start_matches("http://").to_string(),
        b.base.trim_start_matches("http://").to_string(),
    ];
    let upstreams: Vec<&str> = upstreams.iter().map(String::as_str).collect();
    let nginx = Nginx::start_deploy_config_over(&upstreams, &env.media);
    let varnish = Varnish::start_on(varnish_port, nginx.port);
    // Following, and every track's initial version cached everywhere.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut following = 0;
        for base in [&a.base, &b.base] {
            let text = crate::harness::get_text(&format!("{base}/metrics")).await;
            following +=
                crate::harness::metric(&text, "musicd_watch_following").unwrap_or(0.0) as u32;
        }
        if following == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "nobody follows");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let bases = [varnish.url(""), a.base.clone(), b.base.clone()];
    let urls: Arc<Vec<[String; 3]>> = Arc::new(
        ids.iter()
            .map(|id| {
                bases
                    .clone()
                    .map(|base| format!("{base}/musicdb/{}/x.mp3", id.to_hex()))
            })
            .collect(),
    );
    let versions = Arc::new(Mutex::new(versions));
    let recent = Arc::new(Mutex::new(0usize));
    let done = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::new()));
    // When the last change was committed, and which layers were asked after it.
    let ended: Arc<Mutex<Option<Instant>>> = Arc::default();
    let asked_after: Arc<[AtomicBool; 3]> = Arc::default();

    let mut players = Vec::new();
    for player in 0..6usize {
        let (urls, recent, done, errors) = (
            Arc::clone(&urls),
            Arc::clone(&recent),
            Arc::clone(&done),
            Arc::clone(&errors),
        );
        let (ended, asked_after) = (Arc::clone(&ended), Arc::clone(&asked_after));
        players.push(tokio::spawn(async move {
            let http = client();
            let mut answers = Vec::new();
            let mut n = player;
            while !done.load(Ordering::Relaxed) {
                n += 7;
                // Half the requests ask for the track changed last: where staleness shows.
                let id = if n % 2 == 0 {
                    *recent.lock().expect("recent")
                } else {
                    n % urls.len()
                };
                let layer = n % 3;
                let sent = Instant::now();
                let got = match http.get(&urls[id][layer]).send().await {
                    Ok(response) => {
                        let status = response.status().as_u16();
                        match response.bytes().await {
                            Ok(body) => (status, (status == 200).then(|| digest(&body))),
                            Err(err) => {
                                errors.lock().expect("errors").push(format!("{err}"));
                                continue;
                            }
                        }
                    }
                    Err(err) => {
                        errors.lock().expect("errors").push(format!("{err}"));
                        continue;
                    }
                };
                if ended.lock().expect("ended").is_some_and(|end| sent > end) {
                    asked_after[layer].store(true, Ordering::Relaxed);
                }
                answers.push(Answer {
                    layer,
                    id,
                    sent,
                    received: Instant::now(),
                    got,
                });
            }
            answers
        }));
    }

    // 1,000 changes, one every 10 ms, each on a track chosen in turn.
    let changes = 1000;
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    for c in 0..changes {
        pace.tick().await;
        let t = (c * 37) % tracks;
        let id = ids[t];
        let issued = Instant::now();
        let (next, expect) = match states[t] {
            State::Live if c % 3 == 0 => {
                env.tracks
                    .delete_one(doc! { "_id": id })
                    .await
                    .expect("delete");
                (State::Deleted, (404, None))
            }
            State::Live if c % 3 == 1 => {
                let missing = env.media.join(format!("t{t}/missing-{c}.mp3"));
                env.set_path(&id, &missing).await;
                (State::Broken, (404, None))
            }
            State::Live | State::Broken => {
                let body = format!("track {t} version {c}");
                let path = env.write_file(&format!("t{t}/v{c}.mp3"), body.as_bytes());
                env.set_path(&id, &path).await;
                (State::Live, (200, Some(digest(body.as_bytes()))))
            }
            State::Deleted => {
                let body = format!("track {t} version {c}");
                let path = env.write_file(&format!("t{t}/v{c}.mp3"), body.as_bytes());
                env.tracks
                    .insert_one(doc! { "_id": id, "path": path.display().to_string() })
                    .await
                    .expect("insert");
                (State::Live, (200, Some(digest(body.as_bytes()))))
            }
        };
        states[t] = next;
        versions.lock().expect("versions")[t].push(Version {
            issued,
            committed: Instant::now(),
            expect,
        });
        *recent.lock().expect("recent") = t;
    }
    // The players keep asking until every layer was asked after the last change, so it
    // is seen too.
    *ended.lock().expect("ended") = Some(Instant::now());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !asked_after
        .iter()
        .all(|asked| asked.load(Ordering::Relaxed))
    {
        assert!(
            Instant::now() < deadline,
            "a layer was never asked after the last change"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    done.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for player in players {
        answers.extend(player.await.expect("player"));
    }
    let errors = errors.lock().expect("errors").clone();
    assert!(errors.is_empty(), "requests failed: {errors:?}");

    let mut stale: [Vec<Duration>; 3] = Default::default();
    let mut impossible = Vec::new();
    {
        let versions = versions.lock().expect("versions");
        for answer in &answers {
            match staleness(&versions[answer.id], answer) {
                Some(s) => stale[answer.layer].push(s),
                None => impossible.push(format!(
                    "{} track {}: {:?} was never an answer of it",
                    LAYERS[answer.layer], answer.id, answer.got.0
                )),
            }
        }
    }
    assert!(impossible.is_empty(), "{impossible:?}");
    let mut report = Vec::new();
    let mut broken = Vec::new();
    for (layer, samples) in stale.iter_mut().enumerate() {
        samples.sort();
        let (p50, p99, max) = (
            percentile(samples, 0.5),
            percentile(samples, 0.99),
            samples.last().copied().unwrap_or_default(),
        );
        let late = samples.iter().filter(|s| !s.is_zero()).count();
        report.push(format!(
            "{}: {} answers, {late} after their version ended, staleness p50 {p50:?} p99 {p99:?} max {max:?}",
            LAYERS[layer],
            samples.len()
        ));
        let bound = if layer == 0 {
            Duration::from_millis(250)
        } else {
            Duration::from_millis(100)
        };
        if p99 > bound {
            broken.push(format!("{}: p99 {p99:?} > {bound:?}", LAYERS[layer]));
        }
        if max > Duration::from_secs(2) {
            broken.push(format!("{}: max {max:?}", LAYERS[layer]));
        }
        if samples.len() < 100 {
            broken.push(format!("{}: too few answers", LAYERS[layer]));
        }
    }
    // The whole report first, so a broken bound is seen beside the other layers.
    eprintln!("history over {changes} changes:\n  {}", report.join("\n  "));
    assert!(broken.is_empty(), "{broken:?}");

    // The end state: no Redis entry disagrees with MongoDB.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut disagree = Vec::new();
        for id in &ids {
            let document = env.tracks.find_one(doc! { "_id": id }).await.expect("find");
            let truth: Option<String> =
                document.map(|d| d.get_str("path").unwrap_or_default().to_string());
            let cached = env.cached(id).await;
            let agrees = match (&truth, cached.as_deref()) {
                (_, None) => true,
                (None, Some(value)) => value.is_empty(),
                (Some(path), Some(value)) => value == path.as_bytes(),
            };
            if !agrees {
                disagree.push((
                    *id,
                    truth,
                    cached.map(|c| String::from_utf8_lossy(&c).to_string()),
                ));
            }
        }
        if disagree.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Redis disagrees with MongoDB: {:?}",
            &disagree[..disagree.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
