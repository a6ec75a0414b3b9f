//! `std::task::Waker`s over a task header: clone takes a reference, drop releases one,
//! wake schedules the task through the state word's notified protocol.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::task::{RawWaker, RawWakerVTable, Waker};

use super::header::Header;
use super::raw::drop_reference;

static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_waker);

/// A waker for `ptr` that does not own a reference; the caller must keep it from being
/// dropped (wrap it in `ManuallyDrop`).
///
/// # Safety
/// The task must stay alive for as long as the waker (or a borrow of it) is used.
#[inline]
pub(crate) unsafe fn borrowed(ptr: NonNull<Header>) -> Waker {
    // SAFETY: the vtable functions uphold the `RawWaker` contract for header pointers.
    unsafe { Waker::from_raw(RawWaker::new(ptr.as_ptr() as *const (), &VTABLE)) }
}

/// The task behind `waker`, if it is a task's waker (for diagnostics records).
#[inline]
pub(crate) fn header_of(waker: &Waker) -> Option<&Header> {
    std::ptr::eq(waker.vtable(), &VTABLE).then(|| header(waker.data()))
}

fn header<'a>(data: *const ()) -> &'a Header {
    // SAFETY: every waker built here points at a live header (it owns a reference or
    // is borrowed for less than the life of one).
    unsafe { &*(data as *const Header) }
}

fn ptr(data: *const ()) -> NonNull<Header> {
    // SAFETY: wakers are only built from non-null headers.
    unsafe { NonNull::new_unchecked(data as *mut Header) }
}

fn clone(data: *const ()) -> RawWaker {
    header(data).state.ref_inc();
    RawWaker::new(data, &VTABLE)
}

fn wake_by_ref(data: *const ()) {
    let h = header(data);
    if h.state.transition_to_scheduled() {
        super::diag::stamp(h);
        // SAFETY: the transition created the queue reference that `schedule` consumes.
        unsafe { (h.vtable.schedule)(ptr(data)) }
    }
}

fn wake(data: *const ()) {
    wake_by_ref(data);
    drop_waker(data);
}

fn drop_waker(data: *const ()) {
    // SAFETY: an owned waker holds one reference.
    unsafe { drop_reference(ptr(data)) }
}

/// Runs `f`, a call into a user's waker (its wake or its drop) made where a panic has
/// nobody to go to: a worker completing or freeing a task, a driver waking a batch.
/// The panic is caught and ignored (the panic hook has already printed it), so that
/// the caller releases the task's references and the worker goes on. Returns whether
/// `f` panicked.
///
/// The caught payload is dropped under a guard too: safe code can make a payload
/// whose own `Drop` panics, and that second panic left the drivers' batch (the rest
/// never woken) and the runtime's drop (found in review, `tests/review_s33c.rs`). Such
/// a payload is leaked instead.
#[inline]
pub(crate) fn ignore_panic(f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) => {
            drop_payload(payload);
            true
        }
    }
}

/// Drops a caught panic's payload where a second panic has nobody to go to (a worker,
/// a scope's bookkeeping): a payload whose `Drop` panics is caught, and that panic's
/// own payload leaked. Safe code can make such payloads; dropped plainly, one killed
/// a worker thread in the middle of completing its task (found in review,
/// `tests/review_s38_runtime.rs`).
#[cold]
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        std::mem::forget(again);
    }
}

/// Drops every item on its own: a `Drop` that panics does not stop the rest, and the
/// first panic goes on once all are dropped (later payloads go to [`drop_payload`]).
/// Dropped together (a `Vec`, a boxed slice), a second panic came during the first
/// one's unwind and aborted the process (found in review: the ordered channel's
/// receiver, broadcast's receiver and ring).
pub(crate) fn drop_each<T>(items: impl IntoIterator<Item = T>) {
    let mut first = None;
    for item in items {
        if let Err(p) = catch_unwind(AssertUnwindSafe(move || drop(item))) {
            match first {
                None => first = Some(p),
                Some(_) => drop_payload(p),
            }
        }
    }
    if let Some(p) = first {
        std::panic::resume_unwind(p);
    }
}

/// A waker about to be stored by code that holds a weft lock. A waker's `clone` is its
/// owner's code, which may use the very object whose lock is held (a waker that sends
/// on the channel it waits on, that arms a timer, ...): weft runs no such code under its
/// locks. So a waker that is not a weft task's is cloned here, before the lock, and
/// the clone is moved in under it; a task's waker (whose clone is a reference count) is
/// cloned under the lock only if it is stored. An early clone that is not used is
/// dropped with the `Prepared`: declare it before the lock's guard, so that it goes
/// after the guard.
pub(crate) struct Prepared<'a> {
    waker: &'a Waker,
    early: Option<Waker>,
}

impl<'a> Prepared<'a> {
    #[inline]
    pub(crate) fn new(waker: &'a Waker) -> Prepared<'a> {
        let early = header_of(waker).is_none().then(|| waker.clone());
        Prepared { waker, early }
    }

    /// The waker itself, to compare (`will_wake` runs no user code).
    #[inline]
    pub(crate) fn get(&self) -> &Waker {
        self.waker
    }

    /// An owned waker to store: the early clone, or a clone of a task's waker made now.
    /// A second call for a waker that is not a task's clones it again (under the
    /// caller's lock): call it once per `Prepared`.
    #[inline]
    pub(crate) fn take(&mut self) -> Waker {
        match self.early.take() {
            Some(w) => w,
            None => self.waker.clone(),
        }
    }

    /// Stores the waker in `slot` unless the one there already wakes the same task (a
    /// future is polled far more often than its task moves); returns the waker it
    /// replaced, for the caller to drop after its lock.
    #[inline]
    pub(crate) fn store(&mut self, slot: &mut Option<Waker>) -> Option<Waker> {
        match slot {
            Some(w) if w.will_wake(self.waker) => None,
            _ => slot.replace(self.take()),
        }
    }
}
