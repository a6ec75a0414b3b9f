//! Sysmon (spec 003): the runtime's monitor thread. It reports stalls and starts
//! temporary workers.
//!
//! One thread per runtime, started by the first worker to run (see
//! [`Doorbell`](crate::scheduler::idle::Doorbell)), and only if the stall report or
//! temporary workers are on. While a worker runs it looks at every worker once per
//! interval (5 ms with temporary workers on; otherwise a fifth of the stall threshold,
//! 10 to 100 ms): a worker whose poll counter has not moved while it is inside a poll
//! (not parked) is running one task or fiber without returning to the scheduler.
//! Once every worker has been parked for [`IDLE_GRACE`] it sleeps with no timeout: an
//! idle runtime costs no wake-ups, and the first worker to leave the parked set rings
//! it awake (a futex wake on that worker's way out of `park`, once per idle spell; in
//! busy times one load there, and nothing on the spawn and wake paths).
//!
//! * **Temporary workers.** A worker stuck in one poll for [`STALE_AFTER`] while tasks
//!   wait for its pool and none of the pool's workers is parked or searching to take
//!   them: sysmon starts a temporary worker for the pool (at most one per
//!   [`STALE_AFTER`] per pool, up to base + K workers; see
//!   [`Builder::max_extra_workers`](crate::Builder::max_extra_workers)). It runs like
//!   any worker and retires on its own after a keep-alive of idleness (see `Core::park`
//!   and the protocol in `scheduler::idle`).
//! * **Stalled workers.** After a sysmon period a stuck worker is marked *stalled*:
//!   soft-homed fibers are then sent elsewhere. If tasks wait in its stealable queue
//!   while nobody searches, a parked worker is woken to steal them after
//!   [`STALE_AFTER`] (a worker wakes a sleeper for its queue only when the queued work
//!   outlasts a wake: see `Core::evict_lifo`). Likewise when a running worker's
//!   stealable queue has held tasks at every look for [`STALE_AFTER`], however short
//!   its polls (a fan-out of short tasks that the average said were not worth a wake).
//!   And when the injection queue has held tasks at every look for [`STALE_AFTER`]
//!   while one of the pool's workers sleeps and nobody searches (a spawn from outside
//!   skips its wake for a searcher, which may then find the work not worth a wake and
//!   block in its next poll), the sleeper is woken.
//! * **Handed fibers.** Fibers handed, before they started, to a worker that has
//!   polled nothing for [`STALE_AFTER`] go to the injection queue, where any worker
//!   starts them (see `Core::fewer_fibers_elsewhere`).
//! * **Unheld drivers.** The timer and I/O drivers with work (timers pending or
//!   sockets registered) and nobody holding them at two looks in a row while a worker
//!   of any pool sleeps on its futex: that worker is nudged, and takes them on its way
//!   back to park; with no worker asleep and none polling, a short-lived thread fires
//!   the due timers and polls the sockets (see `nudge_for_the_drivers`).
//! * **Unclaimed fork-join work.** Jobs in a running worker's deque at two looks in a
//!   row while nobody searches: a sleeper is woken for them. A `join` whose earlier
//!   joins were short shows its half without a wake and relies on the next heartbeat,
//!   which never comes when the first half joins no more (found in review,
//!   `tests/review_claim.rs`).
//! * **The stall report.** After the threshold (default 5 s) the task is reported once
//!   on stderr with its id, its name if it is a named fiber, and the worker.
//!   `WEFT_DEBUG_STALL=0` or [`Builder::stall_report(None)`](crate::Builder::stall_report)
//!   turns it off.
//!
//! `WEFT_DEBUG_SYSMON=1` logs the scaling decisions (a start, with the stuck worker,
//! the task and the queued work that caused it; a start refused at the cap; a retire).
//! The counters are read with relaxed loads: a decision made on a stale view costs a
//! temporary worker that retires again, never a lost task.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::Weak;
use std::time::{Duration, Instant};

use super::Inner;
use crate::base::Arc;
use crate::scheduler::idle::Doorbell;

