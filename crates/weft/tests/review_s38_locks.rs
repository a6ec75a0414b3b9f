//! Review session 38 of weft's locks and semaphores (`sync::Mutex`, `RwLock`,
//! `Semaphore`, `Notify` and the wait list under them), attacked from safe code only:
//! extreme and zero permit counts, `forget` and `close` with waiters of every context,
//! acquires dropped at every point of their life (including right after a release
//! handed them their permits), FIFO order of mixed-size waiters, owned guards dropped on
//! other threads under contention, writers cancelled in front of readers, `try_*`
//! racing releases, `notify_waiters` racing `notified()` creation and drops, fibers
//! aborted while blocked, runtimes dropped from another thread under waiters of every
//! context, panics with guards held, wakers that call back into the primitive that
//! wakes them, an overflowing `add_permits` (its panic under the wait-list lock and the
//! lock depth after it), and a mixed-context stress of one semaphore with cancellations
//! that counts holders and permits. Every test runs under a watchdog.

#![allow(clippy::async_yields_async)]

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{fiber_on, join_within, with_limit, workers, Rng};
use weft::sync::{
    AcquireError, Mutex, Notify, OwnedSemaphorePermit, RwLock, Semaphore, SemaphorePermit,
    TryAcquireError,
};

const LIMIT: Duration = Duration::from_secs(15);

// ---------------------------------------------------------------- helpers

fn poll_once<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

/// The permit a hand-polled acquire got, or a panic naming `what`.
fn served<'a>(
    p: Poll<Result<SemaphorePermit<'a>, AcquireError>>,
    what: &str,
) -> SemaphorePermit<'a> {
    match p {
        Poll::Ready(Ok(p)) => p,
        Poll::Ready(Err(e)) => panic!("{what}: failed: {e}"),
        Poll::Pending => panic!("{what}: still pending"),
    }
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

/// Waits (sleeping 1 ms) until `cond`, failing with "hang" after 5 s.
fn soon(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "hang: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Joins a plain thread within `secs`, re-raising its panic.
fn thread_within<T: Send + 'static>(h: std::thread::JoinHandle<T>, secs: u64) -> T {
    common::thread_within(h, secs)
}

// ------------------------------------------------- counts at the edges, and zero

/// `new` at and beyond the maximum, `add_permits(0)`, `acquire_many(0)` (ready at once
/// with nothing taken, even behind a waiter, an error once closed) and
/// `acquire_many(u32::MAX)` waiting in line, absorbing, served and closed.
#[test]
fn semaphore_extreme_and_zero_requests() {
    with_limit(LIMIT, || {
        let max = Semaphore::MAX_PERMITS;
        assert_eq!(Semaphore::new(max).available_permits(), max);
        assert!(catch_unwind(|| Semaphore::new(max + 1)).is_err());
        assert!(catch_unwind(|| Semaphore::new(usize::MAX)).is_err());

        // Zero: nothing taken, nothing given, nobody overtaken.
        let sem = Semaphore::new(0);
        sem.add_permits(0);
        assert_eq!(sem.available_permits(), 0);
        let z = served(poll_once(pin!(sem.acquire_many(0))), "acquire_many(0)");
        assert_eq!(z.num_permits(), 0);
        drop(z);
        assert_eq!(sem.available_permits(), 0);
        let mut w = pin!(sem.acquire_many(2));
        assert!(poll_once(w.as_mut()).is_pending());
        sem.add_permits(1); // absorbed by `w`
        assert_eq!(sem.available_permits(), 0);
        let z = served(
            poll_once(pin!(sem.acquire_many(0))),
            "acquire_many(0) behind a waiter",
        );
        assert_eq!(z.num_permits(), 0);
        assert_eq!(sem.try_acquire_many(0).unwrap().num_permits(), 0);
        drop(z);
        assert!(
            poll_once(w.as_mut()).is_pending(),
            "a zero acquire gave nothing"
        );
        sem.add_permits(1);
        let p = served(poll_once(w.as_mut()), "the waiter of two");
        assert_eq!(p.num_permits(), 2);
        drop(p);
        assert_eq!(sem.available_permits(), 2);
        sem.close();
        assert!(matches!(
            poll_once(pin!(sem.acquire_many(0))),
            Poll::Ready(Err(_))
        ));
        assert_eq!(
            sem.try_acquire_many(0).unwrap_err(),
            TryAcquireError::Closed
        );
        assert!(sem.acquire_many_blocking(0).is_err());

        // u32::MAX from a full semaphore: taken and given back exactly.
        let sem = Semaphore::new(max);
        let p = served(
            poll_once(pin!(sem.acquire_many(u32::MAX))),
            "u32::MAX of max",
        );
        assert_eq!(sem.available_permits(), max - u32::MAX as usize);
        drop(p);
        assert_eq!(sem.available_permits(), max);

        // u32::MAX waiting: absorbs, holds back a small waiter, served, passes on.
        let sem = Semaphore::new(5);
        let mut big = pin!(sem.acquire_many(u32::MAX));
        assert!(poll_once(big.as_mut()).is_pending());
        assert_eq!(sem.available_permits(), 0, "the five absorbed");
        let mut small = pin!(sem.acquire());
        assert!(poll_once(small.as_mut()).is_pending());
        sem.add_permits(u32::MAX as usize - 6);
        assert!(poll_once(big.as_mut()).is_pending(), "one short");
        assert!(
            poll_once(small.as_mut()).is_pending(),
            "held back for the head"
        );
        assert!(sem.try_acquire().is_err());
        sem.add_permits(3);
        let p = served(poll_once(big.as_mut()), "u32::MAX");
        assert_eq!(p.num_permits(), u32::MAX as usize);
        let s = served(poll_once(small.as_mut()), "the small waiter");
        assert_eq!(sem.available_permits(), 1);
        drop((p, s));
        assert_eq!(sem.available_permits(), u32::MAX as usize + 2);

        // u32::MAX waiting when the semaphore closes: what it absorbed goes back.
        let sem = Semaphore::new(7);
        let mut big = pin!(sem.acquire_many(u32::MAX));
        assert!(poll_once(big.as_mut()).is_pending());
        sem.add_permits(1000);
        assert_eq!(sem.available_permits(), 0);
        sem.close();
        assert!(matches!(poll_once(big.as_mut()), Poll::Ready(Err(_))));
        assert_eq!(sem.available_permits(), 1007);
    });
}

