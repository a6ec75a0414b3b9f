//! Review session 42 of weft's locks, semaphores and nurseries (`sync::Mutex`,
//! `RwLock`, `Semaphore`, `Notify`, `Barrier`, `WaitGroup`, the wait list under them,
//! and `weft::nursery`), attacked from safe code only: permits conserved through
//! `close`, `forget` and cancellation in every context; exclusion with random
//! timeouts and fiber aborts; guards held by aborted fibers; lock-taking drops at
//! shutdown; arrival order and write preference across contexts; `WaitGroup` reuse;
//! `Notify`'s single stored permit; nurseries whose owner is aborted, whose child drops
//! the runtime, nested under a deadline, and whose unused failures panic when dropped;
//! wakers that panic when a guard dropped in an unwind wakes them. Every test runs
//! under a watchdog; the four ignored ones are defects (see each doc comment).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, workers, Rng};
use weft::sync::{Mutex, Notify, RwLock, Semaphore};
use weft::Nursery;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An error (or panic payload) whose `Drop` panics when `loud`, unless the thread is
/// already unwinding.
#[derive(Debug)]
struct Loud {
    id: u32,
    loud: bool,
}

impl Drop for Loud {
    fn drop(&mut self) {
        if self.loud && !std::thread::panicking() {
            panic!("Loud({}) dropped", self.id);
        }
    }
}

// ------------------------------------------------------------------ nurseries

/// A child's `Err` that comes after the nursery failed is not kept: the nursery drops
/// it. If that value's `Drop` panics, the owner must still hear that its last child
/// ended.
///
/// Interleaving: child B enters a shield and lets child A go; A fails first
/// (`Err(Loud(1))`, kept, cancels B, whose cancellation the shield defers); B then
/// returns `Err(Loud(2, loud))`, the last child to end: `child_ended` records it as
/// unused and drops it before it wakes the owner.
///
/// What happened (3 runs of 3): "Loud(2) dropped" panics out of `child_ended`
/// (`nursery/state.rs:186`, `drop(unused)`) before `done.run()` (line 187) wakes the
/// owner; the owner's waker was already taken off the state, so `block_on` never
/// returns (hang). Expected: the nursery returns `Err(Loud(1))` (the panic of the
/// unused value caught, or at least the owner woken first).
#[test]
fn an_unused_child_error_whose_drop_panics_still_ends_the_nursery() {
    common::watchdog(3, || {
        let rt = workers(2);
        let r = rt.block_on(weft::nursery(|n: Nursery<'static, Loud>| async move {
            let go = Arc::new(Notify::new());
            let g = go.clone();
            n.spawn(async move {
                g.notified().await;
                Err(Loud { id: 1, loud: false })
            });
            n.spawn(async move {
                weft::task::shield(async move {
                    go.notify_one();
                    weft::time::sleep(ms(100)).await;
                })
                .await;
                Err(Loud { id: 2, loud: true })
            });
            Ok(())
        }));
        match r {
            Err(Loud { id: 1, .. }) => {}
            other => panic!("expected child 1's error, got {other:?}"),
        }
    });
}

/// As above with a second panic whose payload's `Drop` panics, and a fiber child:
/// the same hang (3 runs of 3), the payload dropped at `nursery/state.rs:186`.
#[test]
fn an_unused_child_panic_whose_payload_drop_panics_still_ends_the_nursery() {
    common::watchdog(3, || {
        let rt = workers(2);
        let r = rt.block_on(weft::nursery(|n: Nursery<'static, ()>| async move {
            let go = Arc::new(Notify::new());
            let g = go.clone();
            n.spawn(async move {
                g.notified().await;
                Err(())
            });
            n.spawn_fiber(move || {
                weft::wait(weft::task::shield(async move {
                    go.notify_one();
                    weft::time::sleep(ms(100)).await;
                }));
                std::panic::panic_any(Loud { id: 3, loud: true })
            });
            Ok(())
        }));
        assert_eq!(r, Err(()));
    });
}

