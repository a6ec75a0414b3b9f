//! Review of ff4da28 (session 24): a fiber about to start on a worker with at least
//! two more fibers tied to it than another base worker is offered, unstarted, to that
//! worker through its `handed` queue; sysmon moves the handed fibers of a worker that
//! has polled nothing for `STALE_AFTER` to the injection queue; no hand-off without a
//! quick sysmon.
//!
//! Attacked from safe code: that the hand-off happens at all (so that the rest tests
//! something), that a handed fiber starts promptly on a parked target (no lost wake-up),
//! on a target stuck in a fork-join job, in a task spinning on yields, or in a
//! thread-blocking wait (sysmon's rescue), that a handed fiber rescued to a temporary
//! worker keeps that worker from retiring and stays on its thread, that aborting a
//! handed fiber drops it once and leaves no count behind (no lasting imbalance), that
//! runtime drop and `shutdown_timeout` amid hand-offs drop every closure once and unwind
//! every started fiber on its own thread, that configurations without a quick sysmon
//! hand nothing over, and storms of fibers from threads, tasks, fibers, fork-join jobs
//! and the interactive pool.
//!
//! Checked against bugs planted one at a time in ff4da28 (then removed): no `handed`
//! re-check in `Core::park` (caught by the first two tests, the abort, panic and storm
//! tests); no sysmon rescue, or handed fibers sent to the target's inbox instead
//! (the fork-join and temporary-worker tests); hand-offs without a quick sysmon (the
//! configuration test); a rescued fiber keeping the reserved count of the worker it
//! was handed to (the temporary-worker test: its worker retired under it); a count
//! reserved twice (the abort and panic tests, and the first two); handed fibers taken
//! only after yielded tasks and not at the fairness point (the busy-yielding test).
//! Not caught: `cancel_all` leaving the `handed` queues open (the runtime-drop test
//! rarely finds fibers there: the target or sysmon takes them within milliseconds),
//! and a handed fiber decoded as pinned (harmless: it is never in a queue that looks).
//!
//! Every test runs under a watchdog, so a hang fails it.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{mpsc, Arc};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::placement::*;
use common::{counter, load, on, with_timeout, workers, TIMEOUT};
use weft::fiber;

/// Records, when dropped, whether it is dropped on the thread it was made on.
struct OnThread {
    made: ThreadId,
    dropped: Arc<AtomicUsize>,
    elsewhere: Arc<AtomicUsize>,
}

impl Drop for OnThread {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, SeqCst);
        if std::thread::current().id() != self.made {
            self.elsewhere.fetch_add(1, SeqCst);
        }
    }
}

/// A fiber's body that waits in four ways and says whether it stayed on its thread (and
/// thread-local) throughout; returns its thread.
fn waits_in_place() -> Result<ThreadId, String> {
    let start = here();
    let check = |what: &str| {
        let now = here();
        if now == start {
            Ok(())
        } else {
            Err(format!("a fiber moved across {what}: {start:?} -> {now:?}"))
        }
    };
    fiber::yield_now();
    check("yield_now")?;
    fiber::sleep(ms(1));
    check("sleep")?;
    let (tx, rx) = weft::chan::bounded::<u8>(1);
    let _t = weft::spawn(async move { tx.send(1).await.unwrap() });
    assert_eq!(weft::wait(rx.recv()), Ok(1));
    check("a channel receive")?;
    fiber::spawn(fiber::yield_now).join().unwrap();
    check("a fiber's join")?;
    Ok(start.0)
}

/// [`start_one_by_one`] on the hub's fiber: how many started on the hub's thread and
/// how many elsewhere.
fn spread_from_hub(hub: &Hub, n: usize) -> (usize, usize) {
    let at = hub.at;
    let starts = hub.run(move || start_one_by_one(n));
    let on_hub = starts.iter().filter(|&&t| t == at).count();
    (on_hub, n - on_hub)
}

