//! Fibers: plain blocking-style code on weft's workers.
//!
//! A fiber is a task that owns a stack. Inside it, [`wait`](crate::wait) (and
//! everything built on it: [`JoinHandle::join`], [`sleep`], [`yield_now`],
//! `Runtime::block_on`) suspends the *fiber*, not the worker thread, which goes on to
//! run other fibers, tasks and fork-join jobs. A fiber's [`JoinHandle`] is the same as a
//! task's: await it, `join()` it from a thread or another fiber, or `abort()` it.
//!
//! ```
//! use std::time::Duration;
//!
//! let rt = weft::Runtime::new().unwrap();
//! let fibers: Vec<_> = (0..1000)
//!     .map(|i| {
//!         weft::fiber::spawn(move || {
//!             weft::fiber::sleep(Duration::from_millis(1)); // parks the fiber only
//!             i * 2
//!         })
//!     })
//!     .collect();
//! let total: u64 = fibers.into_iter().map(|h| h.join().unwrap()).sum();
//! assert_eq!(total, 999_000);
//! # drop(rt);
//! ```
//!
//! # The thread rule
//!
//! **A started fiber runs on one worker thread for its whole life** (its *home*
//! worker): it may start on any worker (idle workers steal fibers that have not
//! started, and a worker that already has at least two more fibers tied to it than
//! another offers a fiber about to start to the one with the fewest, so fibers started
//! one at a time, as a server's per-connection fibers are, spread evenly), but once it
//! has run, its wake-ups go to its home worker's inbox and no other worker takes it.
//! This matters because Rust code may keep the address of a thread-local across a
//! call; a fiber that moved to another thread while suspended would then use the old
//! thread's thread-local. Two consequences:
//!
//! * A fiber that keeps its worker busy without waiting delays the other fibers homed
//!   there. Wait (or [`yield_now`]) in long loops.
//! * Use [`fiber_local!`](crate::fiber_local) for per-fiber state; `thread_local!`
//!   values are shared by every fiber on the same worker.
//!
//! [`Builder::fiber_migration(true)`](Builder::fiber_migration) (an `unsafe` call)
//! lifts the rule for one fiber: its home worker becomes a preference, and when that
//! worker has many fibers waiting or is stuck in one long poll, the fiber's wake-up goes
//! to the runtime's shared queue, where any worker may run it. Only do this for fibers
//! that hold no reference into thread-local storage and keep only `Send` values on
//! their stack across a wait.
//!
//! The rule holds for cancellation too: a suspended fiber's stack is unwound (its
//! locals dropped) only on its home worker's thread. At runtime shutdown each worker
//! unwinds its fibers as it leaves its loop, before its thread-locals are destroyed;
//! the fibers of a worker stuck in a task past
//! [`shutdown_timeout`](crate::Runtime::shutdown_timeout) are leaked instead (their
//! stacks stay mapped, their locals are never dropped; their handles report
//! cancellation). Fibers that migrate are unwound on whichever thread cancels them.
//!
//! # Stacks
//!
//! Each fiber gets a stack of [`Builder::stack_size`] bytes, by default 2 MiB or
//! `WEFT_STACK_SIZE` (bytes, with an optional `K`, `M` or `G` suffix). The stack is
//! reserved address space with a guard page below it: memory is committed only where
//! the fiber touches it, and an overflow hits the guard page, where weft reports on
//! stderr which fiber overflowed and how to raise the size, then aborts. Finished
//! fibers' stacks are reused. Each stack takes two kernel memory maps, so the default
//! `vm.max_map_count` of 65,530 allows about 32,000 live fibers; past the limit
//! [`try_spawn`] returns an error that says how to raise it.
//!
//! # Cancellation
//!
//! `abort()` on a suspended fiber unwinds its stack from the point where it waits:
//! locals are dropped as a panic would drop them, and the handle reports a cancelled
//! [`JoinError`](crate::JoinError). [`task::shield`](crate::task::shield) (awaited
//! through `wait`) defers the cancellation as for tasks. A panic inside a fiber is
//! returned through its handle and does not take the worker down.
//!
//! The unwind is Rust's: a destructor that panics while it runs aborts the process,
//! as one that panics while any thread unwinds does. A task's cancellation only
//! drops its future, so there such a panic is caught and reported; a fiber's locals
//! can only be dropped by unwinding its stack (abort, a nursery's cancellation, the
//! runtime's shutdown). Destructors of values a fiber may be cancelled with must not
//! panic.

pub(crate) mod future;
mod local;
pub(crate) mod wait;

