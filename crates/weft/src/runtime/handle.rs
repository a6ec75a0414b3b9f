//! `Handle`: a cloneable reference to a running runtime, and the thread's current one.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::future::Future;

use super::{Inner, Pool};
use crate::base::Arc;
use crate::scheduler::stats::Stats;
use crate::scheduler::{worker, Shared};
use crate::task::current::{self, Owner};
use crate::task::JoinHandle;

/// A cloneable reference to a runtime, for spawning onto it from anywhere.
///
/// A handle does not keep the runtime running: once the [`Runtime`](crate::Runtime) is
/// dropped, tasks spawned through a handle are cancelled at once.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let handle = rt.handle().clone();
/// let out = std::thread::spawn(move || handle.spawn(async { 5 }).join().unwrap())
///     .join()
///     .unwrap();
/// assert_eq!(out, 5);
/// ```
#[derive(Clone)]
pub struct Handle {
    pub(crate) inner: Arc<Inner>,
}

/// Returned by [`Handle::try_current`] outside a runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryCurrentError(());

impl fmt::Display for TryCurrentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_RUNTIME)
    }
}

impl std::error::Error for TryCurrentError {}

pub(crate) const NO_RUNTIME: &str = "no weft runtime is running on this thread: call this from a \
     task, from inside Runtime::block_on, or spawn through a Handle";

// The runtimes entered on this thread (by `block_on` and enter guards), innermost
// last. Off a worker the last one is current. On a worker, whose own runtime is
// current otherwise, an entry counts only for the code that made it: the task, fiber
// and loop stack running then (`current::Owner`). While a `block_on` of another
// runtime waits there, the worker runs other tasks on the same thread, and their
// spawns must still go to the worker's runtime; the waiting task's own polls, resumed
// later with the same owner, see the runtime it entered.
//
// Every entry has an id, and a guard removes its own entry by id: a guard dropped out
// of order (after an outer guard ended it) finds nothing and leaves the newer entries
// alone, and guards of other owners, interleaved on a worker, never end each other's.
thread_local! {
    static ENTERED: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
    /// How many entries `ENTERED` holds: read by `spawn` on every call, so it is a
    /// plain cell, without the lazy registration of a thread-local with a destructor.
    static ENTERED_LEN: Cell<usize> = const { Cell::new(0) };
}

struct Entry {
    id: u64,
    owner: Owner,
    handle: Handle,
}

/// Makes a runtime the current one of this thread until dropped (from
/// [`Handle::enter`] or [`Runtime::enter`](crate::Runtime::enter)).
///
/// Guards nest; drop them in the reverse order of their making (dropping an outer
/// guard ends the inner ones too, and an inner guard dropped after that does
/// nothing). A guard stays on the thread that made it: it is neither `Send` nor
/// `Sync`.
///
/// On a worker thread of a runtime, a guard (or a `block_on` of another runtime) makes
/// its runtime current for the task, fiber or fork-join job that made it (and for the
/// `join` halves and `scope` jobs it forks, wherever they run); other tasks that the
/// worker runs meanwhile keep the worker's own runtime. A guard that is never dropped
/// (`mem::forget`) keeps its runtime current for the rest of the thread's life, on a
/// worker for the rest of the task, fiber or job run that made it.
#[must_use = "the runtime is current only while the guard lives"]
pub struct EnterGuard<'a> {
    /// The guard's entry (0: none, on a thread whose thread-locals are already gone).
    id: u64,
    _handle: std::marker::PhantomData<&'a Handle>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl fmt::Debug for EnterGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}

/// Pushes an entry for `handle`; its id, or 0 when this thread's thread-locals are
/// already destroyed (a `block_on` in a late thread-local destructor still runs its
/// future; only `spawn` and the like find no current runtime there).
#[inline(never)]
fn push(handle: Handle) -> u64 {
    // Unique across threads (task ids are): a guard kept by a fiber that moved to
    // another thread (`fiber_migration`) must find no entry there, not another's.
    let id = crate::task::Id::next().0;
    let owner = current::owner();
    let pushed = ENTERED.try_with(move |e| {
        let mut e = e.borrow_mut();
        e.push(Entry { id, owner, handle });
        e.len()
    });
    match pushed {
        Ok(len) => {
            ENTERED_LEN.with(|l| l.set(len));
            id
        }
        Err(_) => 0,
    }
}

pub(crate) fn enter(handle: &Handle) -> EnterGuard<'_> {
    EnterGuard {
        id: push(handle.clone()),
        _handle: std::marker::PhantomData,
        _not_send: std::marker::PhantomData,
    }
}

