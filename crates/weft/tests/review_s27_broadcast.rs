//! Review session 27 of `weft::sync::broadcast` after 0c6d73b (`T::clone` outside the
//! lock: values for several receivers behind an `Arc`, values for one stored as they
//! are), from safe code: auto-trait bounds, subscribe / receiver drop racing send,
//! `Clone`s and `Drop`s that block, panic, suspend a fiber or use the channel, slots
//! overwritten mid-clone, cancelled receives, aborted fibers, dropped runtimes, and
//! random interleavings of 2-4 threads with every copy's drop counted. Under watchdogs.

mod chan_common;

use std::cell::Cell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use chan_common::{drop_after, fiber_on, join_within, rt2, wait_for, watchdog, Rng};
use weft::sync::broadcast::{self, error::RecvError, error::TryRecvError, Receiver, Sender};
use weft::sync::Notify;

// ---------------------------------------------------------------- helpers

/// Runs in a [`Val`]'s `clone` (`false`) and, after the drop is counted, its `drop`.
type Hook = Arc<dyn Fn(usize, bool) + Send + Sync>;

/// Per value id: [clones, drops]. Each id must end with `drops == 1 + clones` (the
/// original and every clone dropped once: no leak, no double drop).
#[derive(Clone)]
struct Book(Arc<Vec<[AtomicUsize; 2]>>);

impl Book {
    fn new(n: usize) -> Book {
        Book(Arc::new((0..n).map(|_| Default::default()).collect()))
    }
    fn val(&self, id: usize, hook: Option<Hook>) -> Val {
        let book = self.clone();
        Val { id, book, hook }
    }
    fn clones(&self, id: usize) -> usize {
        self.0[id][0].load(SeqCst)
    }
    fn drops(&self, id: usize) -> usize {
        self.0[id][1].load(SeqCst)
    }
    fn check(&self, n: usize, what: &str) {
        for id in 0..n {
            let (c, d) = (self.clones(id), self.drops(id));
            assert_eq!(d, 1 + c, "{what}: value {id}: {c} clones, {d} drops");
        }
    }
}

/// A value that counts its clones and drops in its [`Book`] and runs its hook.
struct Val {
    id: usize,
    book: Book,
    hook: Option<Hook>,
}

impl Clone for Val {
    fn clone(&self) -> Val {
        if let Some(h) = &self.hook {
            h(self.id, false);
        }
        self.book.0[self.id][0].fetch_add(1, SeqCst);
        self.book.val(self.id, self.hook.clone())
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        self.book.0[self.id][1].fetch_add(1, SeqCst);
        if let Some(h) = &self.hook {
            h(self.id, true);
        }
    }
}

impl std::fmt::Debug for Val {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Val({})", self.id)
    }
}

/// A hook that yields in the clone of every `k`th value.
fn yield_every(k: usize) -> Option<Hook> {
    Some(Arc::new(move |id, dropping| {
        if !dropping && id % k == 0 {
            std::thread::yield_now();
        }
    }))
}

/// Receive by `how`: 0 `try_recv` (`None`: empty), 1 `recv_blocking`, 2 one poll of
/// `recv()` with a no-op waker, then dropped (`None`: pending).
type Event = Option<Result<Val, RecvError>>;
fn recv_by(rx: &mut Receiver<Val>, how: u64) -> Event {
    match how {
        0 => match rx.try_recv() {
            Ok(v) => Some(Ok(v)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Closed) => Some(Err(RecvError::Closed)),
            Err(TryRecvError::Lagged(n)) => Some(Err(RecvError::Lagged(n))),
        },
        1 => Some(rx.recv_blocking()),
        _ => chan_common::poll_once(rx.recv()),
    }
}

