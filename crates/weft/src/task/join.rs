//! `JoinHandle`, `AbortHandle` and `JoinError`.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use super::header::{Header, Id};
use super::raw::drop_reference;
use super::state::Abort;

/// An owned permission to await a task's result.
///
/// Awaiting it yields `Ok(output)`, or a [`JoinError`] if the task panicked or was
/// aborted. Dropping it detaches the task: it keeps running, and its output is dropped.
/// A finished task's unread output is dropped by the handle's drop: a panic in that
/// `Drop` reaches the code dropping the handle, unless that code is already unwinding
/// (then it is caught and dropped, where a second panic would abort the process).
///
/// The waker of the last poll that returned `Pending` is woken when the task
/// completes and dropped when the task's memory is freed, both usually on a worker
/// thread, or dropped with the handle if the handle goes first. A panic in that
/// waker's wake or drop is caught and ignored (the panic hook prints it as usual); the
/// worker goes on.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let out = rt.block_on(async {
///     let h = weft::spawn(async { 6 * 7 });
///     h.await.unwrap()
/// });
/// assert_eq!(out, 42);
/// ```
pub struct JoinHandle<T> {
    raw: NonNull<Header>,
    _out: PhantomData<T>,
}

// SAFETY: the handle owns one counted reference to its task, which keeps the header
// alive wherever the handle goes, on any thread; it only moves the `T` out of the task
// (so it is as `Send` as `T`), and its other operations are on the atomic state word.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: `&JoinHandle` only offers `abort` and `is_finished`, which are atomic.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> Unpin for JoinHandle<T> {}

impl<T> JoinHandle<T> {
    /// # Safety
    /// `raw` is a live task whose output type is `T`, and the caller gives this handle
    /// the task's join reference.
    pub(crate) unsafe fn new(raw: NonNull<Header>) -> Self {
        JoinHandle {
            raw,
            _out: PhantomData,
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: the handle owns a reference.
        unsafe { self.raw.as_ref() }
    }

    /// Requests cancellation. The task's future is dropped at its next poll (at once
    /// if it is waiting), unless it is inside [`shield`](crate::task::shield), and
    /// awaiting the handle then gives a cancelled [`JoinError`]. A task that already
    /// finished keeps its result.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// h.abort();
    /// assert!(h.join().unwrap_err().is_cancelled());
    /// ```
    pub fn abort(&self) {
        abort(self.raw);
    }

    /// A handle that can abort the task without being able to await it.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// let a = h.abort_handle();
    /// std::thread::spawn(move || a.abort()).join().unwrap();
    /// assert!(h.join().unwrap_err().is_cancelled());
    /// ```
    pub fn abort_handle(&self) -> AbortHandle {
        self.header().state.ref_inc();
        AbortHandle { raw: self.raw }
    }

    /// Whether the task has finished (completed, panicked or been cancelled).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(async { 1 });
    /// while !h.is_finished() { std::thread::yield_now(); }
    /// assert_eq!(h.join().unwrap(), 1);
    /// ```
    pub fn is_finished(&self) -> bool {
        self.header().state.load().is_complete()
    }

    /// The task's id.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(async {});
    /// println!("spawned task {}", h.id());
    /// ```
    pub fn id(&self) -> Id {
        self.header().id
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = Result<T, JoinError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut out: Poll<Result<T, JoinError>> = Poll::Pending;
        // SAFETY: the handle owns a reference and `out` has the type the task's
        // vtable writes (the handle was created for this output type).
        unsafe {
            (self.header().vtable.try_read_output)(
                self.raw,
                &mut out as *mut Poll<Result<T, JoinError>> as *mut (),
                cx.waker(),
            )
        };
        if out.is_pending() {
            super::diag::note_wait(cx.waker(), super::diag::WaitOn::Join);
        }
        out
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        /// Releases the handle's reference even when the output's drop panics: the
        /// panic reaches the dropper, the cell must still be freed (found in review:
        /// it leaked, with everything it held).
        struct Release(NonNull<Header>);
        impl Drop for Release {
            fn drop(&mut self) {
                // SAFETY: the handle owns one reference, released exactly once, here.
                unsafe { drop_reference(self.0) };
            }
        }
        let _release = Release(self.raw);
        let raw = self.raw;
        if self.header().state.unset_join_interest().is_ok() {
            // SAFETY: the task is not complete and the handle cleared `JOIN_WAKER`:
            // the waker slot is the handle's.
            unsafe { (self.header().vtable.drop_join_waker)(raw) };
            return;
        }
        // If the output's drop panics, the stage has been overwritten all the same (an
        // assignment's unwind path stores the new value), so freeing the cell later
        // drops nothing twice.
        // SAFETY: the task is complete and still had join interest: the unread output
        // is ours to drop.
        let drop_output = || unsafe { (self.header().vtable.drop_output)(raw) };
        if std::thread::panicking() {
            // A second panic during an unwind would abort the process (found in
            // review): the output's panic is dropped, as tokio always does.
            super::waker::ignore_panic(drop_output);
        } else {
            drop_output();
        }
    }
}

impl<T> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("id", &self.id())
            .field("state", &self.header().state.load())
            .finish()
    }
}

