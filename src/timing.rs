//! Time as the crate counts it: the wall clock in Unix seconds and milliseconds, durations
//! as whole milliseconds for Redis, and the doubling pause between retries.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
