use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::base::Arc;
use crate::driver::timer::Driver;
use crate::driver::wheel::TimerKey;

/// Waits until `duration` has elapsed.
///
/// The sleep binds to the runtime current where it is created, or else where it is
/// first polled.
///
/// # Panics
/// When a poll finds it must wait (its deadline not yet reached) and the sleep was
/// neither created nor polled inside a weft runtime: one that has elapsed completes
/// anywhere.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(weft::time::sleep(std::time::Duration::from_millis(5)));
/// ```
#[track_caller]
pub fn sleep(duration: Duration) -> Sleep {
    let deadline = Instant::now()
        .checked_add(duration)
        .unwrap_or_else(far_future);
    sleep_until(deadline)
}

/// Waits until `deadline`.
///
/// # Panics
/// As [`sleep`].
///
/// ```
/// use weft::time::Instant;
/// let rt = weft::Runtime::new().unwrap();
/// let deadline = Instant::now() + std::time::Duration::from_millis(5);
/// rt.block_on(weft::time::sleep_until(deadline));
/// assert!(Instant::now() >= deadline);
/// ```
#[track_caller]
pub fn sleep_until(deadline: Instant) -> Sleep {
    Sleep {
        driver: super::try_current_driver(),
        deadline,
        key: None,
        done: false,
        alarm: None,
    }
}

/// A sleep on `driver`'s wheel (for a socket's read timeout: the socket's runtime,
/// whatever is current where it is used).
pub(crate) fn sleep_on(driver: Arc<Driver>, deadline: Instant) -> Sleep {
    Sleep {
        driver: Some(driver),
        deadline,
        key: None,
        done: false,
        alarm: None,
    }
}

/// About 30 years: "never" for practical purposes, without overflowing `Instant`.
pub(crate) fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// The future returned by [`sleep`] and [`sleep_until`]. Dropping it cancels the timer
/// in O(1).
#[must_use = "futures do nothing unless awaited"]
pub struct Sleep {
    /// Bound at creation, or at the first poll.
    driver: Option<Arc<Driver>>,
    deadline: Instant,
    key: Option<TimerKey>,
    done: bool,
    /// Once its runtime has shut down (no timer is filed on its wheel any more): the
    /// process's alarm thread ends the sleep at its deadline. Boxed: a sleep is part of
    /// many futures, and this is rare.
    alarm: Option<Box<super::alarm::ThreadAlarm>>,
}

impl Sleep {
    /// Whether a runtime was current when this sleep was created (its driver is bound).
    pub(crate) fn is_bound(&self) -> bool {
        self.driver.is_some()
    }

    /// The instant this sleep completes at.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let _g = rt.block_on(async {
    ///     let s = weft::time::sleep(std::time::Duration::from_secs(1));
    ///     assert!(s.deadline() > weft::time::Instant::now());
    /// });
    /// ```
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the deadline has passed.
    pub fn is_elapsed(&self) -> bool {
        self.done || Instant::now() >= self.deadline
    }

    /// Moves the deadline (earlier or later), re-arming a sleep that already completed.
    ///
    /// A task that waits on the sleep is woken at the new deadline even when another
    /// thread moved it (the waker it registered stays, as with tokio's `Sleep`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use weft::time::Instant;
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let mut s = weft::time::sleep(Duration::from_secs(60));
    ///     s.reset(Instant::now() + Duration::from_millis(5));
    ///     (&mut s).await;
    /// });
    /// ```
    pub fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        self.done = false;
        // Moved with its waker: whoever calls this need not be the waiter, and the
        // waiter may never poll again unless woken (found in review: a sleep reset from
        // another thread, its entry cancelled with the waker in it, left the task
        // awaiting it asleep for good).
        if let (Some(key), Some(d)) = (self.key, &self.driver) {
            self.key = d.reschedule(key, deadline);
        }
        if let Some(alarm) = &mut self.alarm {
            alarm.reschedule(deadline);
        }
    }

    fn cancel(&mut self) {
        if let (Some(key), Some(d)) = (self.key.take(), &self.driver) {
            d.cancel(key);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.done {
            return Poll::Ready(());
        }
        if Instant::now() >= self.deadline {
            self.done = true;
            self.cancel();
            return Poll::Ready(());
        }
        let this = &mut *self;
        if this.alarm.is_none() {
            let driver = this.driver.get_or_insert_with(super::current_driver);
            this.key = match this.key {
                Some(key) if driver.poll_registered(key, cx.waker()) => Some(key),
                // Fired a hair before the deadline by `Instant`'s reckoning (or woken
                // by the driver's shutdown, the timer gone): re-arm.
                Some(key) => driver.reset(key, this.deadline, cx.waker()),
                None => driver.register(this.deadline, cx.waker()),
            };
            if this.key.is_some() {
                return Poll::Pending;
            }
        }
        // The runtime has shut down: nothing fires its wheel any more.
        let alarm = this.alarm.get_or_insert_with(Default::default);
        if alarm.poll(this.deadline, cx).is_ready() {
            this.done = true;
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl fmt::Debug for Sleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("done", &self.done)
            .finish()
    }
}