use crate::task::header::FIBER_BIT;

/// How long a worker may run one task or fiber, with work waiting, before sysmon adds
/// a temporary worker to its pool; also the least time between two such starts.
pub(crate) const STALE_AFTER: Duration = Duration::from_millis(10);

/// How often sysmon looks while temporary workers are on and some worker runs.
const TEMP_INTERVAL: Duration = Duration::from_millis(5);

/// How long every worker must have been parked before sysmon sleeps without a timeout.
/// Waking it costs the first worker to leave the parked set a futex wake on its way to
/// its task; with this grace that is paid once per idle spell of at least this length,
/// not at every short gap between bursts of work (measured: the `wake` suite's bursts,
/// 20 ms apart, took 20-50 % longer when every one of them rang).
const IDLE_GRACE: Duration = Duration::from_millis(100);

/// The handle the runtime keeps: its configuration, stops the thread, counts reports.
pub(crate) struct Sysmon {
    stop: AtomicBool,
    pub(crate) reported: AtomicU64,
    /// The stall report's threshold, if it is on.
    stall: Option<Duration>,
    /// `WEFT_DEBUG_SYSMON`.
    debug: bool,
    doorbell: Arc<Doorbell>,
}

impl Sysmon {
    pub(crate) fn new(stall: Option<Duration>, debug: bool, doorbell: Arc<Doorbell>) -> Self {
        Sysmon {
            stop: AtomicBool::new(false),
            reported: AtomicU64::new(0),
            stall,
            debug,
            doorbell,
        }
    }

    pub(crate) fn stop(&self) {
        self.stop.store(true, SeqCst);
        self.doorbell.wake();
    }

    fn stopped(&self) -> bool {
        self.stop.load(SeqCst)
    }
}

/// What sysmon remembers about one worker slot.
struct Seen {
    polls: u64,
    since: Instant,
    reported: bool,
    /// Since when its stealable queue has held tasks at every look while it ran.
    queued_since: Option<Instant>,
    /// Since when fibers handed to it have waited at every look while its poll count
    /// stood still.
    handed_since: Option<Instant>,
    /// Its fork-join deque held jobs at the last look while it ran.
    jobs_seen: bool,
}

/// What sysmon remembers about one pool.
struct PoolWatch {
    /// No temporary worker starts before this (backoff).
    next_start: Instant,
    /// The cap was reported for the current stuck spell (`WEFT_DEBUG_SYSMON`).
    cap_logged: bool,
    /// Since when the injection queue has held tasks at every look while a worker of
    /// the pool slept.
    inject_since: Option<Instant>,
}

/// A worker found stuck in one poll.
struct Stuck {
    worker: usize,
    running: u64,
    for_: Duration,
}

/// How often sysmon looks for the stall report alone: a fifth of its threshold.
fn stall_period(stall: Option<Duration>) -> Option<Duration> {
    stall.map(|t| (t / 5).clamp(Duration::from_millis(10), Duration::from_millis(100)))
}

/// How often sysmon looks while a worker runs, for a stall threshold (if the report is
/// on) and whether temporary workers are on.
fn period(stall: Option<Duration>, temp_on: bool) -> Duration {
    match (stall_period(stall), temp_on) {
        (Some(p), true) => p.min(TEMP_INTERVAL),
        (Some(p), false) => p,
        (None, _) => TEMP_INTERVAL,
    }
}

/// Whether a sysmon runs for this configuration and finds tasks queued behind a worker
/// stuck in one poll within about [`STALE_AFTER`] (it then wakes a sleeper to steal
/// them). Where it does not (no sysmon: no stall report and no temporary workers; or
/// only the stall report, looking every 100 ms), a task pushed out of the LIFO slot
/// keeps waking a sleeper (see `Core::evict_lifo`): left to the rescue, it waited
/// 100-200 ms, or for ever, behind a task that blocked its worker.
pub(crate) fn rescues_quickly(stall: Option<Duration>, temp_on: bool) -> bool {
    (stall.is_some() || temp_on) && period(stall, temp_on) <= STALE_AFTER
}

