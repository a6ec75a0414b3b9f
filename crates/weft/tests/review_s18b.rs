//! Adversarial review (s18, reviewer b) of two commits, from safe code only:
//!
//! * 9b3dc5f: `SendFuture` keeps its value in `SendState::Value` until a poll finds no
//!   room, then moves it into a wait node made in place; `RecvFuture`'s node is made
//!   at its first poll that finds no value. Drop, `take_back_inner` (`send_timeout`),
//!   `is_notified` (blocking waits' spin) and `withdraw` (`recv_timeout`) handle the
//!   new states; a send polled after completion panics.
//! * 8895c71: `Select::quick` writes the `SelectedOperation` straight into its
//!   caller's `MaybeUninit`, around an empty stash until `try_fast` fills it.
//!
//! Every value counts its drops (each must be dropped exactly once, none lost); every
//! wait is bounded by a watchdog; meant to run under valgrind too (small sizes:
//! `REVIEW_S18B_SMALL=1`).
//!
//! Found (older than both commits, reached through the quick pass):
//! `quick_pass_settle_with_panicking_waker_race` — a select's quick receive counts its
//! value in flight before popping it; when the settle after the pop panicked (a
//! waiting sender's waker), the value went back but the count stayed, so the closed
//! channel was never seen drained (receivers waited for ever). Fixed in
//! `Chan::recv_fast_held`.

mod chan_common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Poll, Wake, Waker};
use std::time::{Duration, Instant};

use chan_common::{
    count_waker, drop_after, fiber_on, join_within, make, poll_with, rt2, seed, watchdog, Drops,
    Rng, Tracked,
};
use weft::chan::{
    after, bounded, never, tick, unbounded, Receiver, RecvTimeoutError, Select, SendTimeoutError,
    Sender,
};

/// Run under valgrind (`REVIEW_S18B_SMALL=1`): fewer iterations, and threads in
/// place of fibers where a fiber may spin without suspending (a receive with a
/// deadline that passes before it waits), which valgrind's serialized threads turn
/// into minutes; valgrind also misreads switches between fiber stacks.
fn small() -> bool {
    std::env::var_os("REVIEW_S18B_SMALL").is_some()
}

/// Iterations scale: smaller under valgrind.
fn scale(n: usize) -> usize {
    chan_common::scale_if(small(), n)
}

/// A waker whose wake panics while armed (safe: `std::task::Wake`).
struct PanicWake {
    armed: AtomicBool,
    wakes: AtomicUsize,
}

impl Wake for PanicWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.wakes.fetch_add(1, SeqCst);
        if self.armed.load(SeqCst) {
            panic!("review_s18b: this waker panics");
        }
    }
}

fn panic_waker() -> (Arc<PanicWake>, Waker) {
    let p = Arc::new(PanicWake {
        armed: AtomicBool::new(true),
        wakes: AtomicUsize::new(0),
    });
    (p.clone(), Waker::from(p))
}

fn noop() -> &'static Waker {
    Waker::noop()
}

/// Whether a type is `Unpin`, told apart at the call site (inherent methods win over
/// the trait's blanket default).
struct Probe<T>(std::marker::PhantomData<T>);
trait NotUnpin {
    fn is_unpin(&self) -> bool {
        false
    }
}
impl<T> NotUnpin for Probe<T> {}
impl<T: Unpin> Probe<T> {
    fn is_unpin(&self) -> bool {
        true
    }
}

/// Fills the channel to its capacity with tracked values `first..`; returns how many.
fn fill(tx: &Sender<Tracked>, cap: Option<usize>, d: &Drops, first: usize) -> usize {
    let n = cap.unwrap_or(0);
    for i in 0..n {
        tx.try_send(d.make(first + i)).unwrap();
    }
    n
}

/// Receives every value there now (`try_recv`), returning their ids (values dropped).
fn drain_ids(rx: &Receiver<Tracked>) -> Vec<usize> {
    let mut ids = Vec::new();
    for _ in 0..100_000 {
        match rx.try_recv() {
            Ok(v) => ids.push(v.id),
            Err(_) => break,
        }
    }
    ids
}

// ---------------------------------------------------------------------------------
// 9b3dc5f: the futures' states, hand-polled
// ---------------------------------------------------------------------------------

#[test]
fn futures_are_not_unpin() {
    let (tx, rx) = unbounded::<u64>();
    let s = tx.send(1);
    let r = rx.recv();
    fn probe_of<T>(_: &T) -> Probe<T> {
        Probe(std::marker::PhantomData)
    }
    // A registered node must never move: safe code may move an `Unpin` future after a
    // pending poll (`Pin::new`), so both futures must not be `Unpin`.
    assert!(!probe_of(&s).is_unpin(), "SendFuture is Unpin");
    assert!(!probe_of(&r).is_unpin(), "RecvFuture is Unpin");
    // (The probe itself works.)
    assert!(probe_of(&5u8).is_unpin());
}

/// A send future dropped before its first poll drops its value once and sends nothing.
#[test]
fn send_future_dropped_before_first_poll() {
    for cap in chan_common::FLAVOURS {
        let d = Drops::new(1);
        let (tx, rx) = make::<Tracked>(cap);
        let f = tx.send(d.make(0));
        drop(f);
        assert_eq!(d.get(0), 1, "cap {cap:?}");
        assert!(rx.try_recv().is_err());
    }
}

/// Fast completion (room at the first poll), then a second poll: must panic, and the
/// value is delivered and dropped exactly once.
#[test]
fn send_future_fast_path_then_polled_again_panics() {
    for cap in [Some(1), Some(16), None] {
        let d = Drops::new(1);
        let (tx, rx) = make::<Tracked>(cap);
        let mut f = Box::pin(tx.send(d.make(0)));
        assert!(matches!(poll_with(f.as_mut(), noop()), Poll::Ready(Ok(()))));
        let r = catch_unwind(AssertUnwindSafe(|| poll_with(f.as_mut(), noop())));
        assert!(
            r.is_err(),
            "cap {cap:?}: a completed send polled again did not panic"
        );
        // Still fine after the panic: dropping it touches nothing.
        drop(f);
        assert_eq!(d.get(0), 0);
        assert_eq!(drain_ids(&rx), [0]);
        assert_eq!(d.get(0), 1);
        // The channel still works.
        tx.try_send(d.make(0))
            .unwrap_or_else(|_| panic!("send after"));
        drop(rx.try_recv().unwrap());
    }
}

