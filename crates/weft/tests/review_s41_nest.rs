//! Review (session 41): how fork-join, parallel iterators, fibers, tasks and runtimes
//! nest inside each other and how each of them ends (panic, abort, shutdown).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use common::{counter, load, wait_flag, watchdog, DropCounter};
use weft::par::prelude::*;
use weft::{Builder, Runtime};

/// Found in review (failed 6 of 6 runs before the fix): dropping the runtime from inside
/// the `b` half of a `weft::join` that another worker stole hung for ever.
///
/// Interleaving: a task on worker W1 calls `join(a, b)`; `a` runs long enough that the
/// idle worker W2 steals `b`. `b` takes the runtime out of a shared slot and drops it.
/// `Runtime::shutdown` on W2 sees that it runs on one of the runtime's own workers
/// (`others_left = 1`) and waits (no deadline, it is a drop) until every *other*
/// worker has left its loop. W1 cannot leave: `a` returned, and W1 is in
/// `finish_b` -> `Core::wait_for_thief`, waiting on `b`'s latch, which W2 sets only
/// when the drop returns. Each waits for the other. Dropping a runtime from inside one
/// of its own tasks is supported (`Runtime::shutdown` has a path for it), and rayon's
/// pools and weft's own non-join path return from it; a stolen join half (or scope
/// job, or parallel-iterator piece) is a task's code like any other.
///
/// Fixed (`Runtime::wait_for_workers`): dropped inside a fork-join job, the shutdown
/// does not wait for workers that are in a fork-join wait; each leaves its loop once
/// its wait and poll end.
#[test]
fn runtime_dropped_in_a_stolen_join_half_does_not_hang() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let b_started = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel::<(ThreadId, ThreadId)>();
        let b_thread = Arc::new(Mutex::new(None::<ThreadId>));
        let task_thread = Arc::new(Mutex::new(None::<ThreadId>));
        let drop_returned = Arc::new(AtomicBool::new(false));
        let task = {
            let slot = slot.clone();
            let b_started = b_started.clone();
            let (b_thread, task_thread, drop_returned) =
                (b_thread.clone(), task_thread.clone(), drop_returned.clone());
            handle.spawn(async move {
                *task_thread.lock().unwrap() = Some(std::thread::current().id());
                let (ta, tb) = weft::join(
                    || {
                        // Joins of its own (heartbeats that promote `b`) until the
                        // idle worker stole `b`.
                        let end = Instant::now() + Duration::from_secs(2);
                        while !b_started.load(SeqCst) && Instant::now() < end {
                            weft::join(|| common::spin_for(Duration::from_micros(50)), || ());
                        }
                        std::thread::current().id()
                    },
                    || {
                        *b_thread.lock().unwrap() = Some(std::thread::current().id());
                        b_started.store(true, SeqCst);
                        let rt = slot.lock().unwrap().take();
                        drop(rt);
                        drop_returned.store(true, SeqCst);
                        std::thread::current().id()
                    },
                );
                let _ = done_tx.send((ta, tb));
            })
        };
        let Ok((ta, tb)) = done_rx.recv_timeout(Duration::from_secs(5)) else {
            let stolen = *b_thread.lock().unwrap() != *task_thread.lock().unwrap();
            panic!(
                "hang: the join whose half dropped the runtime never returned (b stolen by \
                 another worker: {stolen}; the drop in b returned: {})",
                drop_returned.load(SeqCst)
            );
        };
        assert_ne!(ta, tb, "b was not stolen (the case did not happen)");
        // The task finished before the runtime's drop returned.
        drop(task);
    });
}

/// Found in review (failed 7 of 7 runs before the fix): the same hang through a
/// parallel iterator: a piece that another worker
/// stole drops the runtime, and the worker that owns the split waits for it (see
/// `runtime_dropped_in_a_stolen_join_half_does_not_hang`).
#[test]
fn runtime_dropped_in_a_par_iter_closure_does_not_hang() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let threads = Arc::new(Mutex::new(std::collections::HashSet::new()));
        let (done_tx, done_rx) = mpsc::channel::<usize>();
        let dropper = Arc::new(Mutex::new(None::<ThreadId>));
        let task_thread = Arc::new(Mutex::new(None::<ThreadId>));
        {
            let slot = slot.clone();
            let threads = threads.clone();
            let (dropper, task_thread) = (dropper.clone(), task_thread.clone());
            handle.spawn(async move {
                *task_thread.lock().unwrap() = Some(std::thread::current().id());
                let n = (0..64usize)
                    .into_par_iter()
                    .map(|i| {
                        threads.lock().unwrap().insert(std::thread::current().id());
                        std::thread::sleep(Duration::from_millis(2));
                        if i == 63 {
                            *dropper.lock().unwrap() = Some(std::thread::current().id());
                            drop(slot.lock().unwrap().take());
                        }
                        i
                    })
                    .count();
                let _ = done_tx.send(n);
            });
        }
        let Ok(n) = done_rx.recv_timeout(Duration::from_secs(5)) else {
            let stolen = *dropper.lock().unwrap() != *task_thread.lock().unwrap();
            panic!(
                "hang: a parallel iterator whose piece dropped the runtime never returned \
                 (the dropping piece ran on a thief: {stolen})"
            );
        };
        assert_eq!(n, 64);
    });
}

