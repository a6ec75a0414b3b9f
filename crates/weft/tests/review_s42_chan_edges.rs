//! Review s42: channel edge cases (`weft::chan`, `weft::sync::{broadcast, watch,
//! oneshot}`), from safe code only: zero-sized and large values through every flavour,
//! absurd capacities, values whose `Drop` panics, `len`/`is_full` under concurrency,
//! the `Stream` after its end and with changing wakers, futures moved between threads,
//! broadcast lag counts, a watch `Ref` held across a send, oneshot with panicking
//! wakers, the ordered channel with panicking and cancelled work.

mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use common::{counting_waker as count_waker, watchdog};
use weft::chan::{self, TryRecvError, TrySendError};

/// The capacities that pick each buffer: ring (1 ..= 1 << 20), bounded list (above),
/// and `None` for unbounded.
const CAPS: &[Option<usize>] = &[
    Some(1),
    Some(2),
    Some(3),
    Some(31),
    Some(32),
    Some(33),
    Some(1 << 20),
    Some((1 << 20) + 1),
    Some(usize::MAX / 2),
    Some(usize::MAX),
    None,
];

fn make<T>(cap: Option<usize>) -> (chan::Sender<T>, chan::Receiver<T>) {
    match cap {
        Some(c) => chan::bounded(c),
        None => chan::unbounded(),
    }
}

/// A waker whose wake panics.
struct Panicky;

impl Wake for Panicky {
    fn wake(self: Arc<Self>) {
        panic!("a waker that panics");
    }
}

fn poll_once<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

// ---- zero-sized values ----

static ZST_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A zero-sized value that counts its drops.
struct Zst;

impl Drop for Zst {
    fn drop(&mut self) {
        ZST_DROPS.fetch_add(1, SeqCst);
    }
}

/// Zero-sized values through every buffered flavour: `len`, `is_full`, `is_empty` as
/// for any value, each value dropped exactly once (received, or left in the channel at
/// its drop).
#[test]
fn zero_sized_values_through_every_buffered_flavour() {
    watchdog(20, || {
        let mut expected = 0;
        for &cap in CAPS {
            let (tx, rx) = make::<Zst>(cap);
            let n = cap.unwrap_or(usize::MAX).min(100);
            for i in 0..n {
                tx.try_send(Zst)
                    .unwrap_or_else(|_| panic!("cap {cap:?}: send {i} failed"));
                assert_eq!(tx.len(), i + 1, "cap {cap:?}");
            }
            assert_eq!(rx.len(), n, "cap {cap:?}");
            assert_eq!(tx.is_full(), Some(n) == cap, "cap {cap:?}");
            if Some(n) == cap {
                match tx.try_send(Zst) {
                    Err(TrySendError::Full(_)) => {}
                    _ => panic!("cap {cap:?}: a send beyond the capacity"),
                }
                expected += 1; // the value handed back was dropped
            }
            for _ in 0..n / 2 {
                drop(rx.try_recv().expect("a value"));
            }
            assert_eq!(rx.len(), n - n / 2, "cap {cap:?}");
            expected += n;
            drop(tx);
            drop(rx);
            assert_eq!(ZST_DROPS.load(SeqCst), expected, "cap {cap:?}");
        }
    });
}

/// Millions of zero-sized values in an unbounded channel (the list's block indices
/// run far past a few blocks): `len` exact, every value received once, then empty.
#[test]
fn millions_of_zero_sized_values_in_an_unbounded_channel() {
    watchdog(20, || {
        const N: usize = 3_000_000;
        let (tx, rx) = chan::unbounded::<()>();
        for _ in 0..N {
            tx.send_blocking(()).unwrap();
        }
        assert_eq!(rx.len(), N);
        assert_eq!(rx.try_iter().count(), N);
        assert!(rx.is_empty());
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        drop(tx);
        assert!(rx.recv_blocking().is_err());
    });
}

