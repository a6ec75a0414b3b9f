//! `Runtime::dump`: every live task and fiber, what it is doing and for how long; and
//! the deadlock watcher behind `WEFT_DEBUG_DEADLOCK=1`, which prints that dump once
//! when the runtime can no longer make progress by itself.
//!
//! The dump walks each pool's owned-task list under its shard locks (a completing task
//! unlinks itself under the same lock, so every task seen is alive while it is read)
//! and reads, per task, only atomics: the state word, `Header::diag` (what it waits on,
//! since when; see `task::diag`) and the workers' `running_task`. Names of named fibers
//! come from `task::diag`'s registry after the locks are released.

use std::fmt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Weak;
use std::time::Duration;

use super::{Inner, Pool, Runtime};
use crate::base::clock;
use crate::task::diag::{self, WaitOn};
use crate::task::header::FIBER_BIT;

/// A snapshot of every live task and fiber of a runtime, from [`Runtime::dump`] or
/// [`Handle::dump`](crate::Handle::dump).
///
/// Its `Display` form has one line per task or fiber, in this shape (fields separated
/// by spaces, easy to grep):
///
/// ```text
/// weft dump: 3 live tasks and fibers
///   fiber 1025 'ping': parked on chan for 1.20 s
///   task 7: running on worker 1 for 3 ms
///   task 9: scheduled for 0 ms
/// ```
///
/// A parked task or fiber says what it waits on when weft registered the wait: `chan`
/// (a `weft::chan` channel, or `weft::sync`'s `oneshot`, `watch`, `broadcast`), `lock`
/// (a `weft::sync` lock or semaphore), `sync` (`Notify`, `Barrier`, `WaitGroup`),
/// `timer` (a sleep or a deadline), `socket`, or `join` (another task's `JoinHandle`);
/// on anything else it reads `parked on ?`. Times count from the last such event
/// (spawn, wake, poll start, or the registration of the wait) on a clock that workers
/// refresh as they go, so they may be long by up to the length of a worker's recent
/// polls; a task parked on something weft does not know counts from the start of the
/// poll that parked it.
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let (tx, rx) = weft::chan::bounded::<u32>(1);
/// let f = weft::fiber::Builder::new().name("reader").spawn(move || rx.recv_blocking());
/// // Wait until the fiber is parked on the channel.
/// let text = loop {
///     let text = rt.dump().to_string();
///     if text.contains("parked on chan") {
///         break text;
///     }
///     std::thread::sleep(std::time::Duration::from_millis(1));
/// };
/// assert!(text.contains("fiber") && text.contains("'reader'"));
/// tx.send_blocking(1).unwrap();
/// assert_eq!(f.join().unwrap(), Ok(1));
/// ```
#[derive(Debug, Clone)]
pub struct Dump {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    id: u64,
    fiber: bool,
    name: Option<std::sync::Arc<str>>,
    state: State,
    on: WaitOn,
    for_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Scheduled,
    /// Running on this worker of this pool (`None`: running, in a poll that an inner
    /// one hides from `running_task`, or just starting).
    Running(Option<(Pool, usize)>),
    Parked,
}

impl Dump {
    /// How many live tasks and fibers the dump lists.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(std::future::pending::<()>());
    /// assert_eq!(rt.dump().len(), 1);
    /// h.abort();
    /// ```
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the runtime had no live task or fiber.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// assert!(rt.dump().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many tasks and fibers are parked (waiting for a wake).
    pub(crate) fn parked(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.state == State::Parked)
            .count()
    }
}

impl fmt::Display for Dump {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "weft dump: {} live tasks and fibers", self.entries.len())?;
        for e in &self.entries {
            let kind = if e.fiber { "fiber" } else { "task" };
            write!(f, "  {kind} {}", e.id)?;
            if let Some(name) = &e.name {
                // Escaped: a name with a newline broke the one line per entry (found
                // in review: a fiber's name could forge a task's line).
                write!(f, " '{}'", name.escape_debug())?;
            }
            match e.state {
                State::Scheduled => f.write_str(": scheduled")?,
                State::Running(Some((Pool::Default, w))) => write!(f, ": running on worker {w}")?,
                State::Running(Some((Pool::Interactive, w))) => {
                    write!(f, ": running on interactive worker {w}")?
                }
                State::Running(None) => f.write_str(": running")?,
                State::Parked => write!(f, ": parked on {}", e.on.word())?,
            }
            writeln!(f, " for {}", Millis(e.for_ms))?;
        }
        Ok(())
    }
}

/// A duration in milliseconds, as a person reads it.
struct Millis(u64);

impl fmt::Display for Millis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 1000 {
            write!(f, "{} ms", self.0)
        } else {
            write!(f, "{:.2} s", self.0 as f64 / 1000.0)
        }
    }
}

