//! [`WeftExecutor`]: hyper's background futures as weft tasks.

use std::future::Future;

/// Runs the futures hyper hands to an executor (an HTTP/2 connection's streams, a
/// client connection given to a pool) as weft tasks, with [`weft::spawn`](crate::spawn)
/// on the current runtime. The task is detached: it runs to its end, and its output
/// is dropped.
///
/// # Panics
/// `execute` panics outside a weft runtime, as `weft::spawn` does.
///
/// ```
/// use hyper::rt::Executor;
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     let (tx, rx) = futures_channel::oneshot::channel();
///     weft::hyper::WeftExecutor::new().execute(async move {
///         tx.send(42).unwrap();
///     });
///     assert_eq!(rx.await.unwrap(), 42);
/// });
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct WeftExecutor;

impl WeftExecutor {
    /// An executor spawning onto the current runtime.
    ///
    /// ```
    /// let exec = weft::hyper::WeftExecutor::new();
    /// # let _ = exec;
    /// ```
    pub fn new() -> WeftExecutor {
        WeftExecutor
    }
}

impl<F> ::hyper::rt::Executor<F> for WeftExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        drop(crate::spawn(future));
    }
}
