//! `/metrics` in the Prometheus text format, from plain atomic counters.
//!
//! Counting is a relaxed atomic add on the request path (no locks, no allocation); the
//! text is built only when `/metrics` is scraped. The counters are kept in shards, one
//! per event loop thread (each on its own cache lines), and summed when scraped: a dozen
//! adds a request to lines every core shares would bounce those lines between the cores.
//!
//! A thread that holds a shard alone (every event loop does: [`SHARDS`] is more than a
//! machine of this size runs) adds with a plain load and store, not a locked
//! read-modify-write: a request made about fifteen counts, and each locked add (about
//! 7 ns here, and a barrier) cost more than the count itself. Threads beyond the
//! exclusive shards share one and add atomically.

use std::fmt::Write;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::routes::Route;
use crate::catalog::CacheOutcome;

/// Status codes counted individually; anything else is `other`.
const STATUSES: [u16; 14] = [
    200, 204, 206, 304, 400, 403, 404, 405, 412, 416, 500, 501, 503, 0,
];

const OUTCOMES: [CacheOutcome; 5] = [
    CacheOutcome::Local,
    CacheOutcome::Hit,
    CacheOutcome::Miss,
    CacheOutcome::Negative,
    CacheOutcome::Bypass,
];

/// Upper bounds of the resolver latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_01, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.1, 1.0,
];

/// Upper bounds of the request duration and time-to-first-byte histograms, in seconds.
const REQUEST_BUCKETS: [f64; 14] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0, 30.0,
];

/// Status classes of the request histograms.
const CLASSES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "other"];

fn class_index(status: u16) -> usize {
    match status / 100 {
        2 => 0,
        3 => 1,
        4 => 2,
        5 => 3,
        _ => 4,
    }
}

/// A latency histogram per route and status class: one relaxed add per bucket crossed.
#[derive(Debug, Default)]
struct RequestHistogram {
    buckets: [[[AtomicU64; REQUEST_BUCKETS.len()]; CLASSES.len()]; Route::ALL.len()],
    count: [[AtomicU64; CLASSES.len()]; Route::ALL.len()],
    sum_ns: [[AtomicU64; CLASSES.len()]; Route::ALL.len()],
}

impl RequestHistogram {
    fn observe(&self, add: Adder, route: Route, status: u16, elapsed: Duration) {
        let (r, c) = (route.index(), class_index(status));
        let seconds = elapsed.as_secs_f64();
        // Stored per bucket, summed when rendered: one add on the request path.
        if let Some(i) = REQUEST_BUCKETS.iter().position(|bound| seconds <= *bound) {
            add.one(&self.buckets[r][c][i]);
        }
        add.one(&self.count[r][c]);
        add.n(
            &self.sum_ns[r][c],
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        );
    }

    /// Renders the sum of `shards`' histograms.
    fn render<'a>(
        out: &mut String,
        name: &str,
        help: &str,
        shards: impl Iterator<Item = &'a RequestHistogram> + Clone,
    ) {
        let total = |counter: &dyn Fn(&RequestHistogram) -> &AtomicU64| {
            shards
                .clone()
                .map(|shard| counter(shard).load(Ordering::Relaxed))
                .sum::<u64>()
        };
        family(out, name, "histogram", help);
        for (r, route) in Route::ALL.iter().enumerate() {
            for (c, class) in CLASSES.iter().enumerate() {
                let count = total(&|h| &h.count[r][c]);
                if count == 0 {
                    continue;
                }
                let labels = format!("route=\"{}\",status=\"{class}\"", route.label());
                let mut cumulative = 0;
                for (i, bound) in REQUEST_BUCKETS.iter().enumerate() {
                    cumulative += total(&|h| &h.buckets[r][c][i]);
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
                }
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
                let sum = total(&|h| &h.sum_ns[r][c]) as f64 / 1e9;
                let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
                let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
            }
        }
    }
}

/// Shards of the counters: shard 0 is shared (atomic adds), the others are held by one
/// thread each, more than a machine of this size runs event loops.
const SHARDS: usize = 16;

/// How the calling thread adds to its shard.
#[derive(Clone, Copy)]
struct Adder {
    /// No other thread writes this shard: a plain load and store cannot lose a count.
    exclusive: bool,
}