/// A child fiber takes the runtime its nursery runs on and drops it: the other
/// children are cancelled by the shutdown, and the owner (a plain thread, the runtime
/// entered) returns.
#[test]
fn a_child_that_drops_the_runtime_ends_the_blocking_nursery() {
    common::watchdog(10, || {
        let rt = workers(2);
        let h = rt.handle().clone();
        let slot = Arc::new(std::sync::Mutex::new(Some(rt)));
        let _g = h.enter();
        let ended = Arc::new(AtomicUsize::new(0));
        let (e1, e2) = (ended.clone(), ended.clone());
        let r = weft::nursery_blocking(|n| {
            n.spawn(async move {
                let _d = common::DropCounter(e1);
                std::future::pending::<()>().await;
                Ok(())
            });
            n.spawn_fiber(move || {
                let _d = common::DropCounter(e2);
                weft::fiber::sleep(Duration::from_secs(60));
                Ok(())
            });
            let s = slot.clone();
            n.spawn_fiber(move || {
                weft::fiber::sleep(ms(20));
                let rt = s.lock().unwrap().take();
                drop(rt);
                Ok(())
            });
            Ok::<_, ()>(7)
        });
        assert_eq!(r, Ok(7));
        assert_eq!(ended.load(SeqCst), 2);
    });
}

// ------------------------------------------------------------------ semaphores

/// Permits are conserved through random `acquire_many` (some larger than the total),
/// timeouts dropping waiters, `forget`, `forget_permits`, `add_permits` and a `close`
/// racing all of it, from tasks, fibers and threads: at the end the count is the
/// initial one plus what was added minus what was forgotten, and every waiter ended.
#[test]
fn permits_are_conserved_through_close_forget_and_cancellation() {
    common::watchdog(20, || {
        let (mut rng, seed) = Rng::seeded("WEFT_S42_SEED");
        eprintln!("seed {seed}");
        for round in 0..6 {
            let rt = workers(2);
            const TOTAL: usize = 8;
            let sem = Arc::new(Semaphore::new(TOTAL));
            let added = Arc::new(AtomicUsize::new(0));
            let forgotten = Arc::new(AtomicUsize::new(0));
            let held = Arc::new(AtomicUsize::new(0));
            let mut tasks = Vec::new();
            let mut threads = Vec::new();
            for i in 0..24u64 {
                let (sem, forgotten, held) = (sem.clone(), forgotten.clone(), held.clone());
                let want = 1 + (rng.below(12) as u32); // up to 12 > TOTAL sometimes
                let forget = rng.below(5) == 0;
                let timeout = ms(rng.below(3));
                let hold = Duration::from_micros(rng.below(300));
                let body = move |p: weft::sync::SemaphorePermit<'_>| {
                    let now = held.fetch_add(p.num_permits(), SeqCst) + p.num_permits();
                    assert!(now <= 12 * 24, "held overflow");
                    std::thread::sleep(hold);
                    held.fetch_sub(p.num_permits(), SeqCst);
                    if forget {
                        forgotten.fetch_add(p.num_permits(), SeqCst);
                        p.forget();
                    }
                };
                match i % 3 {
                    0 => tasks.push(rt.spawn(async move {
                        for _ in 0..20 {
                            match weft::time::timeout(timeout, sem.acquire_many(want)).await {
                                Ok(Ok(p)) => body(p),
                                Ok(Err(_)) => return,
                                Err(_) => {}
                            }
                        }
                    })),
                    1 => tasks.push(fiber_on(&rt, move || {
                        for _ in 0..20 {
                            match sem.acquire_many_blocking(want) {
                                Ok(p) => body(p),
                                Err(_) => return,
                            }
                        }
                    })),
                    _ => {
                        let h = rt.handle().clone();
                        threads.push(std::thread::spawn(move || {
                            let _in = h.enter();
                            for _ in 0..20 {
                                let r = weft::wait(weft::time::timeout(
                                    timeout,
                                    sem.acquire_many(want),
                                ));
                                match r {
                                    Ok(Ok(p)) => body(p),
                                    Ok(Err(_)) => return,
                                    Err(_) => {}
                                }
                            }
                        }))
                    }
                }
            }
            // The adder / forgetter / closer.
            for _ in 0..30 {
                std::thread::sleep(Duration::from_micros(rng.below(400)));
                match rng.below(3) {
                    0 => {
                        let k = rng.below(4) as usize;
                        sem.add_permits(k);
                        added.fetch_add(k, SeqCst);
                    }
                    1 => {
                        let k = sem.forget_permits(rng.below(3) as usize);
                        forgotten.fetch_add(k, SeqCst);
                    }
                    _ => {}
                }
            }
            if round % 2 == 1 {
                // Some more, then close while many acquire.
                sem.add_permits(16);
                added.fetch_add(16, SeqCst);
                std::thread::sleep(ms(2));
            }
            sem.close();
            for t in tasks {
                join_within(t, 10).unwrap();
            }
            for t in threads {
                common::thread_within(t, 10);
            }
            assert_eq!(held.load(SeqCst), 0);
            assert_eq!(
                sem.available_permits(),
                TOTAL + added.load(SeqCst) - forgotten.load(SeqCst),
                "round {round}, seed {seed}"
            );
            drop(rt);
        }
    });
}

