//! The future of the async nursery (`weft::nursery`, `NurseryOptions::run`).

use std::any::Any;
use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use super::state::{Failure, Inner};
use super::Watcher;
use crate::base::Arc;

/// How a nursery ended, once every child has: a panic is resumed before this is made.
pub(crate) enum Outcome<T, E> {
    Done(Result<T, E>),
    Elapsed,
}

/// Turns the owner's view into the outcome: the body's panic first, then a child's
/// panic, then the deadline, then a child's error, then the body's own result.
pub(crate) fn conclude<T, E>(
    inner: &Inner<E>,
    body: Option<Result<T, E>>,
    body_panic: Option<Box<dyn Any + Send>>,
) -> Outcome<T, E> {
    let fin = inner.finish();
    if let Some(p) = body_panic {
        resume_unwind(p);
    }
    match fin.failure {
        Some(Failure::Panic(p)) => resume_unwind(p),
        _ if fin.elapsed => Outcome::Elapsed,
        Some(Failure::Err(e)) => Outcome::Done(Err(e)),
        None => Outcome::Done(body.expect("the body ended with a value unless it was stopped")),
    }
}

/// The async nursery: polls the body, then waits for the children.
pub(crate) struct Run<B: Future<Output = Result<T, E>>, T, E> {
    inner: Arc<Inner<E>>,
    body: Option<Pin<Box<B>>>,
    result: Option<Result<T, E>>,
    body_panic: Option<Box<dyn Any + Send>>,
    /// The deadline's watcher task (cancelled when the nursery ends).
    watcher: Option<Watcher>,
    done: bool,
}

impl<B: Future<Output = Result<T, E>>, T, E> Run<B, T, E> {
    pub(crate) fn new(inner: Arc<Inner<E>>, body: B, watcher: Option<Watcher>) -> Self {
        Run {
            inner,
            body: Some(Box::pin(body)),
            result: None,
            body_panic: None,
            watcher,
            done: false,
        }
    }

    /// Drops the body where it stands (its panic in `Drop` is kept like its poll's).
    fn drop_body(&mut self) {
        let body = self.body.take();
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(body))) {
            self.keep_panic(p);
        }
    }

    fn keep_panic(&mut self, p: Box<dyn Any + Send>) {
        if crate::fiber::is_force_unwinding() {
            // Polled inside a fiber that is being unwound: not the body's panic.
            resume_unwind(p);
        }
        if self.body_panic.is_none() {
            self.body_panic = Some(p);
        }
        self.inner.cancel();
    }
}

// Nothing in a `Run` is pinned structurally: the body is boxed (pinned in its box), and
// the result and panic are plain values that are only moved.
impl<B: Future<Output = Result<T, E>>, T, E> Unpin for Run<B, T, E> {}

impl<B: Future<Output = Result<T, E>>, T, E> Future for Run<B, T, E> {
    type Output = Outcome<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome<T, E>> {
        // `Run` is `Unpin`: the body is boxed.
        let this = self.get_mut();
        assert!(!this.done, "weft: a nursery polled after it finished");
        if this.body.is_some() {
            // Registered before looking: a failure or the deadline after the look wakes us.
            this.inner.register(cx);
            if this.inner.is_stopped() {
                // The first failure or the deadline cancels the body with the children.
                this.drop_body();
            }
        }
        if let Some(body) = this.body.as_mut() {
            match catch_unwind(AssertUnwindSafe(|| body.as_mut().poll(cx))) {
                Ok(Poll::Pending) => return Poll::Pending,
                Ok(Poll::Ready(r)) => {
                    this.inner.body_returned(r.is_ok());
                    if r.is_err() {
                        // The body's own error ends the nursery: its children are
                        // cancelled, and (unless a child failed first) it is the result.
                        this.inner.cancel();
                    }
                    this.result = Some(r);
                    // Whatever the body still holds (its `Nursery`) goes now.
                    this.drop_body();
                }
                Err(p) => {
                    this.body = None;
                    this.keep_panic(p);
                }
            }
        }
        if this.inner.poll_done(cx).is_pending() {
            return Poll::Pending;
        }
        this.done = true;
        this.watcher = None;
        let result = this.result.take();
        let panic = this.body_panic.take();
        Poll::Ready(conclude(&this.inner, result, panic))
    }
}

impl<B: Future<Output = Result<T, E>>, T, E> Drop for Run<B, T, E> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Dropped before it finished: the children are cancelled (they own all they
        // use: async children are `'static`), and so is the deadline's watcher. If
        // this runs as a child of another nursery, that child stays alive until these
        // children ended: structure holds across a dropped async nursery.
        self.inner.abandon(super::child::enclosing());
        self.watcher = None;
    }
}