impl Inner {
    /// See [`Runtime::dump`].
    pub(crate) fn dump(&self) -> Dump {
        let now_ns = clock::now_ns();
        clock::refresh_coarse(now_ns);
        let now_ms = now_ns / 1_000_000;
        let mut entries = Vec::new();
        for p in &self.pools {
            p.owned.for_each(|h| {
                let s = h.state.load();
                let (on, since) = diag::read(h);
                let state = if s.is_running() {
                    State::Running(None)
                } else if s.is_scheduled() {
                    State::Scheduled
                } else if s.is_idle() {
                    State::Parked
                } else {
                    // Completing: it unlinks itself as soon as we release the lock.
                    return;
                };
                entries.push(Entry {
                    id: h.id.as_u64(),
                    fiber: h.fiber,
                    name: None,
                    state,
                    on,
                    for_ms: now_ms.saturating_sub(since),
                });
            });
        }
        // Which worker runs what: the innermost poll of each worker.
        let mut running = Vec::new();
        for p in &self.pools {
            for (i, r) in p.remotes.iter().enumerate() {
                let id = r.running_task.load(Relaxed) & !FIBER_BIT;
                if id != 0 {
                    running.push((id, p.pool, i));
                }
            }
        }
        for e in &mut entries {
            if e.state == State::Running(None) {
                if let Some(&(_, pool, i)) = running.iter().find(|r| r.0 == e.id) {
                    e.state = State::Running(Some((pool, i)));
                }
            }
            if e.fiber {
                e.name = diag::name_of(e.id);
            }
        }
        entries.sort_by_key(|e| e.id);
        Dump { entries }
    }
}

impl Runtime {
    /// A snapshot of every live task and fiber: id, kind, name (named fibers), state
    /// (scheduled, running on worker N, parked), how long it has been so, and for a
    /// parked one what it waits on when weft knows (`chan`, `lock`, `timer`, `socket`,
    /// `join`, ...). See [`Dump`] for the format. Safe to call at any time from any
    /// thread. Not an atomic snapshot: the walk takes one part of the task list after
    /// another, so tasks that start or finish meanwhile may or may not be listed.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let h = rt.spawn(async { weft::time::sleep(std::time::Duration::from_secs(60)).await });
    /// let text = loop {
    ///     let text = rt.dump().to_string();
    ///     if text.contains("parked on timer") {
    ///         break text;
    ///     }
    ///     std::thread::sleep(std::time::Duration::from_millis(1));
    /// };
    /// assert!(text.contains(&format!("task {}", h.id())));
    /// h.abort();
    /// ```
    pub fn dump(&self) -> Dump {
        self.handle.inner.dump()
    }
}

impl super::Handle {
    /// [`Runtime::dump`] through a handle.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let handle = rt.handle().clone();
    /// assert!(handle.dump().is_empty());
    /// ```
    pub fn dump(&self) -> Dump {
        self.inner.dump()
    }
}

/// How often the deadlock watcher looks.
const DEADLOCK_CHECK: Duration = Duration::from_millis(50);

/// How many looks in a row must find the runtime stuck, with no poll in between,
/// before it is reported (a worker publishes its parked bit a moment before it
/// sleeps; a plain thread may be about to wake a task).
const DEADLOCK_LOOKS: u32 = 4;

/// `WEFT_DEBUG_DEADLOCK=1`: a thread that looks every [`DEADLOCK_CHECK`] whether the
/// runtime is stuck (spec 003's deadlock dump): every worker of every pool parked, no
/// timer pending, no socket registered, no `spawn_blocking` closure queued or running,
/// no `signal::ctrl_c` wait in the process, no poll since the last look, and tasks or fibers still parked. Nothing of the
/// runtime can wake them then; only a thread outside it could. It then prints the dump on stderr, once, and stops looking. The
/// thread exists only while the variable is set and leaves when the runtime shuts
/// down: the hot paths pay nothing for it.
pub(crate) fn watch_deadlock(rt: Weak<Inner>, thread_name: String) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(thread_name)
        .spawn(move || {
            let mut looks = 0;
            let mut last_polls = u64::MAX;
            loop {
                std::thread::sleep(DEADLOCK_CHECK);
                let Some(inner) = rt.upgrade() else { return };
                if inner.pools[0].is_shutdown() {
                    return;
                }
                let polls = inner.total_polls();
                let stuck = polls == last_polls && inner.looks_stuck();
                last_polls = polls;
                looks = if stuck { looks + 1 } else { 0 };
                if looks >= DEADLOCK_LOOKS {
                    let dump = inner.dump();
                    // Stuck means parked tasks; a task that completed in between makes
                    // this look void.
                    if dump.parked() > 0 && inner.looks_stuck() {
                        eprint!(
                            "weft: deadlock: every worker is parked, no timer is pending \
                             and no socket is registered, yet {} tasks or fibers wait \
                             (WEFT_DEBUG_DEADLOCK=1)\n{dump}",
                            dump.parked()
                        );
                        return;
                    }
                    looks = 0;
                }
            }
        })?;
    Ok(())
}

impl Inner {
    /// Polls run so far by every worker of every pool.
    fn total_polls(&self) -> u64 {
        self.pools
            .iter()
            .flat_map(|p| p.remotes.iter())
            .map(|r| r.counters.polled.get())
            .sum()
    }

    /// Every worker parked, no timer, no socket, no closure on the blocking pool (its
    /// result wakes whoever awaits it), no wait for Ctrl-C anywhere in the process
    /// (the signal thread wakes it), some task alive.
    fn looks_stuck(&self) -> bool {
        // Temporary workers too, where a thread runs their slot (found in review: one
        // busy in a long poll beside a parked base worker was reported as a deadlock).
        let all_parked = self.pools.iter().all(|p| {
            (0..p.num_slots()).all(|i| {
                p.idle.is_parked(i)
                    || (p.is_temporary(i)
                        && !p.remotes[i]
                            .active
                            .load(std::sync::atomic::Ordering::SeqCst))
            })
        });
        let blocking = self.blocking.stats();
        all_parked
            && diag::outside_waits() == 0
            && blocking.queued == 0
            && blocking.threads == blocking.idle_threads
            && self.time.pending() == 0
            && self.time.io_stats().0 == 0
            && self.active_tasks() > 0
    }
}