pub use crate::stack::error::{SpawnError, SpawnErrorKind};
pub use local::{AccessError, LocalKey};

pub(crate) use future::{
    current_fiber, is_force_unwinding, pin_stack, suspend_on, suspendable, FiberCtx,
};

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc as StdArc;
use std::time::Duration;

use crate::base::Arc;
use crate::scheduler::Shared;
use crate::stack::{self, overflow};
use crate::task::{Id, JoinHandle};

/// Spawns a fiber running `f` on the current runtime.
///
/// Works from a task, from `block_on`, from another fiber, and from any thread while
/// a runtime is running (the most recently started one that is still alive).
///
/// # Panics
/// When [`try_spawn`] would return an error (no runtime, or no stack to be had), with
/// that error's message.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = weft::fiber::spawn(|| {
///     // Blocking style: this suspends the fiber, not the thread.
///     let t = weft::spawn(async { 20 });
///     t.join().unwrap() + 1
/// });
/// assert_eq!(h.join().unwrap(), 21);
/// # drop(rt);
/// ```
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new().spawn(f)
}

/// Spawns a fiber, or says why it cannot.
///
/// ```
/// // No runtime is running here.
/// let err = weft::fiber::try_spawn(|| ()).unwrap_err();
/// assert_eq!(err.kind(), weft::fiber::SpawnErrorKind::NoRuntime);
///
/// let rt = weft::Runtime::new().unwrap();
/// assert_eq!(weft::fiber::try_spawn(|| 5).unwrap().join().unwrap(), 5);
/// # drop(rt);
/// ```
pub fn try_spawn<F, T>(f: F) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    Builder::new().try_spawn(f)
}

/// Options for one fiber: name, stack size, migration.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = weft::fiber::Builder::new()
///     .name("worker-7")
///     .stack_size(256 * 1024)
///     .spawn(|| weft::fiber::current().unwrap().name().map(str::to_owned));
/// assert_eq!(h.join().unwrap().as_deref(), Some("worker-7"));
/// # drop(rt);
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
    migration: bool,
}

impl Builder {
    /// Default options: unnamed, the default stack size, no migration.
    ///
    /// ```
    /// let _b = weft::fiber::Builder::new();
    /// ```
    pub fn new() -> Self {
        Builder::default()
    }

    /// Names the fiber (for [`current`], stall reports and overflow messages).
    ///
    /// ```
    /// let _b = weft::fiber::Builder::new().name("reader");
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The fiber's stack size in bytes: rounded up to whole pages and to at least
    /// 64 KiB (room for a panic to print its backtrace); more than 1 GiB is an error
    /// ([`SpawnErrorKind::StackSize`]).
    ///
    /// ```
    /// let _b = weft::fiber::Builder::new().stack_size(64 * 1024);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Lets this fiber move between workers after it started (see the thread rule in
    /// the [module docs](self)). Off by default.
    ///
    /// # Safety
    /// With migration on, the fiber may continue on another thread after any wait. The
    /// caller promises that everything the fiber keeps across a wait may move between
    /// threads (is `Send`: no `Rc`, no `RefCell` borrow of shared data, no thread-bound
    /// handle) and that it keeps no pointer into thread-local storage across a wait.
    /// The compiler cannot check what lives on a stack, so this is on the caller.
    ///
    /// That includes pointers the compiler keeps for you: an optimised function that
    /// reads a `thread_local!` both before and after a wait may compute the
    /// thread-local's address once and read the first thread's after the move. So a
    /// migrating fiber's code must not touch thread-locals in a function that also
    /// waits (read them through a separate `#[inline(never)]` function, or use
    /// [`fiber_local!`](crate::fiber_local)). weft's own functions are written so: each
    /// of its thread-locals is read through a function that is never inlined, except
    /// fork-join's: a `join`, `scope` or parallel iterator inlines a thread-local read,
    /// so call those from a function of their own that does not wait, not beside a
    /// wait (a `#[inline(never)]` helper).
    ///
    /// An [`EnterGuard`](crate::EnterGuard) is such a thread-bound value, and so is a
    /// [`block_on`](crate::Handle::block_on) of another runtime while it waits (it holds
    /// one): the entered runtime is current on the thread that entered it, so after a
    /// move the fiber's spawns go to its worker's runtime, and the entry stays on the
    /// first thread (matching nothing else) until that thread ends.
    ///
    /// ```
    /// // SAFETY: the fiber keeps nothing thread-bound across its waits.
    /// let _b = unsafe { weft::fiber::Builder::new().fiber_migration(true) };
    /// ```
    pub unsafe fn fiber_migration(mut self, allow: bool) -> Self {
        self.migration = allow;
        self
    }