// ---------------------------------------------------------------------------------
// The hand-off happens, and a handed fiber starts promptly where it was handed.

/// Two fibers tied to the hub's worker and none to the other: a fiber the hub spawns
/// is handed to the other worker, starts there at once, and stays there across its
/// waits. (This is what makes the other tests here reach the hand-off.)
#[test]
fn a_fiber_spawned_on_a_crowded_worker_starts_on_the_idle_one() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        for round in 0..20 {
            let t0 = Instant::now();
            let ran_on = hub
                .run(|| fiber::spawn(waits_in_place).join().unwrap())
                .unwrap_or_else(|e| panic!("{e}"));
            let took = t0.elapsed();
            assert_ne!(
                ran_on, hub.at,
                "round {round}: the fiber started beside the hub's two, none on the other \
                 worker"
            );
            assert!(took < ms(1_000), "round {round}: the fiber took {took:?}");
        }
        hub.close();
    })
}

/// The target of a hand-off is usually asleep: hundreds of hand-offs in a row to a
/// worker that parks between them (its spin ends, it may hold the timer driver), each
/// started within a second. A lost wake-up leaves the fiber in a parked worker's
/// `handed` queue, where sysmon never looks (it only rescues from running workers).
#[test]
fn hand_offs_to_a_parked_worker_are_never_lost() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        let mut away = 0;
        for round in 0..300u64 {
            if round % 3 == 0 {
                // Let the other worker go past its spin into a real sleep.
                std::thread::sleep(Duration::from_micros(200 + (round % 7) * 300));
            }
            let t0 = Instant::now();
            let at = hub.run_within(ms(2_000), || {
                fiber::spawn(|| std::thread::current().id()).join().unwrap()
            });
            let at = at.unwrap_or_else(|| {
                panic!("round {round}: a handed fiber did not run within 2 s (lost wake-up)")
            });
            assert!(
                t0.elapsed() < ms(1_500),
                "round {round}: {:?}",
                t0.elapsed()
            );
            away += usize::from(at != hub.at);
        }
        hub.close();
        assert!(away >= 250, "only {away} of 300 fibers were handed over");
    })
}

// ---------------------------------------------------------------------------------
// A target that cannot run what it was handed, or runs other things first.

/// The target worker runs a fork-join job that blocks its thread waiting for what a
/// fiber sends (a `weft::join` whose first half waits on a std channel): it polls
/// nothing, so sysmon moves its handed fibers where the hub's worker takes them.
#[test]
fn a_worker_blocked_in_a_fork_join_job_gets_the_fiber_it_waits_for() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        for round in 0..3 {
            let (msg_tx, msg_rx) = mpsc::channel::<()>();
            let (up_tx, up_rx) = mpsc::channel::<()>();
            let (blocker, _at) = spawn_away_from(&rt, &hub, async move {
                let (got, _) = weft::join(
                    move || {
                        up_tx.send(()).unwrap();
                        msg_rx.recv_timeout(Duration::from_secs(3)).is_ok()
                    },
                    || 1,
                );
                got
            });
            up_rx.recv_timeout(TIMEOUT).unwrap();
            let (got, took, _) = hub.release_from_a_new_fiber(blocker, msg_tx);
            assert!(
                got && took < ms(2_000),
                "round {round}: the fiber that the fork-join job waits for did not run \
                 (got it: {got}, after {took:?})"
            );
        }
        hub.close();
    })
}

/// A future that is pending once, waking itself (a task's yield).
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

