//! A lock-free one-slot channel for one sender and one receiver.
//!
//! One state word holds whether the slot is full and which side waits. The sender's
//! hand-over is one `fetch_add` (setting "full"), the receiver's one `swap` (emptying
//! the word), and a wait one compare-and-swap that publishes the waiting bit. A side
//! stores its waker once and keeps it while it stays the same (a fiber's waker is the
//! same on every wait); a `waking` flag tells it when the other side may still be
//! reading the stored waker, so that a new one is never written under a reader.
//!
//! ```
//! use std::task::{Context, Poll, Waker};
//! let (tx, rx) = weft_bench_sync::slot::slot::<u32>();
//! let mut cx = Context::from_waker(Waker::noop());
//! assert!(rx.poll_recv(&mut cx).is_pending());
//! let mut v = Some(7);
//! assert!(tx.poll_send(&mut cx, &mut v).is_ready());
//! assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(7));
//! ```

use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::task::{Context, Poll, Waker};

use crate::sync::{backoff, Arc, AtomicBool, AtomicU8, UnsafeCell};

/// The slot holds a value.
const FULL: u8 = 1;
/// The receiver (`WAITING << RX`) or the sender (`WAITING << TX`) waits and has stored
/// its waker.
const WAITING: u8 = 2;
const RX: usize = 0;
const TX: usize = 1;

fn waiting(side: usize) -> u8 {
    WAITING << side
}

/// Creates a one-slot channel: [`Sender::poll_send`] fills an empty slot,
/// [`Receiver::poll_recv`] empties a full one; each waits (returns `Pending` with its
/// waker stored) otherwise. Each half is `Send` but not `Sync`, so there is one sender
/// and one receiver at a time.
pub fn slot<T: Send>() -> (Sender<T>, Receiver<T>) {
    let inner = Arc::new(Inner {
        state: AtomicU8::new(0),
        value: UnsafeCell::new(MaybeUninit::uninit()),
        sides: [Side::new(), Side::new()],
    });
    (
        Sender {
            inner: inner.clone(),
            _not_sync: PhantomData,
        },
        Receiver {
            inner,
            _not_sync: PhantomData,
        },
    )
}

/// One side's waker, and whether the other side may be reading it.
struct Side {
    /// Written only by the side itself, and only while the other side cannot be
    /// reading it: its waiting bit is clear and `waking` is false.
    waker: UnsafeCell<Option<Waker>>,
    /// Set by the other side around each hand-over (before the RMW in which it may see
    /// the waiting bit, cleared after the wake): while it is set, the waker may be in
    /// use.
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

struct Inner<T> {
    state: AtomicU8,
    /// Initialised exactly while `FULL` is set: written by the sender while it is
    /// clear, read out by the receiver while it is set.
    value: UnsafeCell<MaybeUninit<T>>,
    sides: [Side; 2],
}

// SAFETY: the value moves from the sender's thread to the receiver's (`T: Send`); each
// `UnsafeCell` has one writer at a time, per the protocol at its field.
unsafe impl<T: Send> Sync for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Inner<T> {}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        if self.state.load(Acquire) & FULL != 0 {
            // SAFETY: FULL says the value is initialised, and both halves are gone.
            self.value.with_mut(|v| unsafe { (*v).assume_init_drop() });
        }
    }
}

impl<T> Inner<T> {
    /// The other side's hand-over: `op` on the state word (which may see `side`'s
    /// waiting bit), then a wake of `side`'s waker if it did.
    #[inline]
    fn hand_over(&self, side: usize, op: impl FnOnce(&AtomicU8) -> u8) {
        let s = &self.sides[side];
        // Relaxed: the AcqRel RMW below publishes it to whoever acquires after it.
        s.waking.store(true, Relaxed);
        let prev = op(&self.state);
        if prev & waiting(side) != 0 {
            s.waker.with(|w| {
                // SAFETY: the waiting bit says the side stored its waker, and it does
                // not write it again while `waking` is set.
                if let Some(waker) = unsafe { &*w } {
                    waker.wake_by_ref();
                }
            });
        }
        s.waking.store(false, Release);
    }

