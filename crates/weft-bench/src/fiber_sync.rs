//! Future-based synchronisation for the weft side of the `fiber` suite, used
//! from fibers through [`weft::wait`] (which suspends the calling fiber, not
//! its worker thread, while the future is pending). weft has no fiber
//! channel yet; these are the small ones the benchmark needs.
//!
//! * [`slot`]: a one-slot channel. `send` waits until the slot is empty, then
//!   fills it; `recv` waits until it is full, then empties it.
//! * [`Gate`]: every `wait` stays pending until [`Gate::open`].

use std::cell::UnsafeCell;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::harness::lock;

/// Creates a one-slot channel: `send` waits until the slot is empty, then
/// fills it; `recv` waits until it is full, then empties it.
///
/// Lock-free: one state word holds "full" and which side waits. A wait costs
/// one compare-and-swap to publish the waiting bit, a hand-over one RMW on each
/// side, and a side's waker is stored once and kept while it stays the same
/// (a fiber's waker is the same on every wait). Each half is `Send` but not
/// `Sync`, so there is one sender and one receiver at a time.
pub fn slot<T: Send>() -> (SlotSender<T>, SlotReceiver<T>) {
    let inner = Arc::new(SlotInner {
        state: AtomicU8::new(0),
        value: UnsafeCell::new(MaybeUninit::uninit()),
        wakers: [Side::new(), Side::new()],
    });
    (
        SlotSender {
            inner: inner.clone(),
            _not_sync: PhantomData,
        },
        SlotReceiver {
            inner,
            _not_sync: PhantomData,
        },
    )
}

/// The slot holds a value.
const FULL: u8 = 1;
/// The receiver (`WAITING << RX`) or the sender (`WAITING << TX`) waits and has
/// stored its waker.
const WAITING: u8 = 2;
const RX: usize = 0;
const TX: usize = 1;

fn waiting(side: usize) -> u8 {
    WAITING << side
}

/// One side's waker, and whether the other side may be reading it.
struct Side {
    /// Written only by the side itself, and only while the other side cannot
    /// be reading it: its waiting bit is clear and `waking` is false.
    waker: UnsafeCell<Option<Waker>>,
    /// Set by the other side around each hand-over (before the RMW in which it
    /// may see the waiting bit, cleared after the wake): while it is set, the
    /// waker may be in use.
    waking: AtomicBool,
}

impl Side {
    fn new() -> Side {
        Side {
            waker: UnsafeCell::new(None),
            waking: AtomicBool::new(false),
        }
    }
}

struct SlotInner<T> {
    state: AtomicU8,
    /// Initialised exactly while `FULL` is set: written by the sender while it
    /// is clear, read out by the receiver while it is set.
    value: UnsafeCell<MaybeUninit<T>>,
    wakers: [Side; 2],
}

// SAFETY: the value moves from the sender's thread to the receiver's (`T: Send`);
// each `UnsafeCell` has one writer at a time, per the protocol at its field.
unsafe impl<T: Send> Sync for SlotInner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for SlotInner<T> {}

impl<T> Drop for SlotInner<T> {
    fn drop(&mut self) {
        if *self.state.get_mut() & FULL != 0 {
            // SAFETY: FULL says the value is initialised, and nobody else is left.
            unsafe { self.value.get_mut().assume_init_drop() };
        }
    }
}

impl<T> SlotInner<T> {
    /// The other side's hand-over: `op` on the state word (which may see our
    /// waiting bit), then a wake of `side`'s waker if it did.
    fn hand_over(&self, side: usize, op: impl FnOnce(&AtomicU8) -> u8) {
        let w = &self.wakers[side];
        // Relaxed: the AcqRel RMW below publishes it to whoever acquires after it.
        w.waking.store(true, Relaxed);
        let prev = op(&self.state);
        if prev & waiting(side) != 0 {
            // SAFETY: the waiting bit says the side stored its waker, and it
            // does not write it again while `waking` is set.
            if let Some(waker) = unsafe { &*w.waker.get() } {
                waker.wake_by_ref();
            }
        }
        w.waking.store(false, Release);
    }

    /// Makes `side` wait: keeps or stores its waker, then publishes its waiting
    /// bit unless `ready(state)` turned true meanwhile. Returns `Pending` when
    /// the side now waits, `Ready` when it should look again.
    #[inline]
    fn register(&self, side: usize, cx: &Context<'_>, ready: impl Fn(u8) -> bool) -> Poll<()> {
        let s = self.state.load(Acquire);
        // SAFETY: only this side writes its waker; reading it alongside the
        // other side's read is fine.
        let same = unsafe { &*self.wakers[side].waker.get() }
            .as_ref()
            .is_some_and(|old| old.will_wake(cx.waker()));
        if !same {
            return self.register_new_waker(side, cx, s, ready);
        }
        self.publish_waiting(side, s, ready)
    }