/// The target worker keeps polling (so sysmon never rescues its handed fibers) a task
/// that yields until a fiber sets a flag, or a fiber of its own that does the same: the
/// handed fiber must come before what yielded, or it never starts.
#[test]
fn a_worker_busy_yielding_takes_the_fiber_it_waits_for() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        // An async task spinning on yields.
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = flag.clone();
        let (spinner, spin_at) = spawn_away_from(&rt, &hub, async move {
            let t0 = Instant::now();
            while !f2.load(SeqCst) && t0.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_micros(100));
                YieldOnce(false).await;
            }
            f2.load(SeqCst)
        });
        std::thread::sleep(ms(20));
        let t0 = Instant::now();
        let f3 = flag.clone();
        let ran_on = hub.run_in_a_new_fiber(move || f3.store(true, SeqCst));
        let got = spinner.join().unwrap();
        let took = t0.elapsed();
        assert!(
            got && took < ms(1_000),
            "a fiber handed to a worker spinning on a task's yields waited {took:?} (got: \
             {got}; ran on the spinner's worker: {})",
            ran_on == spin_at
        );
        assert_eq!(
            ran_on, spin_at,
            "the fiber was not handed to the idle worker"
        );

        // A fiber spinning on `fiber::yield_now` on the other worker (one fiber tied
        // there), and three tied to the hub's: the next one is handed over.
        let flag = Arc::new(AtomicBool::new(false));
        let f2 = flag.clone();
        let (spin_fiber, spin_at) = spawn_away_from(&rt, &hub, async move {
            // In a tuple: the task returns the fiber's handle, not its output.
            (fiber::spawn(move || {
                let start = here();
                let t0 = Instant::now();
                while !f2.load(SeqCst) && t0.elapsed() < Duration::from_secs(3) {
                    std::thread::sleep(Duration::from_micros(100));
                    fiber::yield_now();
                }
                assert_eq!(here(), start, "the spinning fiber moved");
                f2.load(SeqCst)
            }),)
        });
        std::thread::sleep(ms(20));
        let (release, parked) = weft::chan::bounded::<()>(1);
        // Starts beside the hub's two (one fiber on the other worker): three there.
        let third = hub.run(move || {
            let h = fiber::spawn(move || {
                let _ = weft::wait(parked.recv());
            });
            fiber::yield_now();
            h
        });
        let t0 = Instant::now();
        let f3 = flag.clone();
        let ran_on = hub.run_in_a_new_fiber(move || f3.store(true, SeqCst));
        let got = spin_fiber.join().unwrap().0.join().unwrap();
        let took = t0.elapsed();
        drop(release);
        third.join().unwrap();
        hub.close();
        assert!(
            got && took < ms(1_000),
            "a fiber handed to a worker whose fiber spins on yields waited {took:?} (got: \
             {got}; ran there: {})",
            ran_on == spin_at
        );
    })
}

// ---------------------------------------------------------------------------------
// Counts: a rescued fiber ties the worker it starts on; an aborted one ties nobody.

/// Both base workers stuck: the target of a hand-off in a task waiting (blocking its
/// thread) for what the handed fiber sends, the hub's worker in a job that blocks its
/// thread. Sysmon moves the handed fiber to the injection queue and starts a temporary
/// worker, which starts it: the fiber is now tied to that temporary worker, which must
/// not retire while the fiber sleeps (past its 20 ms keep-alive), or the fiber's next
/// run is on another thread.
#[test]
fn a_fiber_rescued_to_a_temporary_worker_ties_it_and_stays_put() {
    with_timeout(|| {
        let rt = with_temps(2);
        let hub = Hub::new(&rt);
        for round in 0..2 {
            let (blocker, stuck, msg_tx) = block_away_from(&rt, &hub, Duration::from_secs(3));
            let t0 = Instant::now();
            let fiber = hub.run(move || {
                let h = fiber::spawn(move || {
                    let start = here();
                    let _ = msg_tx.send(());
                    fiber::sleep(ms(150));
                    let mid = here();
                    fiber::sleep(ms(60));
                    (start, mid, here())
                });
                // Polled here: handed over (or started, if the other worker was marked
                // stalled already).
                fiber::yield_now();
                // Now this worker is stuck too.
                std::thread::sleep(ms(300));
                h
            });
            let got = blocker.join().unwrap();
            let took = t0.elapsed();
            let (start, mid, end) = fiber.join().unwrap();
            assert!(
                got && took < ms(2_000),
                "round {round}: the fiber did not run while both base workers were stuck \
                 (got: {got}, after {took:?})"
            );
            assert_ne!(start.0, stuck, "round {round}: ran on the stuck worker");
            assert_eq!(
                (start, start),
                (mid, end),
                "round {round}: a fiber rescued from a handed queue changed thread"
            );
        }
        hub.close();
        retired_all(&rt);
    })
}