/// A runtime dropped from inside one of its own tasks (no fork-join involved) returns,
/// and the task's code after the drop goes on: the path the join case lacks.
#[test]
fn runtime_dropped_inside_its_own_task_returns() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let (tx, rx) = mpsc::channel();
        {
            let slot = slot.clone();
            handle.spawn(async move {
                drop(slot.lock().unwrap().take());
                let _ = tx.send(());
            });
        }
        rx.recv_timeout(Duration::from_secs(5))
            .expect("hang: drop of the runtime inside its own task");
        // Spawns through the old handle are cancelled now.
        assert!(handle.spawn(async { 1 }).join().unwrap_err().is_cancelled());
    });
}

/// A fiber that panics while a fiber-local holds a value whose `Drop` also panics:
/// the handle reports the fiber's panic, the worker survives, and later fibers run.
#[test]
fn fiber_panic_with_a_panicking_fiber_local_drop_is_reported() {
    struct Bomb(Arc<AtomicUsize>);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
            if !std::thread::panicking() {
                panic!("bomb in a fiber-local drop");
            }
        }
    }
    weft::fiber_local! {
        static BOMB: std::cell::RefCell<Option<Bomb>> = std::cell::RefCell::new(None);
    }
    watchdog(8, || {
        let rt = common::workers(1);
        let drops = counter();
        // 1. The fiber's body panics; the local drops afterwards (not unwinding).
        let d = drops.clone();
        let h = common::fiber_on(&rt, move || {
            BOMB.with(|b| *b.borrow_mut() = Some(Bomb(d)));
            panic!("the fiber's own panic");
        });
        let err = common::join_within(h, 5).unwrap_err();
        assert!(err.is_panic());
        assert_eq!(load(&drops), 1);
        // 2. The fiber returns normally; its local's drop panics at its end.
        let d = drops.clone();
        let h = common::fiber_on(&rt, move || {
            BOMB.with(|b| *b.borrow_mut() = Some(Bomb(d)));
            7
        });
        let r = common::join_within(h, 5);
        assert_eq!(load(&drops), 2);
        assert!(r.is_err() || r.unwrap() == 7);
        // The worker is still there.
        let h = common::fiber_on(&rt, || 5);
        assert_eq!(common::join_within(h, 5).unwrap(), 5);
        common::drop_within(rt, Duration::from_secs(5), "after panicking fiber-locals");
    });
}

/// A fiber aborted while it waits inside a `join` half (where it may not suspend, so
/// its worker dispatches in place): once the wait ends the fiber is cancelled at its
/// next suspension, the join's other half ran, its locals drop once, and the worker
/// goes on.
#[test]
fn fiber_aborted_while_waiting_inside_a_join() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let drops = counter();
        let b_ran = Arc::new(AtomicBool::new(false));
        let in_wait = Arc::new(AtomicBool::new(false));
        let after = Arc::new(AtomicBool::new(false));
        let (tx, rx) = futures_channel::oneshot::channel::<u32>();
        let h = {
            let (drops, b_ran, in_wait, after) =
                (drops.clone(), b_ran.clone(), in_wait.clone(), after.clone());
            common::fiber_on(&rt, move || {
                let _g = DropCounter(drops);
                let mut local = vec![1u32, 2, 3];
                let (x, ()) = weft::join(
                    || {
                        in_wait.store(true, SeqCst);
                        weft::wait(rx).unwrap()
                    },
                    || {
                        local.push(4);
                        b_ran.store(true, SeqCst);
                    },
                );
                // The next suspension point: the abort takes effect here.
                weft::fiber::yield_now();
                after.store(true, SeqCst);
                x + local.len() as u32
            })
        };
        assert!(wait_flag(&in_wait, Duration::from_secs(3)));
        std::thread::sleep(Duration::from_millis(20));
        h.abort();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(load(&drops), 0, "unwound while running inside a join");
        tx.send(10).unwrap();
        let r = common::join_within(h, 5);
        assert!(r.unwrap_err().is_cancelled());
        assert!(b_ran.load(SeqCst));
        assert!(
            !after.load(SeqCst),
            "ran past the suspension after the abort"
        );
        assert_eq!(load(&drops), 1);
        let h = common::fiber_on(&rt, || weft::join(|| 1, || 2));
        assert_eq!(common::join_within(h, 5).unwrap(), (1, 2));
        common::drop_within(rt, Duration::from_secs(5), "after the aborted fiber");
    });
}