/// What one receiver saw, checked against tokio's rule as events come: its first
/// position (the first value less the lags before it) lies in `lo..=hi`, where it
/// subscribed; each later value is the one after the previous, or `n` further on after
/// `Lagged(n)`; `Closed` comes at the end, position `end`.
struct Seen {
    lo: usize,
    hi: usize,
    end: usize,
    /// Lags before the first value.
    pending: usize,
    /// The position the next value must have (`None` before the first value).
    next: Option<usize>,
    got: usize,
}

impl Seen {
    fn new(lo: usize, hi: usize, end: usize) -> Seen {
        let (pending, next, got) = (0, None, 0);
        Seen {
            lo,
            hi,
            end,
            pending,
            next,
            got,
        }
    }
    /// Position `pos` reached (a value, or the end).
    fn at(&self, pos: usize, what: &str) {
        match self.next {
            Some(p) => assert_eq!(pos, p, "{what}: a value lost, doubled or out of order"),
            None => {
                let start = pos - self.pending;
                let (lo, hi) = (self.lo, self.hi);
                assert!(
                    (lo..=hi).contains(&start),
                    "{what}: start {start} not in {lo}..={hi}"
                );
            }
        }
    }
    /// Checks `e`; `true` at `Closed`. `None` (nothing now) yields.
    fn event(&mut self, e: Event, what: &str) -> bool {
        match e {
            Some(Ok(v)) => {
                self.at(v.id, what);
                self.next = Some(v.id + 1);
                self.got += 1;
            }
            Some(Err(RecvError::Lagged(n))) => {
                assert!(n > 0, "{what}: Lagged(0)");
                *self.next.as_mut().unwrap_or(&mut self.pending) += n as usize;
            }
            Some(Err(RecvError::Closed)) => {
                self.at(self.end, what);
                return true;
            }
            None => std::thread::yield_now(),
        }
        false
    }
}

// ---------------------------------------------------------------- bounds

/// Whether the concrete type `$t` implements `$tr` (autoref specialisation: the `&`
/// picks the first impl whose bound holds).
#[rustfmt::skip]
macro_rules! implements {
    ($t:ty: $tr:path) => {{
        struct P<T>(PhantomData<T>);
        #[allow(dead_code)] trait Yes { fn get(&self) -> bool { true } }
        #[allow(dead_code)] trait No { fn get(&self) -> bool { false } }
        impl<T: $tr> Yes for P<T> {}
        impl<T> No for &P<T> {}
        #[allow(clippy::needless_borrow)] // the borrow is the point
        (&P::<$t>(PhantomData)).get()
    }};
}

/// Found in review of 0c6d73b: with `Held::Shared(std::sync::Arc<T>)` in the ring,
/// `Sender<T>` and `Receiver<T>` were `Send`/`Sync` only for `T: Send + Sync` (two
/// receivers did clone one value at once, which a `T` that is not `Sync` cannot allow),
/// where tokio's need `T: Send` (since RUSTSEC-2025-0023 it clones one value at a time).
/// Fixed the same way: a value shared by several receivers has a mutex of its own.
#[test]
fn handles_are_send_and_sync_for_send_but_not_sync_values_as_tokios() {
    // The probe works: a plain value passes, `Rc` and `Cell` do not.
    assert!(implements!(Receiver<u32>: Send) && implements!(Sender<u32>: Sync));
    assert!(!implements!(std::rc::Rc<u32>: Send) && !implements!(Cell<u32>: Sync));
    let got = [
        implements!(Receiver<Cell<u32>>: Send),
        implements!(Receiver<Cell<u32>>: Sync),
        implements!(Sender<Cell<u32>>: Send),
        implements!(Sender<Cell<u32>>: Sync),
    ];
    assert_eq!(got, [true; 4], "Receiver, Sender of Cell<u32>: Send, Sync");
}

// ---------------------------------------------------------------- subscribe/drop races