/// Fibers handed to a stuck worker and aborted there (then cancelled by whoever takes
/// them after sysmon's rescue) are dropped once, without running, and leave no count
/// on the worker they were handed to: fibers started one by one afterwards spread
/// evenly again. (A count left over shows as fibers piling up on the hub's worker.)
#[test]
fn aborting_handed_fibers_drops_them_once_and_leaves_no_count() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        let tracker = Tracker::new();
        let ran = counter();
        let (blocker, _stuck, msg_tx) = block_away_from(&rt, &hub, ms(800));
        let (t, r) = (tracker.clone(), ran.clone());
        let handles = hub.run(move || {
            (0..30)
                .map(|_| {
                    let (v, r) = (t.make(), r.clone());
                    let h = fiber::spawn(move || {
                        let _v = v;
                        r.fetch_add(1, SeqCst);
                        fiber::sleep(Duration::from_secs(3_600));
                    });
                    // Polled: handed over, or started beside the hub.
                    fiber::yield_now();
                    h.abort();
                    h
                })
                .collect::<Vec<_>>()
        });
        for h in handles {
            assert!(h.join().unwrap_err().is_cancelled());
        }
        assert_eq!(load(&tracker.twice), 0, "a fiber's capture dropped twice");
        tracker.check("abort");
        assert!(load(&ran) <= 30);
        drop(msg_tx);
        assert!(!blocker.join().unwrap());
        std::thread::sleep(ms(50));
        let (on_hub, other) = spread_from_hub(&hub, 24);
        hub.close();
        // The hub's two count on its worker: 11/13 when all is well.
        assert!(
            on_hub.abs_diff(other) <= 6,
            "{on_hub} fibers started on the hub's worker, {other} on the other: counts \
             of aborted handed fibers were left behind"
        );
    })
}

/// Fibers that panic at once after being handed over: each handle reports the panic,
/// and no count is left behind.
#[test]
fn handed_fibers_that_panic_leave_no_count() {
    with_timeout(|| {
        let rt = workers(2);
        let hub = Hub::new(&rt);
        for _ in 0..20 {
            let r = hub.run(|| fiber::spawn(|| quiet_panic()).join());
            assert!(r.unwrap_err().is_panic());
        }
        let (on_hub, other) = spread_from_hub(&hub, 24);
        hub.close();
        assert!(
            on_hub.abs_diff(other) <= 6,
            "{on_hub} fibers started on the hub's worker, {other} on the other"
        );
    })
}

// ---------------------------------------------------------------------------------
// Shutdown amid hand-offs.