/// The sysmon thread's body: runs until the runtime stops it or goes away.
pub(crate) fn run(rt: Weak<Inner>, mon: Arc<Sysmon>) {
    let stall_period = stall_period(mon.stall);
    let temp_on = match rt.upgrade() {
        Some(inner) => inner.pools.iter().any(|p| p.num_slots() > p.num_workers()),
        None => return,
    };
    let period = period(mon.stall, temp_on);
    // Soft-homed fibers leave a worker stuck for this long.
    let mark_stalled_after = stall_period.unwrap_or(Duration::from_millis(100));
    let mut seen: HashMap<(usize, usize), Seen> = HashMap::new();
    let mut watch: Vec<PoolWatch> = Vec::new();
    // Since when every worker has been parked (as sysmon saw it).
    let mut idle_since: Option<Instant> = None;
    // The drivers' hold word at the last look, if nobody held them while they had
    // work (see `nudge_for_the_drivers`).
    let mut unheld: Option<usize> = None;
    // Rescues of the drivers under way (see `nudge_for_the_drivers`).
    let rescuing = std::sync::Arc::new(AtomicUsize::new(0));
    while !mon.stopped() {
        let Some(inner) = rt.upgrade() else { return };
        let now = Instant::now();
        watch.resize_with(inner.pools.len(), || PoolWatch {
            next_start: now,
            cap_logged: false,
            inject_since: None,
        });
        let mut all_parked = true;
        // No worker has polled a task since the last look (parked ones aside: the
        // drivers' nudge looks for those first).
        let mut all_stuck = true;
        for (p, pool) in inner.pools.iter().enumerate() {
            let mut stuck: Option<Stuck> = None;
            let mut any_parked = false;
            for (i, remote) in pool.remotes.iter().enumerate() {
                if !remote.active.load(SeqCst) {
                    seen.remove(&(p, i));
                    continue;
                }
                let polls = remote.counters.polled.get();
                let running = remote.running_task.load(Relaxed);
                let parked = pool.idle.is_parked(i);
                all_parked &= parked;
                any_parked |= parked;
                let s = seen.entry((p, i)).or_insert(Seen {
                    polls,
                    since: now,
                    reported: false,
                    queued_since: None,
                    handed_since: None,
                    jobs_seen: false,
                });
                if parked || remote.steal.is_empty() {
                    s.queued_since = None;
                } else if now - *s.queued_since.get_or_insert(now) >= STALE_AFTER
                    && pool.idle.num_searching() == 0
                {
                    // Tasks have waited in a running worker's queue for a while, each
                    // poll maybe short (a fan-out of tasks under `STALE_AFTER` each,
                    // which the average task time of a worker that ran tiny ones said
                    // were not worth a wake: see `Core::evict_lifo`). Wake a sleeper to
                    // share them; the clock restarts, so at most one wake per
                    // `STALE_AFTER` per worker.
                    s.queued_since = Some(now);
                    pool.notify_parked();
                }
                if parked || remote.jobs.is_empty() {
                    s.jobs_seen = false;
                } else if s.jobs_seen && pool.idle.num_searching() == 0 {
                    // Fork-join jobs offered at two looks in a row and nobody came for
                    // them: a half shown quietly (`Core::outermost_join`: no wake for a
                    // computation whose joins had been short) whose other half joins no
                    // more, so no heartbeat of its own ever wakes a sleeper for it.
                    // Wake one; at most one wake per two looks per worker.
                    s.jobs_seen = false;
                    pool.notify_parked();
                } else {
                    s.jobs_seen = true;
                }
                if parked || polls != s.polls || remote.handed.is_empty() {
                    s.handed_since = None;
                } else if now - *s.handed_since.get_or_insert(now) >= STALE_AFTER {
                    // Fibers handed to a worker before they started, and it has run
                    // nothing since: stuck in one poll or in a fork-join job, maybe
                    // waiting for one of them. They are tied to nobody yet: any worker
                    // may start them (see `Core::fewer_fibers_elsewhere`).
                    s.handed_since = None;
                    pool.rescue_handed(i);
                }
                // Whatever `running` says: a worker running a stolen fork-join half at
                // the top of its loop shows no task for as long as the half runs (found
                // in review: workers all inside one long `join` had no rescue,
                // `tests/review_s33c.rs`).
                all_stuck &= polls == s.polls;
                if polls != s.polls || running == 0 || parked {
                    *s = Seen {
                        polls,
                        since: now,
                        reported: false,
                        queued_since: s.queued_since,
                        handed_since: s.handed_since,
                        jobs_seen: s.jobs_seen,
                    };
                    remote.stalled.store(false, Relaxed);
                    continue;
                }
                let for_ = now - s.since;
                if for_ >= STALE_AFTER && stuck.as_ref().is_none_or(|st| for_ > st.for_) {
                    stuck = Some(Stuck {
                        worker: i,
                        running,
                        for_,
                    });
                }
                let stalled = for_ >= mark_stalled_after;
                remote.stalled.store(stalled, Relaxed);
                if for_ >= STALE_AFTER.min(mark_stalled_after)
                    && !remote.steal.is_empty()
                    && pool.idle.num_searching() == 0
                {
                    // Tasks queued behind a worker stuck in one poll: the wake heuristics
                    // (`worth_a_wake`, and a task pushed out of the LIFO slot wakes a
                    // sleeper only for work worth a wake) assumed it would get to them
                    // soon. Wake a sleeper to steal them.
                    pool.notify_parked();
                }
                if let Some(threshold) = mon.stall {
                    if for_ >= threshold && !s.reported {
                        s.reported = true;
                        mon.reported.fetch_add(1, Relaxed);
                        report(running, pool.pool, i, for_);
                    }
                }
            }
            let w = &mut watch[p];
            if !any_parked || pool.inject.is_empty() {
                w.inject_since = None;
            } else if now - *w.inject_since.get_or_insert(now) >= STALE_AFTER
                && pool.idle.num_searching() == 0
            {
                // Tasks in the injection queue beside a sleeper and nobody searching:
                // a spawn or wake from outside skipped its wake for a searcher, which
                // then judged the work not worth a wake (tiny tasks measured) and ran
                // into a poll that blocked. Nobody else looks at that queue until the
                // poll ends (found in a whole-suite run, `tests/stall.rs`). Wake the
                // sleeper; at most one wake per `STALE_AFTER` per pool.
                w.inject_since = Some(now);
                pool.notify_parked();
            }
            match stuck {
                Some(st) if !any_parked => consider_start(&inner, &mon, p, st, w, now),
                _ => w.cap_logged = false,
            }
        }
        unheld = nudge_for_the_drivers(&inner, unheld, all_stuck, &rescuing);
        if !all_parked {
            idle_since = None;
        }
        let idle_for = now - *idle_since.get_or_insert(now);
        if all_parked && idle_for >= IDLE_GRACE {
            // Nothing to watch: sleep until a worker leaves the parked set. The bits are
            // read again after `asleep` is set (see `Doorbell` for why no ring is lost).
            mon.doorbell.prepare_sleep();
            let still = inner.pools.iter().all(|pool| {
                pool.remotes
                    .iter()
                    .enumerate()
                    .all(|(i, r)| !r.active.load(SeqCst) || pool.idle.is_parked(i))
            });
            drop(inner);
            if still && !mon.stopped() {
                mon.doorbell.sleep(None);
                seen.clear();
                idle_since = None;
                continue;
            }
        } else {
            drop(inner);
        }
        mon.doorbell.sleep(Some(period));
    }
}