/// A plain thread's `join` (injected into the pool) while another thread drops the
/// runtime: both halves run, the results come back, nothing hangs.
#[test]
fn plain_thread_join_while_the_runtime_drops() {
    watchdog(10, || {
        for round in 0..10u64 {
            let rt = common::runtime(2, 0);
            let handle = rt.handle().clone();
            let started = Arc::new(AtomicBool::new(false));
            let s = started.clone();
            let joiner = std::thread::spawn(move || {
                let _in = handle.enter();
                s.store(true, SeqCst);
                let mut results = Vec::new();
                for i in 0..20u64 {
                    let (a, b) = weft::join(
                        || {
                            common::spin_for(Duration::from_micros(200));
                            i
                        },
                        || i * 2,
                    );
                    results.push(a + b);
                }
                results
            });
            assert!(wait_flag(&started, Duration::from_secs(3)));
            std::thread::sleep(Duration::from_micros(300 * round));
            common::drop_within(rt, Duration::from_secs(5), "with a plain thread joining");
            let results = common::thread_within(joiner, 5);
            assert_eq!(results, (0..20u64).map(|i| i * 3).collect::<Vec<_>>());
        }
    });
}

/// The contrast to the join hang (holds): task T1 blocks in `JoinHandle::join` on
/// task T2, which drops the runtime. T1's blocking wait is set aside on a loop stack
/// (or T2 runs on T1's worker), so T1's worker does not keep the drop waiting and T1
/// learns T2's result.
#[test]
fn runtime_dropped_in_a_task_another_task_blocks_on() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let (tx, rx) = mpsc::channel();
        let drop_returned = Arc::new(AtomicBool::new(false));
        {
            let slot = slot.clone();
            let drop_returned = drop_returned.clone();
            let h2 = handle.clone();
            handle.spawn(async move {
                let t2 = h2.spawn(async move {
                    drop(slot.lock().unwrap().take());
                    drop_returned.store(true, SeqCst);
                });
                let r = t2.join();
                let _ = tx.send(r.is_ok());
            });
        }
        let r = rx.recv_timeout(Duration::from_secs(5));
        assert!(
            r.is_ok(),
            "hang: the drop in T2 returned: {}",
            drop_returned.load(SeqCst)
        );
    });
}

/// A `Handle` used after its runtime is gone: spawns and blocking spawns report
/// cancellation at once, `block_on` still runs its future on the caller, fibers cannot
/// be spawned (an error, not a panic), and fork-join entered through the dead handle
/// runs on the caller.
#[test]
fn handle_after_the_runtime_is_gone() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        drop(rt);
        assert!(handle.spawn(async { 1 }).join().unwrap_err().is_cancelled());
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let b = handle.spawn_blocking(move || r.store(true, SeqCst));
        assert!(b.join().unwrap_err().is_cancelled());
        assert!(!ran.load(SeqCst));
        assert_eq!(handle.block_on(async { 5 }), 5);
        let _in = handle.enter();
        let err = weft::fiber::try_spawn(|| ()).unwrap_err();
        assert!(matches!(
            err.kind(),
            weft::fiber::SpawnErrorKind::Shutdown | weft::fiber::SpawnErrorKind::NoRuntime
        ));
        let me = std::thread::current().id();
        let (a, b) = weft::join(
            || std::thread::current().id(),
            || std::thread::current().id(),
        );
        assert_eq!((a, b), (me, me));
        let total: u64 = (0..1000u64).into_par_iter().sum();
        assert_eq!(total, 499_500);
        let mut v = 0;
        weft::scope(|s| s.spawn(|_| v += 1));
        assert_eq!(v, 1);
    });
}

