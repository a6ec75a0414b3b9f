//! A worker's private state and its run loop (spec 001).
//!
//! Search order: every 16 polls while timers are pending, due timers; every
//! `global_interval` polls the injection queue, then the fibers handed to this worker
//! and its own fibers, first (fairness); then the LIFO slot (at most
//! [`MAX_LIFO_POLLS`] in a row), the local queue, this worker's fibers (the
//! pinned-fiber queue, refilled from the worker's inbox when empty), fibers handed to
//! it before they started (see [`Core::fewer_fibers_elsewhere`]), the injection queue,
//! the tasks that yielded, fork-join jobs left on this worker's deque, jobs injected
//! from outside the pool, then stealing from peers as a searcher (a peer's oldest
//! fork-join job, then half its task queue), and finally the sleep transition of
//! [`super::idle`], which re-checks before it parks.
//!
//! The loop is re-entrant: it runs on several stacks of the worker's thread. A task
//! that blocks in `JoinHandle::join`, `block_on` or `wait` on a worker sets the loop
//! stack it runs on aside, and the worker goes on with [`Core::run_until`] on another
//! (see [`super::stacks`]); fork-join joins help in place. All state is in `Cell`s and
//! no borrow is held across a poll or a stack switch.
//!
//! (About 730 lines of code: the run loop, the search order and the local queue
//! operations are the path of every poll and stay in one module, so in one codegen
//! unit; the fork-join frames, the park path and the dispatcher of set-aside waits are
//! in `worker/`.)

use std::cell::Cell;
use std::collections::VecDeque;
use std::ptr::NonNull;
use std::time::Duration;

use std::sync::Arc as StdArc;

use corosensei::{Coroutine, CoroutineResult, Yielder};

use super::clock;
use super::queue::Local;
use super::stacks::{Look, LoopCtx, LoopStack, Stacks, WaitSignal, Yielded};
use super::{cancel_queued, Remote, Shared, WorkerParts};
use crate::base::AtomicUsize;
use crate::base::{fence, Arc};
use crate::scheduler::deque::{self, Steal};
use crate::scheduler::job::{Frame, Job, JobRef};
use crate::scheduler::latch::OnceLatch;
use crate::task::current;
use crate::task::raw::Notified;

mod dispatch;
mod frames;
mod park;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// Fork-join heartbeat: joins between clock reads start at `HEARTBEAT_JOINS` and adapt
/// (between the MIN and MAX) so that a check falls about every half `HEARTBEAT`, the
/// period after which the oldest private frame may be shown to hungry workers. A clock
/// read costs ~23 ns here: with a fixed 64, a 1,023-node tree sum (3.3 µs) read it 16
/// times, about a tenth of its time; with coarse joins, a fixed large count would check
/// too late.
const HEARTBEAT_JOINS: u32 = 64;
const MIN_HEARTBEAT_JOINS: u32 = 8;
const MAX_HEARTBEAT_JOINS: u32 = 1024;
const HEARTBEAT: Duration = Duration::from_micros(100);
/// With this many private frames waiting (the oldest, largest pieces), further joins
/// run as plain calls, except the one on which the heartbeat is due (granularity control, as in
/// chili). A computation starts with one: a join costs a few nanoseconds more with a
/// frame than without, and until another worker takes part nobody needs a second.
/// Once the heartbeat shares work with a hungry worker it keeps three, so the next
/// promotion still finds a large piece (the oldest of three frames, not the one frame
/// made right after the previous promotion, deep in the recursion).
const FRAMES_WHILE_ALONE: u32 = 1;
const FRAMES_WHILE_SHARING: u32 = 3;

/// Polls between looks at the timer wheel while timers are pending (a clock read).
const TIMER_CHECK_POLLS: u32 = 16;

/// Yields of a busy wait that found nothing else ready between looks at the sockets (a
/// system call; the timers are looked at every time, a load while none is due).
const IO_CHECK_YIELDS: u32 = 64;

/// Consecutive polls from the LIFO slot before its task is moved to the back of the
/// queue, so a pair of tasks waking each other cannot starve the rest.
pub(crate) const MAX_LIFO_POLLS: u32 = 3;
/// Polls per tick; at the end of a tick the adaptive interval is recomputed.
pub(crate) const BUDGET: u32 = 128;
/// Largest batch taken from the injection queue at once.
pub(crate) const GLOBAL_BATCH: usize = 32;
const MIN_GLOBAL_BATCH: usize = 4;
/// How often a worker blocked in [`Core::block_until`] without the timer driver
/// offers again to hold it.
const BLOCKED_DRIVER_RECHECK: Duration = Duration::from_millis(10);

/// How many more fibers a worker must have tied to it than the base worker with the
/// fewest before a fiber about to start there is handed over instead (see
/// [`Core::fewer_fibers_elsewhere`]).
const START_SLACK: usize = 2;
/// How many base workers (this one perhaps among them) [`Core::fewer_fibers_elsewhere`]
/// looks at, from a random one, on a larger pool.
const PLACEMENT_LOOKS: usize = 4;
/// A loop stack is as large as a worker thread's own stack: `RUST_MIN_STACK` if set
/// (as std reads it for spawned threads), else 2 MiB; the tasks it polls expect no less
/// (found in review: with `RUST_MIN_STACK` raised, a task that fit on the worker's stack
/// overflowed a fixed 2 MiB loop stack).
fn loop_stack_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        std::env::var("RUST_MIN_STACK")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(2 * 1024 * 1024)
    })
}
/// The injection queue should wait at most about this long for a busy worker.
const TARGET_LATENCY: Duration = Duration::from_millis(1);
const MIN_INTERVAL: u32 = 8;
const MAX_INTERVAL: u32 = 255;
/// Fewest polls that make a task-time sample.
const MIN_SAMPLE_POLLS: u32 = 8;
/// Assumed task length before anything was measured (interval 20).
const INITIAL_AVG_NS: f64 = 50_000.0;

