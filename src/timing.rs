//! Time as the crate counts it: the wall clock in Unix seconds and milliseconds (and the
//! second of a monotonic instant, for the per-request dates), durations as whole
//! milliseconds for Redis, and the doubling pause between retries.

use std::cell::Cell;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Now, in Unix seconds (0 for a clock set before 1970).
pub(crate) fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Now, in Unix milliseconds (0 for a clock set before 1970).
pub(crate) fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The second the wall clock showed at `at` (0 before 1970): read from the clock once per
/// second per thread, not per call.
///
/// Every answer's `Date` and every log line's time are per second, and each request has
/// its instants already: the thread keeps the monotonic span in which the wall clock shows
/// the second it last read, and an instant inside it needs no clock read. A step of the
/// wall clock shows from the end of that span, within a second.
pub(crate) fn unix_second_at(at: Instant) -> u64 {
    thread_local! {
        /// (the span's start, its end, its second)
        static SPAN: Cell<Option<(Instant, Instant, u64)>> = const { Cell::new(None) };
    }
    SPAN.with(|span| match span.get() {
        Some((from, until, second)) if from <= at && at < until => second,
        _ => {
            let read_at = Instant::now();
            let wall = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let left = Duration::from_nanos(u64::from(1_000_000_000 - wall.subsec_nanos()));
            if let Some(until) = read_at.checked_add(left) {
                span.set(Some((read_at, until, wall.as_secs())));
            }
            // An instant from before this read (a request's start) is dated by this read:
            // later by at most the request's time so far, never a second that had not come.
            wall.as_secs()
        }
    })
}

/// A duration as whole milliseconds for `PX` and `PEXPIRE`, at least 1: Redis refuses 0.
pub(crate) fn redis_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The pause before each try of something that keeps failing: `first`, then twice as long
/// each time, up to `max`; back to `first` once it worked.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Pauses from `first` doubling to `max`.
    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The pause to wait now; the one after it is twice as long, up to the maximum.
    pub(crate) fn next_pause(&mut self) -> Duration {
        let pause = self.next;
        self.next = (self.next * 2).min(self.max);
        pause
    }

    /// It worked: the next failure waits the first pause again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }

    /// A new maximum (a reloaded configuration); the pause under way is kept within it.
    pub(crate) fn set_max(&mut self, max: Duration) {
        self.max = max;
        self.next = self.next.min(max);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_second_of_an_instant_is_the_wall_clock_second_around_it() {
        use std::time::{Instant, SystemTime, UNIX_EPOCH};
        let wall = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .expect("after 1970")
                .as_secs()
        };
        for _ in 0..3 {
            let before = wall();
            let now = Instant::now();
            let second = super::unix_second_at(now);
            // Asked again, from the span the thread keeps.
            let again = super::unix_second_at(now);
            let after = wall();
            assert!(
                before <= second && second <= after,
                "{before} {second} {after}"
            );
            assert_eq!(again, second);
        }
    }

    use super::*;

    #[test]
    fn pauses_double_up_to_the_maximum_and_start_over_after_a_success() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(100), ms(500));
        let pauses: Vec<Duration> = (0..5).map(|_| backoff.next_pause()).collect();
        assert_eq!(pauses, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        backoff.reset();
        assert_eq!(backoff.next_pause(), ms(100));
        assert_eq!(redis_ms(Duration::ZERO), 1, "PX 0 is an error in Redis");
        assert!(unix_ms() / 1000 - i64::try_from(unix_secs()).unwrap_or(0) <= 1);
    }
}