/// Dropping the runtime (or `shutdown_timeout`) while a spawner fiber hands fibers to
/// a worker that is busy in one poll (so they wait in its `handed` queue, or in the
/// injection queue after sysmon's rescue): the drop returns, every closure is dropped
/// exactly once, and every fiber that started is unwound on its own thread.
#[test]
fn dropping_the_runtime_with_fibers_in_a_handed_queue() {
    let _heavy = heavy();
    with_timeout(|| {
        let tracker = Tracker::new();
        let started = counter();
        let unwound = counter();
        let elsewhere = counter();
        for iter in 0..10u64 {
            let rt = if iter % 2 == 0 {
                workers(2)
            } else {
                with_temps(2)
            };
            let hub = Hub::new(&rt);
            let (_blocker, _stuck, release) = block_away_from(&rt, &hub, ms(300));
            let (t, s, u, e) = (
                tracker.clone(),
                started.clone(),
                unwound.clone(),
                elsewhere.clone(),
            );
            let spawned = Arc::new(AtomicUsize::new(0));
            let sp = spawned.clone();
            let _ = hub.jobs.try_send(Box::new(move || {
                for n in 0..200 {
                    let v = t.make();
                    let (s, u, e) = (s.clone(), u.clone(), e.clone());
                    let r = fiber::try_spawn(move || {
                        let _v = v;
                        s.fetch_add(1, SeqCst);
                        let _g = OnThread {
                            made: std::thread::current().id(),
                            dropped: u,
                            elsewhere: e,
                        };
                        fiber::sleep(Duration::from_secs(3_600));
                    });
                    if r.is_err() {
                        break;
                    }
                    sp.fetch_add(1, SeqCst);
                    if n % 2 == 0 {
                        fiber::yield_now();
                    }
                }
            }));
            // Until some have been spawned, then at some point of the burst.
            let t0 = Instant::now();
            while load(&spawned) < 10 && t0.elapsed() < TIMEOUT {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_micros(iter * 700));
            let t0 = Instant::now();
            if iter % 3 == 2 {
                rt.shutdown_timeout(ms(100));
                drop(release);
                // A worker given up on may leave its fibers leaked: wait for the blocker
                // to end (it does within 300 ms) before counting.
                std::thread::sleep(ms(400));
            } else {
                drop(release);
                drop(rt);
            }
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "iteration {iter}: shutdown took {:?}",
                t0.elapsed()
            );
            drop(hub);
            assert_eq!(load(&tracker.twice), 0, "a fiber's capture dropped twice");
            assert_eq!(
                load(&elsewhere),
                0,
                "a started fiber was unwound off its thread"
            );
        }
        tracker.check("runtime drop");
        assert!(load(&started) > 0);
    })
}

// ---------------------------------------------------------------------------------
// Configurations.

/// Without a quick sysmon (no temporary workers, and the stall report off or looking
/// only every 100 ms) nothing is handed over: nobody would rescue a fiber handed to a
/// stuck worker. A fiber the hub spawns starts beside it, also while the other worker
/// is stuck waiting for it.
#[test]
fn without_a_quick_sysmon_nothing_is_handed_over() {
    with_timeout(|| {
        for stall in [None, Some(Duration::from_secs(5))] {
            let rt = weft::Builder::new()
                .worker_threads(2)
                .max_extra_workers(0)
                .stall_report(stall)
                .build()
                .unwrap();
            let hub = Hub::new(&rt);
            for _ in 0..5 {
                let at = hub.run(|| fiber::spawn(|| std::thread::current().id()).join().unwrap());
                assert_eq!(at, hub.at, "stall {stall:?}: a fiber was handed over");
            }
            let (blocker, _stuck, msg_tx) = block_away_from(&rt, &hub, Duration::from_secs(3));
            let (got, took, at) = hub.release_from_a_new_fiber(blocker, msg_tx);
            assert!(got);
            assert!(took < ms(1_000), "stall {stall:?}: {took:?}");
            assert_eq!(at, hub.at, "stall {stall:?}: handed to the stuck worker");
            hub.close();
        }
    })
}

/// One base worker with temporary ones: a fiber started on the base worker has nowhere
/// to go, and nothing is handed anywhere; every fiber runs on the base worker.
#[test]
fn one_base_worker_hands_nothing_over() {
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .max_extra_workers(1)
            .build()
            .unwrap();
        let base = rt
            .spawn(async { std::thread::current().id() })
            .join()
            .unwrap();
        let ats = on(&rt, || {
            fiber::spawn(|| {
                let (release, parked) = weft::chan::bounded::<()>(1);
                let fibers: Vec<_> = (0..20)
                    .map(|_| {
                        let parked = parked.clone();
                        let h = fiber::spawn(move || {
                            let start = here();
                            let _ = weft::wait(parked.recv());
                            assert_eq!(here(), start);
                            start.0
                        });
                        fiber::yield_now();
                        h
                    })
                    .collect();
                drop(release);
                fibers
                    .into_iter()
                    .map(|h| h.join().unwrap())
                    .collect::<Vec<_>>()
            })
            .join()
            .unwrap()
        });
        assert!(
            ats.iter().all(|&t| t == base),
            "a fiber left the base worker"
        );
        assert_eq!(rt.stats().temp_workers_started, 0);
    })
}

