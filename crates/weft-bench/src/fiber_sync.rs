//! Future-based synchronisation for the weft side of the `fiber` suite, used
//! from fibers through [`weft::wait`] (which suspends the calling fiber, not
//! its worker thread, while the future is pending). weft has no fiber
//! channel yet; these are the small ones the benchmark needs.
//!
//! * [`Slot`]: a one-slot channel. `send` waits until the slot is empty, then
//!   fills it; `recv` waits until it is full, then empties it. One waker slot
//!   for a waiting receiver and one for a waiting sender.
//! * [`Gate`]: every `wait` stays pending until [`Gate::open`].

use std::future::poll_fn;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire};
use std::sync::Mutex;
use std::task::{Poll, Waker};

use crate::harness::lock;

/// Stores `w` in `slot` unless the waker already there wakes the same task.
fn register(slot: &mut Option<Waker>, w: &Waker) {
    match slot {
        Some(old) if old.will_wake(w) => {}
        _ => *slot = Some(w.clone()),
    }
}

/// A one-slot channel for one sender and one receiver at a time.
pub struct Slot<T> {
    state: Mutex<SlotState<T>>,
}

struct SlotState<T> {
    value: Option<T>,
    /// The receiver's and the sender's wakers: kept once registered (a fiber's waker
    /// is the same on every wait, so the common case neither clones nor drops one).
    receiver: Option<Waker>,
    sender: Option<Waker>,
    /// Whether the receiver (sender) is waiting for the slot to fill (empty).
    receiver_waiting: bool,
    sender_waiting: bool,
}

impl<T> Slot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        Slot {
            state: Mutex::new(SlotState {
                value: None,
                receiver: None,
                sender: None,
                receiver_waiting: false,
                sender_waiting: false,
            }),
        }
    }

    /// Waits until the slot is empty, then puts `value` in it and wakes a
    /// waiting receiver.
    pub fn send(&self, value: T) {
        let mut value = Some(value);
        weft::wait(poll_fn(|cx| {
            let mut s = lock(&self.state);
            if s.value.is_some() {
                register(&mut s.sender, cx.waker());
                s.sender_waiting = true;
                return Poll::Pending;
            }
            s.value = value.take();
            if std::mem::take(&mut s.receiver_waiting) {
                if let Some(w) = &s.receiver {
                    // Under the lock: waking only schedules the receiver.
                    w.wake_by_ref();
                }
            }
            Poll::Ready(())
        }));
    }

    /// Waits until the slot is full, then takes the value out and wakes a
    /// waiting sender.
    pub fn recv(&self) -> T {
        weft::wait(poll_fn(|cx| {
            let mut s = lock(&self.state);
            let Some(v) = s.value.take() else {
                register(&mut s.receiver, cx.waker());
                s.receiver_waiting = true;
                return Poll::Pending;
            };
            if std::mem::take(&mut s.sender_waiting) {
                if let Some(w) = &s.sender {
                    w.wake_by_ref();
                }
            }
            Poll::Ready(v)
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
        let mut registered = false;
        weft::wait(poll_fn(|cx| {
            let mut s = lock(&self.state);
            if s.open {
                return Poll::Ready(());
            }
            if !registered {
                s.wakers.push(cx.waker().clone());
                registered = true;
                self.waiting.fetch_add(1, AcqRel);
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
