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

use std::cell::RefCell;

use super::state::{ChildRef, Failure, Hold, Inner};
use crate::base::Arc;

thread_local! {
    /// The task child being polled or dropped on this thread (its own `Hold`), for an
    /// async nursery that its future drops unfinished (`enclosing`). A counted clone,
    /// not a pointer: a poll whose stack is set aside (`weft::wait` on a worker) may
    /// end after a later one, so the restored value can be stale; stale means only
    /// that the wrong child waits a little longer, never a dangling pointer.
    static CURRENT_TASK: RefCell<Option<Arc<dyn Hold>>> = const { RefCell::new(None) };
}

/// `CURRENT_TASK.try_with`, never inlined (see `scheduler::worker::current_cell`).
#[inline(never)]
fn current_task<R>(
    f: impl FnOnce(&RefCell<Option<Arc<dyn Hold>>>) -> R,
) -> Result<R, std::thread::AccessError> {
    CURRENT_TASK.try_with(f)
}

crate::fiber_local! {
    /// The fiber child running on this fiber, for the same purpose.
    static CURRENT_FIBER: RefCell<Option<Arc<dyn Hold>>> = RefCell::new(None);
}

/// The nursery child whose code runs here: the task child being polled or dropped on
/// this thread, else the fiber child this fiber runs.
pub(crate) fn enclosing() -> Option<Arc<dyn Hold>> {
    if let Some(h) = current_task(|c| c.borrow().clone()).ok().flatten() {
        return Some(h);
    }
    CURRENT_FIBER
        .try_with(|c| c.borrow().clone())
        .ok()
        .flatten()
}

/// Makes a task child [`enclosing`] for its scope.
struct Enter(Option<Arc<dyn Hold>>);

impl Enter {
    fn new(me: &Arc<dyn Hold>) -> Enter {
        // `try_with`: a child dropped while this thread's locals are torn down simply
        // has no enclosing child.
        Enter(current_task(|c| c.replace(Some(me.clone()))).ok().flatten())
    }
}

impl Drop for Enter {
    fn drop(&mut self) {
        let prev = self.0.take();
        let mine = current_task(|c| c.replace(prev)).ok().flatten();
        drop(mine);
    }
}

/// A child's boxed future, its lifetime erased (see `Nursery::spawn`).
pub(crate) type TaskBody<E> = Pin<Box<dyn Future<Output = Result<(), E>> + Send>>;
/// A fiber child's boxed closure, its lifetime erased (see `Nursery::spawn_fiber`).
pub(crate) type FiberBody<E> = Box<dyn FnOnce() -> Result<(), E> + Send>;

/// Reports the child's end to its nursery exactly once: with its outcome, or (dropped
/// without one) as cancelled.
pub(crate) struct Guard<E> {
    me: Arc<ChildRef<E>>,
    ended: bool,
}

impl<E: Send + 'static> Guard<E> {
    pub(crate) fn new(inner: Arc<Inner<E>>, id: u64) -> Guard<E> {
        Guard {
            me: Arc::new(ChildRef { inner, id }),
            ended: false,
        }
    }

    /// The child as an enclosing nursery's child (see `Hold`).
    fn hold(&self) -> Arc<dyn Hold> {
        self.me.clone()
    }
}

impl<E> Guard<E> {
    fn end(&mut self, failure: Option<Failure<E>>) {
        self.ended = true;
        self.me.inner.child_ended(self.me.id, failure);
    }
}

impl<E> Drop for Guard<E> {
    fn drop(&mut self) {
        if !self.ended {
            self.me.inner.child_ended(self.me.id, None);
        }
    }
}

/// The future of a task child.
pub(crate) struct TaskChild<E> {
    // Declared first: dropped before `guard` reports (module doc).
    future: Option<TaskBody<E>>,
    /// `guard`'s `Hold`, for `enclosing` while the future runs or drops.
    me: Arc<dyn Hold>,
    guard: Guard<E>,
}

impl<E: Send + 'static> TaskChild<E> {
    pub(crate) fn new(future: TaskBody<E>, guard: Guard<E>) -> TaskChild<E> {
        TaskChild {
            future: Some(future),
            me: guard.hold(),
            guard,
        }
    }
}

impl<E> Drop for TaskChild<E> {
    fn drop(&mut self) {
        // Cancelled: the future drops as this child (nurseries it drops unfinished hold
        // it alive until their children ended), before `guard` reports.
        if let Some(f) = self.future.take() {
            let _enter = Enter::new(&self.me);
            drop(f);
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
        let _enter = Enter::new(&this.me);
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

impl<E: Send + 'static> FiberChild<E> {
    pub(crate) fn new(body: FiberBody<E>, guard: Guard<E>) -> FiberChild<E> {
        FiberChild {
            body: Some(body),
            guard,
        }
    }

    /// Runs on the fiber.
    pub(crate) fn run(mut self) {
        let body = self.body.take().expect("a fiber child runs once");
        // For `enclosing`, also while the fiber unwinds: its fiber-locals outlive that.
        let me = self.guard.hold();
        CURRENT_FIBER.with(|c| *c.borrow_mut() = Some(me));
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
        CURRENT_FIBER.with(|c| c.borrow_mut().take());
        self.guard.end(out);
    }
}
