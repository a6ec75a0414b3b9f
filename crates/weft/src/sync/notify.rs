//! `Notify`: one stored permit, a FIFO of waiters, and a generation counted by
//! `notify_waiters` (a `Notified` made before a `notify_waiters` call completes even if
//! it was never polled before the call).
//!
//! The permit, "somebody waits" and the generation live in one atomic word, so that
//! `notify_one` with nobody waiting (store the permit, or find it already stored) and
//! `notified()` that finds the permit take no lock: a thread that notifies in a loop
//! (a producer outside the pool) would otherwise hold the waiters' lock most of the
//! time, and the woken waiters, spinning on that lock to re-register, convoy behind it.
//!
//! The protocol (`state`: generation << 2 | EMPTY, WAITING or NOTIFIED):
//! * WAITING holds exactly while the wait list is non-empty. Only a holder of the lock
//!   moves the word into or out of WAITING, and nobody else writes the word while it
//!   is WAITING (the lock-free moves below start from EMPTY or NOTIFIED), so under the
//!   lock a WAITING word can be stored outright.
//! * EMPTY <-> NOTIFIED move lock-free, by CAS: `notify_one` stores the permit,
//!   `notified()` consumes it. EMPTY -> WAITING is a CAS under the lock (a lock-free
//!   `notify_one` may turn EMPTY into NOTIFIED at the same time: then the waiter
//!   consumes that permit instead of registering).
//! * `notify_waiters` adds to the generation: by CAS without the lock while nobody
//!   waits, under the lock (draining the list) while the word is WAITING. A waiter
//!   that registers CASes EMPTY -> WAITING under the lock before it goes on the list,
//!   so it either sees the new generation (its CAS failed) or is on the list when the
//!   call, finding WAITING, takes the lock and drains it.

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
    /// The waiters; [`state`](Self::state) is WAITING exactly while it is non-empty.
    waiters: Lock<WaitList<()>>,
    /// `generation << GEN_SHIFT | EMPTY, WAITING or NOTIFIED` (see the module's
    /// protocol).
    state: AtomicUsize,
}

/// Nobody waits and no permit is stored.
const EMPTY: usize = 0;
/// The wait list is non-empty (so no permit is stored).
const WAITING: usize = 1;
/// A permit is stored (so nobody waits).
const NOTIFIED: usize = 2;
const STATE_MASK: usize = 3;
/// `notify_waiters` adds this to the word: the generation is the bits above the state.
const GEN_ONE: usize = 4;

/// Rounds a `notified()` that finds nothing watches the word before it registers (see
/// `Notified::poll`); none under loom, where the fast path it repeats is modelled once.
const PERMIT_SPINS: u32 = if cfg!(loom) { 0 } else { 8 };

fn with_state(word: usize, state: usize) -> usize {
    (word & !STATE_MASK) | state
}

