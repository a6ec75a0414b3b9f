//! A channel that keeps only the latest value (tokio's `watch`). The value sits behind
//! a reader-writer lock; a version word (`seq << 1 | CLOSED`) tells receivers what they
//! have seen; `changed` waiters are wait-list nodes completed with `Signal` by every
//! send (after the version is bumped) and by the sender's drop.
//!
//! The value's lock is one of weft's own locks: [`Ref`] holds it, and a fiber that
//! parks while holding a `Ref` is reported as `PARK-UNDER-LOCK` in debug builds (and
//! with `WEFT_DEBUG_LOCKS=1`).

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll};

#[cfg(loom)]
use loom::sync::{RwLock as ValueLock, RwLockReadGuard as ValueGuard};
#[cfg(not(loom))]
use std::sync::{RwLock as ValueLock, RwLockReadGuard as ValueGuard};

use super::waiter::{wake_all, Waiter};
use crate::base::{Arc, AtomicUsize};
use crate::fiber::LockDepth;
use crate::waitlist::{Lock, Reason, WaitList, WakeBatch};

/// The name of the value's lock in lock-depth reports.
const LOCK_NAME: &str = "weft::sync::watch (value)";

/// The errors of [`watch`](self).
pub mod error {
    use std::fmt;

    /// The sender is gone: returned by [`changed`](super::Receiver::changed) once no
    /// new value can come.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::watch::channel(0);
    /// drop(tx);
    /// assert!(rx.changed_blocking().is_err());
    /// ```
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct RecvError(pub(crate) ());

    /// Every receiver is gone: the value sent is given back.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(0);
    /// drop(rx);
    /// assert_eq!(tx.send(1).unwrap_err().0, 1);
    /// ```
    #[derive(PartialEq, Eq, Clone, Copy)]
    pub struct SendError<T>(pub T);

    impl fmt::Display for RecvError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("channel closed")
        }
    }

    impl std::error::Error for RecvError {}

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
}

use error::{RecvError, SendError};

const CLOSED: usize = 1;

struct Shared<T> {
    value: ValueLock<T>,
    /// `seq << 1 | CLOSED`; `seq` grows by one per send, under the value's write lock.
    version: AtomicUsize,
    state: Lock<State>,
}

struct State {
    receivers: usize,
    waiters: WaitList<()>,
}

/// Sends values to every [`Receiver`]. See [`channel`].
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// Sees the latest value, and waits for changes. See [`channel`].
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The sequence number of the value last marked seen.
    seen: usize,
}

/// A borrow of the current value: holds the channel's value lock (a read lock) until
/// dropped, as tokio's does. Sends wait meanwhile; do not hold it across a wait (a
/// fiber that parks holding it is reported as `PARK-UNDER-LOCK` in debug builds).
///
/// ```
/// let (tx, rx) = weft::sync::watch::channel(String::from("a"));
/// assert_eq!(rx.borrow().as_str(), "a");
/// tx.send("b".into()).unwrap();
/// assert_eq!(*rx.borrow(), "b");
/// ```
pub struct Ref<'a, T> {
    guard: ValueGuard<'a, T>,
    _depth: LockDepth,
}

/// Makes a watch channel holding `init`.
///
/// ```
/// use weft::sync::watch;
///
/// let rt = weft::Runtime::new().unwrap();
/// let (tx, mut rx) = watch::channel(0);
/// let task = rt.spawn(async move {
///     rx.changed().await.unwrap();
///     *rx.borrow_and_update()
/// });
/// tx.send(5).unwrap();
/// assert_eq!(task.join().unwrap(), 5);
/// ```
pub fn channel<T>(init: T) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        value: ValueLock::new(init),
        version: AtomicUsize::new(0),
        state: Lock::new(State {
            receivers: 1,
            waiters: WaitList::default(),
        }),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared, seen: 0 },
    )
}

