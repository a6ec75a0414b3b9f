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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// A value that counts its clones and drops (in its [`Probe`]) and runs a hook in its
/// `Clone`.
struct Counted {
    probe: Probe,
    on_clone: Arc<dyn Fn() + Send + Sync>,
}

/// The counters of a [`Counted`] and of its clones.
#[derive(Clone, Default)]
struct Probe {
    clones: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Probe {
    fn clones(&self) -> usize {
        self.clones.load(SeqCst)
    }
    fn drops(&self) -> usize {
        self.drops.load(SeqCst)
    }
}

impl Counted {
    fn new(on_clone: impl Fn() + Send + Sync + 'static) -> (Counted, Probe) {
        let probe = Probe::default();
        let v = Counted {
            probe: probe.clone(),
            on_clone: Arc::new(on_clone),
        };
        (v, probe)
    }
}

impl Clone for Counted {
    fn clone(&self) -> Counted {
        (self.on_clone)();
        self.probe.clones.fetch_add(1, SeqCst);
        Counted {
            probe: self.probe.clone(),
            on_clone: self.on_clone.clone(),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.probe.drops.fetch_add(1, SeqCst);
    }
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad("Counted")
    }
}

/// One receiver: the value is moved to it, never cloned; two read one after the other:
/// one clone (the first reader's), the last reader moves the value.
#[test]
fn a_value_is_cloned_only_for_readers_before_the_last() {
    let (tx, mut rx) = broadcast::channel(4);
    let (v, probe) = Counted::new(|| panic!("a value of one receiver was cloned"));
    tx.send(v).unwrap();
    let got = rx.try_recv().unwrap();
    assert_eq!((probe.clones(), probe.drops()), (0, 0));
    drop(got);
    assert_eq!(probe.drops(), 1);

    let mut rx2 = tx.subscribe();
    let (v, probe) = Counted::new(|| {});
    tx.send(v).unwrap();
    let a = rx.try_recv().unwrap();
    let b = rx2.try_recv().unwrap();
    assert_eq!(probe.clones(), 1, "the last reader moves the value out");
    drop((a, b));
    assert_eq!(probe.drops(), 2);
}

/// `T::clone` runs outside the channel's lock: a `Clone` that uses the same channel
/// (`receiver_count`, `subscribe`, `send`) completes, from `try_recv`, `recv().await` and
/// `recv_blocking` alike (before session 27 it spun for ever on the lock its receive held).
#[test]
fn a_clone_may_use_its_own_channel() {
    watchdog(20, || {
        let cell: Arc<std::sync::OnceLock<broadcast::Sender<Counted>>> = Default::default();
        let hook = cell.clone();
        let (tx, mut rx1) = broadcast::channel::<Counted>(64);
        let mut rx2 = tx.subscribe();
        let mut rx3 = tx.subscribe();
        cell.set(tx.clone()).ok().unwrap();
        let (v, probe) = Counted::new(move || {
            let tx = hook.get().unwrap();
            assert!(tx.receiver_count() >= 3);
            drop(tx.subscribe());
        });
        for _ in 0..3 {
            tx.send(v.clone()).unwrap();
        }
        drop(v);
        let base = probe.clones();
        drop(rx1.try_recv().unwrap());
        let rt = rt2();
        let got = rt.block_on(async { rx1.recv().await.unwrap() });
        drop(got);
        drop(rx1.recv_blocking().unwrap());
        let fiber = fiber_on(&rt, move || {
            for _ in 0..3 {
                drop(rx2.recv_blocking().unwrap());
            }
            rx2
        });
        let _rx2 = join_within(fiber, 10).unwrap();
        for _ in 0..3 {
            drop(rx3.try_recv().unwrap());
        }
        // rx1 and rx2 cloned every value; rx3 read each last and moved it.
        assert_eq!(probe.clones() - base, 6);
    });
}

/// A receiver whose `clone` waits holds up only the receivers of that same value (whose
/// clones it serializes, as tokio's slot mutex does): the channel's lock is free
/// meanwhile, so senders, `receiver_count`, `subscribe` and receives of other values go
/// on.
#[test]
fn a_slow_clone_holds_up_only_its_value() {
    watchdog(20, || {
        let (entered_tx, entered) = std::sync::mpsc::channel::<()>();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let gate = std::sync::Mutex::new(Some((entered_tx, go_rx)));
        let (tx, mut slow) = broadcast::channel::<Counted>(8);
        let mut quick = tx.subscribe();
        // The first clone (the slow receiver's) says it has started and waits.
        let (v, probe) = Counted::new(move || {
            let first = gate.lock().unwrap().take();
            if let Some((entered, go)) = first {
                entered.send(()).unwrap();
                go.recv().unwrap();
            }
        });
        tx.send(v).unwrap();
        let slow = std::thread::spawn(move || slow.recv_blocking().map(drop));
        entered.recv().unwrap();
        // All of these take the channel's lock while the slow clone runs.
        assert_eq!(tx.receiver_count(), 2);
        let mut late = tx.subscribe();
        let (v2, probe2) = Counted::new(|| {});
        tx.send(v2).unwrap();
        drop(late.try_recv().unwrap());
        assert_eq!(late.try_recv().unwrap_err(), TryRecvError::Empty);
        go_tx.send(()).unwrap();
        slow.join().unwrap().unwrap();
        // The last reader of the first value; its clone is done: moved out.
        drop(quick.try_recv().unwrap());
        assert_eq!(probe.clones(), 1);
        assert_eq!(probe.drops(), 2, "a clone and the value");
        drop(quick.try_recv().unwrap());
        drop(late);
        drop(tx);
        assert_eq!(probe2.drops(), probe2.clones() + 1);
    });
}

/// A `clone` that panics costs its receiver that value (its position has moved, as
/// when the panic came from under the lock) and nothing else: the other receiver
/// gets it, the channel goes on, and every value is dropped once.
#[test]
fn a_panicking_clone_loses_only_its_copy() {
    let armed = Arc::new(AtomicBool::new(true));
    let trigger = armed.clone();
    let (tx, mut rx1) = broadcast::channel::<Counted>(4);
    let mut rx2 = tx.subscribe();
    let (v, probe) = Counted::new(move || {
        if trigger.swap(false, SeqCst) {
            panic!("clone failed");
        }
    });
    tx.send(v).unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rx1.try_recv()));
    assert!(caught.is_err());
    assert!(!armed.load(SeqCst));
    drop(rx2.try_recv().unwrap());
    assert_eq!(probe.drops(), 1, "the value, dropped once");
    tx.send(Counted::new(|| {}).0).unwrap();
    drop(rx1.try_recv().unwrap());
    drop(rx2.try_recv().unwrap());
    assert_eq!(rx1.try_recv().unwrap_err(), TryRecvError::Empty);
}