/// `shutdown_graceful` called from inside one of the runtime's own tasks returns
/// within its documented bound (the caller counts as live: the whole timeout).
#[test]
fn shutdown_graceful_from_its_own_task_returns_in_time() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let (tx, rx) = mpsc::channel();
        {
            let slot = slot.clone();
            handle.spawn(async move {
                let rt = slot.lock().unwrap().take().unwrap();
                let t = Instant::now();
                let report = rt.shutdown_graceful(Duration::from_millis(200));
                let _ = tx.send((t.elapsed(), report.cancelled));
            });
        }
        let (took, _) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("hang: shutdown_graceful inside its own task");
        assert!(
            took < Duration::from_millis(200 * 2 + 200 + 500),
            "{took:?}"
        );
    });
}

/// A parallel iterator inside a fiber on a one-worker runtime whose items block on
/// tasks and fibers they spawn: the fiber cannot suspend inside the iterator, so the
/// worker dispatches in place; every item completes.
#[test]
fn par_iter_in_a_fiber_blocking_on_spawned_work_one_worker() {
    watchdog(8, || {
        let rt = Builder::new()
            .worker_threads(1)
            .interactive_threads(0)
            .max_extra_workers(0)
            .build()
            .unwrap();
        let h = common::fiber_on(&rt, || {
            (0..64u64)
                .into_par_iter()
                .map(|i| {
                    let t = weft::spawn(async move { i * 2 }).join().unwrap();
                    let f = weft::fiber::spawn(move || {
                        weft::fiber::sleep(Duration::from_micros(100));
                        i
                    })
                    .join()
                    .unwrap();
                    t + f
                })
                .sum::<u64>()
        });
        assert_eq!(common::join_within(h, 6).unwrap(), 3 * (63 * 64 / 2));
        common::drop_within(rt, Duration::from_secs(5), "par iter in a fiber");
    });
}

/// A panic at a random leaf of fiber -> scope -> join -> parallel iterator reaches the
/// fiber's handle with its own message, every owned item is dropped exactly once, and
/// the runtime stays usable.
#[test]
fn panic_at_a_random_leaf_of_nested_fork_join_in_a_fiber() {
    let (mut rng, seed) = common::Rng::seeded("WEFT_S41_SEED");
    watchdog(15, move || {
        let rt = Builder::new()
            .worker_threads(3)
            .interactive_threads(0)
            .build()
            .unwrap();
        for round in 0..12 {
            let live = common::live();
            let at = rng.below(400) as usize;
            let l = live.clone();
            let h = common::fiber_on(&rt, move || {
                let items: Vec<common::Tracked> =
                    (0..400).map(|i| common::Tracked::new(i, &l)).collect();
                let total = AtomicUsize::new(0);
                weft::scope(|s| {
                    s.spawn(|_| {
                        let (x, y) = weft::join(
                            || {
                                items
                                    .into_par_iter()
                                    .map(|t| {
                                        if t.id == at {
                                            panic!("leaf {at}");
                                        }
                                        t.id
                                    })
                                    .sum::<usize>()
                            },
                            || (0..100usize).into_par_iter().sum::<usize>(),
                        );
                        total.fetch_add(x + y, SeqCst);
                    });
                });
                total.into_inner()
            });
            let err = common::join_within(h, 5).unwrap_err();
            assert!(err.is_panic(), "seed {seed} round {round}");
            let msg = common::panic_message(&*err.into_panic());
            assert_eq!(msg.as_deref(), Some(&*format!("leaf {at}")), "seed {seed}");
            assert_eq!(load(&live), 0, "seed {seed} round {round}: items leaked");
        }
        let h = common::fiber_on(&rt, || (0..10u32).into_par_iter().sum::<u32>());
        assert_eq!(common::join_within(h, 5).unwrap(), 45);
        common::drop_within(rt, Duration::from_secs(5), "after nested panics");
    });
}

/// Dropping the runtime from a plain thread while fibers are deep in fork-join work
/// (joins, scopes, parallel iterators that keep spawning and waiting): the drop
/// returns, every fiber's handle ends (finished or cancelled) and their locals drop
/// once.
#[test]
fn runtime_dropped_while_fibers_are_in_fork_join() {
    watchdog(15, || {
        for _ in 0..5 {
            let rt = Builder::new()
                .worker_threads(3)
                .interactive_threads(0)
                .build()
                .unwrap();
            let drops = counter();
            let stop = Arc::new(AtomicBool::new(false));
            let handles: Vec<_> = (0..6)
                .map(|k| {
                    let (drops, stop) = (drops.clone(), stop.clone());
                    common::fiber_on(&rt, move || {
                        let _g = DropCounter(drops);
                        let mut n = 0u64;
                        while !stop.load(SeqCst) {
                            n += match k % 3 {
                                0 => common::fib(12),
                                1 => (0..2000u64).into_par_iter().map(|x| x % 7).sum::<u64>(),
                                _ => {
                                    let c = AtomicUsize::new(0);
                                    weft::scope(|s| {
                                        for _ in 0..8 {
                                            s.spawn(|_| {
                                                c.fetch_add(1, SeqCst);
                                            });
                                        }
                                    });
                                    c.into_inner() as u64
                                }
                            };
                            weft::fiber::yield_now();
                        }
                        n
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(30));
            // Let the fibers see the flag on their own too: whichever comes first.
            let s = stop.clone();
            let stopper = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(3));
                s.store(true, SeqCst);
            });
            common::drop_within(rt, Duration::from_secs(5), "fibers in fork-join");
            stopper.join().unwrap();
            for h in handles {
                let _ = common::join_within(h, 5);
            }
            assert_eq!(load(&drops), 6);
        }
    });
}

