//! `Barrier`: `n` arrivals release a generation; the last to arrive is its leader and
//! completes every waiter of the generation under the lock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::waiter::{wake_all, Waiter};
use crate::waitlist::{Lock, Reason, WaitList, WakeBatch};

/// Lets `n` waiters (tasks, fibers, threads, in any mix) wait for each other (tokio's
/// `Barrier`). Reusable: once `n` have arrived they all go on and the next `n` form the
/// next generation.
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::Barrier;
///
/// let rt = weft::Runtime::new().unwrap();
/// let barrier = Arc::new(Barrier::new(3));
/// let b = barrier.clone();
/// let task = rt.spawn(async move { b.wait().await.is_leader() });
/// let b = barrier.clone();
/// let thread = std::thread::spawn(move || b.wait_blocking().is_leader());
/// let here = barrier.wait_blocking().is_leader();
/// let leaders = [here, task.join().unwrap(), thread.join().unwrap()];
/// assert_eq!(leaders.iter().filter(|l| **l).count(), 1);
/// ```
pub struct Barrier {
    n: usize,
    state: Lock<State>,
}

struct State {
    arrived: usize,
    waiters: WaitList<()>,
}

/// What [`Barrier::wait`] returns: whether this waiter was the generation's leader.
///
/// ```
/// let b = weft::sync::Barrier::new(1);
/// assert!(b.wait_blocking().is_leader());
/// ```
#[derive(Debug)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// Whether this waiter was the leader: exactly one per generation (the last to
    /// arrive).
    ///
    /// ```
    /// let b = weft::sync::Barrier::new(1);
    /// assert!(b.wait_blocking().is_leader());
    /// ```
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

struct BarrierWait<'a> {
    barrier: &'a Barrier,
    waiter: Waiter,
}

impl Barrier {
    /// A barrier for `n` waiters (`new(0)` acts as `new(1)`).
    ///
    /// ```
    /// let b = weft::sync::Barrier::new(0);
    /// assert!(b.wait_blocking().is_leader());
    /// ```
    pub fn new(n: usize) -> Barrier {
        Barrier {
            n: n.max(1),
            state: Lock::new(State {
                arrived: 0,
                waiters: WaitList::default(),
            }),
        }
    }

    /// Arrives and waits until `n` waiters of this generation have arrived.
    ///
    /// Cancel safety: a waiter dropped before its generation is complete withdraws its
    /// arrival (the generation then needs another waiter); one dropped after it was
    /// released loses nothing for the others.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let b = weft::sync::Barrier::new(1);
    /// assert!(rt.block_on(b.wait()).is_leader());
    /// ```
    pub async fn wait(&self) -> BarrierWaitResult {
        BarrierWait {
            barrier: self,
            waiter: Waiter::new(crate::waitlist::WaitOn::Sync),
        }
        .await
    }

    /// [`wait`](Self::wait), blocking by [`weft::wait`](crate::wait)'s rule: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let b = Arc::new(weft::sync::Barrier::new(2));
    /// let b2 = b.clone();
    /// let t = std::thread::spawn(move || b2.wait_blocking().is_leader());
    /// let me = b.wait_blocking().is_leader();
    /// assert!(me ^ t.join().unwrap());
    /// ```
    pub fn wait_blocking(&self) -> BarrierWaitResult {
        crate::wait(self.wait())
    }
}

impl Future for BarrierWait<'_> {
    type Output = BarrierWaitResult;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<BarrierWaitResult> {
        // SAFETY: nothing is moved out of the pinned future; its node stays put.
        let this = unsafe { self.get_unchecked_mut() };
        if this.waiter.is_registered() {
            return match this.waiter.poll_registered(&this.barrier.state, cx) {
                None => Poll::Pending,
                Some(_) => Poll::Ready(BarrierWaitResult(false)),
            };
        }
        let mut waker = crate::waitlist::Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = this.barrier.state.lock();
        if st.arrived + 1 == this.barrier.n {
            st.arrived = 0;
            // SAFETY: under the lock.
            unsafe { wake_all(&mut st.waiters, Reason::Data, &mut wakes) };
            drop(st);
            return Poll::Ready(BarrierWaitResult(true));
        }
        // Registered before the arrival counts: a waker whose `clone` panics in
        // `register` leaves no arrival behind that its `Drop` would not withdraw.
        // SAFETY: under the lock; the future is pinned and its `Drop` cancels.
        unsafe {
            this.waiter
                .register(&mut st.waiters, &mut waker, &mut wakes)
        };
        st.arrived += 1;
        drop(st);
        Poll::Pending
    }
}

impl Drop for BarrierWait<'_> {
    fn drop(&mut self) {
        if !self.waiter.is_registered() {
            return;
        }
        let mut st = self.barrier.state.lock();
        if self.waiter.cancel(&mut st, |s| &mut s.waiters).is_none() {
            // Still waiting: its arrival is withdrawn.
            st.arrived -= 1;
        }
        drop(st);
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).finish()
    }
}
