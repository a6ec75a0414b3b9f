//! Channels need no runtime (issue 15): plain threads in a program that never builds
//! one use them as they would crossbeam's. No test in this file builds a runtime (it is
//! its own test binary, so no other test's runtime is around either); each checks at
//! the end that none is running.

mod chan_common;

use std::pin::Pin;
use std::time::{Duration, Instant};

use chan_common::*;
use futures_core::Stream;
use weft::chan::{self, RecvTimeoutError, Select, SendTimeoutError};

fn assert_no_runtime() {
    assert!(weft::Handle::try_current().is_err(), "a runtime is current");
    let e = weft::fiber::try_spawn(|| ()).unwrap_err();
    assert_eq!(
        e.kind(),
        weft::fiber::SpawnErrorKind::NoRuntime,
        "a runtime is running in this process"
    );
}

#[test]
fn mpmc_on_plain_threads() {
    watchdog(15, || {
        for cap in FLAVOURS {
            let (tx, rx) = make::<u64>(cap);
            let senders: Vec<_> = (0..4u64)
                .map(|s| {
                    let tx = tx.clone();
                    std::thread::spawn(move || {
                        for i in 0..2000 {
                            tx.send_blocking(s << 32 | i).unwrap();
                        }
                    })
                })
                .collect();
            drop(tx);
            let receivers: Vec<_> = (0..4)
                .map(|_| {
                    let rx = rx.clone();
                    std::thread::spawn(move || rx.iter().collect::<Vec<_>>())
                })
                .collect();
            drop(rx);
            for s in senders {
                s.join().unwrap();
            }
            let mut all: Vec<u64> = receivers
                .into_iter()
                .flat_map(|r| r.join().unwrap())
                .collect();
            all.sort_unstable();
            let want: Vec<u64> = (0..4u64)
                .flat_map(|s| (0..2000).map(move |i| s << 32 | i))
                .collect();
            assert_eq!(all, want, "cap {cap:?}");
        }
        assert_no_runtime();
    })
}

#[test]
fn timeouts_on_plain_threads() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<i32>(1);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        tx.send_timeout(1, Duration::from_millis(10)).unwrap();
        let t = Instant::now();
        assert_eq!(
            tx.send_timeout(2, Duration::from_millis(20)),
            Err(SendTimeoutError::Timeout(2))
        );
        assert!(t.elapsed() >= Duration::from_millis(19));
        assert_eq!(
            rx.recv_deadline(Instant::now() + Duration::from_secs(1)),
            Ok(1)
        );
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send_blocking(3).unwrap();
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(3));
        t.join().unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        );
        assert_no_runtime();
    })
}

#[test]
fn timer_receivers_block_on_plain_threads() {
    watchdog(10, || {
        let start = Instant::now();
        let at = chan::after(Duration::from_millis(20))
            .recv_blocking()
            .unwrap();
        assert!(at >= start + Duration::from_millis(20) && Instant::now() >= at);
        let when = Instant::now() + Duration::from_millis(10);
        assert_eq!(chan::at(when).recv_blocking(), Ok(when));
        let tick = chan::tick(Duration::from_millis(5));
        let (a, b) = (tick.recv_blocking().unwrap(), tick.recv_blocking().unwrap());
        assert!(b > a);
        assert_eq!(
            chan::never::<i32>().recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(chan::after(Duration::from_secs(60)).try_recv().is_err());
        assert_no_runtime();
    })
}

/// `recv_timeout` on a timer receiver, from a plain thread with no runtime, as
/// crossbeam allows (`after(d).recv_timeout(t)`).
#[test]
fn timer_receivers_recv_timeout_on_plain_threads() {
    watchdog(10, || {
        let r = std::panic::catch_unwind(|| {
            let rx = chan::after(Duration::from_millis(10));
            rx.recv_timeout(Duration::from_secs(5))
        });
        let r = r.expect("after(..).recv_timeout(..) panicked on a plain thread");
        assert!(r.is_ok(), "{r:?}");
        let rx = chan::after(Duration::from_secs(60));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
        let tick = chan::tick(Duration::from_millis(5));
        assert!(tick.recv_timeout(Duration::from_secs(5)).is_ok());
        assert_no_runtime();
    })
}

#[test]
fn select_on_plain_threads() {
    watchdog(10, || {
        let (tx, rx) = chan::bounded::<i32>(0);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            tx.send_blocking(1).unwrap();
        });
        let timeout = chan::after(Duration::from_secs(5));
        weft::select! {
            recv(rx) -> m => assert_eq!(m, Ok(1)),
            recv(timeout) -> _ => panic!("timed out"),
        }
        t.join().unwrap();
        let (_tx2, rx2) = chan::unbounded::<i32>();
        let start = Instant::now();
        weft::select! {
            recv(rx2) -> _ => panic!(),
            recv(chan::after(Duration::from_millis(20))) -> m => assert!(m.is_ok()),
        }
        assert!(start.elapsed() >= Duration::from_millis(19));
        weft::select! {
            recv(rx2) -> _ => panic!(),
            default(Duration::from_millis(5)) => {}
        }
        let mut sel = Select::new();
        let i = sel.recv(&rx2);
        assert!(sel.select_timeout(Duration::from_millis(5)).is_err());
        assert!(sel.ready_timeout(Duration::from_millis(5)).is_err());
        _tx2.send_blocking(3).unwrap();
        assert_eq!(sel.ready(), i);
        assert_eq!(sel.select().recv(&rx2), Ok(3));
        assert_no_runtime();
    })
}

#[test]
fn stream_driven_by_wait_on_a_plain_thread() {
    watchdog(10, || {
        let (tx, mut rx) = chan::bounded::<u32>(1);
        let t = std::thread::spawn(move || {
            for i in 0..100 {
                tx.send_blocking(i).unwrap();
            }
        });
        let mut got = vec![];
        while let Some(v) = weft::wait(std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx))) {
            got.push(v);
        }
        t.join().unwrap();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
        // The async forms, driven by `wait` from a plain thread.
        let (tx, rx) = chan::bounded::<u32>(0);
        let t = std::thread::spawn(move || weft::wait(tx.send(5)));
        assert_eq!(weft::wait(rx.recv()), Ok(5));
        assert_eq!(t.join().unwrap(), Ok(()));
        assert_no_runtime();
    })
}