/// A receiver comes and goes on another thread while values are sent (the hint is stale
/// both ways): a value sent to one receiver is never cloned, a failed send's value comes
/// back whole, the steady receiver gets every value in order, each copy dropped once.
///
/// Each round checks the values; the last assertion, that sends met both counts of
/// receivers, only says the round raced: under a heavy load the churning thread may
/// not run during a half (seen once in a stress pass beside a CPU burner), so a round
/// that did not race is run again, up to 5 rounds.
#[test]
fn values_for_one_receiver_never_clone_while_others_come_and_go() {
    watchdog(60, || {
        let raced = (0..5).any(|_| values_for_one_receiver_round());
        assert!(
            raced,
            "in 5 rounds, no send met the churning receiver in both halves"
        );
    });
}

/// One round of the test above; returns whether sends met 2 receivers in the first
/// half and 1 in the second.
fn values_for_one_receiver_round() -> bool {
    {
        const N: usize = 4000;
        let book = Book::new(N);
        let (tx, rx) = broadcast::channel::<Val>(N);
        let stop = Arc::new(AtomicBool::new(false));
        let churn = {
            let (tx, stop) = (tx.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(27);
                let mut n = 0;
                while !stop.load(SeqCst) {
                    let mut r = tx.subscribe();
                    for _ in 0..rng.below(3) {
                        let _ = r.try_recv();
                    }
                    drop(r);
                    n += 1;
                }
                n
            })
        };
        wait_for("the churning thread", 10, || tx.receiver_count() == 2);
        // The steady receiver leaves halfway: from then on sends fail (when the churning
        // one is away) or reach the churning one alone.
        let mut steady = Some(rx);
        let mut counts = vec![0; N];
        for (id, count) in counts.iter_mut().enumerate() {
            if id == N / 2 {
                let mut rx = steady.take().unwrap();
                let mut seen = Seen::new(0, 0, N);
                while let Some(e) = recv_by(&mut rx, 0) {
                    assert!(!seen.event(Some(e), "steady"));
                }
                assert_eq!(seen.got, N / 2, "steady receiver");
            }
            *count = match tx.send(book.val(id, None)) {
                Ok(n) => n,
                Err(e) => {
                    assert_eq!(e.0.id, id);
                    assert_eq!(book.drops(id), 0, "a failed send's value came back dropped");
                    0
                }
            };
            if id % 4 == 0 {
                std::thread::yield_now();
            }
        }
        stop.store(true, SeqCst);
        assert!(churn.join().unwrap() > 0);
        drop(tx);
        for (id, &n) in counts.iter().enumerate() {
            if n <= 1 {
                assert_eq!(book.clones(id), 0, "value {id}, sent to {n}, was cloned");
            }
        }
        book.check(N, "churn");
        counts[..N / 2].contains(&2) && counts[N / 2..].contains(&1)
    }
}

// ---------------------------------------------------------------- random interleavings

