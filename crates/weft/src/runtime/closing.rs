//! Waits that end when their runtime shuts down, for things no runtime owns (a signal):
//! a socket's waits end through the I/O driver, these through this list.
//!
//! The handshake is one lock: [`Closing::close`] sets `closed` and takes the wakers
//! under it, and [`ShutDown::poll`] looks at `closed` and stores its waker under it, so
//! a waiter either sees the flag or is woken. Only the waiters of the runtime that
//! shuts down are woken (an earlier version woke every signal waiter of the process
//! at every runtime's drop, on the dropping thread: found in review,
//! `tests/review_s33b.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use super::Handle;
use crate::task::waker::Prepared;

/// A runtime's list of waiters for its shutdown.
#[derive(Default)]
pub(crate) struct Closing {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    closed: bool,
    /// Indexed by the waiter's slot: a poll or a drop costs the same with thirty
    /// thousand waiters as with one (a search by id cost 70 us a poll there: found in
    /// review, `tests/review_s33c.rs`; a `ctrl_c` in every connection's select is a
    /// common pattern). A slot is free (`None`, on `free`) only once its waiter is
    /// dropped, so an index is never shared.
    waiters: Vec<Option<Waker>>,
    free: Vec<usize>,
}

impl Closing {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The runtime shuts down: every waiter wakes, and later polls find it closed.
    pub(crate) fn close(&self) {
        let waiters = {
            let mut st = self.lock();
            st.closed = true;
            st.free = Vec::new();
            std::mem::take(&mut st.waiters)
        };
        // Woken after the lock (a waker is user code, which may poll a `ShutDown`),
        // each under `catch_unwind`: a panicking waker must not stop the shutdown.
        for w in waiters.into_iter().flatten() {
            crate::driver::wake_guarded(w);
        }
    }
}

/// Completes once `handle`'s runtime has begun to shut down.
pub(crate) fn shut_down(handle: &Handle) -> ShutDown {
    ShutDown {
        closing: handle.inner.closing.clone(),
        id: None,
    }
}

/// The future of [`shut_down`]. It holds the list, not the runtime: a wait kept after
/// its runtime's drop keeps none of the runtime's threads, queues or drivers alive.
pub(crate) struct ShutDown {
    closing: Arc<Closing>,
    /// Its slot in the list, while it has one.
    id: Option<usize>,
}

impl Future for ShutDown {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        // A waker that is not a weft task's is cloned before the lock (see `Prepared`).
        let mut waker = Prepared::new(cx.waker());
        let mut st = this.closing.lock();
        if st.closed {
            return Poll::Ready(());
        }
        let old = match this.id {
            Some(id) => {
                let slot = &mut st.waiters[id];
                match slot {
                    Some(w) if w.will_wake(waker.get()) => None,
                    _ => slot.replace(waker.take()),
                }
            }
            None => {
                let id = match st.free.pop() {
                    Some(id) => id,
                    None => {
                        st.waiters.push(None);
                        st.waiters.len() - 1
                    }
                };
                st.waiters[id] = Some(waker.take());
                this.id = Some(id);
                None
            }
        };
        drop(st);
        // The replaced waker goes after the lock: its drop is user code.
        drop(old);
        Poll::Pending
    }
}

impl Drop for ShutDown {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let old = {
            let mut st = self.closing.lock();
            if st.closed {
                // The close took every slot.
                return;
            }
            st.free.push(id);
            st.waiters[id].take()
        };
        drop(old);
    }
}