fn generation(word: usize) -> usize {
    word & !STATE_MASK
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
            waiters: Lock::new(WaitList::default()),
            state: AtomicUsize::new(EMPTY),
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
            generation: generation(self.state.load(SeqCst)),
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
        let mut word = self.state.load(SeqCst);
        // Nobody waits: store the permit without the lock (or find it stored: a load
        // only, so a caller that notifies in a loop keeps the word's line shared).
        loop {
            match word & STATE_MASK {
                NOTIFIED => return,
                EMPTY => match self.state.compare_exchange(
                    word,
                    with_state(word, NOTIFIED),
                    SeqCst,
                    SeqCst,
                ) {
                    Ok(_) => return,
                    Err(now) => word = now,
                },
                _ => break,
            }
        }
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        self.notify_one_locked(&mut list, &mut wakes);
        drop(list);
    }

    /// `notify_one` under the lock: the first waiter, or the permit if none waits.
    fn notify_one_locked(&self, list: &mut WaitList<()>, wakes: &mut WakeBatch) {
        let mut word = self.state.load(SeqCst);
        loop {
            if word & STATE_MASK == WAITING {
                // SAFETY: under the lock.
                let woke = unsafe { wake_one(list, Reason::Data, wakes) };
                debug_assert!(woke, "WAITING with an empty wait list");
                if list.is_empty() {
                    // Nobody writes a WAITING word without the lock: a plain store.
                    self.state.store(with_state(word, EMPTY), SeqCst);
                }
                return;
            }
            // EMPTY or NOTIFIED: lock-free notifiers and consumers may race us.
            match self
                .state
                .compare_exchange(word, with_state(word, NOTIFIED), SeqCst, SeqCst)
            {
                Ok(_) => return,
                Err(now) => word = now,
            }
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
        // Nobody waits: a new generation, without the lock. A waiter that registers
        // meanwhile moves the word to WAITING by CAS under the lock before it goes on
        // the list, so one of the two CASes fails: this one (then the waiter is on the
        // list once the lock is ours), or the waiter's (it sees the new generation).
        let mut word = self.state.load(SeqCst);
        while word & STATE_MASK != WAITING {
            match self
                .state
                .compare_exchange(word, word.wrapping_add(GEN_ONE), SeqCst, SeqCst)
            {
                Ok(_) => return,
                Err(now) => word = now,
            }
        }
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        let word = self.state.load(SeqCst);
        if word & STATE_MASK == WAITING {
            // SAFETY: under the lock.
            unsafe { wake_all(&mut list, Reason::Signal, &mut wakes) };
            // WAITING is only written under the lock: a plain store.
            self.state
                .store(with_state(word.wrapping_add(GEN_ONE), EMPTY), SeqCst);
        } else {
            // The waiters left meanwhile; EMPTY or NOTIFIED may change lock-free:
            // leave the low bits be.
            self.state.fetch_add(GEN_ONE, SeqCst);
        }
        drop(list);
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
                .poll_registered(&this.notify.waiters, cx)
                .is_none()
            {
                return Poll::Pending;
            }
            this.done = true;
            return Poll::Ready(());
        }
        let notify: &Notify = this.notify;
        let state = &notify.state;
        // The permit (or a `notify_waiters` since `notified()`) without the lock.
        let word = state.load(SeqCst);
        if this.try_complete(word).is_ok() {
            return Poll::Ready(());
        }
        // Nobody waits and no permit yet: a notifier that is already on its way often
        // stores one within a cache-line transfer or two. Registering instead costs a
        // full round (the lock, the node, `Pending`, a wake through the scheduler and
        // a poll), and on a busy worker it lets a notifier running in a loop find the
        // waiter queued, so the next permit waits for that round too. So watch the
        // word a few hundred nanoseconds first (measured: `notify_one_10` of weft-bench
        // `sync`, a thread notifying 10 tasks in a loop, registered 54-78 times per 500
        // notifications without this and about 9 with it; tokio/weft time 0.86
        // before, 0.96 after, in session 17's alternated runs). A WAITING word means
        // earlier waiters get the next `notify_one`: no point watching. Only the lock-free fast path repeats here,
        // so the protocol is unchanged.
        if word & STATE_MASK != WAITING {
            for _ in 0..PERMIT_SPINS {
                std::hint::spin_loop();
                let word = state.load(SeqCst);
                if word & STATE_MASK == WAITING {
                    break;
                }
                if this.try_complete(word).is_ok() {
                    return Poll::Ready(());
                }
            }
        }
        let mut wakes = WakeBatch::new();
        // The waker first: a `clone` that panics must do so before the word says
        // WAITING (with nobody on the list, a `notify_one` would store no permit). And
        // before the lock: a `clone` is its owner's code (see `Prepared`).
        this.waiter.prime(cx, &mut wakes);
        let mut list = notify.waiters.lock();
        let mut word = state.load(SeqCst);
        loop {
            match this.try_complete(word) {
                Ok(()) => return Poll::Ready(()),
                Err(Some(now)) => {
                    word = now;
                    continue;
                }
                Err(None) => {}
            }
            if word & STATE_MASK == WAITING {
                break;
            }
            // EMPTY: announce the waiter before it goes on the list (both under the
            // lock, so a `notify_one` that sees WAITING finds it there); a permit
            // stored meanwhile fails the CAS and is consumed on the next turn.
            match state.compare_exchange(word, with_state(word, WAITING), SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => word = now,
            }
        }
        // SAFETY: under the lock; the future is pinned and its `Drop` cancels; `prime`
        // stored this poll's waker above (no clone may run past the CAS to WAITING).
        unsafe { this.waiter.register_primed(&mut list) };
        drop(list);
        Poll::Pending
    }
}

impl Notified<'_> {
    /// Completes an unregistered wait from the state word `word` if it can: a
    /// `notify_waiters` since `notified()` (`Ok`), or the stored permit, consumed
    /// (`Ok`; `Err(Some(now))` when the CAS lost to a change: look again). `Err(None)`:
    /// nothing to take, the caller waits.
    fn try_complete(&mut self, word: usize) -> Result<(), Option<usize>> {
        if generation(word) != self.generation {
            self.done = true;
            return Ok(());
        }
        if word & STATE_MASK != NOTIFIED {
            return Err(None);
        }
        match self
            .notify
            .state
            .compare_exchange(word, with_state(word, EMPTY), SeqCst, SeqCst)
        {
            Ok(_) => {
                self.done = true;
                Ok(())
            }
            Err(now) => Err(Some(now)),
        }
    }
}

impl Drop for Notified<'_> {
    fn drop(&mut self) {
        if !self.waiter.is_registered() {
            return;
        }
        let mut wakes = WakeBatch::new();
        let mut list = self.notify.waiters.lock();
        match self.waiter.cancel(&mut list, |l| l) {
            // Chosen by `notify_one` but never told: pass it on.
            Some(Reason::Data) => self.notify.notify_one_locked(&mut list, &mut wakes),
            // Taken off the list: if it was the last waiter, nobody waits now (the word
            // is WAITING, which only lock holders write).
            None if list.is_empty() => {
                let word = self.notify.state.load(SeqCst);
                debug_assert_eq!(word & STATE_MASK, WAITING);
                self.notify.state.store(with_state(word, EMPTY), SeqCst);
            }
            _ => {}
        }
        drop(list);
    }
}

impl fmt::Debug for Notified<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad("Notified { .. }")
    }
}
