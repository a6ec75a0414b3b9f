//! `weft::sync::Notify` (issue 16): the stored permit, `notify_waiters` reaching every
//! future created before it (polled or not), every context, and a chosen waiter that
//! is dropped passing its notification on.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::Notify;

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn one_stored_permit() {
    let n = Notify::new();
    is_send_sync(&n);
    is_send_sync(&n.notified());
    n.notify_one();
    n.notify_one();
    assert!(poll(Box::pin(n.notified()).as_mut()).is_ready());
    assert!(
        poll(Box::pin(n.notified()).as_mut()).is_pending(),
        "only one permit"
    );
}

#[test]
fn notify_waiters_wakes_futures_created_before_it_only() {
    let n = Notify::new();
    let mut polled = Box::pin(n.notified());
    assert!(poll(polled.as_mut()).is_pending());
    let mut unpolled = Box::pin(n.notified());
    n.notify_waiters();
    let mut later = Box::pin(n.notified());
    assert!(poll(polled.as_mut()).is_ready());
    assert!(poll(unpolled.as_mut()).is_ready());
    assert!(poll(later.as_mut()).is_pending(), "stores no permit");
}

#[test]
fn notify_one_is_fifo_and_passed_on_when_dropped() {
    let n = Notify::new();
    let mut a = Box::pin(n.notified());
    let mut b = Box::pin(n.notified());
    assert!(poll(a.as_mut()).is_pending());
    assert!(poll(b.as_mut()).is_pending());
    n.notify_one(); // chooses `a`
    assert!(poll(b.as_mut()).is_pending());
    drop(a); // never saw it: `b` gets it
    assert!(poll(b.as_mut()).is_ready());

    // Dropped with nobody else waiting: it becomes the stored permit.
    let mut c = Box::pin(n.notified());
    assert!(poll(c.as_mut()).is_pending());
    n.notify_one();
    drop(c);
    assert!(poll(Box::pin(n.notified()).as_mut()).is_ready());
}

#[test]
fn every_context() {
    watchdog(20, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let woke = Arc::new(AtomicUsize::new(0));
        let (n1, w1) = (n.clone(), woke.clone());
        let task = rt.spawn(async move {
            n1.notified().await;
            w1.fetch_add(1, SeqCst);
        });
        let (n2, w2) = (n.clone(), woke.clone());
        let fiber = fiber_on(&rt, move || {
            n2.notified_blocking();
            w2.fetch_add(1, SeqCst);
        });
        let (n3, w3) = (n.clone(), woke.clone());
        let thread = std::thread::spawn(move || {
            n3.notified_blocking();
            w3.fetch_add(1, SeqCst);
        });
        // Each notify_one wakes exactly one (or is stored for one still on its way).
        for i in 1..=3 {
            n.notify_one();
            wait_for("a waiter to wake", 10, || woke.load(SeqCst) == i);
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(woke.load(SeqCst), i);
        }
        join_within(task, 10).unwrap();
        join_within(fiber, 10).unwrap();
        thread.join().unwrap();
    });
}

/// notified() futures dropped at random points while notify_one runs: every
/// notification reaches a live waiter or stays stored, so the consumers end.
#[test]
fn random_cancellation_loses_no_notification() {
    const N: usize = 1000;
    watchdog(30, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let got = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for i in 0..3u64 {
            let (n, got) = (n.clone(), got.clone());
            hs.push(rt.spawn(async move {
                let mut r = Rng::new(i + 5);
                while got.load(SeqCst) < N {
                    if drop_after(r.below(3), n.notified()).await.is_some() {
                        got.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        // Give one notification at a time, waiting for it to be consumed (a task too,
        // so that the busy consumers do not starve a plain thread of its core).
        let (n2, got2) = (n.clone(), got.clone());
        let producer = rt.spawn(async move {
            for i in 0..N {
                n2.notify_one();
                while got2.load(SeqCst) <= i {
                    weft::task::yield_now().await;
                }
            }
        });
        join_within(producer, 20).unwrap();
        n.notify_waiters();
        for h in hs {
            join_within(h, 20).unwrap();
        }
    });
}

/// A plain thread and a task hand a turn back and forth through two `Notify`s, the
/// thread's `notify_one` racing the task's registration every round (the lock-free
/// permit against the waiter's move to WAITING): a lost wake-up hangs the pair, which
/// the watchdog reports.
#[test]
fn ping_pong_between_a_thread_and_a_task_loses_no_wake() {
    const ROUNDS: usize = 10_000;
    watchdog(60, || {
        let rt = rt2();
        let ping = Arc::new(Notify::new());
        let pong = Arc::new(Notify::new());
        let (ping2, pong2) = (ping.clone(), pong.clone());
        let task = rt.spawn(async move {
            for _ in 0..ROUNDS {
                ping2.notified().await;
                pong2.notify_one();
            }
        });
        for _ in 0..ROUNDS {
            ping.notify_one();
            pong.notified_blocking();
        }
        join_within(task, 20).unwrap();
        // Every notification was consumed: nothing is stored on either side.
        assert_eq!(poll_once(ping.notified()), None);
        assert_eq!(poll_once(pong.notified()), None);
    });
}

/// `notify_waiters` from a plain thread, over and over, while tasks make their
/// `notified()` futures and register them: each future made before a call completes
/// (the call's lock-free generation step against a waiter's move to WAITING).
#[test]
fn notify_waiters_from_a_thread_reaches_every_future_made_before_it() {
    const ROUNDS: usize = 500;
    const TASKS: usize = 4;
    watchdog(60, || {
        let rt = rt2();
        let n = Arc::new(Notify::new());
        let made = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for _ in 0..TASKS {
            let (n, made, done) = (n.clone(), made.clone(), done.clone());
            hs.push(rt.spawn(async move {
                for _ in 0..ROUNDS {
                    let f = n.notified();
                    made.fetch_add(1, SeqCst);
                    f.await;
                    done.fetch_add(1, SeqCst);
                }
            }));
        }
        for round in 1..=ROUNDS {
            // Every task of this round has made its future (some may be registered,
            // some not polled yet): one call must complete them all.
            wait_for("the round's futures", 20, || {
                made.load(SeqCst) == round * TASKS
            });
            n.notify_waiters();
            wait_for("the round's wake-ups", 20, || {
                done.load(SeqCst) == round * TASKS
            });
        }
        for h in hs {
            join_within(h, 20).unwrap();
        }
    });
}