fn abort(raw: NonNull<Header>) {
    // SAFETY: callers own a reference.
    let header = unsafe { raw.as_ref() };
    if header.state.transition_to_cancelled() == Abort::Schedule {
        // SAFETY: the transition created the queue reference that `schedule` consumes.
        unsafe { (header.vtable.schedule)(raw) };
    }
}

/// Aborts a task without the right to await it. Cheap to clone; dropping it does
/// nothing to the task.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = rt.spawn(std::future::pending::<()>());
/// let a = h.abort_handle();
/// assert!(!a.is_finished());
/// a.abort();
/// assert!(h.join().unwrap_err().is_cancelled());
/// ```
pub struct AbortHandle {
    raw: NonNull<Header>,
}

// SAFETY: the handle owns one counted reference to its task (the header stays alive on
// any thread), and every operation on it is on the atomic state word.
unsafe impl Send for AbortHandle {}
// SAFETY: as above.
unsafe impl Sync for AbortHandle {}

impl AbortHandle {
    /// Requests cancellation, as [`JoinHandle::abort`].
    pub fn abort(&self) {
        abort(self.raw);
    }

    /// Whether the task has finished.
    pub fn is_finished(&self) -> bool {
        // SAFETY: we own a reference.
        unsafe { self.raw.as_ref() }.state.load().is_complete()
    }

    /// The task's id.
    pub fn id(&self) -> Id {
        // SAFETY: we own a reference.
        unsafe { self.raw.as_ref() }.id
    }
}

impl Clone for AbortHandle {
    fn clone(&self) -> Self {
        // SAFETY: we own a reference, so the header is alive.
        unsafe { self.raw.as_ref() }.state.ref_inc();
        AbortHandle { raw: self.raw }
    }
}

impl Drop for AbortHandle {
    fn drop(&mut self) {
        // SAFETY: we own one reference.
        unsafe { drop_reference(self.raw) };
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("id", &self.id())
            .finish()
    }
}

/// Why a task produced no output: it panicked or it was cancelled.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let err = rt.spawn(async { panic!("boom") }).join().unwrap_err();
/// assert!(err.is_panic());
/// assert_eq!(*err.into_panic().downcast::<&str>().unwrap(), "boom");
/// ```
///
/// It is `Send + Sync + 'static`, so `?` turns it into a boxed error:
///
/// ```
/// fn run() -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
///     let rt = weft::Runtime::new()?;
///     Ok(rt.spawn(async { 7 }).join()?)
/// }
/// assert_eq!(run().unwrap(), 7);
/// ```
pub struct JoinError {
    id: Id,
    repr: Repr,
}

enum Repr {
    Cancelled,
    /// Refused by a runtime that was shutting down: the task never ran.
    Shutdown,
    Panic(Payload),
}