/// 2-4 threads each hold a receiver and at random try_recv, recv_blocking, poll `recv()`
/// once, or subscribe again and drop the old one (mid-clone of other receivers), while
/// the main thread sends into a small ring (lags, slots overwritten during clones) values
/// whose clone sometimes yields. Each receiver follows tokio's rule ([`Seen`]), and every
/// value and clone is dropped once.
#[test]
fn random_interleavings_keep_order_and_drop_every_copy_once() {
    watchdog(30, || {
        const N: usize = 1500;
        let seed = chan_common::seed();
        for round in 0..12u64 {
            let threads = 2 + (round % 3) as usize;
            let what = format!("seed {seed} round {round}");
            let book = Book::new(N);
            let (tx, first) = broadcast::channel::<Val>([1, 2, 4][(round % 3) as usize]);
            // Values sent so far (stored after each send returns).
            let sent = Arc::new(AtomicUsize::new(0));
            // The receivers subscribe again through this sender while it is there.
            let door = Arc::new(Mutex::new(Some(tx.clone())));
            let mut first = Some(first);
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let mut rx = first.take().unwrap_or_else(|| tx.subscribe());
                    let (door, sent) = (door.clone(), sent.clone());
                    let what = format!("{what} thread {t}");
                    std::thread::spawn(move || {
                        let mut rng = Rng::new(seed ^ (round << 8) ^ t as u64);
                        let (mut seen, mut total) = (Seen::new(0, 0, N), 0);
                        loop {
                            if rng.below(16) == 0 {
                                let d = door.lock().unwrap();
                                if let Some(tx) = d.as_ref() {
                                    let lo = sent.load(SeqCst);
                                    let new = tx.subscribe();
                                    // Value `sent` may be on its way; the next is not.
                                    let hi = sent.load(SeqCst) + 1;
                                    drop(d);
                                    drop(std::mem::replace(&mut rx, new));
                                    total += seen.got;
                                    seen = Seen::new(lo, hi, N);
                                }
                            } else if seen.event(recv_by(&mut rx, rng.below(3)), &what) {
                                return total + seen.got;
                            }
                        }
                    })
                })
                .collect();
            for id in 0..N {
                let n = tx.send(book.val(id, yield_every(5))).unwrap();
                assert!((1..=threads + 1).contains(&n), "{what}: sent to {n}");
                sent.store(id + 1, SeqCst);
                if id % 2 == 0 {
                    std::thread::yield_now();
                }
            }
            drop(door.lock().unwrap().take());
            drop(tx);
            let got: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
            assert!(got > 0, "{what}");
            book.check(N, &what);
        }
    });
}

// ---------------------------------------------------------------- clones

/// A hook whose first clone of value 0 says so on `entered` and waits for `go`.
fn gate_on_0() -> (Option<Hook>, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (entered_tx, entered) = mpsc::channel::<()>();
    let (go_tx, go) = mpsc::channel::<()>();
    let gate = Mutex::new(Some((entered_tx, go)));
    let hook: Hook = Arc::new(move |id, dropping| {
        let first = if id == 0 && !dropping {
            gate.lock().unwrap().take()
        } else {
            None
        };
        if let Some((e, g)) = first {
            e.send(()).unwrap();
            g.recv().unwrap();
        }
    });
    (Some(hook), entered, go_tx)
}

/// The ring goes round twice while a lagging receiver clones value 0 (its slot is
/// overwritten under it): the clone completes with value 0, the original is dropped only
/// then, once, and both receivers go on by tokio's rule (`Lagged`, then the oldest kept).
#[test]
fn a_slot_overwritten_while_a_receiver_clones_it() {
    watchdog(20, || {
        let book = Book::new(6);
        let (hook, entered, go) = gate_on_0();
        let (tx, mut slow) = broadcast::channel::<Val>(2);
        let mut other = tx.subscribe();
        for id in 0..2 {
            assert_eq!(tx.send(book.val(id, hook.clone())).unwrap(), 2);
        }
        let t = std::thread::spawn(move || (slow.recv_blocking().unwrap().id, slow));
        entered.recv().unwrap();
        for id in 2..6 {
            tx.send(book.val(id, hook.clone())).unwrap();
        }
        assert_eq!(book.drops(0), 0, "value 0 is still being cloned");
        assert_eq!(book.drops(1), 1, "value 1 was overwritten unread");
        assert_eq!(other.try_recv().unwrap_err(), TryRecvError::Lagged(4));
        let (a, b) = (other.try_recv().unwrap(), other.try_recv().unwrap());
        assert_eq!((a.id, b.id), (4, 5));
        go.send(()).unwrap();
        let (id, mut slow) = t.join().unwrap();
        assert_eq!((id, book.clones(0), book.drops(0)), (0, 1, 2));
        assert_eq!(slow.try_recv().unwrap_err(), TryRecvError::Lagged(3));
        assert_eq!(slow.try_recv().unwrap().id, 4);
        assert_eq!(slow.try_recv().unwrap().id, 5);
        assert_eq!(slow.try_recv().unwrap_err(), TryRecvError::Empty);
        drop((a, b, other, slow, tx));
        book.check(6, "overwritten");
        assert_eq!((book.clones(4), book.clones(5)), (1, 1));
    });
}