/// A send that waits (full / rendezvous), through each of its ends: dropped while
/// pending, completed by a receive (then polled again: panics), failed by a close (the
/// value back; polled again: panics), polled by a second waker before completion.
#[test]
fn send_future_pending_states() {
    for cap in [Some(0), Some(1), Some(3)] {
        // Dropped while pending: the value comes back and is dropped, never delivered.
        {
            let d = Drops::new(10);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, 1);
            let mut f = Box::pin(tx.send(d.make(0)));
            let (c, w) = count_waker();
            assert!(poll_with(f.as_mut(), &w).is_pending(), "cap {cap:?}");
            // Moving the box (not the future) is fine.
            let mut v = vec![f];
            let f = v.pop().unwrap();
            drop(f);
            assert_eq!(d.get(0), 1, "cap {cap:?}: the pending send's value");
            let ids = drain_ids(&rx);
            assert_eq!(ids, (1..=n).collect::<Vec<_>>(), "cap {cap:?}");
            assert_eq!(c.0.load(SeqCst), 0);
        }
        // Completed by a receive; a second waker replaced the first.
        {
            let d = Drops::new(10);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, 1);
            let mut f = Box::pin(tx.send(d.make(0)));
            let (ca, wa) = count_waker();
            let (cb, wb) = count_waker();
            assert!(poll_with(f.as_mut(), &wa).is_pending());
            assert!(poll_with(f.as_mut(), &wb).is_pending());
            let mut got = Vec::new();
            // One receive frees a slot (or takes the value on a rendezvous channel).
            got.push(rx.try_recv().expect("a value or a waiting sender").id);
            assert!(
                cb.0.load(SeqCst) >= 1,
                "cap {cap:?}: the latest waker was not woken (a: {}, b: {})",
                ca.0.load(SeqCst),
                cb.0.load(SeqCst)
            );
            assert!(matches!(poll_with(f.as_mut(), noop()), Poll::Ready(Ok(()))));
            let r = catch_unwind(AssertUnwindSafe(|| poll_with(f.as_mut(), noop())));
            assert!(
                r.is_err(),
                "cap {cap:?}: polled after completion did not panic"
            );
            drop(f);
            got.extend(drain_ids(&rx));
            let mut want: Vec<usize> = (1..=n).collect();
            want.push(0);
            assert_eq!(got, want, "cap {cap:?}: FIFO, each once");
            for i in 0..=n {
                assert_eq!(d.get(i), 1, "cap {cap:?}: value {i}");
            }
        }
        // Failed by a close: the value back in the error; polled again: panics.
        {
            let d = Drops::new(10);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, 1);
            let mut f = Box::pin(tx.send(d.make(0)));
            let (c, w) = count_waker();
            assert!(poll_with(f.as_mut(), &w).is_pending());
            assert!(rx.close());
            assert!(c.0.load(SeqCst) >= 1, "cap {cap:?}: the close woke nobody");
            match poll_with(f.as_mut(), noop()) {
                Poll::Ready(Err(e)) => {
                    assert_eq!(e.0.id, 0);
                    drop(e);
                }
                other => panic!("cap {cap:?}: {:?}", other.map(|r| r.is_ok())),
            }
            assert_eq!(d.get(0), 1);
            let r = catch_unwind(AssertUnwindSafe(|| poll_with(f.as_mut(), noop())));
            assert!(
                r.is_err(),
                "cap {cap:?}: polled after its Err did not panic"
            );
            drop(f);
            assert_eq!(d.get(0), 1, "cap {cap:?}: dropped twice?");
            assert_eq!(drain_ids(&rx), (1..=n).collect::<Vec<_>>());
        }
    }
}

/// A rendezvous send whose first poll finds a receiver waiting completes at that
/// first poll through the slow path (the node made and used at once); polled again it
/// panics.
#[test]
fn rendezvous_send_first_poll_hands_to_waiting_receive() {
    let d = Drops::new(1);
    let (tx, rx) = bounded::<Tracked>(0);
    let mut r = Box::pin(rx.recv());
    let (c, w) = count_waker();
    assert!(poll_with(r.as_mut(), &w).is_pending());
    let mut s = Box::pin(tx.send(d.make(0)));
    assert!(matches!(poll_with(s.as_mut(), noop()), Poll::Ready(Ok(()))));
    assert!(c.0.load(SeqCst) >= 1);
    let e = catch_unwind(AssertUnwindSafe(|| poll_with(s.as_mut(), noop())));
    assert!(e.is_err(), "polled after completion did not panic");
    drop(s);
    match poll_with(r.as_mut(), noop()) {
        Poll::Ready(Ok(v)) => assert_eq!(v.id, 0),
        _ => panic!("the waiting receive did not get the value"),
    }
    assert_eq!(d.get(0), 1);
}

/// Receive futures: dropped before a poll, completed through the fast path and polled
/// again (another receive: pending, then dropped: a value sent later is not lost),
/// handed a value and dropped before the next poll (the value goes back), closed.
#[test]
fn recv_future_states() {
    for cap in chan_common::FLAVOURS {
        let d = Drops::new(10);
        let (tx, rx) = make::<Tracked>(cap);
        drop(rx.recv());
        // Fast path, then polled again on an empty channel.
        if cap != Some(0) {
            tx.try_send(d.make(0)).unwrap();
            let mut r = Box::pin(rx.recv());
            match poll_with(r.as_mut(), noop()) {
                Poll::Ready(Ok(v)) => assert_eq!(v.id, 0),
                _ => panic!("cap {cap:?}: the fast path"),
            }
            let (c, w) = count_waker();
            assert!(poll_with(r.as_mut(), &w).is_pending(), "cap {cap:?}");
            tx.try_send(d.make(1)).unwrap();
            assert!(c.0.load(SeqCst) >= 1, "cap {cap:?}: not woken");
            // Handed the value and dropped before the next poll: it goes back.
            drop(r);
            assert_eq!(d.get(1), 0, "cap {cap:?}");
            assert_eq!(drain_ids(&rx), [1], "cap {cap:?}: the value handed over");
        }
        // Pending first poll, handed a value, then polled: the value.
        {
            let mut r = Box::pin(rx.recv());
            let (c, w) = count_waker();
            assert!(poll_with(r.as_mut(), &w).is_pending());
            let mut s = Box::pin(tx.send(d.make(2)));
            let sent = poll_with(s.as_mut(), noop());
            assert!(matches!(sent, Poll::Ready(Ok(()))), "cap {cap:?}");
            assert!(c.0.load(SeqCst) >= 1);
            match poll_with(r.as_mut(), noop()) {
                Poll::Ready(Ok(v)) => assert_eq!(v.id, 2),
                _ => panic!("cap {cap:?}"),
            }
            // Polled again after its value: another receive (pending here).
            assert!(poll_with(r.as_mut(), noop()).is_pending());
            drop(r);
        }
        // Pending, then closed: `Err`, and again `Err`.
        {
            let mut r = Box::pin(rx.recv());
            let (c, w) = count_waker();
            assert!(poll_with(r.as_mut(), &w).is_pending());
            tx.close();
            assert!(c.0.load(SeqCst) >= 1);
            assert!(matches!(poll_with(r.as_mut(), noop()), Poll::Ready(Err(_))));
            assert!(matches!(poll_with(r.as_mut(), noop()), Poll::Ready(Err(_))));
        }
        for i in 0..3 {
            assert_eq!(
                d.get(i),
                usize::from(cap != Some(0) || i == 2),
                "cap {cap:?}: {i}"
            );
        }
    }
}

/// Leaking a pending future (`mem::forget` of its box) may leak, never misbehave: the
/// other ends go on working, and a leaked send's value is still received.
#[test]
fn forgotten_pending_futures_leak_only() {
    watchdog(60, || {
        for cap in chan_common::FLAVOURS {
            let d = Drops::new(60);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, 1);
            if cap.is_some() {
                let mut s = Box::pin(tx.send(d.make(0)));
                assert!(poll_with(s.as_mut(), noop()).is_pending());
                std::mem::forget(s);
                // The leaked send waits at the head: it is received after the fillers.
                let mut got = Vec::new();
                for _ in 0..=n {
                    got.push(rx.recv_timeout(Duration::from_secs(10)).unwrap().id);
                }
                let mut want: Vec<usize> = (1..=n).collect();
                want.push(0);
                assert_eq!(got, want, "cap {cap:?}");
            }
            // A leaked pending receive: a value handed to it is lost (leaked, never
            // dropped), and later values go to the others.
            let mut r = Box::pin(rx.recv());
            assert!(poll_with(r.as_mut(), noop()).is_pending());
            std::mem::forget(r);
            let rx2 = rx.clone();
            let t = std::thread::spawn(move || {
                let mut got = Vec::new();
                for _ in 0..2 {
                    match rx2.recv_timeout(Duration::from_secs(20)) {
                        Ok(v) => got.push(v.id),
                        Err(e) => panic!("cap {cap:?}: {e:?}"),
                    }
                }
                got
            });
            for i in 50..53 {
                tx.send_blocking(d.make(i)).unwrap();
            }
            let got = t.join().unwrap();
            assert_eq!(got.len(), 2);
            for &i in &got {
                assert_eq!(
                    d.get(i),
                    1,
                    "cap {cap:?}: received {got:?}, drops {:?}",
                    (0..60).map(|k| d.get(k)).collect::<Vec<_>>()
                );
            }
            // The leaked receive waited first in line: it was handed the first value
            // (leaked with it, never dropped).
            assert_eq!(d.get(50), 0, "cap {cap:?}: the leaked receive's value");
            drop(tx);
            assert!(matches!(
                rx.recv_timeout(Duration::from_millis(50)),
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected)
            ));
        }
    });
}