// ------------------------------------------------------------------ locks

/// A fiber holding a `MutexGuard` (and a write guard) while suspended on something
/// else is aborted: the unwind releases both, and the waiters of every context get
/// them in turn.
#[test]
fn guards_held_by_an_aborted_fiber_are_released_to_every_waiter() {
    common::watchdog(10, || {
        let rt = workers(2);
        let m = Arc::new(Mutex::new(0u32));
        let rw = Arc::new(RwLock::new(0u32));
        let never = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel();
        let (m2, rw2, n2) = (m.clone(), rw.clone(), never.clone());
        let holder = fiber_on(&rt, move || {
            let _g = m2.lock_blocking();
            let _w = rw2.write_blocking();
            tx.send(()).unwrap();
            n2.notified_blocking();
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        // Waiters of every context, queued behind the fiber.
        let (m3, rw3) = (m.clone(), rw.clone());
        let task = rt.spawn(async move {
            *m3.lock().await += 1;
            *rw3.write().await += 1;
        });
        let (m4, rw4) = (m.clone(), rw.clone());
        let fib = fiber_on(&rt, move || {
            *m4.lock_blocking() += 1;
            *rw4.write_blocking() += 1;
        });
        let (m5, rw5) = (m.clone(), rw.clone());
        let th = std::thread::spawn(move || {
            *m5.lock_blocking() += 1;
            drop(rw5.read_blocking());
        });
        std::thread::sleep(ms(20));
        holder.abort();
        assert!(join_within(holder, 5).unwrap_err().is_cancelled());
        join_within(task, 5).unwrap();
        join_within(fib, 5).unwrap();
        common::thread_within(th, 5);
        assert_eq!(*m.try_lock().unwrap(), 3);
        assert_eq!(*rw.try_write().unwrap(), 2);
    });
}

/// Exclusive access holds on one mutex and one rwlock used at once from tasks (with
/// timeouts dropping their lock futures), fibers (some aborted at random) and plain
/// threads; nothing hangs and the lock ends free.
#[test]
fn exclusion_with_tasks_fibers_threads_and_random_cancellation() {
    common::watchdog(20, || {
        let (mut rng, seed) = Rng::seeded("WEFT_S42_SEED");
        eprintln!("seed {seed}");
        let rt = workers(2);
        let m = Arc::new(Mutex::new(()));
        let rw = Arc::new(RwLock::new(()));
        let inside = Arc::new(AtomicUsize::new(0));
        let writers = Arc::new(AtomicUsize::new(0));
        let readers = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let enter = |inside: &AtomicUsize| {
            assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders of the mutex");
        };
        let mut handles = Vec::new();
        for i in 0..12u64 {
            let (m, rw, inside, writers, readers, stop) = (
                m.clone(),
                rw.clone(),
                inside.clone(),
                writers.clone(),
                readers.clone(),
                stop.clone(),
            );
            let seed = rng.next();
            if i % 2 == 0 {
                handles.push(rt.spawn(async move {
                    let mut rng = Rng(seed | 1);
                    while !stop.load(SeqCst) {
                        let t = ms(rng.below(2));
                        if let Ok(g) = weft::time::timeout(t, m.lock()).await {
                            enter(&inside);
                            weft::task::yield_now().await;
                            inside.fetch_sub(1, SeqCst);
                            drop(g);
                        }
                        if rng.below(2) == 0 {
                            if let Ok(g) = weft::time::timeout(t, rw.write()).await {
                                assert_eq!(writers.fetch_add(1, SeqCst), 0);
                                assert_eq!(readers.load(SeqCst), 0);
                                weft::task::yield_now().await;
                                writers.fetch_sub(1, SeqCst);
                                drop(g);
                            }
                        } else if let Ok(g) = weft::time::timeout(t, rw.read()).await {
                            readers.fetch_add(1, SeqCst);
                            assert_eq!(writers.load(SeqCst), 0);
                            weft::task::yield_now().await;
                            readers.fetch_sub(1, SeqCst);
                            drop(g);
                        }
                    }
                }));
            } else {
                handles.push(fiber_on(&rt, move || {
                    // These fibers are aborted at their yields: each count goes down
                    // as the unwind leaves it (before the lock's guard, declared
                    // earlier, drops). Counted down after the yield, an aborted
                    // holder's count stayed up with its lock released (CI, debug).
                    let mut rng = Rng(seed | 1);
                    while !stop.load(SeqCst) {
                        let g = m.lock_blocking();
                        enter(&inside);
                        let held = Held(&inside);
                        if rng.below(3) == 0 {
                            weft::fiber::yield_now();
                        }
                        drop(held);
                        drop(g);
                        if rng.below(2) == 0 {
                            let g = rw.write_blocking();
                            assert_eq!(writers.fetch_add(1, SeqCst), 0);
                            let held = Held(&writers);
                            assert_eq!(readers.load(SeqCst), 0);
                            weft::fiber::yield_now();
                            drop(held);
                            drop(g);
                        } else {
                            let g = rw.read_blocking();
                            readers.fetch_add(1, SeqCst);
                            let held = Held(&readers);
                            assert_eq!(writers.load(SeqCst), 0);
                            weft::fiber::yield_now();
                            drop(held);
                            drop(g);
                        }
                    }
                }));
            }
        }
        let mut threads = Vec::new();
        for _ in 0..2 {
            let (m, rw, inside, stop) = (m.clone(), rw.clone(), inside.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    let g = m.lock_blocking();
                    enter(&inside);
                    inside.fetch_sub(1, SeqCst);
                    drop(g);
                    drop(rw.read_blocking());
                }
            }));
        }
        // Abort some fibers at random moments (locals unwound: held guards released).
        let deadline = Instant::now() + ms(800);
        let mut aborted = 0;
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(rng.below(20_000)));
            let k = rng.below(handles.len() as u64) as usize;
            if k % 2 == 1 && aborted < 4 {
                handles[k].abort();
                aborted += 1;
            }
        }
        assert!(aborted > 0, "no fiber was aborted: the case was not made");
        stop.store(true, SeqCst);
        for h in handles {
            match join_within(h, 10) {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "{e}"),
            }
        }
        for t in threads {
            common::thread_within(t, 10);
        }
        assert!(m.try_lock().is_ok(), "the mutex ended held");
        assert!(rw.try_write().is_ok(), "the rwlock ended held");
    });
}

