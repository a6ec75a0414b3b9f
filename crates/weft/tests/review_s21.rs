//! Review of session 21's changes, from safe code only:
//!
//! - the send future's room before its value (`chan/ops.rs`, `Held`): values of every
//!   shape (zero-sized, a byte, 64 KiB arrays, 4 KiB-aligned, boxed, drop-counting,
//!   drop-panicking) through `send().await`, `send_blocking`, `send_timeout`, select
//!   sends, send futures cancelled at every point, a runtime dropped mid-wait, and
//!   sends on closed channels giving their value back: each value delivered, returned
//!   or dropped exactly once, its bytes intact;
//! - the ring's lead prefault (`chan/flavors/ring.rs`, `Ring::lead`): capacities
//!   around the prefault thresholds, values that make a prefault step one or two
//!   slots, huge capacities, many laps, racing producers and consumers in the first
//!   lap, closing mid-lap;
//! - the listener's backlog (`net/tcp.rs`): bind errors, addresses tried in turn,
//!   `into_std`/`from_std` round trips, accept bursts, a runtime dropped mid-accept.

mod chan_common;
mod common;

use std::future::Future;
use std::net::{SocketAddr, TcpStream as StdStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use chan_common::{drop_after, fiber_on, join_within, rt2, Drops, Rng};
use common::{loopback, queue_burst, workers};
use weft::chan::{bounded, unbounded, Receiver, Select, Sender};
use weft::net::{TcpListener, TcpStream};

// A debug build keeps many copies of a large value in a send's or a receive's frames
// (a `recv_timeout` that waits for a 32 KiB value took about 2 MiB of stack here, at
// this session's commit and before it alike): threads that handle large values get a
// stack with room for that.
use common::{big_thread, big_watchdog as watchdog, BIG_STACK};

// ---------------------------------------------------------------------------------
// Values of every shape.
// ---------------------------------------------------------------------------------

/// A payload whose bytes say which value they belong to.
trait Payload: Send + 'static {
    fn fill(id: usize) -> Self;
    fn intact(&self, id: usize) -> bool;
}

impl Payload for () {
    fn fill(_: usize) -> Self {}
    fn intact(&self, _: usize) -> bool {
        true
    }
}

impl Payload for u8 {
    fn fill(id: usize) -> Self {
        (id as u8) ^ 0xA5
    }
    fn intact(&self, id: usize) -> bool {
        *self == (id as u8) ^ 0xA5
    }
}

fn pattern(id: usize, i: usize) -> u8 {
    (id.wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) % 251) as u8
}

impl<const N: usize> Payload for [u8; N] {
    fn fill(id: usize) -> Self {
        // (Not `array::from_fn`: a debug build's takes 200 KiB of stack for 32 KiB.)
        let mut a = [0u8; N];
        for (i, b) in a.iter_mut().enumerate() {
            *b = pattern(id, i);
        }
        a
    }
    fn intact(&self, id: usize) -> bool {
        self.iter().enumerate().all(|(i, b)| *b == pattern(id, i))
    }
}

impl<P: Payload> Payload for Box<P> {
    fn fill(id: usize) -> Self {
        Box::new(P::fill(id))
    }
    fn intact(&self, id: usize) -> bool {
        (**self).intact(id)
    }
}

/// Over-aligned: a page's alignment, so its value starts a page into a send future.
#[repr(align(4096))]
struct Paged([u8; 100]);

impl Payload for Paged {
    fn fill(id: usize) -> Self {
        Paged(<[u8; 100]>::fill(id))
    }
    fn intact(&self, id: usize) -> bool {
        (self as *const Paged as usize).is_multiple_of(4096) && self.0.intact(id)
    }
}

/// Cache-line aligned and just over the joint-slot limit (64 bytes).
#[repr(align(64))]
struct Line([u8; 64]);

impl Payload for Line {
    fn fill(id: usize) -> Self {
        Line(<[u8; 64]>::fill(id))
    }
    fn intact(&self, id: usize) -> bool {
        (self as *const Line as usize).is_multiple_of(64) && self.0.intact(id)
    }
}

/// A value that counts its drops per id and checks, as it goes, that its bytes are
/// still its own (a value read from the wrong place, or dropped twice, shows).
struct Val<P: Payload> {
    id: usize,
    drops: Drops,
    payload: P,
}

impl<P: Payload> Val<P> {
    fn new(drops: &Drops, id: usize) -> Self {
        Val {
            id,
            drops: drops.clone(),
            payload: P::fill(id),
        }
    }
    fn check(&self) {
        assert!(
            self.payload.intact(self.id),
            "value {} of {}: its bytes changed",
            self.id,
            std::any::type_name::<P>()
        );
    }
}

impl<P: Payload> Drop for Val<P> {
    fn drop(&mut self) {
        assert!(
            self.payload.intact(self.id),
            "dropping value {} of {}: its bytes changed",
            self.id,
            std::any::type_name::<P>()
        );
        let before = self.drops.0[self.id].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "value {} dropped twice", self.id);
    }
}

impl<P: Payload> std::fmt::Debug for Val<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Val({})", self.id)
    }
}

/// Every one of `n` values dropped exactly once.
fn all_dropped_once(drops: &Drops, n: usize, what: &str) {
    let bad: Vec<_> = (0..n)
        .map(|i| (i, drops.get(i)))
        .filter(|(_, c)| *c != 1)
        .take(10)
        .collect();
    assert!(bad.is_empty(), "{what}: (id, drops) not once: {bad:?}");
}

/// Polls `fut` once with a no-op waker.
fn poll_noop<F: Future + ?Sized>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(Waker::noop()))
}

/// The flavours a send can meet: rendezvous, one slot, a few, unbounded.
const FLAVOURS: [Option<usize>; 4] = [Some(0), Some(1), Some(3), None];

fn make<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    match cap {
        Some(c) => bounded(c),
        None => unbounded(),
    }
}

