//! Adversarial review of graceful shutdown and diagnostics (issue 18), from safe code
//! only: `Runtime::shutdown_graceful` and its report, `Runtime::dump`/`Handle::dump`,
//! `Stats::active_tasks` and the `WEFT_DEBUG_DEADLOCK` watcher, attacked the way a
//! user could. Every wait is bounded (`with_timeout`, `wait_until`), and what reads the
//! environment or stderr runs in a child process.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{counter, load, never_ending, wait_until, with_timeout, DropCounter};
use weft::fiber::{self, SpawnErrorKind};
use weft::{Builder, Handle, JoinHandle, Pool, Runtime, ShutdownReport};

const CHILD: &str = "WEFT_REVIEW_SHUTDOWN_CHILD";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn runtime() -> Runtime {
    Builder::new().worker_threads(2).build().unwrap()
}

/// How many tasks and fibers the dump lists as parked.
fn parked(rt: &Runtime) -> usize {
    rt.dump().to_string().matches(": parked on ").count()
}

/// Joins `h` on a helper thread, so a join that never resolves fails the test (with
/// "hang") instead of stalling it.
fn join_within<T: Send + 'static>(h: JoinHandle<T>) -> Result<T, weft::JoinError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(h.join());
    });
    rx.recv_timeout(common::TIMEOUT)
        .expect("hang: a JoinHandle did not resolve")
}

/// Every line of a dump's text is its header or a task line in the documented shape.
fn check_dump_text(d: &weft::Dump) {
    let text = d.to_string();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("weft dump: {} live tasks and fibers", d.len())
    );
    let mut n = 0;
    for l in lines {
        n += 1;
        assert!(
            l.starts_with("  task ") || l.starts_with("  fiber "),
            "bad line {l:?}"
        );
        assert!(
            l.contains(": scheduled for ") || l.contains(": running") || l.contains(": parked on "),
            "bad state in {l:?}"
        );
        assert!(l.ends_with(" ms") || l.ends_with(" s"), "bad time in {l:?}");
    }
    assert_eq!(n, d.len(), "{text}");
}

// ---------------------------------------------------------------------------------
// Timeouts at the extremes.

/// `Duration::MAX` means "wait as long as it takes": it must not overflow the deadline
/// arithmetic, and the call returns as soon as the work is done.
#[test]
fn graceful_with_duration_max_does_not_overflow() {
    with_timeout(|| {
        let rt = runtime();
        let quick: Vec<_> = (0..4)
            .map(|i| {
                rt.spawn(async move {
                    weft::time::sleep(ms(20)).await;
                    i
                })
            })
            .collect();
        let start = Instant::now();
        let report = rt.shutdown_graceful(Duration::MAX);
        assert_eq!(
            report,
            ShutdownReport {
                finished: 4,
                cancelled: 0
            }
        );
        assert!(start.elapsed() < ms(10_000), "{:?}", start.elapsed());
        for (i, h) in quick.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
    });
}

/// `shutdown_timeout(Duration::MAX)` (the non-graceful form) must not overflow either.
#[test]
fn shutdown_timeout_with_duration_max_does_not_overflow() {
    with_timeout(|| {
        let rt = runtime();
        let drops = counter();
        let h = rt.spawn(never_ending(&drops));
        rt.shutdown_timeout(Duration::MAX);
        assert!(h.join().unwrap_err().is_cancelled());
        assert_eq!(load(&drops), 1);
    });
}

/// A zero timeout cancels at once, but "cancel what is left (parked fibers unwind)"
/// still holds: the idle workers must be given the moment they need to leave and unwind
/// their fibers, not be abandoned as if stuck (which leaks the fibers' locals).
#[test]
fn graceful_with_zero_timeout_still_unwinds_parked_fibers() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let drops = counter();
        let (_keep, never) = weft::chan::unbounded::<()>();
        let mut handles = Vec::new();
        {
            let _e = handle.enter();
            for _ in 0..3 {
                let g = DropCounter(drops.clone());
                let never = never.clone();
                handles.push(fiber::spawn(move || {
                    let _g = g;
                    let _ = never.recv_blocking();
                }));
            }
        }
        handles.push(rt.spawn(never_ending(&drops)));
        wait_until("all four are parked", || parked(&rt) == 4);
        let start = Instant::now();
        let report = rt.shutdown_graceful(Duration::ZERO);
        let took = start.elapsed();
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: 4
            }
        );
        assert_eq!(load(&drops), 4, "every parked fiber was unwound");
        assert!(took < ms(5_000), "{took:?}");
        for h in handles {
            assert!(join_within(h).unwrap_err().is_cancelled());
        }
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

// ---------------------------------------------------------------------------------
// Where shutdown_graceful is called from.

/// The runtime moved into one of its own tasks and shut down there: the call returns
/// (the caller counts as a live task, so it waits the whole timeout), the report counts
/// the caller and a stuck task as cancelled, every handle resolves, and a parked fiber
/// is unwound.
#[test]
fn graceful_from_inside_one_of_its_tasks() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let drops = counter();
        let stuck = rt.spawn(never_ending(&drops));
        let (_keep, never) = weft::chan::unbounded::<()>();
        let g = DropCounter(drops.clone());
        let parked_fiber = {
            let _e = handle.enter();
            fiber::spawn(move || {
                let _g = g;
                let _ = never.recv_blocking();
            })
        };
        let (give, take) = weft::sync::oneshot::channel::<Runtime>();
        let (report_tx, report_rx) = mpsc::channel();
        let caller = rt.spawn(async move {
            let rt = take.await.unwrap();
            let report = rt.shutdown_graceful(ms(100));
            report_tx.send(report).unwrap();
            5
        });
        wait_until("the others are parked", || parked(&rt) == 3);
        give.send(rt).map_err(|_| ()).unwrap();
        let report = report_rx
            .recv_timeout(common::TIMEOUT)
            .expect("hang: shutdown_graceful inside a task did not return");
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: 3
            }
        );
        // The caller was running at the deadline: cancelled or done, but resolved.
        let _ = join_within(caller);
        assert!(join_within(stuck).unwrap_err().is_cancelled());
        assert!(join_within(parked_fiber).unwrap_err().is_cancelled());
        wait_until("both guards dropped", || load(&drops) == 2);
        assert_eq!(handle.stats().active_tasks, 0);
        assert!(handle.dump().is_empty());
    });
}

