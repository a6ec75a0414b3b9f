//! The work-stealing scheduler (spec 001, with the wake rules of spec 004).
//!
//! [`Shared`] is what every worker and every handle sees: the workers' stealable queue
//! ends and parkers, the injection queue, the idle state and the owned-task list.
//! Each worker's private half lives in [`worker::Core`] on its own thread.

pub(crate) mod blocking;
pub(crate) mod deque;
pub(crate) mod idle;
pub(crate) mod inject;
pub(crate) mod job;
pub(crate) mod latch;
pub(crate) mod queue;
pub(crate) mod stacks;
pub(crate) mod stats;
pub(crate) mod worker;

use std::future::Future;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Weak;

use crossbeam_utils::CachePadded;

use std::collections::VecDeque;

use crate::base::clock;
use crate::base::park::Parker;
use crate::base::{fence, Arc, Mutex};
use crate::driver::timer::Driver;
use crate::scheduler::job::{Job, JobRef};
use crate::task::header::{Header, Home};
use crate::task::owned::OwnedTasks;
use crate::task::raw::{Notified, Schedule};
use crate::task::{new_task_of_kind, JoinHandle};
use idle::Idle;
use inject::Inject;
use stats::{PoolStats, WorkerCounters};

/// The pools of a runtime. A task runs on the workers of the pool it was spawned
/// into; `spawn` keeps the caller's pool, `spawn_on` names one.
///
/// ```
/// let rt = weft::Builder::new().worker_threads(2).interactive_threads(1).build().unwrap();
/// let h = rt.handle().spawn_on(weft::Pool::Interactive, async { "latency-sensitive" });
/// assert_eq!(h.join().unwrap(), "latency-sensitive");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// The main pool: one worker per core unless configured.
    Default,
    /// A small pool for latency-sensitive tasks, so they never queue behind a
    /// saturated default pool. With zero interactive threads, tasks spawned here run
    /// on the default pool.
    Interactive,
}

/// The part of a worker that other threads use.
pub(crate) struct Remote {
    pub(crate) steal: queue::Steal,
    /// The thieves' end of the worker's fork-join deque.
    pub(crate) jobs: deque::Stealer<Job>,
    pub(crate) parker: Arc<Parker>,
    pub(crate) counters: WorkerCounters,
    /// When a producer last claimed this worker (a [`clock::now_ns`] reading), to
    /// measure how long a wake-up takes.
    pub(crate) claimed_at: AtomicU64,
    /// Started fibers tied to this worker (spec 003's per-worker inbox): never stolen;
    /// producers on other threads push here and wake this worker if it is parked.
    pub(crate) inbox: Inject,
    /// Fibers that have not started, handed to this base worker by a worker with more
    /// fibers tied to it (`FiberFuture::hand_off`). This worker takes them as it takes
    /// its inbox, but they are tied to nobody yet: a worker stuck in one poll has them
    /// moved to the injection queue by sysmon ([`rescue_handed`](Shared::rescue_handed)),
    /// where any worker starts them. Producers use the inbox's handshake.
    pub(crate) handed: Inject,
    /// The id of the task this worker is polling (0: none), for the stall reporter.
    pub(crate) running_task: AtomicU64,
    /// Set by the stall reporter while this worker has been inside one poll for longer
    /// than a sysmon period; soft-homed fibers then go elsewhere.
    pub(crate) stalled: AtomicBool,
    /// Workers waiting in `join` for a job this worker stole from them (leapfroggers,
    /// see `forkjoin`): while any wait, this worker's heartbeat counts as hungry, and
    /// promoting a frame wakes them to take it.
    pub(crate) leapfroggers: crate::base::AtomicUsize,
    /// The worker whose theft this worker is waiting on in `join` (`usize::MAX`: none).
    pub(crate) waiting_on: crate::base::AtomicUsize,
    /// Fork-join waits this worker is blocked in (a `join` waiting for its thief, a
    /// `scope` for its jobs; not counted while it runs a job to help): such a worker
    /// cannot leave its loop before the job it waits for ends, and that job may be
    /// what shuts the runtime down (see `Runtime::wait_for_workers`).
    pub(crate) fork_join_waits: crate::base::AtomicUsize,
    /// Shutdown: tasks tied to this worker (suspended fibers, and what its inbox held)
    /// that only this worker may cancel, on its own thread, as it leaves (see
    /// [`Shared::set_aside`]).
    set_aside: Mutex<SetAside>,
    /// A thread runs this slot (always for a base worker; for a temporary one from its
    /// start until it retires). SeqCst: see [`Shared::push_inbox`].
    /// (A loom atomic under loom: the retire and inbox models race on it.)
    pub(crate) active: crate::base::AtomicBool,
    /// Started, unfinished fibers tied to this worker (not those that migrate): a
    /// temporary worker retires only at zero, since nobody else may run them.
    pub(crate) homed_fibers: std::sync::Arc<AtomicUsize>,
}

/// A worker's set-aside tasks at shutdown.
struct SetAside {
    tasks: Vec<TaskRef>,
    /// No more tasks are taken: the worker left (after cancelling them), or shutdown
    /// gave up on it while it was stuck in a task (and leaked its fibers). A task set
    /// aside after this is cancelled on the spot, which leaks a fiber's stack instead
    /// of unwinding it off its home thread.
    closed: bool,
}