/// A task whose future's `Drop` takes a mutex held by a suspended fiber of the same
/// runtime (one worker), and the runtime dropped from a plain thread: the fiber is
/// unwound (its guard released) and the task's drop gets the lock; the drop returns.
#[test]
fn a_cancelled_tasks_drop_locking_a_fiber_held_mutex_at_shutdown() {
    struct LockOnDrop(Arc<Mutex<u32>>, Arc<AtomicUsize>);
    impl Drop for LockOnDrop {
        fn drop(&mut self) {
            *self.0.lock_blocking() += 1;
            self.1.fetch_add(1, SeqCst);
        }
    }
    common::watchdog(10, || {
        for workers_n in [1, 2] {
            let rt = workers(workers_n);
            let m = Arc::new(Mutex::new(0u32));
            let never = Arc::new(Notify::new());
            let (tx, rx) = mpsc::channel();
            let (m2, n2) = (m.clone(), never.clone());
            let _holder = fiber_on(&rt, move || {
                let _g = m2.lock_blocking();
                tx.send(()).unwrap();
                n2.notified_blocking();
            });
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let dropped = Arc::new(AtomicUsize::new(0));
            for _ in 0..3 {
                let guard = LockOnDrop(m.clone(), dropped.clone());
                let n3 = never.clone();
                rt.spawn(async move {
                    let _guard = guard;
                    n3.notified().await;
                });
            }
            std::thread::sleep(ms(20));
            drop(rt);
            assert_eq!(dropped.load(SeqCst), 3);
            assert_eq!(*m.try_lock().unwrap(), 3);
        }
    });
}