/// The same from inside a fiber.
#[test]
fn graceful_from_inside_a_fiber() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let drops = counter();
        let stuck = rt.spawn(never_ending(&drops));
        let (give, take) = weft::chan::bounded::<Runtime>(1);
        let (report_tx, report_rx) = mpsc::channel();
        let caller = {
            let _e = handle.enter();
            fiber::spawn(move || {
                let rt = take.recv_blocking().unwrap();
                report_tx.send(rt.shutdown_graceful(ms(100))).unwrap();
            })
        };
        wait_until("both are parked", || parked(&rt) == 2);
        give.send_blocking(rt).map_err(|_| ()).unwrap();
        let report = report_rx
            .recv_timeout(common::TIMEOUT)
            .expect("hang: shutdown_graceful inside a fiber did not return");
        assert_eq!(report.finished + report.cancelled, 2, "{report}");
        assert_eq!(report.cancelled, 2, "{report}");
        let _ = join_within(caller);
        assert!(join_within(stuck).unwrap_err().is_cancelled());
        wait_until("the guard is dropped", || load(&drops) == 1);
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// From a blocking-pool thread (`spawn_blocking`): it must not wait for its own thread
/// to leave the blocking pool (it cannot before it returns), so it returns within about
/// the timeout, and the blocking task's handle resolves.
#[test]
fn graceful_from_a_blocking_pool_thread() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let stuck = rt.spawn(std::future::pending::<()>());
        let (give, take) = mpsc::channel::<Runtime>();
        let caller = rt.spawn_blocking(move || {
            let rt = take.recv().unwrap();
            let start = Instant::now();
            let report = rt.shutdown_graceful(ms(300));
            (report, start.elapsed())
        });
        give.send(rt).unwrap();
        let (report, took) = match join_within(caller) {
            Ok(v) => v,
            Err(e) => panic!("the blocking caller did not return its report: {e}"),
        };
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: 1
            }
        );
        // Waiting 300 ms for the stuck task is expected; another wait for its own
        // thread (about 300 ms more) is not. Generous for a loaded machine.
        assert!(took < ms(550), "took {took:?}");
        assert!(join_within(stuck).unwrap_err().is_cancelled());
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// Dropping the runtime on a blocking-pool thread (a plain `drop`, no timeout) must not
/// wait for ever for that very thread to leave.
#[test]
fn drop_on_a_blocking_pool_thread_does_not_hang() {
    with_timeout(|| {
        let rt = runtime();
        let (give, take) = mpsc::channel::<Runtime>();
        let caller = rt.spawn_blocking(move || {
            drop(take.recv().unwrap());
            3
        });
        give.send(rt).unwrap();
        // The blocking task was running when its runtime went away: its result may
        // be cancelled, but the handle resolves.
        let _ = join_within(caller);
    });
}

// ---------------------------------------------------------------------------------
// Spawns racing the draining flag.

/// Threads outside the runtime spawn tasks (and fibers with `try_spawn`) in a loop while
/// the runtime drains and stops: every spawn either runs or resolves to an error, none
/// hangs a join, those refused say so, a refused fiber spawn is `Shutdown`, the count
/// of tasks that ran equals the `Ok` joins, and nothing is left active.
#[test]
fn outside_spawns_racing_the_drain_run_or_resolve() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let ran = counter();
        let done = Arc::new(AtomicBool::new(false));
        let spawners: Vec<_> = (0..3)
            .map(|t| {
                let (handle, ran, done) = (handle.clone(), ran.clone(), done.clone());
                std::thread::spawn(move || {
                    let _e = handle.enter();
                    let mut tasks = Vec::new();
                    let mut fibers = Vec::new();
                    let mut fiber_refusals = 0;
                    let mut after_done = 0;
                    for i in 0..50_000 {
                        if done.load(SeqCst) {
                            after_done += 1;
                            if after_done > 200 {
                                break;
                            }
                        }
                        if t == 2 && i % 4 == 0 {
                            let ran = ran.clone();
                            match fiber::Builder::new().try_spawn(move || {
                                ran.fetch_add(1, SeqCst);
                            }) {
                                Ok(h) => fibers.push(h),
                                Err(e) => {
                                    assert_eq!(e.kind(), SpawnErrorKind::Shutdown, "{e}");
                                    fiber_refusals += 1;
                                }
                            }
                        } else {
                            let ran = ran.clone();
                            tasks.push(handle.spawn(async move {
                                ran.fetch_add(1, SeqCst);
                            }));
                        }
                        if i % 64 == 0 {
                            std::thread::yield_now();
                        }
                    }
                    (tasks, fibers, fiber_refusals)
                })
            })
            .collect();
        std::thread::sleep(ms(20));
        let report = rt.shutdown_graceful(ms(5_000));
        done.store(true, SeqCst);
        let mut oks = 0;
        let mut refused = 0;
        let mut cancelled = 0;
        let mut fiber_refusals = 0;
        for s in spawners {
            let (tasks, fibers, fr) = s.join().unwrap();
            fiber_refusals += fr;
            // Joined from other threads than the spawners.
            for h in tasks.into_iter().chain(fibers) {
                match join_within(h) {
                    Ok(()) => oks += 1,
                    Err(e) => {
                        assert!(e.is_cancelled(), "{e}");
                        if e.to_string().contains("shutting down") {
                            refused += 1;
                        } else {
                            cancelled += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(oks, load(&ran), "a task that ran reported Ok, and no other");
        assert!(refused + fiber_refusals > 0, "nothing was refused");
        assert!(
            report.finished + report.cancelled <= oks + cancelled,
            "{report}: {oks} ok {cancelled} cancelled"
        );
        assert_eq!(handle.stats().active_tasks, 0);
        assert!(handle.dump().is_empty());
    });
}

// ---------------------------------------------------------------------------------
// Destructors that misbehave during the drain.

/// A guard whose `Drop` panics, spawns (through a handle, through `weft::spawn` where
/// there is a current runtime, and a fiber), or dumps.
struct Nasty {
    kind: usize,
    handle: Handle,
    spawned: Arc<Mutex<Vec<JoinHandle<()>>>>,
    drops: Arc<AtomicUsize>,
}

impl Drop for Nasty {
    fn drop(&mut self) {
        self.drops.fetch_add(1, SeqCst);
        match self.kind {
            0 => panic!("a destructor panics during shutdown"),
            1 => {
                let h = self.handle.spawn(async {});
                self.spawned.lock().unwrap().push(h);
            }
            2 => {
                let d = self.handle.dump();
                check_dump_text(&d);
            }
            3 => {
                if let Ok(h) = Handle::try_current() {
                    let h = h.spawn(async {});
                    self.spawned.lock().unwrap().push(h);
                }
            }
            _ => {
                let _e = self.handle.enter();
                if let Ok(h) = fiber::Builder::new().try_spawn(|| ()) {
                    self.spawned.lock().unwrap().push(h);
                }
            }
        }
    }
}

/// Pending tasks (cancelled on the calling thread) and finishing tasks (dropped on a
/// worker) whose destructors panic, spawn or dump; parked fibers whose unwinding
/// spawns or dumps. The report is exact, every destructor ran once, and everything
/// spawned from a destructor resolves.
#[test]
fn destructors_that_panic_spawn_or_dump_during_the_drain() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let spawned = Arc::new(Mutex::new(Vec::new()));
        let drops = counter();
        let nasty = |kind| Nasty {
            kind,
            handle: handle.clone(),
            spawned: spawned.clone(),
            drops: drops.clone(),
        };
        let mut stuck = Vec::new();
        let mut quick = Vec::new();
        for kind in 0..5 {
            let n = nasty(kind);
            stuck.push(rt.spawn(async move {
                let _n = n;
                std::future::pending::<()>().await
            }));
            let n = nasty(kind);
            quick.push(rt.spawn(async move {
                let _n = n;
                weft::time::sleep(ms(30)).await;
            }));
        }
        let (_keep, never) = weft::chan::unbounded::<()>();
        let mut fibers = Vec::new();
        {
            let _e = handle.enter();
            // Not kind 0: a destructor that panics while a fiber is being unwound
            // aborts the process, as it would on a thread.
            for kind in 1..5 {
                let n = nasty(kind);
                let never = never.clone();
                fibers.push(fiber::spawn(move || {
                    let _n = n;
                    let _ = never.recv_blocking();
                }));
            }
        }
        wait_until("the stuck ones are parked", || parked(&rt) >= 9);
        let report = rt.shutdown_graceful(ms(2_000));
        assert_eq!(
            report,
            ShutdownReport {
                finished: 5,
                cancelled: 9
            }
        );
        for (kind, h) in quick.into_iter().enumerate() {
            let r = join_within(h);
            if kind == 0 {
                assert!(r.unwrap_err().is_panic());
            } else {
                r.unwrap();
            }
        }
        for (kind, h) in stuck.into_iter().enumerate() {
            let e = join_within(h).unwrap_err();
            if kind == 0 {
                assert!(e.is_panic(), "{e}");
            } else {
                assert!(e.is_cancelled(), "{e}");
            }
        }
        for h in fibers {
            assert!(join_within(h).unwrap_err().is_cancelled());
        }
        assert_eq!(load(&drops), 14);
        let spawned = std::mem::take(&mut *spawned.lock().unwrap());
        for h in spawned {
            // Spawned while the runtime shut down: either ran or was cancelled.
            let _ = join_within(h);
        }
        assert_eq!(handle.stats().active_tasks, 0);
        assert!(handle.dump().is_empty());
    });
}

