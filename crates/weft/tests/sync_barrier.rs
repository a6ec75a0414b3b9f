//! `weft::sync::Barrier` and `WaitGroup` (issue 16): one leader per generation across
//! contexts, reuse, cancellation, Go's counting rules.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::{Barrier, WaitGroup};

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn one_leader_per_generation_across_contexts() {
    const GENERATIONS: usize = 200;
    watchdog(30, || {
        let rt = rt2();
        let b = Arc::new(Barrier::new(4));
        is_send_sync(&*b);
        let leaders = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for _ in 0..2 {
            let (b, l) = (b.clone(), leaders.clone());
            hs.push(rt.spawn(async move {
                for _ in 0..GENERATIONS {
                    if b.wait().await.is_leader() {
                        l.fetch_add(1, SeqCst);
                    }
                }
            }));
        }
        let (b2, l) = (b.clone(), leaders.clone());
        hs.push(fiber_on(&rt, move || {
            for _ in 0..GENERATIONS {
                if b2.wait_blocking().is_leader() {
                    l.fetch_add(1, SeqCst);
                }
            }
        }));
        for _ in 0..GENERATIONS {
            if b.wait_blocking().is_leader() {
                leaders.fetch_add(1, SeqCst);
            }
        }
        for h in hs {
            join_within(h, 20).unwrap();
        }
        assert_eq!(leaders.load(SeqCst), GENERATIONS);
    });
}

#[test]
fn zero_acts_as_one_and_cancel_withdraws() {
    assert!(Barrier::new(0).wait_blocking().is_leader());
    let b = Barrier::new(2);
    let mut a = Box::pin(b.wait());
    assert!(poll(a.as_mut()).is_pending());
    drop(a); // withdraws its arrival
    let mut c = Box::pin(b.wait());
    assert!(poll(c.as_mut()).is_pending(), "one arrival is not two");
    let mut d = Box::pin(b.wait());
    match poll(d.as_mut()) {
        Poll::Ready(r) => assert!(r.is_leader()),
        Poll::Pending => panic!("the second arrival releases the generation"),
    }
    match poll(c.as_mut()) {
        Poll::Ready(r) => assert!(!r.is_leader()),
        Poll::Pending => panic!("released"),
    }
}

#[test]
fn wait_group_counts_and_is_reusable() {
    watchdog(20, || {
        let rt = rt2();
        let wg = WaitGroup::new();
        is_send_sync(&wg);
        wg.wait_blocking();
        for round in 0..3 {
            let n = Arc::new(AtomicUsize::new(0));
            wg.add(3);
            for i in 0..3 {
                let (wg, n) = (wg.clone(), n.clone());
                match i {
                    0 => drop(rt.spawn(async move {
                        n.fetch_add(1, SeqCst);
                        wg.done();
                    })),
                    1 => drop(fiber_on(&rt, move || {
                        weft::fiber::sleep(Duration::from_millis(5));
                        n.fetch_add(1, SeqCst);
                        wg.done();
                    })),
                    _ => drop(std::thread::spawn(move || {
                        n.fetch_add(1, SeqCst);
                        wg.done();
                    })),
                }
            }
            // Waiters in every context.
            let w = wg.clone();
            let task = rt.spawn(async move { w.wait().await });
            let w = wg.clone();
            let fiber = fiber_on(&rt, move || w.wait_blocking());
            wg.wait_blocking();
            assert_eq!(n.load(SeqCst), 3, "round {round}");
            join_within(task, 10).unwrap();
            join_within(fiber, 10).unwrap();
        }
    });
}

#[test]
fn wait_group_done_below_zero_panics() {
    let wg = WaitGroup::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wg.done()));
    assert!(r.is_err());
    // Still usable.
    wg.add(1);
    let mut w = Box::pin(wg.wait());
    assert!(poll(w.as_mut()).is_pending());
    wg.done();
    assert!(poll(w.as_mut()).is_ready());
}
