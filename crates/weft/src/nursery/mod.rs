//! Nurseries: structured concurrency (spec 003). A nursery owns the tasks and fibers
//! spawned into it; it returns only once every one of them has ended, and the first
//! one that fails cancels the others.
//!
//! Two forms:
//!
//! * [`nursery`] (async): the body gets the [`Nursery`] by value and its children
//!   are `'static`. A scoped async nursery, whose children borrow from the awaiting
//!   frame, cannot be sound: the future that owns the frame can be leaked
//!   (`mem::forget`) or dropped at any await point, and then nothing waits for the
//!   children while the memory they borrow is reused. Dropping the nursery's future
//!   cancels its children.
//! * [`nursery_blocking`]: from fibers, workers and plain threads, like
//!   [`scope`](crate::scope); its children may borrow from the caller's frame, since
//!   the call itself waits (it is [`wait`](crate::wait)) until every child has ended,
//!   also when the body or a child panics and when the owner is cancelled.
//!
//! Cancellation: [`Nursery::cancel`], the first failure (an `Err` or a panic of a
//! child) and a deadline ([`Nursery::with_timeout`]) cancel every child alive, and
//! children spawned afterwards are cancelled at once (never started). A cancelled task
//! is dropped at its next poll; a cancelled fiber unwinds from the wait it is parked
//! in (or at its next one); a [`shield`](crate::task::shield) defers both. Nested
//! nurseries cancel inward only: a cancelled child drops (or unwinds) the nurseries it
//! owns, which cancel their own children; a failure inside a nested nursery is that
//! nursery's result, which its owner may handle or return.
//!
//! Rendezvous channels (spec 003): a child checks cancellation before it commits to a
//! rendezvous, never inside one. Once a receiver has taken a waiting send's value the
//! send returns `Ok` even if its task is cancelled meanwhile (the cancellation takes
//! effect at its next wait), and a waiting receive that a sender handed a value returns
//! it; an operation still waiting for a partner stays cancellable (a send's value is
//! then not delivered). The values receivers got are exactly the sends that returned
//! `Ok`.

mod child;
mod run;
mod state;

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::task::Poll;
use std::time::{Duration, Instant};

use child::{FiberBody, FiberChild, Guard, TaskBody, TaskChild};
use run::{conclude, Outcome, Run};
use state::Inner;

use crate::base::Arc;
use crate::task::{AbortHandle, TaskRef};
use crate::time::Elapsed;
use crate::Handle;

/// A nursery: spawns children and cancels them; see [`nursery`] and
/// [`nursery_blocking`].
///
/// `'scope` is what children may borrow: `'static` in the async form, the caller's
/// frame in the blocking one.
///
/// ```
/// # let rt = weft::Runtime::new().unwrap();
/// let r = rt.block_on(weft::nursery(|n: weft::Nursery<'static, String>| async move {
///     n.spawn(async { Ok(()) });
///     n.spawn_fiber(|| Ok(()));
///     Ok(1)
/// }));
/// assert_eq!(r, Ok(1));
/// ```
pub struct Nursery<'scope, E> {
    inner: Arc<Inner<E>>,
    /// Invariant in `'scope`, as `weft::Scope` is.
    _scope: PhantomData<&'scope mut &'scope ()>,
}

impl<E> fmt::Debug for Nursery<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nursery")
            .field("cancelled", &self.inner.is_cancelled())
            .finish_non_exhaustive()
    }
}

/// The runtime children of a nursery started here run on: the current one, else the
/// most recently started one still alive (the rule of `weft::fiber::spawn`).
fn runtime() -> Option<Handle> {
    Handle::try_current().ok().or_else(crate::runtime::latest)
}

fn no_runtime() -> ! {
    panic!("weft: a nursery spawned a child with no weft runtime running")
}

