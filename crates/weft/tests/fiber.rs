//! Fibers: spawning from every context, `wait` suspending the fiber (not the thread),
//! sleeps, joins in every direction, aborts and shields, panics, fiber-locals, fork-join
//! on a fiber's stack, identity, the thread rule, `yield_now`, spawn errors and stats.
//!
//! Process-wide limits (no runtime at all, the map count limit, stack overflow) are in
//! `fiber_limits.rs`, which runs them in child processes.

mod common;

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use common::*;
use futures_channel::oneshot;
use weft::fiber::{self, Builder as FiberBuilder, SpawnErrorKind};
use weft::prelude::*;
use weft::{JoinHandle, Runtime};

/// A fiber spawned from a thread outside any runtime goes to the most recently started
/// runtime that is still alive, which may belong to another test of this binary. Tests
/// that rely on that (or count process-wide fibers) hold this lock exclusively; every
/// other test holds it shared for its whole run, runtime drop included.
static RUNTIMES: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    RUNTIMES.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    RUNTIMES.write().unwrap_or_else(|e| e.into_inner())
}

/// [`on`] through a handle.
fn on_handle<R>(handle: &weft::Handle, f: impl FnOnce() -> R) -> R {
    handle.block_on(async move { f() })
}

fn named_runtime(name: &str, workers: usize) -> Runtime {
    weft::Builder::new()
        .worker_threads(workers)
        .thread_name(name)
        .build()
        .expect("failed to build the runtime")
}

/// Parks the calling fiber for good: even `i` on a future that never completes, odd
/// `i` in an hour-long sleep (a timer), so both kinds of wait are covered.
fn park_forever(i: usize) {
    if i.is_multiple_of(2) {
        weft::wait(std::future::pending::<()>());
    } else {
        fiber::sleep(Duration::from_secs(3_600));
    }
}

/// Spawns `n` fibers on `rt`, the `i`th holding `guard(i)` (for its drop) while it
/// parks for good ([`park_forever`]); returns once all are parked, with their handles
/// and a flag that a fiber sets if it ever runs past its wait.
fn spawn_parked<G: Send + 'static>(
    rt: &Runtime,
    n: usize,
    guard: impl Fn(usize) -> G,
) -> (Vec<JoinHandle<()>>, Arc<AtomicBool>) {
    let parked = counter();
    let resumed = Arc::new(AtomicBool::new(false));
    let handles = on(rt, || {
        (0..n)
            .map(|i| {
                let guard = guard(i);
                let (parked, resumed) = (parked.clone(), resumed.clone());
                fiber::spawn(move || {
                    let _guard = guard;
                    parked.fetch_add(1, SeqCst);
                    park_forever(i);
                    resumed.store(true, SeqCst);
                })
            })
            .collect()
    });
    wait_until(&format!("all {n} fibers parked"), || load(&parked) == n);
    (handles, resumed)
}

fn thread_name() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// ---------------------------------------------------------------------------------
// 1. Spawning from every context.

#[test]
fn spawn_from_every_context() {
    let _only = exclusive();
    with_timeout(|| {
        let rt = named_runtime("fiberctx", 2);
        let probe = || (fiber::is_fiber(), thread_name());
        let check = |(is_fiber, name): (bool, String), from: &str| {
            assert!(
                is_fiber,
                "spawned {from}: the closure did not run on a fiber"
            );
            assert!(
                name.starts_with("fiberctx-"),
                "spawned {from}: the fiber ran on thread {name:?}, not a worker of the runtime"
            );
        };

        // The thread that built the runtime, outside block_on: the latest runtime.
        assert!(!fiber::is_fiber());
        check(
            fiber::spawn(probe).join().unwrap(),
            "from the building thread",
        );
        check(
            fiber::try_spawn(probe)
                .expect("try_spawn failed with a runtime running")
                .join()
                .unwrap(),
            "with try_spawn from the building thread",
        );

        // Inside block_on (the fiber's handle awaited there).
        let out = rt.block_on(async move { fiber::spawn(probe).await.unwrap() });
        check(out, "inside block_on");

        // From an async task (the handle awaited by the task).
        let out = rt
            .spawn(async move {
                assert!(!fiber::is_fiber(), "an async task claims to be a fiber");
                fiber::spawn(probe).await.unwrap()
            })
            .join()
            .unwrap();
        check(out, "from an async task");

        // From another fiber (joined there: the outer fiber suspends).
        let (inner, outer) = on(&rt, || {
            fiber::spawn(move || {
                let inner = fiber::spawn(probe).join().unwrap();
                (inner, probe())
            })
        })
        .join()
        .unwrap();
        check(inner, "from a fiber");
        check(outer, "as the outer fiber");

        // From a plain std thread: the latest runtime.
        let out = std::thread::spawn(move || {
            assert!(!fiber::is_fiber());
            fiber::spawn(probe).join().unwrap()
        })
        .join()
        .unwrap();
        check(out, "from a plain thread");

        // From a blocking-pool thread.
        let out = rt
            .spawn_blocking(move || fiber::spawn(probe).join().unwrap())
            .join()
            .unwrap();
        check(out, "from a blocking-pool thread");
    })
}

// ---------------------------------------------------------------------------------
// 2. Ten thousand fibers ping-ponging through `wait`.

#[test]
fn ten_thousand_fibers_ping_pong_through_wait() {
    let _rt_lock = shared();
    with_timeout(|| {
        const PAIRS: u64 = 5_000;
        const ROUNDS: u64 = 10;
        let rt = workers(2);
        type Pair = (JoinHandle<Vec<u64>>, JoinHandle<Vec<u64>>);
        let pairs: Vec<Pair> = on(&rt, || {
            (0..PAIRS)
                .map(|p| {
                    let base = p * 1_000;
                    let (mut to_b, mut from_a) = (Vec::new(), Vec::new());
                    let (mut to_a, mut from_b) = (Vec::new(), Vec::new());
                    for _ in 0..ROUNDS {
                        let (tx, rx) = oneshot::channel::<u64>();
                        to_b.push(tx);
                        from_a.push(rx);
                        let (tx, rx) = oneshot::channel::<u64>();
                        to_a.push(tx);
                        from_b.push(rx);
                    }
                    let a = fiber::spawn(move || {
                        let mut seen = Vec::new();
                        let mut v = base;
                        for (tx, rx) in to_b.into_iter().zip(from_b) {
                            tx.send(v).expect("the partner fiber is gone");
                            v = weft::wait(rx).expect("the partner dropped its sender");
                            seen.push(v);
                            v += 1;
                        }
                        seen
                    });
                    let b = fiber::spawn(move || {
                        let mut seen = Vec::new();
                        for (rx, tx) in from_a.into_iter().zip(to_a) {
                            let v = weft::wait(rx).expect("the partner dropped its sender");
                            seen.push(v);
                            tx.send(v + 1).expect("the partner fiber is gone");
                        }
                        seen
                    });
                    (a, b)
                })
                .collect()
        });
        assert_eq!(pairs.len() * 2, 10_000);
        for (p, (a, b)) in pairs.into_iter().enumerate() {
            let base = p as u64 * 1_000;
            let a = a.join().unwrap();
            let b = b.join().unwrap();
            let want_b: Vec<u64> = (0..ROUNDS).map(|i| base + 2 * i).collect();
            let want_a: Vec<u64> = (0..ROUNDS).map(|i| base + 2 * i + 1).collect();
            assert_eq!(
                b, want_b,
                "pair {p}: the second fiber saw the wrong sequence"
            );
            assert_eq!(
                a, want_a,
                "pair {p}: the first fiber saw the wrong sequence"
            );
            assert_eq!(a.last(), Some(&(base + 2 * ROUNDS - 1)));
        }
    })
}

