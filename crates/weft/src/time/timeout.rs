use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::sleep::{sleep, sleep_until, Sleep};

/// Runs `future` with a time limit: `Err(Elapsed)` if it has not finished within
/// `duration` (it is then dropped).
///
/// # Panics
/// As [`sleep`](super::sleep): when the future is not ready and the deadline must be
/// waited for outside a weft runtime (a future that completes at once, or a deadline
/// already past, needs none).
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     assert_eq!(weft::time::timeout(Duration::from_secs(1), async { 5 }).await, Ok(5));
///     let never = std::future::pending::<()>();
///     assert!(weft::time::timeout(Duration::from_millis(5), never).await.is_err());
/// });
/// ```
#[track_caller]
pub fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep(duration),
    }
}

/// Like [`timeout`] with an absolute deadline.
///
/// ```
/// use std::time::Duration;
/// use weft::time::Instant;
/// let rt = weft::Runtime::new().unwrap();
/// let r = rt.block_on(weft::time::timeout_at(Instant::now(), std::future::pending::<()>()));
/// assert!(r.is_err());
/// ```
#[track_caller]
pub fn timeout_at<F: Future>(deadline: Instant, future: F) -> Timeout<F> {
    Timeout {
        future,
        sleep: sleep_until(deadline),
    }
}

/// The future returned by [`timeout`].
#[must_use = "futures do nothing unless awaited"]
pub struct Timeout<F> {
    future: F,
    sleep: Sleep,
}

impl<F> Timeout<F> {
    /// The wrapped future.
    pub fn get_ref(&self) -> &F {
        &self.future
    }

    /// Unwraps the future, cancelling the timer.
    pub fn into_inner(self) -> F {
        self.future
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned and never moved; `sleep` is `Unpin`.
        let this = unsafe { self.get_unchecked_mut() };
        // SAFETY: as above, `this.future` stays where the pinned `Timeout` put it.
        if let Poll::Ready(v) = unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx) {
            return Poll::Ready(Ok(v));
        }
        match Pin::new(&mut this.sleep).poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed(()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F> fmt::Debug for Timeout<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeout")
            .field("sleep", &self.sleep)
            .finish()
    }
}

/// The error of a [`Timeout`] whose time ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elapsed(());

impl Elapsed {
    pub(crate) fn new() -> Elapsed {
        Elapsed(())
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl From<Elapsed> for std::io::Error {
    fn from(e: Elapsed) -> Self {
        std::io::Error::new(std::io::ErrorKind::TimedOut, e)
    }
}
