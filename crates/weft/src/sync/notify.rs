//! `Notify`: one stored permit, a FIFO of waiters, and a generation counted by
//! `notify_waiters` (a `Notified` made before a `notify_waiters` call completes even if
//! it was never polled before the call).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::task::{Context, Poll};

use super::waiter::{wake_all, wake_one, Waiter};
use crate::base::AtomicUsize;
use crate::waitlist::{Lock, Reason, WaitList, WakeBatch};

/// Wakes tasks, fibers and threads that wait for an event (tokio's `Notify`).
///
/// [`notify_one`](Self::notify_one) wakes the first waiter, or, if none waits, stores
/// one permit that the next [`notified`](Self::notified) consumes at once (several
/// calls store only one). [`notify_waiters`](Self::notify_waiters) wakes every
/// `notified()` future created before the call, polled or not, and stores nothing.
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::Notify;
///
/// let rt = weft::Runtime::new().unwrap();
/// let notify = Arc::new(Notify::new());
/// let n = notify.clone();
/// let waiter = rt.spawn(async move { n.notified().await });
/// notify.notify_one();
/// waiter.join().unwrap();
/// ```
pub struct Notify {
    state: Lock<State>,
    /// A copy of `State::generation` for `notified()` to read without the lock.
    generation: AtomicUsize,
}

struct State {
    permit: bool,
    generation: usize,
    waiters: WaitList<()>,
}

/// The future of [`Notify::notified`].
///
/// Cancel safety: dropping it gives up its place; if a [`notify_one`](Notify::notify_one)
/// had already chosen it, that notification goes on to the next waiter (or becomes the
/// stored permit), so none is lost. A `notify_waiters` notification is not passed on.
///
/// ```
/// let n = weft::sync::Notify::new();
/// let fut = n.notified();
/// n.notify_waiters(); // `fut` was created before the call: it completes
/// weft::wait(fut);
/// ```
#[must_use = "futures do nothing unless awaited"]
pub struct Notified<'a> {
    notify: &'a Notify,
    generation: usize,
    waiter: Waiter,
    done: bool,
}

impl Notify {
    /// A `Notify` with no stored permit.
    ///
    /// ```
    /// let n = weft::sync::Notify::new();
    /// n.notify_one();
    /// n.notified_blocking(); // consumes the stored permit
    /// ```
    pub fn new() -> Notify {
        Notify {
            state: Lock::new(State {
                permit: false,
                generation: 0,
                waiters: WaitList::default(),
            }),
            generation: AtomicUsize::new(0),
        }
    }

    /// A future that completes at the next notification: a stored permit (consumed),
    /// a [`notify_one`](Self::notify_one) that picks it, or a
    /// [`notify_waiters`](Self::notify_waiters) called after this call.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let n = weft::sync::Notify::new();
    /// n.notify_one();
    /// rt.block_on(n.notified());
    /// ```
    pub fn notified(&self) -> Notified<'_> {
        Notified {
            notify: self,
            generation: self.generation.load(SeqCst),
            waiter: Waiter::new(crate::waitlist::WaitOn::Sync),
            done: false,
        }
    }

    /// [`notified`](Self::notified), blocking by [`weft::wait`](crate::wait)'s rule: a
    /// fiber suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let n = Arc::new(weft::sync::Notify::new());
    /// let n2 = n.clone();
    /// let t = std::thread::spawn(move || n2.notified_blocking());
    /// n.notify_one();
    /// t.join().unwrap();
    /// ```
    pub fn notified_blocking(&self) {
        crate::wait(self.notified())
    }

    /// Wakes the first waiter, or stores a permit if none waits.
    ///
    /// ```
    /// let n = weft::sync::Notify::new();
    /// n.notify_one();
    /// n.notify_one(); // still one permit
    /// n.notified_blocking();
    /// ```
    pub fn notify_one(&self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.state.lock();
        Self::notify_one_locked(&mut st, &mut wakes);
        drop(st);
    }

    fn notify_one_locked(st: &mut State, wakes: &mut WakeBatch) {
        // SAFETY: under the lock.
        if !unsafe { wake_one(&mut st.waiters, Reason::Data, wakes) } {
            st.permit = true;
        }
    }

    /// Wakes every [`notified`](Self::notified) future created before this call,
    /// whether it was polled yet or not. Stores no permit.
    ///
    /// ```
    /// let n = weft::sync::Notify::new();
    /// let a = n.notified();
    /// let b = n.notified();
    /// n.notify_waiters();
    /// weft::wait(a);
    /// weft::wait(b);
    /// ```
    pub fn notify_waiters(&self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.state.lock();
        st.generation = st.generation.wrapping_add(1);
        self.generation.store(st.generation, SeqCst);
        // SAFETY: under the lock.
        unsafe { wake_all(&mut st.waiters, Reason::Signal, &mut wakes) };
        drop(st);
    }
}

impl Default for Notify {
    fn default() -> Self {
        Notify::new()
    }
}

impl fmt::Debug for Notify {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Notify { .. }")
    }
}

impl Future for Notified<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing is moved out of the pinned future; its node stays put.
        let this = unsafe { self.get_unchecked_mut() };
        if this.done {
            return Poll::Ready(());
        }
        if this.waiter.is_registered() {
            if this
                .waiter
                .poll_registered(&this.notify.state, cx)
                .is_none()
            {
                return Poll::Pending;
            }
            this.done = true;
            return Poll::Ready(());
        }
        let mut wakes = WakeBatch::new();
        let mut st = this.notify.state.lock();
        if st.generation != this.generation || std::mem::take(&mut st.permit) {
            this.done = true;
            return Poll::Ready(());
        }
        // SAFETY: under the lock; the future is pinned and its `Drop` cancels.
        unsafe { this.waiter.register(&mut st.waiters, cx, &mut wakes) };
        drop(st);
        Poll::Pending
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        if !self.waiter.is_registered() {
            return;
        }
        let mut wakes = WakeBatch::new();
        let mut st = self.notify.state.lock();
        if self.waiter.cancel(&mut st, |s| &mut s.waiters) == Some(Reason::Data) {
            // Chosen by `notify_one` but never told: pass it on.
            Notify::notify_one_locked(&mut st, &mut wakes);
        }
        drop(st);
    }
}

impl fmt::Debug for Notified<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Notified { .. }")
    }
}
