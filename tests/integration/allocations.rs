//! Heap allocations on the hot path: a keep-alive `GET` of a small file that is in the file
//! cache, for an id that is in the in-process lookup cache, with the access log off and on.
//!
//! The test binary's allocator counts the allocations (and reallocations) made on threads
//! that asked to be counted. The musicd under test runs with one event loop, on a thread
//! of its own that asks; the counts of other tests' threads are never touched, so this
//! runs beside them. The budgets are the counts measured when the hot path was last made
//! leaner (issue 38): a change that adds an allocation per request fails here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::harness::raw::{connect, read_responses};
use crate::harness::{Musicd, TestEnv, pattern};

/// Allocations per request allowed with the access log off, and on: none. Before issue 38
/// the counts were 7 and 9: the input and output buffers, the head's shared handle, the id
/// and the path copied out of their caches, and the log's request id; then 2, while the
/// track route had a box of its own inside the exchange's; then 1, the exchange's box
/// (its future is now held in the connection's task).
const BUDGET_LOG_OFF: u64 = 0;
const BUDGET_LOG_ON: u64 = 0;
/// Requests measured: enough that the loop's background work (the lookup cache's one
/// Redis read a second, the drivers' heartbeats) adds well under one allocation a request.
const REQUESTS: u64 = 3000;

struct Counting;

thread_local! {
    static COUNTED_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Allocations made on counted threads. Only the server's thread counts, so this is
/// written from one thread.
static COUNTED: AtomicU64 = AtomicU64::new(0);

fn count() {
    if COUNTED_HERE.try_with(Cell::get).unwrap_or(false) {
        COUNTED.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to the system allocator with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations per request for `REQUESTS` keep-alive GETs of a cached 4 KiB file, on a
/// musicd configured with `overrides`.
async fn allocations_per_request(overrides: &[&str]) -> f64 {
    let mut settings = vec!["worker_threads=1", "mongodb.watch=off"];
    settings.extend_from_slice(overrides);
    let env = TestEnv::shared_with(&settings).await;
    let (id, _) = env.track("small.mp3", &pattern(4096, 7)).await;
    let config = env.config.clone();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        COUNTED_HERE.with(|here| here.set(true));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async move {
            let musicd = Musicd::start(&config).await;
            addr_tx.send(musicd.addr).expect("send addr");
            let _ = stop_rx.await;
            musicd.shutdown().await;
        });
    });
    let addr = addr_rx.recv().expect("server address");
    let per_request = tokio::task::spawn_blocking(move || {
        let request = format!(
            "GET /musicdb/{}/a.mp3 HTTP/1.1\r\nHost: x\r\n\r\n",
            id.to_hex()
        );
        let mut stream = connect(addr);
        let mut get = |times: u64| {
            for _ in 0..times {
                stream.write_all(request.as_bytes()).expect("write");
                let answers = read_responses(&mut stream, 1, &[false]);
                assert_eq!(answers[0].status, 200);
                assert_eq!(answers[0].body.len(), 4096);
            }
        };
        // The first requests fill the lookup and file caches and grow the connection's
        // buffers: not the hot path.
        get(50);
        let before = COUNTED.load(Ordering::Relaxed);
        get(REQUESTS);
        (COUNTED.load(Ordering::Relaxed) - before) as f64 / REQUESTS as f64
    })
    .await
    .expect("client");
    let _ = stop_tx.send(());
    server.join().expect("server thread");
    per_request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_get_allocates_within_its_budget_with_the_log_off_and_on() {
    let off = allocations_per_request(&[]).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let log = format!("access_log.path={}", scratch.path().join("a.log").display());
    let on = allocations_per_request(&["access_log.format=combined", &log]).await;
    println!("allocations per request: {off:.2} with the log off, {on:.2} on");
    // Half an allocation of slack for the background work measured with them.
    assert!(
        off <= BUDGET_LOG_OFF as f64 + 0.5,
        "{off:.2} allocations per request with the log off (budget {BUDGET_LOG_OFF})"
    );
    assert!(
        on <= BUDGET_LOG_ON as f64 + 0.5,
        "{on:.2} allocations per request with the log on (budget {BUDGET_LOG_ON})"
    );
}
