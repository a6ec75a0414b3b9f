//! Helpers shared by the `chan_*` integration tests: a watchdog that turns a hang into a
//! failure, a small deterministic random generator, the channel flavours, drop-counting
//! values, and ways to start work in each context (thread, fiber, async task).
#![allow(dead_code)]

// One file for both helper modules; a test that uses both loads it twice.
#[allow(clippy::duplicate_mod)]
#[path = "../common/spawn.rs"]
mod spawn;
#[allow(unused_imports)] // not every test uses them
pub use spawn::{fiber_on, join_within};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::time::{Duration, Instant};

use weft::chan::{self, Receiver, Sender};
use weft::Runtime;

/// Runs `f` on a helper thread; panics with "hang" if it has not finished within
/// `secs` seconds (the helper is left behind), and re-raises its panic.
pub fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::Builder::new()
        .name("chan-test-body".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .unwrap();
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => {
            thread.join().unwrap();
            v
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: the test body did not finish within {secs} s")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!(),
        },
    }
}

/// Polls `cond` every millisecond until it holds; panics with "hang" after `secs`.
pub fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "hang: waited too long for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// xorshift64*: deterministic per seed, good enough to pick drop points.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The four flavours: rendezvous, bounded(1), bounded(16), unbounded.
pub const FLAVOURS: [Option<usize>; 4] = [Some(0), Some(1), Some(16), None];

/// A seed for [`Rng`] from the clock (printed by the tests that use it on failure).
pub fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// `n` iterations, or a twentieth of them (at least 2) when `small` (under valgrind).
pub fn scale_if(small: bool, n: usize) -> usize {
    if small {
        (n / 20).max(2)
    } else {
        n
    }
}

pub fn make<T>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    match cap {
        Some(c) => chan::bounded(c),
        None => chan::unbounded(),
    }
}

/// A runtime with two workers.
pub fn rt2() -> Runtime {
    weft::Builder::new().worker_threads(2).build().unwrap()
}

/// Per-id drop counts for [`Tracked`] values.
#[derive(Clone)]
pub struct Drops(pub Arc<Vec<AtomicUsize>>);

impl Drops {
    pub fn new(n: usize) -> Drops {
        Drops(Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect()))
    }
    pub fn get(&self, id: usize) -> usize {
        self.0[id].load(SeqCst)
    }
    pub fn total(&self) -> usize {
        self.0.iter().map(|c| c.load(SeqCst)).sum()
    }
    /// Counts a drop of value `id` (`what` names it in the failure): fails if it was
    /// dropped before.
    pub fn record(&self, id: usize, what: impl std::fmt::Display) {
        let before = self.0[id].fetch_add(1, SeqCst);
        assert_eq!(before, 0, "{what} dropped twice");
    }
    pub fn make(&self, id: usize) -> Tracked {
        Tracked {
            id,
            drops: self.clone(),
        }
    }
}

/// A value that counts its drops per id (so a double drop or a leak is seen).
pub struct Tracked {
    pub id: usize,
    drops: Drops,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.0[self.id].fetch_add(1, SeqCst);
    }
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tracked({})", self.id)
    }
}

/// Polls `fut` until it completes or `polls` polls have returned `Pending` (waking
/// itself each time, so it is polled again soon); `None` then, and the future is
/// dropped there: the tokio `select!` pattern, with the drop at a chosen point.
pub struct DropAfter<F> {
    fut: Pin<Box<F>>,
    polls: u64,
}

impl<F: Future> Future for DropAfter<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Poll::Ready(v) = self.fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        if self.polls == 0 {
            return Poll::Ready(None);
        }
        self.polls -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// See [`DropAfter`].
pub fn drop_after<F: Future>(polls: u64, fut: F) -> DropAfter<F> {
    DropAfter {
        fut: Box::pin(fut),
        polls,
    }
}

