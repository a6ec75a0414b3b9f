//! Fork-join: `join` and `scope` from every context, panics, nesting, shutdown, and the
//! no-deadlock rule for locks held across a join.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{fib, with_timeout, workers};

fn depth(d: u32) -> u32 {
    if d == 0 {
        return 0;
    }
    let (a, b) = weft::join(|| depth(d - 1), || 1);
    a + b
}

#[test]
fn join_from_every_context() {
    with_timeout(|| {
        // A thread with no runtime: the global runtime.
        assert_eq!(fib(20), 6765);
        let rt = workers(2);
        // Inside an async task, on a worker.
        assert_eq!(rt.spawn(async { fib(20) }).join().unwrap(), 6765);
        // Inside block_on on a plain thread: runs on that runtime's pool.
        let (w, _) = rt.block_on(async {
            weft::join(
                || std::thread::current().name().unwrap_or("").to_string(),
                || 0,
            )
        });
        assert!(w.starts_with("weft-worker"), "ran on {w}");
        // From a blocking-pool thread.
        assert_eq!(rt.spawn_blocking(|| fib(15)).join().unwrap(), 610);
        // From a plain thread with a handle entered through block_on.
        let h = rt.handle().clone();
        let v = std::thread::spawn(move || h.block_on(async { fib(18) }))
            .join()
            .unwrap();
        assert_eq!(v, 2584);
    });
}

#[test]
fn nested_joins_twenty_deep_on_one_and_two_workers() {
    with_timeout(|| {
        for n in [1, 2] {
            let rt = workers(n);
            assert_eq!(rt.spawn(async { depth(20) }).join().unwrap(), 20);
            assert_eq!(rt.spawn(async { fib(22) }).join().unwrap(), 17711);
        }
    });
}

#[test]
fn join_borrows_from_the_stack_and_work_really_spreads() {
    with_timeout(|| {
        let rt = workers(2);
        let mut data: Vec<u64> = (0..100_000).collect();
        let threads = Mutex::new(std::collections::HashSet::new());
        rt.block_on(async {
            fn go(s: &mut [u64], threads: &Mutex<std::collections::HashSet<String>>) {
                if s.len() <= 1_000 {
                    threads
                        .lock()
                        .unwrap()
                        .insert(std::thread::current().name().unwrap().to_string());
                    s.iter_mut().for_each(|x| *x *= 2);
                    // Enough work per leaf for the heartbeat to share it out.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    return;
                }
                let (l, r) = s.split_at_mut(s.len() / 2);
                weft::join(|| go(l, threads), || go(r, threads));
            }
            go(&mut data, &threads);
        });
        assert!(data.iter().enumerate().all(|(i, &x)| x == 2 * i as u64));
        assert_eq!(threads.lock().unwrap().len(), 2, "both workers took part");
    });
}

#[test]
fn a_panic_on_either_side_propagates_after_both_finished() {
    with_timeout(|| {
        let rt = workers(2);
        for case in 0..3 {
            let finished = Arc::new(AtomicUsize::new(0));
            let f = finished.clone();
            let err = rt
                .spawn(async move {
                    let (f1, f2) = (f.clone(), f.clone());
                    weft::join(
                        move || {
                            std::thread::sleep(std::time::Duration::from_millis(2));
                            f1.fetch_add(1, Ordering::SeqCst);
                            if case != 1 {
                                panic!("left");
                            }
                        },
                        move || {
                            std::thread::sleep(std::time::Duration::from_millis(2));
                            f2.fetch_add(1, Ordering::SeqCst);
                            if case != 0 {
                                panic!("right");
                            }
                        },
                    );
                })
                .join()
                .unwrap_err();
            assert_eq!(
                finished.load(Ordering::SeqCst),
                2,
                "both sides ran to the end"
            );
            let msg = *err.into_panic().downcast::<&str>().unwrap();
            let expected = if case == 1 { "right" } else { "left" };
            assert_eq!(msg, expected, "case {case}: the first side's payload wins");
        }
        // The runtime survives.
        assert_eq!(rt.spawn(async { fib(10) }).join().unwrap(), 55);
    });
}

#[test]
fn scope_borrows_nests_and_waits_for_everything() {
    with_timeout(|| {
        let rt = workers(2);
        let mut v = vec![0u64; 1000];
        let count = AtomicUsize::new(0);
        rt.block_on(async {
            weft::scope(|s| {
                for (i, chunk) in v.chunks_mut(100).enumerate() {
                    let count = &count;
                    s.spawn(move |s| {
                        for (j, x) in chunk.iter_mut().enumerate() {
                            *x = (i * 100 + j) as u64;
                        }
                        s.spawn(move |_| {
                            count.fetch_add(1, Ordering::SeqCst);
                        });
                    });
                }
            });
        });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        assert_eq!(count.load(Ordering::SeqCst), 10);
        // From outside any runtime too.
        let mut total = 0;
        weft::scope(|s| s.spawn(|_| total = 42));
        assert_eq!(total, 42);
    });
}