/// Forgotten permits stay out for good, also across `close`; `close` fails waiters
/// and later acquires but `add_permits` still adds, `forget_permits` still removes, and
/// held permits (borrowed and owned) come back to the count after it.
#[test]
fn forget_then_close_keeps_the_count_exact() {
    with_limit(LIMIT, || {
        let sem = Arc::new(Semaphore::new(10));
        sem.try_acquire_many(3).unwrap().forget();
        sem.clone().try_acquire_many_owned(2).unwrap().forget();
        assert_eq!(sem.available_permits(), 5);
        let held = sem.try_acquire_many(2).unwrap();
        let owned = sem.clone().try_acquire_many_owned(3).unwrap();
        assert_eq!(sem.available_permits(), 0);
        let mut w = pin!(sem.acquire_many(4));
        assert!(poll_once(w.as_mut()).is_pending());
        drop(held); // absorbed by `w`
        assert_eq!(sem.available_permits(), 0);
        sem.close();
        assert!(matches!(poll_once(w.as_mut()), Poll::Ready(Err(_))));
        assert_eq!(sem.available_permits(), 2, "the absorbed two came back");
        let t = std::thread::spawn(move || drop(owned));
        thread_within(t, 5);
        assert_eq!(sem.available_permits(), 5);
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
        sem.add_permits(4);
        assert_eq!(sem.available_permits(), 9);
        assert_eq!(sem.forget_permits(6), 6);
        assert_eq!(sem.available_permits(), 3);
        assert!(sem.is_closed());
    });
}

// ------------------------------------------------------------- close, every context

/// Waiters of every context (a task, a fiber, a plain thread and a hand-polled future)
/// queued on an empty semaphore, the first absorbing some permits: `close` fails every
/// one of them, the absorbed permits go back, and permits released afterwards stay in
/// the count (none is handed to a closed waiter).
#[test]
fn close_fails_waiters_of_every_context_and_keeps_later_permits() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        for round in 0..20 {
            let sem = Arc::new(Semaphore::new(0));
            let queued = Arc::new(AtomicUsize::new(0));
            let mut hand = Box::pin(sem.clone().acquire_many_owned(2));
            assert!(poll_once(hand.as_mut()).is_pending());
            sem.add_permits(1); // the hand-polled waiter, first in line, absorbs it
            let task = {
                let (s, q) = (sem.clone(), queued.clone());
                rt.spawn(async move {
                    q.fetch_add(1, SeqCst);
                    s.acquire_many(3).await.map(|p| p.num_permits())
                })
            };
            let fiber = {
                let (s, q) = (sem.clone(), queued.clone());
                fiber_on(&rt, move || {
                    q.fetch_add(1, SeqCst);
                    s.acquire_many_blocking(4).map(|p| p.num_permits())
                })
            };
            let thread = {
                let (s, q) = (sem.clone(), queued.clone());
                std::thread::spawn(move || {
                    q.fetch_add(1, SeqCst);
                    s.acquire_many_blocking(5).map(|p| p.num_permits())
                })
            };
            soon("the waiters started", || queued.load(SeqCst) == 3);
            std::thread::sleep(Duration::from_millis(2));
            if round % 2 == 0 {
                sem.add_permits(1); // the hand-polled waiter is complete: off the list
            }
            sem.close();
            assert!(join_within(task, 5).unwrap().is_err(), "round {round}");
            assert!(join_within(fiber, 5).unwrap().is_err(), "round {round}");
            assert!(thread_within(thread, 5).is_err(), "round {round}");
            let absorbed = if round % 2 == 0 { 2 } else { 1 };
            match poll_once(hand.as_mut()) {
                Poll::Ready(Ok(p)) => {
                    assert_eq!(round % 2, 0, "served without its permits");
                    assert_eq!(sem.available_permits(), 0);
                    drop(p);
                }
                Poll::Ready(Err(_)) => assert_eq!(round % 2, 1),
                Poll::Pending => panic!("round {round}: a hand-polled waiter missed close"),
            }
            assert_eq!(sem.available_permits(), absorbed, "round {round}");
            sem.add_permits(7);
            assert_eq!(sem.available_permits(), absorbed + 7, "round {round}");
        }
    });
}

// ------------------------------------------------ acquires dropped at every point

/// Three waiters (of 2, 1 and 3 permits) in line; the middle one or the first is
/// dropped at each point of its life: never polled, queued, having absorbed part,
/// complete but not yet polled, and served with its permit dropped. After each case
/// every permit handed out ends back in the count and the others are served in order.
#[test]
fn acquires_dropped_at_every_point_lose_no_permit() {
    with_limit(LIMIT, || {
        for victim in 0..3usize {
            for point in 0..5 {
                let sem = Semaphore::new(0);
                let sizes = [2u32, 1, 3];
                let mut futs: Vec<Option<Pin<Box<_>>>> = sizes
                    .iter()
                    .map(|&n| Some(Box::pin(sem.acquire_many(n))))
                    .collect();
                let ctx = format!("victim {victim}, point {point}");
                // Point 0: dropped before its first poll.
                if point == 0 {
                    futs[victim] = None;
                }
                for f in futs.iter_mut().flatten() {
                    assert!(poll_once(f.as_mut()).is_pending(), "{ctx}");
                }
                if point == 1 {
                    futs[victim] = None;
                }
                // Release the victim's need minus one, one permit at a time, so that
                // it (or those before it) absorb.
                let before: u32 = sizes[..victim].iter().sum();
                let mut added = 0u32;
                let target = before + sizes[victim] - 1;
                while added < target {
                    sem.add_permits(1);
                    added += 1;
                }
                if point == 2 {
                    futs[victim] = None;
                }
                sem.add_permits(1);
                added += 1;
                if point == 3 {
                    // Complete (or, if it was dropped earlier, the next one absorbed).
                    futs[victim] = None;
                }
                let mut permits = Vec::new();
                if point == 4 {
                    for (i, f) in futs.iter_mut().enumerate().take(victim + 1) {
                        let mut f = f.take().unwrap();
                        let p = served(poll_once(f.as_mut()), &format!("{ctx} #{i}"));
                        assert_eq!(p.num_permits(), sizes[i] as usize, "{ctx}");
                        if i == victim {
                            // The victim's permits dropped: they go to the next in line.
                            drop(p);
                        } else {
                            permits.push(p);
                        }
                    }
                }
                // Top up to `total` released in all: the others need `total` less the
                // victim's share, which comes back to the count.
                let total: u32 = sizes.iter().sum();
                sem.add_permits((total - added) as usize);
                for (i, f) in futs.iter_mut().enumerate() {
                    if let Some(mut f) = f.take() {
                        let p = match poll_once(f.as_mut()) {
                            Poll::Ready(Ok(p)) => p,
                            Poll::Ready(Err(_)) => panic!("{ctx}: waiter {i} failed"),
                            Poll::Pending => panic!("{ctx}: waiter {i} not served"),
                        };
                        assert_eq!(p.num_permits(), sizes[i] as usize, "{ctx}");
                        permits.push(p);
                    }
                }
                let held: usize = permits.iter().map(|p| p.num_permits()).sum();
                assert_eq!(held, (total - sizes[victim]) as usize, "{ctx}");
                assert_eq!(
                    sem.available_permits(),
                    sizes[victim] as usize,
                    "{ctx}: permits lost or made"
                );
                drop(permits);
                assert_eq!(sem.available_permits(), total as usize, "{ctx}");
            }
        }
    });
}