// ---------------------------------------------------------------------------------
// 3. Sleeping fibers.

#[test]
fn a_thousand_fibers_sleep_three_times() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let handles: Vec<_> = on(&rt, || {
            (0..1_000u32)
                .map(|i| {
                    fiber::spawn(move || {
                        let t = Instant::now();
                        for _ in 0..3 {
                            fiber::sleep(ms(1));
                        }
                        (i, t.elapsed())
                    })
                })
                .collect()
        });
        for (i, h) in handles.into_iter().enumerate() {
            let (j, slept) = h.join().unwrap();
            assert_eq!(j as usize, i);
            assert!(slept >= ms(3), "fiber {i} slept 3 x 1 ms in only {slept:?}");
        }
    })
}

#[test]
fn sleep_parks_only_the_fiber() {
    let _rt_lock = shared();
    with_timeout(|| {
        // One worker: if `sleep` blocked the thread, the second fiber could never run
        // while the first sleeps, and the first would sleep forever (a hang).
        let rt = workers(1);
        let asleep = Arc::new(AtomicBool::new(false));
        let other_ran = Arc::new(AtomicBool::new(false));
        let (a1, o1) = (asleep.clone(), other_ran.clone());
        let (a2, o2) = (asleep, other_ran);
        let (sleeper, other) = on(&rt, || {
            let sleeper = fiber::spawn(move || {
                let mut naps = 0u32;
                a1.store(true, SeqCst);
                while !o1.load(SeqCst) {
                    fiber::sleep(ms(1));
                    naps += 1;
                }
                naps
            });
            let other = fiber::spawn(move || {
                while !a2.load(SeqCst) {
                    fiber::yield_now();
                }
                o2.store(true, SeqCst);
                thread_name()
            });
            (sleeper, other)
        });
        let naps = sleeper.join().unwrap();
        assert!(naps >= 1);
        other.join().unwrap();
    })
}

// ---------------------------------------------------------------------------------
// 4. Joins: fiber to fiber (chain, nesting, fan-in), thread to fiber, task to fiber.

fn nest(depth: u32) -> u32 {
    if depth == 0 {
        return 0;
    }
    fiber::spawn(move || nest(depth - 1)).join().unwrap() + 1
}

#[test]
fn fibers_join_a_chain_of_fibers() {
    let _rt_lock = shared();
    with_timeout(|| {
        for n in [1, 2] {
            let rt = workers(n);
            // Fiber k joins fiber k - 1; all are spawned before any has finished.
            let last = on(&rt, || {
                let mut prev: JoinHandle<u32> = fiber::spawn(|| 0);
                for _ in 1..200 {
                    prev = fiber::spawn(move || prev.join().unwrap() + 1);
                }
                prev
            });
            assert_eq!(last.join().unwrap(), 199, "{n} worker(s)");
            // Each fiber spawns the next one and joins it: 200 suspended at once.
            let nested = on(&rt, || fiber::spawn(|| nest(200)));
            assert_eq!(nested.join().unwrap(), 200, "{n} worker(s)");
        }
    })
}

#[test]
fn a_fiber_joins_five_hundred_children() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let h = on(&rt, || {
            fiber::spawn(|| {
                let children: Vec<_> = (0..500u64)
                    .map(|i| {
                        fiber::spawn(move || {
                            if i % 3 == 0 {
                                fiber::sleep(ms(1));
                            } else {
                                fiber::yield_now();
                            }
                            i
                        })
                    })
                    .collect();
                children
                    .into_iter()
                    .map(|c| c.join().unwrap())
                    .collect::<Vec<_>>()
            })
        });
        let got = h.join().unwrap();
        assert_eq!(got, (0..500).collect::<Vec<u64>>());
    })
}

#[test]
fn threads_and_tasks_join_fibers() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        // A plain thread joins a fiber that parks until the thread releases it.
        let (tx, rx) = oneshot::channel::<u32>();
        let h = on(&rt, || fiber::spawn(move || weft::wait(rx).unwrap() * 2));
        assert!(!h.is_finished(), "a fiber parked on a channel finished");
        let joiner = std::thread::spawn(move || h.join());
        tx.send(21).unwrap();
        assert_eq!(joiner.join().unwrap().unwrap(), 42);

        // An async task awaits a fiber's handle.
        let h = on(&rt, || {
            fiber::spawn(|| {
                fiber::sleep(ms(1));
                "slept"
            })
        });
        let out = rt.spawn(async move { h.await.unwrap() }).join().unwrap();
        assert_eq!(out, "slept");

        // block_on on the handle, and a task that spawns and awaits many fibers.
        let h = on(&rt, || fiber::spawn(|| 5));
        assert_eq!(rt.block_on(h).unwrap(), 5);
        let sum = rt
            .spawn(async {
                let hs: Vec<_> = (0..100u64)
                    .map(|i| {
                        fiber::spawn(move || {
                            fiber::yield_now();
                            i
                        })
                    })
                    .collect();
                let mut sum = 0;
                for h in hs {
                    sum += h.await.unwrap();
                }
                sum
            })
            .join()
            .unwrap();
        assert_eq!(sum, 4_950);

        // is_finished turns true by itself.
        let h = on(&rt, || fiber::spawn(|| 1));
        wait_until("the fiber finished", || h.is_finished());
        assert_eq!(h.join().unwrap(), 1);
    })
}

// ---------------------------------------------------------------------------------
// 5. Abort.

/// Waits (through `weft::wait`, which cannot suspend while the fiber unwinds) in its
/// destructor, then counts the drop.
struct WaitingGuard(Arc<AtomicUsize>);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        let v = weft::wait(async { 1 });
        self.0.fetch_add(v, SeqCst);
    }
}

#[test]
fn abort_unwinds_parked_fibers() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let drops = counter();
        let waiting_drops = counter();
        // (Dropped in this order: the waiting guard first.)
        let (handles, resumed) = spawn_parked(&rt, 100, |_| {
            (
                WaitingGuard(waiting_drops.clone()),
                DropCounter(drops.clone()),
            )
        });
        std::thread::sleep(ms(20));
        assert_eq!(load(&drops), 0, "a parked fiber dropped its locals");
        for h in &handles {
            h.abort();
        }
        for h in handles {
            let id = h.id();
            let err = h
                .join()
                .expect_err("an aborted parked fiber returned a value");
            assert!(err.is_cancelled(), "not cancelled: {err:?}");
            assert!(!err.is_panic(), "the abort came back as a panic: {err:?}");
            assert_eq!(err.id(), id);
        }
        assert_eq!(
            load(&drops),
            100,
            "aborted fibers' locals were not all dropped"
        );
        assert_eq!(load(&waiting_drops), 100);
        assert!(!resumed.load(SeqCst), "an aborted fiber ran past its wait");
        // The runtime still runs fibers.
        assert_eq!(on(&rt, || fiber::spawn(|| 3)).join().unwrap(), 3);
    })
}

