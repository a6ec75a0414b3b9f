use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::sleep::{sleep_until, Sleep};

/// What an [`Interval`] does when ticks were missed (the task was late to ask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissedTickBehavior {
    /// Fire the missed ticks at once, one after another, until caught up.
    #[default]
    Burst,
    /// Restart the schedule from now: the next tick is one period after this one. A
    /// tick counts as missed when it comes more than 5 ms (or a period, if that is
    /// shorter) after its time: the timer wheel's millisecond makes every tick a little
    /// late.
    Delay,
    /// Drop the missed ticks and keep to the original schedule.
    Skip,
}

/// Ticks every `period`, the first tick at once.
///
/// # Panics
/// If `period` is zero. A tick that must wait panics if the interval was neither created
/// nor polled inside a weft runtime (as [`sleep`](super::sleep)).
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let start = weft::time::Instant::now();
///     let mut every = weft::time::interval(Duration::from_millis(10));
///     for _ in 0..3 {
///         every.tick().await;
///     }
///     assert!(start.elapsed() >= Duration::from_millis(20));
/// });
/// ```
#[track_caller]
pub fn interval(period: Duration) -> Interval {
    interval_at(Instant::now(), period)
}

/// Ticks every `period`, the first tick at `start`.
///
/// # Panics
/// If `period` is zero. A tick that must wait panics if the interval was neither created
/// nor polled inside a weft runtime (as [`sleep`](super::sleep)).
///
/// ```
/// use std::time::Duration;
/// use weft::time::Instant;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let start = Instant::now() + Duration::from_millis(5);
///     let mut i = weft::time::interval_at(start, Duration::from_millis(5));
///     assert_eq!(i.tick().await, start);
/// });
/// ```
#[track_caller]
pub fn interval_at(start: Instant, period: Duration) -> Interval {
    assert!(!period.is_zero(), "weft: interval period must be non-zero");
    Interval {
        sleep: sleep_until(start),
        period,
        missed: MissedTickBehavior::Burst,
    }
}

/// A stream of ticks; see [`interval`].
#[derive(Debug)]
pub struct Interval {
    sleep: Sleep,
    period: Duration,
    missed: MissedTickBehavior,
}

impl Interval {
    /// Waits for the next tick and returns the instant it was scheduled for.
    pub async fn tick(&mut self) -> Instant {
        poll_fn(|cx| self.poll_tick(cx)).await
    }

    /// Polls for the next tick.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>) -> Poll<Instant> {
        if Pin::new(&mut self.sleep).poll(cx).is_pending() {
            return Poll::Pending;
        }
        let scheduled = self.sleep.deadline();
        let now = Instant::now();
        let on_time = later(scheduled, self.period);
        let next = match self.missed {
            MissedTickBehavior::Burst => on_time,
            MissedTickBehavior::Delay if now > later(scheduled, self.period.min(LATE_SLACK)) => {
                later(now, self.period)
            }
            MissedTickBehavior::Delay => on_time,
            MissedTickBehavior::Skip if on_time <= now => {
                // Jump whole periods past now, keeping the phase. Counted in `u128`
                // nanoseconds: a tiny period far behind is more than `u32::MAX` periods
                // (a 1 ns period 4.3 s behind), and a count cut to `u32` wrapped into a
                // tick in the past (found in review, `tests/review_s38_sync.rs`).
                let period = self.period.as_nanos();
                let periods = now.duration_since(on_time).as_nanos() / period + 1;
                later(on_time, nanos(periods.saturating_mul(period)))
            }
            MissedTickBehavior::Skip => on_time,
        };
        self.sleep.reset(next);
        Poll::Ready(scheduled)
    }

    /// Sets what happens to missed ticks.
    pub fn set_missed_tick_behavior(&mut self, behavior: MissedTickBehavior) {
        self.missed = behavior;
    }

    /// The current missed-tick behaviour.
    pub fn missed_tick_behavior(&self) -> MissedTickBehavior {
        self.missed
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Restarts the schedule: the next tick is one period from now.
    pub fn reset(&mut self) {
        self.sleep.reset(later(Instant::now(), self.period));
    }
}

/// How late a tick may come before [`MissedTickBehavior::Delay`] counts it as missed.
const LATE_SLACK: Duration = Duration::from_millis(5);

/// `t + d`, or a point that never comes if that is past what an `Instant` holds (an
/// interval of `Duration::MAX` ticks once, as a sleep of that length never ends).
fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).unwrap_or_else(super::sleep::far_future)
}

/// `n` nanoseconds as a `Duration` (saturating at `Duration::MAX`).
fn nanos(n: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(n / PER_SEC) {
        Ok(secs) => Duration::new(secs, (n % PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

use std::future::Future as _;