/// `n` values of `P` from a sending task to a receiving task through each flavour,
/// each with `send().await` (the future holding the value in its room until it goes),
/// unless `P` is too large for a worker's stack in a debug build, and the same from a
/// plain thread with `send_blocking` and `send_timeout`: all in order, intact, dropped
/// once.
fn through_every_flavour<P: Payload>(n: usize) {
    let rt = rt2();
    let tasks = std::mem::size_of::<P>() <= 8192;
    for cap in FLAVOURS {
        // Tasks, `send().await`.
        let drops = Drops::new(n);
        let (tx, rx) = make::<Val<P>>(cap);
        let d = drops.clone();
        if !tasks {
            drop((tx, rx));
        } else {
            let sender = rt.spawn(async move {
                for i in 0..n {
                    tx.send(Val::new(&d, i)).await.unwrap();
                }
            });
            let receiver = rt.spawn(async move {
                for i in 0..n {
                    let v = rx.recv().await.unwrap();
                    v.check();
                    assert_eq!(v.id, i, "out of order");
                }
                assert!(rx.recv().await.is_err());
            });
            join_within(sender, 20).unwrap();
            join_within(receiver, 20).unwrap();
            all_dropped_once(&drops, n, "send().await");
        }

        // A plain thread, `send_blocking` and `send_timeout` by turns.
        let drops = Drops::new(n);
        let (tx, rx) = make::<Val<P>>(cap);
        let d = drops.clone();
        let sender = big_thread(move || {
            for i in 0..n {
                if i % 2 == 0 {
                    tx.send_blocking(Val::new(&d, i)).unwrap();
                } else {
                    tx.send_timeout(Val::new(&d, i), Duration::from_secs(20))
                        .unwrap();
                }
            }
        });
        for i in 0..n {
            let v = rx.recv_timeout(Duration::from_secs(20)).unwrap();
            v.check();
            assert_eq!(v.id, i, "out of order");
        }
        sender.join().unwrap();
        all_dropped_once(&drops, n, "send_blocking");
    }
}

#[test]
fn send_values_of_every_shape_through_every_flavour() {
    watchdog(60, || {
        through_every_flavour::<()>(200);
        through_every_flavour::<u8>(200);
        through_every_flavour::<[u8; 40]>(100);
        through_every_flavour::<[u8; 4096]>(30);
        through_every_flavour::<Line>(50);
        through_every_flavour::<Paged>(50);
        through_every_flavour::<Box<[u8; 1000]>>(50);
    });
}

#[test]
fn send_64k_arrays_through_every_flavour() {
    watchdog(60, || through_every_flavour::<[u8; 65536]>(8));
}

/// A zero-sized value with a drop: every one made is dropped once, whatever the path.
#[test]
fn zero_sized_values_with_drop_are_dropped_once() {
    counted_zst!(Z, MADE, DROPPED);
    watchdog(30, || {
        let rt = rt2();
        for cap in FLAVOURS {
            let (tx, rx) = make::<Z>(cap);
            let h = rt.spawn(async move {
                for _ in 0..100 {
                    tx.send(Z::new()).await.unwrap();
                }
                // Cancelled before and after a poll.
                drop(tx.send(Z::new()));
                tx
            });
            for _ in 0..100 {
                drop(rx.recv_timeout(Duration::from_secs(20)).unwrap());
            }
            let tx = join_within(h, 20).unwrap();
            {
                let mut f = pin!(tx.send(Z::new()));
                let _ = poll_noop(f.as_mut());
            }
            drop(rx);
            let e = tx.send_blocking(Z::new()).unwrap_err();
            drop(e);
            let r = rt.block_on(async { tx.send(Z::new()).await });
            assert!(r.is_err());
            drop(r);
            drop(tx);
        }
        assert_eq!(MADE.load(SeqCst), DROPPED.load(SeqCst));
    });
}

/// A send future dropped at each point of its life: never polled, polled and waiting,
/// waiting then completed by a receiver (but not polled again), completed, and
/// completed then polled again (a panic). Each value is received or dropped once.
fn cancelled_at_every_point<P: Payload>() {
    let n = 16;
    let drops = Drops::new(n);
    let d = &drops;

    // Never polled.
    let (tx, rx) = bounded::<Val<P>>(1);
    drop(tx.send(Val::new(d, 0)));
    assert_eq!(drops.get(0), 1);

    // Polled: room, sent at once; dropped after completing.
    {
        let mut f = pin!(tx.send(Val::new(d, 1)));
        assert!(matches!(poll_noop(f.as_mut()), Poll::Ready(Ok(()))));
        // Polled again after completion: a panic, nothing dropped or sent twice.
        let again = catch_unwind(AssertUnwindSafe(|| poll_noop(f.as_mut()).is_ready()));
        assert!(
            again.is_err(),
            "a completed send polled again did not panic"
        );
    }
    assert_eq!(drops.get(1), 0, "a sent value was dropped by its future");

    // Polled, waiting (the channel is full), dropped: the value goes with it.
    {
        let mut f = pin!(tx.send(Val::new(d, 2)));
        assert!(poll_noop(f.as_mut()).is_pending());
    }
    assert_eq!(drops.get(2), 1);
    assert_eq!(tx.len(), 1);

    // Waiting, then room made: the value is either moved into the channel by the
    // receive or still the future's; dropped unpolled, it is never both or neither.
    {
        let mut f = pin!(tx.send(Val::new(d, 3)));
        assert!(poll_noop(f.as_mut()).is_pending());
        let v = rx.try_recv().unwrap();
        assert_eq!(v.id, 1);
        v.check();
    }
    match rx.try_recv() {
        Ok(v) => {
            assert_eq!(v.id, 3);
            v.check();
            drop(v);
        }
        Err(_) => assert_eq!(drops.get(3), 1),
    }
    assert_eq!(drops.get(3), 1);
    assert!(rx.try_recv().is_err());

    // Waiting, completed by a receiver, then polled: `Ok`, the value delivered.
    tx.send_blocking(Val::new(d, 4)).unwrap();
    {
        let mut f = pin!(tx.send(Val::new(d, 5)));
        assert!(poll_noop(f.as_mut()).is_pending());
        let v = rx.try_recv().unwrap();
        assert_eq!(v.id, 4);
        drop(v);
        // The receive made room: the next poll completes.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match poll_noop(f.as_mut()) {
                Poll::Ready(r) => {
                    r.unwrap();
                    break;
                }
                Poll::Pending => {
                    assert!(Instant::now() < deadline, "hang: send never completed");
                    std::thread::yield_now();
                }
            }
        }
        let again = catch_unwind(AssertUnwindSafe(|| poll_noop(f.as_mut()).is_ready()));
        assert!(
            again.is_err(),
            "a completed send polled again did not panic"
        );
    }
    let v = rx.try_recv().unwrap();
    assert_eq!(v.id, 5);
    v.check();
    drop(v);

    // Rendezvous: waiting, taken by a receiver on another thread, dropped unpolled.
    let (ztx, zrx) = bounded::<Val<P>>(0);
    {
        let mut f = pin!(ztx.send(Val::new(d, 6)));
        assert!(poll_noop(f.as_mut()).is_pending());
        let got = std::thread::scope(|s| {
            std::thread::Builder::new()
                .stack_size(BIG_STACK)
                .spawn_scoped(s, || zrx.recv_timeout(Duration::from_secs(5)))
                .unwrap()
                .join()
                .unwrap()
        });
        let v = got.expect("the waiting sender's value");
        assert_eq!(v.id, 6);
        v.check();
        assert_eq!(drops.get(6), 0);
        drop(v);
    }
    assert_eq!(drops.get(6), 1);

    // Rendezvous: waiting, then the receiver side goes: `Err` with the value back.
    {
        let mut f = pin!(ztx.send(Val::new(d, 7)));
        assert!(poll_noop(f.as_mut()).is_pending());
        drop(zrx);
        match poll_noop(f.as_mut()) {
            Poll::Ready(Err(e)) => {
                assert_eq!(e.0.id, 7);
                e.0.check();
            }
            other => panic!("a send to a closed channel: {:?}", other.map(|r| r.is_ok())),
        }
    }
    assert_eq!(drops.get(7), 1);

    // Closed: every kind of send gives the value back intact.
    drop(rx);
    let e = tx.send_blocking(Val::new(d, 8)).unwrap_err();
    assert_eq!(e.0.id, 8);
    e.0.check();
    drop(e);
    let e = tx
        .send_timeout(Val::new(d, 9), Duration::from_millis(1))
        .unwrap_err();
    assert!(e.is_disconnected());
    let v = e.into_inner();
    assert_eq!(v.id, 9);
    v.check();
    drop(v);
    match poll_noop(pin!(tx.send(Val::new(d, 10)))) {
        Poll::Ready(Err(e)) => {
            assert_eq!(e.0.id, 10);
            e.0.check();
        }
        _ => panic!("a send on a closed channel did not fail"),
    }
    // The value buffered before the close (id 5 was taken): none left.
    drop(tx);

    // `send_timeout` that times out gets its value back intact.
    let (tx, rx) = bounded::<Val<P>>(1);
    tx.send_blocking(Val::new(d, 11)).unwrap();
    let e = tx
        .send_timeout(Val::new(d, 12), Duration::from_millis(5))
        .unwrap_err();
    assert!(e.is_timeout());
    let v = e.into_inner();
    assert_eq!(v.id, 12);
    v.check();
    drop(v);
    assert_eq!(drops.get(12), 1);
    // On a rendezvous channel too.
    let (ztx, _zrx) = bounded::<Val<P>>(0);
    let e = ztx
        .send_timeout(Val::new(d, 13), Duration::from_millis(5))
        .unwrap_err();
    assert!(e.is_timeout());
    assert_eq!(e.into_inner().id, 13);
    drop(rx); // Drops 11, still buffered.
    drop(tx);
    for i in 14..n {
        drop(Val::<P>::new(d, i));
    }
    all_dropped_once(&drops, n, std::any::type_name::<P>());
}