/// A `Clone` that drops the other receiver of the value it clones (its share freed
/// mid-clone), sends while one receiver is left (a value stored for one), subscribes a
/// new receiver and sends again: nothing hangs or hits `unreachable!`, every receiver
/// gets what tokio's would, and the value stored for one is never cloned.
#[test]
fn a_clone_that_drops_subscribes_and_sends_on_its_channel() {
    watchdog(20, || {
        let book = Book::new(3);
        let cell: Arc<OnceLock<Sender<Val>>> = Arc::default();
        let spare: Arc<Mutex<Option<Receiver<Val>>>> = Arc::default();
        let made: Arc<Mutex<Option<Receiver<Val>>>> = Arc::default();
        let hook: Hook = {
            let (cell, spare, made) = (cell.clone(), spare.clone(), made.clone());
            let book = book.clone();
            Arc::new(move |id, dropping| {
                if id != 0 || dropping {
                    return;
                }
                let tx = cell.get().unwrap();
                drop(spare.lock().unwrap().take());
                assert_eq!(tx.receiver_count(), 1);
                assert_eq!(tx.send(book.val(1, None)).unwrap(), 1);
                *made.lock().unwrap() = Some(tx.subscribe());
                assert_eq!(tx.send(book.val(2, None)).unwrap(), 2);
            })
        };
        let (tx, mut a) = broadcast::channel::<Val>(4);
        *spare.lock().unwrap() = Some(tx.subscribe());
        cell.set(tx.clone()).ok().unwrap();
        assert_eq!(tx.send(book.val(0, Some(hook))).unwrap(), 2);
        assert_eq!(a.try_recv().unwrap().id, 0);
        assert_eq!(
            book.drops(0),
            2,
            "the clone, and the original (no share left)"
        );
        assert_eq!(a.try_recv().unwrap().id, 1);
        assert_eq!(a.try_recv().unwrap().id, 2);
        let mut c = made.lock().unwrap().take().unwrap();
        assert_eq!(c.try_recv().unwrap().id, 2);
        assert_eq!(c.try_recv().unwrap_err(), TryRecvError::Empty);
        assert_eq!(a.try_recv().unwrap_err(), TryRecvError::Empty);
        assert_eq!([book.clones(0), book.clones(1), book.clones(2)], [1, 0, 1]);
        book.check(3, "reentrant clone");
    });
}