    /// Makes `side` wait: keeps or stores its waker, then publishes its waiting bit
    /// unless `ready(state)` turned true meanwhile. Returns `Pending` when the side now
    /// waits, `Ready` when it should look again.
    #[inline]
    fn register(&self, side: usize, cx: &Context<'_>, ready: impl Fn(u8) -> bool) -> Poll<()> {
        let s = self.state.load(Acquire);
        let same = self.sides[side].waker.with(|w| {
            // SAFETY: only this side writes its waker; reading it alongside the other
            // side's read is fine.
            unsafe { &*w }
                .as_ref()
                .is_some_and(|old| old.will_wake(cx.waker()))
        });
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

    /// [`register`](Self::register) with a waker that differs from the stored one (the
    /// first wait, or a move to another task or thread).
    #[cold]
    #[inline(never)]
    fn register_new_waker(
        &self,
        side: usize,
        cx: &Context<'_>,
        mut s: u8,
        ready: impl Fn(u8) -> bool,
    ) -> Poll<()> {
        let sd = &self.sides[side];
        let bit = waiting(side);
        if s & bit != 0 {
            // Take the bit back first, so the other side stops seeing a waker we are
            // about to replace.
            match self.state.compare_exchange(s, s & !bit, AcqRel, Acquire) {
                Ok(_) => s &= !bit,
                Err(_) => return Poll::Ready(()),
            }
        }
        // A hand-over that saw the bit before may still be using the waker.
        let mut spins = 0;
        while sd.waking.load(Acquire) {
            backoff(&mut spins);
        }
        sd.waker.with_mut(|w| {
            // SAFETY: the bit is clear and no hand-over is in progress, so the other
            // side is not reading the waker, and will not before it sees the bit set
            // again (after this write, by the release in `publish_waiting`).
            unsafe { *w = Some(cx.waker().clone()) }
        });
        self.publish_waiting(side, s, ready)
    }
}

/// The sending half of a [`slot`].
pub struct Sender<T> {
    inner: Arc<Inner<T>>,
    _not_sync: PhantomData<Cell<()>>,
}

/// The receiving half of a [`slot`].
pub struct Receiver<T> {
    inner: Arc<Inner<T>>,
    _not_sync: PhantomData<Cell<()>>,
}

impl<T: Send> Sender<T> {
    /// If the slot is empty, moves the value out of `value` into it, wakes a waiting
    /// receiver and returns `Ready`; if it is full, stores `cx`'s waker to be woken
    /// when it empties and returns `Pending`, leaving `value` as it was.
    ///
    /// # Panics
    /// If `value` is `None` when the slot is empty.
    pub fn poll_send(&self, cx: &mut Context<'_>, value: &mut Option<T>) -> Poll<()> {
        let inner = &*self.inner;
        loop {
            if inner.state.load(Acquire) & FULL == 0 {
                let v = value.take().expect("poll_send without a value");
                inner.value.with_mut(|cell| {
                    // SAFETY: FULL is clear, so the receiver has read out the last
                    // value (its emptying RMW released that) and will not look at the
                    // cell until we set FULL.
                    unsafe { (*cell).write(v) };
                });
                // FULL is clear and so is the sender's waiting bit (only set while FULL
                // is): an add sets FULL and returns the old word in one instruction.
                inner.hand_over(RX, |st| st.fetch_add(FULL, AcqRel));
                return Poll::Ready(());
            }
            if inner.register(TX, cx, |st| st & FULL == 0).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<T: Send> Receiver<T> {
    /// If the slot is full, takes the value out, wakes a waiting sender and returns
    /// it; if it is empty, stores `cx`'s waker to be woken when it fills and returns
    /// `Pending`.
    pub fn poll_recv(&self, cx: &mut Context<'_>) -> Poll<T> {
        let inner = &*self.inner;
        loop {
            if inner.state.load(Acquire) & FULL != 0 {
                let v = inner.value.with(|cell| {
                    // SAFETY: FULL is set, so the sender wrote the value (its RMW
                    // released it) and will not touch the cell until we clear FULL.
                    unsafe { (*cell).assume_init_read() }
                });
                // Clear FULL and our own waiting bit, and take the sender's: nothing
                // else lives in the word, so that is a swap to 0.
                inner.hand_over(TX, |st| st.swap(0, AcqRel));
                return Poll::Ready(v);
            }
            if inner.register(RX, cx, |st| st & FULL != 0).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn cx() -> Context<'static> {
        Context::from_waker(Waker::noop())
    }

    #[test]
    fn a_full_slot_makes_the_sender_wait_and_keeps_its_value() {
        let (tx, rx) = slot::<u8>();
        let mut v = Some(1);
        assert!(tx.poll_send(&mut cx(), &mut v).is_ready());
        let mut w = Some(2);
        assert!(tx.poll_send(&mut cx(), &mut w).is_pending());
        assert_eq!(w, Some(2), "a waiting send must keep its value");
        assert_eq!(rx.poll_recv(&mut cx()), Poll::Ready(1));
        assert!(tx.poll_send(&mut cx(), &mut w).is_ready());
        assert_eq!(rx.poll_recv(&mut cx()), Poll::Ready(2));
        assert!(rx.poll_recv(&mut cx()).is_pending());
    }

    #[test]
    fn an_unreceived_value_is_dropped_once() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        struct D;
        impl Drop for D {
            fn drop(&mut self) {
                DROPS.fetch_add(1, Relaxed);
            }
        }
        let (tx, rx) = slot::<D>();
        assert!(tx.poll_send(&mut cx(), &mut Some(D)).is_ready());
        drop(rx.poll_recv(&mut cx()));
        assert_eq!(DROPS.load(Relaxed), 1);
        assert!(tx.poll_send(&mut cx(), &mut Some(D)).is_ready());
        drop((tx, rx));
        assert_eq!(DROPS.load(Relaxed), 2);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::future::block_on;
    use std::future::poll_fn;

    fn send<T: Send>(tx: &Sender<T>, v: T) {
        let mut v = Some(v);
        block_on(poll_fn(|cx| tx.poll_send(cx, &mut v)));
    }

    fn recv<T: Send>(rx: &Receiver<T>) -> T {
        block_on(poll_fn(|cx| rx.poll_recv(cx)))
    }

    /// A receiver that waits before the value comes, or finds it: either way it gets
    /// it, and its wake is never lost (loom reports a deadlock if it is).
    #[test]
    fn loom_slot_send_vs_recv() {
        loom::model(|| {
            let (tx, rx) = slot::<u32>();
            let t = loom::thread::spawn(move || send(&tx, 7));
            assert_eq!(recv(&rx), 7);
            t.join().unwrap();
        });
    }

    /// Two values: the second send finds the slot full until the receiver empties it,
    /// so the sender's waiting path and the receiver's wake of it race the receiver's
    /// own wait.
    #[test]
    fn loom_slot_sender_waits_for_room() {
        loom::model(|| {
            let (tx, rx) = slot::<u32>();
            let t = loom::thread::spawn(move || {
                send(&tx, 1);
                send(&tx, 2);
            });
            assert_eq!(recv(&rx), 1);
            assert_eq!(recv(&rx), 2);
            t.join().unwrap();
        });
    }

    /// The receiver polls once with a waker that does nothing, then waits with
    /// `block_on`'s, while the sender hands over: replacing the stored waker must not
    /// race the sender's read of the old one (loom checks the cell's accesses), and the
    /// value must still arrive (a wake spent on the old waker must not strand it).
    #[test]
    fn loom_slot_receiver_changes_waker_during_a_send() {
        loom::model(|| {
            let (tx, rx) = slot::<u32>();
            let t = loom::thread::spawn(move || send(&tx, 5));
            let v = match rx.poll_recv(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(v) => v,
                Poll::Pending => recv(&rx),
            };
            assert_eq!(v, 5);
            t.join().unwrap();
        });
    }

    /// Likewise for the sender, whose waker is used when the slot is full.
    #[test]
    fn loom_slot_sender_changes_waker_during_a_recv() {
        loom::model(|| {
            let (tx, rx) = slot::<u32>();
            send(&tx, 1);
            let t = loom::thread::spawn(move || {
                assert_eq!(recv(&rx), 1);
                assert_eq!(recv(&rx), 2);
            });
            let mut v = Some(2);
            if tx
                .poll_send(&mut Context::from_waker(Waker::noop()), &mut v)
                .is_pending()
            {
                block_on(poll_fn(|cx| tx.poll_send(cx, &mut v)));
            }
            t.join().unwrap();
        });
    }
}