#[test]
fn send_futures_cancelled_at_every_point() {
    watchdog(60, || {
        cancelled_at_every_point::<()>();
        cancelled_at_every_point::<u8>();
        cancelled_at_every_point::<[u8; 4096]>();
        cancelled_at_every_point::<[u8; 65536]>();
        cancelled_at_every_point::<Line>();
        cancelled_at_every_point::<Paged>();
        cancelled_at_every_point::<Box<[u8; 100]>>();
    });
}

/// Values whose type has niches the send future's enum may use for its own tag (the
/// value sits after the room, in an `Option`): `bool`, `char`, `Option<bool>`,
/// `Option<Box<_>>`, `NonZeroU8`, `Result`s, references: each arrives unchanged
/// through the fast path, a wait completed by a receiver, a timeout and a closed
/// channel, from a task and from a thread.
#[test]
fn values_with_niches_survive_every_send_path() {
    fn run<T: Clone + PartialEq + std::fmt::Debug + Send + 'static>(vals: Vec<T>) {
        let rt = rt2();
        for cap in FLAVOURS {
            // A task's `send().await` to a receiving thread.
            let (tx, rx) = make::<T>(cap);
            let v2 = vals.clone();
            let h = rt.spawn(async move {
                for v in v2 {
                    tx.send(v).await.unwrap();
                }
            });
            for v in &vals {
                assert_eq!(&rx.recv_timeout(Duration::from_secs(10)).unwrap(), v);
            }
            join_within(h, 10).unwrap();
            // A waiting send completed by a receiver, then polled to its end.
            if cap.is_some() {
                let (tx, rx) = make::<T>(cap);
                while tx.try_send(vals[0].clone()).is_ok() {}
                for v in &vals {
                    let mut f = pin!(tx.send(v.clone()));
                    assert!(poll_noop(f.as_mut()).is_pending());
                    let got = std::thread::scope(|s| {
                        s.spawn(|| rx.recv_timeout(Duration::from_secs(5)).unwrap())
                            .join()
                            .unwrap()
                    });
                    if cap == Some(0) {
                        assert_eq!(&got, v);
                    }
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while poll_noop(f.as_mut()).is_pending() {
                        assert!(Instant::now() < deadline, "hang: send never completed");
                        std::thread::yield_now();
                    }
                }
                // The buffer now holds the last `cap` values, in order.
                let tail: Vec<_> = rx.try_iter().collect();
                if let Some(c) = cap.filter(|&c| c > 0) {
                    let want: Vec<_> =
                        std::iter::repeat_n(vals[0].clone(), c.saturating_sub(vals.len()))
                            .chain(vals.iter().skip(vals.len().saturating_sub(c)).cloned())
                            .collect();
                    assert_eq!(tail, want);
                }
                // Timed out and closed: the value back unchanged.
                if cap != Some(0) {
                    while tx.try_send(vals[0].clone()).is_ok() {}
                }
                for v in &vals {
                    let e = tx
                        .send_timeout(v.clone(), Duration::from_millis(1))
                        .unwrap_err();
                    assert_eq!(&e.into_inner(), v);
                }
                drop(rx);
                for v in &vals {
                    let r = poll_noop(pin!(tx.send(v.clone())));
                    match r {
                        Poll::Ready(Err(e)) => assert_eq!(&e.0, v),
                        _ => panic!("a send on a closed channel did not fail"),
                    }
                }
            }
        }
    }
    watchdog(30, || {
        run(vec![true, false, true]);
        run(vec!['a', '\u{10FFFF}', '\0']);
        run(vec![Some(true), None, Some(false)]);
        run(vec![Some(Box::new(7u32)), None, Some(Box::new(u32::MAX))]);
        run(vec![
            std::num::NonZeroU8::new(1).unwrap(),
            std::num::NonZeroU8::MAX,
        ]);
        run(vec![Ok::<u8, ()>(3), Err(()), Ok(0)]);
        run(vec![
            Ok::<bool, Option<char>>(true),
            Err(None),
            Err(Some('z')),
        ]);
        run(vec!["static", "", "str"]);
        run(vec![Some(String::from("heap")), None]);
    });
}