/// A fiber suspended inside `T::clone` (a `weft::wait` there, under `recv_blocking`)
/// holds nothing of the channel: `receiver_count` and `subscribe` go on (the other
/// readers of that same value wait for the clone: clones of one value take turns, as
/// tokio's). Aborting the fiber, or dropping its runtime, unwinds the clone: its
/// reference to the value and its receiver are released (the value's lock, poisoned by
/// the unwinding, still gives the value up), and every copy is dropped once. A task and
/// a fiber waiting in `recv` then leave no node behind (a later send counts one
/// receiver).
#[test]
fn a_fiber_suspended_in_a_clone_is_aborted_or_its_runtime_dropped() {
    watchdog(30, || {
        for drop_rt in [false, true] {
            let book = Book::new(2);
            let gate = Arc::new(Notify::new());
            let entered = Arc::new(AtomicBool::new(false));
            let hook: Hook = {
                let (gate, entered) = (gate.clone(), entered.clone());
                Arc::new(move |id, dropping| {
                    if id == 0 && !dropping && !entered.swap(true, SeqCst) {
                        weft::wait(gate.notified());
                    }
                })
            };
            let rt = rt2();
            let (tx, mut main) = broadcast::channel::<Val>(4);
            let mut rf = tx.subscribe();
            assert_eq!(tx.send(book.val(0, Some(hook))).unwrap(), 2);
            let fiber = fiber_on(&rt, move || rf.recv_blocking().map(|v| v.id));
            wait_for("the fiber's clone", 10, || entered.load(SeqCst));
            let (mut r1, mut r2) = (tx.subscribe(), tx.subscribe());
            let waiting = [
                rt.spawn(async move { r1.recv().await.map(|v| v.id) }),
                fiber_on(&rt, move || r2.recv_blocking().map(|v| v.id)),
            ];
            assert_eq!(tx.receiver_count(), 4);
            if drop_rt {
                std::thread::sleep(Duration::from_millis(20));
                drop(rt);
            } else {
                fiber.abort();
                waiting.iter().for_each(|w| w.abort());
            }
            let e = join_within(fiber, 10).unwrap_err();
            assert!(e.is_cancelled(), "drop_rt {drop_rt}: {e:?}");
            for w in waiting {
                let e = join_within(w, 10).unwrap_err();
                assert!(e.is_cancelled(), "drop_rt {drop_rt}: {e:?}");
            }
            wait_for("receivers released", 10, || tx.receiver_count() == 1);
            // The last reader now, with the fiber's reference gone: the value moves.
            assert_eq!(main.try_recv().unwrap().id, 0);
            assert_eq!(book.clones(0), 0, "drop_rt {drop_rt}: the aborted clone");
            assert_eq!(book.drops(0), 1, "drop_rt {drop_rt}: the original, once");
            assert_eq!(tx.send(book.val(1, None)).unwrap(), 1);
            assert_eq!(main.try_recv().unwrap().id, 1);
            book.check(2, "fiber in clone");
        }
    });
}

// ---------------------------------------------------------------- drops

/// A `Drop` that panics where the channel drops a value (overwritten in `send`, the last
/// shares of a dropped receiver) leaves the channel working: the send had stored its
/// value and woken its waiter, the receiver is gone and its other value dropped. A
/// `Drop` that uses the channel (`subscribe`, `receiver_count`, `send`) there finishes.
#[test]
fn drops_that_panic_or_use_the_channel() {
    watchdog(20, || {
        let book = Book::new(12);
        let bomb: Option<Hook> = Some(Arc::new(|_, dropping| {
            assert!(
                !dropping || std::thread::panicking(),
                "a value's drop panics"
            );
        }));
        let (tx, mut rx) = broadcast::channel::<Val>(1);
        tx.send(book.val(0, bomb.clone())).unwrap();
        let mut waiter = tx.subscribe();
        let t = std::thread::spawn(move || waiter.recv_blocking().map(|v| v.id));
        std::thread::sleep(Duration::from_millis(30));
        assert!(catch_unwind(AssertUnwindSafe(|| tx.send(book.val(1, None)))).is_err());
        assert_eq!(t.join().unwrap(), Ok(1), "the waiter got the value sent");
        assert_eq!(rx.try_recv().unwrap_err(), TryRecvError::Lagged(1));
        assert_eq!(rx.try_recv().unwrap().id, 1);
        // A receiver holding the last shares of a panicking value and another one.
        let (tx, rx) = broadcast::channel::<Val>(4);
        tx.send(book.val(2, bomb)).unwrap();
        tx.send(book.val(3, None)).unwrap();
        assert!(catch_unwind(AssertUnwindSafe(|| drop(rx))).is_err());
        assert_eq!(
            (book.drops(2), book.drops(3), tx.receiver_count()),
            (1, 1, 0)
        );
        let mut rx = tx.subscribe();
        tx.send(book.val(4, None)).unwrap();
        assert_eq!(rx.try_recv().unwrap().id, 4);

        // Drops that use the channel; each sends a new value (ids from 9).
        let cell: Arc<OnceLock<Sender<Val>>> = Arc::default();
        let used = Arc::new(AtomicUsize::new(0));
        let touch: Option<Hook> = {
            let (cell, used, book) = (cell.clone(), used.clone(), book.clone());
            Some(Arc::new(move |_, dropping| {
                if dropping {
                    let tx = cell.get().unwrap();
                    drop(tx.subscribe());
                    assert!(tx.receiver_count() <= 2);
                    let id = 9 + used.fetch_add(1, SeqCst);
                    tx.send(book.val(id, None)).unwrap();
                }
            }))
        };
        let (tx, mut r1) = broadcast::channel::<Val>(2);
        let r2 = tx.subscribe();
        cell.set(tx.clone()).ok().unwrap();
        tx.send(book.val(5, touch.clone())).unwrap();
        tx.send(book.val(6, None)).unwrap();
        tx.send(book.val(7, None)).unwrap(); // overwrites 5: its drop sends 9
        assert_eq!(used.load(SeqCst), 1);
        tx.send(book.val(8, touch)).unwrap(); // overwrites 7
        assert_eq!(r1.try_recv().unwrap_err(), TryRecvError::Lagged(3));
        let got: Vec<_> = std::iter::from_fn(|| r1.try_recv().ok().map(|v| v.id)).collect();
        // r1's clone of 8 was dropped in that loop: it sent 10.
        assert_eq!((got, used.load(SeqCst)), (vec![9, 8, 10], 2));
        drop(r2); // the last share of 8: its drop sends 11
        assert_eq!(used.load(SeqCst), 3);
        assert_eq!(r1.try_recv().unwrap().id, 11);
        drop((r1, tx, rx));
        book.check(12, "drops");
    });
}

