//! CPU per link check, plain against bound to a session (#36: a `sid` may cost at most
//! 0.3 µs more), over a revocation set of a million sessions. Run it through
//! `bench/link_check.sh` (a release build).
//!
//! Rounds alternate which link goes first; each round times `--checks` checks of each on
//! this thread's CPU clock, so a busy machine slows both alike. The answer is the median
//! of the per-round differences, with a 90 % bootstrap confidence interval.
//!
//! ```text
//! link_check_cost [--revoked 1000000] [--rounds 20] [--checks 200000] [--json]
//! ```

use std::hint::black_box;
use std::process::ExitCode;

use musicd::signing::cost::LinkCheckBench;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// This thread's CPU time, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Nanoseconds of CPU per call of `check`, over `n` calls.
fn per_check(n: u64, check: impl Fn() -> bool) -> f64 {
    let started = thread_cpu_ns();
    let mut passed = 0u64;
    for _ in 0..n {
        passed += u64::from(black_box(check()));
    }
    let spent = thread_cpu_ns() - started;
    assert_eq!(passed, n, "a link failed its check");
    spent as f64 / n as f64
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// The 5th and 95th percentiles of the median over resamples.
fn bootstrap(values: &[f64]) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(36);
    let mut medians: Vec<f64> = (0..2000)
        .map(|_| {
            let mut sample: Vec<f64> = (0..values.len())
                .map(|_| values[rng.random_range(0..values.len())])
                .collect();
            median(&mut sample)
        })
        .collect();
    medians.sort_by(f64::total_cmp);
    (medians[100], medians[1899])
}

fn main() -> ExitCode {
    let mut revoked = 1_000_000usize;
    let mut rounds = 20usize;
    let mut checks = 200_000u64;
    let mut json = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = |v: Option<String>| v.and_then(|v| v.parse::<u64>().ok());
        match arg.as_str() {
            "--revoked" => revoked = value(args.next()).unwrap_or(1_000_000) as usize,
            "--rounds" => rounds = value(args.next()).unwrap_or(20).max(2) as usize,
            "--checks" => checks = value(args.next()).unwrap_or(200_000).max(1),
            "--json" => json = true,
            other => {
                eprintln!("unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let bench = LinkCheckBench::new(revoked);
    // Warm the caches and the branch predictors on both.
    per_check(checks / 10 + 1, || bench.check_plain());
    per_check(checks / 10 + 1, || bench.check_bound());
    let (mut plain, mut bound, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (p, b) = if round.is_multiple_of(2) {
            let p = per_check(checks, || bench.check_plain());
            (p, per_check(checks, || bench.check_bound()))
        } else {
            let b = per_check(checks, || bench.check_bound());
            (per_check(checks, || bench.check_plain()), b)
        };
        plain.push(p);
        bound.push(b);
        extra.push(b - p);
    }
    let (low, high) = bootstrap(&extra);
    let extra_median = median(&mut extra.clone());
    let (plain_median, bound_median) = (median(&mut plain), median(&mut bound));
    if json {
        println!(
            "{}",
            serde_json::json!({
                "revoked_sessions": bench.revoked(),
                "rounds": rounds,
                "checks_per_round": checks,
                "plain_ns": plain_median,
                "bound_ns": bound_median,
                "extra_ns": extra_median,
                "extra_ns_90ci": [low, high],
            })
        );
    } else {
        println!(
            "{} revoked sessions, {rounds} rounds of {checks} checks each: plain {plain_median:.1} ns, \
             with sid {bound_median:.1} ns, extra {extra_median:+.1} ns (90 % CI {low:+.1} to {high:+.1})",
            bench.revoked()
        );
    }
    ExitCode::SUCCESS
}
