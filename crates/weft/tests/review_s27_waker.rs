//! Review of session 27's `task::waker::Prepared` and wider `WAKE-FLUSH-UNDER-LOCK`
//! count, from the public API: wakers whose `clone` panics, uses its object or gives a
//! new data pointer each time, whose `drop` uses its object, swapped between polls. No
//! hang, the waker polled last woken, nothing lost or duplicated, no clone left.

mod chan_common;
mod common;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Poll, RawWaker, RawWakerVTable, Waker};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use chan_common::{fiber_on, join_within, make, poll_with, rt2, wait_for, watchdog, Drops};
use weft::chan::{bounded, Select};
use weft::sync::{self, oneshot, watch, Notify, Semaphore};

type Hook = Mutex<Option<Box<dyn FnOnce() + Send>>>;

/// The state behind adversarial wakers (leaked: a waker may outlive its test): live
/// handles, wakes, the clone that panics (1: the next, 2: the one after; 0: none), and
/// one-shot hooks run by a clone or a drop.
#[derive(Default)]
struct Evil {
    live: AtomicIsize,
    wakes: AtomicUsize,
    panic_at: AtomicIsize,
    on_clone: Hook,
    on_drop: Hook,
}

impl Evil {
    fn new() -> &'static Evil {
        Box::leak(Box::default())
    }
    fn wakes(&self) -> usize {
        self.wakes.load(SeqCst)
    }
    fn live(&self) -> isize {
        self.live.load(SeqCst)
    }
    fn on_clone(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_clone.lock().unwrap() = Some(Box::new(f));
    }
    fn on_drop(&self, f: impl FnOnce() + Send + 'static) {
        *self.on_drop.lock().unwrap() = Some(Box::new(f));
    }
    fn run(hook: &Hook) {
        let f = hook.lock().unwrap().take();
        if let Some(f) = f {
            f();
        }
    }
    fn cloned(&self) {
        Evil::run(&self.on_clone);
        assert_ne!(self.panic_at.fetch_sub(1, SeqCst), 1, "adversarial clone");
        self.live.fetch_add(1, SeqCst);
    }
    fn woke(&self) {
        self.wakes.fetch_add(1, SeqCst);
    }
    fn dropped(&self) {
        self.live.fetch_sub(1, SeqCst);
        Evil::run(&self.on_drop);
    }
    /// A waker of this state; `distinct`: each clone has a data pointer of its own.
    fn waker(&'static self, distinct: bool) -> Waker {
        self.live.fetch_add(1, SeqCst);
        let raw = match distinct {
            true => RawWaker::new(Box::into_raw(Box::new(self)).cast(), &DISTINCT),
            false => RawWaker::new((self as *const Evil).cast(), &SHARED),
        };
        // SAFETY: the vtables keep the `RawWaker` contract for these pointers.
        unsafe { Waker::from_raw(raw) }
    }
}

/// The state behind a data pointer: SHARED's is the state's address (the same for
/// every clone), DISTINCT's a box of it (one per clone, freed by the handle's `drop`).
///
/// # Safety
/// `p` is the data pointer of a live waker of the vtable `distinct` names.
unsafe fn state(p: *const (), distinct: bool) -> &'static Evil {
    // SAFETY: the contract: a leaked state's address, or a live box holding one.
    unsafe {
        match distinct {
            true => *(p as *const &'static Evil),
            false => &*(p as *const Evil),
        }
    }
}

