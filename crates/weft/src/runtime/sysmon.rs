//! Sysmon: the stall reporter of spec 003.
//!
//! One thread per runtime looks at every worker a few times per stall threshold. A
//! worker whose poll counter has not moved while it is inside a poll (not parked) is
//! running one task or fiber without returning to the scheduler. After a sysmon period
//! (at most 100 ms) it is marked *stalled*: soft-homed fibers are then sent elsewhere,
//! and if tasks wait in its stealable queue while nobody searches, a parked worker is
//! woken to steal them (a task that blocks its thread would otherwise strand the tasks
//! queued behind it when the wake heuristics judged them not worth a wake); after the
//! threshold (default 5 s) the task is reported once on stderr with its id, its name if
//! it is a named fiber, and the worker. `WEFT_DEBUG_STALL=0` or
//! [`Builder::stall_report(None)`](crate::Builder::stall_report) turns it off.
//!
//! Diagnostics only: the counters are read with relaxed loads and nothing depends on
//! them for correctness. When every worker is parked the thread sleeps for a whole
//! threshold, so an idle runtime wakes it only rarely.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::Inner;
use crate::base::Arc;

use crate::task::header::FIBER_BIT;

/// Names of named fibers by task id, for the report (only named fibers are listed).
static NAMES: Mutex<Option<HashMap<u64, std::sync::Arc<str>>>> = Mutex::new(None);

pub(crate) fn register_name(id: u64, name: &std::sync::Arc<str>) {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names
        .get_or_insert_with(HashMap::new)
        .insert(id, name.clone());
}

pub(crate) fn unregister_name(id: u64) {
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.as_mut() {
        n.remove(&id);
    }
}

fn name_of(id: u64) -> Option<std::sync::Arc<str>> {
    let names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    names.as_ref().and_then(|n| n.get(&id).cloned())
}

/// The handle the runtime keeps: stops the thread and counts reports.
pub(crate) struct Sysmon {
    stop: Mutex<bool>,
    cv: Condvar,
    pub(crate) reported: AtomicU64,
}

impl Sysmon {
    pub(crate) fn new() -> Self {
        Sysmon {
            stop: Mutex::new(false),
            cv: Condvar::new(),
            reported: AtomicU64::new(0),
        }
    }

    pub(crate) fn stop(&self) {
        *self.stop.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Sleeps for `d` or until stopped; returns false once stopped.
    fn sleep(&self, d: Duration) -> bool {
        let guard = self.stop.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = self
            .cv
            .wait_timeout_while(guard, d, |stop| !*stop)
            .unwrap_or_else(|e| e.into_inner());
        !*guard
    }
}

/// What sysmon remembers about one worker.
struct Seen {
    polls: u64,
    since: Instant,
    reported: bool,
}

/// The sysmon thread's body: runs until the runtime stops it or goes away.
pub(crate) fn run(rt: Weak<Inner>, mon: Arc<Sysmon>, threshold: Duration) {
    let period = (threshold / 5).clamp(Duration::from_millis(10), Duration::from_millis(100));
    let mut seen: HashMap<(usize, usize), Seen> = HashMap::new();
    let mut pause = period;
    while mon.sleep(pause) {
        let Some(inner) = rt.upgrade() else { return };
        let now = Instant::now();
        let mut all_parked = true;
        for (p, pool) in inner.pools.iter().enumerate() {
            for (i, remote) in pool.remotes.iter().enumerate() {
                let polls = remote.counters.polled.get();
                let running = remote.running_task.load(Relaxed);
                let parked = pool.idle.is_parked(i);
                all_parked &= parked;
                let s = seen.entry((p, i)).or_insert(Seen {
                    polls,
                    since: now,
                    reported: false,
                });
                if polls != s.polls || running == 0 || parked {
                    *s = Seen {
                        polls,
                        since: now,
                        reported: false,
                    };
                    remote.stalled.store(false, Relaxed);
                    continue;
                }
                let stuck = now - s.since;
                let stalled = stuck >= period;
                remote.stalled.store(stalled, Relaxed);
                if stalled && !remote.steal.is_empty() && pool.idle.num_searching() == 0 {
                    // Tasks queued behind a worker stuck in one poll: the wake heuristics
                    // assumed it would get to them soon. Wake a sleeper to steal them.
                    pool.notify_parked();
                }
                if stuck >= threshold && !s.reported {
                    s.reported = true;
                    mon.reported.fetch_add(1, Relaxed);
                    report(running, pool.pool, i, stuck);
                }
            }
        }
        pause = if all_parked { threshold } else { period };
    }
}

fn report(running: u64, pool: crate::Pool, worker: usize, stuck: Duration) {
    let id = running & !FIBER_BIT;
    let what = if running & FIBER_BIT != 0 {
        match name_of(id) {
            Some(name) => format!("fiber '{name}' (id {id})"),
            None => format!("fiber {id}"),
        }
    } else {
        format!("task {id}")
    };
    eprintln!(
        "weft: stall: {what} has kept worker {worker} of the {pool:?} pool for {:.1} s \
         without returning to the scheduler (wait or yield in long loops; \
         WEFT_DEBUG_STALL=0 turns this report off)",
        stuck.as_secs_f64()
    );
}