/// Boxed futures that waited in one task are moved on and completed by another task
/// (the rendezvous commit's "polled by another task" path included); each value once.
#[test]
fn futures_moved_to_another_task_after_pending() {
    watchdog(120, || {
        let rt = rt2();
        let rounds = scale(60);
        for cap in [Some(0), Some(1), Some(4)] {
            let d = Drops::new(rounds * 2 + 8);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, rounds * 2);
            let mut got = Vec::new();
            for round in 0..rounds {
                // A send that waits in task 1, handed to task 2.
                let tx1 = tx.clone();
                let v = d.make(round);
                let fut: Pin<Box<dyn Future<Output = Result<(), usize>> + Send>> =
                    Box::pin(async move { tx1.send(v).await.map_err(|e| e.0.id) });
                let h1 = rt.spawn(async move {
                    let mut fut = fut;
                    let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx)))
                        .await
                        .is_pending();
                    (first, fut)
                });
                let (pending, fut) = join_within(h1, 30).unwrap();
                assert!(pending, "cap {cap:?}: the first poll should wait (full)");
                let h2 = rt.spawn(fut);
                if round % 2 == 0 {
                    std::thread::yield_now();
                }
                got.push(rx.recv_timeout(Duration::from_secs(30)).unwrap().id);
                join_within(h2, 30).unwrap().unwrap();
                // A receive that waits in task 1, handed to task 2.
                let rx1 = rx.clone();
                let rfut: Pin<Box<dyn Future<Output = Option<usize>> + Send>> =
                    Box::pin(async move { rx1.recv().await.ok().map(|v| v.id) });
                let h1 = rt.spawn(async move {
                    let mut fut = rfut;
                    let p = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
                    (p, fut)
                });
                let (p, rfut) = join_within(h1, 30).unwrap();
                match p {
                    // A buffered value (a filler, or the one sent above).
                    Poll::Ready(id) => got.push(id.expect("open")),
                    Poll::Pending => {
                        let h2 = rt.spawn(rfut);
                        tx.send_timeout(d.make(rounds + round), Duration::from_secs(30))
                            .unwrap();
                        got.push(join_within(h2, 30).unwrap().expect("open"));
                        continue;
                    }
                }
                tx.send_timeout(d.make(rounds + round), Duration::from_secs(30))
                    .unwrap();
            }
            drop(tx);
            for v in rx.iter() {
                got.push(v.id);
            }
            let mut sorted = got.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(
                sorted.len(),
                got.len(),
                "cap {cap:?}: a value received twice"
            );
            assert_eq!(got.len(), rounds * 2 + n, "cap {cap:?}: values lost");
            for &i in &got {
                assert_eq!(d.get(i), 1, "cap {cap:?}: value {i}");
            }
        }
    });
}

/// Send and receive futures in tasks, each dropped after a random number of pending
/// polls, while other tasks, fibers and threads send and receive: every value dropped
/// exactly once, none received twice.
#[test]
fn send_and_recv_futures_dropped_at_random_points() {
    watchdog(240, || {
        let rt = rt2();
        let per = scale(300);
        for cap in chan_common::FLAVOURS {
            let seed = seed();
            let producers = 3;
            let d = Drops::new(producers * per);
            let (tx, rx) = make::<Tracked>(cap);
            let received = Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut hs = Vec::new();
            for p in 0..producers {
                let tx = tx.clone();
                let tx2 = tx.clone();
                let d2 = d.clone();
                hs.push(rt.spawn(async move {
                    let mut rng = Rng::new(seed ^ (p as u64 + 1));
                    for i in 0..per {
                        let v = d2.make(p * per + i);
                        // `None`: dropped while pending (the value then dropped in the
                        // future, or delivered just before).
                        let _ = drop_after(rng.below(4), tx2.send(v)).await;
                    }
                }));
                drop(tx);
            }
            let consumers = 2;
            let mut cs = Vec::new();
            for c in 0..consumers {
                let rx = rx.clone();
                let received = received.clone();
                let body = async move {
                    let mut rng = Rng::new(seed ^ (100 + c as u64));
                    // Bounded by time, not by count: a dropped receive loops at once,
                    // and under valgrind the producers are slow.
                    let deadline = Instant::now() + Duration::from_secs(150);
                    loop {
                        match drop_after(rng.below(6), rx.recv()).await {
                            Some(Ok(v)) => received.lock().unwrap().push(v.id),
                            Some(Err(_)) => break,
                            None => assert!(Instant::now() < deadline, "consumer starved"),
                        }
                    }
                };
                if c == 0 || small() {
                    cs.push(rt.spawn(body));
                } else {
                    cs.push(fiber_on(&rt, move || weft::wait(body)));
                }
            }
            for h in hs {
                join_within(h, 120).unwrap();
            }
            drop(tx);
            drop(rx);
            for h in cs {
                join_within(h, 120).unwrap();
            }
            let got = received.lock().unwrap().clone();
            let mut sorted = got.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len(), got.len(), "cap {cap:?}: received twice");
            for i in 0..producers * per {
                assert_eq!(d.get(i), 1, "cap {cap:?} seed {seed}: value {i}");
            }
        }
    });
}

/// The channel, closed by the caller, must end drained: no value left, and a receive
/// sees it disconnected (a value counted "on its way" and never taken would make it
/// wait for ever instead).
fn assert_ends_drained(rx: &Receiver<Tracked>, what: &str) -> Vec<usize> {
    rx.close();
    let mut ids = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(v) => ids.push(v.id),
            Err(RecvTimeoutError::Disconnected) => return ids,
            Err(RecvTimeoutError::Timeout) => panic!(
                "{what}: closed and empty, but not seen disconnected (a value counted in \
                 flight for ever?) after receiving {ids:?}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------------
// Panicking wakers while a value is handed over or a sender admitted
// ---------------------------------------------------------------------------------

/// A waiting receive whose waker panics is handed a value by each kind of send (the
/// wake panics in the sender). The value is the receive's: polled, it returns it;
/// dropped, it goes back. Each value dropped once; the channel ends drained.
#[test]
fn panicking_waker_of_waiting_recv_handed_a_value() {
    for cap in chan_common::FLAVOURS {
        for how in 0..3 {
            for ending in 0..2 {
                let what = format!("cap {cap:?} send kind {how} ending {ending}");
                let d = Drops::new(1);
                let (tx, rx) = make::<Tracked>(cap);
                let (p, w) = panic_waker();
                let mut r = Box::pin(rx.recv());
                assert!(poll_with(r.as_mut(), &w).is_pending(), "{what}");
                let mut s = (how == 1).then(|| Box::pin(tx.send(d.make(0))));
                let res = catch_unwind(AssertUnwindSafe(|| match (how, s.as_mut()) {
                    (0, _) => tx.try_send(d.make(0)).map_err(|_| ()),
                    (1, Some(s)) => match poll_with(s.as_mut(), noop()) {
                        Poll::Ready(r) => r.map_err(|_| ()),
                        Poll::Pending => Err(()),
                    },
                    _ => tx.send_blocking(d.make(0)).map_err(|_| ()),
                }));
                match res {
                    Ok(Ok(())) | Err(_) => {}
                    Ok(Err(())) => panic!("{what}: the send failed"),
                }
                assert!(p.wakes.load(SeqCst) >= 1, "{what}: not woken");
                p.armed.store(false, SeqCst);
                if let Some(mut s) = s {
                    // Completed (the panic came after): polled again, it panics.
                    let again = catch_unwind(AssertUnwindSafe(|| poll_with(s.as_mut(), noop())));
                    assert!(again.is_err(), "{what}: a completed send polled again");
                }
                let mut got = Vec::new();
                if ending == 0 {
                    match poll_with(r.as_mut(), noop()) {
                        Poll::Ready(Ok(v)) => got.push(v.id),
                        _ => panic!("{what}: the receive lost its value"),
                    }
                }
                drop(r);
                got.extend(assert_ends_drained(&rx, &what));
                assert_eq!(got, [0], "{what}");
                assert_eq!(d.get(0), 1, "{what}: drops of the value");
            }
        }
    }
}

/// A waiting send (full bounded channel or rendezvous) whose waker panics is admitted
/// by each kind of receive (the wake panics in the receiver). The send completes at
/// its next poll; every value is received once; the channel ends drained.
#[test]
fn panicking_waker_of_waiting_send_admitted() {
    for cap in [Some(0), Some(1), Some(2)] {
        for how in 0..4 {
            let what = format!("cap {cap:?} recv kind {how}");
            let d = Drops::new(10);
            let (tx, rx) = make::<Tracked>(cap);
            let n = fill(&tx, cap, &d, 1);
            let (p, w) = panic_waker();
            let mut s = Box::pin(tx.send(d.make(0)));
            assert!(poll_with(s.as_mut(), &w).is_pending(), "{what}");
            let mut got = Vec::new();
            let mut r = Box::pin(rx.recv());
            let res = catch_unwind(AssertUnwindSafe(|| match how {
                0 => rx.try_recv().ok().map(|v| v.id),
                1 => match poll_with(r.as_mut(), noop()) {
                    Poll::Ready(r) => r.ok().map(|v| v.id),
                    Poll::Pending => None,
                },
                2 => {
                    let mut sel = Select::new();
                    sel.recv(&rx);
                    sel.try_select()
                        .ok()
                        .and_then(|op| op.recv(&rx).ok().map(|v| v.id))
                }
                _ => rx.recv_blocking().ok().map(|v| v.id),
            }));
            match res {
                Ok(Some(id)) => got.push(id),
                Ok(None) => panic!("{what}: nothing received"),
                Err(_) => {}
            }
            drop(r);
            assert!(
                p.wakes.load(SeqCst) >= 1,
                "{what}: the sender was not woken"
            );
            p.armed.store(false, SeqCst);
            match poll_with(s.as_mut(), noop()) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(_)) => panic!("{what}: the admitted send failed"),
                // (A receive that panicked in the wake gave back the value it took:
                // the send is complete all the same, its value in the channel.)
                Poll::Pending => panic!("{what}: the admitted send still waits"),
            }
            drop(s);
            got.extend(assert_ends_drained(&rx, &what));
            got.sort_unstable();
            assert_eq!(got, (0..=n).collect::<Vec<_>>(), "{what}");
            for i in 0..=n {
                assert_eq!(d.get(i), 1, "{what}: value {i}");
            }
        }
    }
}