#[test]
fn a_panic_in_a_scope_job_propagates_after_all_jobs_finished() {
    with_timeout(|| {
        let done = AtomicUsize::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            weft::scope(|s| {
                s.spawn(|_| panic!("scope job"));
                for _ in 0..10 {
                    s.spawn(|_| {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                        done.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        }));
        assert!(r.is_err());
        assert_eq!(done.load(Ordering::SeqCst), 10);
    });
}

/// rayon's deadlock: a worker holds a mutex across a join; while it waits for the
/// stolen half it must not pick up an unrelated job that takes the same mutex on the
/// same thread. weft's waiting worker only helps the thief with the stolen half's own
/// jobs, so this finishes.
///
/// Each round, one job takes the lock and joins two slow halves, so that an idle
/// worker steals the second half and the holder waits for it; meanwhile 100 short
/// unrelated jobs of the same scope sit in the deques. Each takes the lock if it finds
/// itself on a thread that already holds it (a deadlock, which `with_timeout`
/// reports), and otherwise leaves it alone. With rayon's rule in `finish_b` (a waiting
/// worker helps with any deque's jobs) this test hangs.
#[test]
fn a_lock_held_across_a_join_does_not_deadlock() {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        static HOLDING: Cell<bool> = const { Cell::new(false) };
    }
    with_timeout(|| {
        let rt = workers(3);
        let m = Mutex::new(0u64);
        let slow_fib = || {
            std::thread::sleep(Duration::from_millis(3));
            fib(12)
        };
        for _ in 0..64 {
            rt.block_on(async {
                weft::scope(|s| {
                    let m = &m;
                    s.spawn(move |_| {
                        let mut g = m.lock().unwrap();
                        HOLDING.set(true);
                        let (a, b) = weft::join(slow_fib, slow_fib);
                        HOLDING.set(false);
                        *g += a + b;
                    });
                    for _ in 0..100 {
                        s.spawn(move |_| {
                            std::thread::sleep(Duration::from_micros(100));
                            if HOLDING.get() {
                                // Only a helping lock holder gets here: it deadlocks.
                                drop(m.lock().unwrap());
                            }
                        });
                    }
                });
            });
        }
        assert_eq!(m.into_inner().unwrap(), 64 * 2 * 144);
    });
}

#[test]
fn join_while_the_pool_shuts_down_still_completes() {
    with_timeout(|| {
        for _ in 0..20 {
            let rt = workers(2);
            let h = rt.handle().clone();
            let joiner = std::thread::spawn(move || {
                let mut sum = 0;
                for _ in 0..50 {
                    sum += h.block_on(async { fib(12) });
                }
                sum
            });
            std::thread::sleep(std::time::Duration::from_micros(300));
            drop(rt);
            // Before, during or after the shutdown: every join returned the right value
            // (run by the workers, by the final drain, or sequentially on the caller).
            assert_eq!(joiner.join().unwrap(), 50 * 144);
        }
    });
}

/// Deep in a recursion most joins run as plain calls (granularity control); a panic on
/// the first side there still lets the second side run before the panic continues.
#[test]
fn a_panic_deep_in_a_recursion_still_runs_the_other_side() {
    with_timeout(|| {
        fn down(d: u32, ran: &AtomicUsize) {
            if d == 0 {
                return;
            }
            weft::join(
                || {
                    if d == 1 {
                        panic!("deep");
                    }
                    down(d - 1, ran)
                },
                || {
                    ran.fetch_add(1, Ordering::SeqCst);
                },
            );
        }
        let rt = workers(1);
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let err = rt.spawn(async move { down(12, &r) }).join().unwrap_err();
        assert_eq!(*err.into_panic().downcast::<&str>().unwrap(), "deep");
        assert_eq!(ran.load(Ordering::SeqCst), 12, "every second side ran");
    });
}

/// A worker whose stolen half is the bigger one must not sit idle until the thief is
/// done: waiting in `join`, it registers with the thief, whose heartbeat then shares
/// the rest of that half with it (leapfrogging).
#[test]
fn the_owner_of_a_stolen_half_helps_the_thief_with_it() {
    fn spin(d: std::time::Duration) {
        let start = std::time::Instant::now();
        while start.elapsed() < d {
            std::hint::spin_loop();
        }
    }
    fn leaves(depth: u32, owner: std::thread::ThreadId, on_owner: &AtomicUsize) {
        if depth == 0 {
            spin(std::time::Duration::from_micros(50));
            if std::thread::current().id() == owner {
                on_owner.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        weft::join(
            || leaves(depth - 1, owner, on_owner),
            || leaves(depth - 1, owner, on_owner),
        );
    }
    with_timeout(|| {
        let rt = workers(2);
        // Let both workers settle into sleep, so the outermost join finds one hungry
        // and offers `b` to it.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (on_owner, total) = rt
            .spawn(async {
                let owner = std::thread::current().id();
                let on_owner = AtomicUsize::new(0);
                // `a` runs long enough for the other worker to wake and steal `b`
                // (256 leaves of 50 µs), which then outlasts `a` by ~8 ms.
                weft::join(
                    || spin(std::time::Duration::from_millis(5)),
                    || leaves(8, owner, &on_owner),
                );
                (on_owner.load(Ordering::Relaxed), 256)
            })
            .join()
            .unwrap();
        assert!(
            on_owner > 0,
            "the worker that waited ran none of the {total} leaves of its stolen half"
        );
    });
}
