//! The runtime: pools of workers, entering, spawning, shutting down.

mod builder;
pub(crate) mod closing;
mod drain;
mod dump;
mod env;
mod handle;
pub(crate) mod sysmon;

pub use crate::scheduler::Pool;
pub use builder::Builder;
pub use drain::ShutdownReport;
pub use dump::Dump;
pub(crate) use handle::{enter, entered_on_worker, entered_on_worker_in_join, with_worker_pool};
pub use handle::{spawn, spawn_blocking, spawn_on, EnterGuard, Handle, TryCurrentError};

use std::future::Future;
use std::io;
use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::base::Arc;
use crate::driver::timer::Driver;
use crate::scheduler::blocking::BlockingPool;
use crate::scheduler::stats::Stats;
use crate::scheduler::worker::{self, Core};
use crate::scheduler::Shared;
use crate::task::JoinHandle;

/// The most recently started runtime, for spawns from threads that entered none.
static LATEST: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

/// A handle to the most recently started runtime that is still alive (and not shut
/// down).
pub(crate) fn latest() -> Option<Handle> {
    let mut started = LATEST.lock().unwrap_or_else(|e| e.into_inner());
    // The most recently started runtime that is still alive and not shutting down;
    // dropped ones are forgotten on the way.
    started.retain(|w| w.strong_count() > 0);
    started
        .iter()
        .rev()
        .filter_map(Weak::upgrade)
        .find(|inner| !inner.pools[0].is_shutdown())
        .map(|inner| Handle { inner })
}

/// What a runtime's handles share: its pools and its blocking pool.
pub(crate) struct Inner {
    /// `pools[0]` is the default pool; `pools[1]` the interactive one, if it has
    /// threads.
    pub(crate) pools: Vec<Arc<Shared>>,
    pub(crate) blocking: Arc<BlockingPool>,
    pub(crate) time: Arc<Driver>,
    /// The monitor (stall reporter and temporary workers), when either is enabled.
    pub(crate) sysmon: Option<Arc<sysmon::Sysmon>>,
    /// What starting a worker thread needs (sysmon starts temporary ones).
    pub(crate) threads: std::sync::Arc<WorkerThreads>,
    /// Waits that end when this runtime shuts down (signal waits).
    pub(crate) closing: std::sync::Arc<closing::Closing>,
}

/// How worker threads are started and counted: the base ones by `Runtime::start`, the
/// temporary ones by sysmon.
pub(crate) struct WorkerThreads {
    /// Thread name prefixes of the default and the interactive pool.
    prefixes: [String; 2],
    start: Option<builder::Callback>,
    stop: Option<builder::Callback>,
    exits: std::sync::Arc<Exits>,
    pub(crate) temp_started: std::sync::atomic::AtomicU64,
    pub(crate) temp_retired: std::sync::atomic::AtomicU64,
    /// `WEFT_DEBUG_SYSMON`: log scaling decisions on stderr.
    pub(crate) debug: bool,
}

impl WorkerThreads {
    /// Starts the thread of worker `index` of `shared`. A temporary worker's start is
    /// refused (`Ok(None)`) once the runtime shuts down: under the exits lock, so that
    /// shutdown, which sets its flag before it waits on that count, either sees the
    /// thread counted or keeps it from starting.
    pub(crate) fn spawn(
        self: &std::sync::Arc<Self>,
        shared: Arc<Shared>,
        index: usize,
        parts: crate::scheduler::WorkerParts,
    ) -> io::Result<Option<std::thread::JoinHandle<()>>> {
        let temporary = shared.is_temporary(index);
        {
            let mut running = self.exits.running.lock().unwrap();
            if temporary && shared.is_shutdown() {
                drop(running);
                shared.return_slot(index, parts);
                return Ok(None);
            }
            *running += 1;
        }
        let prefix = match shared.pool {
            Pool::Default => &self.prefixes[0],
            Pool::Interactive => &self.prefixes[1],
        };
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{prefix}-{index}"))
            .spawn(move || {
                // Counted out however the thread ends: shutdown waits for the count
                // (found in review: an `on_thread_start` hook that panicked on a
                // temporary worker made dropping the runtime hang).
                let mut exit = ThreadExit {
                    threads: this.clone(),
                    slot: temporary.then(|| (shared.clone(), index)),
                };
                COUNTED_IN.with(|c| c.set(std::sync::Arc::as_ptr(&this.exits) as usize));
                // Fibers run here: a stack overflow must be reported from an
                // alternate signal stack.
                crate::stack::overflow::ensure_altstack();
                if let Some(f) = &this.start {
                    // A hook that panics (the panic hook has printed it) does not end the
                    // worker: a base worker that died here left a runtime that built
                    // fine and never ran a task (found in review).
                    crate::task::waker::ignore_panic(|| f());
                }
                let core = Core::new(index, shared.clone(), parts);
                if core.run() {
                    // A temporary worker retired (leaving its queues empty): its slot
                    // may be started again.
                    exit.slot = None;
                    shared.return_slot(index, core.into_parts());
                    this.temp_retired
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if this.debug {
                        eprintln!(
                            "weft: sysmon: temporary worker {index} of the {:?} pool retired \
                             after {:?} idle ({} of {} workers now running)",
                            shared.pool,
                            shared.keep_alive,
                            shared.active_workers(),
                            shared.num_workers(),
                        );
                    }
                } else {
                    drop(core);
                }
                if let Some(f) = &this.stop {
                    f();
                }
                drop(exit);
            });
        match spawned {
            Ok(t) => Ok(Some(t)),
            Err(e) => {
                *self.exits.running.lock().unwrap() -= 1;
                Err(e)
            }
        }
    }
}

