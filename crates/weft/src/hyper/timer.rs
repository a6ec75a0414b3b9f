//! [`WeftTimer`]: hyper's timers on weft's timer wheel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::time::Sleep;

/// hyper's timer (header-read timeouts, keep-alive idle timeouts, HTTP/2 pings) on
/// weft's timer wheel: each of its sleeps is a [`weft::time::Sleep`](crate::time::Sleep),
/// so it counts in [`Stats::timers_pending`](crate::Stats::timers_pending) like any
/// weft timer, and a reset moves it on the wheel instead of making a new one.
///
/// A sleep binds to the runtime that is current where hyper creates it, or else where
/// it is first polled (see [`weft::time`](crate::time)); hyper does both inside the
/// connection's task.
///
/// ```
/// use std::time::Duration;
/// use hyper::rt::Timer;
///
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let timer = weft::hyper::WeftTimer::new();
///     let mut long = timer.sleep(Duration::from_secs(60));
///     // Polled once (by the timeout), it waits on the wheel.
///     assert!(weft::time::timeout(Duration::from_millis(1), &mut long).await.is_err());
///     assert_eq!(weft::Handle::current().stats().timers_pending, 1);
///     // Moved to 5 ms from now, in place.
///     timer.reset(&mut long, std::time::Instant::now() + Duration::from_millis(5));
///     long.await;
///     assert_eq!(weft::Handle::current().stats().timers_pending, 0);
/// });
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct WeftTimer;

impl WeftTimer {
    /// A timer on the wheel of the runtime where its sleeps are made.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let timer = weft::hyper::WeftTimer::new();
    ///     hyper::rt::Timer::sleep(&timer, std::time::Duration::from_millis(2)).await;
    /// });
    /// ```
    pub fn new() -> WeftTimer {
        WeftTimer
    }
}

impl ::hyper::rt::Timer for WeftTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn ::hyper::rt::Sleep>> {
        Box::pin(WeftSleep(crate::time::sleep(duration)))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn ::hyper::rt::Sleep>> {
        Box::pin(WeftSleep(crate::time::sleep_until(deadline)))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn ::hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<WeftSleep>() {
            // One of ours: no new allocation; its wheel entry moves, with its waker.
            Some(mut ours) => ours.0.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

/// weft's [`Sleep`] as hyper's `Sleep` (a `Future + Send + Sync` hyper can downcast).
struct WeftSleep(Sleep);

impl Future for WeftSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl ::hyper::rt::Sleep for WeftSleep {}

// hyper's `Sleep` needs `Send + Sync`, and `reset` above relies on `Unpin`.
const _: () = {
    const fn assert_send_sync_unpin<T: Send + Sync + Unpin>() {}
    assert_send_sync_unpin::<Sleep>();
};
