//! `weft::sync::broadcast` (issue 16): every receiver gets every value, lagging, close,
//! every context, cancellation, values dropped exactly once.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use chan_common::*;
use weft::sync::broadcast::{self, error::RecvError, error::TryRecvError};

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
#[should_panic(expected = "capacity 0")]
fn zero_capacity_panics_naming_it() {
    let _ = broadcast::channel::<u8>(0);
}

#[test]
fn lagged_then_oldest_kept() {
    let (tx, mut rx) = broadcast::channel(2);
    is_send_sync(&tx);
    is_send_sync(&rx);
    for i in 0..5 {
        tx.send(i).unwrap();
    }
    assert_eq!(rx.try_recv(), Err(TryRecvError::Lagged(3)));
    assert_eq!(rx.try_recv(), Ok(3));
    assert_eq!(rx.try_recv(), Ok(4));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    // A capacity rounds up to a power of two, as tokio's.
    let (tx, mut rx) = broadcast::channel(3);
    for i in 0..5 {
        tx.send(i).unwrap();
    }
    assert_eq!(rx.recv_blocking(), Err(RecvError::Lagged(1)));
    assert_eq!(rx.recv_blocking(), Ok(1));
    drop(tx);
    for i in 2..5 {
        assert_eq!(rx.recv_blocking(), Ok(i));
    }
    assert_eq!(rx.recv_blocking(), Err(RecvError::Closed));
}

#[test]
fn send_counts_receivers_and_fails_without() {
    let (tx, rx) = broadcast::channel(4);
    let rx2 = tx.subscribe();
    assert_eq!(tx.send(1).unwrap(), 2);
    drop(rx);
    drop(rx2);
    assert_eq!(tx.send(2).unwrap_err().0, 2);
    let mut rx3 = tx.subscribe();
    assert_eq!(
        rx3.try_recv(),
        Err(TryRecvError::Empty),
        "only values sent after"
    );
    let tx2 = tx.clone();
    drop(tx);
    assert_eq!(rx3.try_recv(), Err(TryRecvError::Empty));
    drop(tx2);
    assert_eq!(rx3.try_recv(), Err(TryRecvError::Closed));
}

#[test]
fn values_dropped_exactly_once() {
    let drops = Drops::new(8);
    let (tx, mut rx1) = broadcast::channel(4);
    let mut rx2 = tx.subscribe();
    for i in 0..4 {
        tx.send(std::sync::Arc::new(drops.make(i))).unwrap();
    }
    drop(rx1.try_recv().unwrap());
    drop(rx2.try_recv().unwrap()); // the last reader: the slot is emptied
    assert_eq!(drops.get(0), 1);
    drop(rx1); // rx1's unread values are released for it
    assert_eq!(drops.get(1), 0);
    drop(rx2);
    for i in 1..4 {
        assert_eq!(drops.get(i), 1);
    }
    // Overwritten values are dropped.
    let (tx, _rx) = broadcast::channel(1);
    tx.send(std::sync::Arc::new(drops.make(4))).unwrap();
    tx.send(std::sync::Arc::new(drops.make(5))).unwrap();
    assert_eq!(drops.get(4), 1);
}

#[test]
fn every_context_gets_every_value() {
    const N: u64 = 3000;
    watchdog(30, || {
        let rt = rt2();
        let (tx, rx) = broadcast::channel::<u64>(N as usize);
        let mut r1 = tx.subscribe();
        let task = rt.spawn(async move {
            let mut sum = 0;
            while let Ok(v) = r1.recv().await {
                sum += v;
            }
            sum
        });
        let mut r2 = tx.subscribe();
        let fiber = fiber_on(&rt, move || {
            let mut sum = 0;
            while let Ok(v) = r2.recv_blocking() {
                sum += v;
            }
            sum
        });
        let mut r3 = rx;
        let thread = std::thread::spawn(move || {
            let mut sum = 0;
            while let Ok(v) = r3.recv_blocking() {
                sum += v;
            }
            sum
        });
        for i in 0..N {
            tx.send(i).unwrap();
        }
        drop(tx);
        let want = N * (N - 1) / 2;
        assert_eq!(join_within(task, 20).unwrap(), want);
        assert_eq!(join_within(fiber, 20).unwrap(), want);
        assert_eq!(thread.join().unwrap(), want);
    });
}

#[test]
fn cancelled_recv_loses_no_value() {
    let (tx, mut rx) = broadcast::channel(8);
    let mut f = Box::pin(rx.recv());
    assert!(poll(f.as_mut()).is_pending());
    tx.send(1).unwrap();
    drop(f); // woken, never saw the value: it is still there
    assert_eq!(rx.try_recv(), Ok(1));
    watchdog(20, || {
        let rt = rt2();
        let (tx, rx) = broadcast::channel::<u64>(4096);
        let h = rt.spawn(async move {
            let mut rx = rx;
            let mut r = Rng::new(9);
            let mut next = 0;
            loop {
                match drop_after(r.below(3), rx.recv()).await {
                    Some(Ok(v)) => {
                        assert_eq!(v, next);
                        next += 1;
                    }
                    Some(Err(RecvError::Closed)) => return next,
                    Some(Err(e)) => panic!("{e}"),
                    None => {}
                }
            }
        });
        for i in 0..2000 {
            tx.send(i).unwrap();
        }
        drop(tx);
        assert_eq!(join_within(h, 15).unwrap(), 2000);
    });
}
