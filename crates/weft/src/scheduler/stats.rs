//! Scheduler statistics (spec 001).

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use crate::base::AtomicU64;

/// Counters a worker updates about itself. Only the owning worker writes them (a plain
/// load and store, no read-modify-write); anyone may read them.
#[derive(Default)]
pub(crate) struct WorkerCounters {
    pub(crate) spawned: Counter,
    pub(crate) polled: Counter,
    pub(crate) stolen: Counter,
    pub(crate) steals: Counter,
    pub(crate) parked: Counter,
    pub(crate) lifo_hits: Counter,
    pub(crate) global_batch_fetches: Counter,
    pub(crate) overflows: Counter,
    pub(crate) spurious: Counter,
    pub(crate) spin_wakeups: Counter,
    pub(crate) jobs_run: Counter,
    pub(crate) jobs_stolen: Counter,
}

#[derive(Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// Owner-only increment.
    #[inline]
    pub(crate) fn bump(&self, n: u64) {
        self.0.store(self.0.load(Relaxed) + n, Relaxed);
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// A snapshot of a runtime's scheduler statistics.
///
/// The top-level totals and `workers` describe the default pool (the runtime's
/// `worker_threads`); `pools` has the same figures for every pool, and `blocking` the
/// elastic pool behind `spawn_blocking`.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// rt.block_on(async {
///     for i in 0..100 { weft::spawn(async move { i }).await.unwrap(); }
/// });
/// let stats = rt.stats();
/// assert!(stats.total_spawned >= 100);
/// assert_eq!(stats.workers.len(), stats.num_workers);
/// println!("{stats}");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Tasks ever spawned on the default pool.
    pub total_spawned: u64,
    /// Polls of tasks across the default pool's workers.
    pub total_polled: u64,
    /// Tasks moved between workers by work stealing.
    pub total_stolen: u64,
    /// Times a worker went to sleep.
    pub total_parked: u64,
    /// Futex wake calls made to wake sleeping workers.
    pub total_wake_calls: u64,
    /// Wake-ups after which the worker found no work before sleeping again.
    pub total_spurious_wakeups: u64,
    /// Number of worker threads in the default pool.
    pub num_workers: usize,
    /// Per-worker counters of the default pool, indexed by worker.
    pub workers: Vec<WorkerStats>,
    /// Every pool (default first, then interactive if it has threads).
    pub pools: Vec<PoolStats>,
    /// The blocking pool.
    pub blocking: crate::scheduler::blocking::BlockingStats,
    /// Timers registered and not yet fired or cancelled.
    pub timers_pending: usize,
    /// Timers fired since the runtime started.
    pub timers_fired: u64,
    /// Sockets registered with the runtime's I/O driver now.
    pub io_sources: usize,
    /// Readiness events the I/O driver has dispatched since the runtime started.
    pub io_events: u64,
    /// Fibers and their stacks (process-wide figures).
    pub fibers: crate::stack::FiberStats,
    /// Tasks and fibers the stall reporter named (see
    /// [`Builder::stall_report`](crate::Builder::stall_report)).
    pub stalls_reported: u64,
    /// Tasks and fibers alive now in every pool: spawned and not yet finished
    /// (running, queued or parked). Counted by the owned-task list under the locks
    /// that spawning and completing take anyway, so it costs no atomic on those paths.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.stats().active_tasks, 1);
    /// h.abort();
    /// let _ = h.join();
    /// assert_eq!(rt.stats().active_tasks, 0);
    /// ```
    pub active_tasks: usize,
    /// Temporary workers sysmon started because a worker was stuck in one task while
    /// work waited (all pools; see
    /// [`Builder::max_extra_workers`](crate::Builder::max_extra_workers)).
    pub temp_workers_started: u64,
    /// Temporary workers that retired after their keep-alive of idleness (all pools).
    pub temp_workers_retired: u64,
}

/// One pool's statistics.
///
/// ```
/// let rt = weft::Builder::new().worker_threads(2).interactive_threads(1).build().unwrap();
/// let pools = rt.stats().pools;
/// assert_eq!(pools[0].pool, weft::Pool::Default);
/// assert_eq!(pools[1].pool, weft::Pool::Interactive);
/// assert_eq!(pools[1].num_workers, 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolStats {
    /// Which pool.
    pub pool: super::Pool,
    /// Tasks ever spawned on this pool.
    pub total_spawned: u64,
    /// Polls across this pool's workers.
    pub total_polled: u64,
    /// Tasks moved between this pool's workers by stealing.
    pub total_stolen: u64,
    /// Times a worker of this pool went to sleep.
    pub total_parked: u64,
    /// Futex wake calls made to this pool's workers.
    pub total_wake_calls: u64,
    /// Wake-ups after which the worker found no work before sleeping again.
    pub total_spurious_wakeups: u64,
    /// Parks that ended while the worker still spun, before it slept.
    pub total_spin_wakeups: u64,
    /// Worker threads in this pool.
    pub num_workers: usize,
    /// Per-worker counters.
    pub workers: Vec<WorkerStats>,
}

impl PoolStats {
    /// `workers`: every slot, base workers first; the first `base` are listed (the
    /// totals count the temporary workers too).
    pub(crate) fn new(
        pool: super::Pool,
        spawned: u64,
        mut workers: Vec<WorkerStats>,
        base: usize,
    ) -> Self {
        let mut stats = PoolStats {
            pool,
            total_spawned: spawned,
            total_polled: workers.iter().map(|w| w.tasks_polled).sum(),
            total_stolen: workers.iter().map(|w| w.tasks_stolen).sum(),
            total_parked: workers.iter().map(|w| w.times_parked).sum(),
            total_wake_calls: workers.iter().map(|w| w.wake_calls).sum(),
            total_spurious_wakeups: workers.iter().map(|w| w.spurious_wakeups).sum(),
            total_spin_wakeups: workers.iter().map(|w| w.spin_wakeups).sum(),
            num_workers: base,
            workers: Vec::new(),
        };
        workers.truncate(base);
        stats.workers = workers;
        stats
    }
}

