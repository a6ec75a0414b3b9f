//! `weft::sync::Semaphore` (issue 16): permits in every context, FIFO fairness,
//! `acquire_many` waiting in order, `close` reaching waiters in every context, `forget`,
//! cancellation of acquires already handed permits, and a stress test that never sees
//! more holders than permits.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::{Semaphore, TryAcquireError};

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn try_acquire_counts_and_gives_back() {
    let sem = Semaphore::new(3);
    let a = sem.try_acquire().unwrap();
    let b = sem.try_acquire_many(2).unwrap();
    assert_eq!(sem.available_permits(), 0);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
    drop(a);
    assert_eq!(sem.available_permits(), 1);
    b.forget();
    assert_eq!(sem.available_permits(), 1);
    sem.add_permits(4);
    assert_eq!(sem.available_permits(), 5);
    assert_eq!(sem.forget_permits(2), 2);
    assert_eq!(sem.available_permits(), 3);
}

#[test]
fn types_are_send_and_sync() {
    let sem = Arc::new(Semaphore::new(1));
    is_send_sync(&*sem);
    let fut = sem.acquire();
    is_send_sync(&fut);
    drop(fut);
    let p = sem.try_acquire().unwrap();
    is_send_sync(&p);
    drop(p);
    let p = sem.clone().try_acquire_owned().unwrap();
    is_send_sync(&p);
}

/// Polled by hand with a no-op waker: the futures need no runtime.
#[test]
fn hand_polled_waiters_are_served_in_order() {
    let sem = Semaphore::new(0);
    let mut a = Box::pin(sem.acquire());
    let mut b = Box::pin(sem.acquire_many(2));
    let mut c = Box::pin(sem.acquire());
    assert!(poll(a.as_mut()).is_pending());
    assert!(poll(b.as_mut()).is_pending());
    assert!(poll(c.as_mut()).is_pending());
    sem.add_permits(2);
    // `a` gets one; `b` absorbs the other and holds it; `c` gets nothing.
    let pa = match poll(a.as_mut()) {
        Poll::Ready(Ok(p)) => p,
        _ => panic!("a should have its permit"),
    };
    assert!(poll(b.as_mut()).is_pending());
    assert!(poll(c.as_mut()).is_pending());
    assert_eq!(sem.available_permits(), 0);
    assert!(sem.try_acquire().is_err(), "a waiter is first in line");
    sem.add_permits(1);
    let pb = match poll(b.as_mut()) {
        Poll::Ready(Ok(p)) => p,
        _ => panic!("b should have its two permits"),
    };
    assert_eq!(pb.num_permits(), 2);
    assert!(poll(c.as_mut()).is_pending());
    drop(pb);
    drop(pa);
    assert!(matches!(poll(c.as_mut()), Poll::Ready(Ok(_))));
}

/// An acquire takes free permits at its first poll (it makes no wait node then), and
/// one dropped unpolled takes nothing; once a waiter queues, a fresh acquire waits
/// behind it at its first poll too, even with permits in the count.
#[test]
fn first_polls_take_free_permits_but_not_a_waiters() {
    let sem = Semaphore::new(3);
    drop(sem.acquire_many(2));
    assert_eq!(sem.available_permits(), 3);
    let p = match poll(Box::pin(sem.acquire()).as_mut()) {
        Poll::Ready(Ok(p)) => p,
        _ => panic!("a free permit at the first poll"),
    };
    let mut many = Box::pin(sem.acquire_many(3));
    assert!(
        poll(many.as_mut()).is_pending(),
        "two permits free, three wanted"
    );
    assert_eq!(sem.available_permits(), 0, "the waiter absorbed the two");
    let mut late = Box::pin(sem.acquire());
    assert!(poll(late.as_mut()).is_pending(), "queued behind the waiter");
    drop(p);
    let three = match poll(many.as_mut()) {
        Poll::Ready(Ok(p)) => p,
        _ => panic!("the first waiter has all three"),
    };
    assert_eq!(three.num_permits(), 3);
    assert!(poll(late.as_mut()).is_pending());
    drop(three);
    assert!(matches!(poll(late.as_mut()), Poll::Ready(Ok(_))));
}