// ---------------------------------------------------------------------------------
// Storms.

type Checked = Vec<weft::JoinHandle<Result<ThreadId, String>>>;

/// `n` fibers running [`waits_in_place`], each holding a [`Tracked`]; with `wait`, the
/// spawner waits after each for it to start (as a server's accept loop does), which a
/// task may not do (it would spin on its worker).
fn spawn_n(n: usize, wait: bool, tracker: &Tracker) -> Checked {
    let started = counter();
    (0..n)
        .map(|i| {
            let (t, s) = (tracker.make(), started.clone());
            let h = fiber::spawn(move || {
                let _t = t;
                s.fetch_add(1, SeqCst);
                waits_in_place()
            });
            if wait && i % 3 == 0 {
                let t0 = Instant::now();
                while load(&started) <= i && t0.elapsed() < Duration::from_secs(5) {
                    fiber::yield_now();
                    std::thread::yield_now();
                }
            }
            h
        })
        .collect()
}

/// Fibers spawned at once from plain threads, tasks, fibers, fork-join jobs (both
/// halves of a `weft::join` in a task) and tasks of the interactive pool, many started
/// one by one from a fiber (where hand-offs happen): each finishes on the thread it
/// started on, each closure is dropped once, every temporary worker retires.
#[test]
fn a_storm_from_every_context_and_both_pools() {
    let _heavy = heavy();
    with_timeout(|| {
        const PER: usize = 300;
        let rt = Arc::new(
            weft::Builder::new()
                .worker_threads(2)
                .interactive_threads(1)
                .max_extra_workers(2)
                .extra_worker_keep_alive(ms(20))
                .build()
                .unwrap(),
        );
        let tracker = Tracker::new();
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let threads: Vec<_> = (0..6)
            .map(|s| {
                let (rt, tracker, barrier) = (rt.clone(), tracker.clone(), barrier.clone());
                std::thread::spawn(move || -> Checked {
                    barrier.wait();
                    match s {
                        0 => {
                            let _in = rt.handle().enter();
                            spawn_n(PER, false, &tracker)
                        }
                        1 => rt
                            .spawn(async move { spawn_n(PER, false, &tracker) })
                            .join()
                            .unwrap(),
                        2 | 3 => on(&rt, || {
                            fiber::spawn(move || spawn_n(PER, true, &tracker))
                                .join()
                                .unwrap()
                        }),
                        4 => rt
                            .spawn(async move {
                                let t2 = tracker.clone();
                                let (mut a, b) = weft::join(
                                    move || spawn_n(PER / 2, false, &tracker),
                                    move || spawn_n(PER / 2, false, &t2),
                                );
                                a.extend(b);
                                a
                            })
                            .join()
                            .unwrap(),
                        _ => rt
                            .spawn_on(weft::Pool::Interactive, async move {
                                fiber::spawn(move || spawn_n(PER, true, &tracker))
                                    .await
                                    .unwrap()
                            })
                            .join()
                            .unwrap(),
                    }
                })
            })
            .collect();
        let mut done = 0;
        for t in threads {
            for h in t.join().unwrap() {
                h.join().unwrap().unwrap_or_else(|e| panic!("{e}"));
                done += 1;
            }
        }
        assert_eq!(done, 6 * PER);
        retired_all(&rt);
        drop(Arc::try_unwrap(rt).unwrap());
        tracker.check("storm");
    })
}