impl<T> Shared<T> {
    fn read(&self) -> Ref<'_, T> {
        let depth = LockDepth::acquire_named(LOCK_NAME);
        let guard = self.value.read().unwrap_or_else(|e| e.into_inner());
        Ref {
            guard,
            _depth: depth,
        }
    }

    /// Changes the value under the write lock and bumps the version, then wakes every
    /// `changed` waiter. `f` returns what is dropped after the locks.
    fn modify<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let r = {
            let _depth = LockDepth::acquire_named(LOCK_NAME);
            let mut v = self.value.write().unwrap_or_else(|e| e.into_inner());
            let r = f(&mut v);
            self.version.fetch_add(2, SeqCst);
            r
        };
        self.wake_all();
        r
    }

    fn wake_all(&self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.state.lock();
        // SAFETY: under the lock.
        unsafe { wake_all(&mut st.waiters, Reason::Signal, &mut wakes) };
        drop(st);
    }
}

impl<T> Sender<T> {
    /// Replaces the value and tells every receiver; fails, giving `value` back, when no
    /// receiver is left.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(1);
    /// tx.send(2).unwrap();
    /// assert_eq!(*rx.borrow(), 2);
    /// ```
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        if self.shared.state.lock().receivers == 0 {
            return Err(SendError(value));
        }
        let old = self.shared.modify(move |v| std::mem::replace(v, value));
        drop(old);
        Ok(())
    }

    /// Changes the value in place and tells every receiver, whether or not any is left.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(vec![1]);
    /// tx.send_modify(|v| v.push(2));
    /// assert_eq!(*rx.borrow(), [1, 2]);
    /// ```
    pub fn send_modify(&self, modify: impl FnOnce(&mut T)) {
        self.shared.modify(modify);
    }

    /// Replaces the value, tells every receiver, and returns the old value (works with
    /// no receiver left).
    ///
    /// ```
    /// let (tx, _rx) = weft::sync::watch::channel(1);
    /// assert_eq!(tx.send_replace(2), 1);
    /// ```
    pub fn send_replace(&self, value: T) -> T {
        self.shared.modify(move |v| std::mem::replace(v, value))
    }

    /// A new receiver, which has seen the current value.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(1);
    /// drop(rx);
    /// let rx = tx.subscribe();
    /// assert!(!rx.has_changed().unwrap());
    /// ```
    pub fn subscribe(&self) -> Receiver<T> {
        self.shared.state.lock().receivers += 1;
        // Read under the value lock, so the version matches the value seen.
        let seen = {
            let _r = self.shared.read();
            self.shared.version.load(SeqCst) >> 1
        };
        Receiver {
            shared: self.shared.clone(),
            seen,
        }
    }

    /// Borrows the current value (holding the value lock, see [`Ref`]).
    ///
    /// ```
    /// let (tx, _rx) = weft::sync::watch::channel(3);
    /// assert_eq!(*tx.borrow(), 3);
    /// ```
    pub fn borrow(&self) -> Ref<'_, T> {
        self.shared.read()
    }

    /// How many receivers are left.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(3);
    /// let rx2 = rx.clone();
    /// assert_eq!(tx.receiver_count(), 2);
    /// ```
    pub fn receiver_count(&self) -> usize {
        self.shared.state.lock().receivers
    }

    /// Whether every receiver is gone.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(3);
    /// drop(rx);
    /// assert!(tx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.receiver_count() == 0
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.version.fetch_or(CLOSED, SeqCst);
        self.shared.wake_all();
    }
}

