use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::current;
use super::header::Header;
use super::raw::drop_reference;

/// Runs `future` to completion even if the task is aborted meanwhile.
///
/// While any shield of a task is active, `abort()` only records the request; the
/// cancellation takes effect at the task's first poll after the last shield ends.
/// Shields nest (up to depth 255 in the state word; deeper ones are covered by the
/// outer ones). Outside a weft task a shield simply runs its future.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
///
/// let rt = weft::Runtime::new().unwrap();
/// let committed = Arc::new(AtomicBool::new(false));
/// let c = committed.clone();
/// let (tx, rx) = std::sync::mpsc::channel();
/// let h = rt.spawn(async move {
///     weft::task::shield(async {
///         tx.send(()).unwrap();
///         while !weft::task::is_cancelled() {
///             weft::task::yield_now().await;
///         }
///         c.store(true, Ordering::SeqCst); // the critical section finishes
///     })
///     .await;
///     weft::task::yield_now().await; // the abort takes effect here
///     unreachable!();
/// });
/// rx.recv().unwrap();
/// h.abort();
/// assert!(h.join().unwrap_err().is_cancelled());
/// assert!(committed.load(Ordering::SeqCst));
/// ```
pub fn shield<F: Future>(future: F) -> Shield<F> {
    Shield {
        future,
        entered: None,
        done: false,
    }
}

/// The future returned by [`shield`].
#[must_use = "futures do nothing unless awaited"]
pub struct Shield<F> {
    future: F,
    /// The task whose shield depth this shield raised, with one reference of its own
    /// to that task: the shield may outlive the task's future (returned as its output,
    /// or moved into another task), and its `leave` must still find the header.
    entered: Option<TaskRef>,
    done: bool,
}

impl<F> Shield<F> {
    fn leave(&mut self) {
        if let Some(task) = self.entered.take() {
            task.unshield();
        }
    }
}

impl<F: Future> Future for Shield<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // SAFETY: `future` is structurally pinned; the other fields are never pinned.
        let this = unsafe { self.get_unchecked_mut() };
        assert!(!this.done, "weft: Shield polled after completion");
        if this.entered.is_none() {
            this.entered = TaskRef::current().filter(TaskRef::shield);
        }
        // SAFETY: `this` was pinned, and `future` is never moved out of it.
        let res = unsafe { Pin::new_unchecked(&mut this.future) }.poll(cx);
        if res.is_ready() {
            this.done = true;
            this.leave();
        }
        res
    }
}

impl<F> Drop for Shield<F> {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A counted reference to a task, taken by code that may later shield it from outside:
/// a rendezvous send's wait node (its receiver shields the sending task when it takes
/// the value, see `chan::core`), a blocking nursery's wait (it shields its owner).
pub(crate) struct TaskRef(NonNull<Header>);

// SAFETY: the reference is counted, so the header stays alive wherever this goes, and
// everything done through it (the atomic state word, `schedule`, releasing the
// reference) is thread-safe.
unsafe impl Send for TaskRef {}
// SAFETY: as above; `&TaskRef` only reaches the atomic state word.
unsafe impl Sync for TaskRef {}

impl TaskRef {
    /// The task running on this thread (a fiber's own task on a fiber), if any.
    pub(crate) fn current() -> Option<TaskRef> {
        current::with(|h| {
            let h = h?;
            h.state.ref_inc();
            Some(TaskRef(NonNull::from(h)))
        })
    }

    /// The task running on this thread if `waker` is that task's own waker: the
    /// operation polled with it is polled by the task's harness (directly, or by a
    /// fiber's `wait`, which suspends the fiber), so the harness's cancellation drops
    /// it. `None` for a future polled by a nested `weft::wait` on a worker or plain
    /// thread (its own waker: the task cannot be cancelled until that wait returns),
    /// by another executor, or off any task.
    pub(crate) fn current_polling(waker: &Waker) -> Option<TaskRef> {
        current::with(|h| {
            let h = h?;
            let w = super::waker::header_of(waker)?;
            if !std::ptr::eq(h, w) {
                return None;
            }
            h.state.ref_inc();
            Some(TaskRef(NonNull::from(h)))
        })
    }

    /// Whether `other` is this same task.
    pub(crate) fn same(&self, other: Option<&TaskRef>) -> bool {
        other.is_some_and(|o| o.0 == self.0)
    }

    fn header(&self) -> &Header {
        // SAFETY: the reference this holds keeps the header alive.
        unsafe { self.0.as_ref() }
    }

    /// Whether cancellation was requested (shielded or not).
    pub(crate) fn is_cancelled(&self) -> bool {
        self.header().state.load().is_cancelled()
    }

    /// Whether a partner could commit for this task now
    /// ([`shield_unless_cancelled`](Self::shield_unless_cancelled) would not refuse):
    /// its cancellation is not effective, or it is complete.
    pub(crate) fn may_commit(&self) -> bool {
        let s = self.header().state.load();
        s.is_complete() || !s.is_cancellation_effective()
    }

    /// Raises the task's shield depth; `false` at the maximum depth (nothing raised:
    /// the outer shields defer cancellation already).
    pub(crate) fn shield(&self) -> bool {
        self.header().state.add_shield()
    }

    /// Raises the shield depth unless the task's cancellation is already effective
    /// (`None`: do not commit to anything for it); see `State::add_shield_unless_cancelled`.
    pub(crate) fn shield_unless_cancelled(&self) -> Option<bool> {
        self.header().state.add_shield_unless_cancelled()
    }

    /// Lowers the shield depth raised by [`shield`](Self::shield) or
    /// [`shield_unless_cancelled`](Self::shield_unless_cancelled). When that ends the
    /// last shield of a cancelled IDLE task, the task is scheduled so the cancellation
    /// takes effect.
    pub(crate) fn unshield(&self) {
        if self.header().state.remove_shield() {
            // SAFETY: `remove_shield` made a new queue reference, which `schedule`
            // takes; the header is alive (our reference).
            unsafe { (self.header().vtable.schedule)(self.0) };
        }
    }
}

impl Drop for TaskRef {
    fn drop(&mut self) {
        // SAFETY: we own one counted reference, released once.
        unsafe { drop_reference(self.0) };
    }
}