/// Makes `handle` the current runtime of this thread for the rest of its life (blocking
/// pool threads).
pub(crate) fn enter_for_thread(handle: Handle) {
    push(handle);
}

/// The runtime entered on this thread that is current for what runs now, if any (see
/// `ENTERED`).
#[inline(never)]
fn entered(on_worker: bool) -> Option<Handle> {
    if entered_len() == 0 {
        return None;
    }
    ENTERED
        .try_with(|e| {
            let e = e.borrow();
            let found = if on_worker {
                let me = current::owner();
                e.iter().rev().find(|x| x.owner == me)
            } else {
                e.last()
            };
            found.map(|x| x.handle.clone())
        })
        .ok()
        .flatten()
}

/// On a worker thread, the runtime that the task, fiber or job running there entered
/// (which then stands before the worker's own), if any: for the lookups that take the
/// worker's runtime without `Handle::try_current` (see [`with_worker_pool`]; fork-join).
#[inline]
pub(crate) fn entered_on_worker() -> Option<Handle> {
    // `entered` looks too; here the nearly-always case stays short at the callers.
    if entered_len() == 0 {
        return None;
    }
    entered(true)
}

/// [`entered_on_worker`] with its count read inline, for fork-join's join only (see
/// `worker::current_ptr_in_join`).
#[inline(always)]
pub(crate) fn entered_on_worker_in_join() -> Option<Handle> {
    if ENTERED_LEN.with(Cell::get) == 0 {
        return None;
    }
    entered(true)
}

/// Runs `f` on the pool that work made here goes to, for code running on the worker
/// `core`: the worker's own pool (borrowed: no handle made, nor a count taken on the
/// runtime), unless what runs there entered another runtime, whose caller pool then
/// takes it. For `spawn`, `fiber::spawn` and timers.
#[inline]
pub(crate) fn with_worker_pool<R>(core: &worker::Core, f: impl FnOnce(&Arc<Shared>) -> R) -> R {
    match entered_on_worker() {
        None => f(core.shared()),
        Some(entered) => f(entered.caller_pool()),
    }
}

/// How many entries `ENTERED` holds. The functions that touch this module's
/// thread-locals are never inlined: a migrating fiber may resume on another thread
/// inside a function that waits, after which an address computed before the wait is
/// the first thread's (see `worker::current_cell`).
#[inline(never)]
fn entered_len() -> usize {
    ENTERED_LEN.with(Cell::get)
}

impl Drop for EnterGuard<'_> {
    #[inline(never)]
    fn drop(&mut self) {
        if self.id == 0 {
            return;
        }
        // Nearly always the guard is the innermost: one handle comes off, with no
        // allocation (`block_on` does this every call).
        let taken = ENTERED.try_with(|e| {
            let mut e = e.borrow_mut();
            let taken = if e.last().is_some_and(|x| x.id == self.id) {
                (e.pop().map(|x| x.handle), Vec::new())
            } else if let Some(at) = e.iter().position(|x| x.id == self.id) {
                // An outer guard: it ends its owner's inner ones too; entries of other
                // owners (interleaved on a worker) stay.
                let owner = e[at].owner;
                let mut inner = Vec::new();
                for x in e.split_off(at) {
                    if x.owner == owner {
                        inner.push(x.handle);
                    } else {
                        e.push(x);
                    }
                }
                (None, inner)
            } else {
                // Ended already by an outer guard's drop.
                (None, Vec::new())
            };
            ENTERED_LEN.with(|l| l.set(e.len()));
            taken
        });
        // Handles are dropped outside the borrow: a last handle's drop may run code
        // that enters a runtime.
        drop(taken);
    }
}