/// Zero-sized values between threads through a small ring, many laps: none lost, none
/// duplicated (counted), `len` never above the capacity.
#[test]
fn zero_sized_values_between_threads_many_laps() {
    watchdog(20, || {
        for cap in [Some(1), Some(3), Some((1 << 20) + 1), None] {
            const N: usize = 20_000;
            let (tx, rx) = make::<()>(cap);
            let tx2 = tx.clone();
            let a = std::thread::spawn(move || {
                for _ in 0..N / 2 {
                    tx.send_blocking(()).unwrap();
                }
            });
            let b = std::thread::spawn(move || {
                for _ in 0..N / 2 {
                    tx2.send_blocking(()).unwrap();
                }
            });
            let mut got = 0;
            while rx.recv_blocking().is_ok() {
                got += 1;
                if let Some(c) = cap {
                    assert!(rx.len() <= c, "cap {c}: len {}", rx.len());
                }
            }
            a.join().unwrap();
            b.join().unwrap();
            assert_eq!(got, N, "cap {cap:?}");
        }
    });
}

/// The rendezvous channel with zero-sized values: each send meets one receive.
#[test]
fn zero_sized_values_through_the_rendezvous_channel() {
    watchdog(20, || {
        let (tx, rx) = chan::bounded::<Zst>(0);
        assert!(tx.try_send(Zst).unwrap_err().is_full());
        let h = std::thread::spawn(move || {
            for _ in 0..10_000 {
                tx.send_blocking(Zst).unwrap();
            }
        });
        let mut got = 0;
        for v in rx.iter() {
            drop(v);
            got += 1;
        }
        h.join().unwrap();
        assert_eq!(got, 10_000);
    });
}

// ---- capacities ----

/// Absurd capacities make a channel at once, use little memory, and keep to their
/// capacity: `bounded(usize::MAX)`, `bounded(usize::MAX / 2)`, the largest ring, the
/// smallest bounded list, and capacities whose values would take gigabytes.
#[test]
fn absurd_capacities_make_a_working_channel_at_once() {
    fn check<T: Send>(cap: usize, mk: fn() -> T) {
        let t = Instant::now();
        let (tx, rx) = chan::bounded::<T>(cap);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "bounded::<{}>({cap}) took {:?}",
            std::any::type_name::<T>(),
            t.elapsed()
        );
        assert_eq!(tx.capacity(), Some(cap));
        for _ in 0..3 {
            assert!(tx.try_send(mk()).is_ok(), "room");
        }
        assert_eq!(rx.len(), 3);
        assert!(!tx.is_full());
        for _ in 0..3 {
            assert!(rx.try_recv().is_ok(), "a value");
        }
        assert!(rx.is_empty());
    }
    watchdog(20, || {
        check(usize::MAX, || 0u64);
        check(usize::MAX / 2, || 0u64);
        check(usize::MAX - 1, || 0u64);
        check(1 << 20, || 0u64);
        check((1 << 20) + 1, || 0u64);
        check(1 << 20, || [0u64; 32]); // 256 MiB of values: the largest ring
        check(1 << 20, || [0u64; 33]); // just over: a list
        check(usize::MAX, || [0u64; 512]);
        check(usize::MAX, || ());
        check(1 << 20, || ());
    });
}

