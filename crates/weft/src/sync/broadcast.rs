//! A multi-producer, multi-consumer channel where every receiver sees every value
//! (tokio's `broadcast`): a ring of `capacity` slots (rounded up to a power of two, as
//! tokio's) under one wait-list lock. Each slot counts the receivers that have still
//! to read it; the last one takes the value instead of cloning it. A receiver that
//! falls more than `capacity` values behind gets `Lagged(n)` and goes on with the
//! oldest value kept. Waiting receivers are wait-list nodes completed with `Signal` by
//! every send and `Close` when the last sender goes.
//!
//! `T::clone` runs outside that lock, as every other piece of user code weft calls (a
//! value's `Drop`, a waker): a value sent while more than one receiver is subscribed is
//! kept behind an `Arc` with a mutex of its own; a receiver takes a reference to it
//! under the channel's lock and clones the value after releasing it, under the value's
//! mutex (the last one moves it out unless a clone is still running). So a `Clone` may
//! use the channel (`receiver_count`, `subscribe`, `send`), and one that is slow or
//! waits holds up only the receivers of that same value (as tokio's, which clones under
//! the slot's mutex): their receives block their thread meanwhile, in any context, so a
//! `Clone` that suspends a fiber must not wait for another reader of the same value. The value's mutex is why `T: Send` is enough for both ends to be
//! `Send + Sync`: two receivers never clone one value at the same time, which a `T`
//! that is not `Sync` could not allow. A value sent to a single receiver is stored as
//! it is (it is never cloned): no allocation.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::PoisonError;
use std::task::{Context, Poll};

use super::waiter::{wake_all, Waiter};
use crate::base::Arc;
use crate::task::waker::drop_each;
use crate::waitlist::{Lock, Reason, WaitList, WakeBatch};

/// The errors of [`broadcast`](self).
pub mod error {
    use std::fmt;

    /// No receiver is left: the value is given back.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::broadcast::channel(1);
    /// drop(rx);
    /// assert_eq!(tx.send(5).unwrap_err().0, 5);
    /// ```
    #[derive(PartialEq, Eq, Clone, Copy)]
    pub struct SendError<T>(pub T);

    /// Why a receive returned no value.
    ///
    /// ```
    /// use weft::sync::broadcast::{self, error::RecvError};
    /// let (tx, mut rx) = broadcast::channel(1);
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// assert_eq!(rx.recv_blocking(), Err(RecvError::Lagged(1)));
    /// assert_eq!(rx.recv_blocking(), Ok(2));
    /// drop(tx);
    /// assert_eq!(rx.recv_blocking(), Err(RecvError::Closed));
    /// ```
    #[derive(Debug, PartialEq, Eq, Clone, Copy)]
    pub enum RecvError {
        /// Every sender is gone and every value was received.
        Closed,
        /// The receiver fell behind: this many values were overwritten before it read
        /// them. The next receive returns the oldest value kept.
        Lagged(u64),
    }

    /// Why [`try_recv`](super::Receiver::try_recv) returned no value.
    ///
    /// ```
    /// use weft::sync::broadcast::{self, error::TryRecvError};
    /// let (_tx, mut rx) = broadcast::channel::<u8>(1);
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// ```
    #[derive(Debug, PartialEq, Eq, Clone, Copy)]
    pub enum TryRecvError {
        /// No value now.
        Empty,
        /// Every sender is gone and every value was received.
        Closed,
        /// The receiver fell behind by this many values (see [`RecvError::Lagged`]).
        Lagged(u64),
    }

    impl<T> fmt::Debug for SendError<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.pad("SendError { .. }")
        }
    }

    impl<T> fmt::Display for SendError<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("channel closed")
        }
    }

    impl<T> std::error::Error for SendError<T> {}

    impl fmt::Display for RecvError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                RecvError::Closed => f.write_str("channel closed"),
                RecvError::Lagged(n) => write!(f, "channel lagged by {n}"),
            }
        }
    }

    impl std::error::Error for RecvError {}

    impl fmt::Display for TryRecvError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                TryRecvError::Empty => f.write_str("channel empty"),
                TryRecvError::Closed => f.write_str("channel closed"),
                TryRecvError::Lagged(n) => write!(f, "channel lagged by {n}"),
            }
        }
    }

    impl std::error::Error for TryRecvError {}
}