pub(crate) struct Core {
    index: usize,
    /// Unique for the life of the process (never 0): which worker loop a fiber's home is
    /// (see [`current_uid`]).
    uid: u64,
    shared: Arc<Shared>,
    /// `shared.remotes[index]`, reached without the bounds check and two loads on every
    /// poll's path (see [`Core::remote`]).
    remote: NonNull<Remote>,
    /// This worker's parker (a copy of `shared.remotes[index].parker`).
    parker: Arc<crate::base::park::Parker>,
    local: Local,
    /// The owner's end of this worker's fork-join deque.
    jobs: deque::Worker<Job>,
    /// Newest and oldest private fork-join frames (see `forkjoin`).
    private_newest: Cell<*const Frame>,
    private_oldest: Cell<*const Frame>,
    /// Private frames now linked.
    private_len: Cell<u32>,
    /// The frame of the outermost join in progress, when it began, and an EWMA of how
    /// long outermost joins last on this worker (infinite until measured).
    outermost: Cell<*const Frame>,
    /// (Times are [`clock::now_ns`] readings.)
    outermost_start: Cell<u64>,
    avg_outermost_ns: Cell<f64>,
    /// Private frames to keep before joins run as plain calls (see
    /// `FRAMES_WHILE_ALONE`).
    frames_before_plain: Cell<u32>,
    /// `scope` bodies in progress on this worker.
    scopes: Cell<u32>,
    /// Fork-join jobs running on this worker's thread (see [`Core::join_mark`]).
    jobs_running: Cell<u32>,
    /// Joins until the next heartbeat check.
    joins_until_check: Cell<u32>,
    last_heartbeat: Cell<u64>,
    /// The adapted number of joins between heartbeat checks, and the last check.
    heartbeat_joins: Cell<u32>,
    last_check: Cell<u64>,
    lifo: Cell<Option<Notified>>,
    lifo_polls: Cell<u32>,
    /// Tasks that yielded: they run again once the local and global queues are empty,
    /// so a worker full of yielding tasks still drains the injection queue promptly,
    /// or at the next fairness check, whichever comes first.
    deferred: Cell<Vec<Notified>>,
    /// Started fibers tied to this worker that are ready to run: taken from the inbox,
    /// evicted from the LIFO slot, or yielded. Never stealable.
    pinned: Cell<VecDeque<Notified>>,
    /// Polls since the worker started; drives the global-queue interval, and a tick
    /// ends every `BUDGET` of them.
    tick: Cell<u32>,
    global_interval: Cell<u32>,
    avg_task_ns: Cell<f64>,
    tick_start: Cell<u64>,
    /// `tick` when the measurement began at `tick_start` (a park restarts it): the
    /// polls since then are the difference, with nothing counted per poll.
    sample_tick: Cell<u32>,
    task_time_measured: Cell<bool>,
    rng: Cell<u64>,
    searching: Cell<bool>,
    /// Woken by a producer and not yet found work (a spurious wake if it parks again).
    woken: Cell<bool>,
    /// Set while parking: wakes on this thread then go to the injection queue, not to
    /// a LIFO slot the worker is about to stop looking at.
    transitioning_to_park: Cell<bool>,
    /// Set while this worker, holding the drivers, sleeps in `epoll_wait` and
    /// dispatches what it read: wakes on this thread then go to its own queues after
    /// all (it is awake and runs them next), instead of claiming another worker with a
    /// futex wake for each I/O event.
    dispatching_io: Cell<bool>,
    /// The loop stacks that blocked waits set aside, and spare ones (see
    /// [`super::stacks`]).
    stacks: Stacks,
    /// `run_until` loops in progress on this thread (1: only the worker's own loop,
    /// nothing below it waits).
    loop_depth: Cell<u32>,
    /// A temporary worker decided to retire (see `park`): the loops end.
    retiring: Cell<bool>,
    /// Blocked waits that yielded (see [`Core::yield_wait`]): woken once this worker
    /// has run something else, or before it parks. `yielding` says whether any is.
    yielders: Cell<Vec<StdArc<WaitSignal>>>,
    yielding: Cell<bool>,
    /// Yields of waits that found nothing else ready (see
    /// [`Core::fire_due_for_a_busy_wait`]): every [`IO_CHECK_YIELDS`]th looks at the
    /// sockets.
    busy_yields: Cell<u32>,
}

thread_local! {
    static CURRENT: Cell<*const Core> = const { Cell::new(std::ptr::null()) };
    /// One more than the plain joins this thread may make before one must take the
    /// slow path (0 or 1: none). Set by the worker's join code (`Core::grant_plain`)
    /// only while its core allows plain joins; holding the countdown in a thread-local
    /// of its own makes the plain path one load, one decrement and one store, with no
    /// look at the core (every instruction counts in a memory-bound recursion: fewer
    /// per node let the processor overlap more nodes' cache misses).
    static PLAIN_JOINS: Cell<i32> = const { Cell::new(0) };
}

/// This thread's `CURRENT` core pointer, read afresh: every access to it goes through
/// here, never inlined. A fiber that migrates (`fiber_migration`) may resume on another
/// thread inside any function that waits, and a compiler computes a thread-local's
/// address once per function and reuses it after a call: inlined, a read after the
/// wait would be of the first thread's core (review s34: a lock's spin read another
/// worker's queues through it and tore them). A call computes it afresh.
#[inline(never)]
fn current_cell<R>(f: impl FnOnce(&Cell<*const Core>) -> R) -> R {
    CURRENT.with(f)
}

/// This thread's `PLAIN_JOINS`, inlined: the one thread-local weft reads without a call,
/// because a call on the plain join path made fork-join 1.25-1.6x slower (`fib32_1t`
/// 8.3 against 5.3 ms, `tree_1023`; session 34), and so did an atomic in place of the
/// `Cell` (8.1 ms). A migrating fiber's function that joins, waits and joins again could
/// reach the previous thread's countdown after a move, which is why
/// `fiber_migration`'s contract keeps fork-join out of functions that wait.
#[inline(always)]
fn plain_joins<R>(f: impl FnOnce(&Cell<i32>) -> R) -> R {
    PLAIN_JOINS.with(f)
}