/// The pattern `Held`'s comment is about: an `async fn` that takes a page-multiple
/// buffer by value and sends it, so the buffer is moved into the send future laid out
/// right after it. Buffers arrive intact, from tasks and from a fiber.
#[test]
fn a_page_sized_buffer_moved_into_its_send_future_arrives_intact() {
    async fn put<P: Payload>(tx: &Sender<Val<P>>, v: Val<P>) {
        tx.send(v).await.unwrap();
    }
    watchdog(30, || {
        let rt = rt2();
        let n = 40;
        let drops = Drops::new(3 * n);
        let (tx, rx) = bounded::<Val<[u8; 8192]>>(2);
        let d = drops.clone();
        let tx2 = tx.clone();
        let a = rt.spawn(async move {
            for i in 0..n {
                put(&tx2, Val::new(&d, i)).await;
            }
        });
        let d = drops.clone();
        let tx2 = tx.clone();
        let b = rt.spawn(async move {
            for i in n..2 * n {
                put(&tx2, Val::new(&d, i)).await;
            }
        });
        let d = drops.clone();
        let c = fiber_on(&rt, move || {
            // A fiber's stack is smaller: box the values it makes.
            for i in 2 * n..3 * n {
                let v = Box::new(Val::<[u8; 8192]>::new(&d, i));
                weft::wait(tx.send(*v)).unwrap();
            }
        });
        let mut last = [None::<usize>; 3];
        for _ in 0..3 * n {
            let v = rx.recv_timeout(Duration::from_secs(20)).unwrap();
            v.check();
            let who = v.id / n;
            assert!(last[who].is_none_or(|l| l < v.id), "out of order");
            last[who] = Some(v.id);
        }
        join_within(a, 20).unwrap();
        join_within(b, 20).unwrap();
        join_within(c, 20).unwrap();
        all_dropped_once(&drops, 3 * n, "put");
    });
}

/// Many tasks send into a small channel, each send future dropped after a random
/// number of polls (before its first, waiting, completed under it); a receiver drains.
/// Every value is received once or dropped by its future once, never both.
#[test]
fn randomly_cancelled_sends_deliver_or_drop_each_value_once() {
    watchdog(60, || {
        let seed = chan_common::seed();
        let rt = rt2();
        for cap in FLAVOURS {
            let senders = 4;
            let per = 100;
            let n = senders * per;
            let drops = Drops::new(n);
            let received = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = make::<Val<[u8; 4096]>>(cap);
            let hs: Vec<_> = (0..senders)
                .map(|s| {
                    let (tx, d) = (tx.clone(), drops.clone());
                    let mut rng = Rng::new(seed ^ (s as u64) ^ cap.map_or(99, |c| c as u64));
                    rt.spawn(async move {
                        let mut sent = 0;
                        for i in s * per..(s + 1) * per {
                            let polls = rng.below(4);
                            if polls == 3 {
                                drop(tx.send(Val::new(&d, i)));
                                continue;
                            }
                            if drop_after(polls, tx.send(Val::new(&d, i))).await.is_some() {
                                sent += 1;
                            }
                        }
                        sent
                    })
                })
                .collect();
            drop(tx);
            let r = received.clone();
            let recv = rt.spawn(async move {
                let mut seen = vec![false; n];
                while let Ok(v) = rx.recv().await {
                    v.check();
                    assert!(!seen[v.id], "value {} received twice", v.id);
                    seen[v.id] = true;
                    r.fetch_add(1, SeqCst);
                }
            });
            let mut sent = 0;
            for h in hs {
                sent += join_within(h, 30).unwrap();
            }
            join_within(recv, 30).unwrap();
            // A send future dropped after its value was taken counts as not sent by
            // `drop_after` but its value was received: received >= completed sends.
            assert!(
                received.load(SeqCst) >= sent,
                "seed {seed}: a completed send lost"
            );
            all_dropped_once(&drops, n, &format!("cap {cap:?}, seed {seed}"));
        }
    });
}

/// A value whose drop panics (when armed), through a send future dropped unpolled and
/// dropped while waiting: the panic reaches the dropper, the value is dropped once,
/// and the channel goes on working.
#[test]
fn a_value_whose_drop_panics_in_a_dropped_send_future() {
    struct Bomb {
        armed: bool,
        drops: Arc<AtomicUsize>,
        _pad: [u8; 4096],
    }
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.drops.fetch_add(1, SeqCst);
            if self.armed {
                panic!("a value that panics in drop");
            }
        }
    }
    watchdog(30, || {
        let drops = Arc::new(AtomicUsize::new(0));
        let bomb = |armed| Bomb {
            armed,
            drops: drops.clone(),
            _pad: [1; 4096],
        };
        for cap in [Some(0), Some(1)] {
            let before = drops.load(SeqCst);
            let (tx, rx) = make::<Bomb>(cap);
            if cap == Some(1) {
                tx.send_blocking(bomb(false)).unwrap();
            }
            // Unpolled.
            let r = catch_unwind(AssertUnwindSafe(|| drop(tx.send(bomb(true)))));
            assert!(r.is_err());
            // Registered, then dropped: the node leaves the list before the value is
            // dropped.
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut f = Box::pin(tx.send(bomb(true)));
                assert!(poll_noop(f.as_mut()).is_pending());
                drop(f);
            }));
            assert!(r.is_err());
            assert_eq!(drops.load(SeqCst) - before, 2);
            // The channel still works: no node of the dropped future is left on it.
            if cap == Some(1) {
                drop(rx.try_recv().unwrap());
            }
            let t = big_thread({
                let rx = rx.clone();
                move || rx.recv_timeout(Duration::from_secs(5)).map(|b| b.armed)
            });
            tx.send_timeout(bomb(false), Duration::from_secs(5))
                .unwrap();
            assert_eq!(t.join().unwrap(), Ok(false));
            assert!(rx.try_recv().is_err());
            drop((tx, rx));
            let extra = if cap == Some(1) { 4 } else { 3 };
            assert_eq!(drops.load(SeqCst) - before, extra);
        }
    });
}