/// A panic payload that threads may share: through `&` only its type is read, and
/// it is downcast only to `Sync` types (a message), so a `&JoinError` on two threads
/// never touches the payload's data at once. That makes `JoinError` `Sync`, as
/// tokio's is (found in review: it was not, so it could not become a
/// `Box<dyn Error + Send + Sync>`, what `?` into `anyhow` needs).
struct Payload(Box<dyn Any + Send + 'static>);

// SAFETY: shared access (`downcast_ref_sync`) reads the box's type id, which is no
// data of the value, and hands out `&T` only for `T: Sync`; every other use of the box
// takes the payload by value.
unsafe impl Sync for Payload {}

impl Payload {
    fn downcast_ref_sync<T: Any + Sync>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
}

impl JoinError {
    pub(crate) fn cancelled(id: Id) -> Self {
        JoinError {
            id,
            repr: Repr::Cancelled,
        }
    }

    /// A task that a shutting-down runtime refused to start.
    pub(crate) fn shutdown(id: Id) -> Self {
        JoinError {
            id,
            repr: Repr::Shutdown,
        }
    }

    pub(crate) fn panic(id: Id, payload: Box<dyn Any + Send + 'static>) -> Self {
        JoinError {
            id,
            repr: Repr::Panic(Payload(payload)),
        }
    }

    /// The task was aborted (or the runtime shut down) before it finished; also true
    /// for a task that a runtime shutting down (see
    /// [`Runtime::shutdown_graceful`](crate::Runtime::shutdown_graceful)) refused to
    /// start, whose message says so.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// h.abort();
    /// assert!(h.join().unwrap_err().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, Repr::Cancelled | Repr::Shutdown)
    }

    /// The task panicked.
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, Repr::Panic(_))
    }

    /// The panic payload. Panics if the task was cancelled instead; see
    /// [`try_into_panic`](Self::try_into_panic).
    pub fn into_panic(self) -> Box<dyn Any + Send + 'static> {
        self.try_into_panic()
            .expect("weft: JoinError::into_panic called on a cancelled task's error")
    }

    /// The panic payload, or the error back if the task was cancelled. Pass it to
    /// `std::panic::resume_unwind` to continue the panic in the joining code.
    pub fn try_into_panic(self) -> Result<Box<dyn Any + Send + 'static>, JoinError> {
        match self.repr {
            Repr::Panic(p) => Ok(p.0),
            Repr::Cancelled | Repr::Shutdown => Err(self),
        }
    }

    /// The id of the task that failed.
    pub fn id(&self) -> Id {
        self.id
    }

    fn panic_message(&self) -> Option<&str> {
        match &self.repr {
            Repr::Panic(p) => p
                .downcast_ref_sync::<&'static str>()
                .copied()
                .or_else(|| p.downcast_ref_sync::<String>().map(String::as_str)),
            Repr::Cancelled | Repr::Shutdown => None,
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.repr, self.panic_message()) {
            (Repr::Cancelled, _) => write!(f, "task {} was cancelled", self.id),
            (Repr::Shutdown, _) => write!(
                f,
                "task {} was not started: the runtime is shutting down",
                self.id
            ),
            (Repr::Panic(_), Some(msg)) => {
                write!(f, "task {} panicked with message {msg:?}", self.id)
            }
            (Repr::Panic(_), None) => write!(f, "task {} panicked", self.id),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.repr, self.panic_message()) {
            (Repr::Cancelled, _) => write!(f, "JoinError::Cancelled({:?})", self.id),
            (Repr::Shutdown, _) => write!(f, "JoinError::Shutdown({:?})", self.id),
            (Repr::Panic(_), Some(msg)) => {
                write!(f, "JoinError::Panic({:?}, {msg:?}, ..)", self.id)
            }
            (Repr::Panic(_), None) => write!(f, "JoinError::Panic({:?}, ..)", self.id),
        }
    }
}

impl std::error::Error for JoinError {}

impl From<JoinError> for std::io::Error {
    fn from(e: JoinError) -> Self {
        std::io::Error::other(e.to_string())
    }
}