/// Rescues of the drivers (see [`nudge_for_the_drivers`]) that may run at once.
const MAX_RESCUES: usize = 4;

/// The drivers (timers and sockets, one per runtime) with work and nobody in them: a
/// worker that wakes from holding them to run what they woke hands them on only for
/// pending timers, and only to a sleeper of its own pool (a futex wake each time the
/// holder wakes would cost every I/O wake-up a second one). Busy workers poll them at
/// their fairness points, but while the former holder runs a long poll and the other
/// workers sleep on their futexes, nobody reads the sockets or fires the timers: an
/// interactive task's socket event or sleep waited for a blocked default worker (found
/// in review, `tests/review_net.rs`). If the drivers were unheld with work at two looks
/// in a row (the hold word unchanged: nobody took them in between) while a worker of
/// any pool sleeps, that worker is nudged (not claimed): it finds no work, goes back to
/// park, and takes the drivers. At most one wake per two periods, and only then.
///
/// With no worker asleep, every worker runs: busy ones fire timers and poll sockets at
/// their fairness points, but workers each inside one long poll reach none, and a plain
/// thread's socket timeout, a socket event for it, or a sleep of a task waited for the
/// end of those polls (found in review, `tests/review_s33.rs`). When no worker has run
/// a new poll since the last look either (`all_stuck`), the drivers are rescued: a
/// short-lived thread fires the due timers and polls the sockets (zero timeout, unless
/// a worker's poll is under way), at most one start per two looks. Not on
/// this thread: those wakes run wakers, user code, and one that took its time here
/// stopped the temporary workers and stall reports of every pool (found in review,
/// `tests/review_s33b.rs`). The rescue's wakes are remote ones: a woken task
/// goes to the injection queue, where a temporary worker started for the stuck ones,
/// or the next worker to look, takes it.
///
/// Returns the hold word to compare at the next look.
///
/// Rescues run one at a time unless one is held up (a waker that takes its time):
/// then up to [`MAX_RESCUES`] at once, so that one slow waker does not leave every
/// other timer and socket to the stuck workers (found in review,
/// `tests/review_s33c.rs`). While every worker stays stuck with sockets registered, a
/// rescue thread starts every two looks (one thread start per 10 ms).
fn nudge_for_the_drivers(
    inner: &Arc<Inner>,
    last: Option<usize>,
    all_stuck: bool,
    rescuing: &std::sync::Arc<AtomicUsize>,
) -> Option<usize> {
    let time = &inner.time;
    let word = time.hold_word();
    if word & 1 == 1 || !(time.has_pending() || time.has_io_sources()) {
        return None;
    }
    if last != Some(word) {
        return Some(word);
    }
    for pool in inner.pools.iter() {
        // (`usize::MAX`: no worker excepted.)
        if let Some(i) = pool.idle.any_parked_except(usize::MAX) {
            pool.remotes[i].parker.unpark();
            return None;
        }
    }
    if all_stuck && rescuing.load(SeqCst) < MAX_RESCUES {
        rescuing.fetch_add(1, SeqCst);
        let (time, count) = (time.clone(), rescuing.clone());
        let rt = super::Handle {
            inner: inner.clone(),
        };
        // A thread of its own, detached: neither sysmon nor the runtime's drop waits
        // for a waker that takes its time (the blocking pool's threads are waited for
        // by the drop). In the runtime's context, as a worker firing the same timer
        // is (a waker may spawn).
        let started = std::thread::Builder::new()
            .name("weft-drivers".into())
            .spawn(move || {
                // Counted out also if the rescue unwinds (its wakes are guarded; a
                // waker's drop is not), or rescues would stop at the cap.
                struct Done(std::sync::Arc<AtomicUsize>);
                impl Drop for Done {
                    fn drop(&mut self) {
                        self.0.fetch_sub(1, SeqCst);
                    }
                }
                let _done = Done(count);
                let _entered = rt.enter();
                time.process();
                time.poll_io();
            });
        if started.is_err() {
            rescuing.fetch_sub(1, SeqCst);
        }
        return None;
    }
    Some(word)
}