/// A soft-homed fiber is diverted to the injection queue when its home worker has this
/// many tasks waiting in its inbox (spec 003's starvation escape hatch).
const INBOX_DIVERT: usize = 64;

/// State shared by all workers of a runtime and by its handles.
pub(crate) struct Shared {
    pub(crate) remotes: Box<[CachePadded<Remote>]>,
    pub(crate) inject: Inject,
    pub(crate) idle: Idle,
    pub(crate) owned: OwnedTasks,
    shutdown: AtomicBool,
    /// Graceful shutdown has begun: spawns from outside the runtime are refused (see
    /// [`refuses_spawn`](Self::refuses_spawn)).
    draining: AtomicBool,
    external_spawned: AtomicU64,
    pub(crate) pool: Pool,
    /// The runtime this pool belongs to (for `Handle::current` on a worker), as the
    /// runtime layer's own type, which this layer does not name.
    pub(crate) rt: Weak<dyn std::any::Any + Send + Sync>,
    /// The runtime's timer driver, shared by all its pools.
    pub(crate) time: Arc<Driver>,
    /// Fork-join jobs injected from threads outside the pool (`join`, `scope`).
    injected: Mutex<InjectedJobs>,
    injected_len: AtomicUsize,
    /// EWMA of the time from claiming a parked worker to that worker running (ns).
    wake_latency_ns: AtomicU64,
    /// Set by [`begin_shutdown`](Self::begin_shutdown) once the tasks tied to each
    /// worker are on that worker's set-aside list: a worker leaving its loop waits for
    /// it before it cancels its list (see `Core::run`), so none of its fibers arrives
    /// there after it left. On a line of its own: every fork-join wait reads it as it
    /// spins (`Core::fork_join_shutdown_step`), and the fields around it are written
    /// on every wake.
    routed: CachePadded<AtomicBool>,
    /// Set by [`begin_shutdown`](Self::begin_shutdown) once it has cancelled every task
    /// no worker holds: a worker leaves its loop and closes its set-aside list only
    /// then, since a cancellation may route a fiber to that list (a woken fiber, homed
    /// there, whose inbox is closed); one that arrived after its worker left would be
    /// leaked, not unwound (found as a rare leak in `review_s23`).
    settled: AtomicBool,
    /// The base worker count; `remotes` has `base + K` slots, K for temporary workers.
    base: usize,
    /// One past the highest slot that ever had a thread: searches look no further.
    /// Only grows, so a slot once in use stays in sight (its queues are empty while it
    /// is inactive).
    slots_used: AtomicUsize,
    /// The private ends of the slots no thread runs now (`None`: in use).
    spare_parts: Mutex<Vec<Option<WorkerParts>>>,
    /// How long a temporary worker stays idle before it retires.
    pub(crate) keep_alive: std::time::Duration,
    /// Wakes the runtime's monitor when a worker leaves the parked set.
    pub(crate) doorbell: Arc<idle::Doorbell>,
    /// Whether sysmon steals work queued behind a worker stuck in one poll within about
    /// `STALE_AFTER` (`runtime::sysmon::rescues_quickly`). Only then may a task pushed
    /// out of the LIFO slot skip the sleeper's wake (see `Core::evict_lifo`).
    pub(crate) lifo_rescue: bool,
}

/// A task reference held across threads by shutdown.
struct TaskRef(NonNull<Header>);

// SAFETY: the reference only keeps the task alive; it is used once, to cancel the task
// (through the state word, whose transition decides who may touch the future) and
// release the reference.
unsafe impl Send for TaskRef {}

struct InjectedJobs {
    queue: VecDeque<JobRef>,
    /// Set by the final drain at shutdown; later injections run on the caller.
    closed: bool,
}

/// How many temporary slots a pool gets, and how they behave.
pub(crate) struct Slots {
    pub(crate) extra: usize,
    pub(crate) keep_alive: std::time::Duration,
    pub(crate) doorbell: Arc<idle::Doorbell>,
    /// See [`Shared::lifo_rescue`].
    pub(crate) lifo_rescue: bool,
}

/// A worker's private ends, handed to its thread.
pub(crate) struct WorkerParts {
    pub(crate) local: queue::Local,
    pub(crate) jobs: deque::Worker<Job>,
}

impl Shared {
    /// Builds the shared state for `workers` workers and returns each worker's local
    /// queue end, to be moved to its thread.
    #[cfg(all(test, loom))]
    pub(crate) fn new(
        workers: usize,
        pool: Pool,
        rt: Weak<dyn std::any::Any + Send + Sync>,
        time: Arc<Driver>,
    ) -> (Arc<Shared>, Vec<WorkerParts>) {
        let cfg = Slots {
            extra: 0,
            keep_alive: std::time::Duration::ZERO,
            doorbell: Arc::new(idle::Doorbell::disabled()),
            lifo_rescue: false,
        };
        Self::with_slots(workers, cfg, pool, rt, time)
    }