impl Adder {
    fn n(self, counter: &AtomicU64, n: u64) {
        if self.exclusive {
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        } else {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn one(self, counter: &AtomicU64) {
        self.n(counter, 1);
    }

    fn signed(self, counter: &AtomicI64, n: i64) {
        if self.exclusive {
            counter.store(
                counter.load(Ordering::Relaxed).wrapping_add(n),
                Ordering::Relaxed,
            );
        } else {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The exclusive shards no live thread holds. A thread gives its shard back when it
/// exits (its last counts happen before, through this lock), so threads that come and go
/// (the blocking pool's) do not use them up.
static FREE_SHARDS: Mutex<Vec<usize>> = Mutex::new(Vec::new());
static NEVER_HELD: AtomicUsize = AtomicUsize::new(1);

/// A thread's hold on an exclusive shard, given back when the thread exits.
struct Held(usize);

impl Held {
    fn claim() -> Held {
        let mut free = FREE_SHARDS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = free.pop() {
            return Held(index);
        }
        drop(free);
        let next = NEVER_HELD
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < SHARDS).then_some(n + 1)
            })
            .unwrap_or(0);
        Held(next)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.0 != 0 {
            FREE_SHARDS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(self.0);
        }
    }
}

/// The shard the calling thread counts into (0: the shared one), claimed on its first
/// count.
fn shard_index() -> usize {
    thread_local! {
        static HELD: Held = Held::claim();
    }
    // During the thread's exit the hold may be gone already: count into the shared shard.
    HELD.try_with(|held| held.0).unwrap_or(0)
}

/// All counters of one server.
#[derive(Debug)]
pub(crate) struct Metrics {
    shards: Box<[Shard]>,
    open_connections: Arc<AtomicI64>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            open_connections: Arc::default(),
        }
    }
}

/// The counters one thread adds to, on cache lines of their own.
#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard {
    requests: [[AtomicU64; STATUSES.len()]; Route::ALL.len()],
    bytes_sent: AtomicU64,
    cache: [AtomicU64; OUTCOMES.len()],
    file_cache_hits: AtomicU64,
    file_cache_misses: AtomicU64,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
    mongodb_errors: AtomicU64,
    /// Responses started minus ended on this shard's threads (a response may end on
    /// another thread's shard, so one shard alone can go below zero; the sum cannot).
    in_flight: AtomicI64,
    durations: RequestHistogram,
    ttfb: RequestHistogram,
}

impl Metrics {
    fn shard(&self) -> (&Shard, Adder) {
        let index = shard_index();
        let adder = Adder {
            exclusive: index != 0,
        };
        (&self.shards[index], adder)
    }

    /// The sum of one counter over the shards.
    fn total(&self, counter: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards
            .iter()
            .map(|shard| counter(shard).load(Ordering::Relaxed))
            .sum()
    }

    /// A response began (its body is being sent).
    pub(crate) fn response_started(&self) {
        let (shard, add) = self.shard();
        add.signed(&shard.in_flight, 1);
    }

    /// A response ended: count it.
    pub(crate) fn response_finished(
        &self,
        route: Route,
        status: u16,
        bytes: u64,
        cache: CacheOutcome,
    ) {
        let (shard, add) = self.shard();
        add.signed(&shard.in_flight, -1);
        let slot = STATUSES
            .iter()
            .position(|s| *s == status)
            .unwrap_or(STATUSES.len() - 1);
        add.one(&shard.requests[route.index()][slot]);
        add.n(&shard.bytes_sent, bytes);
        if let Some(i) = OUTCOMES.iter().position(|o| *o == cache) {
            add.one(&shard.cache[i]);
        }
    }

    /// How long an exchange took, and how long until its response head was written.
    pub(crate) fn observe_request(
        &self,
        route: Route,
        status: u16,
        duration: Duration,
        ttfb: Option<Duration>,
    ) {
        let (shard, add) = self.shard();
        shard.durations.observe(add, route, status, duration);
        if let Some(ttfb) = ttfb {
            shard.ttfb.observe(add, route, status, ttfb);
        }
    }