    /// Spawns the fiber.
    ///
    /// # Panics
    /// When [`try_spawn`](Self::try_spawn) would return an error, with its message.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = weft::fiber::Builder::new().spawn(|| 1 + 1);
    /// assert_eq!(h.join().unwrap(), 2);
    /// # drop(rt);
    /// ```
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match self.try_spawn(f) {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        }
    }

    /// Spawns the fiber, or says why it cannot: no runtime, a runtime shutting down, a
    /// bad stack size, or no more stacks from the system (the map count limit, or
    /// memory).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let err = weft::fiber::Builder::new().stack_size(usize::MAX).try_spawn(|| ()).unwrap_err();
    /// assert_eq!(err.kind(), weft::fiber::SpawnErrorKind::StackSize);
    /// # drop(rt);
    /// ```
    pub fn try_spawn<F, T>(self, f: F) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let pool = target_pool().ok_or_else(SpawnError::no_runtime)?;
        if pool.is_shutdown() || pool.refuses_spawn() {
            return Err(SpawnError::shutdown());
        }
        overflow::install();
        let stack = stack::acquire(self.stack_size.unwrap_or_else(stack::default_size))?;
        let fut = future::FiberFuture::new(f, stack, self.name, self.migration);
        Ok(pool.spawn_of_kind(fut, true))
    }
}

/// The pool a new fiber goes to: the caller's pool in the current runtime (its own
/// pool on a worker), else the default pool of the most recently started runtime that
/// is still alive.
fn target_pool() -> Option<Arc<Shared>> {
    // On a worker: its own pool, without upgrading the runtime's `Weak`, unless what
    // runs there entered another runtime.
    if let Some(pool) = crate::scheduler::worker::with_current(|c| {
        c.map(|c| crate::runtime::with_worker_pool(c, Arc::clone))
    }) {
        return Some(pool);
    }
    let handle = crate::Handle::try_current()
        .ok()
        .or_else(crate::runtime::latest)?;
    Some(handle.caller_pool().clone())
}

/// Suspends the current fiber and lets the worker run other work first. On a worker
/// outside a fiber (a task's poll, or a fiber inside a fork-join `join`, which may not
/// suspend) the worker runs other ready work on another stack first; on any other
/// thread, yields the thread.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = weft::fiber::spawn(|| {
///     for _ in 0..3 {
///         weft::fiber::yield_now();
///     }
/// });
/// h.join().unwrap();
/// # drop(rt);
/// ```
pub fn yield_now() {
    if suspend_for_a_yield() {
        return;
    }
    if crate::scheduler::worker::current_ptr().is_null() {
        std::thread::yield_now();
    } else {
        // A worker (a task, or a fiber inside a fork-join `join`): it runs other ready
        // work first, as a fiber would have.
        wait::worker_yield();
    }
}

/// Suspends the running fiber behind the work ready on its worker (a yield); `false`,
/// and no yield, off a fiber or where it may not suspend.
pub(crate) fn suspend_for_a_yield() -> bool {
    // Checked up front: polling the yield wakes the fiber, which is pointless if it
    // then may not suspend.
    future::suspendable()
        .is_some_and(|fiber| future::suspend_on(fiber, pin!(crate::task::yield_now())).is_some())
}

/// Suspends the current fiber for `duration` (a timer of its runtime wakes it). Outside
/// a fiber it waits the same way `wait` does: a worker helps, any other thread sleeps.
/// A sleep that is over at once (zero) still yields the fiber, as every timed wait
/// does, so a loop of them lets the worker run other fibers.
///
/// ```
/// use std::time::{Duration, Instant};
/// let rt = weft::Runtime::new().unwrap();
/// let h = weft::fiber::spawn(|| {
///     let t = Instant::now();
///     weft::fiber::sleep(Duration::from_millis(5));
///     t.elapsed()
/// });
/// assert!(h.join().unwrap() >= Duration::from_millis(5));
/// # drop(rt);
/// ```
pub fn sleep(duration: Duration) {
    let deadline = std::time::Instant::now()
        .checked_add(duration)
        .unwrap_or_else(crate::time::far_future);
    // A timed wait on nothing: a zero sleep still yields the fiber (found in review: a
    // loop of them kept its worker from a fiber homed there for ever).
    wait::sleep_until(deadline);
}

