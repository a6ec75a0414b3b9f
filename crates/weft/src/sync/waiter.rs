//! The wait node of the primitives that wait for a signal (`Notify`, `Barrier`,
//! `WaitGroup`, `watch`, `broadcast`): a [`Node`] owned by the waiting future, put on
//! the primitive's list under its lock, completed by whoever changes the state under
//! that lock (reason stored, waker queued, woken after the lock).

use std::task::Context;

use crate::waitlist::{Lock, LockGuard, Node, Prepared, Reason, WaitList, WakeBatch};

/// A waiting future's node and whether it is on a list.
pub(crate) struct Waiter {
    node: Node<()>,
    registered: bool,
    /// What a dump says the waiting task waits on.
    on: crate::waitlist::WaitOn,
}

impl Waiter {
    /// A waiter on a primitive that a dump names `on`.
    pub(crate) fn new(on: crate::waitlist::WaitOn) -> Waiter {
        Waiter {
            node: Node::new(),
            registered: false,
            on,
        }
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.registered
    }

    /// For a registered waiter: the reason it was completed with, or `None` if it still
    /// waits (its waker is refreshed under the lock then). Once a reason is returned the
    /// waiter is unregistered and ready for another wait.
    pub(crate) fn poll_registered<S>(
        &mut self,
        lock: &Lock<S>,
        cx: &mut Context<'_>,
    ) -> Option<Reason> {
        debug_assert!(self.registered);
        loop {
            match self.node.reason() {
                Reason::Waiting => {
                    let mut waker = Prepared::new(cx.waker());
                    let mut wakes = WakeBatch::new();
                    let guard = lock.lock();
                    if self.node.reason() != Reason::Waiting {
                        continue;
                    }
                    // SAFETY: under the lock of the list the node is on; the node is ours.
                    unsafe { self.node.set_waker(&mut waker, self.on, &mut wakes) };
                    drop(guard);
                    return None;
                }
                reason => {
                    self.registered = false;
                    self.node.reset();
                    return Some(reason);
                }
            }
        }
    }

    /// Stores the waker in the node before the wait commits to anything, so that a
    /// waker whose `clone` panics panics here, while nothing has changed yet: a wait
    /// that must change the primitive's state before it registers (`Notify` announces
    /// WAITING) calls this first, and then [`register_primed`](Self::register_primed),
    /// which clones nothing. (`Barrier` registers first and counts its arrival after.)
    pub(crate) fn prime(&mut self, cx: &Context<'_>, wakes: &mut WakeBatch) {
        debug_assert!(!self.registered);
        // SAFETY: the node is ours and on no list (not registered): nobody else can
        // reach it, which is `set_waker`'s contract without the lock.
        unsafe {
            self.node
                .set_waker(&mut Prepared::new(cx.waker()), self.on, wakes)
        };
    }

    /// [`register`](Self::register) of a waiter that [`prime`](Self::prime) gave its
    /// waker in this same poll: puts the node on `list` and touches no waker. Not
    /// `register`: its `set_waker` clones again whenever the stored clone does not
    /// `will_wake` the context's waker (any waker whose clones do not share their
    /// data pointer), and a second clone that panicked did so after the caller had
    /// changed the primitive's state, with the node on no list (found in review:
    /// `Notify` left WAITING with nobody waiting, `tests/review_s26_diff.rs`).
    ///
    /// # Safety
    /// As [`register`](Self::register), and `prime` stored this poll's waker.
    pub(crate) unsafe fn register_primed(&mut self, list: &mut WaitList<()>) {
        debug_assert!(!self.registered);
        // SAFETY: the contract.
        unsafe { list.push_back(&self.node) };
        self.registered = true;
    }

    /// Puts the node on `list` (the commit point of the wait), with `waker` (made
    /// before the lock: see [`Prepared`]).
    ///
    /// # Safety
    /// The caller holds the lock `list` belongs to, and the waiter is pinned (it stays
    /// at its address until [`Waiter::cancel`] or a completion takes it off; the
    /// owning future's `Drop` must call `cancel`).
    pub(crate) unsafe fn register(
        &mut self,
        list: &mut WaitList<()>,
        waker: &mut Prepared<'_>,
        wakes: &mut WakeBatch,
    ) {
        debug_assert!(!self.registered);
        // SAFETY: the contract.
        unsafe {
            self.node.set_waker(waker, self.on, wakes);
            list.push_back(&self.node);
        }
        self.registered = true;
    }

    /// Takes the node off `list` if it is still on it (under `guard`, the lock). Returns
    /// the reason it had been completed with when it was not on the list any more
    /// (`None`: it was still waiting, or not registered).
    pub(crate) fn cancel<S>(
        &mut self,
        guard: &mut LockGuard<'_, S>,
        list: impl FnOnce(&mut S) -> &mut WaitList<()>,
    ) -> Option<Reason> {
        if !self.registered {
            return None;
        }
        self.registered = false;
        // SAFETY: under the lock; the node is on this list or on none.
        let removed = unsafe { list(guard).remove(&self.node) };
        let reason = self.node.reason();
        self.node.reset();
        if removed {
            None
        } else {
            Some(reason)
        }
    }
}

impl Waiter {
    /// A future that is dropped takes its node off `list` under `lock`, if it is on
    /// one (the future's `Drop`).
    pub(crate) fn withdraw<S>(
        &mut self,
        lock: &Lock<S>,
        list: impl FnOnce(&mut S) -> &mut WaitList<()>,
    ) {
        if self.is_registered() {
            let mut st = lock.lock();
            self.cancel(&mut st, list);
        }
    }
}

/// Completes every waiter on `list` with `reason`.
///
/// # Safety
/// The caller holds the lock `list` belongs to.
pub(crate) unsafe fn wake_all(list: &mut WaitList<()>, reason: Reason, wakes: &mut WakeBatch) {
    // SAFETY: the contract; each node is off the list when it is told.
    unsafe { list.drain(|node| node.notify(reason, wakes)) };
}

/// Completes the first waiter on `list` with `reason`; `false` if there was none.
///
/// # Safety
/// The caller holds the lock `list` belongs to.
pub(crate) unsafe fn wake_one(
    list: &mut WaitList<()>,
    reason: Reason,
    wakes: &mut WakeBatch,
) -> bool {
    // SAFETY: the contract; the node is off the list when it is told.
    unsafe {
        match list.take_first(|_| true) {
            Some(node) => {
                (*node).notify(reason, wakes);
                true
            }
            None => false,
        }
    }
}