impl<'scope, E: Send + 'static> Nursery<'scope, E> {
    fn new(inner: Arc<Inner<E>>) -> Self {
        Nursery {
            inner,
            _scope: PhantomData,
        }
    }

    /// Spawns an async task into the nursery. Its `Err` (or panic) is a failure: it
    /// cancels the other children, and the nursery returns it (resumes it) once every
    /// child has ended. Into a cancelled nursery the future is dropped at once.
    ///
    /// ```
    /// # let rt = weft::Runtime::new().unwrap();
    /// let r = rt.block_on(weft::nursery(|n| async move {
    ///     n.spawn(async { Err("boom") });
    ///     n.spawn(async {
    ///         weft::time::sleep(std::time::Duration::from_secs(60)).await;
    ///         Ok(()) // never: the failure above cancels this task
    ///     });
    ///     Ok(())
    /// }));
    /// assert_eq!(r, Err("boom"));
    /// ```
    pub fn spawn<F>(&self, future: F)
    where
        F: Future<Output = Result<(), E>> + Send + 'scope,
    {
        let Some(id) = self.inner.begin_child() else {
            drop(future);
            return;
        };
        let guard = Guard::new(self.inner.clone(), id);
        let Some(handle) = self.inner.handle.as_ref() else {
            drop(guard);
            no_runtime();
        };
        let future: std::pin::Pin<Box<dyn Future<Output = Result<(), E>> + Send + 'scope>> =
            Box::pin(future);
        // Only the lifetime changes (same type, same layout). The future may borrow for
        // `'scope`; the task holding it could outlive that only if the nursery's owner
        // returned while it was alive, and the owner never does: `nursery` has
        // `'scope = 'static`, and `nursery_blocking` returns (or unwinds, or leaks a
        // fiber's stack, see `StackPin`) only once every child has reported its end,
        // which `TaskChild` does after dropping this future.
        // SAFETY: the owner outlives this future's use (above).
        let future: TaskBody<E> = unsafe { std::mem::transmute(future) };
        let h = handle.spawn(TaskChild::new(future, guard));
        self.inner.set_abort(id, h.abort_handle());
    }

    /// Spawns a fiber into the nursery: `f` runs in blocking style on a stack of its
    /// own. Its `Err` (or panic) is a failure, as for [`spawn`](Self::spawn); when the
    /// nursery is cancelled, the fiber unwinds from the wait it is parked in (a
    /// destructor that panics during that unwind aborts the process, as in any unwind:
    /// see [`fiber`](crate::fiber#cancellation)). Into a cancelled nursery `f` is
    /// dropped at once, never run.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap(); // children run on it
    /// let mut counts = [0u32; 4];
    /// let r = weft::nursery_blocking(|n| {
    ///     for c in counts.iter_mut() {
    ///         n.spawn_fiber(move || {
    ///             weft::fiber::sleep(std::time::Duration::from_millis(1));
    ///             *c += 1;
    ///             Ok(())
    ///         });
    ///     }
    ///     Ok::<_, ()>(())
    /// });
    /// assert_eq!(r, Ok(()));
    /// assert_eq!(counts, [1; 4]);
    /// ```
    pub fn spawn_fiber<F>(&self, f: F)
    where
        F: FnOnce() -> Result<(), E> + Send + 'scope,
    {
        let Some(id) = self.inner.begin_child() else {
            drop(f);
            return;
        };
        let guard = Guard::new(self.inner.clone(), id);
        let Some(handle) = self.inner.handle.as_ref() else {
            drop(guard);
            no_runtime();
        };
        let f: Box<dyn FnOnce() -> Result<(), E> + Send + 'scope> = Box::new(f);
        // SAFETY: as in `spawn`: `FiberChild` reports the child's end after `f` ran
        // (or was dropped), and the owner waits for that report.
        let f: FiberBody<E> = unsafe { std::mem::transmute(f) };
        let child = FiberChild::new(f, guard);
        let h = {
            // Off a runtime, the nursery's runtime takes the fiber.
            let _enter = crate::runtime::enter(handle);
            crate::fiber::try_spawn(move || child.run())
        };
        match h {
            Ok(h) => self.inner.set_abort(id, h.abort_handle()),
            // The closure (and its guard) is gone: the child has reported its end. A
            // runtime shutting down cancels it, as it does a task; anything else is
            // `fiber::spawn`'s panic.
            Err(e) if e.kind() == crate::fiber::SpawnErrorKind::Shutdown => {}
            Err(e) => panic!("{e}"),
        }
    }

    /// Cancels every child alive, and those spawned from now on. The nursery then
    /// returns the body's value once every child has ended: cancelled children are
    /// not failures. The body itself goes on.
    ///
    /// ```
    /// # let rt = weft::Runtime::new().unwrap();
    /// let r = rt.block_on(weft::nursery(|n| async move {
    ///     n.spawn(std::future::pending::<Result<(), ()>>());
    ///     n.cancel();
    ///     n.spawn(async { unreachable!() }); // cancelled at once
    ///     Ok(7)
    /// }));
    /// assert_eq!(r, Ok(7));
    /// ```
    pub fn cancel(&self) {
        self.inner.cancel();
    }
}