/// Consumes one plain join of this thread's allowance; false when the next join must
/// take the slow path (no allowance: not a worker, too few private frames, or the
/// heartbeat is due).
#[inline(always)]
pub(crate) fn take_plain_join() -> bool {
    plain_joins(|c| {
        let n = c.get() - 1;
        if n > 0 {
            c.set(n);
            true
        } else {
            false
        }
    })
}

/// The worker core of this thread (null: not a weft worker). The pointer is valid
/// while the caller runs on this thread and does not return to the worker loop's end
/// (see [`with_current`]); the wake path uses it to keep the thread-local read small.
#[inline]
pub(crate) fn current_ptr() -> *const Core {
    current_cell(Cell::get)
}

/// [`current_ptr`] inlined, for fork-join's join only: nothing there waits in a way
/// that suspends a fiber (a fiber inside a join may not suspend), so no thread change
/// can come between the read and its use, and the call cost fork-join 15-20%
/// (`fib32_1t`, session 34).
#[inline(always)]
pub(crate) fn current_ptr_in_join() -> *const Core {
    CURRENT.with(Cell::get)
}

/// Source of [`Core::uid`]. A plain atomic under loom too: it only hands out numbers.
static NEXT_UID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The [`uid`](Core::uid) of the worker loop this thread is in, if any. A fiber's stack
/// may be unwound only where this is its home worker's (see `FiberFuture`'s `Drop`):
/// that is the home thread, inside its worker loop, so before its thread-locals are
/// destroyed. Readable at any time, thread-local destructors included (`CURRENT` is a
/// const-initialised `Cell` without a destructor).
#[inline]
pub(crate) fn current_uid() -> Option<u64> {
    with_current(|core| core.map(|c| c.uid))
}

/// Runs `f` with the worker core of this thread, if it is a weft worker.
#[inline]
pub(crate) fn with_current<R>(f: impl FnOnce(Option<&Core>) -> R) -> R {
    let p = current_ptr();
    // SAFETY: the pointer is set by `Core::run` for the life of the core on this
    // thread and cleared before the core is dropped; null means "not a worker".
    let core = unsafe { p.as_ref() };
    f(core)
}
/// The next count of joins between heartbeat checks, given that the last `joins` took
/// `took`: aim at a check every half `HEARTBEAT`, growing at most twofold per check
/// (a computation may turn coarser), shrinking at once.
fn adapt_heartbeat(joins: u32, took: Duration) -> u32 {
    let target = HEARTBEAT / 2;
    let next = if took.is_zero() {
        u64::from(joins) * 2
    } else {
        (u64::from(joins) * target.as_nanos() as u64 / took.as_nanos() as u64)
            .min(u64::from(joins) * 2)
    };
    next.clamp(
        u64::from(MIN_HEARTBEAT_JOINS),
        u64::from(MAX_HEARTBEAT_JOINS),
    ) as u32
}

impl Core {
    pub(crate) fn new(index: usize, shared: Arc<Shared>, parts: WorkerParts) -> Core {
        let now = clock::now_ns();
        Core {
            index,
            uid: NEXT_UID.fetch_add(1, Relaxed),
            remote: NonNull::from(&*shared.remotes[index]),
            parker: shared.remotes[index].parker.clone(),
            shared,
            local: parts.local,
            jobs: parts.jobs,
            private_newest: Cell::new(std::ptr::null()),
            private_oldest: Cell::new(std::ptr::null()),
            private_len: Cell::new(0),
            outermost: Cell::new(std::ptr::null()),
            outermost_start: Cell::new(now),
            avg_outermost_ns: Cell::new(f64::INFINITY),
            frames_before_plain: Cell::new(FRAMES_WHILE_ALONE),
            scopes: Cell::new(0),
            jobs_running: Cell::new(0),
            joins_until_check: Cell::new(HEARTBEAT_JOINS),
            last_heartbeat: Cell::new(now),
            heartbeat_joins: Cell::new(HEARTBEAT_JOINS),
            last_check: Cell::new(now),
            lifo: Cell::new(None),
            lifo_polls: Cell::new(0),
            deferred: Cell::new(Vec::new()),
            pinned: Cell::new(VecDeque::new()),
            tick: Cell::new(0),
            global_interval: Cell::new(interval_for(INITIAL_AVG_NS)),
            avg_task_ns: Cell::new(INITIAL_AVG_NS),
            tick_start: Cell::new(now),
            sample_tick: Cell::new(0),
            task_time_measured: Cell::new(false),
            // xorshift needs a non-zero seed.
            rng: Cell::new(
                0x9E37_79B9_7F4A_7C15 ^ (index as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407),
            ),
            searching: Cell::new(false),
            woken: Cell::new(false),
            transitioning_to_park: Cell::new(false),
            dispatching_io: Cell::new(false),
            stacks: Stacks::new(),
            loop_depth: Cell::new(0),
            retiring: Cell::new(false),
            yielders: Cell::new(Vec::new()),
            yielding: Cell::new(false),
            busy_yields: Cell::new(0),
        }
    }

    /// A retired temporary worker's private ends, for the slot's next thread (its
    /// queues are empty: see `retire`).
    pub(crate) fn into_parts(self) -> WorkerParts {
        WorkerParts {
            local: self.local,
            jobs: self.jobs,
        }
    }

    #[inline]
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// This worker loop's process-wide unique id (see [`current_uid`]).
    #[inline]
    pub(crate) fn uid(&self) -> u64 {
        self.uid
    }