/// A blocking nursery in a fiber whose children borrow the fiber's frame; the fiber
/// is aborted while it waits for them: the children are cancelled, and the fiber
/// unwinds only after the last child's drop has ended (it borrows the frame).
#[test]
fn an_aborted_owner_fiber_outlives_its_childrens_drops() {
    struct SlowDrop<'a>(&'a AtomicUsize, Arc<AtomicUsize>);
    impl Drop for SlowDrop<'_> {
        fn drop(&mut self) {
            std::thread::sleep(ms(30));
            self.0.fetch_add(1, SeqCst);
            self.1.fetch_add(1, SeqCst);
        }
    }
    struct Check<'a>(&'a AtomicUsize, Arc<AtomicBool>);
    impl Drop for Check<'_> {
        fn drop(&mut self) {
            // Runs as the owner frame unwinds: every child must have dropped.
            if self.0.load(SeqCst) != 4 {
                self.1.store(true, SeqCst);
            }
        }
    }
    common::watchdog(10, || {
        let rt = workers(2);
        let outside = Arc::new(AtomicUsize::new(0));
        let bad = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let (o, b) = (outside.clone(), bad.clone());
        let owner = fiber_on(&rt, move || {
            let local = AtomicUsize::new(0);
            let _check = Check(&local, b);
            let r = weft::nursery_blocking(|n| {
                for i in 0..4 {
                    let (l, o) = (&local, o.clone());
                    if i % 2 == 0 {
                        n.spawn(async move {
                            let _d = SlowDrop(l, o);
                            std::future::pending::<()>().await;
                            Ok(())
                        });
                    } else {
                        n.spawn_fiber(move || {
                            let _d = SlowDrop(l, o);
                            weft::fiber::sleep(Duration::from_secs(60));
                            Ok(())
                        });
                    }
                }
                tx.send(()).unwrap();
                Ok::<_, ()>(())
            });
            r.unwrap();
            unreachable!("the owner was aborted");
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(ms(20));
        owner.abort();
        let e = join_within(owner, 5).unwrap_err();
        assert!(e.is_cancelled(), "{e}");
        assert_eq!(outside.load(SeqCst), 4);
        assert!(
            !bad.load(SeqCst),
            "the owner frame unwound before its children dropped"
        );
    });
}

/// A blocking nursery in an async task (a wait nested in the task's poll) whose task
/// is aborted: the children are cancelled and the task ends cancelled.
#[test]
fn an_aborted_owner_task_ends_its_blocking_nursery() {
    common::watchdog(10, || {
        let rt = workers(2);
        let dropped = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel();
        let d = dropped.clone();
        let owner = rt.spawn(async move {
            let r = weft::nursery_blocking(|n| {
                for _ in 0..3 {
                    let d = d.clone();
                    n.spawn(async move {
                        let _d = common::DropCounter(d);
                        std::future::pending::<()>().await;
                        Ok(())
                    });
                }
                let d = d.clone();
                n.spawn_fiber(move || {
                    let _d = common::DropCounter(d);
                    weft::fiber::sleep(Duration::from_secs(60));
                    Ok(())
                });
                tx.send(()).unwrap();
                Ok::<_, ()>(())
            });
            r.unwrap();
            weft::task::yield_now().await;
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        std::thread::sleep(ms(20));
        owner.abort();
        let t = Instant::now();
        let r = join_within(owner, 5);
        assert!(t.elapsed() < Duration::from_secs(2));
        assert_eq!(dropped.load(SeqCst), 4);
        // Either cancelled, or (the abort seen only after the wait) cancelled at the
        // yield: never a success.
        assert!(r.unwrap_err().is_cancelled());
    });
}

/// Nested async nurseries under an outer deadline: the inner nursery's children wait
/// for ever; the deadline cancels the outer child, which drops the inner nursery
/// unfinished; the outer one returns `Elapsed` only once the inner children dropped.
#[test]
fn a_deadline_over_nested_nurseries_waits_for_the_grandchildren() {
    struct SlowDrop(Arc<AtomicUsize>);
    impl Drop for SlowDrop {
        fn drop(&mut self) {
            std::thread::sleep(ms(20));
            self.0.fetch_add(1, SeqCst);
        }
    }
    common::watchdog(10, || {
        let rt = workers(2);
        let dropped = Arc::new(AtomicUsize::new(0));
        let d = dropped.clone();
        let opts = Nursery::with_timeout(ms(30));
        let r = rt.block_on(opts.run(move |n: Nursery<'static, ()>| async move {
            let d2 = d.clone();
            n.spawn(async move {
                weft::nursery(move |inner: Nursery<'static, ()>| async move {
                    for _ in 0..3 {
                        let d = d2.clone();
                        inner.spawn(async move {
                            let _s = SlowDrop(d);
                            std::future::pending::<()>().await;
                            Ok(())
                        });
                    }
                    let d = d2.clone();
                    inner.spawn_fiber(move || {
                        let _s = SlowDrop(d);
                        weft::fiber::sleep(Duration::from_secs(60));
                        Ok(())
                    });
                    std::future::pending::<Result<(), ()>>().await
                })
                .await
            });
            n.spawn_fiber(move || {
                let _s = SlowDrop(d);
                weft::fiber::sleep(Duration::from_secs(60));
                Ok(())
            });
            Ok(())
        }));
        assert!(r.is_err(), "not Elapsed: {r:?}");
        assert_eq!(
            dropped.load(SeqCst),
            5,
            "returned before the grandchildren ended"
        );
    });
}

// ------------------------------------------------------------ wakers that panic

const CHILD: &str = "WEFT_S42_LOCKS_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "guard_unwind" => child_guard_unwind(),
        "fiber_abort" => child_fiber_abort(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

/// A waker that panics when woken.
struct PanicWake;

impl std::task::Wake for PanicWake {
    fn wake(self: Arc<Self>) {
        panic!("PanicWake woken");
    }
}

/// A plain thread holds a mutex; a `lock()` future polled by hand with a waker that
/// panics waits in line; the holder panics, and its guard, dropped by that unwind,
/// hands the lock on and wakes the waiter.
fn child_guard_unwind() {
    use std::future::Future;
    let m = Mutex::new(0u32);
    let g = m.try_lock().unwrap();
    let waker = std::task::Waker::from(Arc::new(PanicWake));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = Box::pin(m.lock());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _g = g;
        panic!("the holder's own panic");
    }));
    assert!(r.is_err());
    println!("CHILD survived=yes");
    // The lock went to the waiter.
    assert!(fut.as_mut().poll(&mut cx).is_ready());
}