/// `weft::wait` inside a fiber on a future that panics: the fiber's handle reports
/// that panic (its message intact), the fiber's locals drop once, and the worker goes
/// on; the same inside a `join` half, where the fiber may not suspend.
#[test]
fn fiber_wait_on_a_panicking_future() {
    watchdog(8, || {
        let rt = common::workers(1);
        let drops = counter();
        for in_join in [false, true] {
            let d = drops.clone();
            let h = common::fiber_on(&rt, move || {
                let _g = DropCounter(d);
                let fut = async {
                    weft::time::sleep(Duration::from_millis(2)).await;
                    panic!("the awaited future panicked");
                };
                if in_join {
                    weft::join(|| weft::wait(fut), || ());
                } else {
                    weft::wait(fut);
                }
            });
            let err = common::join_within(h, 5).unwrap_err();
            let msg = common::panic_message(&*err.into_panic());
            assert_eq!(msg.as_deref(), Some("the awaited future panicked"));
        }
        assert_eq!(load(&drops), 2);
        let h = common::fiber_on(&rt, || 3);
        assert_eq!(common::join_within(h, 5).unwrap(), 3);
    });
}

/// Runtimes nested through fork-join: a join half on runtime A blocks on runtime B
/// (`block_on`), runs a parallel iterator there and spawns onto B; results are right
/// and the spawns went to B.
#[test]
fn join_half_blocking_on_another_runtime() {
    watchdog(8, || {
        let a = common::named_runtime("s41-a", 2);
        let b = Arc::new(common::named_runtime("s41-b", 2));
        let b2 = b.clone();
        let h = a.spawn(async move {
            weft::join(
                || (0..1000u64).into_par_iter().sum::<u64>(),
                || {
                    b2.block_on(async {
                        let s = (0..1000u64).into_par_iter().map(|x| x * 2).sum::<u64>();
                        let name = weft::spawn(async { common::thread_name() }).await.unwrap();
                        (s, name)
                    })
                },
            )
        });
        let (x, (y, name)) = common::join_within(h, 5).unwrap();
        assert_eq!((x, y), (499_500, 999_000));
        assert!(name.starts_with("s41-b"), "{name}");
        drop(a);
        let Ok(b) = Arc::try_unwrap(b) else {
            panic!("the task kept runtime B");
        };
        common::drop_within(b, Duration::from_secs(5), "runtime B");
    });
}

/// The same through a `scope`: a job that another worker stole drops the runtime while
/// the scope's owner waits on the scope's latch for it (a hang before the fix).
#[test]
fn runtime_dropped_in_a_stolen_scope_job_does_not_hang() {
    watchdog(8, || {
        let rt = common::runtime(2, 0);
        let handle = rt.handle().clone();
        let slot: Arc<Mutex<Option<Runtime>>> = Arc::new(Mutex::new(Some(rt)));
        let started = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel::<(ThreadId, ThreadId)>();
        handle.spawn(async move {
            let owner = std::thread::current().id();
            let dropper = Mutex::new(None);
            weft::scope(|sc| {
                sc.spawn(|_| {
                    *dropper.lock().unwrap() = Some(std::thread::current().id());
                    started.store(true, SeqCst);
                    drop(slot.lock().unwrap().take());
                });
                // Busy until the idle worker took the job.
                let end = Instant::now() + Duration::from_secs(2);
                while !started.load(SeqCst) && Instant::now() < end {
                    weft::join(|| common::spin_for(Duration::from_micros(50)), || ());
                }
            });
            let d = dropper.lock().unwrap().take().unwrap();
            let _ = done_tx.send((owner, d));
        });
        let (owner, dropper) = done_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("hang: the scope whose job dropped the runtime never returned");
        assert_ne!(
            owner, dropper,
            "the job ran on its owner's thread (case not made)"
        );
    });
}
