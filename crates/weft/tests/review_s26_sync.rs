//! Review session 26 of `weft::sync`, from safe code: wakers whose `clone` panics at
//! the registration of a signal-style wait, fibers aborted at random moments while
//! blocked in every blocking form, runtimes dropped under waiters of every context,
//! model-checked random operation sequences of `Semaphore` and `broadcast` against
//! tokio's documented semantics, and edge values. Every test runs under a watchdog.

#![allow(clippy::async_yields_async)] // fibers are spawned inside `block_on` to land on that runtime

mod common;

use std::collections::VecDeque;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::Duration;

use common::{with_limit, workers, Rng};
use weft::sync::{
    broadcast, oneshot, watch, Barrier, Mutex, Notify, RwLock, Semaphore, TryAcquireError,
    WaitGroup,
};

const LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------- helpers

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut noop_cx())
}

fn poll_with<F: Future + ?Sized>(f: Pin<&mut F>, w: &Waker) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(w))
}

/// A waker whose `clone` panics while `panic_clone` is set.
struct Evil {
    panic_clone: AtomicBool,
}

fn clone_panicking_waker() -> (Arc<Evil>, Waker) {
    let e = Arc::new(Evil {
        panic_clone: AtomicBool::new(true),
    });
    static VT: RawWakerVTable = RawWakerVTable::new(e_clone, e_wake, e_wake_by_ref, e_drop);
    // Each vtable function's contract: `p` came from `Arc::into_raw` of an `Arc<Evil>`
    // and owns one strong count of it (the `RawWaker` contract for this vtable).
    unsafe fn e_clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` is a live `Arc<Evil>` pointer (the contract above).
        let e = unsafe { &*(p as *const Evil) };
        if e.panic_clone.load(SeqCst) {
            panic!("waker clone panics");
        }
        // SAFETY: as above; the new `RawWaker` owns the count added here.
        unsafe { Arc::increment_strong_count(p as *const Evil) };
        RawWaker::new(p, &VT)
    }
    unsafe fn e_wake(p: *const ()) {
        // SAFETY: `p` owns one strong count, given up here once.
        unsafe { e_drop(p) };
    }
    unsafe fn e_wake_by_ref(_p: *const ()) {}
    unsafe fn e_drop(p: *const ()) {
        // SAFETY: `p` owns one strong count of a live `Arc<Evil>`, given up here once.
        unsafe { Arc::decrement_strong_count(p as *const Evil) };
    }
    let raw = RawWaker::new(Arc::into_raw(e.clone()) as *const (), &VT);
    // SAFETY: the vtable follows the RawWaker contract (an Arc behind the pointer).
    (e, unsafe { Waker::from_raw(raw) })
}

/// A value that counts itself live and detects a second drop.
struct Tracked {
    live: Arc<AtomicUsize>,
    alive: bool,
}

impl Tracked {
    fn new(live: &Arc<AtomicUsize>) -> Tracked {
        live.fetch_add(1, SeqCst);
        Tracked {
            live: live.clone(),
            alive: true,
        }
    }
}

impl Clone for Tracked {
    fn clone(&self) -> Tracked {
        Tracked::new(&self.live)
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        assert!(self.alive, "a value dropped twice");
        self.alive = false;
        self.live.fetch_sub(1, SeqCst);
    }
}

/// Spawns `f` as a fiber of `rt`.
fn fiber<T: Send + 'static>(
    rt: &weft::Runtime,
    f: impl FnOnce() -> T + Send + 'static,
) -> weft::JoinHandle<T> {
    rt.block_on(async move { weft::fiber::spawn(f) })
}

/// Sleeps a random moment of up to ~200 us (sometimes not at all).
fn random_pause(rng: &mut Rng) {
    match rng.next() % 4 {
        0 => {}
        1 => std::thread::yield_now(),
        2 => common::spin_for(Duration::from_micros(rng.next() % 50)),
        _ => std::thread::sleep(Duration::from_micros(rng.next() % 200)),
    }
}

// ------------------------------------------- panicking waker clone at registration

/// BUG (found here, fixed in this branch): `Notified::poll` moved the state word to
/// WAITING (by CAS, under the lock) and only then registered its node, whose
/// `set_waker` clones the waker. A waker whose `clone` panicked left the word WAITING
/// with an empty wait list: the next `notify_one` took the locked path, found nobody
/// (a `debug_assert` panic in debug builds) and in release builds stored no permit, so
/// the notification was lost until some other waiter registered.
#[test]
fn notify_waker_clone_panic_at_registration_loses_no_permit() {
    with_limit(LIMIT, || {
        let n = Notify::new();
        let (_e, w) = clone_panicking_waker();
        {
            let mut f = pin!(n.notified());
            let r = catch_unwind(AssertUnwindSafe(|| poll_with(f.as_mut(), &w)));
            assert!(r.is_err(), "the waker's clone panics out of the poll");
        }
        let r = catch_unwind(AssertUnwindSafe(|| n.notify_one()));
        assert!(
            r.is_ok(),
            "notify_one panicked: the state says WAITING, nobody waits"
        );
        let mut g = pin!(n.notified());
        assert!(
            poll_once(g.as_mut()).is_ready(),
            "the permit of the notify_one is lost"
        );
        // And the Notify still works normally afterwards.
        let mut h = pin!(n.notified());
        assert!(poll_once(h.as_mut()).is_pending());
        n.notify_one();
        assert!(poll_once(h.as_mut()).is_ready());
    });
}

/// BUG (found here, fixed in this branch): `BarrierWait::poll` counted its arrival
/// before registering its node; a waker whose `clone` panicked left the arrival
/// counted but the future unregistered, so its `Drop` did not withdraw it (the
/// documented cancel safety) and the next generation released one waiter short.
#[test]
fn barrier_waker_clone_panic_at_registration_withdraws_the_arrival() {
    with_limit(LIMIT, || {
        let b = Barrier::new(2);
        let (_e, w) = clone_panicking_waker();
        {
            let mut f = pin!(b.wait());
            let r = catch_unwind(AssertUnwindSafe(|| poll_with(f.as_mut(), &w)));
            assert!(r.is_err(), "the waker's clone panics out of the poll");
        }
        let mut a = pin!(b.wait());
        assert!(
            poll_once(a.as_mut()).is_pending(),
            "a phantom arrival: the first of two waiters was released alone"
        );
        let mut c = pin!(b.wait());
        match poll_once(c.as_mut()) {
            Poll::Ready(r) => assert!(r.is_leader()),
            Poll::Pending => panic!("the second of two waiters was not released"),
        }
        match poll_once(a.as_mut()) {
            Poll::Ready(r) => assert!(!r.is_leader()),
            Poll::Pending => panic!("the first waiter was not released"),
        }
    });
}

/// The other signal-style waits with the same panicking clone leave nothing behind.
#[test]
fn other_waits_survive_a_waker_clone_panic_at_registration() {
    with_limit(LIMIT, || {
        let (_e, w) = clone_panicking_waker();
        let poll_panics = |f: Pin<&mut dyn Future<Output = ()>>| {
            let r = catch_unwind(AssertUnwindSafe(|| poll_with(f, &w)));
            assert!(r.is_err());
        };
        // WaitGroup.
        let wg = WaitGroup::new();
        wg.add(1);
        {
            let f = pin!(async { wg.wait().await });
            poll_panics(f);
        }
        wg.done();
        assert!(poll_once(pin!(wg.wait())).is_ready());
        // watch.
        let (tx, mut rx) = watch::channel(0);
        {
            let f = pin!(async {
                let _ = rx.changed().await;
            });
            poll_panics(f);
        }
        tx.send(1).unwrap();
        assert!(matches!(poll_once(pin!(rx.changed())), Poll::Ready(Ok(()))));
        // broadcast.
        let (btx, mut brx) = broadcast::channel::<u32>(2);
        {
            let f = pin!(async {
                let _ = brx.recv().await;
            });
            poll_panics(f);
        }
        btx.send(7).unwrap();
        assert!(matches!(poll_once(pin!(brx.recv())), Poll::Ready(Ok(7))));
        // oneshot: the receiver is the future.
        let (otx, mut orx) = oneshot::channel::<u32>();
        let r = catch_unwind(AssertUnwindSafe(|| poll_with(Pin::new(&mut orx), &w)));
        assert!(r.is_err());
        otx.send(3).unwrap();
        assert_eq!(orx.try_recv(), Ok(3));
        // Semaphore and RwLock (the permit core).
        let sem = Semaphore::new(0);
        {
            let f = pin!(async {
                let _ = sem.acquire_many(2).await;
            });
            poll_panics(f);
        }
        sem.add_permits(2);
        assert_eq!(sem.available_permits(), 2);
        let l = RwLock::new(0);
        let g = l.try_read().unwrap();
        {
            let f = pin!(async {
                let _ = l.write().await;
            });
            poll_panics(f);
        }
        assert!(l.try_read().is_ok(), "a ghost writer keeps readers out");
        drop(g);
        assert!(l.try_write().is_ok());
    });
}

// ---------------------------------------------------- fibers aborted while blocked

/// A fiber blocked in `acquire_many_blocking(5)` absorbs permits as they are added;
/// aborted at a random moment, what it absorbed goes to the fiber, thread and task
/// queued behind it, and at the end every permit is back.
#[test]
fn semaphore_fiber_aborted_in_acquire_many_blocking_passes_absorbed_permits_on() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..120 {
            let sem = Arc::new(Semaphore::new(0));
            let queued = Arc::new(AtomicBool::new(false));
            let victim = {
                let (s, q) = (sem.clone(), queued.clone());
                fiber(&rt, move || {
                    q.store(true, SeqCst);
                    let _p = s.acquire_many_blocking(5).unwrap();
                    weft::fiber::yield_now();
                })
            };
            common::wait_until("the victim started", || queued.load(SeqCst));
            random_pause(&mut rng);
            let f = {
                let s = sem.clone();
                fiber(&rt, move || drop(s.acquire_many_blocking(2).unwrap()))
            };
            let t = {
                let s = sem.clone();
                std::thread::spawn(move || drop(s.acquire_many_blocking(2).unwrap()))
            };
            let k = {
                let s = sem.clone();
                rt.spawn(async move { drop(s.acquire_many(2).await.unwrap()) })
            };
            // 11 permits in random pieces, the abort somewhere among them.
            let abort_at = rng.next() % 5;
            let mut added = 0;
            for step in 0..5 {
                if step == abort_at {
                    victim.abort();
                }
                let piece = if step == 4 {
                    11 - added
                } else {
                    (rng.next() % 3) as usize
                };
                sem.add_permits(piece);
                added += piece;
                random_pause(&mut rng);
            }
            match victim.join() {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "round {round}: {e:?}"),
            }
            f.join().unwrap();
            t.join().unwrap();
            k.join().unwrap();
            assert_eq!(
                sem.available_permits(),
                11,
                "round {round}: permits lost or made"
            );
            assert!(sem.try_acquire_many(11).is_ok());
        }
    });
}

/// A writer fiber queued behind a reader (so holding back every permit) is aborted at
/// a random moment while a thread, a task and a fiber wait to read behind it: all of
/// them get in, and the lock ends free.
#[test]
fn rwlock_writer_fiber_aborted_lets_every_queued_reader_in() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for round in 0..150 {
            let l = Arc::new(RwLock::new(0u64));
            let r0 = l.try_read().unwrap();
            let writer = {
                let l = l.clone();
                fiber(&rt, move || {
                    *l.write_blocking() += 1;
                })
            };
            common::wait_until("the writer queued", || l.try_read().is_err());
            let reads = Arc::new(AtomicUsize::new(0));
            let t = {
                let (l, c) = (l.clone(), reads.clone());
                std::thread::spawn(move || {
                    let _g = l.read_blocking();
                    c.fetch_add(1, SeqCst);
                })
            };
            let k = {
                let (l, c) = (l.clone(), reads.clone());
                rt.spawn(async move {
                    let _g = l.read().await;
                    c.fetch_add(1, SeqCst);
                })
            };
            let f = {
                let (l, c) = (l.clone(), reads.clone());
                fiber(&rt, move || {
                    let _g = l.read_blocking();
                    c.fetch_add(1, SeqCst);
                })
            };
            random_pause(&mut rng);
            if rng.next().is_multiple_of(2) {
                writer.abort();
                random_pause(&mut rng);
                drop(r0);
            } else {
                drop(r0);
                random_pause(&mut rng);
                writer.abort();
            }
            let wrote = match writer.join() {
                Ok(()) => 1,
                Err(e) => {
                    assert!(e.is_cancelled(), "round {round}: {e:?}");
                    0
                }
            };
            t.join().unwrap();
            k.join().unwrap();
            f.join().unwrap();
            assert_eq!(reads.load(SeqCst), 3);
            let g = l.try_write().expect("the lock is free at the end");
            assert_eq!(*g, wrote, "round {round}");
        }
    });
}

/// Fibers blocked in `broadcast::Receiver::recv_blocking` are aborted at random
/// moments while a thread sends: every value is dropped exactly once and none is left
/// behind once the channel is gone.
#[test]
fn broadcast_fibers_aborted_in_recv_blocking_leak_nothing() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let live = Arc::new(AtomicUsize::new(0));
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for round in 0..60 {
            let (tx, rx) = broadcast::channel::<Tracked>(2);
            let fibers: Vec<_> = (0..3)
                .map(|_| {
                    let mut rx = tx.subscribe();
                    fiber(&rt, move || {
                        let mut got = 0;
                        for _ in 0..200 {
                            match rx.recv_blocking() {
                                Ok(v) => {
                                    got += 1;
                                    drop(v);
                                }
                                Err(broadcast::error::RecvError::Lagged(_)) => {}
                                Err(broadcast::error::RecvError::Closed) => break,
                            }
                        }
                        got
                    })
                })
                .collect();
            drop(rx);
            let l = live.clone();
            let sender = std::thread::spawn(move || {
                for _ in 0..40 {
                    let _ = tx.send(Tracked::new(&l));
                    std::thread::yield_now();
                }
            });
            random_pause(&mut rng);
            fibers[(rng.next() % 3) as usize].abort();
            random_pause(&mut rng);
            fibers[(rng.next() % 3) as usize].abort();
            sender.join().unwrap();
            for f in fibers {
                match f.join() {
                    Ok(n) => assert!(n <= 40),
                    Err(e) => assert!(e.is_cancelled(), "round {round}: {e:?}"),
                }
            }
            assert_eq!(live.load(SeqCst), 0, "round {round}: values leaked");
        }
    });
}

/// A barrier waiter fiber aborted at a random moment (before or after it arrived)
/// withdraws; the next three waiters then form exactly one generation with one leader.
#[test]
fn barrier_fiber_aborted_at_random_moments_withdraws_its_arrival() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let b = Arc::new(Barrier::new(3));
        let mut rng = Rng(0x0bad_cafe_f00d_d00d);
        for round in 0..150 {
            let victim = {
                let b = b.clone();
                fiber(&rt, move || b.wait_blocking().is_leader())
            };
            random_pause(&mut rng);
            victim.abort();
            assert!(
                victim.join().unwrap_err().is_cancelled(),
                "round {round}: a lone waiter of three passed the barrier"
            );
            let f = {
                let b = b.clone();
                fiber(&rt, move || b.wait_blocking().is_leader())
            };
            let t = {
                let b = b.clone();
                std::thread::spawn(move || b.wait_blocking().is_leader())
            };
            let k = {
                let b = b.clone();
                rt.spawn(async move { b.wait().await.is_leader() })
            };
            let leaders = [f.join().unwrap(), t.join().unwrap(), k.join().unwrap()];
            assert_eq!(
                leaders.iter().filter(|l| **l).count(),
                1,
                "round {round}: {leaders:?}"
            );
        }
    });
}

/// Fibers blocked in `WaitGroup::wait_blocking` and `watch::Receiver::changed_blocking`
/// aborted at random moments: the others still see the zero and the change.
#[test]
fn wait_group_and_watch_fibers_aborted_leave_the_others_waking() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0x5555_aaaa_3333_cccc);
        for round in 0..100 {
            let wg = WaitGroup::new();
            wg.add(2);
            let (tx, rx) = watch::channel(0u32);
            let mut hs = Vec::new();
            for i in 0..4 {
                let wg = wg.clone();
                let mut rx = rx.clone();
                hs.push(fiber(&rt, move || {
                    if i % 2 == 0 {
                        wg.wait_blocking();
                    } else {
                        rx.changed_blocking().unwrap();
                        assert_eq!(*rx.borrow_and_update(), 1);
                    }
                }));
            }
            random_pause(&mut rng);
            hs[(rng.next() % 4) as usize].abort();
            wg.done();
            random_pause(&mut rng);
            tx.send(1).unwrap();
            wg.done();
            let mut cancelled = 0;
            for h in hs {
                match h.join() {
                    Ok(()) => {}
                    Err(e) => {
                        assert!(e.is_cancelled(), "round {round}: {e:?}");
                        cancelled += 1;
                    }
                }
            }
            assert!(cancelled <= 1);
        }
    });
}

/// A fiber blocked in `oneshot::Receiver::recv_blocking` aborted while a thread sends
/// a value: the value is dropped exactly once whoever wins.
#[test]
fn oneshot_fiber_aborted_in_recv_blocking_drops_the_value_once() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let live = Arc::new(AtomicUsize::new(0));
        let mut rng = Rng(0x7777_1111_2222_9999);
        for round in 0..200 {
            let (tx, rx) = oneshot::channel::<Tracked>();
            let f = fiber(&rt, move || rx.recv_blocking().is_ok());
            random_pause(&mut rng);
            let l = live.clone();
            let t = std::thread::spawn(move || tx.send(Tracked::new(&l)).is_ok());
            random_pause(&mut rng);
            f.abort();
            let sent = t.join().unwrap();
            match f.join() {
                Ok(got) => assert!(got && sent, "round {round}"),
                Err(e) => assert!(e.is_cancelled()),
            }
            assert_eq!(live.load(SeqCst), 0, "round {round}: the value leaked");
        }
    });
}

// ------------------------------------------------------ runtime dropped under waiters

/// A fiber holds a `Mutex`, a `Semaphore`'s permits and an `RwLock`'s write guard and
/// then waits for ever; a plain thread, tasks and other fibers wait for the same
/// primitives. Dropping the runtime unwinds the fibers and cancels the tasks: their
/// guards and permits go back, so the plain threads get what they wait for instead
/// of hanging.
#[test]
fn runtime_dropped_while_a_fiber_holds_what_plain_threads_wait_for() {
    with_limit(LIMIT, || {
        for round in 0..20 {
            let m = Arc::new(Mutex::new(0u32));
            let sem = Arc::new(Semaphore::new(3));
            let l = Arc::new(RwLock::new(0u32));
            let never = Arc::new(Notify::new());
            let rt = workers(2);
            let held = Arc::new(AtomicBool::new(false));
            let holder = {
                let (m, sem, l, never, held) = (
                    m.clone(),
                    sem.clone(),
                    l.clone(),
                    never.clone(),
                    held.clone(),
                );
                fiber(&rt, move || {
                    let _g = m.lock_blocking();
                    let _p = sem.acquire_many_blocking(3).unwrap();
                    let _w = l.write_blocking();
                    held.store(true, SeqCst);
                    never.notified_blocking();
                })
            };
            common::wait_until("the fiber holds everything", || held.load(SeqCst));
            let mut others = Vec::new();
            for _ in 0..2 {
                let (m2, s2, l2) = (m.clone(), sem.clone(), l.clone());
                others.push(rt.spawn(async move {
                    *m2.lock().await += 1;
                    let _p = s2.acquire_many(2).await.unwrap();
                    let _r = l2.read().await;
                }));
                let (m2, s2, l2) = (m.clone(), sem.clone(), l.clone());
                others.push(fiber(&rt, move || {
                    *m2.lock_blocking() += 1;
                    let _p = s2.acquire_many_blocking(2).unwrap();
                    let _r = l2.read_blocking();
                }));
            }
            let threads: Vec<_> = (0..2)
                .map(|i| {
                    let (m, sem, l) = (m.clone(), sem.clone(), l.clone());
                    std::thread::spawn(move || match i {
                        0 => {
                            *m.lock_blocking() += 100;
                            drop(sem.acquire_many_blocking(3).unwrap());
                        }
                        _ => {
                            *l.write_blocking() += 1;
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(2));
            drop(rt);
            assert!(holder.join().unwrap_err().is_cancelled());
            for h in others {
                // Each either finished before the shutdown or was cancelled by it.
                if let Err(e) = h.join() {
                    assert!(e.is_cancelled(), "round {round}: {e:?}");
                }
            }
            for t in threads {
                t.join().unwrap();
            }
            assert!(*m.try_lock().expect("the mutex is free") >= 100);
            assert_eq!(sem.available_permits(), 3, "round {round}");
            assert!(l.try_write().is_ok(), "round {round}: the rwlock is free");
        }
    });
}

/// Was a known limit (documented on `weft::wait`), fixed in session 30. On one
/// worker, a fiber holds a `Mutex` and waits for ever; an async task then calls
/// `lock_blocking` (not `.await`) on the worker thread's own stack. Dropping the
/// runtime hung for ever: the wait, seeing the shutdown, blocked its thread for the
/// lock, and the only one who could release it was the suspended fiber, unwound only
/// at the worker's exit, below that wait. The shutting-down wait now unwinds the
/// fibers set aside for its worker first: the guard drops, the task gets the lock.
#[test]
fn runtime_drop_with_a_task_in_lock_blocking_behind_a_suspended_fiber_of_its_worker() {
    with_limit(Duration::from_secs(5), || {
        let m = Arc::new(Mutex::new(0u32));
        let never = Arc::new(Notify::new());
        let rt = workers(1);
        let held = Arc::new(AtomicBool::new(false));
        let holder = {
            let (m, never, held) = (m.clone(), never.clone(), held.clone());
            fiber(&rt, move || {
                let _g = m.lock_blocking();
                held.store(true, SeqCst);
                never.notified_blocking();
            })
        };
        common::wait_until("held", || held.load(SeqCst));
        let m2 = m.clone();
        let t = rt.spawn(async move { *m2.lock_blocking() += 1 });
        std::thread::sleep(Duration::from_millis(20));
        drop(rt);
        assert!(holder.join().unwrap_err().is_cancelled());
        // The task got the lock once the fiber's guard dropped, or was cancelled.
        match t.join() {
            Ok(()) => assert_eq!(*m.try_lock().expect("the mutex is free"), 1),
            Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        }
        assert!(m.try_lock().is_ok(), "the mutex is free");
    });
}

// ------------------------------------------------ model-checked random sequences

type AcquireFut<'a> = Pin<
    Box<
        dyn Future<Output = Result<weft::sync::SemaphorePermit<'a>, weft::sync::AcquireError>> + 'a,
    >,
>;

/// What tokio documents for a semaphore, as a plain model: FIFO waiters, the first of
/// which absorbs released permits until it has all it asked for (so nobody overtakes
/// it), a dropped waiter gives back what it absorbed (or everything once served),
/// `close` fails every waiter and gives their absorbed permits back.
#[derive(Default)]
struct SemModel {
    avail: usize,
    closed: bool,
    /// (future id, asked, absorbed)
    queue: VecDeque<(usize, usize, usize)>,
    /// Futures told: Some(true) served, Some(false) closed.
    told: std::collections::HashMap<usize, bool>,
}

impl SemModel {
    fn release(&mut self, mut n: usize) {
        while n > 0 {
            let Some(head) = self.queue.front_mut() else {
                break;
            };
            let give = (head.1 - head.2).min(n);
            head.2 += give;
            n -= give;
            if head.2 == head.1 {
                let (id, _, _) = self.queue.pop_front().unwrap();
                self.told.insert(id, true);
            }
        }
        self.avail += n;
    }
}

fn semaphore_model_run(seed: u64, steps: usize) {
    let sem = Semaphore::new(0);
    let mut m = SemModel::default();
    let mut rng = Rng(seed);
    let mut futs: Vec<(usize, usize, AcquireFut<'_>)> = Vec::new();
    let mut held: Vec<weft::sync::SemaphorePermit<'_>> = Vec::new();
    let mut next_id = 0;
    for step in 0..steps {
        let ctx = format!("seed {seed:#x} step {step}");
        match rng.next() % 10 {
            // A new acquire, polled once.
            0 | 1 => {
                let n = (rng.next() % 5) as usize;
                let mut f: AcquireFut<'_> = Box::pin(sem.acquire_many(n as u32));
                let id = next_id;
                next_id += 1;
                let expect = if m.closed {
                    Some(false)
                } else if n == 0 || (m.queue.is_empty() && m.avail >= n) {
                    m.avail -= if m.queue.is_empty() { n } else { 0 };
                    Some(true)
                } else {
                    let take = m.avail;
                    m.avail = 0;
                    m.queue.push_back((id, n, take));
                    None
                };
                match (poll_once(f.as_mut()), expect) {
                    (Poll::Ready(Ok(p)), Some(true)) => {
                        assert_eq!(p.num_permits(), n, "{ctx}");
                        held.push(p);
                    }
                    (Poll::Ready(Err(_)), Some(false)) => {}
                    (Poll::Pending, None) => futs.push((id, n, f)),
                    (got, want) => panic!("{ctx}: new acquire({n}) got {got:?}, model {want:?}"),
                }
            }
            // Poll a pending acquire again.
            2 if !futs.is_empty() => {
                let i = (rng.next() % futs.len() as u64) as usize;
                let (id, n, f) = &mut futs[i];
                let want = m.told.get(id).copied();
                match (poll_once(f.as_mut()), want) {
                    (Poll::Ready(Ok(p)), Some(true)) => {
                        assert_eq!(p.num_permits(), *n, "{ctx}");
                        m.told.remove(id);
                        held.push(p);
                        drop(futs.swap_remove(i));
                    }
                    (Poll::Ready(Err(_)), Some(false)) => {
                        m.told.remove(id);
                        drop(futs.swap_remove(i));
                    }
                    (Poll::Pending, None) => {}
                    (got, want) => panic!("{ctx}: acquire {id} got {got:?}, model {want:?}"),
                }
            }
            // Drop a pending acquire (maybe one already served or closed).
            3 if !futs.is_empty() => {
                let i = (rng.next() % futs.len() as u64) as usize;
                let (id, n, f) = futs.swap_remove(i);
                drop(f);
                match m.told.remove(&id) {
                    Some(true) => m.release(n),
                    Some(false) => {}
                    None => {
                        let at = m.queue.iter().position(|w| w.0 == id).unwrap();
                        let (_, _, absorbed) = m.queue.remove(at).unwrap();
                        m.release(absorbed);
                    }
                }
            }
            // Drop or forget a held permit.
            4 if !held.is_empty() => {
                let i = (rng.next() % held.len() as u64) as usize;
                let p = held.swap_remove(i);
                let n = p.num_permits();
                if rng.next().is_multiple_of(4) {
                    p.forget();
                } else {
                    drop(p);
                    m.release(n);
                }
            }
            5 | 6 => {
                let n = (rng.next() % 4) as usize;
                sem.add_permits(n);
                m.release(n);
            }
            7 => {
                let n = (rng.next() % 4) as usize;
                let want = if m.closed {
                    Err(TryAcquireError::Closed)
                } else if m.avail >= n && (m.queue.is_empty() || n == 0) {
                    Ok(())
                } else {
                    Err(TryAcquireError::NoPermits)
                };
                match (sem.try_acquire_many(n as u32), want) {
                    (Ok(p), Ok(())) => {
                        m.avail -= n;
                        held.push(p);
                    }
                    (Err(e), Err(w)) => assert_eq!(e, w, "{ctx}"),
                    (got, want) => panic!("{ctx}: try_acquire({n}) got {got:?}, model {want:?}"),
                }
            }
            8 => {
                let n = (rng.next() % 3) as usize;
                let want = m.avail.min(n);
                assert_eq!(sem.forget_permits(n), want, "{ctx}");
                m.avail -= want;
            }
            9 if rng.next().is_multiple_of(8) => {
                sem.close();
                m.closed = true;
                for (id, _, absorbed) in std::mem::take(&mut m.queue) {
                    m.avail += absorbed;
                    m.told.insert(id, false);
                }
            }
            _ => {}
        }
        assert_eq!(sem.available_permits(), m.avail, "{ctx}: available permits");
        assert_eq!(sem.is_closed(), m.closed, "{ctx}");
    }
    drop(futs);
    drop(held);
}

/// Random sequences of acquires (polled by hand, dropped at any point, including
/// after being served), permits dropped or forgotten, `add_permits`, `try_acquire`,
/// `forget_permits` and `close`, checked step by step against the model.
#[test]
fn semaphore_random_operations_match_the_model() {
    with_limit(LIMIT, || {
        for seed in 1..=300u64 {
            semaphore_model_run(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1, 300);
        }
    });
}

/// A broadcast value that carries an id and counts itself live.
#[derive(Clone)]
struct Val {
    id: u64,
    _t: Tracked,
}

impl std::fmt::Debug for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Val({})", self.id)
    }
}

fn broadcast_model_run(seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let capacity = 1 + (rng.next() % 5) as usize;
    let cap = capacity.next_power_of_two() as u64;
    let live = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = broadcast::channel::<Val>(capacity);
    let mut senders = vec![tx];
    let mut rxs = vec![(rx, 0u64)];
    // The model: the values kept (position, id, receivers still to read it).
    let mut ring: VecDeque<(u64, u64, usize)> = VecDeque::new();
    let mut tail = 0u64;
    let mut next_id = 0;
    for step in 0..steps {
        let ctx = format!("seed {seed:#x} cap {capacity} step {step}");
        match rng.next() % 8 {
            0..=2 if !senders.is_empty() => {
                let id = next_id;
                next_id += 1;
                let s = &senders[(rng.next() % senders.len() as u64) as usize];
                let r = s.send(Val {
                    id,
                    _t: Tracked::new(&live),
                });
                if rxs.is_empty() {
                    assert!(r.is_err(), "{ctx}: a send with no receiver succeeded");
                } else {
                    assert_eq!(r.unwrap(), rxs.len(), "{ctx}");
                    ring.push_back((tail, id, rxs.len()));
                    tail += 1;
                    if ring.len() as u64 > cap {
                        ring.pop_front();
                    }
                }
            }
            3 | 4 if !rxs.is_empty() => {
                let i = (rng.next() % rxs.len() as u64) as usize;
                let (rx, next) = &mut rxs[i];
                let oldest = tail.saturating_sub(cap);
                let want = if *next < oldest {
                    let lag = oldest - *next;
                    *next = oldest;
                    Err(broadcast::error::TryRecvError::Lagged(lag))
                } else if *next < tail {
                    let e = ring.iter_mut().find(|e| e.0 == *next).unwrap();
                    e.2 -= 1;
                    *next += 1;
                    Ok(e.1)
                } else if senders.is_empty() {
                    Err(broadcast::error::TryRecvError::Closed)
                } else {
                    Err(broadcast::error::TryRecvError::Empty)
                };
                let got = rx.try_recv().map(|v| v.id);
                assert_eq!(got, want, "{ctx}: receiver {i}");
            }
            5 if !senders.is_empty() => {
                let s = &senders[(rng.next() % senders.len() as u64) as usize];
                rxs.push((s.subscribe(), tail));
            }
            6 if !rxs.is_empty() => {
                let i = (rng.next() % rxs.len() as u64) as usize;
                let (rx, next) = rxs.swap_remove(i);
                drop(rx);
                for e in ring.iter_mut().filter(|e| e.0 >= next) {
                    e.2 -= 1;
                }
            }
            7 => {
                if rng.next().is_multiple_of(3) && !senders.is_empty() {
                    senders.pop();
                } else if let Some(s) = senders.first() {
                    senders.push(s.clone());
                }
            }
            _ => {}
        }
        let kept = ring.iter().filter(|e| e.2 > 0).count();
        assert_eq!(live.load(SeqCst), kept, "{ctx}: values alive");
        if let Some(s) = senders.first() {
            assert_eq!(s.receiver_count(), rxs.len(), "{ctx}");
        }
    }
    drop(senders);
    drop(rxs);
    assert_eq!(live.load(SeqCst), 0, "seed {seed:#x}: values left alive");
}

/// Random sends, `try_recv`s, subscriptions mid-stream, receivers dropped, senders
/// cloned and dropped, against tokio's documented semantics (capacity rounded up to a
/// power of two, `Lagged(n)` then the oldest value kept, `Closed` once every sender is
/// gone and the values are read); every value lives exactly as long as a receiver
/// still has to read it.
#[test]
fn broadcast_random_operations_match_the_model() {
    with_limit(LIMIT, || {
        for seed in 1..=300u64 {
            broadcast_model_run(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1, 300);
        }
    });
}

/// A task holds a `Mutex` guard across an await that never ends and a plain thread
/// holds a permit a task waits for with `acquire_blocking` (its stack set aside on the
/// worker): dropping the runtime cancels the first task (the plain thread waiting for
/// its lock gets it) and lets the second finish once the thread gives its permit back.
#[test]
fn runtime_dropped_while_tasks_hold_and_wait_beside_plain_threads() {
    with_limit(LIMIT, || {
        for round in 0..20 {
            let m = Arc::new(Mutex::new(0u32));
            let sem = Arc::new(Semaphore::new(1));
            let rt = workers(2);
            let held = Arc::new(AtomicBool::new(false));
            let holder = {
                let (m, held) = (m.clone(), held.clone());
                rt.spawn(async move {
                    let _g = m.lock().await;
                    held.store(true, SeqCst);
                    std::future::pending::<()>().await;
                })
            };
            common::wait_until("the task holds the lock", || held.load(SeqCst));
            let locker = {
                let m = m.clone();
                std::thread::spawn(move || *m.lock_blocking() += 1)
            };
            let permit = sem.clone().try_acquire_owned().unwrap();
            let blocked = {
                let sem = sem.clone();
                rt.spawn(async move { drop(sem.acquire_blocking().unwrap()) })
            };
            let releaser = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                drop(permit);
            });
            std::thread::sleep(Duration::from_millis(1));
            drop(rt);
            assert!(holder.join().unwrap_err().is_cancelled());
            locker.join().unwrap();
            releaser.join().unwrap();
            if let Err(e) = blocked.join() {
                assert!(e.is_cancelled(), "round {round}: {e:?}");
            }
            assert_eq!(*m.try_lock().unwrap(), 1, "round {round}");
            assert_eq!(sem.available_permits(), 1, "round {round}");
        }
    });
}

// ------------------------------------------------------------------ edge values

/// Permits at the maximum: more panics clearly (naming the limit) instead of wrapping,
/// and leaves the count as it was.
#[test]
fn semaphore_at_the_maximum_panics_instead_of_wrapping() {
    with_limit(LIMIT, || {
        let max = Semaphore::MAX_PERMITS;
        assert!(catch_unwind(|| Semaphore::new(max + 1)).is_err());
        let sem = Semaphore::new(max);
        let e = catch_unwind(AssertUnwindSafe(|| sem.add_permits(1))).unwrap_err();
        let msg = common::panic_message(&*e).unwrap_or_default();
        assert!(msg.contains("at most"), "unclear panic: {msg:?}");
        assert_eq!(sem.available_permits(), max);
        assert!(catch_unwind(AssertUnwindSafe(|| sem.add_permits(usize::MAX))).is_err());
        assert_eq!(sem.available_permits(), max);
        let p = sem.try_acquire_many(u32::MAX).unwrap();
        assert_eq!(sem.available_permits(), max - u32::MAX as usize);
        drop(p);
        assert_eq!(sem.available_permits(), max);
        assert_eq!(sem.forget_permits(usize::MAX), max);
        assert_eq!(sem.available_permits(), 0);
        // A waiter served by an overflowing add keeps its permits; the rest is usable.
        let mut w = pin!(sem.acquire_many(2));
        assert!(poll_once(w.as_mut()).is_pending());
        assert!(catch_unwind(AssertUnwindSafe(|| sem.add_permits(usize::MAX))).is_err());
        let p = match poll_once(w.as_mut()) {
            Poll::Ready(Ok(p)) => p,
            other => panic!("the waiter was not served: {other:?}"),
        };
        assert_eq!(p.num_permits(), 2);
        assert_eq!(sem.available_permits(), 0);
        assert!(sem.try_acquire().is_err());
        sem.add_permits(1);
        assert!(sem.try_acquire().is_ok());
        drop(p);
        assert_eq!(sem.available_permits(), 3);
    });
}

/// `oneshot::Sender::closed()` awaited by a task completes when the receiver's fiber
/// is aborted at a random moment (the receiver dropped by the unwind), and `send`
/// after that gives the value back.
#[test]
fn oneshot_sender_closed_sees_an_aborted_receiver_fiber() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0x3141_5926_5358_9793);
        for round in 0..200 {
            let (mut tx, rx) = oneshot::channel::<u32>();
            let f = fiber(&rt, move || rx.recv_blocking().ok());
            let waiter = rt.spawn(async move {
                tx.closed().await;
                tx
            });
            random_pause(&mut rng);
            f.abort();
            assert!(f.join().unwrap_err().is_cancelled(), "round {round}");
            let tx = waiter.join().unwrap();
            assert!(tx.is_closed());
            assert_eq!(tx.send(5), Err(5));
        }
    });
}

/// watch receivers cloned or subscribed after the sender is gone: a clone keeps the
/// change its original had not seen (reported once by `changed`, then `Err`);
/// `has_changed` is `Err` once closed, as tokio's.
#[test]
fn watch_receivers_cloned_after_close() {
    with_limit(LIMIT, || {
        let (tx, rx) = watch::channel(1);
        let late = tx.subscribe();
        tx.send(2).unwrap();
        drop(tx);
        for mut r in [rx.clone(), late] {
            assert!(r.has_changed().is_err());
            assert!(matches!(poll_once(pin!(r.changed())), Poll::Ready(Ok(()))));
            assert_eq!(*r.borrow_and_update(), 2);
            assert!(matches!(poll_once(pin!(r.changed())), Poll::Ready(Err(_))));
            let mut c = r.clone();
            assert!(matches!(poll_once(pin!(c.changed())), Poll::Ready(Err(_))));
        }
        drop(rx);
    });
}

// ------------------------------------------------- user code under a wait-list lock

const CHILD: &str = "WEFT_REVIEW_S26_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "broadcast_clone_reenters" => child_broadcast_clone_reenters(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

/// A broadcast value whose `Clone` asks its own channel how many receivers it has.
struct Reenter(Arc<std::sync::OnceLock<broadcast::Sender<Reenter>>>);

impl Clone for Reenter {
    fn clone(&self) -> Reenter {
        if let Some(tx) = self.0.get() {
            let _ = tx.receiver_count();
        }
        Reenter(self.0.clone())
    }
}

fn child_broadcast_clone_reenters() {
    let cell = Arc::new(std::sync::OnceLock::new());
    let (tx, mut a) = broadcast::channel::<Reenter>(2);
    let _b = tx.subscribe();
    cell.set(tx.clone()).ok().unwrap();
    tx.send(Reenter(cell.clone())).ok().unwrap();
    // Two receivers: the first one clones the value, under the channel's lock.
    let _v = a.try_recv().ok().unwrap();
}

/// Found in review (session 26): `broadcast::Receiver::recv` and `try_recv` ran `T::clone`
/// under the channel's wait-list lock (a spin lock), so a `Clone` that touched the same
/// channel (`receiver_count` here) spun for ever on the lock its own receive held. tokio
/// clones under the slot's read lock only. Since session 27 a value sent to several
/// receivers sits behind an `Arc` and each receiver clones it after the lock.
#[test]
fn broadcast_clone_that_touches_its_channel_does_not_hang() {
    let out = common::child::run(
        "child_process_entry",
        &[(CHILD, "broadcast_clone_reenters")],
        Duration::from_secs(5),
    );
    out.assert_finished();
}