impl Handle {
    /// Makes this runtime the current one of this thread until the guard is dropped:
    /// `spawn`, sockets, timers and `Handle::current` made on a plain thread then
    /// belong to it instead of the most recently started runtime.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let _guard = rt.handle().enter();
    /// let h = weft::spawn(async { 1 + 1 });
    /// assert_eq!(h.join().unwrap(), 2);
    /// ```
    pub fn enter(&self) -> EnterGuard<'_> {
        enter(self)
    }

    /// The runtime this thread is running in: a worker's runtime, or the one whose
    /// `block_on` is on the stack.
    ///
    /// # Panics
    /// Outside any weft runtime, with a message saying so. Use
    /// [`try_current`](Self::try_current) to test instead.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.block_on(async {
    ///     let h = weft::Handle::current();
    ///     assert_eq!(h.spawn(async { 3 }).await.unwrap(), 3);
    /// });
    /// ```
    #[track_caller]
    pub fn current() -> Handle {
        match Handle::try_current() {
            Ok(h) => h,
            Err(e) => panic!("{e}"),
        }
    }

    /// The current runtime, or an error outside any.
    ///
    /// ```
    /// assert!(weft::Handle::try_current().is_err());
    /// ```
    pub fn try_current() -> Result<Handle, TryCurrentError> {
        let worker_rt = worker::with_current(|c| c.map(|c| c.shared().rt.upgrade()));
        if let Some(h) = entered(worker_rt.is_some()) {
            return Ok(h);
        }
        match worker_rt
            .flatten()
            .and_then(|rt| rt.downcast::<Inner>().ok())
        {
            Some(inner) => Ok(Handle { inner }),
            None => Err(TryCurrentError(())),
        }
    }

    /// The pool a plain `spawn` from this thread goes to: the caller's own pool on one of
    /// this runtime's workers, the default pool anywhere else.
    pub(crate) fn caller_pool(&self) -> &Arc<Shared> {
        let own = worker::with_current(|c| {
            c.and_then(|c| self.inner.pools.iter().position(|p| c.belongs_to(p)))
        });
        &self.inner.pools[own.unwrap_or(0)]
    }

    /// Spawns a task onto this runtime: onto the caller's pool when called on one of its
    /// workers, onto the default pool otherwise.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().spawn(async { "hi" });
    /// assert_eq!(h.join().unwrap(), "hi");
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.caller_pool().spawn(future)
    }

    /// Spawns a task onto a named pool. The insert wakes a worker of that pool, never
    /// one of the caller's.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().spawn_on(weft::Pool::Interactive, async { 2 });
    /// assert_eq!(h.join().unwrap(), 2);
    /// ```
    pub fn spawn_on<F>(&self, pool: Pool, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.inner.pool(pool).spawn(future)
    }

    /// Runs a blocking closure on the runtime's blocking pool; see [`spawn_blocking`].
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().spawn_blocking(|| 40 + 2);
    /// assert_eq!(h.join().unwrap(), 42);
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.inner.blocking.spawn(f)
    }

    /// The runtime's statistics.
    ///
    /// ```
    /// let rt = weft::Builder::new().worker_threads(3).build().unwrap();
    /// assert_eq!(rt.handle().stats().num_workers, 3);
    /// ```
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.inner.pools[0].num_workers())
            .finish_non_exhaustive()
    }
}

/// Spawns a task onto the current runtime.
///
/// # Panics
/// Outside a weft runtime (no worker thread and no `block_on` on the stack).
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let sum = rt.block_on(async {
///     let hs: Vec<_> = (0..10u64).map(|i| weft::spawn(async move { i * i })).collect();
///     let mut sum = 0;
///     for h in hs { sum += h.await.unwrap(); }
///     sum
/// });
/// assert_eq!(sum, 285);
/// ```
#[track_caller]
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    // On a worker: its own pool (no handle needed, nor a count on the pool's `Arc`),
    // unless the task or fiber running there entered another runtime.
    let spawned = worker::with_current(|core| match core {
        Some(core) => Ok(with_worker_pool(core, |pool| pool.spawn(future))),
        None => Err(future),
    });
    match spawned {
        Ok(handle) => handle,
        Err(future) => Handle::current().spawn(future),
    }
}

/// Spawns a task onto a pool of the current runtime. A task spawned into another pool
/// than the caller's is inserted there and wakes a worker of that pool.
///
/// # Panics
/// Outside a weft runtime.
///
/// ```
/// let rt = weft::Builder::new().worker_threads(2).interactive_threads(1).build().unwrap();
/// rt.block_on(async {
///     let h = weft::spawn_on(weft::Pool::Interactive, async {
///         std::thread::current().name().unwrap().to_string()
///     });
///     assert!(h.await.unwrap().contains("interactive"));
/// });
/// ```
#[track_caller]
pub fn spawn_on<F>(pool: Pool, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    Handle::current().spawn_on(pool, future)
}

/// Runs a blocking closure on the current runtime's blocking pool and returns a handle
/// to its result. The pool starts threads on demand, up to
/// [`Builder::max_blocking_threads`](crate::Builder::max_blocking_threads), and retires
/// them after an idle keep-alive. Use it for work that blocks a thread (file system,
/// blocking libraries, long computations) so it does not hold up a worker.
///
/// # Panics
/// Outside a weft runtime.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let v = rt.block_on(async {
///     weft::spawn_blocking(|| {
///         std::thread::sleep(std::time::Duration::from_millis(10));
///         5
///     })
///     .await
///     .unwrap()
/// });
/// assert_eq!(v, 5);
/// ```
#[track_caller]
pub fn spawn_blocking<F, R>(f: F) -> JoinHandle<R>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    Handle::current().spawn_blocking(f)
}