// ---------------------------------------------------------------------------------
// Spawns from inside after the deadline.

/// A task stuck in one poll past the deadline (and past the grace, so its worker is
/// left behind) spawns a task through a handle, through `weft::spawn` and a fiber when
/// it returns: each resolves to an error or is refused, none hangs.
#[test]
fn spawns_from_a_task_stuck_past_the_deadline_resolve() {
    for stuck_for in [150, 400] {
        with_timeout(move || {
            let rt = runtime();
            let handle = rt.handle().clone();
            let (started_tx, started_rx) = mpsc::channel();
            let (out_tx, out_rx) = mpsc::channel();
            let h2 = handle.clone();
            let stuck = rt.spawn(async move {
                started_tx.send(()).unwrap();
                // Blocks its worker past the graceful deadline.
                std::thread::sleep(ms(stuck_for));
                let a = h2.spawn(async { 1 });
                let b = weft::spawn(async { 2 });
                let c = fiber::Builder::new().try_spawn(|| 3);
                out_tx.send((a, b, c.map_err(|e| e.kind()))).unwrap();
            });
            started_rx.recv_timeout(common::TIMEOUT).unwrap();
            let report = rt.shutdown_graceful(ms(100));
            assert_eq!(
                report,
                ShutdownReport {
                    finished: 0,
                    cancelled: 1
                }
            );
            let (a, b, c) = out_rx.recv_timeout(common::TIMEOUT).unwrap();
            assert!(join_within(a).unwrap_err().is_cancelled());
            assert!(join_within(b).unwrap_err().is_cancelled());
            match c {
                Ok(h) => assert!(join_within(h).unwrap_err().is_cancelled()),
                Err(kind) => assert_eq!(kind, SpawnErrorKind::Shutdown),
            }
            let _ = join_within(stuck);
            wait_until("nothing is active", || handle.stats().active_tasks == 0);
        });
    }
}

// ---------------------------------------------------------------------------------
// Exact reports, counts and unwinding.