/// A task waiting in `send().await` (its value in the future's node) when the runtime
/// is dropped: the value is dropped once, with the task, and the buffered one stays
/// in the channel for its receiver.
#[test]
fn a_runtime_dropped_while_sends_wait_drops_their_values_once() {
    watchdog(30, || {
        let n = 8;
        let drops = Drops::new(n + 1);
        let rt = rt2();
        let (tx, rx) = bounded::<Val<[u8; 8192]>>(1);
        tx.send_blocking(Val::new(&drops, n)).unwrap();
        let started = Arc::new(AtomicUsize::new(0));
        for i in 0..n {
            let (tx, d, s) = (tx.clone(), drops.clone(), started.clone());
            drop(rt.spawn(async move {
                let v = Val::new(&d, i);
                s.fetch_add(1, SeqCst);
                let _ = tx.send(v).await;
                unreachable!("a send completed with nobody receiving");
            }));
        }
        chan_common::wait_for("the senders to start", 10, || started.load(SeqCst) == n);
        // Let them register.
        std::thread::sleep(Duration::from_millis(20));
        drop(rt);
        for i in 0..n {
            assert_eq!(drops.get(i), 1, "value {i} after the runtime's drop");
        }
        let v = rx.try_recv().unwrap();
        assert_eq!(v.id, n);
        v.check();
        drop(v);
        assert!(rx.try_recv().is_err());
        drop((tx, rx));
        all_dropped_once(&drops, n + 1, "runtime drop");
    });
}

/// Select sends (the `Select` API and `select!`), which keep their own copy of the
/// value: delivered once, and given back intact from a closed channel.
#[test]
fn select_sends_of_odd_values_deliver_or_return_once() {
    fn run<P: Payload>() {
        let n = 20;
        let sends = 12;
        let drops = Drops::new(n);
        let (tx1, rx1) = bounded::<Val<P>>(1);
        let (tx2, rx2) = bounded::<Val<P>>(0);
        // A receiver on the rendezvous channel until it closes.
        let t = big_thread(move || {
            let mut got = Vec::new();
            while let Ok(v) = rx2.recv_timeout(Duration::from_secs(10)) {
                v.check();
                got.push(v.id);
            }
            got
        });
        let mut ids = Vec::new();
        for i in 0..sends {
            let mut sel = Select::new();
            let a = sel.send(&tx1);
            let b = sel.send(&tx2);
            let oper = sel.select_timeout(Duration::from_secs(10)).unwrap();
            if oper.index() == a {
                oper.send(&tx1, Val::new(&drops, i)).unwrap();
                let v = rx1.try_recv().unwrap();
                v.check();
                ids.push(v.id);
            } else {
                assert_eq!(oper.index(), b);
                oper.send(&tx2, Val::new(&drops, i)).unwrap();
            }
        }
        // The same through `select!`, to the rendezvous channel alone.
        weft::select! {
            send(tx2, Val::<P>::new(&drops, sends)) -> r => r.unwrap(),
            default(Duration::from_secs(10)) => panic!("hang: no receiver for select!"),
        }
        drop(tx2);
        let got = t.join().unwrap();
        let mut all: Vec<_> = ids.iter().chain(&got).copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..=sends).collect::<Vec<_>>(), "delivered once each");
        // `select!` and `Select` on a closed channel: the value back, intact.
        drop(rx1);
        let mut back = None;
        weft::select! {
            send(tx1, Val::<P>::new(&drops, sends + 1)) -> r => back = Some(r.unwrap_err().0),
            default(Duration::from_secs(5)) => {},
        }
        let back = back.expect("a send on a closed channel is ready");
        assert_eq!(back.id, sends + 1);
        back.check();
        drop(back);
        let mut sel = Select::new();
        sel.send(&tx1);
        let oper = sel.select_timeout(Duration::from_secs(5)).unwrap();
        let e = oper.send(&tx1, Val::new(&drops, sends + 2)).unwrap_err();
        assert_eq!(e.0.id, sends + 2);
        e.0.check();
        drop(e);
        for i in sends + 3..n {
            drop(Val::<P>::new(&drops, i));
        }
        all_dropped_once(&drops, n, std::any::type_name::<P>());
    }
    watchdog(30, || {
        run::<()>();
        run::<u8>();
        run::<[u8; 65536]>();
        run::<Paged>();
        run::<Box<u8>>();
    });
}

// ---------------------------------------------------------------------------------
// The ring's prefault: capacities around the thresholds.
// ---------------------------------------------------------------------------------

/// `laps` laps of a `bounded(cap)` on one thread: filled to capacity (a further send
/// is refused), drained, all in order and intact.
fn full_laps<P: Payload>(cap: usize, laps: usize) {
    let drops = Drops::new(cap * laps + 1);
    let (tx, rx) = bounded::<Val<P>>(cap);
    let mut id = 0;
    for lap in 0..laps {
        let first = id;
        for _ in 0..cap {
            tx.try_send(Val::new(&drops, id))
                .unwrap_or_else(|_| panic!("cap {cap}, lap {lap}: a send refused"));
            id += 1;
        }
        if lap == 0 {
            let e = tx.try_send(Val::new(&drops, cap * laps)).unwrap_err();
            assert!(e.is_full());
        }
        for want in first..id {
            let v = rx.try_recv().unwrap();
            assert_eq!(v.id, want, "cap {cap}, lap {lap}: out of order");
            v.check();
        }
        assert!(rx.try_recv().is_err());
    }
    drop((tx, rx));
    all_dropped_once(
        &drops,
        cap * laps + 1,
        &format!("{} x {cap}", std::any::type_name::<P>()),
    );
}

/// Pushes `k` values into a fresh `bounded(cap)` (crossing the lead index and the
/// first prefault steps when `k` is large enough), drains them, then does it again
/// in windows of `w` for `more` values; in order and once each.
fn partial<P: Payload>(cap: usize, k: usize, w: usize, more: usize) {
    let drops = Drops::new(k + more);
    let (tx, rx) = bounded::<Val<P>>(cap);
    for i in 0..k {
        tx.try_send(Val::new(&drops, i)).unwrap();
    }
    for i in 0..k {
        let v = rx.try_recv().unwrap();
        assert_eq!(v.id, i);
        v.check();
    }
    let mut id = k;
    while id < k + more {
        let end = (id + w).min(k + more);
        for i in id..end {
            tx.try_send(Val::new(&drops, i)).unwrap();
        }
        for i in id..end {
            let v = rx.try_recv().unwrap();
            assert_eq!(v.id, i);
        }
        id = end;
    }
    drop((tx, rx));
    all_dropped_once(&drops, k + more, &format!("partial {cap}"));
}