/// Panics of a `PanicWake` raised inside a select's quick pass (told by the
/// backtrace: `Select::quick` on the stack).
static QUICK_PASS_PANICS: AtomicUsize = AtomicUsize::new(0);

/// The select's quick pass takes a value whose settle (a sender registered between the
/// pass's look at `slow` and its pop) admits a waiting sender whose waker panics: the
/// panic leaves `try_fast`. A race, so stressed for a few seconds: a thread selects
/// while another keeps registering (and withdrawing) sends with panicking wakers.
/// Whatever panicked where, every value is received once and the channel, once
/// closed, ends drained.
#[test]
fn quick_pass_settle_with_panicking_waker_race() {
    let secs = if std::env::var_os("REVIEW_S18B_SMALL").is_some() {
        1
    } else {
        4
    };
    let max = 2_000_000usize;
    let out = watchdog(200, move || {
        let d = Drops::new(2 * max + 2);
        let (tx, rx) = bounded::<Tracked>(1);
        let stop = Arc::new(AtomicBool::new(false));
        let made = Arc::new(AtomicUsize::new(0));
        let reg = {
            let tx = tx.clone();
            let d = d.clone();
            let stop = stop.clone();
            let made = made.clone();
            std::thread::spawn(move || {
                let mut sender_side = 0usize;
                let mut k = 0;
                let mut rng = Rng::new(seed());
                while !stop.load(SeqCst) && k < max {
                    let id = max + 1 + k;
                    k += 1;
                    made.store(k, SeqCst);
                    let p = Arc::new(PanicWake {
                        armed: AtomicBool::new(true),
                        wakes: AtomicUsize::new(0),
                    });
                    let w = Waker::from(Arc::new(QuickProbe(p.clone())));
                    let mut s = Box::pin(tx.send(d.make(id)));
                    let r = catch_unwind(AssertUnwindSafe(|| poll_with(s.as_mut(), &w)));
                    if r.is_err() {
                        sender_side += 1;
                    }
                    for _ in 0..rng.below(200) {
                        std::hint::spin_loop();
                    }
                    p.armed.store(false, SeqCst);
                    // Dropped: withdrawn, or already in the channel.
                    let r = catch_unwind(AssertUnwindSafe(move || drop(s)));
                    assert!(r.is_ok());
                }
                sender_side
            })
        };
        let mut got = Vec::new();
        let mut select_panics = 0usize;
        let mut next = 0;
        let mut rng = Rng::new(seed() ^ 77);
        let end = Instant::now() + Duration::from_secs(secs);
        while next < max && Instant::now() < end {
            // Keep one value in the buffer for the pass to take.
            if rx.is_empty() {
                // A fresh id each time (a refused value is dropped at once); the
                // fast send's settle may meet the panicking waker too.
                let v = d.make(next);
                next += 1;
                let _ = catch_unwind(AssertUnwindSafe(|| tx.try_send(v)));
            }
            for _ in 0..rng.below(200) {
                std::hint::spin_loop();
            }
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut sel = Select::new();
                sel.recv(&rx);
                match sel.try_select() {
                    Ok(op) => op.recv(&rx).ok().map(|v| v.id),
                    Err(_) => None,
                }
            }));
            match r {
                Ok(Some(id)) => got.push(id),
                Ok(None) => {}
                Err(_) => select_panics += 1,
            }
        }
        stop.store(true, SeqCst);
        let sender_side = reg.join().unwrap();
        let k = made.load(SeqCst);
        let quick = QUICK_PASS_PANICS.load(SeqCst);
        eprintln!(
            "quick_pass_settle race: {next} fillers, {k} registered sends; panics: in \
             selects {select_panics} (in the quick pass {quick}), sender side {sender_side}"
        );
        got.extend(assert_ends_drained(
            &rx,
            &format!("after the race ({quick} quick-pass panics)"),
        ));
        let mut sorted = got.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), got.len(), "a value received twice");
        for i in 0..next {
            assert_eq!(d.get(i), 1, "filler {i}");
        }
        for i in max + 1..max + 1 + k {
            assert_eq!(d.get(i), 1, "registered send {i}");
        }
        drop(tx);
        (select_panics, quick)
    });
    let _ = out;
}

/// A `PanicWake` that, when it panics, notes whether a select's quick pass is on the
/// stack.
struct QuickProbe(Arc<PanicWake>);

impl Wake for QuickProbe {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.wakes.fetch_add(1, SeqCst);
        // Decided once: the registering thread may disarm it meanwhile.
        if !self.0.armed.load(SeqCst) {
            return;
        }
        let bt = std::backtrace::Backtrace::force_capture().to_string();
        // `recv_fast_held` is the quick pass's receive (`try_fast`).
        if bt.contains("recv_fast_held") && QUICK_PASS_PANICS.fetch_add(1, SeqCst) == 0 {
            if let Some(path) = std::env::var_os("REVIEW_S18B_BT") {
                let _ = std::fs::write(path, &bt);
            }
        }
        panic!("review_s18b: this waker panics");
    }
}

/// Deterministic form of the above without the race: a sender with a panicking waker
/// waits on a full `bounded(1)`; a select receives (full round, since `slow` is set)
/// and its admission of the sender panics. Then the channel, closed, must end drained.
#[test]
fn select_admitting_panicking_sender_ends_drained() {
    for how in 0..3 {
        let what = format!("select kind {how}");
        let d = Drops::new(2);
        let (tx, rx) = bounded::<Tracked>(1);
        tx.try_send(d.make(0)).unwrap();
        let (p, w) = panic_waker();
        let mut s = Box::pin(tx.send(d.make(1)));
        assert!(poll_with(s.as_mut(), &w).is_pending());
        let (_tx2, rx2) = unbounded::<Tracked>();
        let res = catch_unwind(AssertUnwindSafe(|| {
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            sel.recv(&rx2);
            let op = match how {
                0 => sel.try_select().ok(),
                1 => sel.select_timeout(Duration::from_secs(5)).ok(),
                _ => Some(sel.select()),
            }
            .expect("ready");
            assert_eq!(op.index(), i);
            op.recv(&rx).ok().map(|v| v.id)
        }));
        let mut got = Vec::new();
        if let Ok(Some(id)) = res {
            got.push(id);
        }
        p.armed.store(false, SeqCst);
        assert!(
            matches!(poll_with(s.as_mut(), noop()), Poll::Ready(Ok(()))),
            "{what}"
        );
        drop(s);
        got.extend(assert_ends_drained(&rx, &what));
        got.sort_unstable();
        assert_eq!(got, [0, 1], "{what}");
        assert_eq!((d.get(0), d.get(1)), (1, 1), "{what}");
    }
}