/// Waiters of 5, 1, 3 and 1 permits in line, fed one permit at a time: each completes
/// exactly when everything before it and its own need have been released, never
/// earlier (the head's big request is not bypassed by the small ones behind it), and
/// `try_acquire` fails while anyone waits.
#[test]
fn mixed_size_waiters_are_served_strictly_in_order() {
    with_limit(LIMIT, || {
        let sem = Semaphore::new(0);
        let sizes = [5u32, 1, 3, 1];
        let mut futs: Vec<_> = sizes
            .iter()
            .map(|&n| Box::pin(sem.acquire_many(n)))
            .collect();
        for f in &mut futs {
            assert!(poll_once(f.as_mut()).is_pending());
        }
        let mut done = [false; 4];
        let mut permits = Vec::new();
        let mut released = 0u32;
        let total: u32 = sizes.iter().sum();
        while released < total {
            sem.add_permits(1);
            released += 1;
            for (i, f) in futs.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                let due: u32 = sizes[..=i].iter().sum();
                match poll_once(f.as_mut()) {
                    Poll::Ready(Ok(p)) => {
                        assert_eq!(released, due, "waiter {i} served after {released}");
                        done[i] = true;
                        permits.push(p);
                    }
                    Poll::Ready(Err(_)) => panic!("closed?"),
                    Poll::Pending => assert!(released < due, "waiter {i} passed over"),
                }
            }
            if done.iter().any(|d| !d) {
                assert!(sem.try_acquire().is_err(), "try_acquire overtook a waiter");
                assert_eq!(sem.available_permits(), 0);
            }
        }
        assert!(done.iter().all(|&d| d));
        drop(permits);
        assert_eq!(sem.available_permits(), total as usize);
    });
}

/// The same across contexts: a fiber's request of 5 at the head of the line (it has
/// absorbed the one free permit) is not bypassed by the 1-permit requests of a plain
/// thread and a task queued behind it while permits trickle in; it is served first,
/// and the small ones after it.
#[test]
fn big_head_request_of_a_fiber_is_not_bypassed_by_small_ones() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        for round in 0..10 {
            let sem = Arc::new(Semaphore::new(1));
            let seq = Arc::new(AtomicUsize::new(0));
            let big = {
                let (s, q) = (sem.clone(), seq.clone());
                fiber_on(&rt, move || {
                    let p = s.acquire_many_blocking(5).unwrap();
                    q.fetch_add(1, SeqCst) + 10 * (p.num_permits() != 5) as usize
                })
            };
            soon("the big request queued", || sem.available_permits() == 0);
            let thread = {
                let (s, q) = (sem.clone(), seq.clone());
                std::thread::spawn(move || {
                    let _p = s.acquire_blocking().unwrap();
                    q.fetch_add(1, SeqCst)
                })
            };
            let task = {
                let (s, q) = (sem.clone(), seq.clone());
                rt.spawn(async move {
                    let _p = s.acquire().await.unwrap();
                    q.fetch_add(1, SeqCst)
                })
            };
            std::thread::sleep(Duration::from_millis(3));
            for _ in 0..3 {
                sem.add_permits(1);
                std::thread::sleep(Duration::from_millis(1));
                assert_eq!(
                    seq.load(SeqCst),
                    0,
                    "round {round}: a small request got in first"
                );
                assert!(sem.try_acquire().is_err(), "round {round}");
            }
            sem.add_permits(1);
            assert_eq!(
                join_within(big, 5).unwrap(),
                0,
                "round {round}: the big one was not first"
            );
            let a = thread_within(thread, 5);
            let b = join_within(task, 5).unwrap();
            assert_eq!(a.min(b), 1, "round {round}");
            assert_eq!(a.max(b), 2, "round {round}");
            assert_eq!(sem.available_permits(), 5, "round {round}");
        }
    });
}