#[test]
fn abort_before_the_fiber_starts() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        // Keep the only worker busy so the fiber cannot start.
        let blocker = block_a_worker(&rt);

        let ran = Arc::new(AtomicBool::new(false));
        let drops = counter();
        let (r, guard) = (ran.clone(), DropCounter(drops.clone()));
        let h = on(&rt, || {
            fiber::spawn(move || {
                let _guard = guard;
                r.store(true, SeqCst);
                5
            })
        });
        assert!(!h.is_finished());
        h.abort();
        blocker.release();
        let err = h
            .join()
            .expect_err("an unstarted aborted fiber returned a value");
        assert!(err.is_cancelled(), "{err:?}");
        assert!(!ran.load(SeqCst), "an aborted fiber started anyway");
        assert_eq!(
            load(&drops),
            1,
            "the unstarted fiber's closure was not dropped once"
        );
    })
}

#[test]
fn abort_after_the_fiber_finished_keeps_the_result() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let h = on(&rt, || fiber::spawn(|| String::from("kept")));
        wait_until("the fiber finished", || h.is_finished());
        h.abort();
        h.abort();
        assert_eq!(h.join().unwrap(), "kept");
    })
}

#[test]
fn a_fiber_aborts_and_joins_another_fiber() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let drops = counter();
        let guard = DropCounter(drops.clone());
        let (parked_tx, parked_rx) = oneshot::channel::<()>();
        let out = on(&rt, || {
            let victim = fiber::spawn(move || {
                let _guard = guard;
                parked_tx.send(()).unwrap();
                weft::wait(std::future::pending::<()>());
            });
            fiber::spawn(move || {
                weft::wait(parked_rx).unwrap();
                victim.abort();
                victim.join().map_err(|e| e.is_cancelled())
            })
        })
        .join()
        .unwrap();
        assert_eq!(out, Err(true), "the victim was not cancelled");
        assert_eq!(load(&drops), 1);
    })
}

// ---------------------------------------------------------------------------------
// 6. Shield.

#[test]
fn abort_waits_for_a_shield_then_cancels_at_the_next_wait() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let (entered_tx, entered_rx) = mpsc::channel();
        let finished = Arc::new(AtomicBool::new(false));
        let past_shield = Arc::new(AtomicBool::new(false));
        let after = Arc::new(AtomicBool::new(false));
        let drops = counter();
        let (f, p, a, guard) = (
            finished.clone(),
            past_shield.clone(),
            after.clone(),
            DropCounter(drops.clone()),
        );
        let h = on(&rt, || {
            fiber::spawn(move || {
                let _guard = guard;
                weft::wait(weft::task::shield(async move {
                    entered_tx.send(()).unwrap();
                    while !weft::task::is_cancelled() {
                        weft::task::yield_now().await;
                    }
                    // The shielded part goes on after the abort, waits included.
                    weft::time::sleep(ms(2)).await;
                    f.store(true, SeqCst);
                }));
                p.store(true, SeqCst);
                fiber::yield_now(); // the cancellation takes effect here
                a.store(true, SeqCst);
            })
        });
        entered_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        let err = h.join().expect_err("an aborted fiber completed");
        assert!(err.is_cancelled(), "{err:?}");
        assert!(finished.load(SeqCst), "the shielded part did not finish");
        assert!(
            past_shield.load(SeqCst),
            "the fiber did not go on after its shield"
        );
        assert!(
            !after.load(SeqCst),
            "the fiber was not cancelled at its next wait"
        );
        assert_eq!(load(&drops), 1);
    })
}

// ---------------------------------------------------------------------------------
// 7. Panics.

#[test]
fn a_panicking_fiber_reports_through_its_handle() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let drops = counter();
        let guard = DropCounter(drops.clone());
        let err = on(&rt, || {
            fiber::spawn(move || {
                let _guard = guard;
                panic!("boom in a fiber")
            })
        })
        .join()
        .expect_err("a panicking fiber returned Ok");
        assert!(err.is_panic());
        assert!(!err.is_cancelled());
        assert!(err.to_string().contains("boom in a fiber"), "{err}");
        let payload = err.into_panic();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in a fiber"));
        assert_eq!(
            load(&drops),
            1,
            "the panicking fiber's locals were not dropped"
        );

        // A panic after a wait: on resumption.
        let n = 7;
        let err = on(&rt, || {
            fiber::spawn(move || {
                fiber::sleep(ms(1));
                fiber::yield_now();
                panic!("late boom {n}")
            })
        })
        .join()
        .unwrap_err();
        assert!(err.is_panic());
        assert_eq!(
            err.into_panic()
                .downcast_ref::<String>()
                .map(String::as_str),
            Some("late boom 7")
        );

        // A non-string payload.
        let err = on(&rt, || fiber::spawn(|| std::panic::panic_any(17u32)))
            .join()
            .unwrap_err();
        assert_eq!(err.into_panic().downcast_ref::<u32>(), Some(&17));

        // Many panics, then the one worker still runs fibers and tasks.
        let hs: Vec<JoinHandle<()>> = on(&rt, || {
            (0..20)
                .map(|i| {
                    fiber::spawn(move || {
                        if i % 2 == 0 {
                            fiber::yield_now();
                        }
                        panic!("panic {i}")
                    })
                })
                .collect()
        });
        for h in hs {
            assert!(h.join().unwrap_err().is_panic());
        }
        assert_eq!(rt.stats().num_workers, 1);
        assert_eq!(on(&rt, || fiber::spawn(|| 40 + 2)).join().unwrap(), 42);
        assert_eq!(rt.spawn(async { 9 }).join().unwrap(), 9);
        let nested = on(&rt, || {
            fiber::spawn(|| {
                let failed = fiber::spawn(|| panic!("inner")).join().unwrap_err();
                (failed.is_panic(), weft::spawn(async { 1 }).join().unwrap())
            })
        });
        assert_eq!(nested.join().unwrap(), (true, 1));
    })
}

// ---------------------------------------------------------------------------------
// 8. Fiber-local storage.

weft::fiber_local! {
    static SLOT: Cell<u64> = Cell::new(0);
    static GUARD: RefCell<Option<DropCounter>> = RefCell::new(None);
    static ABORT_GUARD: RefCell<Option<DropCounter>> = RefCell::new(None);
}

#[test]
fn fiber_locals_are_per_fiber() {
    let _rt_lock = shared();
    with_timeout(|| {
        // One worker: both fibers share one thread, so a thread-local would be shared.
        let rt = workers(1);
        let (a_tx, a_rx) = oneshot::channel::<()>();
        let (b_tx, b_rx) = oneshot::channel::<()>();
        let (a, b) = on(&rt, || {
            let a = fiber::spawn(move || {
                SLOT.with(|s| s.set(1));
                a_tx.send(()).unwrap();
                weft::wait(b_rx).unwrap();
                (SLOT.with(Cell::get), thread_name())
            });
            let b = fiber::spawn(move || {
                weft::wait(a_rx).unwrap();
                let first = SLOT.with(Cell::get);
                SLOT.with(|s| s.set(2));
                b_tx.send(()).unwrap();
                (first, SLOT.with(Cell::get), thread_name())
            });
            (a, b)
        });
        let (a_val, a_thread) = a.join().unwrap();
        let (b_first, b_val, b_thread) = b.join().unwrap();
        assert_eq!(a_thread, b_thread, "one worker, one thread");
        assert_eq!(b_first, 0, "a new fiber saw another fiber's value");
        assert_eq!(b_val, 2);
        assert_eq!(a_val, 1, "another fiber's write showed through");

        // A fresh fiber after those starts from the initial value again.
        assert_eq!(
            on(&rt, || fiber::spawn(|| SLOT.with(Cell::get)))
                .join()
                .unwrap(),
            0
        );
    })
}

