//! `Runtime::shutdown_graceful`: stop taking work from outside, let what runs finish
//! (up to a deadline), then cancel the rest and stop.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::Runtime;
use crate::task::diag::ACTIVE_AT_DRAIN;

/// What [`Runtime::shutdown_graceful`] did with the tasks and fibers that were alive
/// when it was called: how many finished by themselves before the deadline, and how
/// many it cancelled. The two add up to the tasks and fibers alive at the call; those
/// that running tasks spawned meanwhile are in neither.
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::new().unwrap();
/// // Still alive at the call (a task that ended before it would count in neither).
/// rt.spawn(weft::time::sleep(Duration::from_millis(50)));
/// rt.spawn(std::future::pending::<()>());
/// let report = rt.shutdown_graceful(Duration::from_millis(500));
/// assert_eq!(report.finished + report.cancelled, 2);
/// assert_eq!(report.cancelled, 1);
/// println!("{report}");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Tasks and fibers alive at the call that finished before the deadline (their
    /// result, output or panic, is in their `JoinHandle`).
    pub finished: usize,
    /// Tasks and fibers alive at the call that were still alive at the deadline and
    /// were cancelled (parked fibers unwound, futures dropped).
    pub cancelled: usize,
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "weft shutdown: {} tasks and fibers finished, {} cancelled",
            self.finished, self.cancelled
        )
    }
}

/// The longest pause between two looks at the count of live tasks.
const MAX_PAUSE: Duration = Duration::from_millis(5);

/// The least time the workers are given to leave after the wait, whatever the timeout
/// (`Duration::ZERO` included): a worker that is not stuck in a poll leaves in far less,
/// so this is paid only for a stuck one.
const MIN_GRACE: Duration = Duration::from_millis(200);

impl Runtime {
    /// Shuts down gracefully: stops accepting spawns from outside the runtime, waits
    /// until every task and fiber has finished or `timeout` has passed, then cancels
    /// what is left, drains every queue, stops the workers and the monitor thread, and
    /// reports how many of the tasks and fibers alive at the call finished and how many
    /// were cancelled.
    ///
    /// - From the call on, a spawn from outside the runtime (a [`Handle`](crate::Handle)
    ///   on another thread, `Runtime::spawn`) is refused: its `JoinHandle` resolves at
    ///   once to a [`JoinError`](crate::JoinError) that says the runtime is shutting
    ///   down (`is_cancelled()` is true), and the task never runs;
    ///   [`fiber::try_spawn`](crate::fiber::try_spawn) returns a
    ///   [`SpawnError`](crate::fiber::SpawnError) of kind
    ///   [`Shutdown`](crate::fiber::SpawnErrorKind::Shutdown). Spawns from the
    ///   runtime's own tasks and fibers (on any of its workers) are accepted: work in
    ///   progress may fan out to finish. A closure on the blocking pool
    ///   ([`spawn_blocking`](crate::spawn_blocking)) runs on a thread of its own and
    ///   counts as outside.
    /// - The wait ends as soon as the count of live tasks and fibers
    ///   ([`Stats::active_tasks`](crate::Stats::active_tasks)) reaches zero. It looks
    ///   at the count with pauses that grow to 5 ms.
    /// - Then, as dropping the runtime does: every task left is cancelled (its future
    ///   dropped, a parked fiber unwound on its home worker, so its destructors run),
    ///   queues are drained and the workers leave. A worker stuck in a poll that never
    ///   returns is waited for until the deadline, or at least `min(timeout, 1 s)`
    ///   (and at least 200 ms, so that workers that are not stuck always get to leave
    ///   and unwind their fibers, also with a zero timeout) past the wait, and then
    ///   left behind as [`shutdown_timeout`](Self::shutdown_timeout) does; so the call
    ///   returns within about twice `timeout` (plus 200 ms) whatever the tasks do.
    ///
    /// A task in the middle of a poll at the deadline counts as cancelled even if that
    /// poll completes it. Called from inside one of the runtime's own tasks, the
    /// caller counts as a live task: the wait then lasts the whole `timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = weft::Runtime::new().unwrap();
    /// let quick = rt.spawn(async { weft::time::sleep(Duration::from_millis(10)).await; 1 });
    /// let stuck = rt.spawn(std::future::pending::<()>());
    /// let handle = rt.handle().clone();
    /// let report = rt.shutdown_graceful(Duration::from_millis(500));
    /// assert_eq!((report.finished, report.cancelled), (1, 1));
    /// assert_eq!(quick.join().unwrap(), 1);
    /// assert!(stuck.join().unwrap_err().is_cancelled());
    /// // The runtime is gone: spawns through old handles are cancelled.
    /// assert!(handle.spawn(async {}).join().is_err());
    /// ```
    pub fn shutdown_graceful(mut self, timeout: Duration) -> ShutdownReport {
        // `None`: a timeout too long to be a deadline (`Duration::MAX`), so no deadline.
        let deadline = Instant::now().checked_add(timeout);
        let inner = self.handle.inner.clone();
        // Refuse outside spawns first, then mark what is alive: a spawn that saw the
        // flag down bound its task before, or it is refused; either way the marking
        // walk, which takes every shard lock after the flag went up, sees every task
        // accepted from outside. It marks with every shard of every pool locked at
        // once (`OwnedTasks::lock_all`): shard by shard, a task that spawns its
        // successor and completes could put the successor in a shard already walked
        // and leave one not yet walked, and be missed from the count (seen in a soak:
        // one of two such chains went uncounted).
        for p in &inner.pools {
            p.begin_draining();
        }
        let mut active = 0;
        {
            let locked: Vec<_> = inner.pools.iter().map(|p| p.owned.lock_all()).collect();
            for l in &locked {
                l.for_each(|h| {
                    h.flags.fetch_or(ACTIVE_AT_DRAIN, Relaxed);
                    active += 1;
                });
            }
        }
        let mut pause = Duration::from_micros(50);
        while inner.has_active_tasks() {
            let left = deadline.map_or(MAX_PAUSE, |d| d.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                break;
            }
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(MAX_PAUSE);
        }
        // Marked tasks either completed by themselves (and unlinked) or are drained
        // from the owned list by the cancel below, which counts them.
        // At least `MIN_GRACE`: idle workers need a moment to wake and leave, and only
        // a worker that leaves unwinds its parked fibers; one given up on leaks them.
        let grace = deadline.map_or(timeout, |d| {
            d.saturating_duration_since(Instant::now())
                .max(timeout.min(Duration::from_secs(1)))
                .max(MIN_GRACE)
        });
        let cancelled = self.shutdown(Some(grace)).min(active);
        ShutdownReport {
            finished: active - cancelled,
            cancelled,
        }
    }
}