use error::{RecvError, SendError, TryRecvError};

struct Slot<T> {
    /// Taken by the last receiver to read it.
    value: Option<Held<T>>,
    /// Receivers that have still to read it.
    left: usize,
}

/// A sent value as a slot keeps it.
enum Held<T> {
    /// Sent while one receiver was subscribed: it alone reads it (a receiver subscribed
    /// later starts after it), moving it out. Never cloned.
    Alone(T),
    /// Sent to several: each reader takes a reference under the lock and clones the
    /// value after it (see [`Held::into_value`]).
    Shared(std::sync::Arc<std::sync::Mutex<T>>),
}

impl<T> Held<T> {
    /// `value` behind its `Arc` and mutex, to be read by several receivers.
    fn shared(value: T) -> Held<T> {
        Held::Shared(std::sync::Arc::new(std::sync::Mutex::new(value)))
    }
}

impl<T: Clone> Held<T> {
    /// The value itself, cloned if anyone else still holds it. Called after the channel's
    /// lock is released: `T::clone` is user code.
    fn into_value(self) -> T {
        match self {
            Held::Alone(v) => v,
            Held::Shared(v) => match std::sync::Arc::try_unwrap(v) {
                Ok(v) => v.into_inner().unwrap_or_else(PoisonError::into_inner),
                // A clone that panicked left the value as it was (`clone` takes `&T`).
                Err(v) => v.lock().unwrap_or_else(PoisonError::into_inner).clone(),
            },
        }
    }
}

struct State<T> {
    slots: Box<[Option<Slot<T>>]>,
    /// The position the next value gets; slot `pos & mask`.
    tail: u64,
    senders: usize,
    receivers: usize,
    waiters: WaitList<()>,
}

impl<T> State<T> {
    fn cap(&self) -> u64 {
        self.slots.len() as u64
    }

    fn oldest(&self) -> u64 {
        self.tail.saturating_sub(self.cap())
    }

    fn slot(&mut self, pos: u64) -> &mut Option<Slot<T>> {
        let i = (pos & (self.cap() - 1)) as usize;
        &mut self.slots[i]
    }
}

impl<T> Drop for State<T> {
    fn drop(&mut self) {
        // The values nobody read, one at a time: see `drop_each`.
        drop_each(self.slots.iter_mut().filter_map(|s| s.take()?.value));
    }
}

struct Shared<T> {
    state: Lock<State<T>>,
    /// `State::receivers`, stored under the lock, read without it by `send`: whether to
    /// put the value behind an `Arc` before taking the lock (a stale reading is mended
    /// under it).
    receivers_hint: AtomicUsize,
}

/// Sends values to every receiver. Cloneable. See [`channel`].
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// Receives every value sent after it subscribed. See [`channel`].
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    next: u64,
}

/// Makes a broadcast channel keeping the last `capacity` values (rounded up to a power
/// of two) for receivers that have not read them.
///
/// The ring is allocated whole, as tokio's is. Panics if `capacity` is 0, above
/// `usize::MAX / 2`, or more than memory can hold (a clear panic, where a failed
/// allocation would abort the process). Receivers clone values outside
/// the channel's lock, so a `T::clone` may use the channel (see the [module docs](self)).
///
/// ```
/// use weft::sync::broadcast;
///
/// let rt = weft::Runtime::new().unwrap();
/// let (tx, mut rx1) = broadcast::channel(16);
/// let mut rx2 = tx.subscribe();
/// let task = rt.spawn(async move { rx1.recv().await.unwrap() + rx1.recv().await.unwrap() });
/// tx.send(1).unwrap();
/// tx.send(2).unwrap();
/// assert_eq!(task.join().unwrap(), 3);
/// assert_eq!(rx2.recv_blocking(), Ok(1));
/// ```
pub fn channel<T: Clone>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        capacity > 0,
        "weft::sync::broadcast::channel: the capacity must be at least 1 (got capacity 0)"
    );
    assert!(
        capacity <= usize::MAX >> 1,
        "weft::sync::broadcast::channel: capacity {capacity} is too large"
    );
    let cap = capacity.next_power_of_two();
    let mut slots = Vec::new();
    if slots.try_reserve_exact(cap).is_err() {
        // Found in review: `channel(1 << 44)` aborted the process.
        panic!(
            "weft::sync::broadcast::channel: capacity {capacity} ({cap} slots of {} bytes) \
             cannot be allocated",
            std::mem::size_of::<Option<Slot<T>>>()
        );
    }
    slots.resize_with(cap, || None);
    let shared = Arc::new(Shared {
        state: Lock::new(State {
            slots: slots.into_boxed_slice(),
            tail: 0,
            senders: 1,
            receivers: 1,
            waiters: WaitList::default(),
        }),
        receivers_hint: AtomicUsize::new(1),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared, next: 0 },
    )
}