#[test]
fn fiber_locals_survive_waits() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let hs: Vec<_> = on(&rt, || {
            (1..=20u64)
                .map(|i| {
                    fiber::spawn(move || {
                        SLOT.with(|s| s.set(i));
                        fiber::sleep(ms(1));
                        let a = SLOT.with(Cell::get);
                        fiber::yield_now();
                        let b = SLOT.with(Cell::get);
                        let t = weft::spawn(async move { i * 10 }).join().unwrap();
                        let c = SLOT.with(Cell::get);
                        (a, b, c, t)
                    })
                })
                .collect()
        });
        for (i, h) in (1..=20u64).zip(hs) {
            assert_eq!(h.join().unwrap(), (i, i, i, i * 10), "fiber {i}");
        }
    })
}

#[test]
fn fiber_locals_are_dropped_when_the_fiber_ends() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        // Normal completion: dropped before the join returns.
        let drops = counter();
        let d = drops.clone();
        on(&rt, || {
            fiber::spawn(move || {
                GUARD.with(|g| *g.borrow_mut() = Some(DropCounter(d)));
                fiber::yield_now();
            })
        })
        .join()
        .unwrap();
        assert_eq!(load(&drops), 1, "a finished fiber's local was not dropped");

        // Many fibers, each with its own value.
        let drops = counter();
        let hs: Vec<_> = on(&rt, || {
            (0..50)
                .map(|_| {
                    let d = drops.clone();
                    fiber::spawn(move || {
                        GUARD.with(|g| *g.borrow_mut() = Some(DropCounter(d)));
                        fiber::sleep(ms(1));
                        GUARD.with(|g| g.borrow().is_some())
                    })
                })
                .collect()
        });
        for h in hs {
            assert!(h.join().unwrap());
        }
        assert_eq!(load(&drops), 50);

        // A panicking fiber.
        let drops = counter();
        let d = drops.clone();
        let err = on(&rt, || {
            fiber::spawn(move || {
                GUARD.with(|g| *g.borrow_mut() = Some(DropCounter(d)));
                panic!("with a local")
            })
        })
        .join()
        .unwrap_err();
        assert!(err.is_panic());
        assert_eq!(load(&drops), 1, "a panicked fiber's local was not dropped");

        // An aborted fiber.
        let drops = counter();
        let d = drops.clone();
        let (parked_tx, parked_rx) = mpsc::channel();
        let h = on(&rt, || {
            fiber::spawn(move || {
                ABORT_GUARD.with(|g| *g.borrow_mut() = Some(DropCounter(d)));
                parked_tx.send(()).unwrap();
                weft::wait(std::future::pending::<()>());
            })
        });
        parked_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        assert!(h.join().unwrap_err().is_cancelled());
        assert_eq!(load(&drops), 1, "an aborted fiber's local was not dropped");
    })
}

#[test]
fn fiber_locals_outside_a_fiber_are_an_error() {
    let _rt_lock = shared();
    with_timeout(|| {
        let err = SLOT
            .try_with(|s| s.get())
            .expect_err("try_with outside a fiber gave a value");
        assert!(err.to_string().contains("fiber"), "{err}");
        let _: &dyn std::error::Error = &err;
        let payload = catch_unwind(|| SLOT.with(|s| s.get()))
            .expect_err("with outside a fiber did not panic");
        let msg = panic_message(&*payload).unwrap_or_default();
        assert!(msg.contains("fiber"), "panic message: {msg:?}");

        let rt = workers(1);
        // In an async task and on a blocking-pool thread.
        assert!(rt
            .spawn(async { SLOT.try_with(|s| s.get()).is_err() })
            .join()
            .unwrap());
        assert!(rt
            .spawn_blocking(|| SLOT.try_with(|s| s.get()).is_err())
            .join()
            .unwrap());
        // Inside a fiber it works.
        assert_eq!(
            on(&rt, || fiber::spawn(|| SLOT.try_with(|s| s.get())))
                .join()
                .unwrap(),
            Ok(0)
        );
    })
}

// ---------------------------------------------------------------------------------
// 9. Fork-join on a fiber's stack.

#[test]
fn fork_join_inside_a_fiber() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let h = on(&rt, || {
            fiber::spawn(|| {
                let before = std::thread::current().id();
                let f = fib(20);
                let sum: u64 = (0..100_000u64).into_par_iter().sum();
                let mut v = vec![0u64; 1_000];
                weft::scope(|s| {
                    for (i, chunk) in v.chunks_mut(100).enumerate() {
                        s.spawn(move |_| chunk.iter_mut().for_each(|x| *x = i as u64));
                    }
                });
                // The fiber can still suspend after the fork-join work.
                fiber::sleep(ms(1));
                let still_fiber = fiber::is_fiber();
                let same_thread = std::thread::current().id() == before;
                (f, sum, v, still_fiber, same_thread)
            })
        });
        let (f, sum, v, still_fiber, same_thread) = h.join().unwrap();
        assert_eq!(f, 6_765);
        assert_eq!(sum, 4_999_950_000);
        let want: Vec<u64> = (0..1_000).map(|i| i / 100).collect();
        assert_eq!(v, want);
        assert!(still_fiber);
        assert!(same_thread);

        // Several fibers doing fork-join at once.
        let hs: Vec<_> = on(&rt, || {
            (0..8)
                .map(|i| {
                    fiber::spawn(move || {
                        fiber::yield_now();
                        fib(15 + i % 3)
                    })
                })
                .collect()
        });
        for (i, h) in hs.into_iter().enumerate() {
            let want = [610, 987, 1_597][i % 3];
            assert_eq!(h.join().unwrap(), want);
        }

        // Waiting inside a join's closures on a fiber (the fiber cannot suspend there;
        // the worker helps instead).
        let h = on(&rt, || {
            fiber::spawn(|| {
                weft::join(
                    || {
                        fiber::sleep(ms(1));
                        weft::spawn(async { 1 }).join().unwrap()
                    },
                    || {
                        fiber::sleep(ms(1));
                        2
                    },
                )
            })
        });
        assert_eq!(h.join().unwrap(), (1, 2));
    })
}

// ---------------------------------------------------------------------------------
// 10. Identity: current, is_fiber, name, id.