// ---------------------------------------------------------------- cancelled receives

/// Receive futures dropped after a random number of polls in a task, beside a fiber and
/// a thread (which drops `recv()` futures after one poll) reading the same values (so
/// they are shared: clones): no receiver loses, doubles or reorders a value, and every
/// copy is dropped once.
#[test]
fn recv_futures_dropped_at_every_poll_point_lose_nothing() {
    watchdog(30, || {
        const N: usize = 1500;
        let rt = rt2();
        let book = Book::new(N);
        let (tx, mut r1) = broadcast::channel::<Val>(N);
        // What the task has read: the sender waits for it now and then and pauses, so
        // that its receives are cancelled while pending.
        let read = Arc::new(AtomicUsize::new(0));
        let task_read = read.clone();
        let task = rt.spawn(async move {
            let (mut rng, mut seen, mut cancelled) = (Rng::new(5), Seen::new(0, 0, N), 0);
            loop {
                let e = drop_after(rng.below(4), r1.recv()).await;
                match &e {
                    Some(Ok(v)) => task_read.store(v.id + 1, SeqCst),
                    None => cancelled += 1,
                    _ => {}
                }
                if seen.event(e, "task") {
                    return cancelled;
                }
            }
        });
        let mut r2 = tx.subscribe();
        let fiber = fiber_on(&rt, move || {
            let mut seen = Seen::new(0, 0, N);
            while !seen.event(Some(r2.recv_blocking()), "fiber") {}
        });
        let mut r3 = tx.subscribe();
        let thread = std::thread::spawn(move || {
            let (mut rng, mut seen) = (Rng::new(6), Seen::new(0, 0, N));
            while !seen.event(recv_by(&mut r3, 1 + rng.below(2)), "thread") {}
        });
        for id in 0..N {
            tx.send(book.val(id, yield_every(3))).unwrap();
            if id % 100 == 99 {
                wait_for("the task", 10, || read.load(SeqCst) == id + 1);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        drop(tx);
        assert!(
            join_within(task, 20).unwrap() > 0,
            "no receive was cancelled"
        );
        join_within(fiber, 20).unwrap();
        thread.join().unwrap();
        book.check(N, "cancelled receives");
    });
}
