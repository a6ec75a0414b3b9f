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
    /// Restart the schedule from now: the next tick is one period after this one.
    Delay,
    /// Drop the missed ticks and keep to the original schedule.
    Skip,
}

/// Ticks every `period`, the first tick at once.
///
/// # Panics
/// If `period` is zero, or outside a weft runtime.
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
/// If `period` is zero, or outside a weft runtime.
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
        let next = match self.missed {
            MissedTickBehavior::Burst => scheduled + self.period,
            MissedTickBehavior::Delay if now > scheduled + self.period => now + self.period,
            MissedTickBehavior::Delay => scheduled + self.period,
            MissedTickBehavior::Skip => {
                let mut next = scheduled + self.period;
                if next <= now {
                    // Jump whole periods past now, keeping the phase.
                    let behind = now.duration_since(next).as_nanos();
                    let periods = behind / self.period.as_nanos() + 1;
                    next += self.period * periods as u32;
                }
                next
            }
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
        self.sleep.reset(Instant::now() + self.period);
    }
}

use std::future::Future as _;