#[test]
fn current_names_and_ids() {
    let _rt_lock = shared();
    with_timeout(|| {
        assert!(!fiber::is_fiber());
        assert!(fiber::current().is_none());
        let rt = workers(1);
        assert!(rt.block_on(async { !fiber::is_fiber() && fiber::current().is_none() }));

        let h = on(&rt, || {
            FiberBuilder::new().name("alpha-7").spawn(|| {
                let c = fiber::current().expect("no current fiber inside a fiber");
                let first = (
                    fiber::is_fiber(),
                    c.name().map(str::to_owned),
                    c.id(),
                    format!("{c:?}"),
                );
                fiber::sleep(ms(1));
                let again = fiber::current().unwrap();
                (first, again.id(), again.name().map(str::to_owned))
            })
        });
        let id = h.id();
        let ((is, name, cid, dbg), id_after, name_after) = h.join().unwrap();
        assert!(is);
        assert_eq!(name.as_deref(), Some("alpha-7"));
        assert_eq!(cid, id, "current().id() differs from the handle's id");
        assert_eq!(id_after, id, "the id changed across a wait");
        assert_eq!(name_after.as_deref(), Some("alpha-7"));
        assert!(!dbg.is_empty());

        // Unnamed fibers; distinct ids.
        let a = on(&rt, || fiber::spawn(|| fiber::current().unwrap()));
        let b = on(&rt, || fiber::spawn(|| fiber::current().unwrap()));
        let (a_id, b_id) = (a.id(), b.id());
        let (ca, cb) = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(ca.name(), None);
        assert_eq!((ca.id(), cb.id()), (a_id, b_id));
        assert_ne!(a_id, b_id);

        // Nested fibers on one worker: the outer fiber's identity comes back after it
        // joined the inner one.
        let outer = on(&rt, || {
            FiberBuilder::new().name("outer").spawn(|| {
                let inner = FiberBuilder::new().name("inner").spawn(|| {
                    let c = fiber::current().unwrap();
                    (c.name().map(str::to_owned), c.id())
                });
                let inner_id = inner.id();
                let (inner_name, seen_id) = inner.join().unwrap();
                let me = fiber::current().unwrap();
                (
                    inner_name,
                    seen_id == inner_id,
                    me.name().map(str::to_owned),
                    me.id(),
                )
            })
        });
        let outer_id = outer.id();
        let (inner_name, inner_id_ok, outer_name, outer_seen) = outer.join().unwrap();
        assert_eq!(inner_name.as_deref(), Some("inner"));
        assert!(inner_id_ok);
        assert_eq!(outer_name.as_deref(), Some("outer"));
        assert_eq!(outer_seen, outer_id);

        // Not a fiber: a task (also one spawned by a fiber), a blocking-pool thread.
        assert!(rt
            .spawn(async { !fiber::is_fiber() && fiber::current().is_none() })
            .join()
            .unwrap());
        let from_fiber = on(&rt, || {
            fiber::spawn(|| weft::spawn(async { fiber::is_fiber() }).join().unwrap())
        });
        assert!(
            !from_fiber.join().unwrap(),
            "a task spawned by a fiber is a fiber"
        );
        assert!(!rt.spawn_blocking(fiber::is_fiber).join().unwrap());
        assert!(!fiber::is_fiber());
    })
}

// ---------------------------------------------------------------------------------
// 11. The thread rule.

#[test]
fn a_fiber_stays_on_its_thread_across_waits() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let stop = Arc::new(AtomicBool::new(false));
        // Background load: busy fibers and tasks on both workers.
        let busy_fibers: Vec<_> = on(&rt, || {
            (0..4)
                .map(|_| {
                    let stop = stop.clone();
                    fiber::spawn(move || {
                        let mut n = 0u64;
                        while !stop.load(SeqCst) {
                            for _ in 0..2_000 {
                                n = std::hint::black_box(n + 1);
                            }
                            fiber::yield_now();
                        }
                        n
                    })
                })
                .collect()
        });
        let busy_tasks: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                rt.spawn(async move {
                    let mut n = 0u64;
                    while !stop.load(SeqCst) {
                        for _ in 0..2_000 {
                            n = std::hint::black_box(n + 1);
                        }
                        weft::task::yield_now().await;
                    }
                    n
                })
            })
            .collect();

        let watchers: Vec<_> = on(&rt, || {
            (0..50u64)
                .map(|_| {
                    fiber::spawn(move || {
                        let home = std::thread::current().id();
                        let mut moved = Vec::new();
                        for i in 0..50u64 {
                            let before = std::thread::current().id();
                            match i % 5 {
                                0 => fiber::sleep(ms(1)),
                                1 => fiber::yield_now(),
                                2 => weft::wait(weft::spawn(async {
                                    weft::task::yield_now().await;
                                }))
                                .unwrap(),
                                3 => weft::spawn(async { weft::time::sleep(ms(1)).await })
                                    .join()
                                    .unwrap(),
                                _ => {
                                    let (tx, rx) = oneshot::channel();
                                    weft::spawn(async move {
                                        weft::task::yield_now().await;
                                        tx.send(i).unwrap();
                                    });
                                    assert_eq!(weft::wait(rx).unwrap(), i);
                                }
                            }
                            let after = std::thread::current().id();
                            if before != home || after != home {
                                moved.push(i);
                            }
                        }
                        (home, moved)
                    })
                })
                .collect()
        });
        let mut homes = std::collections::HashSet::new();
        for (w, h) in watchers.into_iter().enumerate() {
            let (home, moved) = h.join().unwrap();
            homes.insert(home);
            assert!(
                moved.is_empty(),
                "fiber {w} changed threads around its waits number {moved:?}"
            );
        }
        stop.store(true, SeqCst);
        for h in busy_fibers {
            h.join().unwrap();
        }
        for h in busy_tasks {
            h.join().unwrap();
        }
        eprintln!(
            "thread rule: the watchers lived on {} thread(s)",
            homes.len()
        );
    })
}

/// Two fibers pinned to different workers pass a turn back and forth. Each handoff
/// finds the other worker out of work and about to sleep: it spins first (for about
/// one futex wake's time), so most handoffs reach it without a futex wake. Before the
/// spin every handoff was a futex wake (~20 us per switch on a 2-core VM).
///
/// The spin can only meet a handoff when both workers have a core: on a machine busy
/// with other work a spinning worker is preempted and the partner's handoff finds it
/// parked. So each attempt also measures the CPU time each worker thread got; an
/// attempt where either got less than three quarters of the wall time says nothing,
/// and the test runs up to five attempts, judging the first in which both had a core.
#[test]
fn a_fiber_pair_on_two_workers_hands_off_mostly_without_futex_wakes() {
    let _only = exclusive();
    with_timeout(|| {
        const ROUND_TRIPS: u64 = 2_000;
        const ATTEMPTS: usize = 5;
        let rt = workers(2);
        for attempt in 1..=ATTEMPTS {
            let turn = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let wakers: Arc<[std::sync::Mutex<Option<std::task::Waker>>; 2]> =
                Arc::new([std::sync::Mutex::new(None), std::sync::Mutex::new(None)]);
            let started = counter();
            let before = rt.stats();
            let wall = std::time::Instant::now();
            let players: Vec<_> = on(&rt, || {
                (0..2u64)
                    .map(|me| {
                        let (turn, wakers, started) =
                            (turn.clone(), wakers.clone(), started.clone());
                        fiber::spawn(move || {
                            // Hold this worker until the other fiber started, so the two
                            // start (and stay: the thread rule) on different workers.
                            started.fetch_add(1, SeqCst);
                            while load(&started) < 2 {
                                std::hint::spin_loop();
                            }
                            let home = std::thread::current().id();
                            let cpu_start = thread_cpu_time();
                            let mut i = me;
                            while i < 2 * ROUND_TRIPS {
                                weft::wait(std::future::poll_fn(|cx| {
                                    *wakers[me as usize].lock().unwrap() = Some(cx.waker().clone());
                                    if turn.load(SeqCst) == i {
                                        std::task::Poll::Ready(())
                                    } else {
                                        std::task::Poll::Pending
                                    }
                                }));
                                turn.store(i + 1, SeqCst);
                                if let Some(w) = &*wakers[1 - me as usize].lock().unwrap() {
                                    w.wake_by_ref();
                                }
                                i += 2;
                            }
                            (home, thread_cpu_time() - cpu_start)
                        })
                    })
                    .collect()
            });
            let results: Vec<_> = players.into_iter().map(|h| h.join().unwrap()).collect();
            let wall = wall.elapsed();
            assert_ne!(
                results[0].0, results[1].0,
                "the pair did not run on two workers"
            );
            let after = rt.stats();
            let spin: u64 = after.workers.iter().map(|w| w.spin_wakeups).sum::<u64>()
                - before.workers.iter().map(|w| w.spin_wakeups).sum::<u64>();
            let futex = after.total_wake_calls - before.total_wake_calls;
            let least_cpu = results[0].1.min(results[1].1);
            let had_cores = least_cpu.as_secs_f64() >= 0.75 * wall.as_secs_f64();
            eprintln!(
                "attempt {attempt}: {ROUND_TRIPS} round trips: {spin} parks met while spinning, \
                 {futex} futex wakes; wall {wall:?}, least worker CPU {least_cpu:?}"
            );
            if !had_cores {
                continue;
            }
            // A worker may also find the handoff while still searching, before it parks;
            // what the spin must remove is the futex wake per handoff.
            assert!(
                futex < ROUND_TRIPS / 2,
                "{futex} futex wakes for {} cross-worker handoffs ({spin} met while spinning), \
                 with both workers on a core",
                2 * ROUND_TRIPS
            );
            return;
        }
        eprintln!("no attempt had both workers on a core (a busy machine): nothing to judge");
    })
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn migrating_fibers_still_complete() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let hs: Vec<_> = on(&rt, || {
            (0..50u64)
                .map(|k| {
                    // SAFETY: the fiber keeps only plain integers across its waits.
                    unsafe { FiberBuilder::new().fiber_migration(true) }.spawn(move || {
                        let mut sum = 0;
                        for i in 0..20u64 {
                            if i % 2 == 0 {
                                fiber::yield_now();
                            } else {
                                sum += weft::spawn(async move { i }).join().unwrap();
                            }
                        }
                        SLOT.with(|s| s.set(k));
                        fiber::sleep(ms(1));
                        (sum, SLOT.with(Cell::get))
                    })
                })
                .collect()
        });
        for (k, h) in (0..50u64).zip(hs) {
            assert_eq!(h.join().unwrap(), (100, k));
        }
    })
}