/// A known mix across both pools: quick tasks and fibers (some panicking), tasks
/// aborted and joined before the call (not counted), a blocking-pool closure (not a
/// task of a pool: not counted), nursery children, never-ending tasks and parked
/// fibers. `finished + cancelled` is the number alive at the call, each exact.
#[test]
fn the_report_is_exact_for_a_known_mix() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(2)
            .interactive_threads(1)
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let drops = counter();
        let owner_drops = counter();
        let mut quick = Vec::new();
        let mut stuck = Vec::new();
        for i in 0..6 {
            let g = DropCounter(drops.clone());
            let pool = if i % 2 == 0 {
                Pool::Default
            } else {
                Pool::Interactive
            };
            quick.push(rt.spawn_on(pool, async move {
                let _g = g;
                weft::time::sleep(ms(30)).await;
                if i == 3 {
                    panic!("a quick task panics");
                }
            }));
            stuck.push(rt.spawn_on(pool, never_ending(&drops)));
        }
        // Aborted and joined before the call: not counted.
        for _ in 0..3 {
            let h = rt.spawn(std::future::pending::<()>());
            h.abort();
            assert!(h.join().unwrap_err().is_cancelled());
        }
        let blocking = rt.spawn_blocking(|| std::thread::sleep(ms(20)));
        let (_keep, never) = weft::chan::unbounded::<()>();
        let mut fibers = Vec::new();
        let owner;
        {
            let _e = handle.enter();
            for i in 0..4 {
                let g = DropCounter(drops.clone());
                let never = never.clone();
                fibers.push(fiber::spawn(move || {
                    let _g = g;
                    if i < 2 {
                        fiber::sleep(ms(30));
                        if i == 1 {
                            panic!("a quick fiber panics");
                        }
                    } else {
                        let _ = never.recv_blocking();
                    }
                }));
            }
            // A fiber owning a nursery with two parked children (a task and a fiber).
            let (g1, g2, g3) = (
                DropCounter(owner_drops.clone()),
                DropCounter(drops.clone()),
                DropCounter(drops.clone()),
            );
            let (n1, n2) = (never.clone(), never.clone());
            owner = fiber::spawn(move || {
                let _g = g1;
                weft::nursery_blocking(|n| {
                    n.spawn(async move {
                        let _g = g2;
                        let _ = n1.recv().await;
                        Ok(())
                    });
                    n.spawn_fiber(move || {
                        let _g = g3;
                        let _ = n2.recv_blocking();
                        Ok(())
                    });
                    Ok::<_, ()>(())
                })
            });
        }
        // 6 + 6 + 4 + the owner and its two children.
        wait_until("everything is counted", || rt.stats().active_tasks == 19);
        let report = rt.shutdown_graceful(ms(3_000));
        assert_eq!(
            report,
            ShutdownReport {
                finished: 8,
                cancelled: 11
            }
        );
        for (i, h) in quick.into_iter().enumerate() {
            assert_eq!(join_within(h).is_err(), i == 3);
        }
        for h in stuck {
            assert!(join_within(h).unwrap_err().is_cancelled());
        }
        for (i, h) in fibers.into_iter().enumerate() {
            let r = join_within(h);
            match i {
                0 => r.unwrap(),
                1 => assert!(r.unwrap_err().is_panic()),
                _ => assert!(r.unwrap_err().is_cancelled()),
            }
        }
        assert!(join_within(owner).unwrap_err().is_cancelled());
        join_within(blocking).unwrap();
        assert_eq!(load(&drops), 18, "every guard was dropped");
        // An owner fiber parked in `nursery_blocking` has its stack pinned (its
        // children borrow from it), so shutdown leaks it rather than unwinds it (the
        // nursery's documented choice, tests/nursery.rs): its guard is never dropped.
        // Not graceful shutdown's doing; left open in the review report.
        assert!(load(&owner_drops) <= 1);
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// Fibers and tasks parked in every kind of wait (a channel, `select!`, a lock, a
/// `Notify`, a barrier, a wait group, a timer, a socket, a join, a nursery) are all
/// cancelled, each fiber unwound: every guard dropped, nothing left active.
#[test]
fn fibers_and_tasks_parked_in_every_wait_are_unwound() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let drops = counter();
        let (_tx, rx) = weft::chan::bounded::<u32>(0);
        let (_tx2, rx2) = weft::chan::bounded::<u32>(0);
        let lock = Arc::new(weft::sync::Mutex::new(0));
        let held = lock.try_lock().unwrap();
        let notify = Arc::new(weft::sync::Notify::new());
        let barrier = Arc::new(weft::sync::Barrier::new(3));
        let wg = weft::sync::WaitGroup::new();
        wg.add(1);
        let listener = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let listener = Arc::new(listener);
        let target = rt.spawn(std::future::pending::<()>());
        let target = Arc::new(Mutex::new(Some(target)));
        let mut handles: Vec<JoinHandle<()>> = Vec::new();
        {
            let _e = handle.enter();
            macro_rules! fib {
                ($body:expr) => {{
                    let g = DropCounter(drops.clone());
                    let (rx, rx2, lock, notify, barrier, wg, listener, target) = (
                        rx.clone(),
                        rx2.clone(),
                        lock.clone(),
                        notify.clone(),
                        barrier.clone(),
                        wg.clone(),
                        listener.clone(),
                        target.clone(),
                    );
                    let _ = (&rx, &rx2, &lock, &notify, &barrier, &wg, &listener, &target);
                    #[allow(clippy::redundant_closure_call)]
                    handles.push(fiber::spawn(move || {
                        let _g = g;
                        ($body)(rx, rx2, lock, notify, barrier, wg, listener, target);
                    }));
                }};
            }
            type R = weft::chan::Receiver<u32>;
            type L = Arc<weft::sync::Mutex<i32>>;
            type N = Arc<weft::sync::Notify>;
            type B = Arc<weft::sync::Barrier>;
            type W = weft::sync::WaitGroup;
            type S = Arc<weft::net::TcpListener>;
            type T = Arc<Mutex<Option<JoinHandle<()>>>>;
            fib!(|rx: R, _, _, _, _, _, _, _| {
                let _ = rx.recv_blocking();
            });
            fib!(|rx: R, rx2: R, _, _, _, _, _, _| {
                weft::select! {
                    recv(rx) -> _ => {},
                    recv(rx2) -> _ => {},
                }
            });
            fib!(|_, _, l: L, _, _, _, _, _| {
                let _ = l.lock_blocking();
            });
            fib!(|_, _, _, n: N, _, _, _, _| n.notified_blocking());
            fib!(|_, _, _, _, b: B, _, _, _| {
                b.wait_blocking();
            });
            fib!(|_, _, _, _, _, w: W, _, _| w.wait_blocking());
            fib!(|_, _, _, _, _, _, _, _| fiber::sleep(Duration::from_secs(600)));
            fib!(|_, _, _, _, _, _, s: S, _| {
                let _ = s.accept_blocking();
            });
            fib!(|_, _, _, _, _, _, _, t: T| {
                let h = t.lock().unwrap().take().unwrap();
                let _ = h.join();
            });
            fib!(|rx: R, rx2: R, _, _, _, _, _, _| {
                let _ = weft::nursery_blocking(|n| {
                    n.spawn_fiber(move || {
                        let _ = rx.recv_blocking();
                        Ok(())
                    });
                    n.spawn(async move {
                        let _ = rx2.recv().await;
                        Ok(())
                    });
                    Ok::<_, ()>(())
                });
            });
        }
        // The async forms.
        macro_rules! task {
            ($fut:expr) => {{
                let g = DropCounter(drops.clone());
                let fut = $fut;
                handles.push(rt.spawn(async move {
                    let _g = g;
                    fut.await;
                }));
            }};
        }
        let r = rx.clone();
        task!(async move {
            let _ = r.recv().await;
        });
        let l = lock.clone();
        task!(async move {
            let _ = l.lock().await;
        });
        let n = notify.clone();
        task!(async move { n.notified().await });
        let b = barrier.clone();
        task!(async move {
            b.wait().await;
        });
        let w = wg.clone();
        task!(async move { w.wait().await });
        task!(weft::time::sleep(Duration::from_secs(600)));
        let s = listener.clone();
        task!(async move {
            let _ = s.accept().await;
        });
        let (r, r2) = (rx.clone(), rx2.clone());
        task!(async move {
            let _ = weft::nursery(|n| async move {
                n.spawn(async move {
                    let _ = r.recv().await;
                    Ok(())
                });
                n.spawn_fiber(move || {
                    let _ = r2.recv_blocking();
                    Ok(())
                });
                Ok::<_, ()>(())
            })
            .await;
        });
        // 10 fibers (one with 2 children), 8 tasks (one with 2 children), the target.
        let expected = 10 + 2 + 8 + 2 + 1;
        wait_until("everything is parked", || parked(&rt) == expected);
        let text = rt.dump().to_string();
        for word in ["chan", "lock", "sync", "timer", "socket", "join"] {
            assert!(
                text.contains(&format!("parked on {word}")),
                "{word}\n{text}"
            );
        }
        let report = rt.shutdown_graceful(ms(100));
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: expected
            }
        );
        for h in handles {
            assert!(join_within(h).unwrap_err().is_cancelled());
        }
        // All but, possibly, the fiber parked in `nursery_blocking` (leaked, not
        // unwound: see `the_report_is_exact_for_a_known_mix`).
        assert!(
            load(&drops) >= 17,
            "every fiber unwound, every task dropped"
        );
        drop(held);
        assert_eq!(handle.stats().active_tasks, 0);
        assert!(handle.dump().is_empty());
    });
}