/// Wakers that call back into the primitive that wakes them: a semaphore waiter's
/// `wake` adds a permit (taking the wait-list lock, since another waiter is queued), a
/// replaced waker's `drop` adds one too, a `Notify` waiter's `wake` notifies again and
/// a closed semaphore's waiter's `wake` polls a fresh acquire. Each must run after the
/// wait-list lock is released (the lock is a spin lock: a wake under it would spin for
/// ever, which the watchdog reports).
#[test]
fn wakers_that_reenter_the_primitive_do_not_deadlock() {
    with_limit(LIMIT, || {
        let sem = Arc::new(Semaphore::new(0));
        let woken = Arc::new(AtomicUsize::new(0));
        let mut a = Box::pin(sem.clone().acquire_owned());
        let mut b = Box::pin(sem.clone().acquire_owned());
        // `a`'s first waker adds a permit when it is dropped (replaced at the next poll).
        let dropper = {
            let s = sem.clone();
            let guard = common::OnDrop(move || s.add_permits(1));
            common::fn_waker(move || {
                let _ = &guard;
            })
        };
        assert!(a
            .as_mut()
            .poll(&mut Context::from_waker(&dropper))
            .is_pending());
        drop(dropper);
        assert!(poll_once(b.as_mut()).is_pending());
        // `a`'s second waker adds a permit when woken (for `b`, queued: the locked path).
        let adder = {
            let (s, w) = (sem.clone(), woken.clone());
            common::fn_waker(move || {
                w.fetch_add(1, SeqCst);
                s.add_permits(1);
            })
        };
        // Re-polled with a new waker: the old one is dropped, its permit goes to `a`.
        match a.as_mut().poll(&mut Context::from_waker(&adder)) {
            Poll::Ready(Ok(p)) => drop(p), // served by the dropped waker's permit: fine
            Poll::Ready(Err(_)) => panic!("closed?"),
            Poll::Pending => {
                sem.add_permits(1); // `a` served: its waker adds one for `b`
                assert_eq!(woken.load(SeqCst), 1, "a's waker ran once");
                let pa = match poll_once(a.as_mut()) {
                    Poll::Ready(Ok(p)) => p,
                    _ => panic!("a not served"),
                };
                drop(pa);
            }
        }
        let pb = match poll_once(b.as_mut()) {
            Poll::Ready(Ok(p)) => p,
            _ => panic!("b not served by the permit a's waker added"),
        };
        drop(pb);
        assert!(sem.available_permits() >= 2);

        // Notify: the first waiter's wake notifies again, for the second.
        let n = Arc::new(Notify::new());
        let mut x = Box::pin(n.notified());
        let mut y = Box::pin(n.notified());
        let again = {
            let n = n.clone();
            common::fn_waker(move || n.notify_one())
        };
        assert!(x
            .as_mut()
            .poll(&mut Context::from_waker(&again))
            .is_pending());
        assert!(poll_once(y.as_mut()).is_pending());
        n.notify_one();
        assert!(poll_once(x.as_mut()).is_ready());
        assert!(
            poll_once(y.as_mut()).is_ready(),
            "the re-entrant notify reached y"
        );

        // Close: a waiter's wake polls a fresh acquire (the lock again) of the closed
        // semaphore, which fails at once.
        let sem = Arc::new(Semaphore::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let mut c = Box::pin(sem.clone().acquire_owned());
        let poller = {
            let (s, f) = (sem.clone(), failed.clone());
            common::fn_waker(move || {
                let r = poll_once(pin!(s.clone().acquire_many_owned(3)));
                f.store(matches!(r, Poll::Ready(Err(_))), SeqCst);
            })
        };
        assert!(c
            .as_mut()
            .poll(&mut Context::from_waker(&poller))
            .is_pending());
        sem.close();
        assert!(failed.load(SeqCst), "the re-entrant acquire saw the close");
        assert!(matches!(poll_once(c.as_mut()), Poll::Ready(Err(_))));
    });
}

// ----------------------------------------- owned guards moved to other threads

/// Owned guards and permits taken by tasks and fibers are moved to plain threads and
/// dropped there while other tasks, fibers and threads wait for the same lock: the
/// mutex's count is exact, the rwlock's writers stay exclusive, the semaphore never has
/// more holders than permits, and everything ends free.
#[test]
fn owned_guards_dropped_on_other_threads_under_contention() {
    with_limit(LIMIT, || {
        const ROUNDS: usize = 150;
        let rt = workers(2);
        let m = Arc::new(Mutex::new(0u64));
        let l = Arc::new(RwLock::new((0u64, 0u64)));
        let sem = Arc::new(Semaphore::new(3));
        let holders = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        // The droppers: plain threads that finish what tasks and fibers hand them.
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let droppers: Vec<_> = (0..2)
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || loop {
                    let job = rx.lock().unwrap().recv_timeout(Duration::from_secs(10));
                    match job {
                        Ok(job) => job(),
                        Err(_) => return,
                    }
                })
            })
            .collect();
        let mut handles = Vec::new();
        for k in 0..2 {
            let (m, l, sem, h, tx) = (
                m.clone(),
                l.clone(),
                sem.clone(),
                holders.clone(),
                tx.clone(),
            );
            handles.push(rt.spawn(async move {
                for i in 0..ROUNDS {
                    let mut g = m.clone().lock_owned().await;
                    *g += 1;
                    let mut w = l.clone().write_owned().await;
                    w.0 += 1;
                    w.1 += 1;
                    let p = sem
                        .clone()
                        .acquire_many_owned(1 + (i % 2) as u32)
                        .await
                        .unwrap();
                    let n = p.num_permits();
                    assert!(h.fetch_add(n, SeqCst) + n <= 3, "too many holders");
                    let h2 = h.clone();
                    if (i + k) % 3 == 0 {
                        let r = l.clone();
                        tx.send(Box::new(move || {
                            drop(w);
                            let rg = r.try_read_owned();
                            drop(rg);
                            h2.fetch_sub(n, SeqCst);
                            drop(p);
                            drop(g);
                        }))
                        .unwrap();
                    } else {
                        drop(w);
                        h.fetch_sub(n, SeqCst);
                        drop(p);
                        drop(g);
                    }
                    if i.is_multiple_of(5) {
                        weft::task::yield_now().await;
                    }
                }
            }));
        }
        for k in 0..2 {
            let (m, l, sem, h, tx) = (
                m.clone(),
                l.clone(),
                sem.clone(),
                holders.clone(),
                tx.clone(),
            );
            handles.push(fiber_on(&rt, move || {
                for i in 0..ROUNDS {
                    let r = l.clone();
                    let g = {
                        let mut g = m.lock_blocking();
                        *g += 1;
                        drop(g);
                        weft::wait(r.clone().read_owned())
                    };
                    assert_eq!(g.0, g.1, "a reader saw a half write");
                    let p =
                        sem.clone().try_acquire_many_owned(1).ok().or_else(|| {
                            Some(weft::wait(sem.clone().acquire_many_owned(1)).unwrap())
                        });
                    let p = p.unwrap();
                    assert!(h.fetch_add(1, SeqCst) < 3, "too many holders");
                    let h2 = h.clone();
                    if (i + k) % 2 == 0 {
                        tx.send(Box::new(move || {
                            h2.fetch_sub(1, SeqCst);
                            drop(p);
                            drop(g);
                        }))
                        .unwrap();
                    } else {
                        h.fetch_sub(1, SeqCst);
                        drop(p);
                        drop(g);
                    }
                }
            }));
        }
        // Plain threads contending too.
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (m, l, sem, h) = (m.clone(), l.clone(), sem.clone(), holders.clone());
                std::thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        *m.lock_blocking() += 1;
                        {
                            let mut w = l.write_blocking();
                            w.0 += 1;
                            w.1 += 1;
                        }
                        let p = sem.acquire_many_blocking(2).unwrap();
                        assert!(h.fetch_add(2, SeqCst) + 2 <= 3, "too many holders");
                        h.fetch_sub(2, SeqCst);
                        drop(p);
                    }
                })
            })
            .collect();
        for h in handles {
            join_within(h, 12).unwrap();
        }
        for t in threads {
            thread_within(t, 12);
        }
        drop(tx);
        for d in droppers {
            thread_within(d, 12);
        }
        assert_eq!(
            *m.try_lock().expect("the mutex ends free"),
            6 * ROUNDS as u64
        );
        let g = l.try_write().expect("the rwlock ends free");
        assert_eq!(*g, (4 * ROUNDS as u64, 4 * ROUNDS as u64));
        assert_eq!(sem.available_permits(), 3);
        assert_eq!(holders.load(SeqCst), 0);
    });
}

// ------------------------------------------------------------------ rwlock

/// A writer task queued behind a reader, with a task, a fiber and a thread waiting to
/// read behind it, is aborted before or after the reader leaves (so sometimes just
/// after it was handed the lock): every reader gets in, and the lock ends free.
#[test]
fn rwlock_writer_task_aborted_lets_the_readers_behind_it_in() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0x51f1_5eed_0bad_cafe);
        for round in 0..60 {
            let l = Arc::new(RwLock::new(0u32));
            let r0 = l.try_read().unwrap();
            let writer = {
                let l = l.clone();
                rt.spawn(async move {
                    let mut g = l.write_owned().await;
                    *g += 1;
                    weft::task::yield_now().await;
                })
            };
            soon("the writer queued", || l.try_read().is_err());
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
                fiber_on(&rt, move || {
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
                writer.abort();
            }
            let wrote = match join_within(writer, 5) {
                Ok(()) => 1,
                Err(e) => {
                    assert!(e.is_cancelled(), "round {round}: {e:?}");
                    0
                }
            };
            thread_within(t, 5);
            join_within(k, 5).unwrap();
            join_within(f, 5).unwrap();
            assert_eq!(reads.load(SeqCst), 3, "round {round}");
            let g = l.try_write().expect("the lock is free at the end");
            assert!(*g <= 1 && (*g == wrote || wrote == 0), "round {round}");
        }
    });
}