impl Nursery<'static, ()> {
    /// Options for a nursery whose children are cancelled at `deadline`; run it with
    /// [`NurseryOptions::run`] or [`NurseryOptions::run_blocking`].
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// # let rt = weft::Runtime::new().unwrap();
    /// let opts = weft::Nursery::with_deadline(Instant::now() + Duration::from_millis(20));
    /// let r = opts.run_blocking(|n| {
    ///     n.spawn_fiber(|| {
    ///         weft::fiber::sleep(Duration::from_secs(60));
    ///         Ok(())
    ///     });
    ///     Ok::<_, ()>(())
    /// });
    /// assert!(r.is_err()); // the deadline cancelled the fiber
    /// ```
    pub fn with_deadline(deadline: Instant) -> NurseryOptions {
        NurseryOptions { deadline }
    }

    /// Options for a nursery whose children are cancelled once `timeout` has passed
    /// (from this call).
    ///
    /// ```
    /// use std::time::Duration;
    /// # let rt = weft::Runtime::new().unwrap();
    /// let opts = weft::Nursery::with_timeout(Duration::from_millis(50));
    /// let r = opts.run_blocking(|n| {
    ///     n.spawn_fiber(|| Ok(()));
    ///     Ok::<_, ()>(3)
    /// });
    /// assert_eq!(r, Ok(Ok(3)));
    /// ```
    pub fn with_timeout(timeout: Duration) -> NurseryOptions {
        // A timeout too long for `Instant` (`Duration::MAX`: "never") is the far
        // future, as for `weft::time::sleep`.
        NurseryOptions {
            deadline: Instant::now()
                .checked_add(timeout)
                .unwrap_or_else(crate::time::far_future),
        }
    }
}

/// A nursery with a deadline, from [`Nursery::with_deadline`] or
/// [`Nursery::with_timeout`]. At the deadline the children are cancelled (and the async
/// body is dropped); the nursery then gives `Err(Elapsed)`, unless it failed or
/// finished first. Failed means a child's `Err` or panic, or the body's own `Err`
/// (children still winding down from it do not turn it into `Elapsed`). Finished means
/// the body returned and every child ended: an owner that looks only after the
/// deadline (polled late, or woken by its last child as the deadline fires) still gets
/// the result. Either way the nursery is closed at the deadline: a child spawned after
/// it (through a `Nursery` that escaped the async body) is cancelled at once.
///
/// ```
/// # let rt = weft::Runtime::new().unwrap();
/// let opts = weft::Nursery::with_timeout(std::time::Duration::from_millis(20));
/// let r = rt.block_on(opts.run(|n| async move {
///     n.spawn(std::future::pending::<Result<(), ()>>());
///     Ok(())
/// }));
/// assert!(r.is_err());
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NurseryOptions {
    deadline: Instant,
}

