//! The children: a task's future and a fiber's closure wrapped so that the nursery
//! hears when each ends, and how.
//!
//! The report (`Inner::child_ended`) is always the last thing a child does, after its
//! future or closure (and all it borrowed) is gone: on completion the wrapper drops
//! the future first and then reports; on cancellation the wrapper is dropped, and its
//! fields drop in declaration order, the user's part before the [`Guard`]. That order
//! is what lets a blocking nursery's children borrow from the caller's frame: the
//! owner returns only once every child has reported.

use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::state::{Failure, Inner};
use crate::base::Arc;

/// A child's boxed future, its lifetime erased (see `Nursery::spawn`).
pub(crate) type TaskBody<E> = Pin<Box<dyn Future<Output = Result<(), E>> + Send>>;
/// A fiber child's boxed closure, its lifetime erased (see `Nursery::spawn_fiber`).
pub(crate) type FiberBody<E> = Box<dyn FnOnce() -> Result<(), E> + Send>;

/// Reports the child's end to its nursery exactly once: with its outcome, or (dropped
/// without one) as cancelled.
pub(crate) struct Guard<E> {
    inner: Arc<Inner<E>>,
    id: u64,
    ended: bool,
}

impl<E> Guard<E> {
    pub(crate) fn new(inner: Arc<Inner<E>>, id: u64) -> Guard<E> {
        Guard {
            inner,
            id,
            ended: false,
        }
    }

    fn end(&mut self, failure: Option<Failure<E>>) {
        self.ended = true;
        self.inner.child_ended(self.id, failure);
    }
}

impl<E> Drop for Guard<E> {
    fn drop(&mut self) {
        if !self.ended {
            self.inner.child_ended(self.id, None);
        }
    }
}

/// The future of a task child.
pub(crate) struct TaskChild<E> {
    // Declared first: dropped before `guard` reports (module doc).
    future: Option<TaskBody<E>>,
    guard: Guard<E>,
}

impl<E> TaskChild<E> {
    pub(crate) fn new(future: TaskBody<E>, guard: Guard<E>) -> TaskChild<E> {
        TaskChild {
            future: Some(future),
            guard,
        }
    }
}

impl<E> Future for TaskChild<E> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let Some(future) = this.future.as_mut() else {
            return Poll::Ready(());
        };
        let out = match catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(Ok(()))) => None,
            Ok(Poll::Ready(Err(e))) => Some(Failure::Err(e)),
            Err(p) => {
                if crate::fiber::is_force_unwinding() {
                    // Polled inside a fiber that is being unwound: not our panic.
                    resume_unwind(p);
                }
                Some(Failure::Panic(p))
            }
        };
        let future = this.future.take();
        let out = match catch_unwind(AssertUnwindSafe(move || drop(future))) {
            Err(p) if out.is_none() => Some(Failure::Panic(p)),
            _ => out,
        };
        this.guard.end(out);
        Poll::Ready(())
    }
}

/// The closure of a fiber child.
pub(crate) struct FiberChild<E> {
    // Declared first: dropped before `guard` reports (module doc).
    body: Option<FiberBody<E>>,
    guard: Guard<E>,
}

impl<E> FiberChild<E> {
    pub(crate) fn new(body: FiberBody<E>, guard: Guard<E>) -> FiberChild<E> {
        FiberChild {
            body: Some(body),
            guard,
        }
    }

    /// Runs on the fiber.
    pub(crate) fn run(mut self) {
        let body = self.body.take().expect("a fiber child runs once");
        let out = match catch_unwind(AssertUnwindSafe(body)) {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(Failure::Err(e)),
            Err(p) => {
                if crate::fiber::is_force_unwinding() {
                    // The fiber's cancellation unwinds its stack: go on unwinding; the
                    // guard reports the child cancelled as `self` drops.
                    resume_unwind(p);
                }
                Some(Failure::Panic(p))
            }
        };
        self.guard.end(out);
    }
}