/// Small values (joint slots of 16 bytes to a u64): below and at 256 KiB of slots (no
/// prefault; populated at creation), and just above 8 MiB (lazy, step 4,096, lead 256)
/// with only the lead's neighbourhood and a few steps used.
#[test]
fn joint_rings_around_the_thresholds() {
    watchdog(60, || {
        full_laps::<u8>(16383, 2);
        full_laps::<u8>(16384, 2);
        full_laps::<u8>(16385, 2);
        for cap in [524_287, 524_288, 524_289, 600_000] {
            for k in [1, 255, 256, 257, 258, 4095, 4096, 4097, 8193, 12_289] {
                partial::<u8>(cap, k, 1, 0);
            }
            partial::<u8>(cap, 20_000, 1000, 10_000);
        }
    });
}

/// A joint ring just above 8 MiB through its whole first lap and into the second,
/// with values in windows (so the tail crosses every prefault step, the last one
/// clipped at the capacity).
#[test]
fn a_lazy_joint_ring_through_its_first_lap() {
    watchdog(60, || {
        let cap = (1 << 20) + 1; // `()` makes 8-byte slots: 8 MiB + 8.
        let (tx, rx) = bounded::<usize>(cap);
        let total = cap + 5000;
        let w = 3000;
        let mut sent = 0;
        let mut got = 0;
        while got < total {
            while sent < total && sent - got < w {
                tx.try_send(sent).unwrap();
                sent += 1;
            }
            for _ in 0..w / 2 {
                if got == sent {
                    break;
                }
                assert_eq!(rx.try_recv().unwrap(), got);
                got += 1;
            }
        }
        assert!(rx.try_recv().is_err());
    });
}

/// Huge capacities, used for a handful of values and a few thousand.
#[test]
fn huge_rings_used_a_little() {
    watchdog(60, || {
        partial::<()>(1 << 22, 513, 1, 0);
        partial::<()>(1 << 22, 20_000, 100, 1000);
        partial::<u8>(1 << 22, 9000, 1, 0);
        partial::<[u8; 64]>(1 << 22, 3000, 7, 500);
    });
}

/// Values apart from their stamps (over 56 bytes): below and above 256 KiB of slots
/// (`[u8; 64]`: 72-byte slots, so 3,641 slots; step 512, lead 32), and over-aligned
/// values (4 KiB-aligned: step 8, lead 1), for three full laps.
#[test]
fn split_rings_around_the_thresholds() {
    watchdog(60, || {
        for cap in [31, 32, 33, 3640, 3641, 3642, 5000] {
            full_laps::<[u8; 64]>(cap, 3);
        }
        full_laps::<[u8; 57]>(4000, 2);
        full_laps::<Line>(4000, 2);
        for cap in [1, 2, 7, 8, 9, 63, 64, 65, 130] {
            full_laps::<Paged>(cap, 3);
        }
    });
}

/// Values so large that a prefault step is one slot (32 KiB, 64 KiB: lead 1) or two
/// (16 KiB: lead 1, the first two steps' rest two slots), capacities around where the
/// slot array reaches 256 KiB, and capacities of one and two slots where the first
/// two steps run past the ring.
#[test]
fn rings_of_large_values_whose_step_is_one_or_two_slots() {
    watchdog(60, || {
        for cap in [1, 2, 3, 15, 16, 17, 40] {
            full_laps::<[u8; 16384]>(cap, 3);
        }
        for cap in [1, 2, 7, 8, 9, 20] {
            full_laps::<[u8; 32768]>(cap, 3);
        }
        for cap in [1, 2, 3, 4, 5] {
            full_laps::<[u8; 65536]>(cap, 3);
        }
    });
}

/// A 1 MiB value: one slot is past the prefault threshold on its own, so a ring of
/// one or two such values prefaults with ranges clipped at its end.
#[test]
fn rings_of_one_mebibyte_values() {
    watchdog(60, || {
        // Large values on the stack in a debug build: a thread with room for them.
        std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(|| {
                for cap in [1, 2] {
                    full_laps::<[u8; 1 << 20]>(cap, 2);
                }
            })
            .unwrap()
            .join()
            .unwrap();
    });
}

/// Producers and consumers racing in a large ring's first lap (across the lead index
/// and the first prefault steps) and over many laps of a split ring: each producer's
/// values arrive in its order at each consumer, and each exactly once.
#[test]
fn mpmc_threads_racing_through_the_first_laps() {
    fn run<P: Payload>(cap: usize, producers: usize, per: usize) {
        let consumers = 2;
        let n = producers * per;
        let drops = Drops::new(n);
        let (tx, rx) = bounded::<Val<P>>(cap);
        let ps: Vec<_> = (0..producers)
            .map(|p| {
                let (tx, d) = (tx.clone(), drops.clone());
                big_thread(move || {
                    for i in 0..per {
                        let v = Val::new(&d, p * per + i);
                        if i % 3 == 0 {
                            tx.send_timeout(v, Duration::from_secs(20)).unwrap();
                        } else {
                            tx.send_blocking(v).unwrap();
                        }
                    }
                })
            })
            .collect();
        drop(tx);
        let cs: Vec<_> = (0..consumers)
            .map(|_| {
                let rx = rx.clone();
                big_thread(move || {
                    let mut last = vec![None::<usize>; n / per];
                    let mut ids = Vec::new();
                    while let Ok(v) = rx.recv_timeout(Duration::from_secs(20)) {
                        v.check();
                        let p = v.id / per;
                        assert!(last[p].is_none_or(|l| l < v.id), "out of order");
                        last[p] = Some(v.id);
                        ids.push(v.id);
                    }
                    ids
                })
            })
            .collect();
        drop(rx);
        for p in ps {
            p.join().unwrap();
        }
        let mut seen = vec![0u8; n];
        for c in cs {
            for id in c.join().unwrap() {
                seen[id] += 1;
            }
        }
        assert!(seen.iter().all(|&c| c == 1), "a value lost or duplicated");
        all_dropped_once(&drops, n, "mpmc");
    }
    watchdog(60, || {
        // Joint, lazy (8 MiB + 16): the first lap's lead and first two steps.
        run::<u8>(524_289, 2, 4500);
        // Split, step 512, lead 32: three laps and more.
        run::<[u8; 64]>(3641, 2, 6000);
        // Step one slot.
        run::<[u8; 32768]>(9, 2, 150);
    });
}

