//! `weft::sync::RwLock` (issue 16): shared readers, exclusive writers, write preference
//! (a waiting writer stops new readers), every context, cancellation.

mod chan_common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use chan_common::*;
use weft::sync::RwLock;

fn poll<F: Future + ?Sized>(f: Pin<&mut F>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(Waker::noop()))
}

#[test]
fn basics_and_traits() {
    let mut l = RwLock::new(1);
    *l.get_mut() = 2;
    {
        let a = l.try_read().unwrap();
        let b = l.try_read().unwrap();
        assert_eq!(*a + *b, 4);
        assert!(l.try_write().is_err());
    }
    *l.try_write().unwrap() += 1;
    assert_eq!(format!("{l:?}"), "RwLock { data: 3 }");
    let l = Arc::new(l);
    is_send_sync(&*l);
    is_send_sync(&l.try_read().unwrap());
    is_send_sync(&l.try_write().unwrap());
    is_send_sync(&l.clone().try_read_owned().unwrap());
    is_send_sync(&l.clone().try_write_owned().unwrap());
    let f = l.read();
    is_send(&f);
    drop(f);
    assert_eq!(Arc::try_unwrap(l).unwrap().into_inner(), 3);
}

/// Once a writer waits, `try_read` fails and new readers queue behind it; the writer
/// gets the lock when the old readers leave, then the queued reader.
#[test]
fn write_preferring() {
    let l = RwLock::new(0);
    let r1 = l.try_read().unwrap();
    let mut w = Box::pin(l.write());
    assert!(poll(w.as_mut()).is_pending());
    assert!(l.try_read().is_err(), "a waiting writer blocks new readers");
    let mut r2 = Box::pin(l.read());
    assert!(poll(r2.as_mut()).is_pending());
    drop(r1);
    let mut g = match poll(w.as_mut()) {
        Poll::Ready(g) => g,
        Poll::Pending => panic!("the writer should have the lock"),
    };
    assert!(poll(r2.as_mut()).is_pending());
    *g = 5;
    drop(g);
    match poll(r2.as_mut()) {
        Poll::Ready(g) => assert_eq!(*g, 5),
        Poll::Pending => panic!("the reader should follow the writer"),
    };
}

/// A writer dropped while waiting (having gathered some permits) or after it was handed
/// the lock lets the readers behind it in.
#[test]
fn cancelled_writer_lets_readers_in() {
    let l = RwLock::new(0);
    let r1 = l.try_read().unwrap();
    let mut w = Box::pin(l.write());
    assert!(poll(w.as_mut()).is_pending());
    let mut r2 = Box::pin(l.read());
    assert!(poll(r2.as_mut()).is_pending());
    drop(w);
    assert!(matches!(poll(r2.as_mut()), Poll::Ready(_)));
    drop(r2);
    drop(r1);

    let r1 = l.try_read().unwrap();
    let mut w = Box::pin(l.write());
    assert!(poll(w.as_mut()).is_pending());
    let mut r2 = Box::pin(l.read());
    assert!(poll(r2.as_mut()).is_pending());
    drop(r1); // the writer is handed the lock
    drop(w); // ... and dropped before it saw it
    assert!(matches!(poll(r2.as_mut()), Poll::Ready(_)));
    drop(r2);
    assert!(l.try_write().is_ok());
}

/// Readers and writers in every context: writers exclusive, readers concurrent with
/// each other only.
#[test]
fn stress_every_context() {
    const ROUNDS: usize = 2000;
    watchdog(60, || {
        let rt = rt2();
        let l = Arc::new(RwLock::new(0u64));
        // > 0: readers inside; -1: a writer inside.
        let inside = Arc::new(AtomicIsize::new(0));
        let writes = Arc::new(AtomicUsize::new(0));
        let read_check = {
            let inside = inside.clone();
            move || {
                let n = inside.fetch_add(1, SeqCst);
                assert!(n >= 0, "a reader beside a writer");
                inside.fetch_sub(1, SeqCst);
            }
        };
        let write_check = {
            let (inside, writes) = (inside.clone(), writes.clone());
            move || {
                assert_eq!(inside.compare_exchange(0, -1, SeqCst, SeqCst), Ok(0));
                writes.fetch_add(1, SeqCst);
                inside.store(0, SeqCst);
            }
        };
        let mut hs = vec![];
        for i in 0..2 {
            let (l, rc, wc) = (l.clone(), read_check.clone(), write_check.clone());
            hs.push(rt.spawn(async move {
                for k in 0..ROUNDS {
                    if (k + i) % 4 == 0 {
                        let mut g = l.write().await;
                        wc();
                        *g += 1;
                    } else {
                        let _g = l.read().await;
                        rc();
                    }
                    if k % 16 == 0 {
                        weft::task::yield_now().await;
                    }
                }
            }));
        }
        for i in 0..2 {
            let (l, rc, wc) = (l.clone(), read_check.clone(), write_check.clone());
            hs.push(fiber_on(&rt, move || {
                for k in 0..ROUNDS {
                    if (k + i) % 3 == 0 {
                        let mut g = l.write_blocking();
                        wc();
                        *g += 1;
                    } else {
                        let _g = l.read_blocking();
                        rc();
                    }
                }
            }));
        }
        let (l2, rc, wc) = (l.clone(), read_check.clone(), write_check.clone());
        let t = std::thread::spawn(move || {
            for k in 0..ROUNDS {
                if k % 2 == 0 {
                    let mut g = l2.write_blocking();
                    wc();
                    *g += 1;
                } else {
                    let _g = l2.read_blocking();
                    rc();
                }
            }
        });
        for h in hs {
            join_within(h, 50).unwrap();
        }
        t.join().unwrap();
        assert_eq!(*l.read_blocking(), writes.load(SeqCst) as u64);
    });
}

/// A writer is not starved by a stream of readers.
#[test]
fn writer_not_starved_by_readers() {
    watchdog(20, || {
        let rt = rt2();
        let l = Arc::new(RwLock::new(0));
        let stop = Arc::new(AtomicUsize::new(0));
        let mut hs = vec![];
        for _ in 0..3 {
            let (l, stop) = (l.clone(), stop.clone());
            hs.push(rt.spawn(async move {
                while stop.load(SeqCst) == 0 {
                    let _g = l.read().await;
                    weft::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(20));
        *l.write_blocking() = 1;
        stop.store(1, SeqCst);
        for h in hs {
            join_within(h, 10).unwrap();
        }
    });
}
