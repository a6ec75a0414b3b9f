//! `weft::sync::oneshot` (issue 16): every context, drop and close semantics, values
//! dropped exactly once, hand polling.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::oneshot::{self, error::RecvError, error::TryRecvError};

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn send_then_receive_and_errors() {
    let (tx, mut rx) = oneshot::channel::<u8>();
    is_send_sync(&tx);
    is_send_sync(&rx);
    assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    assert!(poll(Pin::new(&mut rx)).is_pending());
    tx.send(1).unwrap();
    assert_eq!(poll(Pin::new(&mut rx)), Poll::Ready(Ok(1)));

    let (tx, rx) = oneshot::channel::<u8>();
    drop(tx);
    assert_eq!(rx.recv_blocking(), Err(RecvError(())));

    let (tx, mut rx) = oneshot::channel::<u8>();
    tx.send(2).unwrap();
    assert_eq!(rx.try_recv(), Ok(2));
    assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));

    let (tx, mut rx) = oneshot::channel::<u8>();
    rx.close();
    assert!(tx.is_closed());
    assert_eq!(tx.send(3), Err(3));
}

#[test]
fn values_are_dropped_once() {
    let drops = Drops::new(2);
    let (tx, rx) = oneshot::channel();
    tx.send(drops.make(0)).unwrap();
    drop(rx); // the unreceived value is dropped with the receiver
    assert_eq!(drops.get(0), 1);
    let (tx, rx) = oneshot::channel();
    drop(rx);
    let back = tx.send(drops.make(1)).unwrap_err();
    assert_eq!(drops.get(1), 0);
    drop(back);
    assert_eq!(drops.get(1), 1);
}

#[test]
fn every_context() {
    watchdog(20, || {
        let rt = rt2();
        // thread -> task
        let (tx, rx) = oneshot::channel();
        let task = rt.spawn(rx);
        std::thread::spawn(move || tx.send(1).unwrap());
        assert_eq!(join_within(task, 10).unwrap(), Ok(1));
        // task -> fiber
        let (tx, rx) = oneshot::channel();
        let fiber = fiber_on(&rt, move || rx.recv_blocking());
        rt.spawn(async move { tx.send(2).unwrap() });
        assert_eq!(join_within(fiber, 10).unwrap(), Ok(2));
        // fiber -> thread, and the sender dropped unsent wakes a waiting receiver
        let (tx, rx) = oneshot::channel();
        let _f = fiber_on(&rt, move || {
            weft::fiber::sleep(Duration::from_millis(10));
            tx.send(3).unwrap();
        });
        assert_eq!(rx.recv_blocking(), Ok(3));
        let (tx, rx) = oneshot::channel::<u8>();
        let t = std::thread::spawn(move || rx.recv_blocking());
        std::thread::sleep(Duration::from_millis(10));
        drop(tx);
        assert_eq!(t.join().unwrap(), Err(RecvError(())));
    });
}

#[test]
fn sender_closed_wakes_when_the_receiver_goes() {
    watchdog(20, || {
        let rt = rt2();
        let (mut tx, rx) = oneshot::channel::<u8>();
        let h = rt.spawn(async move {
            tx.closed().await;
            tx.is_closed()
        });
        std::thread::sleep(Duration::from_millis(10));
        drop(rx);
        assert!(join_within(h, 10).unwrap());
    });
}

/// Many channels raced between senders and dropped receivers: no hang, no leak.
#[test]
fn races_of_send_and_receiver_drop() {
    watchdog(30, || {
        let rt = rt2();
        let drops = Drops::new(2000);
        for i in 0..2000 {
            let (tx, rx) = oneshot::channel();
            let d = drops.clone();
            let s = std::thread::spawn(move || {
                let _ = tx.send(d.make(i));
            });
            let r = rt.spawn(async move {
                if i % 2 == 0 {
                    drop_after((i % 3) as u64, rx).await.map(|r| r.is_ok())
                } else {
                    Some(rx.await.is_ok())
                }
            });
            s.join().unwrap();
            let _ = join_within(r, 10).unwrap();
        }
        for i in 0..2000 {
            assert_eq!(drops.get(i), 1, "value {i}");
        }
    });
}