    #[inline]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn belongs_to(&self, shared: &Arc<Shared>) -> bool {
        Arc::ptr_eq(&self.shared, shared)
    }

    pub(crate) fn count_spawn(&self) {
        self.counters().spawned.bump(1);
    }

    fn counters(&self) -> &super::stats::WorkerCounters {
        &self.remote().counters
    }

    /// The part of this worker that other threads use.
    #[inline]
    fn remote(&self) -> &Remote {
        // SAFETY: `remote` points into `shared.remotes`, a boxed slice that is never
        // resized and lives as long as `shared`, which this core holds.
        unsafe { self.remote.as_ref() }
    }

    /// The worker thread's main loop: installs the core, runs until shutdown, then
    /// cancels whatever is left in its queues and unwinds the suspended fibers tied to
    /// it, here on its own thread, outside any poll, before the thread's thread-locals
    /// are destroyed (the caller runs `on_thread_stop` and counts the thread as exited
    /// only after this returns).
    ///
    /// Returns true if this is a temporary worker that retired (see `park`): it left
    /// nothing behind, and the caller hands its slot back.
    pub(crate) fn run(&self) -> bool {
        current_cell(|c| c.set(self));
        // A running worker is something for sysmon to watch (the first ring starts it).
        self.shared.doorbell.ring();
        loop {
            // (A loop stack resumed below may be the one that decided to retire.)
            if !self.retiring.get() {
                self.run_until(|| self.stacks.ready().any());
            }
            if self.retiring.get() {
                self.retire();
                current_cell(|c| c.set(std::ptr::null()));
                return true;
            }
            if self.shared.is_shutdown() {
                break;
            }
            // A wait set aside on a loop stack was woken: resume it.
            self.dispatch(None);
        }
        loop {
            // Jobs injected before the pool closed still have callers waiting for them.
            self.run_injected_jobs();
            // What is left in this worker's queues (a shutting-down thread may be
            // waiting for one of them to complete).
            self.drain();
            // Shutdown sets every fiber tied to this worker aside for it before it
            // sets `routed`, then cancels the other tasks before it sets `settled`
            // (see `Shared::begin_shutdown`). A cancelled task's `Drop` may wait
            // meanwhile for one of those fibers (a lock it holds), for a wait set aside
            // here (a lock held across it, a task it joins), or for a timer; and it may
            // route more fibers here. So from `routed` on this worker goes on as its
            // exit below does (found in review: a plain park here hung the drop).
            if self.shared.is_routed() {
                if self.exit_step() {
                    continue;
                }
                if self.shared.is_settled() {
                    break;
                }
                self.exit_block(|| self.shared.is_settled());
                continue;
            }
            // Woken by `begin_shutdown` once routed and once settled, by a fiber set
            // aside for this worker, and by every job injected while shutting down
            // (see `Shared::inject_job`).
            self.parker.park();
        }
        // This worker's fibers first: a wait set aside below may be joining one.
        self.shared.close_set_aside(self.index, true);
        self.finish_stacks();
        self.drain();
        current_cell(|c| c.set(std::ptr::null()));
        false
    }

    /// The end of a temporary worker that decided to retire in `park` (which checked,
    /// after leaving the parked set, that its queues were empty and that no fiber or
    /// set-aside wait is tied to it). Anything that reached its private queues since,
    /// or its inbox, goes where the surviving workers find it; then its spare loop
    /// stacks are freed.
    fn retire(&self) {
        let mut left: Vec<Notified> = self.lifo.take().into_iter().collect();
        left.extend(self.deferred.take());
        // SAFETY: see `pinned_mut`; the deque is moved out before anything runs.
        left.extend(std::mem::take(unsafe { self.pinned_mut() }));
        left.extend(std::iter::from_fn(|| self.local.pop()));
        self.shared.inject_all(left);
        self.shared.rescue_inbox(self.index);
        debug_assert!(
            self.remote().jobs.is_empty(),
            "weft: a retiring worker held jobs"
        );
        self.finish_stacks();
    }

    /// Whether this worker may retire now: it is a temporary one, its own loop is the
    /// only one on its thread (no task below it waits), no wait is set aside, and no
    /// fiber is tied to it (only this thread may run those).
    fn may_retire(&self) -> bool {
        self.shared.is_temporary(self.index)
            && self.loop_depth.get() == 1
            && !self.stacks.has_set_aside()
            && self.remote().homed_fibers.load(SeqCst) == 0
            && self.pinned_is_empty()
            && self.remote().jobs.is_empty()
    }

    /// Counts a fiber that just tied itself to this worker; the returned counter is
    /// decremented when the fiber ends (see `may_retire`).
    pub(crate) fn home_fiber(&self) -> StdArc<std::sync::atomic::AtomicUsize> {
        self.reserve_home(self.index)
    }

    /// Where a fiber about to start on this worker should start instead: the base
    /// worker with the fewest fibers tied to it, when this one has at least
    /// [`START_SLACK`] more. `None`: start here.
    ///
    /// A started fiber never moves (the thread rule), so where it starts is where all
    /// its work is done. Fibers that start one at a time on one worker (a server's
    /// per-connection fibers, spawned by its accept loop and started before the next
    /// comes) stayed unevenly tied for their whole lives: an echo server of 100
    /// connections on two workers ran at 9.5-10 us a round trip with its fibers tied
    /// 50/50, and 15-18 us at 65/35 or 22/78, the less loaded worker idle for much of
    /// the run, woken by every readiness event it held the driver for.
    ///
    /// The fiber goes to the chosen worker's `handed` queue, not its inbox: it is not
    /// tied to it yet, and a worker stuck in a poll (perhaps waiting for that very
    /// fiber: a thread-blocking wait, a `Drop` waiting during a panic) has sysmon move
    /// its handed fibers to the injection queue. So there is no hand-off where no
    /// sysmon finds a stuck worker quickly (`lifo_rescue`), and none to a worker
    /// already marked stalled.
    pub(crate) fn fewer_fibers_elsewhere(&self) -> Option<usize> {
        let mine = self.remote().homed_fibers.load(Relaxed);
        if mine < START_SLACK || !self.shared.lifo_rescue {
            return None;
        }
        // Every fiber start on a loaded worker comes here: on a large pool, a few peers
        // from a random one (each count is a line its worker writes at every start and
        // end of a fiber), which still evens the counts out.
        let n = self.shared.num_workers();
        let (start, looks) = if n > PLACEMENT_LOOKS {
            (self.next_rand() as usize % n, PLACEMENT_LOOKS)
        } else {
            (0, n)
        };
        let mut best: Option<(usize, usize)> = None;
        for k in 0..looks {
            let i = (start + k) % n;
            let r = &self.shared.remotes[i];
            if i == self.index || r.stalled.load(Relaxed) {
                continue;
            }
            let n = r.homed_fibers.load(Relaxed);
            if best.is_none_or(|(_, b)| n < b) {
                best = Some((i, n));
            }
        }
        best.filter(|&(_, n)| n + START_SLACK <= mine)
            .map(|(i, _)| i)
    }

    /// Counts a fiber on base worker `i` before it starts there (handed over by
    /// [`fewer_fibers_elsewhere`](Self::fewer_fibers_elsewhere)'s choice), so that the
    /// next choices see it; the fiber keeps the counter as
    /// [`home_fiber`](Self::home_fiber)'s if it does start there.
    pub(crate) fn reserve_home(&self, i: usize) -> StdArc<std::sync::atomic::AtomicUsize> {
        let c = &self.shared.remotes[i].homed_fibers;
        c.fetch_add(1, SeqCst);
        c.clone()
    }

    /// Whether `c` is this worker's count of tied fibers (one reserved here by
    /// [`reserve_home`](Self::reserve_home)).
    pub(crate) fn is_home_counter(&self, c: &StdArc<std::sync::atomic::AtomicUsize>) -> bool {
        StdArc::ptr_eq(c, &self.remote().homed_fibers)
    }

    /// Runs tasks until `done()` holds or the runtime shuts down.
    /// Generic over `done` so that the worker's own loop (`|| false`) checks nothing.
    pub(crate) fn run_until(&self, done: impl Fn() -> bool) {
        self.loop_depth.set(self.loop_depth.get() + 1);
        loop {
            if done() || self.shared.is_shutdown() {
                break;
            }
            if let Some(task) = self.next_task() {
                self.run_task(task);
            } else if let Some(job) = self.pop_job() {
                // Left on our deque by scope spawns of jobs that ran here.
                self.run_job(job);
            } else if let Some(job) = self.shared.pop_injected_job() {
                self.run_job(job);
            } else {
                match self.steal_work() {
                    Some(Work::Task(task)) => self.run_task(task),
                    Some(Work::Job(job)) => self.run_job(job),
                    None => {
                        // Nothing else to run: a wait that yielded goes on now, unless
                        // what came due meanwhile gave this worker something to run
                        // first (nobody else may fire it: this worker does not park).
                        if self.yielding.get() {
                            if !self.fire_due_for_a_busy_wait() {
                                self.wake_yielders();
                            }
                            continue;
                        }
                        self.park(&done);
                        if self.retiring.get() {
                            break;
                        }
                        continue;
                    }
                }
            }
            // Something else ran: the waits that yielded for it go on.
            self.wake_yielders();
        }
        self.loop_depth.set(self.loop_depth.get() - 1);
        self.leave_searching();
    }

    /// Runs a fork-join job forked by another thread.
    fn run_job(&self, job: JobRef) {
        self.woken.set(false);
        self.leave_searching();
        self.counters().jobs_run.bump(1);
        crate::scheduler::job::execute(job);
    }

    /// Whether the LIFO slot or the local queue holds a task.
    fn has_local_work(&self) -> bool {
        let lifo = self.lifo.take();
        let in_lifo = lifo.is_some();
        self.lifo.set(lifo);
        in_lifo || !self.local.is_empty()
    }

    /// Whether a task is ready to run on this worker: what a spinning wait asks before
    /// it keeps the worker (`fiber::wait::Backoff`). Yielded tasks count: they wait
    /// only behind the queues, and a task whose wake came while it ran (a fiber whose
    /// partner completed its wait during its spin) is rescheduled as one. Left out,
    /// such a task was invisible to a fiber spinning for what it would send: the
    /// spinner kept the worker for its whole spin (tens of us) while the other worker
    /// idled (`fibers_bounded0_mpsc`: 20-40 us a message in such runs, half the time
    /// in `Backoff::snooze`, the rest in the idle worker's park spin).
    pub(crate) fn has_ready_work(&self) -> bool {
        // The LIFO slot first, where a fiber's partner woken on this worker waits (a
        // blocking channel operation asks before it spins), and each place looked at
        // only if those before it are empty: taking a queue out of its `Cell` and
        // putting it back costs a few stores and a drop.
        let lifo = self.lifo.take();
        let in_lifo = lifo.is_some();
        self.lifo.set(lifo);
        if in_lifo || !self.local.is_empty() {
            return true;
        }
        let pinned = self.pinned.take();
        let has_pinned = !pinned.is_empty();
        self.pinned.set(pinned);
        if has_pinned {
            return true;
        }
        let deferred = self.deferred.take();
        let has_deferred = !deferred.is_empty();
        self.deferred.set(deferred);
        has_deferred
            || !self.inbox().is_empty()
            || !self.handed().is_empty()
            || !self.shared.inject.is_empty()
    }

    /// Pushes a job onto this worker's deque, where thieves can take it, and wakes a
    /// sleeper if the deque was empty.
    pub(crate) fn push_job(&self, job: JobRef) {
        if self.jobs.push(job.as_ptr()) {
            self.shared.notify_parked();
        }
    }

    /// The parker this worker sleeps on (also for fork-join latches).
    #[inline]
    pub(crate) fn parker(&self) -> &Arc<crate::base::park::Parker> {
        &self.parker
    }

    fn run_task(&self, task: Notified) {
        self.woken.set(false);
        self.leave_searching();
        self.counters().polled.bump(1);
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        // Every `BUDGET` polls (`BUDGET` divides 2^32, so this holds across the wrap).
        if tick.is_multiple_of(BUDGET) {
            self.end_tick();
        }
        let running = &self.remote().running_task;
        // Polls nest when a task helps; the stall reporter names the innermost.
        let outer = running.load(Relaxed);
        running.store(task.header().tagged_id(), Relaxed);
        // Diagnostics: running since (see `task::diag`).
        crate::task::diag::stamp(task.header());
        task.run();
        running.store(outer, Relaxed);
    }

    /// Stops searching, if this worker is a searcher (see
    /// [`stop_searching`](Self::stop_searching)).
    #[inline]
    fn leave_searching(&self) {
        if self.searching.replace(false) {
            self.stop_searching();
        }
    }

    /// A searcher stops searching; the last one hands leftover work to a sleeper
    /// (spec 001's "last searcher must notify").
    fn stop_searching(&self) {
        if self.shared.idle.stop_searching() {
            fence(SeqCst);
            if self.worth_a_wake() {
                self.shared.notify_parked();
            }
        }
    }

    /// Whether the work left in sight outlasts waking a sleeper: fork-join jobs always
    /// do; queued tasks do when their count times this worker's average task time
    /// exceeds the measured wake-up latency. (Waking a worker for work this one finishes
    /// before the other could start is a spurious wake.)
    fn worth_a_wake(&self) -> bool {
        if self.shared.has_jobs_for(self.index) {
            return true;
        }
        self.outlasts_a_wake(self.local.len() + self.shared.visible_tasks_for(self.index))
    }

    /// Whether `tasks` queued tasks, at this worker's average task time, take longer
    /// than waking a sleeper.
    #[inline]
    fn outlasts_a_wake(&self, tasks: usize) -> bool {
        tasks > 0 && tasks as f64 * self.avg_task_ns.get() > self.shared.wake_latency_ns() as f64
    }

    /// End of a tick: refresh the EWMA of task length and the global-queue interval.
    #[cold]
    #[inline(never)]
    fn end_tick(&self) {
        self.sample_task_time(clock::now_ns());
    }

    /// Folds the polls since `tick_start` into the EWMA of task time (the first
    /// measurement replaces the initial guess) and restarts the measurement.
    fn sample_task_time(&self, now: u64) {
        crate::base::clock::refresh_coarse(now);
        if cfg!(loom) {
            // As in `Shared::record_wake`: models must not branch on measured time.
            return;
        }
        let tick = self.tick.get();
        let polls = tick.wrapping_sub(self.sample_tick.replace(tick));
        if polls >= MIN_SAMPLE_POLLS {
            let per_task =
                clock::since(now, self.tick_start.get()).as_nanos() as f64 / polls as f64;
            let avg = if self.task_time_measured.replace(true) {
                0.1 * per_task + 0.9 * self.avg_task_ns.get()
            } else {
                per_task
            };
            self.avg_task_ns.set(avg);
            self.global_interval.set(interval_for(avg));
        }
        self.tick_start.set(now);
    }

    /// The next task to run. The common case (no timer or fairness check due, and a
    /// task in the LIFO slot that may run again) is inlined into the loop; everything
    /// else is [`next_task_slow`](Self::next_task_slow), which repeats the whole order.
    #[inline(always)]
    fn next_task(&self) -> Option<Notified> {
        let tick = self.tick.get();
        if !tick.is_multiple_of(TIMER_CHECK_POLLS)
            && !tick.is_multiple_of(self.global_interval.get())
        {
            match self.take_lifo() {
                Some(Ok(t)) => return Some(t),
                Some(Err(t)) if self.local.is_empty() && self.pinned_is_empty() => {
                    // Past the LIFO limit the task goes behind the queued work, but
                    // there is none: the slow path would pop it straight back.
                    self.lifo_polls.set(0);
                    return Some(t);
                }
                // The slot was empty since the `take`: nothing is dropped.
                Some(Err(t)) => self.lifo.set(Some(t)),
                None => {}
            }
        }
        self.next_task_slow(tick)
    }

    /// Takes the LIFO slot's task: `Ok` while it is under the cap of consecutive LIFO
    /// polls (this poll counted), `Err` once it has used the cap up.
    #[inline(always)]
    fn take_lifo(&self) -> Option<Result<Notified, Notified>> {
        let t = self.lifo.take()?;
        let n = self.lifo_polls.get();
        if n < MAX_LIFO_POLLS {
            self.lifo_polls.set(n + 1);
            self.counters().lifo_hits.bump(1);
            return Some(Ok(t));
        }
        Some(Err(t))
    }

    #[inline(never)]
    fn next_task_slow(&self, tick: u32) -> Option<Notified> {
        if tick.is_multiple_of(TIMER_CHECK_POLLS) && self.shared.time.has_pending() {
            // A busy worker fires due timers itself; nobody may be parked to do it.
            self.shared.time.process();
        }
        if tick.is_multiple_of(self.global_interval.get()) {
            // About once per millisecond of task time: I/O readiness, the global
            // queue, fibers handed to this worker and its own (fairness); and the
            // fibers woken from elsewhere, then the tasks that yielded, go behind what
            // the queues hold. Below they run only
            // once every queue is empty, and two fibers or tasks waking each other
            // keep the LIFO slot and the queues busy for ever (review s34: a yielding
            // fiber beside such a pair never ran again, nor did a sleeper whose timer
            // fired while it ran, which is rescheduled as a yield).
            self.shared.time.poll_io();
            self.pull_inbox();
            self.requeue_deferred();
            if let Some(t) = self
                .next_global()
                .or_else(|| self.next_handed())
                .or_else(|| self.next_pinned())
            {
                return Some(t);
            }
        }
        match self.take_lifo() {
            Some(Ok(t)) => return Some(t),
            Some(Err(t)) => self.push_local(t),
            None => {}
        }
        self.lifo_polls.set(0);
        self.local
            .pop()
            .or_else(|| self.next_pinned())
            .or_else(|| self.next_handed())
            .or_else(|| self.next_global())
            .or_else(|| self.next_deferred())
    }

    /// At the fairness check: the fibers woken into the inbox go behind the private
    /// queue now, not only once it is empty (which, refilled from the deferred list and
    /// the LIFO slot's evictions, it may never be again: review s34b, fibers woken from
    /// a plain thread starved beside two fibers waking each other and one yielding).
    fn pull_inbox(&self) {
        // SAFETY: see `pinned_mut`; `pop_batch` runs only our closure, which pushes
        // through this same borrow.
        let pinned = unsafe { self.pinned_mut() };
        self.inbox().pop_batch(usize::MAX, |t| pinned.push_back(t));
    }

    /// The next fiber tied to this worker: from the private queue, refilled from the
    /// inbox in one batch.
    fn next_pinned(&self) -> Option<Notified> {
        if self.pinned_is_empty() {
            self.pull_inbox();
        }
        // SAFETY: see `pinned_mut`; the borrow ends within this expression.
        unsafe { self.pinned_mut() }.pop_front()
    }

    #[inline]
    fn pinned_is_empty(&self) -> bool {
        // SAFETY: see `pinned_mut`; the borrow ends within this expression.
        unsafe { self.pinned_mut() }.is_empty()
    }

    /// The private queue of fibers tied to this worker, borrowed in place (this is on
    /// every poll's path; `Cell::take` and `set` moved the whole deque each time).
    ///
    /// # Safety
    /// The caller must not let the borrow outlive its statement sequence, nor call
    /// anything while holding it that could reach `pinned` again (a poll, a wake, a
    /// schedule). `Core` is used by its own thread only, so no other thread can.
    #[allow(clippy::mut_from_ref)]
    unsafe fn pinned_mut(&self) -> &mut VecDeque<Notified> {
        // SAFETY: per the contract, this is the only live reference.
        unsafe { &mut *self.pinned.as_ptr() }
    }

    fn inbox(&self) -> &super::inject::Inject {
        &self.remote().inbox
    }

    fn handed(&self) -> &super::inject::Inject {
        &self.remote().handed
    }

    /// A fiber handed to this worker before it started (one at a time: the rest stay
    /// where sysmon can move them if this worker gets stuck in the first).
    #[inline]
    fn next_handed(&self) -> Option<Notified> {
        // (`pop` looks at the length before it takes the lock.)
        self.handed().pop()
    }

    /// Moves the yielded tasks into the local queue (where peers may steal them) and
    /// returns the first.
    fn next_deferred(&self) -> Option<Notified> {
        self.move_deferred(true)
    }

    /// Moves every yielded task behind the local queue (or this worker's fibers).
    fn requeue_deferred(&self) {
        let none = self.move_deferred(false);
        debug_assert!(none.is_none());
    }

    /// Moves the yielded tasks into the local queue, but the first when `keep_first`,
    /// which it returns (otherwise `None`, with every one moved).
    fn move_deferred(&self, keep_first: bool) -> Option<Notified> {
        let mut deferred = self.deferred.take();
        if deferred.is_empty() {
            self.deferred.set(deferred);
            return None;
        }
        let mut drain = deferred.drain(..);
        let first = if keep_first { drain.next() } else { None };
        // A peer is worth a wake only for a task it could run: a fiber tied to this
        // worker is not one (two fibers yielding to each other paid a SeqCst fence per
        // yield here, and on a pool with a parked peer, a wake that found nothing).
        let mut stealable = false;
        for t in drain {
            let pinned = is_pinned(&t);
            stealable |= !pinned;
            self.push_local_as(t, pinned);
        }
        self.deferred.set(deferred);
        if stealable {
            self.shared.notify_parked();
        }
        first
    }

    /// Takes a fair share of the injection queue: the first task to run now, the rest
    /// into the local queue, where peers can steal them.
    fn next_global(&self) -> Option<Notified> {
        let inject = &self.shared.inject;
        let len = inject.len();
        if len == 0 {
            return None;
        }
        let n = (len / self.shared.num_workers())
            .clamp(MIN_GLOBAL_BATCH, GLOBAL_BATCH)
            .min(self.local.remaining() + 1);
        let mut first = None;
        let taken = inject.pop_batch(n, |t| match first {
            None => first = Some(t),
            Some(_) => self.local.push_back_within_capacity(t),
        });
        if taken > 0 {
            self.counters().global_batch_fetches.bump(1);
        }
        first
    }

    /// Searches peers, from a random one: each peer's fork-join deque (its oldest job),
    /// then half of its task queue; finally the injection queue.
    ///
    /// A worker becomes a searcher only if a peer's queues or the injection queue hold
    /// something: the searcher count is a line every worker writes, and a fiber pair on
    /// two workers bounced it twice a message for nothing.
    fn steal_work(&self) -> Option<Work> {
        if !self.searching.get() {
            if !self.shared.has_work_for(self.index) || !self.shared.idle.try_become_searcher() {
                return None;
            }
            self.searching.set(true);
        }
        let n = self.shared.slots_in_use().len();
        let start = self.next_rand() as usize % n;
        for k in 0..n {
            let victim = (start + k) % n;
            if victim == self.index {
                continue;
            }
            if let Some(job) = self.steal_job_from(victim) {
                return Some(Work::Job(job));
            }
            if let Some((task, count)) = self.shared.remotes[victim].steal.steal_into(&self.local) {
                self.counters().stolen.bump(count as u64);
                self.counters().steals.bump(1);
                return Some(Work::Task(task));
            }
        }
        self.next_global().map(Work::Task)
    }

    /// Queues a task woken or spawned on this worker. New tasks go to the LIFO slot
    /// (evicting the previous one to the queue), yields to the deferred list.
    /// Returns the task if it must go to the injection queue instead.
    #[inline]
    pub(crate) fn schedule_local(&self, task: Notified, is_yield: bool) -> Option<Notified> {
        if self.transitioning_to_park.get() && !self.dispatching_io.get() {
            return Some(task);
        }
        if self.shared.is_shutdown() {
            cancel_queued(task);
            return None;
        }
        if is_yield {
            self.defer(task);
            return None;
        }
        if let Some(t) = self.lifo.replace(Some(task)) {
            self.evict_lifo(t);
        }
        None
    }

    /// A yielded task waits behind the queues (see `deferred`).
    #[inline(never)]
    fn defer(&self, task: Notified) {
        let mut deferred = self.deferred.take();
        deferred.push(task);
        self.deferred.set(deferred);
    }

    /// The task a newer one pushed out of the LIFO slot goes to a queue; a stealable
    /// one wakes a sleeper when the queue holds more work than a wake costs.
    ///
    /// Tasks that hand messages to each other (four senders and a receiver on a channel
    /// of one slot) wake one another on this worker all the time, and each wake pushes
    /// the previous one out of the slot. Waking a sleeper for each of those sent it to
    /// steal tasks this worker was about to run: every message then crossed cores
    /// (`tasks_bounded1_mpsc`: 850-1000 ns a message, 0.6 steals a message; with the
    /// test below, 260-290 ns and none). A queue whose tasks take longer than a wake
    /// (the average task time, as `worth_a_wake` counts it) still wakes one, and a
    /// worker stuck in one poll with tasks queued behind it is found by sysmon, which
    /// wakes a sleeper to steal them (after `sysmon::STALE_AFTER`).
    #[inline(never)]
    fn evict_lifo(&self, task: Notified) {
        let pinned = is_pinned(&task);
        self.push_local_as(task, pinned);
        // The skipped wake relies on sysmon's rescue, which comes quickly only where
        // `sysmon::rescues_quickly` says so (elsewhere the task waited 100-200 ms, or
        // for ever, behind a worker that then blocked), and only to a worker inside a
        // task's poll: it takes `running_task == 0` (a fork-join job run at the top of
        // the loop, the I/O dispatch) for a worker between polls. Found in review: tasks
        // woken by a long job run from `weft::join` on a plain thread waited for the
        // whole job while a peer slept.
        if !pinned
            && (!self.shared.lifo_rescue
                || self.remote().running_task.load(Relaxed) == 0
                || self.outlasts_a_wake(self.local.len()))
        {
            self.shared.notify_parked();
        }
    }

    fn push_local(&self, task: Notified) {
        let pinned = is_pinned(&task);
        self.push_local_as(task, pinned);
    }

    /// [`push_local`](Self::push_local) for a task whose [`is_pinned`] the caller read.
    fn push_local_as(&self, task: Notified, pinned: bool) {
        if pinned {
            // The stealable queue is no place for a fiber tied to this worker.
            // SAFETY: see `pinned_mut`; the push calls nothing of ours.
            unsafe { self.pinned_mut() }.push_back(task);
            return;
        }
        if self.local.push_back(task, &self.shared.inject) {
            self.counters().overflows.bump(1);
        }
    }

    /// Cancels what is left in this worker's queues at shutdown.
    fn drain(&self) {
        if let Some(t) = self.lifo.take() {
            cancel_queued(t);
        }
        for t in self.deferred.take() {
            cancel_queued(t);
        }
        for t in std::mem::take(
            // SAFETY: see `pinned_mut`; the deque is moved out before any cancel runs.
            unsafe { self.pinned_mut() },
        ) {
            cancel_queued(t);
        }
        while let Some(t) = self.local.pop() {
            cancel_queued(t);
        }
    }

    fn next_rand(&self) -> u64 {
        // xorshift64
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        x
    }
}