/// Producers in tasks (`send().await`, so the ring takes each value from the future's
/// room) racing in a large ring's first lap.
#[test]
fn tasks_racing_through_a_large_rings_first_lap() {
    watchdog(60, || {
        let rt = rt2();
        let per = 6000;
        let n = 3 * per;
        let drops = Drops::new(n);
        let (tx, rx) = bounded::<Val<[u8; 64]>>(3641);
        let hs: Vec<_> = (0..3)
            .map(|p| {
                let (tx, d) = (tx.clone(), drops.clone());
                rt.spawn(async move {
                    for i in 0..per {
                        tx.send(Val::new(&d, p * per + i)).await.unwrap();
                    }
                })
            })
            .collect();
        drop(tx);
        let mut last = [None::<usize>; 3];
        let mut count = 0;
        while let Ok(v) = rx.recv_timeout(Duration::from_secs(20)) {
            v.check();
            let p = v.id / per;
            assert!(last[p].is_none_or(|l| l < v.id), "out of order");
            last[p] = Some(v.id);
            count += 1;
        }
        assert_eq!(count, n);
        for h in hs {
            join_within(h, 20).unwrap();
        }
        all_dropped_once(&drops, n, "tasks");
    });
}

/// Closed mid-lap, past the lead index: later sends get their values back, the rest
/// drains in order, what is left when the channel goes is dropped once.
#[test]
fn closing_a_prefaulting_ring_mid_lap() {
    fn run<P: Payload>(cap: usize, k: usize) {
        let drops = Drops::new(k + 2);
        let (tx, rx) = bounded::<Val<P>>(cap);
        for i in 0..k {
            tx.send_blocking(Val::new(&drops, i)).unwrap();
        }
        assert!(tx.close());
        let e = tx.send_blocking(Val::new(&drops, k)).unwrap_err();
        assert_eq!(e.0.id, k);
        e.0.check();
        drop(e);
        let e = tx.try_send(Val::new(&drops, k + 1)).unwrap_err();
        assert!(e.is_disconnected());
        drop(e);
        for i in 0..k / 2 {
            let v = rx.recv_blocking().unwrap();
            assert_eq!(v.id, i);
            v.check();
        }
        drop((tx, rx));
        all_dropped_once(&drops, k + 2, &format!("closed at {k} of {cap}"));
    }
    watchdog(60, || {
        run::<u8>(524_289, 300);
        run::<u8>(524_289, 4200);
        run::<[u8; 64]>(3641, 33);
        run::<[u8; 64]>(3641, 600);
        run::<[u8; 64]>(3641, 3641);
        run::<[u8; 32768]>(9, 2);
        run::<[u8; 32768]>(9, 9);
        run::<Paged>(64, 10);
    });
}

// ---------------------------------------------------------------------------------
// The listener's backlog.
// ---------------------------------------------------------------------------------

/// Binding an address in use fails with `AddrInUse`, cleanly: the first listener goes
/// on accepting, no socket is left registered, and the address binds once it is free.
#[test]
fn binding_an_address_in_use_fails_cleanly() {
    watchdog(30, || {
        let rt = workers(1);
        rt.block_on(async {
            let l = TcpListener::bind(loopback()).await.unwrap();
            let addr = l.local_addr().unwrap();
            for _ in 0..20 {
                let e = TcpListener::bind(addr).await.expect_err("bound twice");
                assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse, "{e}");
            }
            assert_eq!(rt.stats().io_sources, 1);
            let c = TcpStream::connect(addr).await.unwrap();
            let (s, peer) = l.accept().await.unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            drop((s, c, l));
            // Free again (SO_REUSEADDR: the closed connection does not hold it).
            let l = TcpListener::bind(addr).await.unwrap();
            assert_eq!(l.local_addr().unwrap(), addr);
        });
        assert_eq!(rt.stats().io_sources, 0);
    });
}

/// A list of addresses: the first in use, the next free: the listener is on the free
/// one (and listens: a burst past std's backlog of 128 queues). All in use: the last
/// error. An unresolvable list: `InvalidInput`.
#[test]
fn binding_tries_each_address_in_turn() {
    watchdog(30, || {
        let rt = workers(1);
        rt.block_on(async {
            let busy = TcpListener::bind(loopback()).await.unwrap();
            let busy_addr = busy.local_addr().unwrap();
            let free = loopback();
            let addrs = [busy_addr, free];
            let l = TcpListener::bind(&addrs[..]).await.unwrap();
            let at = l.local_addr().unwrap();
            assert_eq!(at.ip(), free.ip());
            assert_ne!(at.port(), 0);
            // The second listener has the large backlog too: 200 connects queue
            // before any accept.
            let _clients = queue_burst(&l, 200, Duration::from_millis(900)).await;
            let busy2 = TcpListener::bind(loopback()).await.unwrap();
            let both = [busy_addr, busy2.local_addr().unwrap()];
            let e = TcpListener::bind(&both[..])
                .await
                .expect_err("bound in use");
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
            let none: [SocketAddr; 0] = [];
            let e = TcpListener::bind(&none[..])
                .await
                .expect_err("bound nothing");
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
            // An address of no interface here.
            let e = TcpListener::bind("192.0.2.1:0")
                .await
                .expect_err("bound TEST-NET");
            assert_eq!(e.kind(), std::io::ErrorKind::AddrNotAvailable, "{e}");
            // That first, then a free one, then one in use: the free one.
            let free = loopback();
            let addrs: [SocketAddr; 3] = ["192.0.2.1:0".parse().unwrap(), free, busy_addr];
            let l3 = TcpListener::bind(&addrs[..]).await.unwrap();
            assert_eq!(l3.local_addr().unwrap().ip(), free.ip());
            let c = TcpStream::connect(l3.local_addr().unwrap()).await.unwrap();
            let (_s, peer) = l3.accept().await.unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            // busy, l, busy2, l3, c and _s: no socket of the failed binds registered.
            assert_eq!(rt.stats().io_sources, 6);
        });
        assert_eq!(rt.stats().io_sources, 0);
    });
}

/// IPv6 loopback, where the host has it: binds, listens with the large backlog,
/// accepts; a second bind of the same address is in use.
#[test]
fn binding_the_ipv6_loopback() {
    watchdog(30, || {
        let rt = workers(1);
        rt.block_on(async {
            let l = match TcpListener::bind("[::1]:0").await {
                Ok(l) => l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => return,
                Err(e) => panic!("bind [::1]:0: {e}"),
            };
            let addr = l.local_addr().unwrap();
            assert!(addr.is_ipv6());
            let e = TcpListener::bind(addr).await.expect_err("bound twice");
            assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
            let _clients = queue_burst(&l, 200, Duration::from_millis(900)).await;
        });
    });
}