    /// Builds the shared state for `workers` base workers plus `cfg.extra` slots for
    /// temporary workers, and returns each base worker's private ends, to be moved to
    /// its thread (the temporary slots' wait in `spare_parts` for
    /// [`take_slot`](Self::take_slot)).
    pub(crate) fn with_slots(
        workers: usize,
        cfg: Slots,
        pool: Pool,
        rt: Weak<dyn std::any::Any + Send + Sync>,
        time: Arc<Driver>,
    ) -> (Arc<Shared>, Vec<WorkerParts>) {
        let slots = workers + cfg.extra;
        let mut locals = Vec::with_capacity(slots);
        let unparker = time.unparker();
        let remotes = (0..slots)
            .map(|i| {
                let (local, steal) = queue::local();
                let (jobs, job_stealer) = deque::new();
                locals.push(WorkerParts { local, jobs });
                CachePadded::new(Remote {
                    steal,
                    jobs: job_stealer,
                    parker: Arc::new(Parker::with_external(unparker.clone())),
                    counters: WorkerCounters::default(),
                    claimed_at: AtomicU64::new(0),
                    inbox: Inject::new(),
                    handed: Inject::new(),
                    running_task: AtomicU64::new(0),
                    stalled: AtomicBool::new(false),
                    leapfroggers: crate::base::AtomicUsize::new(0),
                    waiting_on: crate::base::AtomicUsize::new(usize::MAX),
                    fork_join_waits: crate::base::AtomicUsize::new(0),
                    set_aside: Mutex::new(SetAside {
                        tasks: Vec::new(),
                        closed: false,
                    }),
                    active: crate::base::AtomicBool::new(i < workers),
                    homed_fibers: std::sync::Arc::new(AtomicUsize::new(0)),
                })
            })
            .collect();
        let spare_parts = (0..workers)
            .map(|_| None)
            .chain(locals.drain(workers..).map(Some))
            .collect();
        let shared = Arc::new(Shared {
            remotes,
            inject: Inject::new(),
            idle: Idle::new(slots, workers),
            owned: OwnedTasks::new(workers),
            shutdown: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            external_spawned: AtomicU64::new(0),
            pool,
            rt,
            time,
            injected: Mutex::new(InjectedJobs {
                queue: VecDeque::new(),
                closed: false,
            }),
            injected_len: AtomicUsize::new(0),
            wake_latency_ns: AtomicU64::new(INITIAL_WAKE_LATENCY_NS),
            routed: CachePadded::new(AtomicBool::new(false)),
            settled: AtomicBool::new(false),
            base: workers,
            slots_used: AtomicUsize::new(workers),
            spare_parts: Mutex::new(spare_parts),
            keep_alive: cfg.keep_alive,
            doorbell: cfg.doorbell,
            lifo_rescue: cfg.lifo_rescue,
        });
        (shared, locals)
    }

    /// The base worker count (temporary workers not counted).
    pub(crate) fn num_workers(&self) -> usize {
        self.base
    }

    /// Base plus the most temporary workers.
    pub(crate) fn num_slots(&self) -> usize {
        self.remotes.len()
    }

    /// The slots that ever had a thread (see `slots_used`): where searches look.
    #[inline]
    pub(crate) fn slots_in_use(&self) -> &[CachePadded<Remote>] {
        &self.remotes[..self.slots_used.load(SeqCst)]
    }

    /// Whether slot `i` is a temporary worker's.
    pub(crate) fn is_temporary(&self, i: usize) -> bool {
        i >= self.base
    }

    /// Sysmon: a free temporary slot and its private ends, marked active (its thread is
    /// about to start). `None` when every slot is in use.
    pub(crate) fn take_slot(&self) -> Option<(usize, WorkerParts)> {
        let mut spare = self.spare_parts.lock();
        let i = spare.iter().position(Option::is_some)?;
        let parts = spare[i].take()?;
        self.remotes[i].active.store(true, SeqCst);
        self.slots_used.fetch_max(i + 1, SeqCst);
        Some((i, parts))
    }

    /// A temporary worker's thread is done with slot `i` (it retired, or it never
    /// started): its private ends, with empty queues, wait for the next start.
    pub(crate) fn return_slot(&self, i: usize, parts: WorkerParts) {
        self.remotes[i].active.store(false, SeqCst);
        self.spare_parts.lock()[i] = Some(parts);
    }

    /// Sysmon could not start a thread for slot `i`: its private ends are gone with
    /// the failed start, so the slot stays out of use.
    pub(crate) fn abandon_slot(&self, i: usize) {
        self.remotes[i].active.store(false, SeqCst);
    }

    /// Threads running this pool's slots now (base and temporary).
    pub(crate) fn active_workers(&self) -> usize {
        self.remotes
            .iter()
            .filter(|r| r.active.load(Relaxed))
            .count()
    }

    pub(crate) fn is_shutdown(&self) -> bool {
        self.shutdown.load(SeqCst)
    }

    /// Graceful shutdown: refuse spawns from outside the runtime from now on.
    pub(crate) fn begin_draining(&self) {
        self.draining.store(true, SeqCst);
    }

    /// Whether a spawn from this thread must be refused: the runtime is draining and
    /// the caller is none of its workers (a task or fiber of the runtime, in any of its
    /// pools, may still spawn). One relaxed load while the runtime is not draining.
    #[inline]
    pub(crate) fn refuses_spawn(&self) -> bool {
        self.draining.load(Relaxed) && !self.caller_is_inside()
    }