/// A worker of pool `p` is stuck (and no worker of the pool is parked): starts a
/// temporary worker if work waits, nobody searches for it, the cap allows and the
/// backoff has passed.
fn consider_start(
    inner: &Inner,
    mon: &Sysmon,
    p: usize,
    st: Stuck,
    w: &mut PoolWatch,
    now: Instant,
) {
    let pool = &inner.pools[p];
    if !pool.has_work_for(usize::MAX) || pool.idle.num_searching() != 0 || now < w.next_start {
        return;
    }
    let debug = mon.debug || inner.threads.debug;
    let waiting = pool.visible_tasks_for(usize::MAX);
    let (base, cap) = (pool.num_workers(), pool.num_slots());
    let Some((slot, parts)) = pool.take_slot() else {
        if debug && !w.cap_logged && cap > base {
            w.cap_logged = true;
            eprintln!(
                "weft: sysmon: not starting a temporary worker for the {:?} pool: worker {} \
                 has run {} for {} ms with {waiting} tasks waiting, but all {base} + {} \
                 workers run (max_extra_workers)",
                pool.pool,
                st.worker,
                describe(st.running),
                st.for_.as_millis(),
                cap - base,
            );
        }
        return;
    };
    w.next_start = now + STALE_AFTER;
    if debug {
        eprintln!(
            "weft: sysmon: starting temporary worker {slot} for the {:?} pool: worker {} has \
             run {} for {} ms with {waiting} tasks waiting (now {} workers, at most {base} \
             + {})",
            pool.pool,
            st.worker,
            describe(st.running),
            st.for_.as_millis(),
            pool.active_workers(),
            cap - base,
        );
    }
    // Counted before the thread runs, so a retire is never counted before its start.
    inner.threads.temp_started.fetch_add(1, Relaxed);
    match inner.threads.spawn(pool.clone(), slot, parts) {
        Ok(Some(_detached)) => {}
        // Shutting down: the slot went back.
        Ok(None) => {
            inner.threads.temp_started.fetch_sub(1, Relaxed);
        }
        Err(e) => {
            inner.threads.temp_started.fetch_sub(1, Relaxed);
            pool.abandon_slot(slot);
            if debug {
                eprintln!("weft: sysmon: could not start a temporary worker: {e}");
            }
        }
    }
}