/// A worker thread's end, also by a panic (in a hook, say): counts the thread out for
/// shutdown, and a temporary worker's slot, if the thread did not give it back,
/// leaves use (its private ends went with the thread; counted as retired, since no
/// thread runs it).
struct ThreadExit {
    threads: std::sync::Arc<WorkerThreads>,
    slot: Option<(Arc<Shared>, usize)>,
}

impl Drop for ThreadExit {
    fn drop(&mut self) {
        if let Some((shared, index)) = self.slot.take() {
            if std::thread::panicking() {
                shared.abandon_slot(index);
                self.threads
                    .temp_retired
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let exits = &self.threads.exits;
        *exits.running.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        exits.cv.notify_all();
    }
}

impl Inner {
    /// The pool that serves `pool` (the default one stands in for an empty
    /// interactive pool).
    pub(crate) fn pool(&self, pool: Pool) -> &Arc<Shared> {
        match pool {
            Pool::Interactive if self.pools.len() > 1 => &self.pools[1],
            _ => &self.pools[0],
        }
    }

    pub(crate) fn stats(&self) -> Stats {
        let mut stats = Stats::new(
            self.pools.iter().map(|p| p.stats()).collect(),
            self.blocking.stats(),
            (self.time.pending(), self.time.fired()),
            self.time.io_stats(),
            self.sysmon
                .as_ref()
                .map_or(0, |m| m.reported.load(std::sync::atomic::Ordering::Relaxed)),
            (
                self.threads
                    .temp_started
                    .load(std::sync::atomic::Ordering::Relaxed),
                self.threads
                    .temp_retired
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        );
        stats.active_tasks = self.active_tasks();
        stats
    }

    /// Live tasks and fibers in every pool (see `Stats::active_tasks`).
    pub(crate) fn active_tasks(&self) -> usize {
        self.pools.iter().map(|p| p.owned.len()).sum()
    }

    /// Whether any task or fiber is live in any pool, exactly (every owned list
    /// locked at once; see `OwnedTasks::lock_all`): `active_tasks` may read 0 while
    /// tasks that spawn their successors keep one alive at every moment.
    pub(crate) fn has_active_tasks(&self) -> bool {
        let locked: Vec<_> = self.pools.iter().map(|p| p.owned.lock_all()).collect();
        locked.iter().any(|l| l.len() > 0)
    }
}

/// A set of worker threads running async tasks, with work stealing between them.
///
/// Dropping the runtime stops the workers and drops the future of every task that has
/// not finished (their `JoinHandle`s then report cancellation). `WEFT_STATS=1` prints
/// the scheduler statistics at that point.
///
/// A suspended fiber is unwound (its locals dropped, as a panic would drop them) by its
/// home worker, on that worker's thread, as the worker leaves its loop: before the
/// thread's `on_thread_stop` callback and its thread-locals' destructors, so a fiber
/// that holds a reference into a thread-local across a wait still finds it alive. A
/// worker that is running a task when the runtime is dropped (also the worker the
/// runtime is dropped on, from inside one of its own tasks) does so once that task's
/// poll returns. See [`shutdown_timeout`](Self::shutdown_timeout) for a worker that
/// never comes back.
///
/// The drop blocks the thread it runs on until the workers have left (a fiber that
/// drops a runtime does not suspend meanwhile). Dropped inside a task or fiber of
/// *another* runtime, it therefore holds that runtime's worker: if a cancelled task's
/// `Drop` here waits for something only that worker can run, the drop never returns
/// (a known limit, `tests/review_s31c.rs`); drop such a runtime from a plain thread,
/// or from `spawn_blocking`.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let h = rt.spawn(async { 40 + 2 });
/// assert_eq!(rt.block_on(h).unwrap(), 42);
/// ```
pub struct Runtime {
    handle: Handle,
    exits: std::sync::Arc<Exits>,
    /// The base workers' threads, with their pool (its place in `Inner::pools`) and
    /// index.
    threads: Vec<(usize, usize, std::thread::JoinHandle<()>)>,
    print_stats: bool,
}

/// Count of worker threads that have not finished, for timed shutdown.
struct Exits {
    running: Mutex<usize>,
    cv: Condvar,
}

thread_local! {
    /// The `Exits` that counts this thread in (a worker thread's, for its whole life,
    /// hooks included): a shutdown called here does not wait for its own thread.
    static COUNTED_IN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Exits {
    /// Whether this thread is one the count includes.
    fn counts_this_thread(self: &std::sync::Arc<Self>) -> bool {
        COUNTED_IN
            .try_with(|c| c.get() == std::sync::Arc::as_ptr(self) as usize)
            .unwrap_or(false)
    }
}

impl Runtime {
    /// A runtime with the default configuration ([`Builder::new`]).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert!(rt.stats().num_workers >= 1);
    /// ```
    pub fn new() -> io::Result<Runtime> {
        Builder::new().build()
    }

    pub(crate) fn start(b: &Builder) -> io::Result<Runtime> {
        let workers = b.resolved_workers()?;
        let verbose = env::flag("WEFT_VERBOSE");
        let print_stats = env::flag("WEFT_STATS");
        let interactive = b.resolved_interactive();
        if verbose {
            eprintln!(
                "weft: starting runtime: {workers} workers named {}-N, {} interactive, up to {} \
                 blocking threads, budget {} polls/tick, local queue {} slots, global batch {}",
                b.thread_name,
                interactive.as_ref().map_or(0, |&n| n),
                b.max_blocking_threads,
                crate::scheduler::worker::BUDGET,
                crate::scheduler::queue::CAPACITY,
                crate::scheduler::worker::GLOBAL_BATCH,
            );
        }
        let interactive = interactive?;
        let max_blocking_threads = b.resolved_max_blocking_threads()?;
        b.check_thread_name()?;
        let stall = b.resolved_stall_report();
        let extra = [
            b.resolved_extra_workers(workers),
            b.resolved_extra_workers(interactive),
        ];
        let temp_on = extra[0] > 0 || (interactive > 0 && extra[1] > 0);
        let watch = stall.is_some() || temp_on;
        let lifo_rescue = sysmon::rescues_quickly(stall, temp_on);
        let debug = env::flag("WEFT_DEBUG_SYSMON");
        let doorbell = Arc::new(if watch {
            crate::scheduler::idle::Doorbell::lazy()
        } else {
            crate::scheduler::idle::Doorbell::disabled()
        });
        let exits = std::sync::Arc::new(Exits {
            running: Mutex::new(0),
            cv: Condvar::new(),
        });
        let threads = std::sync::Arc::new(WorkerThreads {
            prefixes: [
                b.thread_name.clone(),
                format!("{}-interactive", b.thread_name),
            ],
            start: b.on_thread_start.clone(),
            stop: b.on_thread_stop.clone(),
            exits: exits.clone(),
            temp_started: std::sync::atomic::AtomicU64::new(0),
            temp_retired: std::sync::atomic::AtomicU64::new(0),
            debug,
        });
        let mut locals = Vec::new();
        // No I/O driver under loom: a model's threads cannot sleep in `epoll_wait`.
        let io = if cfg!(loom) {
            None
        } else {
            Some(crate::driver::io::IoDriver::new()?)
        };
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let time = Arc::new(Driver::with_io(io));
            let mut pools = Vec::new();
            for (k, (pool, n)) in [(Pool::Default, workers), (Pool::Interactive, interactive)]
                .into_iter()
                .enumerate()
            {
                if n > 0 {
                    let slots = crate::scheduler::Slots {
                        extra: extra[k],
                        keep_alive: b.extra_worker_keep_alive,
                        doorbell: doorbell.clone(),
                        lifo_rescue,
                    };
                    let (shared, l) =
                        Shared::with_slots(n, slots, pool, weak.clone(), time.clone());
                    locals.push((shared.clone(), l));
                    pools.push(shared);
                }
            }
            let enter_weak = weak.clone();
            let blocking = Arc::new(BlockingPool::new(
                max_blocking_threads,
                b.blocking_keep_alive,
                format!("{}-blocking", b.thread_name),
                Box::new(move || {
                    if let Some(inner) = enter_weak.upgrade() {
                        handle::enter_for_thread(Handle { inner });
                    }
                }),
            ));
            Inner {
                pools,
                blocking,
                time,
                sysmon: watch
                    .then(|| Arc::new(sysmon::Sysmon::new(stall, debug, doorbell.clone()))),
                threads,
                closing: Default::default(),
            }
        });
        // Tasks spawned before a worker first publishes the coarse clock are stamped
        // with it: now, not the process's origin.
        crate::base::clock::refresh_coarse(crate::base::clock::now_ns());
        {
            let mut started = LATEST.lock().unwrap_or_else(|e| e.into_inner());
            // Dropped runtimes are forgotten here too: a `Weak` keeps its runtime's
            // allocation, and a program that builds runtime after runtime without ever
            // asking for the latest grew by one each (found in review).
            started.retain(|w| w.strong_count() > 0);
            started.push(Arc::downgrade(&inner));
        }
        let mut rt = Runtime {
            handle: Handle { inner },
            exits: exits.clone(),
            threads: Vec::new(),
            print_stats,
        };
        if rt.handle.inner.sysmon.is_some() {
            // Started by the first worker to run (see `idle::Doorbell`), not here. (The
            // doorbell lives in the pools: it holds the runtime weakly.)
            let weak = Arc::downgrade(&rt.handle.inner);
            let name = format!("{}-sysmon", b.thread_name);
            doorbell.set_start(Box::new(move || {
                let Some(mon) = weak.upgrade().and_then(|i| i.sysmon.clone()) else {
                    return;
                };
                let weak = weak.clone();
                let started = std::thread::Builder::new()
                    .name(name.clone())
                    .spawn(move || sysmon::run(weak, mon));
                if let Err(e) = started {
                    eprintln!("weft: could not start the sysmon thread: {e}");
                }
            }));
        }
        let threads = rt.handle.inner.threads.clone();
        for (k, (shared, pool_locals)) in locals.into_iter().enumerate() {
            for (index, parts) in pool_locals.into_iter().enumerate() {
                // `rt` drops on an error and stops the workers already started.
                if let Some(t) = threads.spawn(shared.clone(), index, parts)? {
                    rt.threads.push((k, index, t));
                }
            }
        }
        if env::flag("WEFT_DEBUG_DEADLOCK") {
            let weak = Arc::downgrade(&rt.handle.inner);
            dump::watch_deadlock(weak, format!("{}-deadlock", b.thread_name))?;
        }
        Ok(rt)
    }

    /// Spawns a task.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert_eq!(rt.spawn(async { 9 }).join().unwrap(), 9);
    /// ```
    pub fn spawn<F>(&self, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(future)
    }

    /// Makes this runtime the current one of this thread until the guard is dropped
    /// (see [`Handle::enter`]).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let _guard = rt.enter();
    /// assert!(weft::Handle::try_current().is_ok());
    /// ```
    pub fn enter(&self) -> EnterGuard<'_> {
        self.handle.enter()
    }

    /// A handle for spawning from other threads.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.handle().clone();
    /// std::thread::spawn(move || h.spawn(async {}).join().unwrap()).join().unwrap();
    /// ```
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Spawns a task onto the given pool.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn_on(weft::Pool::Interactive, async { 1 });
    /// assert_eq!(h.join().unwrap(), 1);
    /// ```
    pub fn spawn_on<F>(&self, pool: Pool, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn_on(pool, future)
    }

    /// Runs a blocking closure on the blocking pool; see [`spawn_blocking`].
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn_blocking(|| std::fs::metadata("/").is_ok());
    /// assert!(h.join().unwrap());
    /// ```
    pub fn spawn_blocking<F, R>(&self, f: F) -> JoinHandle<R>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.handle.spawn_blocking(f)
    }