    #[cold]
    fn caller_is_inside(&self) -> bool {
        worker::with_current(|c| c.is_some_and(|c| Weak::ptr_eq(&c.shared().rt, &self.rt)))
    }

    /// Whether shutdown has set aside every task tied to a worker (see `routed`).
    pub(crate) fn is_routed(&self) -> bool {
        self.routed.load(SeqCst)
    }

    /// Whether shutdown has cancelled every task no worker holds (see `settled`).
    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(SeqCst)
    }

    pub(crate) fn spawn<F>(self: &Arc<Self>, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn_of_kind(future, false)
    }

    /// Queues a new task on the injection queue and wakes nobody: where a spawn from
    /// outside is left when its wake was skipped for a searcher that then found the
    /// work not worth a wake (sysmon's rescue of the injection queue is tested so).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn spawn_without_a_wake<F>(self: &Arc<Self>, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (task, handle) = new_task_of_kind(future, self.clone(), false);
        if let Some(task) = bind_or_cancel(&self.owned, task) {
            if let Err(task) = self.inject.push(task) {
                cancel_queued(task);
            }
        }
        handle
    }

    /// [`spawn`](Self::spawn) for an async task (`fiber` false) or a fiber's future.
    pub(crate) fn spawn_of_kind<F>(
        self: &Arc<Self>,
        future: F,
        fiber: bool,
    ) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let (task, handle) = new_task_of_kind(future, self.clone(), fiber);
        if self.refuses_spawn() {
            refuse(task);
            return handle;
        }
        let Some(task) = bind_or_cancel(&self.owned, task) else {
            return handle;
        };
        // A new task has no home worker: on one of this pool's workers it is queued
        // there, anywhere else it goes to the injection queue.
        let task = worker::with_current(|core| match core {
            Some(core) if core.belongs_to(self) => {
                core.count_spawn();
                core.schedule_local(task, false)
            }
            _ => {
                self.external_spawned.fetch_add(1, Relaxed);
                Some(task)
            }
        });
        if let Some(task) = task {
            self.schedule_remote_to(task, None);
        }
        handle
    }

    /// Routes a task made SCHEDULED: to the current worker's LIFO slot or queue when
    /// called on one of this runtime's workers (for a fiber with a home worker: only on
    /// that worker), otherwise through [`schedule_remote_to`](Self::schedule_remote_to).
    fn schedule_task(self: &Arc<Self>, task: Notified, is_yield: bool) {
        let home = task.header().home();
        // SAFETY: the pointer is set by `Core::run` for the life of the core on this
        // thread and cleared before the core is dropped; this call runs on this thread
        // inside that span or not on a worker at all (null).
        let core = unsafe { worker::current_ptr().as_ref() };
        let task = match core {
            Some(core)
                if core.belongs_to(self) && home.is_none_or(|h| h.worker == core.index()) =>
            {
                core.schedule_local(task, is_yield)
            }
            _ => Some(task),
        };
        if let Some(task) = task {
            self.schedule_remote_to(task, home);
        }
    }

    /// Queues a task from outside its worker (see
    /// [`schedule_remote_to`](Self::schedule_remote_to)).
    #[cfg(all(test, loom))]
    pub(crate) fn schedule_remote(&self, task: Notified) {
        let home = task.header().home();
        self.schedule_remote_to(task, home);
    }

    /// Queues a task from outside its worker: a fiber with a home worker goes to that
    /// worker's inbox (one handed to a worker before it started, to its `handed`
    /// queue), anything else to the injection queue. `home` is the task's
    /// decoded [`Header::home`].
    #[inline(never)]
    fn schedule_remote_to(&self, task: Notified, home: Option<Home>) {
        if let Some(home) = home {
            // (A handed fiber is never pinned: it goes elsewhere as a soft home does.)
            if home.pinned || !self.home_is_congested(home.worker) {
                return if home.handed {
                    self.push_handed(home.worker, task)
                } else {
                    self.push_inbox(home.worker, task)
                };
            }
        }
        match self.inject.push(task) {
            Ok(()) => self.notify_parked(),
            Err(task) => cancel_queued(task),
        }
    }

    /// Whether a soft-homed fiber should rather go where any worker can take it.
    fn home_is_congested(&self, i: usize) -> bool {
        let r = &self.remotes[i];
        r.inbox.len() >= INBOX_DIVERT || r.stalled.load(Relaxed) || !r.active.load(Relaxed)
    }

    /// Producer side of the inbox handshake: push, SeqCst fence, then wake the owner if
    /// its parked bit is set. The owner publishes its bit, fences and re-checks its
    /// inbox before it sleeps, and re-checks the inbox whenever its parker returns, so
    /// either this side sees the bit or that side sees the task (store buffering, as in
    /// [`idle`]). The bit is left for the owner to clear: this wake counts as no claim.
    ///
    /// A temporary worker's slot may retire meanwhile, but only while no fiber is
    /// pinned to it, so what arrives then is a fiber that merely prefers it: the
    /// retiring worker clears `active`, fences and hands its inbox on
    /// ([`rescue_inbox`](Self::rescue_inbox)); this side pushed, fenced, and hands the
    /// inbox on itself if it sees `active` clear. Store buffering again: at least one of
    /// the two sees the other's write, and both pop from the same queue, so the task is
    /// moved once.
    fn push_inbox(&self, i: usize, task: Notified) {
        match self.remotes[i].inbox.push(task) {
            Ok(()) => {
                fence(SeqCst);
                if self.idle.is_parked(i) {
                    self.remotes[i].parker.unpark();
                }
                if !self.remotes[i].active.load(SeqCst) {
                    self.rescue_inbox(i);
                }
            }
            // Shutting down: only its home worker may unwind it.
            // SAFETY: the queue reference moves to the set-aside list.
            Err(task) => unsafe { self.set_aside(i, task.into_raw()) },
        }
    }

    /// [`push_inbox`](Self::push_inbox)'s handshake for base worker `i`'s `handed`
    /// queue: push, SeqCst fence, wake `i` if its parked bit is set; `Core::park`
    /// re-checks the queue after it publishes the bit and whenever its parker returns
    /// (loom model `loom_park_vs_handed_fiber`). Only base workers are handed fibers, and
    /// they never retire, so no rescue is needed for an inactive slot. A closed queue
    /// (shutdown) cancels the fiber here: it has not started, so no thread owns it.
    fn push_handed(&self, i: usize, task: Notified) {
        debug_assert!(i < self.num_workers(), "a fiber handed to a temporary slot");
        match self.remotes[i].handed.push(task) {
            Ok(()) => {
                fence(SeqCst);
                if self.idle.is_parked(i) {
                    self.remotes[i].parker.unpark();
                }
            }
            Err(task) => cancel_queued(task),
        }
    }

    /// Moves the fibers handed to worker `i` to the injection queue, where any worker
    /// starts them: sysmon's rescue when `i` has not polled for a while (stuck in one
    /// poll or in a job, perhaps waiting for one of these very fibers).
    #[cold]
    pub(crate) fn rescue_handed(&self, i: usize) {
        let mut moved = Vec::new();
        self.remotes[i]
            .handed
            .pop_batch(usize::MAX, |t| moved.push(t));
        self.inject_all(moved);
    }

    /// Moves what waits in slot `i`'s inbox (fibers that only prefer it: see
    /// [`push_inbox`](Self::push_inbox)) to the injection queue, where any worker
    /// finds it, unless a thread runs the slot again.
    ///
    /// Decided under the lock [`take_slot`](Self::take_slot) restarts a slot under:
    /// once the slot runs again, its inbox may hold fibers pinned to its new thread,
    /// which must never reach the injection queue (found in review, loom model
    /// `loom_inbox_rescue_vs_slot_restart`: a producer that had seen the slot inactive
    /// moved the new thread's pinned fiber, to be resumed on another thread). A slot
    /// found active again is left alone: its thread, new or staying, looks at its
    /// inbox before it sleeps. (The retiring thread's own call holds the slot's
    /// private ends, so the slot cannot restart under it.)
    #[cold]
    pub(crate) fn rescue_inbox(&self, i: usize) {
        let mut moved = Vec::new();
        {
            let _no_restart = self.spare_parts.lock();
            if self.remotes[i].active.load(SeqCst) {
                return;
            }
            self.remotes[i]
                .inbox
                .pop_batch(usize::MAX, |t| moved.push(t));
        }
        self.inject_all(moved);
    }

    /// Moves `tasks` to the injection queue (cancelling them if it has closed) and, if
    /// there were any, wakes a parked worker for them: what a retiring worker leaves.
    pub(crate) fn inject_all(&self, tasks: impl IntoIterator<Item = Notified>) {
        let mut any = false;
        for t in tasks {
            any = true;
            if let Err(t) = self.inject.push(t) {
                cancel_queued(t);
            }
        }
        if any {
            self.notify_parked();
        }
    }

    /// Producer side of the handshake (see [`idle`]): after a push, wake one parked
    /// worker unless a searcher will find the task.
    pub(crate) fn notify_parked(&self) {
        fence(SeqCst);
        if let Some(i) = self.idle.claim_parked() {
            self.remotes[i].claimed_at.store(clock::now_ns(), Relaxed);
            self.remotes[i].parker.unpark();
        }
    }

    /// How long a worker spins before it sleeps: as long as a measured futex wake
    /// (capped at [`MAX_SPIN_NS`]), so work that arrives within that time is met
    /// without one, and a park that does sleep costs at most twice its CPU time. Every
    /// worker may spin: capped at half the workers, the two-worker fiber ping-pong took
    /// 4.9 µs per switch instead of 0.4 µs (measured with an earlier spin loop), and the
    /// cap cost a shared counter per park. Zero under loom.
    pub(crate) fn spin_ns(&self) -> u64 {
        if cfg!(loom) {
            return 0;
        }
        self.wake_latency_ns().min(MAX_SPIN_NS)
    }

    /// A worker woken by a claim records how long the wake took.
    pub(crate) fn record_wake(&self, index: usize) {
        if cfg!(loom) {
            // Measured time would make loom's replays take different branches in
            // `worth_a_wake`; models keep the initial estimate.
            return;
        }
        let sample = clock::since(
            clock::now_ns(),
            self.remotes[index].claimed_at.load(Relaxed),
        )
        .as_nanos() as u64;
        let old = self.wake_latency_ns.load(Relaxed);
        self.wake_latency_ns
            .store(old - old / 8 + sample.min(10_000_000) / 8, Relaxed);
    }

    /// How long waking a parked worker takes here (an EWMA of measured wakes).
    pub(crate) fn wake_latency_ns(&self) -> u64 {
        self.wake_latency_ns.load(Relaxed)
    }

    /// Fork-join jobs anyone but `me` could take: always worth a wake.
    pub(crate) fn has_jobs_for(&self, me: usize) -> bool {
        self.injected_len.load(SeqCst) != 0
            || self
                .slots_in_use()
                .iter()
                .enumerate()
                .any(|(i, r)| i != me && !r.jobs.is_empty())
    }

    /// Queued tasks visible to a searcher other than `me`.
    pub(crate) fn visible_tasks_for(&self, me: usize) -> usize {
        self.inject.len()
            + self
                .slots_in_use()
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != me)
                .map(|(_, r)| r.steal.len())
                .sum::<usize>()
    }

    /// Work that a worker other than `me` could take right now: the injection queue,
    /// or a peer's stealable queue while nobody is searching to take it.
    pub(crate) fn has_work_for(&self, me: usize) -> bool {
        if !self.inject.is_empty() || self.injected_len.load(SeqCst) != 0 {
            return true;
        }
        self.slots_in_use()
            .iter()
            .enumerate()
            .any(|(i, r)| i != me && (!r.steal.is_empty() || !r.jobs.is_empty()))
    }

    /// Queues a fork-join job from outside the pool and wakes a worker for it. Returns
    /// false once the pool has stopped running jobs.
    pub(crate) fn inject_job(&self, job: JobRef) -> bool {
        {
            let mut q = self.injected.lock();
            if q.closed {
                return false;
            }
            q.queue.push_back(job);
            self.injected_len.store(q.queue.len(), SeqCst);
        }
        if self.is_shutdown() {
            // Workers that left their loops wait in `Core::run` without taking part
            // in the sleep protocol; any of them may run it.
            for r in self.remotes.iter() {
                r.parker.unpark();
            }
        } else {
            self.notify_parked();
        }
        true
    }

    /// Whether fork-join jobs wait in the injection queue.
    pub(crate) fn has_injected_jobs(&self) -> bool {
        self.injected_len.load(SeqCst) != 0
    }

    pub(crate) fn pop_injected_job(&self) -> Option<JobRef> {
        if self.injected_len.load(SeqCst) == 0 {
            return None;
        }
        let mut q = self.injected.lock();
        let j = q.queue.pop_front();
        self.injected_len.store(q.queue.len(), SeqCst);
        j
    }

    /// Shutdown: refuses further injected jobs and runs the queued ones here (their
    /// callers are blocked waiting for them).
    pub(crate) fn run_injected_jobs_and_close(&self) {
        let jobs: Vec<_> = {
            let mut q = self.injected.lock();
            q.closed = true;
            self.injected_len.store(0, SeqCst);
            q.queue.drain(..).collect()
        };
        for j in jobs {
            crate::scheduler::job::execute(j);
        }
    }

    /// Starts shutdown: refuses new tasks, cancels every task no worker is running,
    /// sets aside the tasks tied to a worker for that worker, and wakes all workers so
    /// they leave their loops.
    ///
    /// Workers may leave their loops as soon as the flag is up, but they unwind the
    /// fibers on their set-aside lists only once `routed` is set, when every suspended
    /// fiber tied to a worker is on its list, and close the lists and leave only once
    /// `settled` is set, when the tasks tied to no worker are cancelled too: so routine
    /// shutdown unwinds each fiber on its home worker. (The flag goes first so that a
    /// task woken meanwhile on a worker is cancelled there, not run again.)
    ///
    /// Returns what [`cancel_all`](Self::cancel_all) does.
    pub(crate) fn begin_shutdown(&self) -> usize {
        /// Sets its flag (`routed`, `settled`) and wakes the workers, also if routing or
        /// a cancellation panics (a task set aside on a list already closed is
        /// cancelled there): the workers would otherwise wait for it for ever.
        struct Raise<'a>(&'a Shared, &'a AtomicBool);
        impl Drop for Raise<'_> {
            fn drop(&mut self) {
                self.1.store(true, SeqCst);
                for r in self.0.remotes.iter() {
                    r.parker.unpark();
                }
            }
        }
        self.shutdown.store(true, SeqCst);
        let settled = Raise(self, &self.settled);
        let routed = Raise(self, &self.routed);
        let (marked, cancel) = self.route_all();
        // Every fiber tied to a worker is on that worker's list: the workers may unwind
        // them now, while this thread cancels the rest. Not after: a cancelled task's
        // `Drop` may block on a lock that such a fiber holds, and it blocked this thread
        // before `routed`, for ever (found in review, `tests/review_s30.rs`). The
        // workers keep their lists open until `settled`.
        drop(routed);
        cancel.run();
        drop(settled);
        marked
    }

    /// Cancels every linked task and empties the injection queue and the `handed`
    /// queues; started fibers tied to a worker, and whatever waits in a worker's inbox,
    /// are set aside for that worker ([`set_aside`](Self::set_aside)). Safe to repeat.
    ///
    /// Returns how many of the cancelled tasks graceful shutdown had marked as active
    /// at its call (`ShutdownReport::cancelled`).
    pub(crate) fn cancel_all(&self) -> usize {
        let (marked, cancel) = self.route_all();
        cancel.run();
        marked
    }

    /// [`cancel_all`](Self::cancel_all)'s first half: unlinks every task, sets the
    /// fibers tied to a worker aside for it, closes the queues, and returns the rest to
    /// cancel (with the count of those graceful shutdown had marked). Runs no task's
    /// code: the cancellations, which drop futures, are the caller's.
    fn route_all(&self) -> (usize, ToCancel) {
        let mut marked = 0;
        let mut cancel = ToCancel::default();
        self.owned.close_and_drain(|ptr| {
            // SAFETY: we hold the list's reference to the live task `ptr`.
            let h = unsafe { ptr.as_ref() };
            if h.flags.load(Relaxed) & crate::task::diag::ACTIVE_AT_DRAIN != 0 {
                marked += 1;
            }
            let home = h.home().filter(|h| h.pinned);
            match home {
                // SAFETY: the list's reference moves to the set-aside list.
                Some(home) => unsafe { self.set_aside(home.worker, ptr) },
                // Not tied to a thread (a task, a fiber that has not started or that
                // migrates): cancelled by the caller, with the list's reference.
                None => cancel.linked.push(TaskRef(ptr)),
            }
        });
        cancel.queued.extend(self.inject.close());
        for (i, r) in self.remotes.iter().enumerate() {
            // Not started: nobody's yet.
            cancel.queued.extend(r.handed.close());
            // Fibers homed on worker `i`, whose thread may be running a task right now.
            for task in r.inbox.close() {
                // SAFETY: the queue reference moves to the set-aside list.
                unsafe { self.set_aside(i, task.into_raw()) };
            }
        }
        (marked, cancel)
    }

    /// Shutdown: sets the task `ptr`, tied to worker `i`, aside for that worker to
    /// cancel on its own thread as it leaves ([`close_set_aside`](Self::close_set_aside)
    /// from `Core::run`). If the list is closed already (the worker left, or shutdown
    /// gave up on it), the task is cancelled here: a suspended fiber's `Drop` then
    /// leaks its stack rather than unwind it off its home thread (see `FiberFuture`).
    ///
    /// # Safety
    /// The caller gives up one reference to the live task `ptr`.
    unsafe fn set_aside(&self, i: usize, ptr: NonNull<Header>) {
        if !self.push_set_aside(i, ptr, || {}) {
            // SAFETY: per the contract.
            unsafe { cancel_now(ptr) };
        }
    }

    /// Puts `ptr` (with a reference the caller hands over) on worker `i`'s set-aside
    /// list, running `before` under the list's lock first, and wakes the worker; false,
    /// having done neither, if the list is closed.
    fn push_set_aside(&self, i: usize, ptr: NonNull<Header>, before: impl FnOnce()) -> bool {
        let mut list = self.remotes[i].set_aside.lock();
        if list.closed {
            return false;
        }
        before();
        list.tasks.push(TaskRef(ptr));
        drop(list);
        // Once routed, the worker unwinds what arrives while it waits for `settled` (a
        // cancellation on another thread may wait for it).
        self.remotes[i].parker.unpark();
        true
    }

    /// Whether tasks wait in worker `i`'s set-aside list.
    pub(crate) fn has_set_aside(&self, i: usize) -> bool {
        !self.remotes[i].set_aside.lock().tasks.is_empty()
    }

    /// Cancels the tasks set aside for worker `i` so far, leaving the list open: for a
    /// wait on worker `i`'s own thread that blocks it during shutdown (see
    /// `Core::wait_shutting_down`), whose future may need one of its fibers unwound
    /// (a lock that a suspended fiber holds). Returns whether there were any.
    pub(crate) fn cancel_set_aside_now(&self, i: usize) -> bool {
        let mut any = false;
        loop {
            // (The guard must not live across the cancellation: a fiber's cleanup may
            // look at this list again.)
            let Some(TaskRef(ptr)) = self.remotes[i].set_aside.lock().tasks.pop() else {
                return any;
            };
            any = true;
            // SAFETY: the list held a reference to the live task `ptr`.
            unsafe { cancel_now(ptr) };
        }
    }

    /// Cancels the tasks set aside for worker `i` and closes its list.
    ///
    /// `own`: called by worker `i` itself, on its thread, outside any poll, as it
    /// leaves (`Core::run`): its fibers are unwound here, together with any set aside
    /// meanwhile (their destructors may wake more), and the list closes once it is
    /// empty. One at a time, there and in [`cancel_set_aside_now`](Self::cancel_set_aside_now):
    /// a wait in one fiber's cleanup may need another fiber of the list unwound, which
    /// that wait's own shutdown handling does only if the fiber is still on the list
    /// (found in review: two fibers whose fiber-locals' destructors each took the
    /// other's lock hung the drop). Otherwise (the end of a shutdown that gave up on a
    /// stuck worker): the list is closed first, and its tasks are cancelled on this
    /// thread, where a fiber's stack is leaked, not unwound. A fiber that its stuck
    /// worker is running is left to that worker: the cancellation takes effect when its
    /// poll returns. Nothing happens for a list that is closed already.
    pub(crate) fn close_set_aside(&self, i: usize, own: bool) {
        if own {
            loop {
                self.cancel_set_aside_now(i);
                let mut list = self.remotes[i].set_aside.lock();
                if list.tasks.is_empty() {
                    list.closed = true;
                    return;
                }
            }
        }
        let tasks = {
            let mut list = self.remotes[i].set_aside.lock();
            list.closed = true;
            std::mem::take(&mut list.tasks)
        };
        for TaskRef(ptr) in tasks {
            // SAFETY: the list held a reference to the live task `ptr`.
            unsafe { cancel_now(ptr) };
        }
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let workers: Vec<_> = self
            .remotes
            .iter()
            .map(|r| r.counters.snapshot(r.parker.wake_calls()))
            .collect();
        let spawned: u64 = self.remotes.iter().map(|r| r.counters.spawned.get()).sum();
        // Totals include the temporary slots; the per-worker list is the base workers.
        PoolStats::new(
            self.pool,
            spawned + self.external_spawned.load(Relaxed),
            workers,
            self.base,
        )
    }
}