#[cfg(all(test, loom))]
impl Core {
    pub(crate) fn next_task_for_test(&self) -> Option<Notified> {
        let stolen = || match self.steal_work() {
            Some(Work::Task(t)) => Some(t),
            Some(Work::Job(_)) => unreachable!("no jobs in this model"),
            None => None,
        };
        self.next_task()
            .or_else(stolen)
            .inspect(|_| self.leave_searching())
    }

    /// One sleep transition; returns when woken (or at once if work is visible).
    pub(crate) fn park_for_test(&self) {
        self.park(&|| false);
    }

    pub(crate) fn park_until_for_test(&self, done: &dyn Fn() -> bool) {
        self.park(done);
    }

    /// Queues a task as a spawn on this worker would (evicting through the ring, with
    /// the producer-side wake).
    pub(crate) fn push_for_test(&self, task: Notified) {
        self.push_local(task);
        self.shared.notify_parked();
    }

    /// Makes the next park count as one from the worker's own loop (so a temporary
    /// worker may retire in it).
    pub(crate) fn enter_loop_for_test(&self) {
        self.loop_depth.set(1);
    }

    /// Whether the last park decided to retire.
    pub(crate) fn retiring_for_test(&self) -> bool {
        self.retiring.get()
    }

    /// The end of a retiring worker, as `run` does it.
    pub(crate) fn retire_for_test(&self) {
        self.retire();
    }