impl NurseryOptions {
    /// The async nursery ([`nursery`]) with this deadline: `Err(Elapsed)` if the
    /// deadline cancelled it, else what the nursery returns.
    ///
    /// ```
    /// # let rt = weft::Runtime::new().unwrap();
    /// let opts = weft::Nursery::with_timeout(std::time::Duration::from_secs(60));
    /// let r = rt.block_on(opts.run(|n| async move {
    ///     n.spawn(async { Ok(()) });
    ///     Ok::<_, ()>("in time")
    /// }));
    /// assert_eq!(r, Ok(Ok("in time")));
    /// ```
    pub async fn run<F, B, T, E>(self, body: F) -> Result<Result<T, E>, Elapsed>
    where
        F: FnOnce(Nursery<'static, E>) -> B,
        B: Future<Output = Result<T, E>>,
        E: Send + 'static,
    {
        // Started at the first poll: the runtime is the one polling it.
        let inner = Arc::new(Inner::new(runtime()));
        let watcher = watch(&inner, self.deadline);
        let body = body(Nursery::new(inner.clone()));
        match Run::new(inner, body, Some(watcher)).await {
            Outcome::Done(r) => Ok(r),
            Outcome::Elapsed => Err(Elapsed::new()),
        }
    }

    /// The blocking nursery ([`nursery_blocking`]) with this deadline: `Err(Elapsed)`
    /// if the deadline cancelled it, else what the nursery returns. The body itself
    /// runs on the caller's stack and is not interrupted; children it spawns after the
    /// deadline are cancelled at once, and a value it returns after the deadline is
    /// dropped (the deadline came first: `Err(Elapsed)`, as for the async form, whose
    /// body is dropped at the deadline).
    ///
    /// ```
    /// # let rt = weft::Runtime::new().unwrap();
    /// let opts = weft::Nursery::with_timeout(std::time::Duration::from_secs(60));
    /// let r = opts.run_blocking(|n| {
    ///     n.spawn(async { Ok(()) });
    ///     Ok::<_, ()>(5)
    /// });
    /// assert_eq!(r, Ok(Ok(5)));
    /// ```
    pub fn run_blocking<'scope, F, T, E>(self, body: F) -> Result<Result<T, E>, Elapsed>
    where
        F: FnOnce(&Nursery<'scope, E>) -> Result<T, E>,
        E: Send + 'static,
    {
        let inner = Arc::new(Inner::new(runtime()));
        // Ended when this frame is left, by a return or by unwinding: a body that
        // panicked, an owner fiber cancelled at a wait (found in review: the watcher
        // task stayed parked on its timer until the deadline).
        let watcher = watch(&inner, self.deadline);
        let out = run_blocking(inner, body);
        drop(watcher);
        match out {
            Outcome::Done(r) => Ok(r),
            Outcome::Elapsed => Err(Elapsed::new()),
        }
    }
}

/// The task that cancels a nursery at its deadline; dropping this cancels the task.
pub(crate) struct Watcher(AbortHandle);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the task that cancels the nursery at `deadline`.
fn watch<E: Send + 'static>(inner: &Arc<Inner<E>>, deadline: Instant) -> Watcher {
    let Some(handle) = inner.handle.as_ref() else {
        panic!("weft: a nursery with a deadline needs a weft runtime");
    };
    inner.set_deadline(deadline);
    // Weak: the watcher must not keep a finished nursery alive until the deadline.
    let weak = Arc::downgrade(inner);
    let task = handle.spawn(async move {
        crate::time::sleep_until(deadline).await;
        if let Some(inner) = weak.upgrade() {
            inner.expire();
        }
    });
    Watcher(task.abort_handle())
}

/// Runs an async nursery: `body` gets the [`Nursery`] and spawns children into it;
/// the future returns once the body and every child have ended.
///
/// * The result is the body's, unless a child failed first: the first `Err` (or
///   panic) of a child cancels the other children and drops the body, and the
///   nursery returns that error (resumes that panic) once every child has ended.
/// * [`Nursery::cancel`] cancels the children only; the body goes on, and its value is
///   the result.
/// * Dropping the future cancels the children.
///
/// The children are `'static`: a scoped async nursery cannot be sound, since its
/// future (the frame its children would borrow) can be leaked or dropped at any await.
/// Use [`nursery_blocking`] to borrow. Children run on the current runtime (or, polled
/// off any, on the most recently started one still alive).
///
/// ```
/// # let rt = weft::Runtime::new().unwrap();
/// let total = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
/// let t = total.clone();
/// let r = rt.block_on(weft::nursery(move |n| async move {
///     for i in 1..=4 {
///         let t = t.clone();
///         n.spawn(async move {
///             t.fetch_add(i, std::sync::atomic::Ordering::SeqCst);
///             Ok(())
///         });
///     }
///     Ok::<_, std::io::Error>("done")
/// }));
/// assert_eq!(r.unwrap(), "done");
/// assert_eq!(total.load(std::sync::atomic::Ordering::SeqCst), 10);
/// ```
pub async fn nursery<F, B, T, E>(body: F) -> Result<T, E>
where
    F: FnOnce(Nursery<'static, E>) -> B,
    B: Future<Output = Result<T, E>>,
    E: Send + 'static,
{
    // Started at the first poll: the runtime is the one polling it.
    let inner = Arc::new(Inner::new(runtime()));
    let body = body(Nursery::new(inner.clone()));
    match Run::new(inner, body, None).await {
        Outcome::Done(r) => r,
        Outcome::Elapsed => unreachable!("a nursery without a deadline"),
    }
}

/// Runs a blocking nursery: `body` spawns children (tasks and fibers) that may borrow
/// from the caller's frame; returns once every child has ended.
///
/// Works from a fiber (which suspends), a worker (which runs other work meanwhile) and
/// a plain thread (which blocks; with no runtime entered, children run on the most
/// recently started runtime still alive). The result is the body's, unless a child
/// failed first: then that first error is returned (that first panic resumed) after
/// every child has ended. A panic of the body is resumed after every child has ended.
/// The body runs to its end on the caller's stack (it is not interrupted by a child's
/// failure: only children are cancelled).
///
/// When the owner is itself cancelled (a fiber or task aborted while it waits here for
/// its children), the cancellation is deferred until the children, which it cancels,
/// have all ended; a fiber then unwinds from here.
///
/// ```
/// let rt = weft::Runtime::new().unwrap(); // children run on it
/// let words = vec!["a", "bb", "ccc"];
/// let lens = std::sync::Mutex::new(Vec::new());
/// let r = weft::nursery_blocking(|n| {
///     for w in &words {
///         let lens = &lens;
///         n.spawn(async move {
///             lens.lock().unwrap().push(w.len());
///             Ok(())
///         });
///     }
///     Ok::<_, ()>(words.len())
/// });
/// assert_eq!(r, Ok(3));
/// let mut lens = lens.into_inner().unwrap();
/// lens.sort();
/// assert_eq!(lens, [1, 2, 3]);
/// ```
pub fn nursery_blocking<'scope, F, T, E>(body: F) -> Result<T, E>
where
    F: FnOnce(&Nursery<'scope, E>) -> Result<T, E>,
    E: Send + 'static,
{
    match run_blocking(Arc::new(Inner::new(runtime())), body) {
        Outcome::Done(r) => r,
        Outcome::Elapsed => unreachable!("a nursery without a deadline"),
    }
}

fn run_blocking<'scope, F, T, E>(inner: Arc<Inner<E>>, body: F) -> Outcome<T, E>
where
    F: FnOnce(&Nursery<'scope, E>) -> Result<T, E>,
    E: Send + 'static,
{
    let n = Nursery::new(inner.clone());
    // A panic of the body (or the forced unwind of a cancelled owner fiber, which
    // passes through here like a panic) must not leave this frame, which the children
    // borrow, before they ended: caught, and resumed after the wait.
    let result = catch_unwind(AssertUnwindSafe(|| body(&n)));
    let (result, panic) = match result {
        Ok(r) => {
            inner.body_returned(r.is_ok());
            if r.is_err() {
                inner.cancel();
            }
            (Some(r), None)
        }
        Err(p) => {
            inner.cancel();
            (None, Some(p))
        }
    };
    wait_children(&inner);
    if let Some(p) = panic {
        // The fiber unwound by its cancellation goes on unwinding; a panic resumes.
        drop(n);
        resume_unwind(p);
    }
    conclude(&inner, result, None)
}

/// How often a task owner whose wait is nested in its poll looks for its abort.
const ABORT_CHECK: Duration = Duration::from_millis(10);

/// Waits until every child has ended, wherever the caller stands.
fn wait_children<E>(inner: &Inner<E>) {
    // The owner (the fiber or task running this) is shielded while it waits: an abort
    // must not unwind this frame while children borrow it. The wait sees the abort
    // instead, cancels the children, and goes on waiting. Shutdown ignores shields:
    // the pin makes it leak the fiber's stack rather than unwind it (`StackPin`).
    let owner = TaskRef::current();
    let shielded = owner.as_ref().is_some_and(TaskRef::shield);
    let pin = crate::fiber::pin_stack();
    let guard = WaitGuard { inner, done: false };
    // An abort wakes a parked fiber (its wait is re-polled), but not a wait nested in
    // a task's poll (`weft::wait` on a worker, or a fiber that may not suspend here):
    // the task is running, so the abort only marks it. Such an owner looks again
    // every `ABORT_CHECK` (one timer per period while it waits, nothing otherwise).
    let nested = owner.is_some() && crate::fiber::suspendable().is_none();
    let mut check: Option<std::pin::Pin<Box<crate::time::Sleep>>> = None;
    crate::wait(std::future::poll_fn(|cx| {
        let cancelled = owner.as_ref().is_some_and(TaskRef::is_cancelled);
        if cancelled {
            inner.cancel();
        }
        let done = inner.poll_done(cx);
        if done.is_pending() && nested && !cancelled {
            let tick = check.get_or_insert_with(|| Box::pin(crate::time::sleep(ABORT_CHECK)));
            if tick.as_mut().poll(cx).is_ready() {
                check = None;
                cx.waker().wake_by_ref();
            }
        }
        done
    }));
    let mut guard = guard;
    guard.done = true;
    drop(pin);
    if let (Some(owner), true) = (&owner, shielded) {
        owner.unshield();
        if owner.is_cancelled() && crate::fiber::is_fiber() {
            // Every child has ended: the owner's deferred cancellation may unwind this
            // fiber now (a wait point; with no other shield it does not return).
            crate::fiber::yield_now();
        }
    }
}

/// Unwinding through the wait (a panic in a waker, or a shutdown that ignored the
/// shield and found the stack not pinned, a task's set-aside wait): the frame still
/// must not be left before every child has ended.
struct WaitGuard<'a, E> {
    inner: &'a Inner<E>,
    done: bool,
}

impl<E> Drop for WaitGuard<'_, E> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.inner.cancel();
        crate::wait(std::future::poll_fn(|cx| match self.inner.poll_done(cx) {
            Poll::Ready(()) => Poll::Ready(()),
            Poll::Pending => Poll::Pending,
        }));
    }
}