    /// The tail of [`register`](Self::register) once the stored waker is right.
    #[inline]
    fn publish_waiting(&self, side: usize, s: u8, ready: impl Fn(u8) -> bool) -> Poll<()> {
        let bit = waiting(side);
        if ready(s) {
            return Poll::Ready(());
        }
        if s & bit != 0 {
            return Poll::Pending;
        }
        match self.state.compare_exchange(s, s | bit, AcqRel, Acquire) {
            Ok(_) => Poll::Pending,
            // The other side moved meanwhile: look again.
            Err(_) => Poll::Ready(()),
        }
    }

    /// [`register`](Self::register) with a waker that differs from the stored
    /// one (the first wait, or a move to another task or thread).
    #[cold]
    #[inline(never)]
    fn register_new_waker(
        &self,
        side: usize,
        cx: &Context<'_>,
        mut s: u8,
        ready: impl Fn(u8) -> bool,
    ) -> Poll<()> {
        let w = &self.wakers[side];
        let bit = waiting(side);
        if s & bit != 0 {
            // Take the bit back first, so the other side stops seeing a waker we
            // are about to replace.
            match self.state.compare_exchange(s, s & !bit, AcqRel, Acquire) {
                Ok(_) => s &= !bit,
                Err(_) => return Poll::Ready(()),
            }
        }
        // A hand-over that saw the bit before may still be using the waker.
        let mut spins = 0u32;
        while w.waking.load(Acquire) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // SAFETY: the bit is clear and no hand-over is in progress, so the other
        // side is not reading the waker, and will not before it sees the bit set
        // again (after this write, by the release in `publish_waiting`).
        unsafe { *w.waker.get() = Some(cx.waker().clone()) };
        self.publish_waiting(side, s, ready)
    }
}

/// The sending half of a [`slot`].
pub struct SlotSender<T> {
    inner: Arc<SlotInner<T>>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// The receiving half of a [`slot`].
pub struct SlotReceiver<T> {
    inner: Arc<SlotInner<T>>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

impl<T: Send> SlotSender<T> {
    /// Waits until the slot is empty, then puts `value` in it and wakes a
    /// waiting receiver.
    pub fn send(&self, value: T) {
        let inner = &*self.inner;
        let mut value = Some(value);
        weft::wait(poll_fn(|cx| loop {
            if inner.state.load(Acquire) & FULL == 0 {
                let v = value.take().expect("sent twice");
                // SAFETY: FULL is clear, so the receiver has read out the last
                // value (its clearing RMW released that) and will not look at
                // the cell until we set FULL.
                unsafe { (*inner.value.get()).write(v) };
                // FULL is clear and so is TX (only set while FULL is): an add
                // sets FULL and returns the old word in one instruction.
                inner.hand_over(RX, |st| st.fetch_add(FULL, AcqRel));
                return Poll::Ready(());
            }
            if inner.register(TX, cx, |st| st & FULL == 0).is_pending() {
                return Poll::Pending;
            }
        }));
    }
}

impl<T: Send> SlotReceiver<T> {
    /// Waits until the slot is full, then takes the value out and wakes a
    /// waiting sender.
    pub fn recv(&self) -> T {
        let inner = &*self.inner;
        weft::wait(poll_fn(|cx| loop {
            if inner.state.load(Acquire) & FULL != 0 {
                // SAFETY: FULL is set, so the sender wrote the value (its RMW
                // released it) and will not touch the cell until we clear FULL.
                let v = unsafe { (*inner.value.get()).assume_init_read() };
                // Clear FULL and our own waiting bit, and take the sender's:
                // nothing else lives in the word, so that is a swap to 0.
                inner.hand_over(TX, |st| st.swap(0, AcqRel));
                return Poll::Ready(v);
            }
            if inner.register(RX, cx, |st| st & FULL != 0).is_pending() {
                return Poll::Pending;
            }
        }))
    }
}

/// A gate that keeps every waiter pending until it is opened.
pub struct Gate {
    state: Mutex<GateState>,
    /// Waiters that have registered (so are pending, or about to suspend).
    waiting: AtomicUsize,
}

struct GateState {
    open: bool,
    wakers: Vec<Waker>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate {
            state: Mutex::new(GateState {
                open: false,
                wakers: Vec::new(),
            }),
            waiting: AtomicUsize::new(0),
        }
    }