/// `into_std` and `from_std` round trips keep the socket listening (with its backlog:
/// a burst past 128 queues), the fd owned once (no double close: the std listener goes
/// on working after the weft one and the runtime are gone), and a listener made by std
/// (backlog 128) taken in works too.
#[test]
fn listener_std_round_trips() {
    watchdog(30, || {
        let rt = workers(1);
        let std_l = rt.block_on(async {
            let l = TcpListener::bind(loopback()).await.unwrap();
            let std_l = l.into_std().unwrap();
            let l = TcpListener::from_std(std_l).unwrap();
            let std_l = l.into_std().unwrap();
            let l = TcpListener::from_std(std_l).unwrap();
            let _clients = queue_burst(&l, 200, Duration::from_millis(900)).await;
            // A std listener taken in.
            let s = std::net::TcpListener::bind(loopback()).unwrap();
            let l2 = TcpListener::from_std(s).unwrap();
            let a2 = l2.local_addr().unwrap();
            let c = TcpStream::connect(a2).await.unwrap();
            let (_s, peer) = l2.accept().await.unwrap();
            assert_eq!(peer, c.local_addr().unwrap());
            l.into_std().unwrap()
        });
        assert_eq!(rt.stats().io_sources, 0);
        drop(rt);
        // Still non-blocking (as tokio's `into_std`), still listening.
        let addr = std_l.local_addr().unwrap();
        let c = StdStream::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let (_s, peer) = loop {
            match std_l.accept() {
                Ok(x) => break x,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "hang: no connection to accept");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("accept after the round trips: {e}"),
            }
        };
        assert_eq!(peer, c.local_addr().unwrap());
    });
}

/// A burst of 600 connects (past std's backlog of 128, under the 1,024 one) while two
/// tasks and a fiber accept: each connection accepted exactly once, its byte read.
#[test]
fn an_accept_burst_across_tasks_and_a_fiber() {
    use std::io::Write;
    use weft::io::AsyncReadExt as _;
    watchdog(60, || {
        let n = 600;
        let rt = workers(2);
        let l = Arc::new(rt.block_on(TcpListener::bind(loopback())).unwrap());
        let addr = l.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = mpsc::channel::<u16>();
        let mut hs = Vec::new();
        for _ in 0..2 {
            let (l, accepted, tx) = (l.clone(), accepted.clone(), tx.clone());
            hs.push(rt.spawn(async move {
                while accepted.fetch_add(1, SeqCst) < n {
                    let (mut s, _) = l.accept().await.unwrap();
                    let mut b = [0u8; 2];
                    s.read_exact(&mut b).await.unwrap();
                    tx.send(u16::from_le_bytes(b)).unwrap();
                }
            }));
        }
        {
            let (l, accepted, tx) = (l.clone(), accepted.clone(), tx.clone());
            hs.push(fiber_on(&rt, move || {
                while accepted.fetch_add(1, SeqCst) < n {
                    let (mut s, _) = l.accept_blocking().unwrap();
                    let mut b = [0u8; 2];
                    std::io::Read::read_exact(&mut s, &mut b).unwrap();
                    tx.send(u16::from_le_bytes(b)).unwrap();
                }
            }));
        }
        drop(tx);
        let clients: Vec<_> = (0..n as u16)
            .map(|i| {
                let mut c = StdStream::connect_timeout(&addr, Duration::from_secs(5))
                    .unwrap_or_else(|e| panic!("connect {i}: {e}"));
                c.write_all(&i.to_le_bytes()).unwrap();
                c
            })
            .collect();
        let mut seen = vec![false; n];
        for _ in 0..n {
            let i = rx
                .recv_timeout(Duration::from_secs(20))
                .expect("hang: accepts") as usize;
            assert!(!seen[i], "connection {i} accepted twice");
            seen[i] = true;
        }
        // The acceptors are past `n` now, each waiting in one last accept or done:
        // end them with the runtime.
        drop(clients);
        drop(rt);
        drop(hs);
        assert!(rx.recv_timeout(Duration::from_secs(5)).is_err());
    });
}

/// Tasks and fibers waiting in accept on listeners of all three kinds of making (bind,
/// a round trip, a std listener taken in) when the runtime is dropped: the drop ends
/// them within seconds, and the addresses can be bound again (no fd leaked).
#[test]
fn a_runtime_dropped_mid_accept_closes_its_listeners() {
    watchdog(30, || {
        let rt = workers(2);
        let (ls, addrs): (Vec<_>, Vec<_>) = rt.block_on(async {
            let a = TcpListener::bind(loopback()).await.unwrap();
            let b = TcpListener::from_std(
                TcpListener::bind(loopback())
                    .await
                    .unwrap()
                    .into_std()
                    .unwrap(),
            )
            .unwrap();
            let c =
                TcpListener::from_std(std::net::TcpListener::bind(loopback()).unwrap()).unwrap();
            [a, b, c]
                .into_iter()
                .map(|l| {
                    let at = l.local_addr().unwrap();
                    (Arc::new(l), at)
                })
                .unzip()
        });
        let waiting = Arc::new(AtomicUsize::new(0));
        let mut hs = Vec::new();
        for l in &ls {
            let (l1, w) = (l.clone(), waiting.clone());
            hs.push(rt.spawn(async move {
                w.fetch_add(1, SeqCst);
                l1.accept().await.map(|_| ())
            }));
            let (l2, w) = (l.clone(), waiting.clone());
            hs.push(fiber_on(&rt, move || {
                w.fetch_add(1, SeqCst);
                l2.accept_blocking().map(|_| ())
            }));
        }
        drop(ls);
        chan_common::wait_for("the acceptors to wait", 10, || waiting.load(SeqCst) == 6);
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        drop(rt);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the drop took {:?}",
            start.elapsed()
        );
        for h in hs {
            // Cancelled, or ended with the shutdown error: never a connection.
            if let Ok(r) = join_within(h, 10) {
                assert!(r.is_err(), "an accept succeeded with no client");
            }
        }
        // The listeners' fds are closed: the addresses bind again.
        for a in addrs {
            std::net::TcpListener::bind(a).unwrap_or_else(|e| panic!("rebind {a}: {e}"));
        }
    });
}