/// Values whose `Drop` panics: a pending send future dropped (the value comes back and
/// its drop panics inside the future's drop), a quick-selected receive dropped with no
/// receiver left to give it to. No double drop, and the channel goes on working.
#[test]
fn panicking_value_drops_in_future_and_selected_operation_drops() {
    struct Bomb(Arc<AtomicUsize>);
    impl Drop for Bomb {
        fn drop(&mut self) {
            self.0.fetch_add(1, SeqCst);
            if !std::thread::panicking() {
                panic!("review_s18b: value drop panics");
            }
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded::<Bomb>(1);
    tx.try_send(Bomb(drops.clone())).unwrap();
    let mut s = Box::pin(tx.send(Bomb(drops.clone())));
    assert!(poll_with(s.as_mut(), noop()).is_pending());
    assert!(catch_unwind(AssertUnwindSafe(move || drop(s))).is_err());
    assert_eq!(drops.load(SeqCst), 1);
    // A value sent by the fast path, never polled again: nothing to drop in it.
    let v = rx.try_recv().unwrap();
    assert!(catch_unwind(AssertUnwindSafe(move || drop(v))).is_err());
    assert_eq!(drops.load(SeqCst), 2);
    // Quick-selected, then the op dropped: the value goes back to the channel.
    tx.try_send(Bomb(drops.clone())).unwrap();
    {
        let mut sel = Select::new();
        sel.recv(&rx);
        let op = sel.try_select().unwrap();
        drop(op);
    }
    assert_eq!(drops.load(SeqCst), 2);
    let v = rx.try_recv().unwrap();
    assert!(catch_unwind(AssertUnwindSafe(move || drop(v))).is_err());
    assert_eq!(drops.load(SeqCst), 3);
    // The receiver dropped while a clone's selected op holds a value: given back to a
    // channel with no receiver left, it is dropped there (its drop panics).
    tx.try_send(Bomb(drops.clone())).unwrap();
    let rx2 = rx.clone();
    drop(rx);
    {
        let mut sel = Select::new();
        sel.recv(&rx2);
        let op = sel.try_select().unwrap();
        // Dropped with the receiver alive (it is borrowed): back to the channel.
        drop(op);
    }
    assert_eq!(drops.load(SeqCst), 3);
    assert!(catch_unwind(AssertUnwindSafe(move || drop(rx2))).is_err());
    assert_eq!(drops.load(SeqCst), 4);
    // The sender still works on a disconnected channel: it fails, giving back.
    let r = tx.try_send(Bomb(drops.clone()));
    assert!(r.is_err());
    assert!(catch_unwind(AssertUnwindSafe(move || drop(r))).is_err());
    assert_eq!(drops.load(SeqCst), 5);
}

// ---------------------------------------------------------------------------------
// Closes racing first polls
// ---------------------------------------------------------------------------------

/// On every flavour, a close races the first polls of send and receive futures (and a
/// blocking send): each value is received at most once and dropped exactly once, a
/// failed send gives its value back, and a waiting future is woken by the close.
#[test]
fn close_races_first_polls_every_flavour() {
    watchdog(200, || {
        let trials = scale(300);
        for cap in chan_common::FLAVOURS {
            for t in 0..trials {
                let d = Drops::new(8);
                let (tx, rx) = make::<Tracked>(cap);
                let pre = if cap.unwrap_or(1) > 0 && t % 2 == 0 {
                    tx.try_send(d.make(7)).unwrap();
                    1
                } else {
                    0
                };
                let barrier = Arc::new(std::sync::Barrier::new(3));
                let sender = {
                    let tx = tx.clone();
                    let d = d.clone();
                    let b = barrier.clone();
                    std::thread::spawn(move || {
                        b.wait();
                        let mut sent = Vec::new();
                        for id in 0..3 {
                            let mut f = Box::pin(tx.send(d.make(id)));
                            let (c, w) = count_waker();
                            let mut r = poll_with(f.as_mut(), &w);
                            let deadline = Instant::now() + Duration::from_secs(30);
                            while r.is_pending() {
                                // Woken by a receive or by the close.
                                while c.0.load(SeqCst) == 0 {
                                    assert!(Instant::now() < deadline, "send never woken");
                                    std::thread::yield_now();
                                }
                                c.0.store(0, SeqCst);
                                r = poll_with(f.as_mut(), &w);
                            }
                            match r {
                                Poll::Ready(Ok(())) => sent.push(id),
                                Poll::Ready(Err(e)) => assert_eq!(e.0.id, id),
                                Poll::Pending => unreachable!(),
                            }
                        }
                        sent
                    })
                };
                let receiver = {
                    let rx = rx.clone();
                    let b = barrier.clone();
                    std::thread::spawn(move || {
                        b.wait();
                        let mut got = Vec::new();
                        loop {
                            let mut f = Box::pin(rx.recv());
                            let (c, w) = count_waker();
                            let mut r = poll_with(f.as_mut(), &w);
                            let deadline = Instant::now() + Duration::from_secs(30);
                            while r.is_pending() {
                                while c.0.load(SeqCst) == 0 {
                                    assert!(Instant::now() < deadline, "recv never woken");
                                    std::thread::yield_now();
                                }
                                c.0.store(0, SeqCst);
                                r = poll_with(f.as_mut(), &w);
                            }
                            match r {
                                Poll::Ready(Ok(v)) => got.push(v.id),
                                Poll::Ready(Err(_)) => return got,
                                Poll::Pending => unreachable!(),
                            }
                        }
                    })
                };
                barrier.wait();
                if t % 3 == 0 {
                    std::thread::yield_now();
                }
                if t % 2 == 0 {
                    tx.close();
                } else {
                    rx.close();
                }
                let sent = sender.join().unwrap();
                let mut got = receiver.join().unwrap();
                got.extend(drain_ids(&rx));
                let mut sorted = got.clone();
                sorted.sort_unstable();
                sorted.dedup();
                assert_eq!(sorted.len(), got.len(), "cap {cap:?} trial {t}: twice");
                for id in &sent {
                    assert!(got.contains(id), "cap {cap:?} trial {t}: sent {id} lost");
                }
                for id in &got {
                    assert!(*id == 7 || sent.contains(id), "cap {cap:?}: {id} not sent");
                }
                assert_eq!(got.contains(&7), pre == 1);
                drop((tx, rx));
                for id in 0..3 {
                    assert_eq!(d.get(id), 1, "cap {cap:?} trial {t}: value {id}");
                }
                assert_eq!(d.get(7), pre);
            }
        }
    });
}

// ---------------------------------------------------------------------------------
// 8895c71: the select's quick pass, written in place
// ---------------------------------------------------------------------------------

/// A value too large for the stash (boxed there), with a drop count.
struct Big {
    t: Tracked,
    pad: [u64; 8],
}

impl Big {
    fn new(t: Tracked) -> Big {
        let id = t.id as u64;
        Big {
            t,
            pad: std::array::from_fn(|k| id.wrapping_mul(31).wrapping_add(k as u64)),
        }
    }
    fn check(&self) -> usize {
        let id = self.t.id as u64;
        for (k, &p) in self.pad.iter().enumerate() {
            assert_eq!(p, id.wrapping_mul(31).wrapping_add(k as u64), "damaged Big");
        }
        self.t.id
    }
}

/// Random selects over mixed operations (sends with room or not, receives ready or
/// not; small, large and zero-sized values; timers), each selected operation either
/// completed or dropped. A dropped receive's value must stay in its channel; a
/// selected send must go in. Checked against a model of each channel's contents.
#[test]
fn select_mixed_operations_against_a_model() {
    watchdog(120, || {
        let iters = scale(3000);
        let seed = seed();
        let mut rng = Rng::new(seed);
        let d = Drops::new(iters * 4 + 10);
        let mut next = 0usize;
        // a: bounded(1) of Tracked (sent to and received from);
        // b: unbounded Tracked (received from); c: bounded(2) Big (received from and
        // sent to); z: bounded(1) of () (sent to and received from).
        let (ta, ra) = bounded::<Tracked>(1);
        let (tb, rb) = unbounded::<Tracked>();
        let (tc, rc) = bounded::<Big>(2);
        let (tz, rz) = bounded::<()>(1);
        let mut ma: std::collections::VecDeque<usize> = Default::default();
        let mut mb: std::collections::VecDeque<usize> = Default::default();
        let mut mc: std::collections::VecDeque<usize> = Default::default();
        let mut mz = 0usize;
        let nev = never::<Tracked>();
        for it in 0..iters {
            // Random refills.
            if rng.below(3) == 0 && ma.is_empty() {
                ta.try_send(d.make(next)).unwrap();
                ma.push_back(next);
                next += 1;
            }
            if rng.below(3) == 0 {
                tb.try_send(d.make(next)).unwrap();
                mb.push_back(next);
                next += 1;
            }
            if rng.below(3) == 0 && mc.len() < 2 {
                tc.try_send(Big::new(d.make(next))).unwrap();
                mc.push_back(next);
                next += 1;
            }
            if rng.below(3) == 0 && mz == 0 {
                tz.try_send(()).unwrap();
                mz += 1;
            }
            let timer = if rng.below(4) == 0 {
                Some(after(Duration::ZERO))
            } else {
                None
            };
            let mut sel = if rng.below(2) == 0 {
                Select::new()
            } else {
                Select::new_biased()
            };
            // Operations in a random order.
            let mut kinds: Vec<u8> = vec![0, 1, 2, 3, 4, 5, 6, 7];
            for i in (1..kinds.len()).rev() {
                kinds.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut idx = [usize::MAX; 9];
            for &k in &kinds {
                if rng.below(4) == 0 {
                    continue;
                }
                idx[k as usize] = match k {
                    0 => sel.send(&ta),
                    1 => sel.recv(&ra),
                    2 => sel.recv(&rb),
                    3 => sel.recv(&rc),
                    4 => sel.send(&tc),
                    5 => sel.send(&tz),
                    6 => sel.recv(&rz),
                    _ => sel.recv(&nev),
                };
            }
            if let Some(t) = &timer {
                idx[8] = sel.recv(t);
            }
            let ready_send_a = idx[0] != usize::MAX && ma.is_empty();
            let anything_ready = ready_send_a
                || (idx[1] != usize::MAX && !ma.is_empty())
                || (idx[2] != usize::MAX && !mb.is_empty())
                || (idx[3] != usize::MAX && !mc.is_empty())
                || (idx[4] != usize::MAX && mc.len() < 2)
                || (idx[5] != usize::MAX && mz == 0)
                || (idx[6] != usize::MAX && mz == 1)
                || idx[8] != usize::MAX;
            if idx.iter().all(|&i| i == usize::MAX) {
                continue;
            }
            let op = match rng.below(3) {
                0 => sel.try_select().ok(),
                1 => sel.select_timeout(Duration::from_millis(1)).ok(),
                _ if anything_ready => Some(sel.select()),
                _ => sel.try_select().ok(),
            };
            let Some(op) = op else {
                assert!(
                    !anything_ready,
                    "it {it} seed {seed}: nothing selected, yet ready"
                );
                continue;
            };
            let i = op.index();
            let complete = rng.below(3) != 0;
            let k = idx
                .iter()
                .position(|&x| x == i)
                .expect("an added operation");
            if !complete {
                // Dropped: a received value goes back (to the head), a send does
                // nothing.
                drop(op);
                continue;
            }
            match k {
                0 => {
                    op.send(&ta, d.make(next)).unwrap();
                    ma.push_back(next);
                    next += 1;
                }
                1 => assert_eq!(op.recv(&ra).unwrap().id, ma.pop_front().unwrap()),
                2 => assert_eq!(op.recv(&rb).unwrap().id, mb.pop_front().unwrap()),
                3 => assert_eq!(op.recv(&rc).unwrap().check(), mc.pop_front().unwrap()),
                4 => {
                    op.send(&tc, Big::new(d.make(next))).unwrap();
                    mc.push_back(next);
                    next += 1;
                }
                5 => {
                    op.send(&tz, ()).unwrap();
                    mz += 1;
                }
                6 => {
                    op.recv(&rz).unwrap();
                    mz -= 1;
                }
                8 => {
                    op.recv(timer.as_ref().unwrap()).unwrap();
                }
                _ => panic!("never() selected"),
            }
            // What each channel holds, as the model says (a selected send may go
            // beyond the capacity only if the room went meanwhile: not here).
            assert_eq!(ra.len(), ma.len(), "it {it} seed {seed}: a");
            assert_eq!(rb.len(), mb.len(), "it {it} seed {seed}: b");
            assert_eq!(rc.len(), mc.len(), "it {it} seed {seed}: c");
            assert_eq!(rz.len(), mz, "it {it} seed {seed}: z");
        }
        // The contents, in order.
        assert_eq!(drain_ids(&ra), Vec::from(ma));
        assert_eq!(drain_ids(&rb), Vec::from(mb));
        let mut cs = Vec::new();
        while let Ok(v) = rc.try_recv() {
            cs.push(v.check());
        }
        assert_eq!(cs, Vec::from(mc));
        for i in 0..next {
            assert_eq!(d.get(i), 1, "seed {seed}: value {i}");
        }
    });
}

/// Selectors on several threads and fibers receive (over small, large and zero-sized
/// values) and drop a share of their selected operations unperformed: each dropped
/// value goes back and is received by someone. Every value received exactly once.
#[test]
fn dropped_selected_operations_values_received_by_others() {
    watchdog(200, || {
        let rt = rt2();
        let per = scale(2000);
        let d = Drops::new(per * 2);
        let (ts, rs) = bounded::<Tracked>(4);
        let (tbig, rbig) = unbounded::<Big>();
        let (tz, rz) = bounded::<()>(1);
        let zs = Arc::new(AtomicUsize::new(0));
        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let consumer = |k: u64| {
            let (rs, rbig, rz) = (rs.clone(), rbig.clone(), rz.clone());
            let received = received.clone();
            let zs = zs.clone();
            move || {
                let mut rng = Rng::new(seed() ^ k);
                let mut open = 3;
                let mut closed = [false; 3];
                while open > 0 {
                    let mut sel = Select::new();
                    let mut ix = [usize::MAX; 3];
                    if !closed[0] {
                        ix[0] = sel.recv(&rs);
                    }
                    if !closed[1] {
                        ix[1] = sel.recv(&rbig);
                    }
                    if !closed[2] {
                        ix[2] = sel.recv(&rz);
                    }
                    let op = sel
                        .select_timeout(Duration::from_secs(60))
                        .expect("a value or a close within a minute");
                    let which = ix.iter().position(|&x| x == op.index()).unwrap();
                    if rng.below(4) == 0 {
                        drop(op);
                        continue;
                    }
                    let r = match which {
                        0 => op.recv(&rs).map(|v| v.id),
                        1 => op.recv(&rbig).map(|v| v.check()),
                        _ => op.recv(&rz).map(|()| {
                            zs.fetch_add(1, SeqCst);
                            usize::MAX
                        }),
                    };
                    match r {
                        Ok(usize::MAX) => {}
                        Ok(id) => received.lock().unwrap().push(id),
                        Err(_) => {
                            closed[which] = true;
                            open -= 1;
                        }
                    }
                }
            }
        };
        let c1 = std::thread::spawn(consumer(1));
        let c2 = fiber_on(&rt, consumer(2));
        let c3 = std::thread::spawn(consumer(3));
        let p1 = {
            let d = d.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    ts.send_blocking(d.make(i)).unwrap();
                    if i % 3 == 0 {
                        tz.send_blocking(()).unwrap();
                    }
                }
            })
        };
        let p2 = {
            let d = d.clone();
            fiber_on(&rt, move || {
                for i in per..2 * per {
                    tbig.send_blocking(Big::new(d.make(i))).unwrap();
                }
            })
        };
        p1.join().unwrap();
        join_within(p2, 120).unwrap();
        c1.join().unwrap();
        join_within(c2, 120).unwrap();
        c3.join().unwrap();
        let mut got = received.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, (0..2 * per).collect::<Vec<_>>(), "lost or duplicated");
        assert_eq!(zs.load(SeqCst), per.div_ceil(3));
        for i in 0..2 * per {
            assert_eq!(d.get(i), 1, "value {i}");
        }
    });
}