    /// Waits until the gate is open.
    pub fn wait(&self) {
        // Our place in `wakers`, once registered; a later poll with another waker
        // replaces ours (only the latest poll's waker may be the one to wake).
        let mut slot: Option<usize> = None;
        weft::wait(poll_fn(|cx| {
            let mut s = lock(&self.state);
            if s.open {
                return Poll::Ready(());
            }
            match slot {
                Some(i) if s.wakers[i].will_wake(cx.waker()) => {}
                Some(i) => s.wakers[i] = cx.waker().clone(),
                None => {
                    slot = Some(s.wakers.len());
                    s.wakers.push(cx.waker().clone());
                    self.waiting.fetch_add(1, AcqRel);
                }
            }
            Poll::Pending
        }));
    }

    /// How many waiters have registered so far.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Acquire)
    }

    /// Opens the gate and wakes every waiter.
    pub fn open(&self) {
        let wakers = {
            let mut s = lock(&self.state);
            s.open = true;
            std::mem::take(&mut s.wakers)
        };
        for w in wakers {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::thread;

    /// Plain threads: every wait parks the thread, so each hand-over races a
    /// real sleep on the other core.
    #[test]
    fn slot_between_threads_keeps_order() {
        const N: u64 = 20_000;
        let (tx, rx) = slot::<u64>();
        let producer = thread::spawn(move || (0..N).for_each(|i| tx.send(i)));
        for i in 0..N {
            assert_eq!(rx.recv(), i);
        }
        producer.join().unwrap();
    }

    /// The receiver moves to another thread every few values, so its waker
    /// changes while the sender may be handing over to the old one.
    #[test]
    fn slot_receiver_changing_waker_misses_nothing() {
        const N: u64 = 4_000;
        let (tx, mut rx) = slot::<u64>();
        let producer = thread::spawn(move || (0..N).for_each(|i| tx.send(i)));
        let mut next = 0;
        while next < N {
            rx = thread::spawn(move || {
                for _ in 0..7.min(N - next) {
                    assert_eq!(rx.recv(), next);
                    next += 1;
                }
                (rx, next)
            })
            .join()
            .map(|(rx, n)| {
                next = n;
                rx
            })
            .unwrap();
        }
        producer.join().unwrap();
    }

    /// Likewise for the sender, whose waker is used when the slot is full.
    #[test]
    fn slot_sender_changing_waker_misses_nothing() {
        const N: u64 = 4_000;
        let (mut tx, rx) = slot::<u64>();
        let consumer = thread::spawn(move || (0..N).map(|_| rx.recv()).collect::<Vec<_>>());
        let mut next = 0;
        while next < N {
            let end = (next + 7).min(N);
            tx = thread::spawn(move || {
                (next..end).for_each(|i| tx.send(i));
                tx
            })
            .join()
            .unwrap();
            next = end;
        }
        assert_eq!(consumer.join().unwrap(), (0..N).collect::<Vec<_>>());
    }

    /// Fibers on two workers, as in `ping_pong_2w`, with a round trip checked.
    #[test]
    fn slot_ping_pong_between_fibers_on_two_workers() {
        const N: u64 = 20_000;
        let rt = weft::Builder::new().worker_threads(2).build().unwrap();
        let (ab_tx, ab_rx) = slot::<u64>();
        let (ba_tx, ba_rx) = slot::<u64>();
        // Spawned inside `block_on`, so the fibers go to this test's runtime.
        rt.block_on(async move {
            let pong =
                weft::fiber::spawn(move || (0..N).for_each(|_| ba_tx.send(ab_rx.recv() + 1)));
            let ping = weft::fiber::spawn(move || {
                for i in 0..N {
                    ab_tx.send(i);
                    assert_eq!(ba_rx.recv(), i + 1);
                }
            });
            ping.join().unwrap();
            pong.join().unwrap();
        });
    }

    /// A value left in the slot is dropped with it, once.
    #[test]
    fn slot_drops_an_unreceived_value() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct D;
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Relaxed);
            }
        }
        let (tx, rx) = slot::<D>();
        tx.send(D);
        drop(rx.recv());
        assert_eq!(DROPS.load(Relaxed), 1);
        tx.send(D);
        drop((tx, rx));
        assert_eq!(DROPS.load(Relaxed), 2);
    }
}