fn describe(running: u64) -> String {
    let id = running & !FIBER_BIT;
    if running & FIBER_BIT != 0 {
        match crate::task::diag::name_of(id) {
            Some(name) => format!("fiber '{}' (id {id})", name.escape_debug()),
            None => format!("fiber {id}"),
        }
    } else {
        format!("task {id}")
    }
}

fn report(running: u64, pool: crate::Pool, worker: usize, stuck: Duration) {
    let what = describe(running);
    eprintln!(
        "weft: stall: {what} has kept worker {worker} of the {pool:?} pool for {:.1} s \
         without returning to the scheduler (wait or yield in long loops; \
         WEFT_DEBUG_STALL=0 turns this report off)",
        stuck.as_secs_f64()
    );
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A task left in the injection queue with no wake (a spawn from outside skips its
    /// wake while a worker searches; that searcher, having measured tiny tasks, may
    /// judge it not worth a wake and then block in its next poll) while one worker is
    /// stuck and the other sleeps: sysmon wakes the sleeper for it. Before, it waited
    /// for the stuck poll to end (`tests/stall.rs`'s queued-behind test failed once
    /// so in a whole-suite run, its second blocker never started).
    #[test]
    fn a_task_left_in_the_injection_queue_wakes_a_sleeper() {
        let rt = crate::Builder::new().worker_threads(2).build().unwrap();
        let pool = rt.handle().inner.pools[0].clone();
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let blocker = rt.spawn(async move {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(20));
        });
        started.recv_timeout(Duration::from_secs(10)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !((0..2).any(|i| pool.idle.is_parked(i)) && pool.idle.num_searching() == 0) {
            assert!(Instant::now() < deadline, "the other worker never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        let left = pool.spawn_without_a_wake(async { 7 });
        let deadline = Instant::now() + Duration::from_secs(5);
        while !left.is_finished() {
            assert!(
                Instant::now() < deadline,
                "a task left in the injection queue waited behind the stuck worker"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(left.join().unwrap(), 7);
        drop(release);
        blocker.join().unwrap();
    }
}