    /// Scheduler statistics so far.
    ///
    /// ```
    /// let rt = weft::Builder::new().worker_threads(2).build().unwrap();
    /// rt.spawn(async {}).join().unwrap();
    /// let s = rt.stats();
    /// assert_eq!(s.num_workers, 2);
    /// assert!(s.total_spawned >= 1);
    /// ```
    pub fn stats(&self) -> Stats {
        self.handle.stats()
    }

    /// Shuts down, waiting at most `timeout` for the workers to finish the polls they
    /// are in. Tasks not running are cancelled at once; a worker stuck in a task that
    /// never returns is left behind (detached) after the timeout, and the task it runs
    /// is cancelled if it ever returns to the scheduler.
    ///
    /// `timeout` bounds the wait for the workers and the blocking threads, not the
    /// cancellations before it: a cancelled task's future is dropped on this thread,
    /// and a destructor that blocks (waits on a lock, joins a thread) delays the
    /// return by as long as it blocks, before the timeout starts.
    ///
    /// The suspended fibers of a worker left behind are *leaked*, not unwound: only
    /// their worker's thread may unwind them (their stacks may point into its
    /// thread-locals, which its stuck task may be using), so their stacks stay mapped
    /// and their locals are never dropped. Their `JoinHandle`s still report
    /// cancellation. A fiber that the stuck worker is itself running is unwound there
    /// if its poll ever returns.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// rt.spawn(std::future::pending::<()>());
    /// rt.shutdown_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn shutdown_timeout(mut self, timeout: Duration) {
        let _ = self.shutdown(Some(timeout));
    }

    /// Returns how many of the tasks it cancelled `shutdown_graceful` had marked.
    fn shutdown(&mut self, timeout: Option<Duration>) -> usize {
        let inner = self.handle.inner.clone();
        // Dropped on a fiber: the fiber must not suspend in the middle of this
        // (`current::stay_resumed`); its waits here go as a task's would. On one of this
        // runtime's own fibers, this shutdown would cancel it there; on another
        // runtime's, a cancellation of that fiber meanwhile (an abort, its runtime's
        // drop) would cut this one short, leaving this runtime's tasks behind (both
        // found in review).
        let _stay = crate::task::current::stay_resumed();
        // What this thread cancels (tasks' futures, fibers with no home) is dropped in
        // the runtime's context, as a worker's abort drops it: a `Drop` that looks for
        // its runtime (`Handle::current`, `weft::spawn`) finds it, shutting down, and
        // did not panic (found in review; tokio drops them in its context too).
        let entered_handle = self.handle.clone();
        let _entered = entered_handle.enter();
        if let Some(mon) = &inner.sysmon {
            mon.stop();
        }
        let mut marked = 0;
        for p in &inner.pools {
            marked += p.begin_shutdown();
        }
        // Tasks, fibers and threads blocked on this runtime's sockets wake with an
        // error.
        inner.time.shutdown_io();
        // So do waits that began on it for what no runtime owns (a signal).
        inner.closing.close();
        // Dropped from inside one of its own tasks: that worker cannot be waited for;
        // it leaves its loop when the current poll returns.
        let (on_own_worker, in_job) = worker::with_current(|c| match c {
            Some(c) if inner.pools.iter().any(|p| c.belongs_to(p)) => (true, c.in_job()),
            _ => (false, false),
        });
        // Or from a hook of one of its worker threads, counted in until it exits
        // (found in review: a retiring temporary worker's stop hook that dropped the
        // runtime waited for its own thread for ever).
        let own_left = usize::from(on_own_worker || self.exits.counts_this_thread());
        // A timeout too long to be a deadline (`Duration::MAX`) means no deadline.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let (stopped, all_done, waiting) = self.wait_for_workers(own_left, in_job, deadline);
        if stopped {
            let me = std::thread::current().id();
            for (pool, index, t) in self.threads.drain(..) {
                // A worker left waiting for a fork-join job leaves its loop after it.
                if t.thread().id() != me && !waiting.contains(&(pool, index)) {
                    let _ = t.join();
                }
            }
        } else {
            eprintln!("weft: shutdown timed out; leaving workers stuck in tasks behind");
            self.threads.clear();
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if !inner.blocking.shutdown(left) {
            eprintln!("weft: shutdown timed out; leaving blocking threads behind");
        }
        for p in &inner.pools {
            // Fork-join callers still blocked on injected jobs get them run here.
            p.run_injected_jobs_and_close();
            // Anything spawned or woken while the workers stopped.
            marked += p.cancel_all();
            // Each worker unwound the fibers tied to it as it left. Those of a worker
            // still stuck in a task are leaked: their stacks may be unwound only on
            // its thread, which may still use what they point to. The worker this
            // thread runs on (dropped from inside one of its tasks) unwinds its own
            // when the current poll returns.
            let own = worker::with_current(|c| c.filter(|c| c.belongs_to(p)).map(|c| c.index()));
            let k = inner.pools.iter().position(|q| Arc::ptr_eq(q, p));
            for i in (0..p.num_slots()).filter(|&i| Some(i) != own) {
                // A worker left waiting for a fork-join job unwinds its own as it
                // leaves, as this thread's does.
                if !k.is_some_and(|k| waiting.contains(&(k, i))) {
                    p.close_set_aside(i, false);
                }
            }
            debug_assert!(
                !all_done || p.owned.is_empty(),
                "weft: a task survived shutdown"
            );
        }
        // Nothing fires the wheel any more: sleeps still pending (a plain thread's
        // `block_on` of one, say) go on on the alarm thread.
        inner.time.shutdown_timers();
        if self.print_stats {
            eprint!("{}", inner.stats());
        }
        marked
    }

    /// Waits until every worker but this thread's own (`own_left`: 1 when dropped
    /// from inside one of its tasks) has left its loop, or `deadline` passes. Returns
    /// whether they left, whether all did (this thread's worker too), and the workers
    /// that were not waited for (pool, index).
    ///
    /// Dropped inside a fork-join job (`in_job`), a worker waiting in a `join` for its
    /// thief or in a `scope` for its jobs may be waiting for this very job, which ends
    /// only after this returns: each waited for the other for ever (found in review).
    /// So a worker *blocked* in such a wait (`Remote::fork_join_waits`; not while it
    /// runs a job to help, `Core::helping`) is not waited for: like this thread's own,
    /// it leaves its loop when its wait and its poll end, and unwinds its fibers then.
    ///
    /// This returns once every other running worker is blocked so (a blocked worker is
    /// running: counted in `running`, which cannot fall while the lock is held, so the
    /// blocked ones are at most the running ones). Then every chain of waits ends at
    /// this thread's job: a blocked worker waits for a job that someone runs, and that
    /// one is blocked in turn. A worker blocked for a job that a worker in plain user
    /// code runs is waited for through that one. Entering such a wait signals nobody,
    /// so the count is read again every millisecond, and the same set must be seen at
    /// two looks in a row: a single look could catch a wait whose job has just ended
    /// before its worker woke, or a helper between two jobs (found in review: a worker
    /// running its own scope's jobs in the scope's wait was not waited for).
    fn wait_for_workers(
        &self,
        own_left: usize,
        in_job: bool,
        deadline: Option<Instant>,
    ) -> (bool, bool, Vec<(usize, usize)>) {
        let cv = &self.exits.cv;
        let mut running = self.exits.running.lock().unwrap();
        if !in_job {
            let others_running = |n: &mut usize| *n > own_left;
            running = match deadline {
                None => cv.wait_while(running, others_running).unwrap(),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    cv.wait_timeout_while(running, left, others_running)
                        .unwrap()
                        .0
                }
            };
            return (*running <= own_left, *running == 0, Vec::new());
        }
        let inner = &self.handle.inner;
        let own = worker::with_current(|c| {
            c.and_then(|c| {
                let k = inner.pools.iter().position(|p| c.belongs_to(p))?;
                Some((k, c.index()))
            })
        });
        let mut seen: Option<Vec<(usize, usize)>> = None;
        loop {
            let waiting: Vec<(usize, usize)> = inner
                .pools
                .iter()
                .enumerate()
                .flat_map(|(k, p)| {
                    (0..p.num_slots())
                        .filter(move |&i| {
                            p.remotes[i]
                                .fork_join_waits
                                .load(std::sync::atomic::Ordering::SeqCst)
                                > 0
                        })
                        .map(move |i| (k, i))
                })
                .filter(|&w| Some(w) != own)
                .collect();
            if *running <= own_left + waiting.len() {
                if *running <= own_left || seen.as_ref() == Some(&waiting) {
                    return (true, *running == 0, waiting);
                }
                seen = Some(waiting);
            } else {
                seen = None;
            }
            let mut slice = Duration::from_millis(1);
            if let Some(d) = deadline {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return (false, false, Vec::new());
                }
                slice = slice.min(left);
            }
            running = cv.wait_timeout(running, slice).unwrap().0;
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.handle.inner.pools[0].is_shutdown() {
            let _ = self.shutdown(None);
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.handle.inner.pools[0].num_workers())
            .finish_non_exhaustive()
    }
}