/// Selects on closed channels: an empty closed channel selects as disconnected (the
/// quick pass cannot decide it: full round), buffered values come first, a send on a
/// closed channel gives its value back, a dropped selected operation of either kind
/// changes nothing.
#[test]
fn select_on_closed_channels() {
    for cap in [Some(1), Some(4), None, Some(0)] {
        let d = Drops::new(10);
        let (tx, rx) = make::<Tracked>(cap);
        let n = if cap == Some(0) {
            0
        } else {
            cap.unwrap_or(3).min(3)
        };
        for i in 0..n {
            tx.try_send(d.make(i)).unwrap();
        }
        tx.close();
        let nev = never::<Tracked>();
        let mut got = Vec::new();
        for round in 0..n + 3 {
            let mut sel = Select::new();
            let i = sel.recv(&rx);
            sel.recv(&nev);
            let op = if round % 2 == 0 {
                sel.try_select().expect("closed: ready")
            } else {
                sel.select()
            };
            assert_eq!(op.index(), i);
            if round == 0 {
                // Dropped unperformed: the value (if any) stays first.
                drop(op);
                continue;
            }
            match op.recv(&rx) {
                Ok(v) => got.push(v.id),
                Err(_) => assert_eq!(got.len(), n, "cap {cap:?}: disconnected too early"),
            }
        }
        assert_eq!(got, (0..n).collect::<Vec<_>>(), "cap {cap:?}");
        // A send on the closed channel.
        let mut sel = Select::new();
        let i = sel.send(&tx);
        let op = sel.try_select().expect("closed: ready");
        assert_eq!(op.index(), i);
        match op.send(&tx, d.make(9)) {
            Err(e) => assert_eq!(e.0.id, 9),
            Ok(()) => panic!("cap {cap:?}: sent on a closed channel"),
        }
        let mut sel = Select::new();
        sel.send(&tx);
        drop(sel.select());
        assert_eq!(d.get(9), 1);
        for i in 0..n {
            assert_eq!(d.get(i), 1);
        }
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(RecvTimeoutError::Disconnected)
        ));
    }
}