impl Stats {
    pub(crate) fn new(
        pools: Vec<PoolStats>,
        blocking: crate::scheduler::blocking::BlockingStats,
        timers: (usize, u64),
        io: (usize, u64),
        stalls_reported: u64,
        temp_workers: (u64, u64),
    ) -> Self {
        let d = &pools[0];
        Stats {
            total_spawned: d.total_spawned,
            total_polled: d.total_polled,
            total_stolen: d.total_stolen,
            total_parked: d.total_parked,
            total_wake_calls: d.total_wake_calls,
            total_spurious_wakeups: d.total_spurious_wakeups,
            num_workers: d.num_workers,
            workers: d.workers.clone(),
            pools,
            blocking,
            timers_pending: timers.0,
            timers_fired: timers.1,
            io_sources: io.0,
            io_events: io.1,
            fibers: crate::stack::fiber_stats(),
            stalls_reported,
            active_tasks: 0,
            temp_workers_started: temp_workers.0,
            temp_workers_retired: temp_workers.1,
        }
    }
}

/// One worker's counters.
///
/// ```
/// let rt = weft::Builder::new().worker_threads(2).build().unwrap();
/// let w = &rt.stats().workers[0];
/// println!("worker 0 polled {} tasks, {} from its LIFO slot", w.tasks_polled, w.lifo_hits);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Polls this worker ran.
    pub tasks_polled: u64,
    /// Tasks this worker stole from others.
    pub tasks_stolen: u64,
    /// Successful steal operations (each moves up to half a queue).
    pub steal_operations: u64,
    /// Times this worker parked.
    pub times_parked: u64,
    /// Polls of a task taken from the LIFO slot.
    pub lifo_hits: u64,
    /// Batches taken from the global queue.
    pub global_batch_fetches: u64,
    /// Times the local queue overflowed into the global queue.
    pub overflows: u64,
    /// Futex wake calls made to wake this worker.
    pub wake_calls: u64,
    /// Wake-ups after which this worker found no work before sleeping again.
    pub spurious_wakeups: u64,
    /// Parks that ended while the worker still spun, before it slept (no futex wake).
    pub spin_wakeups: u64,
    /// Fork-join jobs this worker ran that another thread had forked (stolen or
    /// injected).
    pub jobs_run: u64,
    /// Fork-join jobs this worker stole from another worker's deque.
    pub jobs_stolen: u64,
}

impl WorkerCounters {
    pub(crate) fn snapshot(&self, wake_calls: u64) -> WorkerStats {
        WorkerStats {
            tasks_polled: self.polled.get(),
            tasks_stolen: self.stolen.get(),
            steal_operations: self.steals.get(),
            times_parked: self.parked.get(),
            lifo_hits: self.lifo_hits.get(),
            global_batch_fetches: self.global_batch_fetches.get(),
            overflows: self.overflows.get(),
            wake_calls,
            spurious_wakeups: self.spurious.get(),
            spin_wakeups: self.spin_wakeups.get(),
            jobs_run: self.jobs_run.get(),
            jobs_stolen: self.jobs_stolen.get(),
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.pools {
            write!(f, "{p}")?;
        }
        let b = &self.blocking;
        writeln!(
            f,
            "weft blocking pool: {} threads ({} idle), {} started, {} closures run or queued",
            b.threads, b.idle_threads, b.threads_started, b.tasks
        )?;
        writeln!(f, "weft tasks: {} active", self.active_tasks)?;
        writeln!(
            f,
            "weft timers: {} pending, {} fired",
            self.timers_pending, self.timers_fired
        )?;
        writeln!(
            f,
            "weft I/O: {} sockets registered, {} readiness events",
            self.io_sources, self.io_events
        )?;
        let fb = &self.fibers;
        writeln!(
            f,
            "weft fibers: {} live, {} pooled stacks, {} MiB of stack address space reserved",
            fb.live_fibers,
            fb.pooled_stacks,
            fb.stack_bytes_reserved / (1024 * 1024)
        )?;
        if self.temp_workers_started > 0 {
            writeln!(
                f,
                "weft temporary workers: {} started, {} retired",
                self.temp_workers_started, self.temp_workers_retired
            )?;
        }
        if self.stalls_reported > 0 {
            writeln!(f, "weft stalls reported: {}", self.stalls_reported)?;
        }
        Ok(())
    }
}

impl fmt::Display for PoolStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "weft {:?} pool: {} workers, {} spawned, {} polled, {} stolen, {} parks, {} futex wakes, {} met spinning, {} spurious",
            self.pool,
            self.num_workers,
            self.total_spawned,
            self.total_polled,
            self.total_stolen,
            self.total_parked,
            self.total_wake_calls,
            self.total_spin_wakeups,
            self.total_spurious_wakeups,
        )?;
        writeln!(
            f,
            "  worker      polled     stolen   parked  lifo hits  global batches  overflows"
        )?;
        for (i, w) in self.workers.iter().enumerate() {
            writeln!(
                f,
                "  {:>6} {:>11} {:>10} {:>8} {:>10} {:>15} {:>10}",
                i,
                w.tasks_polled,
                w.tasks_stolen,
                w.times_parked,
                w.lifo_hits,
                w.global_batch_fetches,
                w.overflows
            )?;
        }
        Ok(())
    }
}