    pub(crate) fn finish_for_test(&self) {
        if self.shared.idle.is_parked(self.index) {
            self.unpublish();
        }
        self.leave_searching();
        self.drain();
    }
}

/// What a search found.
enum Work {
    Task(Notified),
    Job(JobRef),
}

/// A started fiber that must run on its home worker.
fn is_pinned(task: &Notified) -> bool {
    task.header().is_pinned()
}

fn interval_for(avg_task_ns: f64) -> u32 {
    let iv = TARGET_LATENCY.as_nanos() as f64 / avg_task_ns.max(1.0);
    (iv as u32).clamp(MIN_INTERVAL, MAX_INTERVAL)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{adapt_heartbeat, interval_for, MAX_HEARTBEAT_JOINS, MIN_HEARTBEAT_JOINS};
    use std::time::Duration;

    #[test]
    fn heartbeat_count_aims_at_half_the_period() {
        let us = Duration::from_micros;
        // Fine joins: grow, at most twofold per check, up to the maximum.
        assert_eq!(adapt_heartbeat(64, us(1)), 128);
        assert_eq!(adapt_heartbeat(64, Duration::ZERO), 128);
        assert_eq!(adapt_heartbeat(1024, us(1)), MAX_HEARTBEAT_JOINS);
        // On target: unchanged.
        assert_eq!(adapt_heartbeat(64, us(50)), 64);
        // Coarse joins: shrink at once to the estimate, not below the minimum.
        assert_eq!(adapt_heartbeat(1024, us(500)), 102);
        assert_eq!(adapt_heartbeat(1024, us(100_000)), MIN_HEARTBEAT_JOINS);
    }

    #[test]
    fn adaptive_interval_matches_the_spec_table() {
        assert_eq!(interval_for(1_000.0), 255);
        assert_eq!(interval_for(10_000.0), 100);
        assert_eq!(interval_for(50_000.0), 20);
        assert_eq!(interval_for(100_000.0), 10);
        assert_eq!(interval_for(1_000_000.0), 8);
    }
}