/// Readers and writers of every context, with `try_read`/`try_write` racing the
/// releases: a writer is always alone (no reader count while it writes), a reader
/// never sees a half-done write, and the lock ends free with every write counted.
#[test]
fn rwlock_every_context_with_try_racing_releases() {
    with_limit(LIMIT, || {
        const ROUNDS: usize = 300;
        let rt = workers(2);
        let l = Arc::new(RwLock::new((0u64, 0u64)));
        let readers = Arc::new(AtomicUsize::new(0));
        let writing = Arc::new(AtomicBool::new(false));
        let writes = Arc::new(AtomicUsize::new(0));
        let read_check = {
            let (readers, writing) = (readers.clone(), writing.clone());
            move |v: &(u64, u64)| {
                readers.fetch_add(1, SeqCst);
                assert!(!writing.load(SeqCst), "a reader beside a writer");
                assert_eq!(v.0, v.1, "a half write seen");
                readers.fetch_sub(1, SeqCst);
            }
        };
        let write_do = {
            let (readers, writing, writes) = (readers.clone(), writing.clone(), writes.clone());
            move |v: &mut (u64, u64)| {
                assert!(!writing.swap(true, SeqCst), "two writers");
                assert_eq!(readers.load(SeqCst), 0, "a writer beside readers");
                v.0 += 1;
                std::hint::spin_loop();
                v.1 += 1;
                writes.fetch_add(1, SeqCst);
                writing.store(false, SeqCst);
            }
        };
        let mut handles = Vec::new();
        for k in 0..2 {
            let (l, rc, wd) = (l.clone(), read_check.clone(), write_do.clone());
            handles.push(rt.spawn(async move {
                for i in 0..ROUNDS {
                    if (i + k) % 4 == 0 {
                        wd(&mut *l.write().await);
                    } else if let Ok(g) = l.try_read() {
                        rc(&g);
                    } else {
                        rc(&*l.read().await);
                    }
                    if i.is_multiple_of(8) {
                        weft::task::yield_now().await;
                    }
                }
            }));
        }
        for k in 0..2 {
            let (l, rc, wd) = (l.clone(), read_check.clone(), write_do.clone());
            handles.push(fiber_on(&rt, move || {
                for i in 0..ROUNDS {
                    if (i + k) % 5 == 0 {
                        match l.try_write() {
                            Ok(mut g) => wd(&mut g),
                            Err(_) => wd(&mut l.write_blocking()),
                        }
                    } else {
                        rc(&l.read_blocking());
                    }
                }
            }));
        }
        let threads: Vec<_> = (0..2)
            .map(|k| {
                let (l, rc, wd) = (l.clone(), read_check.clone(), write_do.clone());
                std::thread::spawn(move || {
                    for i in 0..ROUNDS {
                        if (i + k) % 3 == 0 {
                            wd(&mut l
                                .clone()
                                .try_write_owned()
                                .unwrap_or_else(|_| weft::wait(l.clone().write_owned())));
                        } else {
                            rc(&l.read_blocking());
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            join_within(h, 12).unwrap();
        }
        for t in threads {
            thread_within(t, 12);
        }
        let g = l.try_write().expect("the lock ends free");
        assert_eq!(g.0, writes.load(SeqCst) as u64);
        assert_eq!(g.0, g.1);
    });
}

// -------------------------------------------------------------- try_* racing

/// `try_lock` and `try_acquire_many` spinning on plain threads while blocking holders
/// on other threads release: a `try_` that succeeds is the only holder (mutex) or within
/// the permits (semaphore), and the counts end exact.
#[test]
fn try_variants_racing_releases_never_double_grant() {
    with_limit(LIMIT, || {
        const ROUNDS: usize = 3000;
        let m = Arc::new(Mutex::new(0u64));
        let inside = Arc::new(AtomicUsize::new(0));
        let sem = Arc::new(Semaphore::new(3));
        let holders = Arc::new(AtomicUsize::new(0));
        let got = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|k: usize| {
                let (m, inside, sem, holders, got) = (
                    m.clone(),
                    inside.clone(),
                    sem.clone(),
                    holders.clone(),
                    got.clone(),
                );
                std::thread::spawn(move || {
                    for i in 0..ROUNDS {
                        let g = if k.is_multiple_of(2) {
                            m.try_lock().ok()
                        } else {
                            Some(m.lock_blocking())
                        };
                        if let Some(mut g) = g {
                            assert_eq!(inside.fetch_add(1, SeqCst), 0, "two mutex holders");
                            *g += 1;
                            got.fetch_add(1, SeqCst);
                            inside.fetch_sub(1, SeqCst);
                        }
                        let n = 1 + ((i + k) % 3) as u32;
                        let p = if k.is_multiple_of(2) {
                            sem.try_acquire_many(n).ok()
                        } else {
                            Some(sem.acquire_many_blocking(n).unwrap())
                        };
                        if let Some(p) = p {
                            let now = holders.fetch_add(n as usize, SeqCst) + n as usize;
                            assert!(now <= 3, "{now} permits held of 3");
                            holders.fetch_sub(n as usize, SeqCst);
                            drop(p);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            thread_within(t, 12);
        }
        assert_eq!(*m.try_lock().unwrap(), got.load(SeqCst) as u64);
        assert_eq!(sem.available_permits(), 3);
    });
}

// ------------------------------------------------------------------ notify

/// A plain thread calls `notify_waiters` (and now and then `notify_one`) over and over
/// while another makes `notified()` futures, polls some, and drops some at random: a
/// future made before a `notify_waiters` call started is complete once that call has
/// returned (one poll with a no-op waker must find it so, registered or not).
#[test]
fn notify_waiters_racing_creation_and_drops() {
    with_limit(LIMIT, || {
        let n = Arc::new(Notify::new());
        let started = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let notifier = {
            let (n, s, f, stop) = (n.clone(), started.clone(), finished.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(SeqCst) {
                    s.fetch_add(1, SeqCst);
                    n.notify_waiters();
                    f.fetch_add(1, SeqCst);
                    i += 1;
                    if i.is_multiple_of(7) {
                        n.notify_one();
                    }
                    if i.is_multiple_of(3) {
                        std::thread::yield_now();
                    }
                }
            })
        };
        // Two creators, racing each other's registrations and drops too.
        let creators: Vec<_> = (0..2u64)
            .map(|k| {
                let (n, started, finished) = (n.clone(), started.clone(), finished.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(0x1234_5678_9abc_def1 + k);
                    let deadline = Instant::now() + Duration::from_millis(500);
                    let mut checked = 0u64;
                    // Futures kept for a while: (future, calls started when it was made).
                    let mut kept: Vec<(Pin<Box<weft::sync::Notified<'_>>>, usize)> = Vec::new();
                    while Instant::now() < deadline {
                        let mut f = Box::pin(n.notified());
                        let s = started.load(SeqCst);
                        match rng.next() % 4 {
                            0 => drop(f),
                            1 => {
                                if poll_once(f.as_mut()).is_pending()
                                    && rng.next().is_multiple_of(2)
                                {
                                    drop(f); // a registered waiter leaves
                                } else {
                                    kept.push((f, s));
                                }
                            }
                            _ => kept.push((f, s)),
                        }
                        // Every kept future whose call has returned must be complete.
                        let fin = finished.load(SeqCst);
                        kept.retain_mut(|(f, s)| {
                            if fin > *s {
                                assert!(
                                    poll_once(f.as_mut()).is_ready(),
                                    "a notified() made before notify_waiters #{} missed it",
                                    *s + 1
                                );
                                checked += 1;
                                false
                            } else {
                                if rng.next().is_multiple_of(3) {
                                    let _ = poll_once(f.as_mut());
                                }
                                true
                            }
                        });
                        if kept.len() > 64 {
                            drop(kept.remove(0));
                        }
                    }
                    // Wait for one more call to finish: every future still kept was
                    // made before it started.
                    let s = started.load(SeqCst);
                    soon("one more notify_waiters", || finished.load(SeqCst) > s);
                    for (mut f, _) in kept {
                        assert!(poll_once(f.as_mut()).is_ready(), "missed a last call");
                        checked += 1;
                    }
                    checked
                })
            })
            .collect();
        let checked: Vec<u64> = creators.into_iter().map(|t| thread_within(t, 10)).collect();
        stop.store(true, SeqCst);
        thread_within(notifier, 5);
        for c in checked {
            assert!(c > 100, "too few futures checked: {c}");
        }
    });
}

/// A `notify_one` handed to a task's waiter, whose task is then cancelled by the
/// runtime's drop (from another thread) before it could see it, goes on to the plain
/// thread waiting behind it (if the task ran first, it passes the turn on itself): the
/// thread always wakes, no notification is lost with the runtime.
#[test]
fn notify_one_handed_to_a_task_cancelled_by_runtime_drop_is_passed_on() {
    with_limit(LIMIT, || {
        for round in 0..15 {
            let rt = workers(2);
            let n = Arc::new(Notify::new());
            let got = Arc::new(AtomicUsize::new(0));
            let first = {
                let (n, got) = (n.clone(), got.clone());
                rt.spawn(async move {
                    n.notified().await;
                    // Served before the drop: pass the turn on, as the drop would have.
                    got.fetch_add(1, SeqCst);
                    n.notify_one();
                    std::future::pending::<()>().await;
                })
            };
            std::thread::sleep(Duration::from_millis(3));
            let thread = {
                let (n, got) = (n.clone(), got.clone());
                std::thread::spawn(move || {
                    n.notified_blocking();
                    got.fetch_add(1, SeqCst);
                })
            };
            std::thread::sleep(Duration::from_millis(3));
            n.notify_one();
            if round % 2 == 0 {
                std::thread::yield_now();
            }
            common::drop_within(rt, Duration::from_secs(5), "notify round");
            thread_within(thread, 5);
            drop(first);
            assert!(got.load(SeqCst) >= 1, "round {round}");
        }
    });
}

// ------------------------------------------------------- fibers aborted in each wait

/// A fiber blocked in each blocking form (`lock_blocking`, `write_blocking`,
/// `read_blocking` behind a writer, `acquire_many_blocking`, `notified_blocking`) is
/// aborted around the moment it is handed what it waits for: the next waiter (a plain
/// thread) gets it in every case, and the primitive ends free.
#[test]
fn fibers_aborted_in_each_blocking_form_pass_the_hand_off_on() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let mut rng = Rng(0xdead_beef_f00d_0001);
        for round in 0..40 {
            let kind = round % 5;
            let m = Arc::new(Mutex::new(0u32));
            let l = Arc::new(RwLock::new(0u32));
            let sem = Arc::new(Semaphore::new(0));
            let n = Arc::new(Notify::new());
            let queued = Arc::new(AtomicBool::new(false));
            let passed = Arc::new(AtomicBool::new(false));
            // What this thread holds until the hand-off.
            let mg = m.clone().try_lock_owned().unwrap();
            let lw = l.clone().try_write_owned().unwrap();
            let victim = {
                let (m, l, sem, n, q, passed) = (
                    m.clone(),
                    l.clone(),
                    sem.clone(),
                    n.clone(),
                    queued.clone(),
                    passed.clone(),
                );
                fiber_on(&rt, move || {
                    q.store(true, SeqCst);
                    match kind {
                        0 => *m.lock_blocking() += 1,
                        1 => *l.write_blocking() += 1,
                        2 => drop(l.read_blocking()),
                        3 => drop(sem.acquire_many_blocking(3).unwrap()),
                        _ => n.notified_blocking(),
                    }
                    passed.store(true, SeqCst);
                    weft::fiber::yield_now();
                })
            };
            soon("the victim started", || queued.load(SeqCst));
            std::thread::sleep(Duration::from_millis(1));
            let next = {
                let (m, l, sem, n) = (m.clone(), l.clone(), sem.clone(), n.clone());
                std::thread::spawn(move || match kind {
                    0 => *m.lock_blocking() += 10,
                    1 => *l.write_blocking() += 10,
                    2 => drop(l.read_blocking()),
                    3 => drop(sem.acquire_many_blocking(2).unwrap()),
                    _ => n.notified_blocking(),
                })
            };
            std::thread::sleep(Duration::from_millis(1));
            let release = {
                let (sem, n) = (sem.clone(), n.clone());
                move || {
                    drop(mg);
                    drop(lw);
                    match kind {
                        3 => sem.add_permits(3),
                        4 => n.notify_one(),
                        _ => {}
                    }
                }
            };
            if rng.next().is_multiple_of(2) {
                victim.abort();
                random_pause(&mut rng);
                release();
            } else {
                release();
                random_pause(&mut rng);
                victim.abort();
            }
            match join_within(victim, 5) {
                Ok(()) => {}
                Err(e) => assert!(e.is_cancelled(), "round {round}: {e:?}"),
            }
            let passed = passed.load(SeqCst);
            if kind == 4 && passed {
                // The victim consumed the notification: one more for the thread.
                n.notify_one();
            }
            thread_within(next, 5);
            let ctx = format!("round {round}, kind {kind}, victim passed {passed}");
            match kind {
                0 => assert_eq!(*m.try_lock().expect("free"), 10 + passed as u32, "{ctx}"),
                1 => assert_eq!(*l.try_write().expect("free"), 10 + passed as u32, "{ctx}"),
                2 => assert!(l.try_write().is_ok(), "{ctx}"),
                3 => assert_eq!(sem.available_permits(), 3, "{ctx}"),
                _ => {}
            }
        }
    });
}

// -------------------------------------------- runtime dropped under every waiter

/// A fiber holds a mutex, a write lock and every permit and waits for ever; tasks,
/// fibers and plain threads wait for each primitive. The runtime is dropped from
/// another thread: the holder fiber is unwound, the task and fiber waiters are
/// cancelled (what was handed to them passes on), and the plain threads get what they
/// wait for; at the end everything is free.
#[test]
fn runtime_dropped_from_another_thread_under_waiters_of_every_context() {
    with_limit(LIMIT, || {
        for round in 0..6 {
            let rt = workers(2);
            let m = Arc::new(Mutex::new(0u32));
            let l = Arc::new(RwLock::new(0u32));
            let sem = Arc::new(Semaphore::new(4));
            let never = Arc::new(Notify::new());
            let n = Arc::new(Notify::new());
            let holding = Arc::new(AtomicBool::new(false));
            {
                let (m, l, sem, never, h) = (
                    m.clone(),
                    l.clone(),
                    sem.clone(),
                    never.clone(),
                    holding.clone(),
                );
                fiber_on(&rt, move || {
                    let _g = m.lock_blocking();
                    let _w = l.write_blocking();
                    let _p = sem.acquire_many_blocking(4).unwrap();
                    h.store(true, SeqCst);
                    never.notified_blocking();
                });
            }
            soon("the holder holds", || holding.load(SeqCst));
            let started = Arc::new(AtomicUsize::new(0));
            for _ in 0..2 {
                {
                    let (m, l, sem, n, s) = (
                        m.clone(),
                        l.clone(),
                        sem.clone(),
                        n.clone(),
                        started.clone(),
                    );
                    rt.spawn(async move {
                        s.fetch_add(1, SeqCst);
                        *m.lock().await += 1;
                        drop(l.read().await);
                        drop(sem.acquire_many(3).await);
                        n.notified().await;
                        std::future::pending::<()>().await;
                    });
                }
                let (m, l, sem, n, s) = (
                    m.clone(),
                    l.clone(),
                    sem.clone(),
                    n.clone(),
                    started.clone(),
                );
                fiber_on(&rt, move || {
                    s.fetch_add(1, SeqCst);
                    *m.lock_blocking() += 1;
                    drop(l.write_blocking());
                    drop(sem.acquire_many_blocking(2));
                    n.notified_blocking();
                    weft::fiber::sleep(Duration::from_secs(60));
                });
            }
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let (m, l, sem, n) = (m.clone(), l.clone(), sem.clone(), n.clone());
                    std::thread::spawn(move || {
                        *m.lock_blocking() += 100;
                        drop(l.read_blocking());
                        drop(sem.acquire_many_blocking(4).unwrap());
                        n.notified_blocking();
                    })
                })
                .collect();
            soon("the waiters started", || started.load(SeqCst) == 4);
            std::thread::sleep(Duration::from_millis(5));
            // Notifications for the plain threads (some may go to tasks or fibers first:
            // those passed on when they are cancelled, or consumed by a waiter that ran
            // past its wait; extra ones are stored, one at most).
            let stop = Arc::new(AtomicBool::new(false));
            let notifier = {
                let (n, stop) = (n.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        n.notify_one();
                        std::thread::sleep(Duration::from_millis(1));
                    }
                })
            };
            let dropper = std::thread::spawn(move || drop(rt));
            thread_within(dropper, 8);
            for t in threads {
                thread_within(t, 8);
            }
            stop.store(true, SeqCst);
            thread_within(notifier, 8);
            let ctx = format!("round {round}");
            assert!(*m.try_lock().expect("mutex free") >= 200, "{ctx}");
            assert!(l.try_write().is_ok(), "{ctx}: rwlock free");
            assert_eq!(sem.available_permits(), 4, "{ctx}");
        }
    });
}

// --------------------------------------------------- panics with guards held

/// A panic with a guard or permit held, in a task, a fiber and a plain thread: weft's
/// locks do not poison, so everything is free afterwards and what was written before
/// the panic stays; a task queued meanwhile on each primitive gets it. A `Drop` that
/// locks the mutex again while the panic unwinds (a wait while unwinding blocks its
/// thread) gets it too, once the queued task is done with it.
#[test]
fn panics_with_guards_held_release_them_in_every_context() {
    with_limit(LIMIT, || {
        let rt = workers(2);
        let m = Arc::new(Mutex::new(0u32));
        let l = Arc::new(RwLock::new(0u32));
        let sem = Arc::new(Semaphore::new(2));
        struct Relock(Arc<Mutex<u32>>);
        impl Drop for Relock {
            fn drop(&mut self) {
                assert!(std::thread::panicking());
                *self.0.lock_blocking() += 100;
            }
        }
        let body = {
            let (m, l, sem) = (m.clone(), l.clone(), sem.clone());
            move |how: u32, queued: Arc<AtomicBool>| {
                // Dropped last, after the guards below.
                let _r = Relock(m.clone());
                let mut g = m.lock_blocking();
                *g += 1;
                let mut w = l.write_blocking();
                *w += 1;
                let _p = sem.acquire_many_blocking(2).unwrap();
                let deadline = Instant::now() + Duration::from_secs(5);
                while !queued.load(SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Let the waiter's `lock` reach the line.
                std::thread::sleep(Duration::from_millis(2));
                if how < 10 {
                    panic!("boom {how}");
                }
            }
        };
        // A task waiting for each primitive in turn, queued behind the holder.
        let waiter = |rt: &weft::Runtime, queued: Arc<AtomicBool>| {
            let (m, l, sem) = (m.clone(), l.clone(), sem.clone());
            rt.spawn(async move {
                queued.store(true, SeqCst);
                let _g = m.lock().await;
                let _r = l.read().await;
                let _p = sem.acquire_many(2).await.unwrap();
            })
        };
        let q = Arc::new(AtomicBool::new(false));
        // Task.
        let (b, q2) = (body.clone(), q.clone());
        let t = rt.spawn(async move { b(1, q2) });
        let w = waiter(&rt, q.clone());
        let e = join_within(t, 5).unwrap_err();
        assert!(e.is_panic());
        join_within(w, 5).unwrap();
        // Fiber.
        q.store(false, SeqCst);
        let (b, q2) = (body.clone(), q.clone());
        let f = fiber_on(&rt, move || b(2, q2));
        let w = waiter(&rt, q.clone());
        let e = join_within(f, 5).unwrap_err();
        assert!(e.is_panic());
        join_within(w, 5).unwrap();
        // Plain thread.
        q.store(false, SeqCst);
        let (b, q2) = (body.clone(), q.clone());
        let t = std::thread::spawn(move || b(3, q2));
        let w = waiter(&rt, q.clone());
        soon("the panicking thread ended", || t.is_finished());
        assert!(t.join().is_err());
        join_within(w, 5).unwrap();
        assert_eq!(*m.try_lock().expect("free, not poisoned"), 303);
        assert_eq!(*l.try_write().expect("free, not poisoned"), 3);
        assert_eq!(sem.available_permits(), 2);
    });
}

// ------------------------------------------------------------------- stress

/// Threads, fibers and tasks share one semaphore of 4 permits with requests of 1 to 3
/// permits; tasks cancel theirs with short timeouts (at random points, some just after
/// being handed permits), fibers are aborted while waiting, threads `forget` permits
/// and add them back. Never more holders than permits, and at the end every permit is
/// back.
#[test]
fn stress_semaphore_mixed_contexts_with_cancellation() {
    with_limit(LIMIT, || {
        const PERMITS: usize = 4;
        let rt = workers(2);
        let sem = Arc::new(Semaphore::new(PERMITS));
        let holders = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let enter = {
            let holders = holders.clone();
            move |n: usize| {
                let now = holders.fetch_add(n, SeqCst) + n;
                assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                std::hint::spin_loop();
                holders.fetch_sub(n, SeqCst);
            }
        };
        let mut threads = Vec::new();
        for k in 0..2u64 {
            let (s, enter, stop) = (sem.clone(), enter.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut rng = Rng(0x77 + k);
                while !stop.load(SeqCst) {
                    let n = 1 + rng.below(3) as u32;
                    let p = s.acquire_many_blocking(n).unwrap();
                    enter(n as usize);
                    if rng.below(10) == 0 {
                        // Forget and add back: the count must end exact.
                        p.forget();
                        s.add_permits(n as usize);
                    } else {
                        drop(p);
                    }
                }
            }));
        }
        let mut tasks = Vec::new();
        for k in 0..3u64 {
            let (s, enter, stop) = (sem.clone(), enter.clone(), stop.clone());
            tasks.push(rt.spawn(async move {
                let mut rng = Rng(0x99 + k);
                let mut cancelled = 0u64;
                while !stop.load(SeqCst) {
                    let n = 1 + rng.below(3) as u32;
                    let limit = Duration::from_micros(rng.below(300));
                    match weft::time::timeout(limit, s.clone().acquire_many_owned(n)).await {
                        Ok(p) => {
                            let p: OwnedSemaphorePermit = p.unwrap();
                            enter(n as usize);
                            if rng.below(4) == 0 {
                                weft::task::yield_now().await;
                            }
                            drop(p);
                        }
                        Err(_) => cancelled += 1,
                    }
                    weft::task::yield_now().await;
                }
                cancelled
            }));
        }
        // Fibers that wait and get aborted, restarted by this loop.
        let deadline = Instant::now() + Duration::from_millis(1500);
        let mut rng = Rng(0xabcdef);
        let mut aborted = 0;
        while Instant::now() < deadline {
            let fibers: Vec<_> = (0..2)
                .map(|i| {
                    let (s, enter) = (sem.clone(), enter.clone());
                    fiber_on(&rt, move || {
                        for j in 0..20 {
                            let n = 1 + ((i + j) % 3) as u32;
                            let p = s.acquire_many_blocking(n).unwrap();
                            enter(n as usize);
                            drop(p);
                        }
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_micros(rng.below(2000)));
            for f in fibers {
                if rng.below(2) == 0 {
                    f.abort();
                }
                match join_within(f, 5) {
                    Ok(()) => {}
                    Err(e) => {
                        assert!(e.is_cancelled(), "{e:?}");
                        aborted += 1;
                    }
                }
            }
        }
        stop.store(true, SeqCst);
        for t in threads {
            thread_within(t, 5);
        }
        for t in tasks {
            join_within(t, 5).unwrap();
        }
        assert_eq!(holders.load(SeqCst), 0);
        assert_eq!(sem.available_permits(), PERMITS, "permits lost or made");
        assert!(sem.try_acquire_many(PERMITS as u32).is_ok());
        let _ = aborted;
    });
}

// ------------------------------------------- overflow panics and the lock depth

const CHILD: &str = "WEFT_REVIEW_S38_LOCKS_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "overflow" => child_overflow(),
        other => panic!("unknown case {other}"),
    }
    println!("CHILD done=ok");
}

/// An `add_permits` that overflows panics under the semaphore's wait-list lock, after
/// serving the waiters in line: a task and a fiber it served are woken (the wake batch
/// is flushed by the unwind, after the lock), the lock is free again, and the lock
/// depth is back to zero on this thread (a later wake flushed here is not reported as
/// under a lock), and the count is usable.
fn child_overflow() {
    let rt = workers(2);
    let sem = Arc::new(Semaphore::new(0));
    let task = {
        let s = sem.clone();
        rt.spawn(async move { s.acquire_many(2).await.unwrap().num_permits() })
    };
    let fiber = {
        let s = sem.clone();
        fiber_on(&rt, move || {
            s.acquire_many_blocking(3).unwrap().num_permits()
        })
    };
    // Both queued: the first absorbs a permit, the count stays at zero.
    sem.add_permits(1);
    soon("the waiters queued", || sem.available_permits() == 0);
    std::thread::sleep(Duration::from_millis(10));
    let r = catch_unwind(AssertUnwindSafe(|| sem.add_permits(usize::MAX)));
    assert!(r.is_err(), "an overflowing add must panic");
    assert_eq!(join_within(task, 5).unwrap(), 2);
    assert_eq!(join_within(fiber, 5).unwrap(), 3);
    // The count after the panic: the five served permits are back, usable.
    assert_eq!(sem.available_permits(), 5);
    let n = Arc::new(Notify::new());
    let w = {
        let n = n.clone();
        rt.spawn(async move { n.notified().await })
    };
    std::thread::sleep(Duration::from_millis(10));
    // A wake flushed on this thread: reported if the depth leaked.
    n.notify_one();
    join_within(w, 5).unwrap();
    sem.add_permits(1);
    assert_eq!(sem.try_acquire_many(6).unwrap().num_permits(), 6);
}

#[test]
fn overflowing_add_wakes_the_waiters_it_served_and_leaves_no_lock_depth() {
    let out = common::child::run_case_with_lock_checks(CHILD, "overflow");
    assert!(!out.stderr.contains("UNDER-LOCK"), "{}", out.context());
}