/// Tasks that [`Shared::route_all`] took out of the owned list (`linked`, each with the
/// list's reference) and out of the queues (`queued`), to cancel.
#[derive(Default)]
struct ToCancel {
    linked: Vec<TaskRef>,
    queued: Vec<Notified>,
}

impl ToCancel {
    fn run(self) {
        for TaskRef(ptr) in self.linked {
            // (A fiber unstarted when routed, and started since by a worker that took
            // it from its queue before it saw the flag, is tied to that worker now:
            // the claim hands it there, `hand_home`.)
            // SAFETY: the reference the owned list held on the live task `ptr`.
            unsafe { cancel_now(ptr) };
        }
        for task in self.queued {
            cancel_queued(task);
        }
    }
}

/// Cancels the task `ptr` now and releases one reference.
///
/// # Safety
/// The caller gives up one reference to the live task `ptr`.
unsafe fn cancel_now(ptr: NonNull<Header>) {
    // SAFETY: per the contract.
    unsafe {
        (ptr.as_ref().vtable.shutdown)(ptr);
        crate::task::raw::drop_reference(ptr);
    }
}

/// Longest spin before a worker sleeps (see [`Shared::spin_ns`]).
const MAX_SPIN_NS: u64 = 50_000;

/// Until measured: about what a futex wake round trip costs on a virtual machine.
const INITIAL_WAKE_LATENCY_NS: u64 = 40_000;

