//! Tasks: the packed state word (spec 000), the type-erased header and vtable, wakers,
//! join and abort handles, cancellation and shields.
//!
//! The same machinery carries fibers: a fiber is a task whose future resumes a stack,
//! so the state word's invariants (no lost wakeup, no double schedule, one owner) are
//! checked once for every shape of work.
//!
//! # Limits
//!
//! A task's references (its `JoinHandle`, each `AbortHandle`, each clone of its
//! `Waker`, each active [`shield`], its queue entry) are counted in 24 bits of the
//! state word. A program that holds 2^24 (16,777,216) references to one task at once,
//! say by leaking that many clones of its waker, is stopped: weft prints
//! `weft: task reference count overflow` and aborts the process rather than let the
//! count wrap into the other fields of the word.
//!
//! # What the raw pointers rely on
//!
//! Every `unsafe impl Send`/`Sync` and every raw pointer kept past the call that made
//! it says, in its `SAFETY:` comment, who keeps the pointee alive and on which threads
//! it may be touched; a test that tries to break the claim from safe code sits with
//! the tests of that type.

pub(crate) mod alloc;
pub(crate) mod current;
pub(crate) mod diag;
pub(crate) mod header;
mod join;
pub(crate) mod owned;
pub(crate) mod raw;
mod shield;
pub(crate) mod state;
pub(crate) mod waker;
mod yield_now;

pub use header::Id;
pub use join::{AbortHandle, JoinError, JoinHandle};
pub(crate) use shield::TaskRef;
pub use shield::{shield, Shield};
pub use yield_now::{yield_now, YieldNow};

use std::future::Future;

use raw::{Cell, Notified, Schedule};

/// Whether the task calling this has been asked to stop by `abort()`.
///
/// Inside a [`shield`] the task keeps running after an abort; this lets the shielded
/// code notice the request. Outside any weft task it returns `false`.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let (started_tx, started_rx) = std::sync::mpsc::channel();
/// let h = rt.spawn(weft::task::shield(async move {
///     started_tx.send(()).unwrap();
///     while !weft::task::is_cancelled() {
///         weft::task::yield_now().await;
///     }
///     "noticed"
/// }));
/// started_rx.recv().unwrap(); // the shield is active now
/// h.abort();
/// // The shielded future ran to completion, so the task finished with its output.
/// assert_eq!(h.join().unwrap(), "noticed");
/// ```
pub fn is_cancelled() -> bool {
    current::with(|h| h.is_some_and(|h| h.state.load().is_cancelled()))
}

/// Allocates a task for `future` run by `scheduler`. Returns the first queue entry and
/// the join handle; the caller links the task into its owned list.
pub(crate) fn new_task<F, S>(future: F, scheduler: S) -> (Notified, JoinHandle<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    new_task_of_kind(future, scheduler, false)
}

/// [`new_task`] for a task that is an async task (`fiber` false) or a fiber.
pub(crate) fn new_task_of_kind<F, S>(
    future: F,
    scheduler: S,
    fiber: bool,
) -> (Notified, JoinHandle<F::Output>)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
    S: Schedule,
{
    let ptr = Cell::allocate(future, scheduler, Id::next(), fiber);
    // SAFETY: `allocate` returns a live task with three references: the owned-list one
    // stays counted in the state word (the caller links it), one goes to the `Notified`,
    // one to the `JoinHandle`, whose output type is `F::Output`.
    unsafe { (Notified::from_raw(ptr), JoinHandle::new(ptr)) }
}