    /// One id resolution took `elapsed`.
    pub(crate) fn observe_resolve(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        // Stored per bucket, summed when rendered: one add on the request path, not one
        // per bucket at or above it (a local hit crossed all twelve).
        let (shard, add) = self.shard();
        if let Some(i) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            add.one(&shard.latency_buckets[i]);
        }
        add.one(&shard.latency_count);
        add.n(
            &shard.latency_sum_ns,
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        );
    }

    /// A file was (true) or was not (false) answered from memory.
    pub(crate) fn file_cache(&self, hit: bool) {
        let (shard, add) = self.shard();
        add.one(if hit {
            &shard.file_cache_hits
        } else {
            &shard.file_cache_misses
        });
    }

    /// MongoDB failed a lookup.
    pub(crate) fn mongodb_error(&self) {
        let (shard, add) = self.shard();
        add.one(&shard.mongodb_errors);
    }

    /// The open-connections gauge, for the accept loops to count into.
    pub(crate) fn open_connections(&self) -> Arc<AtomicI64> {
        Arc::clone(&self.open_connections)
    }

    /// The Prometheus text exposition; `redis_errors` comes from the Redis link.
    pub(crate) fn render(
        &self,
        redis_errors: u64,
        file_cache_bytes: u64,
        local_ids: usize,
    ) -> String {
        let mut out = String::with_capacity(4096);
        let requests = "musicd_requests_total";
        family(
            &mut out,
            requests,
            "counter",
            "Responses by route and status.",
        );
        for (r, route) in Route::ALL.iter().map(|route| route.label()).enumerate() {
            for (s, status) in STATUSES.iter().enumerate() {
                let n = self.total(|shard| &shard.requests[r][s]);
                if n > 0 {
                    let status = if *status == 0 {
                        "other".to_string()
                    } else {
                        status.to_string()
                    };
                    let _ = writeln!(
                        out,
                        "{requests}{{route=\"{route}\",status=\"{status}\"}} {n}"
                    );
                }
            }
        }
        single(
            &mut out,
            "musicd_sent_bytes_total",
            "counter",
            "Body bytes sent.",
            self.total(|shard| &shard.bytes_sent),
        );
        let ids = "musicd_id_cache_total";
        family(
            &mut out,
            ids,
            "counter",
            "Id lookups by where the answer came from (local = in-process, hit = Redis).",
        );
        for (i, outcome) in OUTCOMES.iter().enumerate() {
            let _ = writeln!(
                out,
                "{ids}{{outcome=\"{}\"}} {}",
                outcome.as_str(),
                self.total(|shard| &shard.cache[i])
            );
        }
        let files = "musicd_file_cache_total";
        family(
            &mut out,
            files,
            "counter",
            "Tracks answered from the file cache (hit: a copy in memory, an open file, an offload answer) or opened afresh (miss).",
        );
        let _ = writeln!(
            out,
            "{files}{{result=\"hit\"}} {}",
            self.total(|shard| &shard.file_cache_hits)
        );
        let _ = writeln!(
            out,
            "{files}{{result=\"miss\"}} {}",
            self.total(|shard| &shard.file_cache_misses)
        );
        single(
            &mut out,
            "musicd_file_cache_bytes",
            "gauge",
            "Memory held by cached files.",
            file_cache_bytes,
        );
        single(
            &mut out,
            "musicd_local_ids",
            "gauge",
            "Ids held in the in-process cache.",
            local_ids,
        );
        let resolve = "musicd_resolve_seconds";
        family(
            &mut out,
            resolve,
            "histogram",
            "Time to resolve an id to a path.",
        );
        let mut cumulative = 0;
        for (i, bound) in BUCKETS.iter().enumerate() {
            cumulative += self.total(|shard| &shard.latency_buckets[i]);
            let _ = writeln!(out, "{resolve}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        let count = self.total(|shard| &shard.latency_count);
        let _ = writeln!(out, "{resolve}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{resolve}_sum {}",
            self.total(|shard| &shard.latency_sum_ns) as f64 / 1e9
        );
        let _ = writeln!(out, "{resolve}_count {count}");
        RequestHistogram::render(
            &mut out,
            "musicd_request_duration_seconds",
            "Time from a request's head to the end of its response, by route and status class.",
            self.shards.iter().map(|shard| &shard.durations),
        );
        RequestHistogram::render(
            &mut out,
            "musicd_ttfb_seconds",
            "Time from a request's head to its response head being written, by route and status class.",
            self.shards.iter().map(|shard| &shard.ttfb),
        );
        let upstream = "musicd_upstream_errors_total";
        family(
            &mut out,
            upstream,
            "counter",
            "Failed calls to Redis and MongoDB.",
        );
        let _ = writeln!(out, "{upstream}{{upstream=\"redis\"}} {redis_errors}");
        let _ = writeln!(
            out,
            "{upstream}{{upstream=\"mongodb\"}} {}",
            self.total(|shard| &shard.mongodb_errors)
        );
        let in_flight: i64 = self
            .shards
            .iter()
            .map(|shard| shard.in_flight.load(Ordering::Relaxed))
            .sum();
        single(
            &mut out,
            "musicd_in_flight_responses",
            "gauge",
            "Responses being sent.",
            in_flight,
        );
        let open = self.open_connections.load(Ordering::Relaxed);
        single(
            &mut out,
            "musicd_open_connections",
            "gauge",
            "Client connections open.",
            open,
        );
        out
    }
}

/// How the file cache proves its copies current: `stat` calls, watcher drains, watches.
pub(crate) fn render_file_checks(out: &mut String, cache: &super::file::cache::FileCache) {
    let checks = "musicd_file_cache_checks_total";
    family(
        out,
        checks,
        "counter",
        "Checks that cached files are unchanged: a stat of one file, or a drain of inotify vouching for every watched one.",
    );
    let _ = writeln!(out, "{checks}{{by=\"stat\"}} {}", cache.stat_calls());
    let _ = writeln!(out, "{checks}{{by=\"drain\"}} {}", cache.drains());
    single(
        out,
        "musicd_file_cache_mount_changes_total",
        "counter",
        "Times the mount table changed: every cached file is then checked with a stat again.",
        cache.mount_changes(),
    );
    single(
        out,
        "musicd_file_cache_watches",
        "gauge",
        "inotify watches held by the file cache (cache.file_watches caps them).",
        cache.watches(),
    );
}

/// The change-stream follower's series (`crate::follow`), appended to `out`.
pub(crate) fn render_follower(out: &mut String, watch: &crate::follow::FollowerStatus) {
    let following = u8::from(watch.state() == crate::follow::FollowerState::Following);
    single(
        out,
        "musicd_watch_following",
        "gauge",
        "1 while this process follows the change stream.",
        following,
    );
    let events = "musicd_watch_events_total";
    family(
        out,
        events,
        "counter",
        "Change-stream events applied, by operation.",
    );
    for (operation, n) in watch.events() {
        let _ = writeln!(out, "{events}{{operation=\"{operation}\"}} {n}");
    }
    let interruptions = "musicd_watch_interruptions_total";
    family(
        out,
        interruptions,
        "counter",
        "Times following stopped on a failure and was tried again, by what failed.",
    );
    for (kind, n) in watch.interruptions() {
        let _ = writeln!(out, "{interruptions}{{kind=\"{kind}\"}} {n}");
    }
    single(
        out,
        "musicd_watch_lag_seconds",
        "gauge",
        "Now minus the cluster time of the last change applied.",
        watch.lag_seconds(),
    );
    let caches = watch.bans().caches();
    let bans = "musicd_watch_bans_total";
    family(
        out,
        bans,
        "counter",
        "BANs the follower sent to the HTTP caches in front, by cache and result.",
    );
    for cache in caches {
        let url = cache.url();
        let _ = writeln!(
            out,
            "{bans}{{cache=\"{url}\",result=\"ok\"}} {}",
            cache.sent()
        );
        let _ = writeln!(
            out,
            "{bans}{{cache=\"{url}\",result=\"failed\"}} {}",
            cache.failed()
        );
    }
    let per_cache = [
        (
            "musicd_watch_bans_pending",
            "gauge",
            "Ids waiting to be banned, by cache.",
        ),
        (
            "musicd_watch_bans_dropped_total",
            "counter",
            "Bans given up on (neither the cache nor Redis took them), by cache.",
        ),
        (
            "musicd_watch_ban_lag_seconds",
            "gauge",
            "Change queued to ban answered (last ban, or the oldest waiting), by cache.",
        ),
    ];
    for (name, kind, help) in per_cache {
        family(out, name, kind, help);
        for cache in caches {
            let value = match name {
                "musicd_watch_bans_pending" => cache.waiting() as f64,
                "musicd_watch_bans_dropped_total" => cache.dropped() as f64,
                _ => cache.lag_seconds(),
            };
            let _ = writeln!(out, "{name}{{cache=\"{}\"}} {value}", cache.url());
        }
    }
}

/// The pushed-eviction subscription's series (`crate::catalog::evictions`).
pub(crate) fn render_evictions(
    out: &mut String,
    status: &crate::catalog::evictions::EvictionStatus,
) {
    single(
        out,
        "musicd_evictions_subscribed",
        "gauge",
        "1 while this process hears the follower's evictions (else ids live their TTL).",
        u8::from(status.subscribed()),
    );
    single(
        out,
        "musicd_evictions_total",
        "counter",
        "Ids evicted from the in-process cache on a published change.",
        status.evicted(),
    );
    single(
        out,
        "musicd_evictions_clears_total",
        "counter",
        "Whole in-process cache clears (a pattern purge, a rebuild, a new subscription).",
        status.clears(),
    );
    single(
        out,
        "musicd_evictions_lost_total",
        "counter",
        "Times the eviction subscription was lost.",
        status.lost(),
    );
}

/// Revoked sessions this process holds (`crate::signing::revoked`).
pub(crate) fn render_revoked(out: &mut String, sessions: usize) {
    single(
        out,
        "musicd_revoked_sessions",
        "gauge",
        "Revoked sessions held in memory (ended ones until the next reload).",
        sessions,
    );
}

/// Lookups waiting on MongoDB: at most 1,024, and at most 8 while it hangs.
pub(crate) fn render_mongodb_waiting(out: &mut String, waiting: usize) {
    single(
        out,
        "musicd_mongodb_waiting",
        "gauge",
        "Lookups waiting on MongoDB now (bounded: 1024, or 8 while it times out).",
        waiting,
    );
}

/// In-process id entries renewed from Redis before they ran out.
pub(crate) fn render_refreshed(out: &mut String, refreshed: u64) {
    single(
        out,
        "musicd_id_refreshes_total",
        "counter",
        "In-process id entries read from Redis again before they ran out (hot ids, in batches, off the request path).",
        refreshed,
    );
}

/// The access log's series: lines written, and lines lost to a sink that failed or did
/// not keep up.
pub(crate) fn render_access_log(out: &mut String, written: u64, dropped: u64) {
    single(
        out,
        "musicd_access_log_lines_total",
        "counter",
        "Access-log lines written to the sink.",
        written,
    );
    single(
        out,
        "musicd_access_log_dropped_lines_total",
        "counter",
        "Access-log lines dropped because the sink failed or did not keep up (requests were served).",
        dropped,
    );
}

/// A metric family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// A family with one unlabelled sample.
fn single(out: &mut String, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> &'a str {
        text.lines()
            .find(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    }

    #[test]
    fn counts_from_every_thread_are_summed_when_scraped() {
        // More threads at once than there are shards: some hold one alone and add without
        // a locked instruction, the rest share one; no count may be lost either way.
        const ROUNDS: usize = 20_000;
        const THREADS: usize = 2 * SHARDS;
        let metrics = Metrics::default();
        // Every thread claims its shard (its first count) before any counts on: none can
        // exit early and hand its shard on.
        let all_claimed = std::sync::Barrier::new(THREADS);
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    metrics.file_cache(true);
                    all_claimed.wait();
                    for _ in 0..ROUNDS {
                        metrics.response_started();
                        metrics.response_finished(Route::Track, 200, 4096, CacheOutcome::Local);
                        metrics.observe_request(
                            Route::Track,
                            200,
                            Duration::from_micros(300),
                            Some(Duration::from_micros(100)),
                        );
                    }
                });
            }
            // A response that starts on one thread and ends on another.
            scope
                .spawn(|| metrics.response_started())
                .join()
                .expect("start");
        });
        std::thread::scope(|scope| {
            scope.spawn(|| metrics.response_finished(Route::Healthz, 200, 0, CacheOutcome::None));
        });
        let text = metrics.render(0, 0, 0);
        let total = THREADS * ROUNDS;
        let requests = format!("musicd_requests_total{{route=\"track\",status=\"200\"}} {total}");
        assert!(text.contains(&requests), "{text}");
        assert!(
            text.contains(&format!("musicd_sent_bytes_total {}", total * 4096)),
            "{text}"
        );
        assert!(text.contains("musicd_in_flight_responses 0"), "{text}");
        let duration = format!(
            "musicd_request_duration_seconds_bucket{{route=\"track\",status=\"2xx\",le=\"0.0005\"}} {total}"
        );
        assert!(text.contains(&duration), "{text}");
        let ttfb = format!("musicd_ttfb_seconds_count{{route=\"track\",status=\"2xx\"}} {total}");
        assert!(text.contains(&ttfb), "{text}");
        let hits = format!("musicd_file_cache_total{{result=\"hit\"}} {THREADS}");
        assert!(text.contains(&hits), "{text}");
    }

    #[test]
    fn resolve_buckets_are_cumulative_when_rendered() {
        let metrics = Metrics::default();
        for micros in [5, 40, 40, 700, 2_000_000] {
            metrics.observe_resolve(Duration::from_micros(micros));
        }
        let text = metrics.render(0, 0, 0);
        let bucket = |le: &str| {
            line(
                &text,
                &format!("musicd_resolve_seconds_bucket{{le=\"{le}\"}}"),
            )
        };
        assert!(bucket("0.00001").ends_with(" 1"), "{text}");
        assert!(bucket("0.00005").ends_with(" 3"), "{text}");
        assert!(bucket("0.0005").ends_with(" 3"), "{text}");
        assert!(bucket("0.001").ends_with(" 4"), "{text}");
        assert!(bucket("1").ends_with(" 4"), "{text}");
        assert!(bucket("+Inf").ends_with(" 5"), "{text}");
        assert!(line(&text, "musicd_resolve_seconds_count").ends_with(" 5"));
    }
}