// ---------------------------------------------------------------------------------
// 12. yield_now.

#[test]
fn yield_now_interleaves_fibers_on_one_worker() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let counter = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = on(&rt, || {
            (0..2)
                .map(|_| {
                    let (counter, ready) = (counter.clone(), ready.clone());
                    fiber::spawn(move || {
                        ready.fetch_add(1, SeqCst);
                        // Both fibers started: only possible if yield lets the other run.
                        while ready.load(SeqCst) < 2 {
                            fiber::yield_now();
                        }
                        let mut seen = Vec::new();
                        for _ in 0..100 {
                            seen.push(counter.fetch_add(1, SeqCst));
                            fiber::yield_now();
                        }
                        seen
                    })
                })
                .collect()
        });
        let mut all = Vec::new();
        for (f, h) in hs.into_iter().enumerate() {
            let seen = h.join().unwrap();
            assert!(
                seen.windows(2).any(|w| w[1] - w[0] > 1),
                "fiber {f} never saw the other fiber's progress between its yields: {seen:?}"
            );
            all.extend(seen);
        }
        all.sort_unstable();
        assert_eq!(all, (0..200).collect::<Vec<_>>());
        // Outside a fiber yield_now just yields the thread.
        fiber::yield_now();
    })
}

// ---------------------------------------------------------------------------------
// 13. Spawn errors.

#[test]
fn an_oversized_stack_is_a_stack_size_error() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        on(&rt, || {
            for size in [usize::MAX, 2 << 30] {
                let err = FiberBuilder::new()
                    .stack_size(size)
                    .try_spawn(|| ())
                    .expect_err("an oversized stack was accepted");
                assert_eq!(err.kind(), SpawnErrorKind::StackSize, "size {size}: {err}");
                let msg = err.to_string();
                assert!(!msg.is_empty());
                assert!(!format!("{err:?}").is_empty());
                let as_error: &dyn std::error::Error = &err;
                assert_eq!(as_error.to_string(), msg);

                // `spawn` panics with the same message.
                let payload = catch_unwind(AssertUnwindSafe(|| {
                    FiberBuilder::new().stack_size(size).spawn(|| ())
                }))
                .expect_err("spawn with an oversized stack did not panic");
                assert_eq!(panic_message(&*payload).as_deref(), Some(msg.as_str()));
            }
        });
        // The runtime is unaffected.
        assert_eq!(on(&rt, || fiber::spawn(|| 1)).join().unwrap(), 1);
    })
}

#[test]
fn stack_sizes_up_to_one_gib_work() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        for size in [0, 1, 4_097, 64 * 1024, 1 << 30] {
            let h = on(&rt, || {
                FiberBuilder::new().stack_size(size).spawn(move || {
                    fiber::yield_now();
                    size
                })
            });
            assert_eq!(h.join().unwrap(), size);
        }
    })
}

#[test]
fn spawning_through_a_dropped_runtime_is_a_shutdown_error() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let handle = rt.handle().clone();
        drop(rt);
        let err = on_handle(&handle, || fiber::try_spawn(|| ()))
            .expect_err("spawned a fiber on a dropped runtime");
        assert_eq!(err.kind(), SpawnErrorKind::Shutdown, "{err}");
        let msg = err.to_string();
        assert!(!msg.is_empty());
        let payload = catch_unwind(AssertUnwindSafe(|| {
            on_handle(&handle, || fiber::spawn(|| ()))
        }))
        .expect_err("spawn on a dropped runtime did not panic");
        assert_eq!(panic_message(&*payload).as_deref(), Some(msg.as_str()));
    })
}

// ---------------------------------------------------------------------------------
// 14. `wait` from threads and tasks; `block_on` inside a fiber.

#[test]
fn wait_from_threads_and_tasks() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        // A plain thread (this one) sleeps until the future is ready.
        assert_eq!(weft::wait(rt.spawn(async { 3 })).unwrap(), 3);
        let (tx, rx) = oneshot::channel();
        let h = on(&rt, || {
            fiber::spawn(move || {
                fiber::sleep(ms(2));
                tx.send(11).unwrap();
            })
        });
        assert_eq!(weft::wait(rx).unwrap(), 11);
        h.join().unwrap();
        let handle = rt.handle().clone();
        let v = std::thread::spawn(move || weft::wait(handle.spawn(async { 4 })).unwrap())
            .join()
            .unwrap();
        assert_eq!(v, 4);

        // A task on the one worker: waiting helps, so what it waits for still runs.
        let v = rt
            .spawn(async {
                let a = weft::wait(weft::spawn(async { 5 })).unwrap();
                let b = weft::wait(async {
                    weft::time::sleep(ms(1)).await;
                    1
                });
                let c = weft::wait(fiber::spawn(|| {
                    fiber::sleep(ms(1));
                    7
                }))
                .unwrap();
                a + b + c
            })
            .join()
            .unwrap();
        assert_eq!(v, 13);
    })
}

#[test]
fn block_on_inside_a_fiber_suspends_it() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let handle = rt.handle().clone();
        let (tx, rx) = oneshot::channel::<u32>();
        let (a, b) = on(&rt, || {
            let a = fiber::spawn(move || {
                let v = handle.block_on(async move {
                    let x = rx.await.unwrap();
                    let y = weft::spawn(async { 1 }).await.unwrap();
                    x * 2 + y
                });
                (v, fiber::is_fiber())
            });
            // On the same (only) worker: runs while `a` is in block_on.
            let b = fiber::spawn(move || {
                fiber::sleep(ms(1));
                tx.send(20).unwrap();
            });
            (a, b)
        });
        assert_eq!(a.join().unwrap(), (41, true));
        b.join().unwrap();
    })
}