/// Whether the caller runs on a fiber.
///
/// ```
/// assert!(!weft::fiber::is_fiber());
/// let rt = weft::Runtime::new().unwrap();
/// assert!(weft::fiber::spawn(weft::fiber::is_fiber).join().unwrap());
/// # drop(rt);
/// ```
pub fn is_fiber() -> bool {
    !future::current_ctx().is_null()
}

/// The fiber the caller runs on, or `None` outside a fiber.
///
/// ```
/// assert!(weft::fiber::current().is_none());
/// let rt = weft::Runtime::new().unwrap();
/// let h = weft::fiber::spawn(|| weft::fiber::current().unwrap().id());
/// let id = h.id();
/// assert_eq!(h.join().unwrap(), id);
/// # drop(rt);
/// ```
pub fn current() -> Option<Current> {
    let ctx = future::current_ctx();
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a non-null current fiber is the live context of the running fiber.
    let ctx = unsafe { &*ctx };
    Some(Current {
        id: Id(ctx.id.get()),
        name: ctx.name.clone(),
    })
}

/// The running fiber, as returned by [`current`].
#[derive(Debug, Clone)]
pub struct Current {
    id: Id,
    name: Option<StdArc<str>>,
}

impl Current {
    /// The fiber's id: the same as its [`JoinHandle::id`].
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = weft::fiber::spawn(|| weft::fiber::current().unwrap().id());
    /// assert_eq!(h.id(), h.join().unwrap());
    /// # drop(rt);
    /// ```
    pub fn id(&self) -> Id {
        self.id
    }

    /// The name given with [`Builder::name`].
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = weft::fiber::spawn(|| weft::fiber::current().unwrap().name().is_none());
    /// assert!(h.join().unwrap());
    /// # drop(rt);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

pub use crate::stack::{fiber_stats as stats, FiberStats};

/// Counts the weft locks the running fiber (or thread) holds, so that parking while
/// holding one can be reported (`PARK-UNDER-LOCK`, spec 003). weft's own locks that
/// user code can hold (`weft::sync::watch::Ref`) take one of these while held; with
/// diagnostics on it also records the lock's name, for the report's lock stack.
pub(crate) struct LockDepth {
    name: &'static str,
}

thread_local! {
    /// Lock depth of code that is not on a fiber.
    static THREAD_LOCK_DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    /// The names of those locks, innermost last (kept while diagnostics are on).
    static THREAD_LOCK_NAMES: std::cell::RefCell<Vec<&'static str>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl LockDepth {
    /// Counts an unnamed weft lock.
    #[allow(dead_code)]
    pub(crate) fn acquire() -> LockDepth {
        Self::acquire_named("weft lock")
    }

    /// Counts the weft lock `name` as held by the running fiber (or thread) until the
    /// value is dropped.
    pub(crate) fn acquire_named(name: &'static str) -> LockDepth {
        adjust_lock_depth(true, name);
        LockDepth { name }
    }
}

/// Runs `f` on the running fiber's count of weft locks held and their names (or the
/// thread's, off fibers); `None` once the thread's are gone. Never inlined: it reads
/// thread-locals (see `worker::current_cell`).
#[inline(never)]
fn with_held<R>(
    f: impl FnOnce(&std::cell::Cell<u32>, &std::cell::RefCell<Vec<&'static str>>) -> R,
) -> Option<R> {
    let ctx = future::current_ctx();
    if ctx.is_null() {
        THREAD_LOCK_DEPTH
            .try_with(|d| THREAD_LOCK_NAMES.try_with(|n| f(d, n)))
            .ok()?
            .ok()
    } else {
        // SAFETY: the live context of the running fiber.
        let ctx = unsafe { &*ctx };
        Some(f(&ctx.lock_depth, &ctx.lock_names))
    }
}

/// The running fiber's (or thread's) count of weft locks held (see [`LockDepth`]).
fn held_lock_depth() -> u32 {
    with_held(|d, _| d.get()).unwrap_or(0)
}

/// Their names, innermost last (recorded while diagnostics are on).
fn held_lock_names() -> Vec<&'static str> {
    with_held(|_, n| n.borrow().clone()).unwrap_or_default()
}

impl Drop for LockDepth {
    fn drop(&mut self) {
        adjust_lock_depth(false, self.name);
    }
}

fn adjust_lock_depth(up: bool, name: &'static str) {
    let step = |d: u32| if up { d + 1 } else { d.saturating_sub(1) };
    let names = |v: &mut Vec<&'static str>| {
        if up {
            v.push(name);
        } else if let Some(i) = v.iter().rposition(|n| *n == name) {
            v.remove(i);
        }
    };
    let diagnose = crate::waitlist::depth::diagnostics_on();
    if diagnose && up {
        // A wake flushed while this lock is held is reported too (`WAKE-FLUSH-UNDER-LOCK`).
        crate::waitlist::depth::register_user_locks(crate::waitlist::depth::UserLocks {
            depth: held_lock_depth,
            names: held_lock_names,
        });
    }
    with_held(|depth, held| {
        depth.set(step(depth.get()));
        if diagnose {
            names(&mut held.borrow_mut());
        }
    });
}