/// A fiber holding a mutex is aborted while suspended; the waiter in line is a
/// hand-polled `lock()` future whose waker panics.
fn child_fiber_abort() {
    use std::future::Future;
    let rt = workers(1);
    let m = Arc::new(Mutex::new(0u32));
    let never = Arc::new(Notify::new());
    let (tx, rx) = mpsc::channel();
    let (m2, n2) = (m.clone(), never.clone());
    let holder = fiber_on(&rt, move || {
        let _g = m2.lock_blocking();
        tx.send(()).unwrap();
        n2.notified_blocking();
    });
    rx.recv_timeout(Duration::from_secs(5)).unwrap();
    let waker = std::task::Waker::from(Arc::new(PanicWake));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = Box::pin(m.lock());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    holder.abort();
    let r = join_within(holder, 5);
    println!("CHILD survived=yes");
    assert!(r.is_err());
    assert!(fut.as_mut().poll(&mut cx).is_ready());
}

/// A guard dropped by a panic's unwind hands the lock to a waiter whose waker panics:
/// `MutexGuard::drop` -> `Sem::release` -> the `WakeBatch`'s drop -> `flush_some`
/// (`waitlist/mod.rs:729` catches the waker's panic, `:749` resumes it once every
/// waker ran), here inside a `Drop` that runs during an unwind: "panic in a destructor
/// during cleanup", SIGABRT (3 runs of 3). Expected: the holder's own panic goes on
/// (its `catch_unwind` gets it) and the waiter holds the lock; a waker's panic met
/// while the thread already unwinds should be dropped (as `drop_payload` does), not
/// resumed. (tokio's `wake_all` in a guard's drop would abort the same way; weft's
/// wake batch is the place that chose to catch and resume.)
#[test]
fn a_panicking_waker_woken_by_a_guard_dropped_in_an_unwind() {
    common::watchdog(15, || {
        let out = common::child::run_case(CHILD, "guard_unwind", common::child::LIMIT);
        out.assert_finished();
    });
}