// ---------------------------------------------------------------------------------
// 15. Stats.

#[test]
fn fiber_stats_count_live_fibers() {
    // Exclusive: no other test's fibers are alive meanwhile.
    let _only = exclusive();
    with_timeout(|| {
        let rt = workers(2);
        let before = fiber::stats().live_fibers;
        let parked = counter();
        let mut senders = Vec::new();
        let hs: Vec<_> = on(&rt, || {
            (0..50u32)
                .map(|i| {
                    let (tx, rx) = oneshot::channel::<u32>();
                    senders.push(tx);
                    let parked = parked.clone();
                    fiber::spawn(move || {
                        parked.fetch_add(1, SeqCst);
                        weft::wait(rx).unwrap() + i
                    })
                })
                .collect()
        });
        wait_until("all 50 fibers parked", || load(&parked) == 50);
        let during = fiber::stats();
        assert_eq!(
            during.live_fibers,
            before + 50,
            "50 parked fibers: {during:?}, before: {before}"
        );
        // The runtime's stats carry the same figures, and its report mentions them.
        let rt_stats = rt.stats();
        assert_eq!(
            rt_stats.fibers.live_fibers,
            before + 50,
            "{:?}",
            rt_stats.fibers
        );
        let report = rt_stats.to_string();
        assert!(
            report.contains("fibers") && report.contains(&format!("{} live", before + 50)),
            "the stats report does not show the live fibers:\n{report}"
        );
        for tx in senders {
            tx.send(1).unwrap();
        }
        for (i, h) in (0..50u32).zip(hs) {
            assert_eq!(h.join().unwrap(), i + 1);
        }
        let after = fiber::stats();
        assert_eq!(
            after.live_fibers, before,
            "the fibers finished and were joined: {after:?}"
        );
        // Unstarted fibers count as live too: the only worker of a second runtime is
        // kept busy meanwhile.
        let rt1 = workers(1);
        let blocker = block_a_worker(&rt1);
        let queued: Vec<_> = on(&rt1, || (0..10).map(|i| fiber::spawn(move || i)).collect());
        assert_eq!(fiber::stats().live_fibers, before + 10);
        blocker.release();
        for (i, h) in queued.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), i);
        }
        assert_eq!(fiber::stats().live_fibers, before);
        assert_eq!(rt.stats().fibers.live_fibers, before);
    })
}

#[test]
fn fiber_stats_account_for_stacks() {
    let _only = exclusive();
    with_timeout(|| {
        let rt = workers(2);
        let parked = counter();
        let mut senders = Vec::new();
        let hs: Vec<_> = on(&rt, || {
            (0..50)
                .map(|_| {
                    let (tx, rx) = oneshot::channel::<()>();
                    senders.push(tx);
                    let parked = parked.clone();
                    fiber::spawn(move || {
                        parked.fetch_add(1, SeqCst);
                        weft::wait(rx).unwrap();
                    })
                })
                .collect()
        });
        wait_until("all 50 fibers parked", || load(&parked) == 50);
        let during = fiber::stats();
        assert!(
            during.stack_bytes_reserved >= 50 * 16 * 1024,
            "50 live fibers, each with a stack of at least 16 KiB: {during:?}"
        );
        for tx in senders {
            tx.send(()).unwrap();
        }
        for h in hs {
            h.join().unwrap();
        }
        let after = fiber::stats();
        assert!(
            after.pooled_stacks >= 1,
            "finished fibers' stacks are kept for reuse: {after:?}"
        );
        assert!(
            after.stack_bytes_reserved >= after.pooled_stacks as u64 * 16 * 1024,
            "{after:?}"
        );
        drop(rt);
    })
}

// ---------------------------------------------------------------------------------
// More on cancellation: runtime drop, self-abort, detached fibers.

/// Records the thread that dropped it.
struct ThreadRecorder(Arc<std::sync::Mutex<Vec<String>>>);

impl Drop for ThreadRecorder {
    fn drop(&mut self) {
        self.0.lock().unwrap().push(thread_name());
    }
}

#[test]
fn dropping_the_runtime_unwinds_suspended_fibers() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let drops = counter();
        let threads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (handles, resumed) = spawn_parked(&rt, 20, |_| {
            (ThreadRecorder(threads.clone()), DropCounter(drops.clone()))
        });
        drop(rt);
        assert_eq!(
            load(&drops),
            20,
            "suspended fibers were not unwound at shutdown"
        );
        assert!(!resumed.load(SeqCst));
        // Each on its home worker (`tests/shutdown_fibers.rs` checks which one).
        for t in threads.lock().unwrap().iter() {
            assert!(
                t.starts_with("weft-worker-"),
                "a fiber was unwound on {t:?}, not on a worker"
            );
        }
        for h in handles {
            assert!(h.join().unwrap_err().is_cancelled());
        }
    })
}

#[test]
fn a_fiber_can_abort_itself() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(1);
        let (abort_tx, abort_rx) = oneshot::channel::<weft::AbortHandle>();
        let reached = Arc::new(AtomicBool::new(false));
        let after = Arc::new(AtomicBool::new(false));
        let (r, a) = (reached.clone(), after.clone());
        let h = on(&rt, || {
            fiber::spawn(move || {
                let me = weft::wait(abort_rx).unwrap();
                me.abort();
                r.store(true, SeqCst); // no wait yet: still running
                fiber::yield_now(); // cancelled here
                a.store(true, SeqCst);
            })
        });
        abort_tx.send(h.abort_handle()).unwrap();
        assert!(h.join().unwrap_err().is_cancelled());
        assert!(reached.load(SeqCst));
        assert!(
            !after.load(SeqCst),
            "a self-aborted fiber ran past its next wait"
        );
    })
}

#[test]
fn a_detached_fiber_keeps_running() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        drop(on(&rt, || {
            fiber::spawn(move || {
                fiber::sleep(ms(2));
                fiber::yield_now();
                d.store(true, SeqCst);
            })
        }));
        wait_until("the detached fiber finished", || done.load(SeqCst));
    })
}

// ---------------------------------------------------------------------------------
// Bugs found while writing these tests, now fixed.

/// Reads a fiber-local in its destructor (allowed: `Locals::take` documents that a
/// destructor may touch fiber-locals again).
struct TouchesLocals(Arc<AtomicUsize>);

impl Drop for TouchesLocals {
    fn drop(&mut self) {
        let v = SLOT.with(|s| s.get());
        self.0.fetch_add(1 + v as usize, SeqCst);
    }
}

weft::fiber_local! {
    static TOUCHY: RefCell<Option<TouchesLocals>> = RefCell::new(None);
}

#[test]
fn fiber_local_destructors_may_use_fiber_locals_after_abort_and_panic() {
    let _rt_lock = shared();
    with_timeout(|| {
        let rt = workers(2);
        let set = |c: &Arc<AtomicUsize>| {
            let c = c.clone();
            move || TOUCHY.with(|t| *t.borrow_mut() = Some(TouchesLocals(c)))
        };
        // Normal completion: the destructor runs on the fiber (this part passes).
        let c = counter();
        let init = set(&c);
        on(&rt, || fiber::spawn(init)).join().unwrap();
        assert_eq!(load(&c), 1);

        // Abort while parked.
        let c = counter();
        let init = set(&c);
        let (parked_tx, parked_rx) = mpsc::channel();
        let h = on(&rt, || {
            fiber::spawn(move || {
                init();
                parked_tx.send(()).unwrap();
                weft::wait(std::future::pending::<()>());
            })
        });
        parked_rx.recv_timeout(TIMEOUT).unwrap();
        h.abort();
        let err = h.join().unwrap_err();
        assert!(err.is_cancelled(), "an aborted fiber reported {err}");
        assert_eq!(
            load(&c),
            1,
            "the aborted fiber's local destructor did not complete"
        );

        // Panic.
        let c = counter();
        let init = set(&c);
        let err = on(&rt, || {
            fiber::spawn(move || {
                init();
                panic!("fiber panic")
            })
        })
        .join()
        .unwrap_err();
        assert_eq!(
            err.into_panic().downcast_ref::<&str>(),
            Some(&"fiber panic")
        );
        assert_eq!(
            load(&c),
            1,
            "the panicked fiber's local destructor did not complete"
        );
    })
}