/// An acquire dropped after it was handed its permits passes them on to the next
/// waiter; one dropped with permits absorbed gives those back too.
#[test]
fn dropped_acquires_pass_their_permits_on() {
    let sem = Semaphore::new(0);
    let mut a = Box::pin(sem.acquire());
    let mut b = Box::pin(sem.acquire());
    assert!(poll(a.as_mut()).is_pending());
    assert!(poll(b.as_mut()).is_pending());
    sem.add_permits(1); // handed to `a`
    drop(a); // never saw it: it goes to `b`
    assert!(matches!(poll(b.as_mut()), Poll::Ready(Ok(_))));
    drop(b);
    assert_eq!(sem.available_permits(), 1);

    let sem = Semaphore::new(0);
    let mut many = Box::pin(sem.acquire_many(3));
    let mut one = Box::pin(sem.acquire());
    assert!(poll(many.as_mut()).is_pending());
    assert!(poll(one.as_mut()).is_pending());
    sem.add_permits(2); // absorbed by `many`
    assert!(poll(one.as_mut()).is_pending());
    drop(many);
    match poll(one.as_mut()) {
        Poll::Ready(Ok(p)) => drop(p),
        _ => panic!("the absorbed permits should reach the next waiter"),
    }
    drop(one);
    assert_eq!(sem.available_permits(), 2);
}

/// A tight re-acquirer cannot overtake a waiter.
#[test]
fn release_hands_over_to_the_first_waiter() {
    watchdog(20, || {
        let sem = Arc::new(Semaphore::new(1));
        let p = sem.try_acquire().unwrap();
        let s = sem.clone();
        let waiter = std::thread::spawn(move || {
            s.acquire_blocking().unwrap().forget();
        });
        wait_for("the waiter to queue", 10, || {
            sem.available_permits() == 0 && {
                std::thread::sleep(Duration::from_millis(20));
                true
            }
        });
        drop(p);
        // The permit went to the waiter: it is not there to be re-taken.
        assert!(sem.try_acquire().is_err());
        waiter.join().unwrap();
        assert_eq!(sem.available_permits(), 0);
    });
}