/// As above, the holder a fiber whose abort unwinds its stack (`JoinHandle::abort`):
/// the same abort, on the worker (3 runs of 3).
#[test]
fn a_panicking_waker_woken_by_a_guard_of_an_aborted_fiber() {
    common::watchdog(15, || {
        let out = common::child::run_case(CHILD, "fiber_abort", common::child::LIMIT);
        out.assert_finished();
    });
}

/// A fiber child drops the runtime of its async nursery (owned by a plain thread that
/// entered it), then spawns a task child and a fiber child through the `Nursery` the
/// body left behind: both are cancelled at once (nothing runs them), and the owner
/// returns the body's value.
#[test]
fn children_spawned_after_the_runtime_dropped_do_not_hold_the_nursery() {
    common::watchdog(10, || {
        let rt = workers(2);
        let h = rt.handle().clone();
        let rt_slot = Arc::new(std::sync::Mutex::new(Some(rt)));
        let _g = h.enter();
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let (ran2, dropped2) = (ran.clone(), dropped.clone());
        let r = weft::wait(weft::nursery(move |n: Nursery<'static, ()>| async move {
            let n = Arc::new(n);
            let n2 = n.clone();
            n.spawn_fiber(move || {
                weft::fiber::sleep(ms(10));
                let rt = rt_slot.lock().unwrap().take();
                drop(rt);
                let (r1, d1) = (ran2.clone(), common::DropCounter(dropped2.clone()));
                n2.spawn(async move {
                    let _d = d1;
                    r1.fetch_add(1, SeqCst);
                    Ok(())
                });
                let (r2, d2) = (ran2.clone(), common::DropCounter(dropped2.clone()));
                n2.spawn_fiber(move || {
                    let _d = d2;
                    r2.fetch_add(1, SeqCst);
                    Ok(())
                });
                Ok(())
            });
            Ok(5)
        }));
        assert_eq!(r, Ok(5));
        assert_eq!(
            ran.load(SeqCst),
            0,
            "a child ran after its runtime was dropped"
        );
        assert_eq!(dropped.load(SeqCst), 2);
    });
}

// ------------------------------------------------------------ order and reuse

/// A held mutex with a task, a plain thread and a fiber queued behind it in that
/// order: each release hands the lock to the first waiter (retried on a setup whose
/// waiters did not queue in order in time).
#[test]
fn the_mutex_serves_waiters_of_every_context_in_arrival_order() {
    common::watchdog(15, || {
        let rt = workers(2);
        let mut last = Vec::new();
        for _attempt in 0..5 {
            let m = Arc::new(Mutex::new(Vec::new()));
            let g = m.try_lock().unwrap();
            let m1 = m.clone();
            let task = rt.spawn(async move { m1.lock().await.push(1) });
            std::thread::sleep(ms(30));
            let m2 = m.clone();
            let th = std::thread::spawn(move || m2.lock_blocking().push(2));
            std::thread::sleep(ms(30));
            let m3 = m.clone();
            let fib = fiber_on(&rt, move || m3.lock_blocking().push(3));
            std::thread::sleep(ms(30));
            drop(g);
            join_within(task, 5).unwrap();
            common::thread_within(th, 5);
            join_within(fib, 5).unwrap();
            last = m.try_lock().unwrap().clone();
            if last == [1, 2, 3] {
                return;
            }
        }
        panic!("never served in arrival order: last {last:?}");
    });
}