/// Timer receivers (`after`, `tick`, `never`) mixed with channels in selects: a timer
/// makes the quick pass stop (undecided) or is skipped after a ready channel; the
/// selected timer completes with its own receiver; a dropped selected timer gives its
/// instant back (it is still ready).
#[test]
fn select_with_timers_mixed_with_channels() {
    watchdog(60, || {
        let d = Drops::new(2000);
        let (tx, rx) = unbounded::<Tracked>();
        let t0 = after(Duration::ZERO);
        let tk = tick(Duration::from_millis(1));
        let nev = never::<Tracked>();
        let mut counts = [0usize; 3];
        let mut next = 0;
        let mut got = Vec::new();
        for it in 0..scale(600) {
            if it % 2 == 0 {
                tx.try_send(d.make(next)).unwrap();
                next += 1;
            }
            let mut sel = Select::new();
            let ic = sel.recv(&rx);
            let it0 = sel.recv(&t0);
            let itk = sel.recv(&tk);
            sel.recv(&nev);
            let op = sel
                .select_timeout(Duration::from_secs(10))
                .expect("a timer is due");
            let i = op.index();
            if it % 7 == 3 {
                drop(op);
                continue;
            }
            if i == ic {
                got.push(op.recv(&rx).unwrap().id);
                counts[0] += 1;
            } else if i == it0 {
                op.recv(&t0).unwrap();
                counts[1] += 1;
            } else if i == itk {
                op.recv(&tk).unwrap();
                counts[2] += 1;
            } else {
                panic!("never() selected");
            }
        }
        // `after` fires once.
        assert!(counts[1] <= 1, "after() delivered {} times", counts[1]);
        got.extend(drain_ids(&rx));
        assert_eq!(got, (0..next).collect::<Vec<_>>());
        for i in 0..next {
            assert_eq!(d.get(i), 1);
        }
        // Only never() and an empty channel: a timeout.
        let (_tx2, rx2) = unbounded::<Tracked>();
        let mut sel = Select::new();
        sel.recv(&nev);
        sel.recv(&rx2);
        assert!(sel.select_timeout(Duration::from_millis(20)).is_err());
    });
}

/// The wrong receiver or sender given to a quick-selected operation panics; the value
/// the operation held goes back to its own channel (never to the other), once.
#[test]
fn quick_selected_operation_misuse_gives_the_value_back() {
    let d = Drops::new(4);
    let (tx, rx) = unbounded::<Tracked>();
    let (_tx2, rx2) = unbounded::<Tracked>();
    let (tx3, _rx3) = unbounded::<Tracked>();
    tx.try_send(d.make(0)).unwrap();
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.try_select().unwrap();
    assert!(catch_unwind(AssertUnwindSafe(|| op.recv(&rx2))).is_err());
    assert_eq!(d.get(0), 0);
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.try_select().unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| op.send(&tx3, d.make(1))));
    assert!(r.is_err());
    assert_eq!(d.get(0), 0, "the held value");
    assert_eq!(d.get(1), 1, "the value passed to the wrong send");
    assert!(rx2.try_recv().is_err());
    assert_eq!(drain_ids(&rx), [0]);
    assert_eq!(d.get(0), 1);
    // A clone of the selected receiver completes it.
    tx.try_send(d.make(2)).unwrap();
    let rxc = rx.clone();
    let mut sel = Select::new();
    sel.recv(&rx);
    let op = sel.try_select().unwrap();
    assert_eq!(op.recv(&rxc).unwrap().id, 2);
    assert_eq!(d.get(2), 1);
}

/// `select_async` in tasks: quick selections of sends with room (the forgotten-stash
/// path) and receives ready at once, over small, large and zero-sized values, with
/// futures of it dropped at random points; the values all arrive once.
#[test]
fn select_async_quick_sends_and_receives_in_tasks() {
    watchdog(120, || {
        let rt = rt2();
        let per = scale(1500);
        let d = Drops::new(per * 2);
        let (ta, ra) = bounded::<Tracked>(2);
        let (tb, rb) = unbounded::<Big>();
        let (tz, rz) = bounded::<()>(3);
        let sender = {
            let d = d.clone();
            rt.spawn(async move {
                let mut rng = Rng::new(seed());
                let mut i = 0;
                let mut zs = 0;
                while i < 2 * per {
                    let mut sel = Select::new();
                    let ia = sel.send(&ta);
                    let ib = sel.send(&tb);
                    let iz = sel.send(&tz);
                    let Some(op) = drop_after(rng.below(3), sel.select_async()).await else {
                        continue;
                    };
                    match op.index() {
                        x if x == ia => {
                            op.send(&ta, d.make(i)).unwrap();
                            i += 1;
                        }
                        x if x == ib => {
                            op.send(&tb, Big::new(d.make(i))).unwrap();
                            i += 1;
                        }
                        x if x == iz => {
                            op.send(&tz, ()).unwrap();
                            zs += 1;
                        }
                        _ => unreachable!(),
                    }
                }
                drop((ta, tb, tz));
                zs
            })
        };
        let receiver = rt.spawn(async move {
            let mut got = Vec::new();
            let mut zs = 0;
            let mut open = [true; 3];
            let mut rng = Rng::new(seed() ^ 5);
            while open.iter().any(|&o| o) {
                let mut sel = Select::new();
                let mut ix = [usize::MAX; 3];
                if open[0] {
                    ix[0] = sel.recv(&ra);
                }
                if open[1] {
                    ix[1] = sel.recv(&rb);
                }
                if open[2] {
                    ix[2] = sel.recv(&rz);
                }
                let Some(op) = drop_after(rng.below(3), sel.select_async()).await else {
                    continue;
                };
                let w = ix.iter().position(|&x| x == op.index()).unwrap();
                if rng.below(5) == 0 {
                    drop(op);
                    continue;
                }
                let r = match w {
                    0 => op.recv(&ra).map(|v| Some(v.id)),
                    1 => op.recv(&rb).map(|v| Some(v.check())),
                    _ => op.recv(&rz).map(|()| None),
                };
                match r {
                    Ok(Some(id)) => got.push(id),
                    Ok(None) => zs += 1,
                    Err(_) => open[w] = false,
                }
            }
            (got, zs)
        });
        let zs_sent = join_within(sender, 120).unwrap();
        let (mut got, zs) = join_within(receiver, 120).unwrap();
        got.sort_unstable();
        assert_eq!(got, (0..2 * per).collect::<Vec<_>>());
        assert_eq!(zs, zs_sent);
        for i in 0..2 * per {
            assert_eq!(d.get(i), 1);
        }
    });
}

