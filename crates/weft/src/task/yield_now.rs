use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Gives the worker to other tasks once: the current task is put at the back of its
/// worker's queue, behind work that is already waiting.
///
/// ```
/// let rt = weft::Builder::new().worker_threads(1).build().unwrap();
/// rt.block_on(async {
///     let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
///     let f = flag.clone();
///     weft::spawn(async move { f.store(true, std::sync::atomic::Ordering::SeqCst) });
///     while !flag.load(std::sync::atomic::Ordering::SeqCst) {
///         weft::task::yield_now().await;
///     }
/// });
/// ```
pub fn yield_now() -> YieldNow {
    YieldNow { yielded: false }
}

/// The future returned by [`yield_now`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct YieldNow {
    yielded: bool,
}

impl Future for YieldNow {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.yielded {
            return Poll::Ready(());
        }
        self.yielded = true;
        // A wake during its own poll marks the task notified; when the poll returns
        // the worker requeues it behind the queued work.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