impl<T> Receiver<T> {
    /// Borrows the current value without marking it seen (holding the value lock, see
    /// [`Ref`]).
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(1);
    /// tx.send(2).unwrap();
    /// assert_eq!(*rx.borrow(), 2);
    /// assert!(rx.has_changed().unwrap()); // still unseen
    /// ```
    pub fn borrow(&self) -> Ref<'_, T> {
        self.shared.read()
    }

    /// Borrows the current value and marks it seen.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::watch::channel(1);
    /// tx.send(2).unwrap();
    /// assert_eq!(*rx.borrow_and_update(), 2);
    /// assert!(!rx.has_changed().unwrap());
    /// ```
    pub fn borrow_and_update(&mut self) -> Ref<'_, T> {
        let r = self.shared.read();
        // The version only moves under the write lock: it matches the value borrowed.
        self.seen = self.shared.version.load(SeqCst) >> 1;
        r
    }

    /// Whether a value not yet marked seen is there; `Err` once the sender is gone.
    ///
    /// ```
    /// let (tx, rx) = weft::sync::watch::channel(1);
    /// assert!(!rx.has_changed().unwrap());
    /// tx.send(2).unwrap();
    /// assert!(rx.has_changed().unwrap());
    /// drop(tx);
    /// assert!(rx.has_changed().is_err());
    /// ```
    pub fn has_changed(&self) -> Result<bool, RecvError> {
        let v = self.shared.version.load(SeqCst);
        if v & CLOSED != 0 {
            return Err(RecvError(()));
        }
        Ok(v >> 1 != self.seen)
    }

    /// Waits for a value not yet marked seen, and marks it seen. Fails once the sender
    /// is gone and every value was seen.
    ///
    /// Cancel safety: dropping the future loses nothing (the value stays unseen).
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, mut rx) = weft::sync::watch::channel(0);
    /// tx.send(1).unwrap();
    /// rt.block_on(rx.changed()).unwrap();
    /// drop(tx);
    /// assert!(rt.block_on(rx.changed()).is_err());
    /// ```
    pub async fn changed(&mut self) -> Result<(), RecvError> {
        Changed {
            rx: self,
            waiter: Waiter::new(crate::waitlist::WaitOn::Chan),
        }
        .await
    }

    /// [`changed`](Self::changed), blocking by [`weft::wait`](crate::wait)'s rule: a
    /// fiber suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// let (tx, mut rx) = weft::sync::watch::channel(0);
    /// std::thread::spawn(move || tx.send(1).unwrap());
    /// rx.changed_blocking().unwrap();
    /// assert_eq!(*rx.borrow(), 1);
    /// ```
    pub fn changed_blocking(&mut self) -> Result<(), RecvError> {
        crate::wait(self.changed())
    }

    /// Whether `self` and `other` watch the same channel.
    ///
    /// ```
    /// let (_tx, rx) = weft::sync::watch::channel(0);
    /// assert!(rx.same_channel(&rx.clone()));
    /// ```
    pub fn same_channel(&self, other: &Receiver<T>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().receivers += 1;
        Receiver {
            shared: self.shared.clone(),
            seen: self.seen,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.shared.state.lock().receivers -= 1;
    }
}

struct Changed<'a, T> {
    rx: &'a mut Receiver<T>,
    waiter: Waiter,
}

impl<T> Changed<'_, T> {
    /// `Some` when the wait is over (a new value, marked seen; or closed).
    fn check(&mut self) -> Option<Result<(), RecvError>> {
        let v = self.rx.shared.version.load(SeqCst);
        if v >> 1 != self.rx.seen {
            self.rx.seen = v >> 1;
            return Some(Ok(()));
        }
        if v & CLOSED != 0 {
            return Some(Err(RecvError(())));
        }
        None
    }
}

impl<T> Future for Changed<'_, T> {
    type Output = Result<(), RecvError>;

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
        if let Some(r) = this.check() {
            return Poll::Ready(r);
        }
        let mut waker = crate::waitlist::Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let shared = this.rx.shared.clone();
        let mut st = shared.state.lock();
        // Again under the lock: a send bumps the version before it takes this lock.
        if let Some(r) = this.check() {
            return Poll::Ready(r);
        }
        // SAFETY: under the lock; the future is pinned and its `Drop` cancels.
        unsafe {
            this.waiter
                .register(&mut st.waiters, &mut waker, &mut wakes)
        };
        drop(st);
        Poll::Pending
    }
}

impl<T> Drop for Changed<'_, T> {
    fn drop(&mut self) {
        self.waiter
            .withdraw(&self.rx.shared.state, |s| &mut s.waiters);
    }
}

impl<T> Deref for Ref<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T: fmt::Debug> fmt::Debug for Ref<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Debug> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Sender { .. }")
    }
}

impl<T: fmt::Debug> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Receiver { .. }")
    }
}