impl<T> Sender<T> {
    /// Sends `value` to every receiver now subscribed; returns how many that is. Fails,
    /// giving the value back, when there is none. Never waits: a full ring overwrites
    /// its oldest value (receivers that had not read it get `Lagged`).
    ///
    /// ```
    /// let (tx, _rx) = weft::sync::broadcast::channel(2);
    /// let _rx2 = tx.subscribe();
    /// assert_eq!(tx.send("x").unwrap(), 2);
    /// ```
    pub fn send(&self, value: T) -> Result<usize, SendError<T>> {
        // The `Arc` is made before the lock where the hint says it will be needed.
        let mut held = if self.shared.receivers_hint.load(Relaxed) > 1 {
            Held::shared(value)
        } else {
            Held::Alone(value)
        };
        let mut wakes = WakeBatch::new();
        let mut st = self.shared.state.lock();
        let receivers = st.receivers;
        if receivers == 0 {
            drop(st);
            return Err(SendError(match held {
                Held::Alone(v) => v,
                // Ours alone: nobody else saw the `Arc`.
                Held::Shared(v) => std::sync::Arc::into_inner(v)
                    .expect("an unshared Arc")
                    .into_inner()
                    .unwrap_or_else(PoisonError::into_inner),
            }));
        }
        if receivers > 1 {
            if let Held::Alone(v) = held {
                // A receiver subscribed since the hint was read.
                held = Held::shared(v);
            }
        }
        let pos = st.tail;
        let old = st.slot(pos).replace(Slot {
            value: Some(held),
            left: receivers,
        });
        st.tail += 1;
        // SAFETY: under the lock.
        unsafe { wake_all(&mut st.waiters, Reason::Signal, &mut wakes) };
        drop(st);
        drop(wakes);
        // An overwritten value is dropped after the lock (its `Drop` is user code).
        drop(old);
        Ok(receivers)
    }

    /// A new receiver, which gets the values sent from now on.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::broadcast::channel::<u8>(2);
    /// drop(rx);
    /// let mut rx = tx.subscribe();
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    pub fn subscribe(&self) -> Receiver<T> {
        let mut st = self.shared.state.lock();
        st.receivers += 1;
        self.shared.receivers_hint.store(st.receivers, Relaxed);
        let next = st.tail;
        drop(st);
        Receiver {
            shared: self.shared.clone(),
            next,
        }
    }

