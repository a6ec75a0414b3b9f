//! `weft::sync::watch` (issue 16): latest value, seen marks, `changed` in every
//! context, sender and receiver drop, cancellation.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::watch;

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn borrow_marks_and_errors() {
    let (tx, mut rx) = watch::channel(1);
    is_send_sync(&tx);
    is_send_sync(&rx);
    assert!(!rx.has_changed().unwrap());
    tx.send(2).unwrap();
    assert_eq!(*rx.borrow(), 2);
    assert!(rx.has_changed().unwrap(), "borrow does not mark seen");
    assert_eq!(*rx.borrow_and_update(), 2);
    assert!(!rx.has_changed().unwrap());
    let mut rx2 = rx.clone();
    tx.send_modify(|v| *v += 1);
    assert!(rx2.has_changed().unwrap());
    assert_eq!(*tx.borrow(), 3);
    assert!(poll(Box::pin(rx2.changed()).as_mut()).is_ready());
    assert!(poll(Box::pin(rx2.changed()).as_mut()).is_pending());
    drop(rx);
    drop(rx2);
    assert_eq!(tx.send(9).unwrap_err().0, 9);
    tx.send_modify(|v| *v = 10); // works with no receiver
    let mut rx = tx.subscribe();
    assert_eq!(*rx.borrow(), 10);
    assert!(!rx.has_changed().unwrap());
    drop(tx);
    assert!(rx.has_changed().is_err());
    assert!(rx.changed_blocking().is_err());
}

#[test]
fn changed_after_close_reports_the_last_value_first() {
    let (tx, mut rx) = watch::channel(0);
    tx.send(1).unwrap();
    drop(tx);
    assert!(rx.changed_blocking().is_ok());
    assert_eq!(*rx.borrow_and_update(), 1);
    assert!(rx.changed_blocking().is_err());
}

#[test]
fn every_context_sees_the_last_value() {
    const N: usize = 2000;
    watchdog(30, || {
        let rt = rt2();
        let (tx, rx) = watch::channel(0usize);
        let mut rx1 = rx.clone();
        let task = rt.spawn(async move {
            let mut last = 0;
            while rx1.changed().await.is_ok() {
                let v = *rx1.borrow_and_update();
                assert!(v >= last, "values go forward");
                last = v;
            }
            last
        });
        let mut rx2 = rx.clone();
        let fiber = fiber_on(&rt, move || {
            let mut last = 0;
            while rx2.changed_blocking().is_ok() {
                last = *rx2.borrow_and_update();
            }
            last
        });
        let mut rx3 = rx;
        let thread = std::thread::spawn(move || {
            let mut last = 0;
            while rx3.changed_blocking().is_ok() {
                last = *rx3.borrow_and_update();
            }
            last
        });
        for i in 1..=N {
            tx.send(i).unwrap();
        }
        drop(tx);
        assert_eq!(join_within(task, 20).unwrap(), N);
        assert_eq!(join_within(fiber, 20).unwrap(), N);
        assert_eq!(thread.join().unwrap(), N);
    });
}

#[test]
fn cancelled_changed_loses_nothing() {
    watchdog(20, || {
        let rt = rt2();
        let (tx, rx) = watch::channel(0u64);
        let seen = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for i in 0..3u64 {
            let (mut rx, seen) = (rx.clone(), seen.clone());
            hs.push(rt.spawn(async move {
                let mut r = Rng::new(i + 3);
                loop {
                    match drop_after(r.below(3), rx.changed()).await {
                        Some(Ok(())) if *rx.borrow_and_update() == 500 => {
                            seen.fetch_add(1, SeqCst);
                            return;
                        }
                        Some(Ok(())) => {}
                        Some(Err(_)) => panic!("closed before the last value was seen"),
                        None => {}
                    }
                }
            }));
        }
        for i in 1..=500 {
            tx.send(i).unwrap();
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        for h in hs {
            join_within(h, 15).unwrap();
        }
        assert_eq!(seen.load(SeqCst), 3);
        drop(tx);
    });
}