/// Polls `fut` once with a no-op waker: its output if ready at once.
pub fn poll_once<F: Future>(fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

pub fn is_send<T: Send>(_: &T) {}
pub fn is_send_sync<T: Send + Sync>(_: &T) {}

/// A waker that panics in `wake` and `wake_by_ref` while `armed` holds `true`.
pub fn panicking_waker(armed: Arc<AtomicBool>) -> std::task::Waker {
    use std::task::{RawWaker, RawWakerVTable, Waker};
    unsafe fn clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` is from `Arc::into_raw`.
        unsafe { Arc::increment_strong_count(p as *const AtomicBool) };
        RawWaker::new(p, &VT)
    }
    unsafe fn wake(p: *const ()) {
        // SAFETY: as above; the handle is consumed.
        let a = unsafe { Arc::from_raw(p as *const AtomicBool) };
        if a.load(SeqCst) {
            panic!("waker panics");
        }
    }
    unsafe fn wake_by_ref(p: *const ()) {
        // SAFETY: as above.
        if unsafe { &*(p as *const AtomicBool) }.load(SeqCst) {
            panic!("waker panics");
        }
    }
    unsafe fn drop_w(p: *const ()) {
        // SAFETY: as above.
        drop(unsafe { Arc::from_raw(p as *const AtomicBool) });
    }
    static VT: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop_w);
    // SAFETY: the vtable keeps the Arc's count.
    unsafe { Waker::from_raw(RawWaker::new(Arc::into_raw(armed).cast(), &VT)) }
}

/// A value tagged with its sender and sequence number.
pub type Msg = (usize, usize);

/// Every value of `senders x per` exactly once across `logs`.
pub fn check_exactly_once(logs: &[Vec<Msg>], senders: usize, per: usize) {
    let mut seen = vec![0u32; senders * per];
    for &(s, n) in logs.iter().flatten() {
        seen[s * per + n] += 1;
    }
    let bad: Vec<_> = seen
        .iter()
        .enumerate()
        .filter(|(_, &c)| c != 1)
        .map(|(i, &c)| ((i / per, i % per), c))
        .take(10)
        .collect();
    assert!(
        bad.is_empty(),
        "values lost or duplicated ((sender, seq), count): {bad:?}"
    );
}

/// A waker that counts its wakes.
pub struct CountWake(pub AtomicUsize);

impl Wake for CountWake {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A [`CountWake`] and a waker of it.
pub fn count_waker() -> (Arc<CountWake>, Waker) {
    let c = Arc::new(CountWake(AtomicUsize::new(0)));
    (c.clone(), Waker::from(c))
}

/// Each operation in `ready` won about `1 / ready.len()` of the `shares` (within 0.04),
/// and every other operation none.
#[allow(dead_code)]
pub fn assert_fair(shares: &[f64], ready: &[usize], what: &str) {
    let want = 1.0 / ready.len() as f64;
    for (i, &s) in shares.iter().enumerate() {
        if ready.contains(&i) {
            assert!(
                (s - want).abs() < 0.04,
                "{what}: operation {i} won {s:.3}, want {want:.3} ({shares:?})"
            );
        } else {
            assert_eq!(s, 0.0, "{what}: operation {i} was not ready ({shares:?})");
        }
    }
}

/// Declares a zero-sized type `$name` whose `new()` counts in static `$made` and whose
/// drop counts in static `$dropped` (a test compares the two: nothing leaked, nothing
/// dropped twice).
#[macro_export]
macro_rules! counted_zst {
    ($name:ident, $made:ident, $dropped:ident) => {
        static $made: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        static $dropped: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        struct $name;
        impl $name {
            fn new() -> $name {
                $made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                $name
            }
        }
        impl Drop for $name {
            fn drop(&mut self) {
                $dropped.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    };
}

/// A waker with hooks: counts its wakes, and runs `on_clone` / `on_drop` (while
/// `armed`) when a handle of it is cloned or dropped.
pub struct Hooks {
    wakes: AtomicUsize,
    armed: AtomicBool,
    on_clone: Box<dyn Fn() + Send + Sync>,
    on_drop: Box<dyn Fn() + Send + Sync>,
}

impl Hooks {
    pub fn new(
        on_clone: impl Fn() + Send + Sync + 'static,
        on_drop: impl Fn() + Send + Sync + 'static,
    ) -> Arc<Hooks> {
        Arc::new(Hooks {
            wakes: AtomicUsize::new(0),
            armed: AtomicBool::new(false),
            on_clone: Box::new(on_clone),
            on_drop: Box::new(on_drop),
        })
    }
    pub fn counting() -> Arc<Hooks> {
        Hooks::new(|| {}, || {})
    }
    pub fn wakes(&self) -> usize {
        self.wakes.load(SeqCst)
    }
    pub fn arm(&self, on: bool) {
        self.armed.store(on, SeqCst);
    }
}

pub fn hook_waker(h: &Arc<Hooks>) -> Waker {
    unsafe fn clone(p: *const ()) -> RawWaker {
        // SAFETY: `p` came from `Arc::into_raw` of an `Arc<Hooks>`.
        let h = unsafe { &*(p as *const Hooks) };
        if h.armed.load(SeqCst) {
            (h.on_clone)();
        }
        // SAFETY: as above.
        unsafe { Arc::increment_strong_count(p as *const Hooks) };
        RawWaker::new(p, &VTABLE)
    }
    unsafe fn wake(p: *const ()) {
        // SAFETY: as above.
        unsafe {
            wake_by_ref(p);
            drop(p);
        }
    }
    unsafe fn wake_by_ref(p: *const ()) {
        // SAFETY: as above.
        let h = unsafe { &*(p as *const Hooks) };
        h.wakes.fetch_add(1, SeqCst);
    }
    unsafe fn drop(p: *const ()) {
        // SAFETY: as above.
        let h = unsafe { &*(p as *const Hooks) };
        if h.armed.load(SeqCst) {
            (h.on_drop)();
        }
        // SAFETY: as above; this handle's count.
        unsafe { Arc::decrement_strong_count(p as *const Hooks) };
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, wake_by_ref, drop);
    let p = Arc::into_raw(h.clone()) as *const ();
    // SAFETY: the vtable's functions follow the `RawWaker` contract for this pointer.
    unsafe { Waker::from_raw(RawWaker::new(p, &VTABLE)) }
}

/// Polls `fut` once with the waker `w`.
pub fn poll_with<F: Future + ?Sized>(fut: Pin<&mut F>, w: &Waker) -> Poll<F::Output> {
    fut.poll(&mut Context::from_waker(w))
}