/// `Stats::active_tasks` comes back to zero after tasks and fibers that panic, are
/// aborted (before their first poll, while parked), finish, and after refused spawns.
#[test]
fn active_tasks_is_zero_after_panics_aborts_and_refusals() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let _e = handle.enter();
        let mut hs: Vec<JoinHandle<()>> = Vec::new();
        let mut senders = Vec::new();
        for i in 0..20 {
            hs.push(rt.spawn(async move {
                if i % 2 == 0 {
                    panic!("boom");
                }
            }));
            let h = rt.spawn(std::future::pending::<()>());
            h.abort();
            hs.push(h);
            hs.push(fiber::spawn(move || {
                if i % 3 == 0 {
                    panic!("fiber boom");
                }
            }));
            let (keep, never) = weft::chan::unbounded::<()>();
            senders.push(keep);
            let f = fiber::spawn(move || {
                let _ = never.recv_blocking();
            });
            hs.push(f);
        }
        // Abort the parked fibers once they parked.
        wait_until("the fibers are parked", || parked(&rt) == 20);
        for h in hs.iter().skip(3).step_by(4) {
            h.abort();
        }
        for h in hs {
            let _ = join_within(h);
        }
        wait_until("nothing active", || rt.stats().active_tasks == 0);
        assert!(rt.dump().is_empty());
        drop(_e);
        let report = rt.shutdown_graceful(ms(500));
        assert_eq!(report, ShutdownReport::default());
        // Refused after the fact (the runtime is gone): nothing counted.
        for _ in 0..10 {
            assert!(handle.spawn(async {}).join().is_err());
        }
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

// ---------------------------------------------------------------------------------
// Dumps hammered.