/// A waiting writer (a fiber) makes new readers wait, in every context, until it has
/// written: write preference, and the value readers see is the written one.
#[test]
fn a_waiting_writer_keeps_new_readers_of_every_context_out() {
    common::watchdog(15, || {
        let rt = workers(2);
        let rw = Arc::new(RwLock::new(0u32));
        let r0 = rw.try_read().unwrap();
        let w = rw.clone();
        let writer = fiber_on(&rt, move || *w.write_blocking() = 7);
        common::wait_until("the writer queued", || rw.try_read().is_err());
        let r1 = rw.clone();
        let task = rt.spawn(async move { *r1.read().await });
        let r2 = rw.clone();
        let th = std::thread::spawn(move || *r2.read_blocking());
        let r3 = rw.clone();
        let fib = fiber_on(&rt, move || *r3.read_blocking());
        std::thread::sleep(ms(30));
        assert!(!task.is_finished() && !th.is_finished() && !fib.is_finished());
        drop(r0);
        join_within(writer, 5).unwrap();
        assert_eq!(join_within(task, 5).unwrap(), 7);
        assert_eq!(common::thread_within(th, 5), 7);
        assert_eq!(join_within(fib, 5).unwrap(), 7);
    });
}

/// `WaitGroup::done` below zero panics (documented) and leaves the group usable:
/// waiters of every context then wait for the next round and are released by it.
#[test]
fn a_wait_group_after_a_done_below_zero_is_reusable() {
    common::watchdog(10, || {
        let rt = workers(2);
        let wg = weft::sync::WaitGroup::new();
        let w = wg.clone();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || w.done()));
        assert!(r.is_err(), "done below zero did not panic");
        for _round in 0..3 {
            wg.add(2);
            let w1 = wg.clone();
            let task = rt.spawn(async move { w1.wait().await });
            let w2 = wg.clone();
            let fib = fiber_on(&rt, move || w2.wait_blocking());
            let w3 = wg.clone();
            let th = std::thread::spawn(move || w3.wait_blocking());
            std::thread::sleep(ms(10));
            assert!(!task.is_finished() && !fib.is_finished() && !th.is_finished());
            wg.done();
            std::thread::sleep(ms(5));
            assert!(!task.is_finished() && !th.is_finished());
            wg.done();
            join_within(task, 5).unwrap();
            join_within(fib, 5).unwrap();
            common::thread_within(th, 5);
        }
    });
}

/// `notify_one` with nobody waiting, many times, stores one permit: of waiters of
/// every context exactly one gets it; `notify_waiters` releases the rest.
#[test]
fn many_notify_ones_with_no_waiter_store_a_single_permit() {
    common::watchdog(10, || {
        let rt = workers(2);
        let n = Arc::new(Notify::new());
        for _ in 0..100 {
            n.notify_one();
        }
        let woke = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        let mut ths = Vec::new();
        for i in 0..6 {
            let (n, woke) = (n.clone(), woke.clone());
            match i % 3 {
                0 => hs.push(rt.spawn(async move {
                    n.notified().await;
                    woke.fetch_add(1, SeqCst);
                })),
                1 => hs.push(fiber_on(&rt, move || {
                    n.notified_blocking();
                    woke.fetch_add(1, SeqCst);
                })),
                _ => ths.push(std::thread::spawn(move || {
                    n.notified_blocking();
                    woke.fetch_add(1, SeqCst);
                })),
            }
        }
        std::thread::sleep(ms(50));
        assert_eq!(woke.load(SeqCst), 1, "one stored permit, one waiter woken");
        // The five others are registered by now (each polled at least once).
        n.notify_waiters();
        for h in hs {
            join_within(h, 5).unwrap();
        }
        for t in ths {
            common::thread_within(t, 5);
        }
        assert_eq!(woke.load(SeqCst), 6);
        // And nothing was left stored.
        let mut f = Box::pin(n.notified());
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        assert!(std::future::Future::poll(f.as_mut(), &mut cx).is_pending());
    });
}

/// Counts a holder out when dropped (its section ended, or its fiber unwound).
struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}