/// A bounded list (capacity above the ring's) keeps to its capacity when senders race
/// for the last slots: exactly the free slots' worth of `try_send`s succeed.
#[test]
fn a_bounded_list_keeps_to_its_capacity_under_racing_senders() {
    watchdog(20, || {
        let cap = (1 << 20) + 1;
        let (tx, rx) = chan::bounded::<u8>(cap);
        for _ in 0..cap - 3 {
            tx.try_send(0).unwrap();
        }
        let ok = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(Barrier::new(4));
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let (tx, ok, go) = (tx.clone(), ok.clone(), go.clone());
                std::thread::spawn(move || {
                    go.wait();
                    for _ in 0..50 {
                        if tx.try_send(1).is_ok() {
                            ok.fetch_add(1, SeqCst);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(ok.load(SeqCst), 3);
        assert_eq!(rx.len(), cap);
        assert!(tx.is_full());
        assert!(tx
            .send_timeout(2, Duration::from_millis(5))
            .unwrap_err()
            .is_timeout());
    });
}

/// `len()` and `is_full()` of a ring under heavy concurrent use never report more than
/// the capacity (no value is given back and no select runs, the only cases the rustdoc
/// of `bounded` allows more).
#[test]
fn len_never_exceeds_the_capacity_under_concurrency() {
    watchdog(20, || {
        for cap in [1usize, 2, 4, (1 << 20) + 1] {
            let (tx, rx) = chan::bounded::<u32>(cap);
            let stop = Arc::new(AtomicBool::new(false));
            let mut hs = Vec::new();
            for _ in 0..2 {
                let (tx, stop1) = (tx.clone(), stop.clone());
                hs.push(std::thread::spawn(move || {
                    while !stop1.load(SeqCst) {
                        let _ = tx.send_timeout(1, Duration::from_millis(1));
                    }
                }));
                let (rx, stop2) = (rx.clone(), stop.clone());
                hs.push(std::thread::spawn(move || {
                    while !stop2.load(SeqCst) {
                        let _ = rx.recv_timeout(Duration::from_millis(1));
                    }
                }));
            }
            let t = Instant::now();
            let mut worst = 0;
            while t.elapsed() < Duration::from_millis(300) {
                let n = tx.len();
                worst = worst.max(n);
                assert!(n <= cap, "cap {cap}: len {n}");
                if cap <= 4 && rx.is_full() {
                    assert!(cap > 0);
                }
            }
            stop.store(true, SeqCst);
            for h in hs {
                h.join().unwrap();
            }
            assert!(worst <= cap);
        }
    });
}

// ---- values whose drop panics ----

static BOOM_DROPS: AtomicUsize = AtomicUsize::new(0);

/// Panics on drop when its flag is set; counts every drop.
struct Boom(bool);

impl Drop for Boom {
    fn drop(&mut self) {
        BOOM_DROPS.fetch_add(1, SeqCst);
        if self.0 {
            panic!("Boom dropped");
        }
    }
}

/// Values left in the channel when the last receiver goes, the first of which panics
/// as it drops: the panic comes out of the receiver's drop, no value is dropped twice,
/// and the channel is disconnected for the senders afterwards (every flavour).
#[test]
fn a_panicking_drop_in_the_buffer_at_the_last_receivers_drop() {
    watchdog(20, || {
        for cap in [Some(4), Some((1 << 20) + 1), None] {
            let before = BOOM_DROPS.load(SeqCst);
            let (tx, rx) = make::<Boom>(cap);
            tx.send_blocking(Boom(false)).unwrap();
            tx.send_blocking(Boom(true)).unwrap();
            tx.send_blocking(Boom(false)).unwrap();
            let r = catch_unwind(AssertUnwindSafe(move || drop(rx)));
            assert!(r.is_err(), "cap {cap:?}: the drop's panic did not come out");
            let dropped = BOOM_DROPS.load(SeqCst) - before;
            // The first two dropped (the second panicking); the third leaked or dropped,
            // never twice.
            assert!((2..=3).contains(&dropped), "cap {cap:?}: {dropped} drops");
            assert!(tx.is_closed(), "cap {cap:?}");
            match tx.try_send(Boom(false)) {
                Err(TrySendError::Disconnected(v)) => drop(v),
                _ => panic!("cap {cap:?}: a send after the receivers went"),
            }
            let after = BOOM_DROPS.load(SeqCst) - before;
            drop(tx);
            assert_eq!(BOOM_DROPS.load(SeqCst) - before, after, "cap {cap:?}");
        }
    });
}

/// A value handed to a waiting receive whose future is then dropped (the receiver
/// itself kept): the value goes back to the channel and is received once.
#[test]
fn a_value_handed_to_a_dropped_receive_is_received_once() {
    watchdog(20, || {
        for cap in [Some(0), Some(1), Some((1 << 20) + 1), None] {
            let (tx, rx) = make::<u32>(cap);
            let (_c, w) = count_waker();
            let mut fut = Box::pin(rx.recv());
            assert!(fut.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
            let h = std::thread::spawn(move || tx.send_blocking(7));
            // Wait for the hand-over (the send completes once the value is in the node).
            common::wait_until("the send completed", || h.is_finished());
            h.join().unwrap().unwrap();
            drop(fut);
            assert_eq!(rx.try_recv(), Ok(7), "cap {cap:?}");
            assert_eq!(
                rx.try_recv(),
                Err(TryRecvError::Disconnected),
                "cap {cap:?}"
            );
        }
    });
}

// ---- Stream ----

/// The `Stream` after it returned `None` keeps returning `None` (it does not hang or
/// panic), and after a close with values buffered it yields them first.
#[test]
fn the_stream_after_its_end() {
    use futures_core::Stream;
    watchdog(20, || {
        for cap in [Some(0), Some(2), Some((1 << 20) + 1), None] {
            let (tx, mut rx) = make::<u32>(cap);
            let (_c, w) = count_waker();
            let mut cx = Context::from_waker(&w);
            if cap != Some(0) {
                tx.send_blocking(1).unwrap();
                tx.send_blocking(2).unwrap();
            }
            tx.close();
            if cap != Some(0) {
                assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(Some(1)));
                assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(Some(2)));
            }
            for _ in 0..3 {
                assert_eq!(
                    Pin::new(&mut rx).poll_next(&mut cx),
                    Poll::Ready(None),
                    "cap {cap:?}"
                );
            }
            drop(tx);
            assert_eq!(Pin::new(&mut rx).poll_next(&mut cx), Poll::Ready(None));
        }
    });
}

/// The `Stream` polled with one waker then another: the last waker is woken by the
/// next send; a close wakes a waiting stream, which then ends.
#[test]
fn the_stream_with_changing_wakers() {
    use futures_core::Stream;
    watchdog(20, || {
        for cap in [Some(0), Some(2), Some((1 << 20) + 1), None] {
            let (tx, mut rx) = make::<u32>(cap);
            let (a, wa) = count_waker();
            let (b, wb) = count_waker();
            assert!(Pin::new(&mut rx)
                .poll_next(&mut Context::from_waker(&wa))
                .is_pending());
            assert!(Pin::new(&mut rx)
                .poll_next(&mut Context::from_waker(&wb))
                .is_pending());
            let tx2 = tx.clone();
            let h = std::thread::spawn(move || tx2.send_blocking(5));
            common::wait_until("the second waker woken", || b.0.load(SeqCst) > 0);
            assert_eq!(a.0.load(SeqCst), 0, "cap {cap:?}: the replaced waker woken");
            let mut got = None;
            common::wait_until("the value", || {
                match Pin::new(&mut rx).poll_next(&mut Context::from_waker(&wb)) {
                    Poll::Ready(v) => {
                        got = v;
                        true
                    }
                    Poll::Pending => false,
                }
            });
            assert_eq!(got, Some(5), "cap {cap:?}");
            h.join().unwrap().unwrap();
            // Now wait again, and close.
            let (c, wc) = count_waker();
            assert!(Pin::new(&mut rx)
                .poll_next(&mut Context::from_waker(&wc))
                .is_pending());
            drop(tx);
            common::wait_until("the close woke the stream", || c.0.load(SeqCst) > 0);
            assert_eq!(
                Pin::new(&mut rx).poll_next(&mut Context::from_waker(&wc)),
                Poll::Ready(None),
                "cap {cap:?}"
            );
        }
    });
}

// ---- futures moved between threads ----

/// A `recv()` future polled on one thread, moved to another and polled there with
/// another waker (and then by an executor, `block_on`): the value sent later comes to
/// it, the new waker is woken, the old one is not needed.
#[test]
fn a_receive_future_moved_between_threads() {
    watchdog(20, || {
        for cap in [Some(0), Some(1), Some((1 << 20) + 1), None] {
            let (tx, rx) = make::<u64>(cap);
            let rt = common::workers(1);
            std::thread::scope(|s| {
                let rx = &rx;
                let (fut, b) = s
                    .spawn(move || {
                        let (_a, wa) = count_waker();
                        let mut fut = Box::pin(rx.recv());
                        assert!(fut
                            .as_mut()
                            .poll(&mut Context::from_waker(&wa))
                            .is_pending());
                        fut
                    })
                    .join()
                    .map(|mut fut| {
                        let (b, wb) = count_waker();
                        let fut = s
                            .spawn(move || {
                                assert!(fut
                                    .as_mut()
                                    .poll(&mut Context::from_waker(&wb))
                                    .is_pending());
                                fut
                            })
                            .join()
                            .unwrap();
                        (fut, b)
                    })
                    .unwrap();
                let tx = &tx;
                let sender = s.spawn(move || tx.send_blocking(11));
                common::wait_until("the moved future's waker woken", || b.0.load(SeqCst) > 0);
                let got = rt.block_on(fut);
                assert_eq!(got, Ok(11), "cap {cap:?}");
                sender.join().unwrap().unwrap();
            });
        }
    });
}

// ---- broadcast ----

/// Capacity 1 under a concurrent sender: every value is either received or counted in
/// a `Lagged`, exactly (the counts add up to what was sent), values come in order.
#[test]
fn broadcast_lag_counts_add_up_under_concurrency() {
    use weft::sync::broadcast::{self, error::RecvError};
    watchdog(20, || {
        for cap in [1usize, 2, 3, 16] {
            const N: u64 = 100_000;
            let (tx, rx1) = broadcast::channel::<u64>(cap);
            let rx2 = tx.subscribe();
            let go = Arc::new(Barrier::new(3));
            let reader = |mut rx: broadcast::Receiver<u64>, go: Arc<Barrier>| {
                std::thread::spawn(move || {
                    go.wait();
                    let (mut got, mut lagged, mut last) = (0u64, 0u64, None::<u64>);
                    loop {
                        match rx.recv_blocking() {
                            Ok(v) => {
                                if let Some(l) = last {
                                    assert!(v > l, "{v} after {l}");
                                }
                                // Every value before `v` was received or counted lagged.
                                assert_eq!(got + lagged, v, "at value {v}");
                                last = Some(v);
                                got += 1;
                            }
                            Err(RecvError::Lagged(n)) => {
                                assert!(n > 0);
                                lagged += n;
                            }
                            Err(RecvError::Closed) => break,
                        }
                    }
                    (got, lagged)
                })
            };
            let h1 = reader(rx1, go.clone());
            let h2 = reader(rx2, go.clone());
            go.wait();
            for i in 0..N {
                tx.send(i).unwrap();
            }
            drop(tx);
            for h in [h1, h2] {
                let (got, lagged) = h.join().unwrap();
                assert_eq!(got + lagged, N, "cap {cap}: got {got} lagged {lagged}");
            }
        }
    });
}

// ---- watch ----

/// A `Ref` held on one thread while another thread sends: the send waits for the
/// borrow to end, then completes; the receiver sees the new value, once.
#[test]
fn a_watch_ref_held_while_another_thread_sends() {
    use weft::sync::watch;
    watchdog(20, || {
        let (tx, mut rx) = watch::channel(String::from("a"));
        let r = rx.borrow();
        let sent = Arc::new(AtomicBool::new(false));
        let s2 = sent.clone();
        let h = std::thread::spawn(move || {
            tx.send("b".into()).unwrap();
            s2.store(true, SeqCst);
            tx
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!sent.load(SeqCst), "the send did not wait for the borrow");
        assert_eq!(*r, "a");
        drop(r);
        let tx = h.join().unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), "b");
        assert!(!rx.has_changed().unwrap());
        drop(tx);
        assert!(rx.changed_blocking().is_err());
    });
}

// ---- oneshot ----

/// The sender dropped while the receiver waits with a waker that panics: the panic
/// comes out of the sender's drop; the receiver then sees the channel closed.
#[test]
fn oneshot_sender_dropped_under_a_panicking_waker() {
    use weft::sync::oneshot;
    watchdog(20, || {
        let (tx, mut rx) = oneshot::channel::<u32>();
        let w = Waker::from(Arc::new(Panicky));
        assert!(poll_once(&mut rx, &w).is_pending());
        let r = catch_unwind(AssertUnwindSafe(move || drop(tx)));
        assert!(r.is_err(), "the waker's panic did not come out");
        let (_c, w2) = count_waker();
        assert!(matches!(poll_once(&mut rx, &w2), Poll::Ready(Err(_))));
    });
}

/// A send whose wake panics: the value is delivered all the same.
#[test]
fn oneshot_send_under_a_panicking_waker_delivers() {
    use weft::sync::oneshot;
    watchdog(20, || {
        let (tx, mut rx) = oneshot::channel::<u32>();
        let w = Waker::from(Arc::new(Panicky));
        assert!(poll_once(&mut rx, &w).is_pending());
        let r = catch_unwind(AssertUnwindSafe(move || tx.send(9)));
        assert!(r.is_err(), "the waker's panic did not come out");
        let (_c, w2) = count_waker();
        assert_eq!(poll_once(&mut rx, &w2), Poll::Ready(Ok(9)));
    });
}

// ---- the ordered channel ----

/// Work that panics comes out as its `JoinError` in its place; the results after it
/// still come in send order.
#[test]
fn ordered_with_panicking_work() {
    watchdog(20, || {
        let rt = common::workers(2);
        let (tx, rx) = common::on(&rt, || chan::ordered::<u32>(4));
        let h = std::thread::spawn({
            let tx = tx.clone();
            let rt = rt.handle().clone();
            move || {
                let _e = rt.enter();
                for i in 0..20u32 {
                    tx.spawn(async move {
                        weft::time::sleep(Duration::from_millis(u64::from(20 - i) % 5)).await;
                        assert!(i % 7 != 3, "work {i} panics");
                        i
                    })
                    .unwrap();
                }
            }
        });
        drop(tx);
        let mut out = Vec::new();
        while let Ok(r) = rx.recv_blocking() {
            out.push(r.map_err(|e| e.is_panic()));
        }
        h.join().unwrap();
        let want: Vec<_> = (0..20u32)
            .map(|i| if i % 7 == 3 { Err(true) } else { Ok(i) })
            .collect();
        assert_eq!(out, want);
    });
}

/// The ordered channel with capacity 0: a spawn waits for a receive; every result
/// comes in order; the receiver dropped mid-stream makes the next spawn fail with its
/// work's result.
#[test]
fn ordered_with_capacity_zero_and_a_receiver_dropped_mid_stream() {
    watchdog(20, || {
        let rt = common::workers(2);
        let (tx, rx) = common::on(&rt, || chan::ordered::<u32>(0));
        let handle = rt.handle().clone();
        let h = std::thread::spawn(move || {
            let _e = handle.enter();
            let mut i = 0u32;
            loop {
                match tx.spawn(async move { i }) {
                    Ok(()) => i += 1,
                    Err(e) => return (i, e.into_inner()),
                }
            }
        });
        for i in 0..10u32 {
            assert_eq!(rx.recv_blocking().unwrap().unwrap(), i);
        }
        drop(rx);
        let (i, back) = h.join().unwrap();
        assert!(i >= 10);
        assert_eq!(back.unwrap(), i);
    });
}

// ---- large values ----

/// A value of `N` bytes that says whether it arrived whole.
struct Big<const N: usize>([u8; N]);

impl<const N: usize> Big<N> {
    fn new(seed: u8) -> Box<Self> {
        let mut b = Box::new(Big([0u8; N]));
        for (i, x) in b.0.iter_mut().enumerate() {
            *x = seed.wrapping_add((i % 251) as u8);
        }
        b
    }

    fn check(&self, seed: u8) {
        for (i, x) in self.0.iter().enumerate() {
            assert_eq!(*x, seed.wrapping_add((i % 251) as u8), "byte {i}");
        }
    }
}

/// 1 MiB values by value (not boxed) through every flavour between threads, through
/// full channels (the wait path): each arrives whole, in order. (64 KiB unoptimised:
/// a debug build's frames hold a copy each, past even a 64 MiB stack.)
#[test]
fn one_mebibyte_values_by_value_through_every_flavour() {
    if cfg!(debug_assertions) {
        by_value_through_every_flavour::<{ 64 << 10 }>();
    } else {
        by_value_through_every_flavour::<{ 1 << 20 }>();
    }
}

fn by_value_through_every_flavour<const N: usize>() {
    watchdog(30, || {
        for cap in [Some(0), Some(1), Some(2), Some(300), None] {
            let (tx, rx) = make::<Big<N>>(cap);
            let h = common::big_thread(move || {
                for i in 0..12u8 {
                    tx.send_blocking(*Big::<N>::new(i)).unwrap();
                }
            });
            let got = common::big_thread(move || {
                let mut n = 0u8;
                for v in rx.iter() {
                    v.check(n);
                    n += 1;
                }
                n
            })
            .join()
            .unwrap();
            h.join().unwrap();
            assert_eq!(got, 12, "cap {cap:?}");
        }
    });
}

/// 64 KiB values sent and received by value on threads with the default 2 MiB stack,
/// through the waiting paths (blocking and async): no stack overflow. (8 KiB
/// unoptimised, where every frame holds its own copy: the bound is an optimised
/// build's, as in `chan_large_values.rs`.)
#[test]
fn sixty_four_kib_values_on_default_thread_stacks() {
    if cfg!(debug_assertions) {
        by_value_on_default_thread_stacks::<{ 8 << 10 }>();
    } else {
        by_value_on_default_thread_stacks::<{ 64 << 10 }>();
    }
}

fn by_value_on_default_thread_stacks<const N: usize>() {
    watchdog(30, || {
        for cap in [Some(0), Some(1), Some((1 << 20) + 1), None] {
            let (tx, rx) = make::<Big<N>>(cap);
            let h = std::thread::spawn(move || {
                for i in 0..20u8 {
                    tx.send_blocking(*Big::<N>::new(i)).unwrap();
                }
                let rt = common::workers(1);
                rt.block_on(async {
                    for i in 20..40u8 {
                        tx.send(*Big::<N>::new(i)).await.unwrap();
                    }
                });
            });
            let r = std::thread::spawn(move || {
                for i in 0..20u8 {
                    std::thread::sleep(Duration::from_micros(200));
                    rx.recv_blocking().unwrap().check(i);
                }
                let rt = common::workers(1);
                rt.block_on(async {
                    for i in 20..40u8 {
                        rx.recv().await.unwrap().check(i);
                    }
                });
                assert!(rx.recv_blocking().is_err());
            });
            h.join().unwrap();
            r.join().unwrap();
        }
    });
}

// ---- ends dropped and cloned concurrently ----

/// Senders blocked on a full channel while every receiver clone is dropped from
/// several threads at once: every blocked sender wakes with its value back.
#[test]
fn blocked_senders_wake_when_receiver_clones_drop_concurrently() {
    watchdog(30, || {
        for round in 0..100 {
            for cap in [0usize, 1, 2] {
                let (tx, rx) = chan::bounded::<u32>(cap);
                if cap > 0 {
                    tx.send_blocking(0).unwrap();
                }
                let senders: Vec<_> = (0..2)
                    .map(|i| {
                        let tx = tx.clone();
                        std::thread::spawn(move || loop {
                            match tx.send_blocking(i) {
                                Ok(()) => continue,
                                Err(e) => return e.0,
                            }
                        })
                    })
                    .collect();
                let rxs: Vec<_> = (0..3).map(|_| rx.clone()).collect();
                drop(rx);
                let go = Arc::new(Barrier::new(3));
                let droppers: Vec<_> = rxs
                    .into_iter()
                    .map(|r| {
                        let go = go.clone();
                        std::thread::spawn(move || {
                            go.wait();
                            drop(r);
                        })
                    })
                    .collect();
                for d in droppers {
                    d.join().unwrap();
                }
                for (i, s) in senders.into_iter().enumerate() {
                    assert_eq!(s.join().unwrap(), i as u32, "round {round} cap {cap}");
                }
                assert!(tx.is_closed());
            }
        }
    });
}

/// Receivers blocked on an empty channel while sender clones are made and dropped from
/// several threads and one closes: every receiver wakes with the channel disconnected.
#[test]
fn blocked_receivers_wake_when_sender_clones_drop_and_close_race() {
    watchdog(30, || {
        for round in 0..200 {
            for cap in [Some(0), Some(2), Some((1 << 20) + 1), None] {
                let (tx, rx) = make::<u32>(cap);
                let receivers: Vec<_> = (0..2)
                    .map(|_| {
                        let rx = rx.clone();
                        std::thread::spawn(move || rx.recv_blocking())
                    })
                    .collect();
                let go = Arc::new(Barrier::new(4));
                let mut hs = Vec::new();
                for k in 0..4 {
                    let (tx, go) = (tx.clone(), go.clone());
                    hs.push(std::thread::spawn(move || {
                        go.wait();
                        let c = tx.clone();
                        if k == 0 {
                            c.close();
                        }
                        drop(c);
                        drop(tx);
                    }));
                }
                drop(tx);
                for h in hs {
                    h.join().unwrap();
                }
                for r in receivers {
                    assert!(r.join().unwrap().is_err(), "round {round} cap {cap:?}");
                }
                assert!(rx.is_closed());
            }
        }
    });
}

// ---- child processes ----

const CHILD: &str = "REVIEW_S42_CHAN_EDGES_CHILD";

#[test]
fn child_process_entry() {
    let Ok(case) = std::env::var(CHILD) else {
        return;
    };
    match case.as_str() {
        "broadcast_huge" => {
            let r = catch_unwind(|| {
                let _ = weft::sync::broadcast::channel::<u8>(1 << 44);
            });
            println!("CHILD panicked={}", r.is_err());
        }
        other => panic!("unknown child case {other:?}"),
    }
    println!("CHILD done=ok");
}

/// A broadcast capacity below the documented limit (`usize::MAX / 2`) but far beyond
/// memory: `broadcast::channel::<u8>(1 << 44)`.
///
/// What happened (before the fix): the process aborted at creation ("memory allocation of
/// 422212465065984 bytes failed": `channel` allocates all `capacity` slots, 24 bytes
/// each, up front), so `catch_unwind` cannot catch it. What should happen: the
/// rustdoc promises a panic only for 0 and above `usize::MAX / 2`; a capacity that
/// cannot be allocated should panic (a checked `try_reserve`, or a documented
/// bound) or allocate lazily, not abort. (tokio's `broadcast::channel` also allocates
/// eagerly.)
#[test]
fn broadcast_with_a_capacity_beyond_memory() {
    let out = common::child::run_case(CHILD, "broadcast_huge", common::child::LIMIT);
    out.assert_finished();
    // Fixed: a clear panic (the capacity cannot be allocated), caught by the child.
    assert_eq!(out.report("panicked"), Some("true"), "{}", out.context());
}

/// A receive of the ordered channel dropped while it joins slow work: the next receive
/// gets that work's result first, then the rest in order.
#[test]
fn ordered_receive_dropped_while_joining() {
    watchdog(20, || {
        let rt = common::workers(2);
        let (tx, rx) = common::on(&rt, || chan::ordered::<u32>(8));
        common::on(&rt, || {
            tx.spawn(async {
                weft::time::sleep(Duration::from_millis(50)).await;
                0
            })
            .unwrap();
            for i in 1..4u32 {
                tx.spawn(async move { i }).unwrap();
            }
        });
        drop(tx);
        let (_c, w) = count_waker();
        {
            let mut f = Box::pin(rx.recv());
            assert!(f.as_mut().poll(&mut Context::from_waker(&w)).is_pending());
        }
        let got: Vec<u32> = std::iter::from_fn(|| rx.recv_blocking().ok())
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 3]);
    });
}

/// The runtime shut down while ordered work is still running: the receiver gets each
/// handle's outcome (cancelled) and then the end, not a hang.
#[test]
fn ordered_work_cancelled_by_runtime_shutdown() {
    watchdog(20, || {
        let rt = common::workers(2);
        let (tx, rx) = common::on(&rt, || chan::ordered::<u32>(8));
        common::on(&rt, || {
            for i in 0..4u32 {
                tx.spawn(async move {
                    weft::time::sleep(Duration::from_secs(60)).await;
                    i
                })
                .unwrap();
            }
        });
        drop(tx);
        drop(rt);
        let mut n = 0;
        while let Ok(r) = rx.recv_blocking() {
            assert!(r.unwrap_err().is_cancelled());
            n += 1;
        }
        assert_eq!(n, 4);
    });
}
