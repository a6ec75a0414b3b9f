//! `WaitGroup` (Go's): a counter; `wait` completes when it is zero.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::waiter::{wake_all, Waiter};
use crate::base::Arc;
use crate::waitlist::{Lock, Reason, WaitList, WakeBatch};

/// Waits for a set of jobs to finish (Go's `sync.WaitGroup`): [`add`](Self::add)
/// counts jobs in, [`done`](Self::done) counts one out, and [`wait`](Self::wait)
/// completes once the count is zero. Clones share one count; it is reusable once it
/// reaches zero.
///
/// ```
/// use weft::sync::WaitGroup;
///
/// let rt = weft::Runtime::new().unwrap();
/// let wg = WaitGroup::new();
/// for _ in 0..3 {
///     wg.add(1);
///     let wg = wg.clone();
///     rt.spawn(async move { wg.done() });
/// }
/// wg.wait_blocking();
/// ```
#[derive(Clone)]
pub struct WaitGroup {
    inner: Arc<Lock<State>>,
}

struct State {
    count: usize,
    waiters: WaitList<()>,
}

struct Wait<'a> {
    group: &'a WaitGroup,
    waiter: Waiter,
}

impl WaitGroup {
    /// A group with a count of zero.
    ///
    /// ```
    /// weft::sync::WaitGroup::new().wait_blocking(); // zero: returns at once
    /// ```
    pub fn new() -> WaitGroup {
        WaitGroup {
            inner: Arc::new(Lock::new(State {
                count: 0,
                waiters: WaitList::default(),
            })),
        }
    }

    /// Adds `n` to the count.
    ///
    /// ```
    /// let wg = weft::sync::WaitGroup::new();
    /// wg.add(2);
    /// wg.done();
    /// wg.done();
    /// wg.wait_blocking();
    /// ```
    pub fn add(&self, n: usize) {
        let mut st = self.inner.lock();
        match st.count.checked_add(n) {
            Some(c) => st.count = c,
            None => {
                drop(st);
                panic!("WaitGroup count overflow");
            }
        }
    }

    /// Takes one off the count, waking every waiter when it reaches zero. Panics if the
    /// count is already zero.
    ///
    /// ```
    /// let wg = weft::sync::WaitGroup::new();
    /// wg.add(1);
    /// wg.done();
    /// ```
    pub fn done(&self) {
        let mut wakes = WakeBatch::new();
        let mut st = self.inner.lock();
        if st.count == 0 {
            drop(st);
            panic!("WaitGroup::done called more times than add: the count would go below zero");
        }
        st.count -= 1;
        if st.count == 0 {
            // SAFETY: under the lock.
            unsafe { wake_all(&mut st.waiters, Reason::Data, &mut wakes) };
        }
        drop(st);
    }

    /// Waits until the count is zero.
    ///
    /// Cancel safety: dropping the future loses nothing.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let wg = weft::sync::WaitGroup::new();
    /// wg.add(1);
    /// let w = wg.clone();
    /// std::thread::spawn(move || w.done());
    /// rt.block_on(wg.wait());
    /// ```
    pub async fn wait(&self) {
        Wait {
            group: self,
            waiter: Waiter::new(crate::waitlist::WaitOn::Sync),
        }
        .await
    }

    /// [`wait`](Self::wait), blocking by [`weft::wait`](crate::wait)'s rule: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// let wg = weft::sync::WaitGroup::new();
    /// wg.add(1);
    /// let w = wg.clone();
    /// std::thread::spawn(move || w.done());
    /// wg.wait_blocking();
    /// ```
    pub fn wait_blocking(&self) {
        crate::wait(self.wait())
    }
}

impl Default for WaitGroup {
    fn default() -> Self {
        WaitGroup::new()
    }
}

impl Future for Wait<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // SAFETY: nothing is moved out of the pinned future; its node stays put.
        let this = unsafe { self.get_unchecked_mut() };
        if this.waiter.is_registered() {
            return match this.waiter.poll_registered(&this.group.inner, cx) {
                None => Poll::Pending,
                Some(_) => Poll::Ready(()),
            };
        }
        let mut waker = crate::waitlist::Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut st = this.group.inner.lock();
        if st.count == 0 {
            return Poll::Ready(());
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

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        self.waiter.withdraw(&self.group.inner, |s| &mut s.waiters);
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup")
            .field("count", &self.inner.lock().count)
            .finish()
    }
}