// The vtables' functions, whose `p` is a live handle's data pointer (`RawWaker`'s
// contract); a `wake` or `drop` ends its handle, DISTINCT's freeing its box.
unsafe fn s_clone(p: *const ()) -> RawWaker {
    // SAFETY: as above.
    unsafe { state(p, false) }.cloned();
    RawWaker::new(p, &SHARED)
}
unsafe fn s_wake(p: *const ()) {
    // SAFETY: as above.
    let e = unsafe { state(p, false) };
    e.woke();
    e.dropped();
}
unsafe fn s_wake_by_ref(p: *const ()) {
    // SAFETY: as above.
    unsafe { state(p, false) }.woke();
}
unsafe fn s_drop(p: *const ()) {
    // SAFETY: as above.
    unsafe { state(p, false) }.dropped();
}
unsafe fn d_clone(p: *const ()) -> RawWaker {
    // SAFETY: as above.
    let e = unsafe { state(p, true) };
    e.cloned();
    RawWaker::new(Box::into_raw(Box::new(e)).cast(), &DISTINCT)
}
unsafe fn d_wake(p: *const ()) {
    // SAFETY: as above; the handle ends here.
    unsafe {
        d_wake_by_ref(p);
        d_drop(p);
    }
}
unsafe fn d_wake_by_ref(p: *const ()) {
    // SAFETY: as above.
    unsafe { state(p, true) }.woke();
}
unsafe fn d_drop(p: *const ()) {
    // SAFETY: as above; the handle's own box (from `Box::into_raw`), freed once.
    let e = *unsafe { Box::from_raw(p as *mut &'static Evil) };
    e.dropped();
}

static SHARED: RawWakerVTable = RawWakerVTable::new(s_clone, s_wake, s_wake_by_ref, s_drop);
static DISTINCT: RawWakerVTable = RawWakerVTable::new(d_clone, d_wake, d_wake_by_ref, d_drop);

/// Checks, when dropped, that every clone of its states' wakers is gone (a wake made on
/// another thread may still be on its way: it is given 2 s).
struct NoneLeft(Vec<&'static Evil>);

impl Drop for NoneLeft {
    fn drop(&mut self) {
        let live = || self.0.iter().map(|e| e.live()).collect::<Vec<_>>();
        let zero = vec![0; self.0.len()];
        if !std::thread::panicking() {
            let _ = catch_unwind(|| wait_for("clones dropped", 2, || live() == zero));
            assert_eq!(live(), zero, "a waker clone leaked");
        }
    }
}

/// A thread a hook or trigger starts, joined later.
struct Bg<T>(Arc<Mutex<Option<JoinHandle<T>>>>);

impl<T: Send + 'static> Bg<T> {
    fn new() -> Bg<T> {
        Bg(Arc::new(Mutex::new(None)))
    }
    fn start(&self, f: impl FnOnce() -> T + Send + 'static) -> impl FnOnce() + Send + 'static {
        let slot = self.0.clone();
        move || *slot.lock().unwrap() = Some(std::thread::spawn(f))
    }
    fn join(&self) -> T {
        let h = self.0.lock().unwrap().take().expect("a started thread");
        h.join().unwrap()
    }
}

fn panics(f: impl FnOnce()) -> bool {
    catch_unwind(AssertUnwindSafe(f)).is_err()
}

fn ready<F: Future>(f: F) -> bool {
    chan_common::poll_once(f).is_some()
}

/// Polls `f` with `w` until ready; between polls `e` must be woken (within 2 s).
fn drive<F: Future + ?Sized>(mut f: Pin<&mut F>, w: &Waker, e: &Evil) -> F::Output {
    for _ in 0..100 {
        let before = e.wakes();
        if let Poll::Ready(v) = poll_with(f.as_mut(), w) {
            return v;
        }
        wait_for("a wake of the waker polled last", 2, || e.wakes() > before);
    }
    panic!("woken 100 times, never ready");
}

/// Polls `f` once with a waker whose first clone panics; `f` is dropped in the unwind.
fn first_clone_panics<F: Future>(f: F) {
    let e = Evil::new();
    e.panic_at.store(1, SeqCst);
    let w = e.waker(false);
    assert!(panics(|| drop(poll_with(pin!(f), &w))));
    drop(w);
    drop(NoneLeft(vec![e]));
}

#[test]
fn a_panicking_first_clone_leaves_nothing_behind() {
    watchdog(10, || {
        // Receive: no phantom receiver (a rendezvous send finds nobody).
        for cap in [Some(0), Some(1), None] {
            let (tx, rx) = make::<u32>(cap);
            first_clone_panics(rx.recv());
            assert_eq!(tx.try_send(1).is_err(), cap == Some(0), "{cap:?}");
        }
        // Send: its value dropped once, the buffer intact; no phantom sender.
        let drops = Drops::new(2);
        let (tx, rx) = bounded(1);
        tx.try_send(drops.make(0)).unwrap();
        first_clone_panics(tx.send(drops.make(1)));
        assert_eq!((drops.get(0), drops.get(1), rx.len()), (0, 1, 1));
        let (tx, rx) = bounded::<u8>(0);
        first_clone_panics(tx.send(1));
        assert!(rx.try_recv().is_err());
        let (tx, rx) = bounded::<u8>(1);
        let mut sel = Select::new();
        sel.recv(&rx);
        first_clone_panics(sel.select_async());
        tx.try_send(1).unwrap();
        assert_eq!(sel.select().recv(&rx), Ok(1));
        // Locks, permits, notifications, arrivals: nothing left queued for the phantom.
        let m = sync::Mutex::new(0);
        let g = m.try_lock().unwrap();
        first_clone_panics(m.lock());
        drop(g);
        assert!(m.try_lock().is_ok());
        let s = Semaphore::new(0);
        first_clone_panics(s.acquire());
        s.add_permits(1);
        assert!(s.try_acquire().is_ok());
        let n = Notify::new();
        first_clone_panics(n.notified());
        n.notify_one();
        assert!(ready(n.notified()));
        let b = Arc::new(sync::Barrier::new(2));
        first_clone_panics(b.wait());
        let b2 = b.clone();
        let t = std::thread::spawn(move || b2.wait_blocking().is_leader());
        assert!(b.wait_blocking().is_leader() ^ t.join().unwrap());
        let (tx, mut rx) = oneshot::channel::<u8>();
        first_clone_panics(&mut rx);
        tx.send(3).unwrap();
        assert_eq!(rx.try_recv(), Ok(3));
        let (tx, mut rx) = watch::channel(0);
        first_clone_panics(rx.changed());
        tx.send(1).unwrap();
        assert!(ready(rx.changed()));
        // Timers and sockets.
        let rt = weft::Runtime::new().unwrap();
        let (mut a, b) = common::net::pair(&rt);
        rt.block_on(async {
            first_clone_panics(weft::time::sleep(Duration::from_secs(60)));
            weft::time::sleep(Duration::from_millis(1)).await;
            first_clone_panics(a.readable());
            let mut buf = [0u8; 4];
            first_clone_panics(weft::io::AsyncReadExt::read(&mut a, &mut buf));
            b.try_write(b"x").unwrap();
            a.readable().await.unwrap();
            assert_eq!(a.try_read(&mut buf).unwrap(), 1);
        });
    });
}

/// Registers `f` with A, polls it with B whose clone panics, then runs `trigger`: with
/// `wake`, A (still the stored waker) must be woken and `f` complete; without (a wait
/// made by an `async fn`, which the panic ends), `f` is dropped.
fn repoll_panics<F: Future>(f: F, wake: bool, trigger: impl FnOnce()) -> Option<F::Output> {
    let (a, b) = (Evil::new(), Evil::new());
    let (wa, wb) = (a.waker(false), b.waker(true));
    let mut f = Box::pin(f);
    assert!(poll_with(f.as_mut(), &wa).is_pending());
    b.panic_at.store(1, SeqCst);
    assert!(panics(|| drop(poll_with(f.as_mut(), &wb))));
    let before = a.wakes();
    trigger();
    let out = wake.then(|| {
        wait_for("a wake of the stored waker", 2, || a.wakes() > before);
        drive(f.as_mut(), &wa, a)
    });
    drop((f, wa, wb));
    drop(NoneLeft(vec![a, b]));
    out
}

#[test]
fn a_panicking_clone_on_a_repoll_keeps_the_stored_waker() {
    watchdog(10, || {
        for cap in [Some(0), Some(1), None] {
            let (tx, rx) = make::<u32>(cap);
            let bg = Bg::new();
            let got = repoll_panics(rx.recv(), true, bg.start(move || tx.send_blocking(7)));
            assert_eq!((got, bg.join()), (Some(Ok(7)), Ok(())), "{cap:?}");
        }
        let (tx, rx) = bounded::<u32>(1);
        tx.try_send(1).unwrap();
        let got = repoll_panics(tx.send(2), true, || assert_eq!(rx.try_recv(), Ok(1)));
        assert_eq!((got, rx.try_recv()), (Some(Ok(())), Ok(2)));
        let (tx, rx) = bounded::<u32>(0);
        let bg = Bg::new();
        repoll_panics(tx.send(3), true, bg.start(move || rx.recv_blocking()));
        assert_eq!(bg.join(), Ok(3));
        let n = Notify::new();
        repoll_panics(n.notified(), true, || n.notify_one());
        assert!(!ready(n.notified()), "one notify_one, two completions");
        let (tx, mut rx) = oneshot::channel::<u8>();
        let got = repoll_panics(&mut rx, true, || tx.send(5).unwrap());
        assert_eq!(got, Some(Ok(5)));
        // The `async fn` waits: what they absorbed or were handed goes on.
        let s = Semaphore::new(0);
        let mut first = Box::pin(s.acquire_many(2));
        assert!(chan_common::poll_once(first.as_mut()).is_none());
        repoll_panics(s.acquire(), false, || s.add_permits(2));
        assert_eq!(s.available_permits(), 0);
        assert!(ready(first));
        assert_eq!(s.available_permits(), 2);
        let m = sync::Mutex::new(0);
        let g = m.try_lock().unwrap();
        repoll_panics(m.lock(), false, || drop(g));
        assert!(m.try_lock().is_ok());
        let (tx, mut rx) = watch::channel(0);
        repoll_panics(rx.changed(), false, || tx.send(1).unwrap());
        assert!(ready(rx.changed()));
        let rt = weft::Runtime::new().unwrap();
        let _e = rt.enter();
        let at = Instant::now();
        repoll_panics(weft::time::sleep(Duration::from_millis(30)), true, || ());
        assert!(at.elapsed() >= Duration::from_millis(30));
    });
}

// BUG (older than session 27): `select_async` keeps the waker it registered with in its
// machine (`Machine::waker`) apart from its nodes' wakers, set before the nodes are
// registered (first round) or after they are refreshed (later polls). A clone that
// panics in between leaves them apart: after the first round's panic `registered` is set
// and `self.waker` stored with no node on any list; after a refresh's, some nodes hold
// the new waker and `self.waker` the old. The next poll with the cached waker sees
// `will_wake` and returns `Pending` without registering or refreshing, and a send then
// wakes nobody, or only the waker of the poll that panicked. (Resetting `self.waker`
// before the nodes are touched, and setting it once they all are, would fix both.)
#[test]

fn select_async_after_a_clone_panicked_mid_poll_wakes_the_waker_polled_last() {
    watchdog(10, || {
        // The first round: the machine's clone succeeds, the node's panics.
        let ((tx1, rx1), (_tx2, rx2)) = (bounded::<u8>(1), bounded::<u8>(1));
        let mut sel = Select::new_biased();
        sel.recv(&rx1);
        let (e, a, b) = (Evil::new(), Evil::new(), Evil::new());
        let w = e.waker(false);
        let mut f = pin!(sel.select_async());
        e.panic_at.store(2, SeqCst);
        assert!(panics(|| drop(poll_with(f.as_mut(), &w))));
        assert!(poll_with(f.as_mut(), &w).is_pending());
        tx1.try_send(1).unwrap();
        assert_eq!(drive(f, &w, e).recv(&rx1), Ok(1));
        // A refresh: B replaces the first node's waker, then panics.
        let mut sel = Select::new_biased();
        sel.recv(&rx1);
        sel.recv(&rx2);
        let (wa, wb) = (a.waker(false), b.waker(false));
        let mut f = pin!(sel.select_async());
        assert!(poll_with(f.as_mut(), &wa).is_pending());
        b.panic_at.store(2, SeqCst);
        assert!(panics(|| drop(poll_with(f.as_mut(), &wb))));
        assert!(poll_with(f.as_mut(), &wa).is_pending());
        let before = a.wakes();
        tx1.try_send(1).unwrap();
        wait_for("a wake of the waker polled last", 2, || a.wakes() > before);
        assert_eq!(drive(f, &wa, a).recv(&rx1), Ok(1));
    });
}

/// When a scenario's `trigger` (what the wait waits for) runs.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// After the polls below.
    After,
    /// In the first clone, at the registration.
    CloneFirst,
    /// In the `drop` of B's clone, replaced by the last poll (with A).
    DropReplaced,
    /// In the `drop` of the clone of A that a poll with A again does not use.
    DropEarly,
}

/// Polls `f` with D (its clones all differ: `will_wake` never holds) 20 times, then
/// with A, B and A (pending throughout), `trigger` running as `mode` says: the waker
/// polled last must be woken and `f` complete, and no clone may be left once the guard
/// returned goes (a socket keeps the waker stored by a wait that then found it ready).
fn scenario_kept<F: Future>(
    mode: Mode,
    f: F,
    trigger: impl FnOnce() + Send + 'static,
) -> (F::Output, NoneLeft) {
    let (d, a, b) = (Evil::new(), Evil::new(), Evil::new());
    let (wd, wa, wb) = (d.waker(true), a.waker(false), b.waker(false));
    let mut f = Box::pin(f);
    let out = if let Mode::CloneFirst = mode {
        d.on_clone(trigger);
        drive(f.as_mut(), &wd, d)
    } else {
        for w in std::iter::repeat_n(&wd, 20).chain([&wa, &wb]) {
            assert!(poll_with(f.as_mut(), w).is_pending(), "{mode:?}");
        }
        if !matches!(mode, Mode::DropReplaced) {
            assert!(poll_with(f.as_mut(), &wa).is_pending(), "{mode:?}");
        }
        match mode {
            Mode::After => trigger(),
            Mode::DropEarly => a.on_drop(trigger),
            _ => b.on_drop(trigger),
        }
        match poll_with(f.as_mut(), &wa) {
            Poll::Ready(v) => v,
            Poll::Pending => {
                // A wait that cloned (so dropped) nothing: the hook runs now.
                Evil::run(&a.on_drop);
                Evil::run(&b.on_drop);
                drive(f.as_mut(), &wa, a)
            }
        }
    };
    drop((f, wd, wa, wb));
    (out, NoneLeft(vec![d, a, b]))
}

fn scenario<F: Future>(mode: Mode, f: F, trigger: impl FnOnce() + Send + 'static) -> F::Output {
    scenario_kept(mode, f, trigger).0
}

#[test]
fn wakers_that_use_their_object_never_will_wake_or_move() {
    use Mode::*;
    watchdog(12, || {
        for mode in [After, CloneFirst, DropReplaced, DropEarly] {
            for cap in [Some(0), Some(1), None] {
                // Receive: a send (from a thread: a rendezvous send waits), the last
                // sender dropped.
                let (tx, rx) = make::<u32>(cap);
                let (tx2, bg) = (tx.clone(), Bg::new());
                let got = scenario(mode, rx.recv(), bg.start(move || tx2.send_blocking(1)));
                assert_eq!((got, bg.join()), (Ok(1), Ok(())), "{mode:?} {cap:?}");
                assert!(scenario(mode, rx.recv(), move || drop(tx)).is_err());
                // Send (on a full channel): a receive, the receiver closed.
                let (tx, rx) = make::<u32>(cap.or(Some(0)));
                if cap == Some(1) {
                    tx.try_send(0).unwrap();
                }
                let (rx, bg) = (Arc::new(rx), Bg::new());
                let rx2 = rx.clone();
                scenario(mode, tx.send(1), bg.start(move || rx2.recv_blocking())).unwrap();
                assert_eq!(bg.join().unwrap() + rx.try_recv().unwrap_or(0), 1);
            }
            let (tx, rx) = bounded::<u32>(1);
            tx.try_send(0).unwrap();
            let got = scenario(mode, tx.send(2), move || assert!(rx.close()));
            assert_eq!(got.unwrap_err().0, 2);
            let ((tx, rx), (_tx2, rx2)) = (bounded::<u32>(1), bounded::<u32>(1));
            let mut sel = Select::new();
            sel.recv(&rx);
            sel.recv(&rx2);
            let f = async { sel.select_async().await.recv(&rx) };
            assert_eq!(scenario(mode, f, move || tx.try_send(2).unwrap()), Ok(2));
            // Permits and locks: released, or a queued acquire ahead dropped (what it
            // absorbed goes on).
            let s: &'static Semaphore = Box::leak(Box::new(Semaphore::new(0)));
            drop(scenario(mode, s.acquire(), || s.add_permits(1)).unwrap());
            s.forget_permits(1);
            let mut ahead = Box::pin(s.acquire_many(3));
            assert!(chan_common::poll_once(ahead.as_mut()).is_none());
            s.add_permits(1);
            drop(scenario(mode, s.acquire(), move || drop(ahead)).unwrap());
            assert_eq!(s.available_permits(), 1);
            let m: &'static sync::Mutex<u8> = Box::leak(Box::new(sync::Mutex::new(0)));
            let g = m.try_lock().unwrap();
            *scenario(mode, m.lock(), move || drop(g)) += 1;
            let l: &'static sync::RwLock<u8> = Box::leak(Box::new(sync::RwLock::new(0)));
            let g = l.try_write().unwrap();
            assert_eq!(*scenario(mode, l.read(), move || drop(g)), 0);
            // Notifications, arrivals, one-shot and watched values.
            let n = Arc::new(Notify::new());
            let n2 = n.clone();
            scenario(mode, n.notified(), move || n2.notify_one());
            assert!(!ready(n.notified()), "one permit, two completions");
            let n2 = n.clone();
            scenario(mode, n.notified(), move || n2.notify_waiters());
            let b = Arc::new(sync::Barrier::new(2));
            let (b2, bg) = (b.clone(), Bg::new());
            let arrive = bg.start(move || b2.wait_blocking().is_leader());
            assert!(scenario(mode, b.wait(), arrive).is_leader() ^ bg.join());
            let wg = sync::WaitGroup::new();
            wg.add(1);
            let wg2 = wg.clone();
            scenario(mode, wg.wait(), move || wg2.done());
            let (tx, mut rx) = oneshot::channel::<u8>();
            assert_eq!(scenario(mode, &mut rx, move || tx.send(1).unwrap()), Ok(1));
            let (tx, mut rx) = oneshot::channel::<u8>();
            assert!(scenario(mode, &mut rx, move || drop(tx)).is_err());
            let (mut tx, rx) = oneshot::channel::<u8>();
            scenario(mode, tx.closed(), move || drop(rx));
            let (tx, mut rx) = watch::channel(0);
            scenario(mode, rx.changed(), move || tx.send(1).unwrap()).unwrap();
            let (tx, mut rx) = sync::broadcast::channel::<u8>(2);
            let send = move || assert!(tx.send(3).is_ok());
            assert_eq!(scenario(mode, rx.recv(), send), Ok(3));
            // Timers, sockets and a nursery (its owner's waker).
            let rt = weft::Runtime::new().unwrap();
            let (mut a, b) = common::net::pair(&rt);
            let b = Arc::new(b);
            let _e = rt.enter();
            scenario(mode, weft::time::sleep(Duration::from_millis(20)), || ());
            let b2 = b.clone();
            let (r, kept) = scenario_kept(mode, a.readable(), move || drop(b2.try_write(b"x")));
            r.unwrap();
            let mut buf = [0u8; 4];
            assert_eq!(a.try_read(&mut buf).unwrap(), 1);
            let read = weft::io::AsyncReadExt::read(&mut a, &mut buf);
            let b2 = b.clone();
            let (n, kept2) = scenario_kept(mode, read, move || drop(b2.try_write(b"yz")));
            assert_eq!(n.unwrap(), 2);
            drop((a, b));
            drop((kept, kept2));
            let (tx, rx) = bounded::<u8>(0);
            let nursery = weft::nursery(move |n| async move {
                n.spawn(async move { rx.recv().await.map(drop).map_err(drop) });
                Ok::<_, ()>(())
            });
            let bg = Bg::new();
            scenario(mode, nursery, bg.start(move || tx.send_blocking(1))).unwrap();
            bg.join().unwrap();
        }
    });
}

#[test]
fn sends_racing_polls_with_alternating_wakers() {
    watchdog(12, || {
        for cap in [Some(0), Some(1), None] {
            const N: u32 = 100;
            let (tx, rx) = make::<u32>(cap);
            let sender =
                std::thread::spawn(move || (0..N).for_each(|v| tx.send_blocking(v).unwrap()));
            let (a, b) = (Evil::new(), Evil::new());
            let (wa, wb) = (a.waker(true), b.waker(true));
            let mut polls = 0u32;
            for want in 0..N {
                let mut f = Box::pin(rx.recv());
                let got = loop {
                    polls += 1;
                    let (w, e) = if polls.is_multiple_of(2) {
                        (&wa, &a)
                    } else {
                        (&wb, &b)
                    };
                    let before = e.wakes();
                    match poll_with(f.as_mut(), w) {
                        Poll::Ready(v) => break v,
                        // Now and then the receive is given up and made afresh.
                        Poll::Pending if polls.is_multiple_of(7) => f = Box::pin(rx.recv()),
                        Poll::Pending => wait_for("a wake", 2, || e.wakes() > before),
                    }
                };
                assert_eq!(got, Ok(want), "{cap:?}");
            }
            sender.join().unwrap();
            assert!(rx.try_recv().is_err());
            drop((wa, wb));
            drop(NoneLeft(vec![a, b]));
        }
    });
}

// ---- in a child process: the alarm thread, and the diagnostics ----

const CHILD: &str = "WEFT_REVIEW_S27_WAKER_CHILD";

#[test]
fn child_process_entry() {
    match std::env::var(CHILD).as_deref() {
        Ok("alarm_drop") => child_alarm_drop(),
        Ok("silent") => child_silent(),
        Ok(other) => panic!("unknown case {other}"),
        Err(_) => return,
    }
    println!("CHILD done=ok");
}

fn run_child(case: &str) -> common::child::Output {
    let vars = [(CHILD, case), ("WEFT_DEBUG_LOCKS", "1")];
    let out = common::child::run("child_process_entry", &vars, Duration::from_secs(10));
    out.assert_finished();
    out
}

// BUG (older than session 27, which made the alarm's slot drop its old waker after the
// slot's lock): a sleep that outlived its runtime waits on the process's alarm thread;
// reset to a new deadline it files a new entry, and the alarm thread forgets the old
// one, whose slot still holds the waker of the poll before. That waker is dropped in the
// `retain` over the alarm list, under the list's lock. A waker whose `drop` uses a timer
// off any runtime (which files an entry: the same lock) deadlocks the alarm thread, and
// with it every later off-runtime timer. (Taking the forgotten slots out of the list and
// dropping them after the lock would fix it.)
fn child_alarm_drop() {
    let rt = weft::Runtime::new().unwrap();
    let mut s = {
        let _e = rt.enter();
        Box::pin(weft::time::sleep(Duration::from_secs(60)))
    };
    drop(rt);
    let e = Evil::new();
    let w = e.waker(false);
    assert!(poll_with(s.as_mut(), &w).is_pending());
    let step = Arc::new(AtomicUsize::new(0));
    let st = step.clone();
    e.on_drop(move || {
        // Since session 43 the reset moves the waker to the alarm's new entry (a
        // waiter elsewhere must still be woken), and the poll below drops it on this
        // thread as it swaps it out; the alarm thread drops no waker on this path any
        // more. Wherever it drops, its timer must work.
        st.store(1, SeqCst);
        let rx = weft::chan::after(Duration::from_millis(1));
        assert!(poll_with(pin!(rx.recv()), Waker::noop()).is_pending());
        st.store(2, SeqCst);
    });
    s.as_mut().reset(Instant::now() + Duration::from_secs(61));
    assert!(poll_with(s.as_mut(), Waker::noop()).is_pending());
    wait_for("the waker's drop", 3, || step.load(SeqCst) >= 1);
    wait_for("its timer (a deadlock?)", 2, || step.load(SeqCst) == 2);
    drop(w);
}

#[test]

fn a_waker_dropped_by_the_alarm_thread_may_use_timers() {
    run_child("alarm_drop");
}

/// Correct programs: `watch::Ref`s held across plain code only (sums, a fork-join of
/// plain closures) on fibers, tasks and a thread, with channel traffic between the
/// borrows (fibers parking, moving between workers); `send_modify` closures that
/// compute, one that panics (caught); `changed` waiters woken after each.
fn child_silent() {
    let rt = rt2();
    let (wtx, wrx) = watch::channel((0..64u64).collect::<Vec<_>>());
    let (tx, rx) = bounded::<u64>(1);
    fn half(v: &[u64]) -> u64 {
        v.iter().sum()
    }
    let sum = |v: &[u64]| {
        let (a, b) = weft::join(|| half(&v[..32]), || half(&v[32..]));
        a + b
    };
    let mut hs = Vec::new();
    for _ in 0..3 {
        let (w1, t1, mut w2, t2) = (wrx.clone(), tx.clone(), wrx.clone(), tx.clone());
        hs.push(fiber_on(&rt, move || {
            for k in 0..100 {
                let s = sum(&w1.borrow());
                t1.send_blocking(s + k).unwrap();
            }
        }));
        hs.push(rt.spawn(async move {
            for k in 0..100 {
                let s = sum(&w2.borrow_and_update());
                t2.send(s + k).await.unwrap();
            }
        }));
    }
    let mut w2 = wrx.clone();
    let watcher = fiber_on(&rt, move || {
        let mut seen = 0;
        while w2.changed_blocking().is_ok() {
            seen += sum(&w2.borrow_and_update()).min(1);
        }
        seen
    });
    let tx2 = tx.clone();
    let thread = std::thread::spawn(move || {
        for k in 0..100 {
            let s = sum(&wrx.borrow());
            tx2.send_blocking(s + k).unwrap();
        }
    });
    drop(tx);
    let count = std::thread::spawn(move || rx.iter().count());
    for k in 0..50u64 {
        wtx.send_modify(|v| v[0] = v[1..].iter().sum::<u64>() + k);
        if k % 10 == 0 {
            assert!(panics(|| wtx.send_modify(|_| panic!("in send_modify"))));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    hs.into_iter().for_each(|h| join_within(h, 10).unwrap());
    thread.join().unwrap();
    drop(wtx);
    assert!(join_within(watcher, 10).unwrap() >= 1);
    assert_eq!(count.join().unwrap(), 700);
}

#[test]
fn watch_refs_over_plain_code_report_no_flush_under_lock() {
    let out = run_child("silent");
    assert!(!out.stderr.contains("UNDER-LOCK"), "{}", out.context());
}