/// Several threads dump in a tight loop while tasks and fibers spawn, finish, panic
/// and are aborted, while the runtime shuts down gracefully, and after it is gone
/// (through a `Handle`): every dump is well formed, none crashes, and the dump ends
/// empty.
#[test]
fn dumps_in_a_tight_loop_through_churn_and_shutdown() {
    with_timeout(|| {
        let rt = Builder::new()
            .worker_threads(2)
            .interactive_threads(1)
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let stop = Arc::new(AtomicBool::new(false));
        let dumpers: Vec<_> = (0..3)
            .map(|_| {
                let (handle, stop) = (handle.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    let deadline = Instant::now() + common::TIMEOUT;
                    while !stop.load(SeqCst) && Instant::now() < deadline {
                        check_dump_text(&handle.dump());
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let churn_stop = Arc::new(AtomicBool::new(false));
        let churner = {
            let (handle, churn_stop) = (handle.clone(), churn_stop.clone());
            std::thread::spawn(move || {
                let _e = handle.enter();
                let mut rounds = 0;
                while !churn_stop.load(SeqCst) && rounds < 400 {
                    rounds += 1;
                    let mut hs: Vec<JoinHandle<()>> = Vec::new();
                    for i in 0..8u32 {
                        hs.push(handle.spawn(async move {
                            weft::task::yield_now().await;
                            if i == 3 {
                                panic!("churn");
                            }
                        }));
                        hs.push(handle.spawn_on(Pool::Interactive, async {}));
                        let aborted = handle.spawn(std::future::pending::<()>());
                        aborted.abort();
                        hs.push(aborted);
                        if let Ok(f) =
                            fiber::Builder::new()
                                .name(format!("churn-{i}"))
                                .try_spawn(move || {
                                    fiber::yield_now();
                                    if i == 5 {
                                        panic!("fiber churn");
                                    }
                                })
                        {
                            hs.push(f);
                        }
                    }
                    for h in hs {
                        let _ = h.join();
                    }
                }
                rounds
            })
        };
        std::thread::sleep(ms(200));
        // Some that the drain must cancel, dumped meanwhile.
        for _ in 0..5 {
            rt.spawn(std::future::pending::<()>());
        }
        let report = rt.shutdown_graceful(ms(100));
        assert!(report.cancelled >= 5, "{report}");
        // Dumps on the handle of a runtime that is gone.
        std::thread::sleep(ms(50));
        churn_stop.store(true, SeqCst);
        assert!(churner.join().unwrap() > 0);
        stop.store(true, SeqCst);
        for d in dumpers {
            assert!(d.join().unwrap() > 0);
        }
        assert!(handle.dump().is_empty(), "{}", handle.dump());
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// A dump from inside a running task lists that task as running on a worker.
#[test]
fn a_dump_from_inside_a_task_sees_it_running() {
    with_timeout(|| {
        let rt = runtime();
        let h2 = rt.handle().clone();
        let h = rt.spawn(async move { h2.dump().to_string() });
        let me = h.id();
        let text = h.join().unwrap();
        let line = text
            .lines()
            .find(|l| l.contains(&format!("task {me}:")))
            .unwrap_or_else(|| panic!("{text}"));
        assert!(line.contains("running on worker"), "{text}");
    });
}

// ---------------------------------------------------------------------------------
// Wait-kind recording with wakers that are not a weft task's.

/// A waker of our own for each of two sub-futures (as `futures`' `join_all` or
/// `FuturesUnordered` do): it wakes the parent task.
struct SubWaker(Mutex<Option<Waker>>);

impl Wake for SubWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Some(w) = &*self.0.lock().unwrap() {
            w.wake_by_ref();
        }
    }
}

/// Polls two futures, each with a custom (non-weft) waker, and returns both outputs.
struct Join2<A: Future, B: Future> {
    a: Pin<Box<A>>,
    b: Pin<Box<B>>,
    oa: Option<A::Output>,
    ob: Option<B::Output>,
    wa: Arc<SubWaker>,
    wb: Arc<SubWaker>,
}

impl<A: Future, B: Future> Future for Join2<A, B>
where
    A::Output: Unpin,
    B::Output: Unpin,
{
    type Output = (A::Output, B::Output);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        *this.wa.0.lock().unwrap() = Some(cx.waker().clone());
        *this.wb.0.lock().unwrap() = Some(cx.waker().clone());
        if this.oa.is_none() {
            let w = Waker::from(this.wa.clone());
            if let Poll::Ready(v) = this.a.as_mut().poll(&mut Context::from_waker(&w)) {
                this.oa = Some(v);
            }
        }
        if this.ob.is_none() {
            let w = Waker::from(this.wb.clone());
            if let Poll::Ready(v) = this.b.as_mut().poll(&mut Context::from_waker(&w)) {
                this.ob = Some(v);
            }
        }
        if this.oa.is_some() && this.ob.is_some() {
            Poll::Ready((this.oa.take().unwrap(), this.ob.take().unwrap()))
        } else {
            Poll::Pending
        }
    }
}

fn join2<A: Future, B: Future>(a: A, b: B) -> Join2<A, B> {
    let w = || Arc::new(SubWaker(Mutex::new(None)));
    Join2 {
        a: Box::pin(a),
        b: Box::pin(b),
        oa: None,
        ob: None,
        wa: w(),
        wb: w(),
    }
}

/// A task waiting on two channel receives through custom wakers: the waits register
/// wakers that are not a task's, which must not crash nor be recorded on some task;
/// the task reads as parked (on `?`: weft cannot know). A waker of a *task* used by
/// other code (a plain thread polling a receive with a finished task's waker, after
/// its runtime is gone) must not crash either.
#[test]
fn custom_wakers_are_not_recorded_on_a_task() {
    with_timeout(|| {
        let rt = runtime();
        let (tx1, rx1) = weft::chan::bounded::<u32>(0);
        let (tx2, rx2) = weft::chan::bounded::<u32>(0);
        let both = rt.spawn(async move {
            let (a, b) = join2(rx1.recv(), rx2.recv()).await;
            (a.unwrap(), b.unwrap())
        });
        // Another task parked on a plain channel receive, for comparison.
        let (tx3, rx3) = weft::chan::bounded::<u32>(0);
        let plain = rt.spawn(async move { rx3.recv().await.unwrap() });
        let text = {
            let mut text = String::new();
            wait_until("both are parked", || {
                text = rt.dump().to_string();
                text.matches(": parked on ").count() == 2
            });
            text
        };
        let line = |id: weft::task::Id| {
            text.lines()
                .find(|l| l.contains(&format!("task {id}:")))
                .unwrap_or_else(|| panic!("{text}"))
                .to_string()
        };
        assert!(line(both.id()).contains("parked on ?"), "{text}");
        assert!(line(plain.id()).contains("parked on chan"), "{text}");
        tx1.send_blocking(1).unwrap();
        tx2.send_blocking(2).unwrap();
        tx3.send_blocking(3).unwrap();
        assert_eq!(join_within(both).unwrap(), (1, 2));
        assert_eq!(join_within(plain).unwrap(), 3);

        // A task's waker escapes the task; the task finishes and the runtime goes.
        let (waker_tx, waker_rx) = mpsc::channel::<Waker>();
        let h = rt.spawn(std::future::poll_fn(move |cx| {
            waker_tx.send(cx.waker().clone()).unwrap();
            Poll::Ready(())
        }));
        join_within(h).unwrap();
        let waker = waker_rx.recv().unwrap();
        drop(rt);
        let (_tx4, rx4) = weft::chan::bounded::<u32>(0);
        let mut recv = std::pin::pin!(rx4.recv());
        for _ in 0..3 {
            assert!(recv
                .as_mut()
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
        }
        let mut recv2 = std::pin::pin!(rx4.recv());
        assert!(recv2
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_pending());
    });
}

// ---------------------------------------------------------------------------------
// The deadlock watcher, in child processes.

/// Not a real test unless run as a child: runs the case named by [`CHILD`].
#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "plain_thread_wakes" => child_plain_thread_wakes(),
        "blocking_pool" => child_blocking_pool(),
        "socket_fiber" => child_socket_fiber(),
        "task_mutex_deadlock" => child_task_mutex_deadlock(),
        "select_deadlock" => child_select_deadlock(),
        "ctrl_c" => child_ctrl_c(),
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

fn deadlock_child(case: &str) -> common::child::Output {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, case), ("WEFT_DEBUG_DEADLOCK", "1")],
        common::child::LIMIT,
    );
    out.assert_finished();
    out
}

/// A task waits on a channel that a plain thread sends on after 300 ms.
fn child_plain_thread_wakes() {
    let rt = runtime();
    let (tx, rx) = weft::chan::bounded::<u32>(1);
    let h = rt.spawn(async move { rx.recv().await.unwrap() });
    let t = std::thread::spawn(move || {
        std::thread::sleep(ms(300));
        tx.send_blocking(9).unwrap();
    });
    assert_eq!(h.join().unwrap(), 9);
    t.join().unwrap();
    std::thread::sleep(ms(300));
}

/// A task waits 700 ms for a closure on the blocking pool: the runtime is busy, not
/// deadlocked.
fn child_blocking_pool() {
    let rt = runtime();
    let h = rt.spawn(async {
        weft::spawn_blocking(|| {
            std::thread::sleep(ms(700));
            4
        })
        .await
        .unwrap()
    });
    assert_eq!(h.join().unwrap(), 4);
}

/// A fiber waits 700 ms on a socket that a plain thread then connects to.
fn child_socket_fiber() {
    let rt = runtime();
    let _e = rt.enter();
    let listener = weft::wait(weft::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let f = fiber::Builder::new()
        .name("acceptor")
        .spawn(move || listener.accept_blocking().map(|_| ()));
    std::thread::sleep(ms(700));
    let _c = std::net::TcpStream::connect(addr).unwrap();
    f.join().unwrap().unwrap();
}

/// Two async tasks lock two `weft::sync::Mutex`es in opposite orders.
fn child_task_mutex_deadlock() {
    let rt = runtime();
    let a = Arc::new(weft::sync::Mutex::new(()));
    let b = Arc::new(weft::sync::Mutex::new(()));
    let both = Arc::new(weft::sync::Barrier::new(2));
    let t = |x: Arc<weft::sync::Mutex<()>>, y: Arc<weft::sync::Mutex<()>>| {
        let both = both.clone();
        rt.spawn(async move {
            let _x = x.lock().await;
            both.wait().await;
            let _y = y.lock().await;
        })
    };
    let _h1 = t(a.clone(), b.clone());
    let _h2 = t(b, a);
    wait_until("both are parked on a lock", || {
        rt.dump().to_string().matches("parked on lock").count() == 2
    });
    std::thread::sleep(ms(1_000));
}

/// A named fiber selects over two channels whose senders a parked task holds.
fn child_select_deadlock() {
    let rt = runtime();
    let _e = rt.enter();
    let (tx1, rx1) = weft::chan::bounded::<u32>(0);
    let (tx2, rx2) = weft::chan::bounded::<u32>(0);
    let (_never_tx, never) = weft::sync::oneshot::channel::<()>();
    let _holder = rt.spawn(async move {
        let _senders = (tx1, tx2);
        let _ = never.await;
    });
    let _f = fiber::Builder::new().name("selector").spawn(move || {
        weft::select! {
            recv(rx1) -> _ => {},
            recv(rx2) -> _ => {},
        }
    });
    wait_until("both are parked", || parked(&rt) == 2);
    std::thread::sleep(ms(1_000));
}

/// A task waits for Ctrl-C (the way a server's main task does) while everything else
/// is idle: weft's own signal thread will wake it, so this is no deadlock. (Nobody
/// presses Ctrl-C: the runtime is dropped after a while, cancelling the wait.)
fn child_ctrl_c() {
    let rt = runtime();
    let (started_tx, started_rx) = mpsc::channel();
    let _waiter = rt.spawn(async move {
        started_tx.send(()).unwrap();
        weft::signal::ctrl_c().await
    });
    started_rx.recv().unwrap();
    std::thread::sleep(ms(700));
}

/// A task waiting for Ctrl-C is not deadlocked: a signal will wake it.
#[test]
fn deadlock_watcher_ignores_a_task_waiting_for_ctrl_c() {
    let out = deadlock_child("ctrl_c");
    assert!(!out.stderr.contains("deadlock"), "{}", out.context());
}

/// A plain thread that wakes a task after 300 ms: the watcher reports it (a false
/// positive, documented: it cannot see threads outside the runtime, and reports after
/// about 200 ms of silence), but at most once, and the program runs on correctly.
#[test]
fn deadlock_watcher_and_a_plain_thread_waking_a_task() {
    let out = deadlock_child("plain_thread_wakes");
    assert!(
        out.stderr.matches("weft: deadlock").count() <= 1,
        "{}",
        out.context()
    );
}

/// A task waiting on the blocking pool is not deadlocked: the closure will wake it.
#[test]
fn deadlock_watcher_ignores_a_task_waiting_on_the_blocking_pool() {
    let out = deadlock_child("blocking_pool");
    assert!(!out.stderr.contains("deadlock"), "{}", out.context());
}

/// A fiber waiting on a socket is not deadlocked: the socket may become ready.
#[test]
fn deadlock_watcher_ignores_a_fiber_waiting_on_a_socket() {
    let out = deadlock_child("socket_fiber");
    assert!(!out.stderr.contains("deadlock"), "{}", out.context());
}

/// Two tasks (not fibers) deadlocked on `weft::sync::Mutex`: reported once, both
/// listed as tasks parked on a lock.
#[test]
fn deadlock_watcher_reports_tasks_deadlocked_on_a_mutex() {
    let out = deadlock_child("task_mutex_deadlock");
    let err = &out.stderr;
    assert_eq!(
        err.matches("weft: deadlock").count(),
        1,
        "{}",
        out.context()
    );
    let lines = err
        .lines()
        .filter(|l| l.starts_with("  task ") && l.contains("parked on lock"))
        .count();
    assert_eq!(lines, 2, "{}", out.context());
}

/// A `select!` that can never complete: reported once, the fiber parked on `chan`.
#[test]
fn deadlock_watcher_reports_a_select_deadlock() {
    let out = deadlock_child("select_deadlock");
    let err = &out.stderr;
    assert_eq!(
        err.matches("weft: deadlock").count(),
        1,
        "{}",
        out.context()
    );
    assert!(
        err.lines().any(|l| l.contains("fiber")
            && l.contains("'selector'")
            && l.contains("parked on chan")),
        "{}",
        out.context()
    );
}

// ---------------------------------------------------------------------------------
// More attacks: shields, endless fan-out, one worker, nurseries from outside.

/// A task parked inside a shield (which defers `abort`) is still cancelled by the
/// drain: the call returns, the future is dropped, the count is exact.
#[test]
fn a_shielded_parked_task_is_cancelled_by_the_drain() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let drops = counter();
        let g = DropCounter(drops.clone());
        let (_keep, never) = weft::chan::unbounded::<()>();
        let h = rt.spawn(async move {
            let _g = g;
            weft::task::shield(async move {
                let _ = never.recv().await;
            })
            .await;
        });
        wait_until("it is parked", || parked(&rt) == 1);
        let report = rt.shutdown_graceful(ms(100));
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: 1
            }
        );
        assert!(join_within(h).unwrap_err().is_cancelled());
        assert_eq!(load(&drops), 1);
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// Tasks and fibers that keep spawning their successor from inside (accepted while
/// draining) never let the count reach zero: the call still returns after its timeout,
/// counts only what was alive at the call, and the last successor is cancelled.
#[test]
fn an_endless_chain_of_inside_spawns_is_cut_at_the_deadline() {
    fn chain_task(n: Arc<AtomicUsize>) {
        n.fetch_add(1, SeqCst);
        weft::spawn(async move {
            weft::task::yield_now().await;
            chain_task(n);
        });
    }
    fn chain_fiber(n: Arc<AtomicUsize>) {
        n.fetch_add(1, SeqCst);
        let _ = fiber::Builder::new().try_spawn(move || {
            fiber::yield_now();
            chain_fiber(n);
        });
    }
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let (nt, nf) = (counter(), counter());
        let (a, b) = (nt.clone(), nf.clone());
        rt.spawn(async move { chain_task(a) }).join().unwrap();
        rt.spawn(async move { chain_fiber(b) }).join().unwrap();
        wait_until("both chains run", || load(&nt) > 10 && load(&nf) > 10);
        let start = Instant::now();
        let report = rt.shutdown_graceful(ms(200));
        let took = start.elapsed();
        assert!(took >= ms(200), "{took:?}");
        assert!(took < ms(10_000), "{took:?}");
        // At the call, each chain had a few links alive (a link lives until its
        // successor, on the other worker, has run a little), none finished yet.
        let at_call = report.finished + report.cancelled;
        assert!((2..=8).contains(&at_call), "{report}");
        let (t, f) = (load(&nt), load(&nf));
        std::thread::sleep(ms(50));
        assert_eq!((load(&nt), load(&nf)), (t, f), "the chains stopped");
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// On a one-worker runtime, shut down from inside its only worker's task: the other
/// work cannot run during the wait (the caller blocks the worker), the call returns,
/// and a fiber parked on that worker is unwound once the caller's poll returns.
#[test]
fn graceful_from_the_only_worker() {
    with_timeout(|| {
        let rt = Builder::new().worker_threads(1).build().unwrap();
        let handle = rt.handle().clone();
        let drops = counter();
        let g = DropCounter(drops.clone());
        let (_keep, never) = weft::chan::unbounded::<()>();
        let parked_fiber = {
            let _e = handle.enter();
            fiber::spawn(move || {
                let _g = g;
                let _ = never.recv_blocking();
            })
        };
        let (give, take) = weft::sync::oneshot::channel::<Runtime>();
        let (report_tx, report_rx) = mpsc::channel();
        let caller = rt.spawn(async move {
            let rt = take.await.unwrap();
            report_tx.send(rt.shutdown_graceful(ms(100))).unwrap();
        });
        wait_until("both are parked", || parked(&rt) == 2);
        give.send(rt).map_err(|_| ()).unwrap();
        let report = report_rx
            .recv_timeout(common::TIMEOUT)
            .expect("hang: shutdown_graceful on the only worker did not return");
        assert_eq!(
            report,
            ShutdownReport {
                finished: 0,
                cancelled: 2
            }
        );
        let _ = join_within(caller);
        assert!(join_within(parked_fiber).unwrap_err().is_cancelled());
        wait_until("the fiber is unwound", || load(&drops) == 1);
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// `nursery_blocking` on a plain thread (its children are spawns from outside) racing
/// the drain: every call returns (children refused count as cancelled, not failures),
/// none hangs, and a child that ran is one that was accepted.
#[test]
fn nursery_blocking_from_outside_racing_the_drain_returns() {
    with_timeout(|| {
        let rt = runtime();
        let handle = rt.handle().clone();
        let done = Arc::new(AtomicBool::new(false));
        let ran = counter();
        let outside = {
            let (handle, done, ran) = (handle.clone(), done.clone(), ran.clone());
            std::thread::spawn(move || {
                let _e = handle.enter();
                let mut calls = 0;
                let mut after = 0;
                for _ in 0..20_000 {
                    if done.load(SeqCst) {
                        after += 1;
                        if after > 50 {
                            break;
                        }
                    }
                    let ran = &ran;
                    let r = weft::nursery_blocking(|n| {
                        n.spawn(async move {
                            weft::task::yield_now().await;
                            Ok(())
                        });
                        n.spawn_fiber(move || {
                            ran.fetch_add(1, SeqCst);
                            Ok(())
                        });
                        Ok::<_, ()>(7)
                    });
                    assert_eq!(r, Ok(7));
                    calls += 1;
                }
                calls
            })
        };
        std::thread::sleep(ms(30));
        let report = rt.shutdown_graceful(ms(2_000));
        done.store(true, SeqCst);
        let calls = outside.join().unwrap();
        assert!(calls > 0);
        assert!(load(&ran) <= calls);
        assert!(report.cancelled <= 2, "{report}");
        assert_eq!(handle.stats().active_tasks, 0);
    });
}

/// Once a join has returned a task's (or fiber's) result, `Stats::active_tasks` no
/// longer counts it, nor does a dump list it: a task leaves the list of live tasks
/// before its result is published.
#[test]
fn a_joined_task_is_no_longer_active() {
    with_timeout(|| {
        let rt = runtime();
        let _e = rt.enter();
        for i in 0..2_000u32 {
            let h = rt.spawn(async move { i });
            assert_eq!(h.join().unwrap(), i);
            assert_eq!(rt.stats().active_tasks, 0, "round {i}");
            if i % 10 == 0 {
                let f = fiber::spawn(move || i);
                assert_eq!(f.join().unwrap(), i);
                assert_eq!(rt.stats().active_tasks, 0, "fiber round {i}");
                assert!(rt.dump().is_empty(), "round {i}");
            }
        }
    });
}