    /// How many receivers are subscribed.
    ///
    /// ```
    /// let (tx, _rx) = weft::sync::broadcast::channel::<u8>(2);
    /// assert_eq!(tx.receiver_count(), 1);
    /// ```
    pub fn receiver_count(&self) -> usize {
        self.shared.state.lock().receivers
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        Sender {
            shared: self.shared.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.shared.state.lock();
        st.senders -= 1;
        if st.senders == 0 {
            // SAFETY: under the lock.
            unsafe { wake_all(&mut st.waiters, Reason::Close, &mut wakes) };
        }
        drop(st);
    }
}

impl<T: Clone> Receiver<T> {
    /// One receive under the lock: the value (or a reference to it) to turn into a `T`
    /// with [`Held::into_value`] once the lock is released. An emptied slot's value is
    /// moved out.
    fn try_recv_locked(&mut self, st: &mut State<T>) -> Result<Held<T>, TryRecvError> {
        if self.next < st.tail {
            let oldest = st.oldest();
            if self.next < oldest {
                let lag = oldest - self.next;
                self.next = oldest;
                return Err(TryRecvError::Lagged(lag));
            }
            let pos = self.next;
            self.next += 1;
            let slot = st.slot(pos).as_mut().expect("a sent value's slot");
            slot.left -= 1;
            let v = if slot.left == 0 {
                slot.value.take()
            } else {
                match &slot.value {
                    Some(Held::Shared(v)) => Some(Held::Shared(v.clone())),
                    // A value sent to one receiver has nobody else left to read it.
                    Some(Held::Alone(_)) => unreachable!("a value of one receiver read twice"),
                    None => None,
                }
            };
            return Ok(v.expect("a value not yet read by every receiver"));
        }
        if st.senders == 0 {
            Err(TryRecvError::Closed)
        } else {
            Err(TryRecvError::Empty)
        }
    }

    /// Takes the next value if there is one now.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::broadcast::channel(2);
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let shared = self.shared.clone();
        let mut st = shared.state.lock();
        let held = self.try_recv_locked(&mut st);
        drop(st);
        held.map(Held::into_value)
    }

    /// Waits for the next value.
    ///
    /// Cancel safety: dropping the future loses no value (the receiver's position moves
    /// only when a value is returned).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, mut rx) = weft::sync::broadcast::channel(2);
    /// tx.send(4).unwrap();
    /// assert_eq!(rt.block_on(rx.recv()), Ok(4));
    /// ```
    pub async fn recv(&mut self) -> Result<T, RecvError> {
        Recv {
            rx: self,
            waiter: Waiter::new(crate::waitlist::WaitOn::Chan),
        }
        .await
    }

    /// [`recv`](Self::recv), blocking by [`weft::wait`](crate::wait)'s rule: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::broadcast::channel(2);
    /// std::thread::spawn(move || tx.send(1).unwrap());
    /// assert_eq!(rx.recv_blocking(), Ok(1));
    /// ```
    pub fn recv_blocking(&mut self) -> Result<T, RecvError> {
        crate::wait(self.recv())
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        st.receivers -= 1;
        self.shared.receivers_hint.store(st.receivers, Relaxed);
        // The values it had still to read: it no longer counts in them.
        let mut freed = Vec::new();
        let from = self.next.max(st.oldest());
        for pos in from..st.tail {
            if let Some(slot) = st.slot(pos).as_mut() {
                slot.left -= 1;
                if slot.left == 0 {
                    freed.extend(slot.value.take());
                }
            }
        }
        drop(st);
        // One at a time: see `drop_each`.
        drop_each(freed);
    }
}

struct Recv<'a, T> {
    rx: &'a mut Receiver<T>,
    waiter: Waiter,
}

impl<T: Clone> Future for Recv<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of the pinned future; its node stays put.
        let this = unsafe { self.get_unchecked_mut() };
        if this.waiter.is_registered()
            && this
                .waiter
                .poll_registered(&this.rx.shared.state, cx)
                .is_none()
        {
            return Poll::Pending;
        }
        let mut waker = crate::waitlist::Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let shared = this.rx.shared.clone();
        let mut st = shared.state.lock();
        match this.rx.try_recv_locked(&mut st) {
            Ok(v) => {
                drop(st);
                Poll::Ready(Ok(v.into_value()))
            }
            Err(TryRecvError::Closed) => Poll::Ready(Err(RecvError::Closed)),
            Err(TryRecvError::Lagged(n)) => Poll::Ready(Err(RecvError::Lagged(n))),
            Err(TryRecvError::Empty) => {
                // SAFETY: under the lock; the future is pinned and its `Drop` cancels.
                unsafe {
                    this.waiter
                        .register(&mut st.waiters, &mut waker, &mut wakes)
                };
                drop(st);
                Poll::Pending
            }
        }
    }
}

impl<T> Drop for Recv<'_, T> {
    fn drop(&mut self) {
        self.waiter
            .withdraw(&self.rx.shared.state, |s| &mut s.waiters);
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}