/// Locality: a fiber spawned from a fiber starts on its spawner's worker (it waits in
/// the spawner's LIFO slot, which other workers do not steal from), so a pair that
/// talks to each other shares a worker even with idle workers around.
#[test]
fn a_fiber_spawned_from_a_fiber_starts_on_its_spawners_worker() {
    let _g = shared();
    with_timeout(|| {
        let rt = named_runtime("fiber-locality", 2);
        for _ in 0..20 {
            let (spawner, partner) = on(&rt, || {
                weft::fiber::spawn(|| {
                    let me = std::thread::current().id();
                    let partner = weft::fiber::spawn(|| std::thread::current().id());
                    (me, partner.join().unwrap())
                })
            })
            .join()
            .unwrap();
            assert_eq!(spawner, partner);
        }
    })
}

/// Starts `fibers` fibers one at a time from one fiber on a runtime of `workers`
/// workers (each started before the next is spawned, as a server's accept loop starts
/// a fiber per connection) and returns how many started on each worker thread (the
/// spawner's worker first).
fn starts_one_by_one(workers: usize, fibers: usize) -> Vec<usize> {
    let rt = named_runtime("fiber-spread", workers);
    let (spawner, homes) = on(&rt, || {
        weft::fiber::spawn(move || {
            let homes = common::placement::start_one_by_one(fibers);
            (std::thread::current().id(), homes)
        })
        .join()
        .unwrap()
    });
    let mut counts = std::collections::HashMap::new();
    for h in homes {
        *counts.entry(h).or_insert(0usize) += 1;
    }
    let mut out = vec![counts.remove(&spawner).unwrap_or(0)];
    out.extend(counts.into_values());
    out.resize(workers, 0);
    out
}

/// Fibers that start one at a time on one worker (a server's accept loop spawning a
/// fiber per connection, each started before the next comes) spread over the workers
/// as they start: a started fiber never moves, so where it starts is where its work is
/// done for good. Before, each started at once on the spawner's worker, and an echo
/// server's fibers stayed tied 65/35 or 78/22 to two workers (15-18 us a round trip
/// against 9.5-10 at 50/50).
#[test]
fn fibers_started_one_by_one_spread_over_the_workers() {
    let _g = shared();
    with_timeout(|| {
        let counts = starts_one_by_one(2, 40);
        // The spawner counts on its worker too; two workers choosing at once may each
        // see the other's count a fiber late.
        assert!(
            counts[0].abs_diff(counts[1]) <= 6,
            "fibers started per worker, the spawner's first: {counts:?}"
        );
    })
}

/// The same on eight workers, where a start looks at a few workers from a random one
/// rather than all of them: every worker still gets its share.
#[test]
fn fibers_started_one_by_one_spread_over_eight_workers() {
    let _g = shared();
    with_timeout(|| {
        let counts = starts_one_by_one(8, 80);
        assert!(
            counts.iter().all(|&n| (5..=15).contains(&n)),
            "fibers started per worker, the spawner's first: {counts:?}"
        );
    })
}

/// At runtime drop, a suspended fiber is unwound by its home worker as that worker
/// leaves its loop: on the thread whose thread-bound data it may hold, before the
/// worker's `on_thread_stop` (and its thread-locals' destructors) ran.
#[test]
fn shutdown_unwinds_a_fiber_on_its_home_worker_before_it_stops() {
    let _g = shared();
    with_timeout(|| {
        let stopped = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = stopped.clone();
        let rt = weft::Builder::new()
            .worker_threads(2)
            .on_thread_stop(move || s.lock().unwrap().push(thread_name()))
            .build()
            .unwrap();
        struct Probe {
            stopped: Arc<std::sync::Mutex<Vec<String>>>,
            seen: Arc<std::sync::Mutex<Option<(bool, String)>>>,
        }
        impl Drop for Probe {
            fn drop(&mut self) {
                let me = thread_name();
                let home_stopped = self.stopped.lock().unwrap().contains(&me);
                *self.seen.lock().unwrap() = Some((home_stopped, me));
            }
        }
        let seen = Arc::new(std::sync::Mutex::new(None));
        let home = Arc::new(std::sync::Mutex::new(String::new()));
        let parked = counter();
        let probe = Probe {
            stopped: stopped.clone(),
            seen: seen.clone(),
        };
        let (p, hm) = (parked.clone(), home.clone());
        let h = on(&rt, move || {
            fiber::spawn(move || {
                let _probe = probe;
                *hm.lock().unwrap() = thread_name();
                p.fetch_add(1, SeqCst);
                park_forever(0);
            })
        });
        wait_until("the fiber parked", || load(&parked) == 1);
        drop(rt);
        assert!(h.join().unwrap_err().is_cancelled());
        let (home_stopped, thread) = seen.lock().unwrap().clone().expect("the fiber was unwound");
        assert_eq!(thread, *home.lock().unwrap(), "unwound off its home worker");
        assert!(!home_stopped, "unwound after its worker stopped");
    })
}

/// The starvation escape hatch of migration: a migrating fiber whose home worker is
/// stuck in one long poll is woken onto the shared queue (once sysmon marked the worker
/// stalled), so another worker runs it; the fiber finishes while its home is still
/// blocked.
#[test]
fn a_migrating_fiber_escapes_a_stuck_home_worker() {
    let _g = shared();
    with_timeout(|| {
        let rt = weft::Builder::new()
            .worker_threads(2)
            .stall_report(Some(ms(50)))
            .build()
            .unwrap();
        let (wake_tx, wake_rx) = oneshot::channel::<()>();
        let (blocking_tx, blocking_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
        let fiber = on(&rt, move || {
            // SAFETY: the fiber keeps only thread ids and a channel end across waits.
            unsafe { FiberBuilder::new().fiber_migration(true) }.spawn(move || {
                let home = std::thread::current().id();
                // Spawned from the fiber, the blocker waits in this worker's LIFO slot
                // and runs here as soon as the fiber parks: it blocks the home worker.
                drop(weft::spawn(async move {
                    blocking_tx.send(()).unwrap();
                    let _ = release_rx.lock().unwrap().recv_timeout(TIMEOUT);
                }));
                weft::wait(wake_rx).unwrap();
                (home, std::thread::current().id())
            })
        });
        blocking_rx.recv_timeout(TIMEOUT).unwrap();
        // Past a sysmon period (10 ms here), the home worker counts as stalled.
        std::thread::sleep(ms(100));
        wake_tx.send(()).unwrap();
        let (home, finished_on) = fiber.join().unwrap();
        assert_ne!(
            home, finished_on,
            "the fiber waited for its stuck home worker"
        );
        release_tx.send(()).unwrap();
    })
}