// ---------------------------------------------------------------------------------
// Stream, timeouts, blocking waits in fibers
// ---------------------------------------------------------------------------------

/// One consumer task alternates `Stream::poll_next` (whose observer node may stay
/// registered across a `recv()` future's wait) with `recv()` futures, some dropped
/// after a pending poll, while a fiber and a thread send: every value once, each
/// sender's values in order.
#[test]
fn stream_interleaved_with_recv_futures() {
    use futures_core::Stream;
    watchdog(120, || {
        let rt = rt2();
        let per = scale(2000);
        for cap in chan_common::FLAVOURS {
            let d = Drops::new(per * 2);
            let (tx, rx) = make::<Tracked>(cap);
            let tx2 = tx.clone();
            let d1 = d.clone();
            let f = fiber_on(&rt, move || {
                for i in 0..per {
                    tx2.send_blocking(d1.make(i)).unwrap();
                }
            });
            let d2 = d.clone();
            let t = std::thread::spawn(move || {
                for i in per..2 * per {
                    tx.send_blocking(d2.make(i)).unwrap();
                }
            });
            let consumer = rt.spawn(async move {
                let mut rx = rx;
                let mut got = Vec::new();
                let mut rng = Rng::new(seed());
                loop {
                    let v = match rng.below(3) {
                        0 => std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx)).await,
                        1 => rx.recv().await.ok(),
                        _ => {
                            // A stream poll that may register, then a recv future
                            // dropped after a pending poll, then a stream poll again.
                            let mut once = true;
                            let p = std::future::poll_fn(|cx| {
                                if once {
                                    once = false;
                                    Poll::Ready(Pin::new(&mut rx).poll_next(cx))
                                } else {
                                    Poll::Ready(Poll::Pending)
                                }
                            })
                            .await;
                            match p {
                                Poll::Ready(v) => v,
                                Poll::Pending => match drop_after(1, rx.recv()).await {
                                    Some(r) => r.ok(),
                                    None => {
                                        std::future::poll_fn(|cx| Pin::new(&mut rx).poll_next(cx))
                                            .await
                                    }
                                },
                            }
                        }
                    };
                    match v {
                        Some(v) => got.push(v.id),
                        None => return got,
                    }
                }
            });
            join_within(f, 120).unwrap();
            t.join().unwrap();
            let got = join_within(consumer, 120).unwrap();
            let a: Vec<_> = got.iter().copied().filter(|&i| i < per).collect();
            let b: Vec<_> = got.iter().copied().filter(|&i| i >= per).collect();
            assert_eq!(
                a,
                (0..per).collect::<Vec<_>>(),
                "cap {cap:?}: fiber's values"
            );
            assert_eq!(
                b,
                (per..2 * per).collect::<Vec<_>>(),
                "cap {cap:?}: thread's"
            );
            for i in 0..2 * per {
                assert_eq!(d.get(i), 1);
            }
        }
    });
}

/// `send_timeout` and `recv_timeout` (the send future's `take_back_inner` on a node
/// made at its first pending poll; the receive's `withdraw`) racing partners on
/// threads, fibers and tasks: a timed-out send keeps its value, a timed-out receive
/// got nothing, and every value is received or returned exactly once.
#[test]
fn timeouts_race_partners_in_every_context() {
    watchdog(200, || {
        let rt = rt2();
        let per = scale(600);
        for cap in [Some(0), Some(1), Some(2), None] {
            let d = Drops::new(per * 3);
            let (tx, rx) = make::<Tracked>(cap);
            let returned = Arc::new(std::sync::Mutex::new(Vec::new()));
            let received = Arc::new(std::sync::Mutex::new(Vec::new()));
            let mut senders = Vec::new();
            let mut threads = Vec::new();
            for s in 0..3usize {
                let tx = tx.clone();
                let d = d.clone();
                let returned = returned.clone();
                let body = move || {
                    for i in s * per..(s + 1) * per {
                        let t = Duration::from_micros(((i * 37) % 200) as u64);
                        if let Err(e) = tx.send_timeout(d.make(i), t) {
                            let v = e.into_inner();
                            returned.lock().unwrap().push(v.id);
                        }
                    }
                };
                if s == 1 && !small() {
                    senders.push(fiber_on(&rt, body));
                } else if s == 2 {
                    senders.push(rt.spawn(async move { weft::wait(async move { body() }) }));
                } else {
                    threads.push(std::thread::spawn(body));
                }
            }
            drop(tx);
            let mut receivers = Vec::new();
            for r in 0..2u64 {
                let rx = rx.clone();
                let received = received.clone();
                let body = move || loop {
                    let t = Duration::from_micros((r * 53) % 150 + 1);
                    match rx.recv_timeout(t) {
                        Ok(v) => received.lock().unwrap().push(v.id),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                };
                if r == 0 && !small() {
                    receivers.push(fiber_on(&rt, body));
                } else {
                    threads.push(std::thread::spawn(body));
                }
            }
            drop(rx);
            for h in senders {
                join_within(h, 150).unwrap();
            }
            for h in receivers {
                join_within(h, 150).unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
            let mut all = received.lock().unwrap().clone();
            all.extend(returned.lock().unwrap().iter().copied());
            all.sort_unstable();
            assert_eq!(all, (0..3 * per).collect::<Vec<_>>(), "cap {cap:?}");
            for i in 0..3 * per {
                assert_eq!(d.get(i), 1, "cap {cap:?}: value {i}");
            }
        }
    });
}

/// A fiber that retries a timed receive (or send) whose deadline has passed by the
/// first poll still lets the fiber it waits for run on the same (only) worker: such a
/// timeout yields. Before, it returned at once without suspending, and the loop kept
/// the worker for ever (the cause of `timeouts_race_partners_in_every_context`'s hang).
#[test]
fn expired_timed_waits_on_a_fiber_let_its_worker_run_the_partner() {
    watchdog(60, || {
        let rt = weft::Builder::new()
            .worker_threads(1)
            .max_extra_workers(0)
            .build()
            .unwrap();
        let (tx, rx) = weft::chan::bounded::<u32>(1);
        let receiver = fiber_on(&rt, move || loop {
            match rx.recv_timeout(Duration::ZERO) {
                Ok(v) => break v,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => panic!("sender gone"),
            }
        });
        let sender = fiber_on(&rt, move || tx.send_blocking(5).unwrap());
        assert_eq!(join_within(receiver, 30).unwrap(), 5);
        join_within(sender, 30).unwrap();

        let (tx, rx) = weft::chan::bounded::<u32>(1);
        tx.try_send(0).unwrap();
        let sender = fiber_on(&rt, move || {
            let mut v = 9;
            loop {
                match tx.send_timeout(v, Duration::ZERO) {
                    Ok(()) => break,
                    Err(SendTimeoutError::Timeout(back)) => v = back,
                    Err(SendTimeoutError::Disconnected(_)) => panic!("receiver gone"),
                }
            }
        });
        let receiver = fiber_on(&rt, move || {
            (rx.recv_blocking().unwrap(), rx.recv_blocking().unwrap())
        });
        assert_eq!(join_within(receiver, 30).unwrap(), (0, 9));
        join_within(sender, 30).unwrap();
    });
}