/// Cancels a task that was made SCHEDULED but will not be queued (the runtime is
/// shutting down), then drops the queue reference.
#[cold]
#[inline(never)]
pub(crate) fn cancel_queued(task: Notified) {
    // SAFETY: `task` owns one reference to its live task, which `into_raw` hands over.
    unsafe { cancel_now(task.into_raw()) };
}

/// Completes a new task that a draining runtime refuses, before it is linked or ever
/// runs: its handle reports that the runtime is shutting down.
#[cold]
#[inline(never)]
fn refuse(task: Notified) {
    let ptr = NonNull::from(task.header());
    task.header()
        .flags
        .fetch_or(crate::task::diag::REFUSED, Relaxed);
    cancel_queued(task);
    // SAFETY: the owned-list reference was never handed to the list: it is ours to
    // release, and it kept the task alive through the cancel.
    unsafe { crate::task::raw::drop_reference(ptr) };
}

/// Links a new task into `owned`. If the list is closed (the runtime is shutting down)
/// the task is cancelled before it ever runs, and `None` is returned.
fn bind_or_cancel(owned: &OwnedTasks, task: Notified) -> Option<Notified> {
    let ptr = NonNull::from(task.header());
    if owned.bind(ptr) {
        return Some(task);
    }
    cancel_queued(task);
    // SAFETY: the owned-list reference was never handed to the list: it is ours to
    // release, and it kept the task alive through the cancel.
    unsafe { crate::task::raw::drop_reference(ptr) };
    None
}