/// `PARK-UNDER-LOCK` reports made so far.
static PARK_UNDER_LOCK: AtomicU64 = AtomicU64::new(0);

/// The park path's hook, called just before a fiber suspends: with diagnostics on
/// (debug builds, or `WEFT_DEBUG_LOCKS=1`), a fiber that holds one of weft's locks is
/// reported with its lock stack (it could deadlock every fiber that needs the lock, the
/// worker included).
#[inline]
pub(crate) fn before_park(ctx: &FiberCtx) {
    if ctx.lock_depth.get() > 0 && crate::waitlist::depth::diagnostics_on() {
        PARK_UNDER_LOCK.fetch_add(1, Relaxed);
        eprintln!(
            "weft: PARK-UNDER-LOCK: fiber {}{} parks while holding {} weft lock(s); lock \
             stack (innermost last): [{}]; release weft locks before waiting",
            ctx.id.get(),
            ctx.name
                .as_deref()
                .map(|n| format!(" ('{}')", n.escape_debug()))
                .unwrap_or_default(),
            ctx.lock_depth.get(),
            ctx.lock_names.borrow().join(", ")
        );
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) fn park_under_lock_reports() -> u64 {
    PARK_UNDER_LOCK.load(Relaxed)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A fiber that parks while holding one of weft's locks is reported (debug builds);
    /// one that released it first is not.
    #[test]
    fn parking_under_a_weft_lock_is_reported_in_debug_builds() {
        let rt = crate::Builder::new().worker_threads(1).build().unwrap();
        let before = park_under_lock_reports();
        rt.block_on(async {
            spawn(|| {
                let guard = LockDepth::acquire();
                yield_now();
                drop(guard);
                yield_now();
            })
            .await
            .unwrap();
        });
        let expected = u64::from(crate::waitlist::depth::diagnostics_on());
        assert_eq!(park_under_lock_reports() - before, expected);
    }
}

/// The shutdown side of the thread rule, against the scheduler's set-aside lists (here,
/// above the scheduler, because the test spawns a fiber).
#[cfg(all(test, not(loom)))]
mod set_aside_tests {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::time::Duration;

    /// Runs `f` inside `rt.block_on`, so that what it spawns goes to `rt` (not to the
    /// latest runtime, maybe another test's).
    fn on<R>(rt: &crate::Runtime, f: impl FnOnce() -> R) -> R {
        rt.block_on(async move { f() })
    }

    /// Sets its flag when dropped.
    struct Dropped(std::sync::Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, SeqCst);
        }
    }

    /// A pinned fiber that reaches its worker's set-aside list after the list closed
    /// (woken from another thread once its worker left or was given up on) is
    /// cancelled on the waking thread without being unwound there: its handle reports
    /// cancellation, and nothing on its stack is dropped, then or at runtime drop.
    #[test]
    fn a_fiber_set_aside_after_its_list_closed_is_leaked_not_unwound() {
        let rt = crate::Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .stall_report(None)
            .build()
            .unwrap();
        let shared = rt.handle().inner.pools[0].clone();
        let dropped = std::sync::Arc::new(AtomicBool::new(false));
        let parked = std::sync::Arc::new(AtomicBool::new(false));
        let (wake_tx, wake_rx) = futures_channel::oneshot::channel::<()>();
        let h = {
            let (dropped, parked) = (dropped.clone(), parked.clone());
            let spawn = move || {
                crate::fiber::spawn(move || {
                    let _guard = Dropped(dropped);
                    parked.store(true, SeqCst);
                    let _ = crate::wait(wake_rx);
                    unreachable!("the fiber was resumed");
                })
            };
            on(&rt, spawn)
        };
        while !parked.load(SeqCst) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        // As after its worker left: the inbox and the set-aside list are closed.
        assert!(shared.remotes[0].inbox.close().is_empty());
        shared.close_set_aside(0, false);
        wake_tx.send(()).unwrap();
        assert!(h.join().unwrap_err().is_cancelled());
        assert!(!dropped.load(SeqCst), "unwound on the waking thread");
        drop(rt);
        assert!(!dropped.load(SeqCst), "unwound at shutdown");
    }
}
