//! Scheduler statistics (spec 001).

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;

use crate::sync::AtomicU64;

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
    /// Tasks ever spawned on this runtime.
    pub total_spawned: u64,
    /// Polls of tasks across all workers.
    pub total_polled: u64,
    /// Tasks moved between workers by work stealing.
    pub total_stolen: u64,
    /// Times a worker went to sleep.
    pub total_parked: u64,
    /// Futex wake calls made to wake sleeping workers.
    pub total_wake_calls: u64,
    /// Number of worker threads.
    pub num_workers: usize,
    /// Per-worker counters, indexed by worker.
    pub workers: Vec<WorkerStats>,
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
        }
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "weft: {} workers, {} spawned, {} polled, {} stolen, {} parks, {} futex wakes",
            self.num_workers,
            self.total_spawned,
            self.total_polled,
            self.total_stolen,
            self.total_parked,
            self.total_wake_calls
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