impl Schedule for Arc<Shared> {
    fn schedule(&self, task: Notified) {
        self.schedule_task(task, false);
    }

    fn yield_now(&self, task: Notified) {
        self.schedule_task(task, true);
    }

    fn release(&self, task: NonNull<Header>) -> bool {
        self.owned.remove(task)
    }

    /// A started fiber tied to worker `w` that shutdown claimed on another thread goes
    /// to `w`'s set-aside list, for `w` to claim again and unwind (off `w` it would be
    /// leaked: a fiber unstarted when routed that a worker started meanwhile, having
    /// taken it from its queue before it saw the flag; found as a rare leak in
    /// `review_s23`). Not once `w`'s list is closed: it is cancelled (leaked) here then.
    fn hand_home(&self, task: NonNull<Header>) -> bool {
        // SAFETY: the caller's claim keeps the task alive.
        let h = unsafe { task.as_ref() };
        let Some(home) = h.home().filter(|h| h.pinned) else {
            return false;
        };
        let here = worker::with_current(|c| {
            c.is_some_and(|c| c.belongs_to(self) && c.index() == home.worker)
        });
        // The claim is handed back under the list's lock, before the worker can pop it.
        !here
            && self.push_set_aside(home.worker, task, || {
                h.state.transition_claim_to_scheduled()
            })
    }
}