/// `close` reaches waiters in every context at once.
#[test]
fn close_fails_every_waiter_in_every_context() {
    watchdog(20, || {
        let rt = rt2();
        let sem = Arc::new(Semaphore::new(0));
        let queued = Arc::new(AtomicUsize::new(0));
        let s = sem.clone();
        let task = rt.spawn(async move { s.acquire().await.map(|_| ()) });
        let s = sem.clone();
        let fiber = fiber_on(&rt, move || s.acquire_many_blocking(2).map(|_| ()));
        let (s, q) = (sem.clone(), queued.clone());
        let thread = std::thread::spawn(move || {
            q.fetch_add(1, SeqCst);
            s.acquire_blocking().map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        sem.close();
        assert!(join_within(task, 10).unwrap().is_err());
        assert!(join_within(fiber, 10).unwrap().is_err());
        assert!(thread.join().unwrap().is_err());
        assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
        assert!(rt.block_on(sem.acquire()).is_err());
        // Adding still works, acquiring does not.
        sem.add_permits(1);
        assert_eq!(sem.available_permits(), 1);
        assert!(sem.try_acquire().is_err());
    });
}

/// Permits flow between a task, a fiber and a thread.
#[test]
fn permits_cross_contexts() {
    watchdog(20, || {
        let rt = rt2();
        let sem = Arc::new(Semaphore::new(0));
        let s = sem.clone();
        let task = rt.spawn(async move {
            s.acquire_many(3).await.unwrap().forget();
            s.add_permits(1);
        });
        let s = sem.clone();
        let fiber = fiber_on(&rt, move || {
            s.acquire_blocking().unwrap().forget();
            s.add_permits(5);
        });
        std::thread::sleep(Duration::from_millis(20));
        sem.add_permits(4);
        join_within(task, 10).unwrap();
        join_within(fiber, 10).unwrap();
        let total = sem.acquire_many_blocking(5).unwrap();
        assert_eq!(total.num_permits(), 5);
        // 4 added, 3 and 1 forgotten, 1 and 5 added back, 5 held here.
        assert_eq!(sem.available_permits(), 1);
    });
}

/// acquire_many waits in order: a big request is not starved by small ones.
#[test]
fn acquire_many_is_not_starved() {
    watchdog(20, || {
        let rt = rt2();
        let sem = Arc::new(Semaphore::new(4));
        let stop = Arc::new(AtomicUsize::new(0));
        let mut smalls = vec![];
        for _ in 0..3 {
            let (s, stop) = (sem.clone(), stop.clone());
            smalls.push(rt.spawn(async move {
                while stop.load(SeqCst) == 0 {
                    let _p = s.acquire().await.unwrap();
                    weft::task::yield_now().await;
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
        let all = sem.acquire_many_blocking(4).unwrap();
        stop.store(1, SeqCst);
        drop(all);
        for h in smalls {
            join_within(h, 10).unwrap();
        }
        assert_eq!(sem.available_permits(), 4);
    });
}

/// Acquires dropped at random points while others work: the count ends where it began
/// and nobody is left waiting.
#[test]
fn random_cancellation_loses_no_permit() {
    watchdog(30, || {
        let rt = rt2();
        let sem = Arc::new(Semaphore::new(2));
        let mut hs = vec![];
        for i in 0..6u64 {
            let s = sem.clone();
            hs.push(rt.spawn(async move {
                let mut r = Rng::new(i + 1);
                for _ in 0..2000 {
                    let n = 1 + r.below(2) as u32;
                    if let Some(p) = drop_after(r.below(3), s.acquire_many(n)).await {
                        let _p = p.unwrap();
                        if r.below(2) == 0 {
                            weft::task::yield_now().await;
                        }
                    }
                }
            }));
        }
        for h in hs {
            join_within(h, 25).unwrap();
        }
        assert_eq!(sem.available_permits(), 2);
    });
}

/// Threads, fibers and tasks share 3 permits: never more than 3 holders at once.
#[test]
fn stress_never_more_holders_than_permits() {
    const PERMITS: usize = 3;
    const ROUNDS: usize = 3000;
    watchdog(60, || {
        let rt = rt2();
        let sem = Arc::new(Semaphore::new(PERMITS));
        let holders = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let enter = {
            let (holders, most) = (holders.clone(), most.clone());
            move |n: usize| {
                let now = holders.fetch_add(n, SeqCst) + n;
                most.fetch_max(now, SeqCst);
                assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                std::hint::spin_loop();
                holders.fetch_sub(n, SeqCst);
            }
        };
        let mut threads = vec![];
        for i in 0..2 {
            let (s, enter) = (sem.clone(), enter.clone());
            threads.push(std::thread::spawn(move || {
                for k in 0..ROUNDS {
                    let n = 1 + (i + k) % 2;
                    let p = s.acquire_many_blocking(n as u32).unwrap();
                    enter(n);
                    drop(p);
                }
            }));
        }
        let mut handles = vec![];
        for i in 0..2 {
            let (s, enter) = (sem.clone(), enter.clone());
            handles.push(fiber_on(&rt, move || {
                for k in 0..ROUNDS {
                    let n = 1 + (i + k) % 3;
                    let p = s.acquire_many_blocking(n as u32).unwrap();
                    enter(n);
                    drop(p);
                }
            }));
        }
        for _ in 0..2 {
            let (s, enter) = (sem.clone(), enter.clone());
            handles.push(rt.spawn(async move {
                for k in 0..ROUNDS {
                    let p = s.acquire().await.unwrap();
                    enter(1);
                    if k % 7 == 0 {
                        weft::task::yield_now().await;
                    }
                    drop(p);
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        for h in handles {
            join_within(h, 50).unwrap();
        }
        assert_eq!(sem.available_permits(), PERMITS);
        assert!(most.load(SeqCst) <= PERMITS);
    });
}
