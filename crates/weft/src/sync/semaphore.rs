//! The counting semaphore, and the permit core (`Sem`) that `Mutex` and `RwLock` are
//! built on.
//!
//! The count lives in one atomic word (`permits << 2 | WAITERS | CLOSED`) so that an
//! uncontended acquire and release are one CAS each. Waiters are wait-list nodes in a
//! FIFO list under the semaphore's wait-list lock. Invariants:
//!
//! - the word changes only by CAS; while `WAITERS` is set the permit field is zero, and
//!   it grows only under the lock (a release that sees `WAITERS` takes the lock);
//! - `WAITERS` is set exactly while the list is non-empty (both change under the lock);
//! - released permits go to the first waiter first: it *absorbs* them (its node's slot
//!   counts what it still needs) until it has all it asked for, then it is taken off
//!   the list and marked `Data`. So a waiter asking for many permits holds back every
//!   permit released after it queued (FIFO fairness: nobody behind it, and no
//!   `try_acquire`, can take them);
//! - a waiter that leaves (its future dropped) gives back what it absorbed, through the
//!   same release path, so the next waiter gets it; a waiter already marked `Data`
//!   whose future is dropped before it saw that gives back all of its permits.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};
use std::task::{Context, Poll};

use crate::base::{Arc, AtomicUsize};
use crate::waitlist::{Lock, Node, Prepared, Reason, WaitList, WakeBatch};

const CLOSED: usize = 1;
const WAITERS: usize = 2;
const SHIFT: u32 = 2;

/// A waiter's slot: (permits asked for, permits still missing).
type Need = (usize, usize);

/// The permit core: a count and a FIFO of waiters.
pub(crate) struct Sem {
    word: AtomicUsize,
    waiters: Lock<WaitList<Need>>,
}

/// Why an acquire did not get its permits now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TryFail {
    Closed,
    NoPermits,
}

impl Sem {
    /// The largest number of permits a semaphore may hold.
    pub(crate) const MAX_PERMITS: usize = usize::MAX >> 3;

    pub(crate) fn new(permits: usize) -> Sem {
        assert!(
            permits <= Self::MAX_PERMITS,
            "a semaphore holds at most {} permits, not {permits}",
            Self::MAX_PERMITS
        );
        Sem {
            word: AtomicUsize::new(permits << SHIFT),
            waiters: Lock::new(WaitList::default()),
        }
    }

    pub(crate) fn available(&self) -> usize {
        self.word.load(Acquire) >> SHIFT
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.word.load(Acquire) & CLOSED != 0
    }

    /// Acquires `n` permits, waiting in line for them (`Err` once closed). The wait
    /// node is made only when the permits are not there at once: making it (and moving
    /// it into the caller's future) cost some 15% of six joined acquires in one
    /// `block_on` (313 against 268 ns, measured).
    pub(crate) async fn acquire(&self, n: usize) -> Result<(), ()> {
        match self.acquire_now(n) {
            Some(r) => r,
            None => AcquireRaw::new(self, n).await,
        }
    }

    /// An acquire's answer without waiting: `None` when it must wait in line.
    fn acquire_now(&self, n: usize) -> Option<Result<(), ()>> {
        match self.try_acquire(n) {
            Ok(()) => Some(Ok(())),
            Err(TryFail::Closed) => Some(Err(())),
            Err(TryFail::NoPermits) => None,
        }
    }

    /// Takes `n` permits if they are free now.
    pub(crate) fn try_acquire(&self, n: usize) -> Result<(), TryFail> {
        let mut cur = self.word.load(Acquire);
        loop {
            if cur & CLOSED != 0 {
                return Err(TryFail::Closed);
            }
            if cur >> SHIFT < n {
                return Err(TryFail::NoPermits);
            }
            match self
                .word
                .compare_exchange_weak(cur, cur - (n << SHIFT), AcqRel, Acquire)
            {
                Ok(_) => return Ok(()),
                Err(now) => cur = now,
            }
        }
    }

    /// [`try_acquire`](Self::try_acquire) of one permit from a semaphore that holds at
    /// most one (a mutex's): first one CAS from the free word (one permit, nobody
    /// waiting, open), inlined into the caller, where the general path is a call and
    /// reads the word first. Uncontended, a lock and unlock from a plain thread took 7.2
    /// ns against `std`'s 5.2 and `parking_lot`'s 5.5 before (weft-bench `sync`,
    /// `threads_mutex_1`).
    #[inline]
    pub(crate) fn try_acquire_sole(&self) -> Result<(), TryFail> {
        match self.word.compare_exchange(1 << SHIFT, 0, AcqRel, Acquire) {
            Ok(_) => Ok(()),
            Err(_) => self.try_acquire(1),
        }
    }

    /// [`release`](Self::release) of the one permit of a semaphore that holds at most
    /// one (a mutex's unlock): first one CAS from the taken word with nobody waiting,
    /// inlined (see [`try_acquire_sole`](Self::try_acquire_sole)); anything else (a
    /// waiter to hand the permit to) goes the general way.
    #[inline]
    pub(crate) fn release_sole(&self) {
        if self
            .word
            .compare_exchange(0, 1 << SHIFT, AcqRel, Acquire)
            .is_err()
        {
            self.release(1);
        }
    }

    /// Gives `n` permits back (or adds them): to the waiters first, in order.
    pub(crate) fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut cur = self.word.load(Acquire);
        loop {
            if cur & WAITERS != 0 {
                break;
            }
            let next = (cur >> SHIFT)
                .checked_add(n)
                .filter(|&p| p <= Self::MAX_PERMITS)
                .expect("a semaphore holds at most usize::MAX >> 3 permits");
            match self.word.compare_exchange_weak(
                cur,
                (next << SHIFT) | (cur & CLOSED),
                AcqRel,
                Acquire,
            ) {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        self.release_locked(&mut list, n, &mut wakes);
        drop(list);
    }

    /// [`Sem::release`] under the lock: the first waiters absorb the permits, the rest
    /// go to the count.
    fn release_locked(&self, list: &mut WaitList<Need>, mut n: usize, wakes: &mut WakeBatch) {
        while n > 0 {
            let (mut found, mut done) = (false, false);
            // SAFETY: under the lock; each node on the list is alive and its slot holds
            // its need (set when it was queued). Only the first node is looked at.
            unsafe {
                list.any(|node| {
                    found = true;
                    let (total, missing) = node.take_slot().expect("a queued waiter's need");
                    let given = missing.min(n);
                    n -= given;
                    node.put_slot((total, missing - given));
                    done = missing == given;
                    true
                })
            };
            if !(found && done) {
                // No waiter, or the first absorbed everything (`n` is zero).
                break;
            }
            // SAFETY: under the lock; the first node is alive and now complete: off the
            // list, then told (its owner keeps it pinned until it has seen that).
            unsafe {
                let first = list.take_first(|_| true).expect("the first waiter");
                (*first).notify(Reason::Data, wakes);
            }
        }
        // SAFETY: under the lock (this function's caller holds it).
        let empty = unsafe { is_empty_locked(list) };
        // The permits left over, and the waiters bit brought up to date, in one step.
        let mut cur = self.word.load(Acquire);
        loop {
            let permits = (cur >> SHIFT)
                .checked_add(n)
                .filter(|&p| p <= Self::MAX_PERMITS)
                .expect("a semaphore holds at most usize::MAX >> 3 permits");
            let flags = if empty {
                cur & CLOSED
            } else {
                cur & CLOSED | WAITERS
            };
            match self
                .word
                .compare_exchange_weak(cur, (permits << SHIFT) | flags, AcqRel, Acquire)
            {
                Ok(_) => return,
                Err(now) => cur = now,
            }
        }
    }

    /// Closes: every waiter is told so (and what it absorbed goes back to the count),
    /// and every later acquire fails.
    pub(crate) fn close(&self) {
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        self.word.fetch_or(CLOSED, AcqRel);
        let mut back = 0;
        // SAFETY: under the lock; each drained node is off the list when `f` sees it.
        unsafe {
            list.drain(|node| {
                let (total, missing) = node.take_slot().expect("a queued waiter's need");
                back += total - missing;
                node.notify(Reason::Close, &mut wakes);
            });
        }
        let mut cur = self.word.load(Acquire);
        loop {
            let permits = ((cur >> SHIFT) + back).min(Self::MAX_PERMITS);
            match self
                .word
                .compare_exchange_weak(cur, (permits << SHIFT) | CLOSED, AcqRel, Acquire)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        drop(list);
    }

    /// Takes up to `n` permits off the count and sets `WAITERS` if not all were there.
    /// Under the lock. `Err` when closed; `Ok(missing)`.
    fn take_or_queue_locked(&self, n: usize) -> Result<usize, ()> {
        let mut cur = self.word.load(Acquire);
        loop {
            if cur & CLOSED != 0 {
                return Err(());
            }
            let have = cur >> SHIFT;
            let (next, missing) = if have >= n {
                (cur - (n << SHIFT), 0)
            } else {
                (cur & CLOSED | WAITERS, n - have)
            };
            match self.word.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) => return Ok(missing),
                Err(now) => cur = now,
            }
        }
    }

    /// One poll of an acquire of `n` permits whose node is `node`.
    pub(crate) fn poll_acquire(
        &self,
        node: &Node<Need>,
        n: usize,
        registered: &mut bool,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), ()>> {
        if *registered {
            match node.reason() {
                Reason::Data => {
                    *registered = false;
                    return Poll::Ready(Ok(()));
                }
                Reason::Waiting => {
                    let mut waker = Prepared::new(cx.waker());
                    let mut wakes = WakeBatch::new();
                    let list = self.waiters.lock();
                    if node.reason() == Reason::Waiting {
                        // SAFETY: under the lock; the node is ours.
                        unsafe {
                            node.set_waker(&mut waker, crate::waitlist::WaitOn::Lock, &mut wakes)
                        };
                        drop(list);
                        return Poll::Pending;
                    }
                    drop(list);
                    return self.poll_acquire(node, n, registered, cx);
                }
                _ => {
                    *registered = false;
                    return Poll::Ready(Err(()));
                }
            }
        }
        match self.try_acquire(n) {
            Ok(()) => return Poll::Ready(Ok(())),
            Err(TryFail::Closed) => return Poll::Ready(Err(())),
            Err(TryFail::NoPermits) => {}
        }
        // After the fast path: a batch costs its drop even when empty.
        let mut waker = Prepared::new(cx.waker());
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        match self.take_or_queue_locked(n) {
            Err(()) => Poll::Ready(Err(())),
            Ok(0) => Poll::Ready(Ok(())),
            Ok(missing) => {
                // SAFETY: under the lock; the node is ours, on no list, and the caller
                // keeps it pinned until `cancel_acquire` (its `Drop`) takes it off.
                unsafe {
                    node.put_slot((n, missing));
                    list.push_back(node);
                    *registered = true;
                    node.set_waker(&mut waker, crate::waitlist::WaitOn::Lock, &mut wakes);
                }
                drop(list);
                Poll::Pending
            }
        }
    }

    /// A registered acquire is dropped: off the list, and what it had (absorbed
    /// permits, or all of them if it was completed) goes to the next waiters.
    pub(crate) fn cancel_acquire(&self, node: &Node<Need>) {
        let mut wakes = WakeBatch::new();
        let mut list = self.waiters.lock();
        // SAFETY: under the lock, for every node access below.
        unsafe {
            if list.remove(node) {
                let (total, missing) = node.take_slot().expect("a queued waiter's need");
                // Clears `WAITERS` if it was the last, and hands on what it absorbed.
                self.release_locked(&mut list, total - missing, &mut wakes);
            } else if node.reason() == Reason::Data {
                let (total, _) = node.take_slot().expect("a served waiter's need");
                self.release_locked(&mut list, total, &mut wakes);
            }
        }
        drop(list);
    }

    /// Waiters queued now (for tests).
    #[allow(dead_code)]
    pub(crate) fn waiting(&self) -> usize {
        let list = self.waiters.lock();
        let mut n = 0;
        // SAFETY: under the lock.
        unsafe {
            list.any(|_| {
                n += 1;
                false
            })
        };
        n
    }
}

/// Whether no waiter is queued.
///
/// # Safety
/// The caller holds the lock of the list's owner.
unsafe fn is_empty_locked(list: &WaitList<Need>) -> bool {
    // SAFETY: the contract.
    !unsafe { list.any(|_| true) }
}

impl fmt::Debug for Sem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sem")
            .field("permits", &self.available())
            .field("closed", &self.is_closed())
            .finish()
    }
}

/// An acquire of `n` permits: owns its wait node, so dropping it at any point leaves
/// the semaphore as if it had never been made (permits already handed to it go to the
/// next waiter).
pub(crate) struct AcquireRaw<'a> {
    sem: &'a Sem,
    n: usize,
    node: Node<Need>,
    registered: bool,
}

impl<'a> AcquireRaw<'a> {
    pub(crate) fn new(sem: &'a Sem, n: usize) -> Self {
        AcquireRaw {
            sem,
            n,
            node: Node::new(),
            registered: false,
        }
    }
}

impl AcquireRaw<'_> {
    /// Whether its node waits and has been served (or told the semaphore closed).
    fn is_notified(&self) -> bool {
        self.registered && self.node.reason() != Reason::Waiting
    }
}

/// `wait` of an acquire whose node, once queued, is watched a while before the waiter
/// sleeps: a holder on the other core usually hands the permits over well within a
/// futex round trip, and the waiter sees that without being woken.
pub(crate) fn wait_acquire(sem: &Sem, n: usize) -> Result<(), ()> {
    // As `Sem::acquire`: no node when the permits are there.
    if let Some(r) = sem.acquire_now(n) {
        return r;
    }
    let mut fut = std::pin::pin!(AcquireRaw::new(sem, n));
    crate::wait(std::future::poll_fn(move |cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(v);
        }
        if spin_try(|| fut.is_notified().then_some(())).is_some() {
            return fut.as_mut().poll(cx);
        }
        Poll::Pending
    }))
}

impl Future for AcquireRaw<'_> {
    type Output = Result<(), ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: nothing is moved out of the pinned future; the node stays where it is.
        let this = unsafe { self.get_unchecked_mut() };
        this.sem
            .poll_acquire(&this.node, this.n, &mut this.registered, cx)
    }
}

impl Drop for AcquireRaw<'_> {
    fn drop(&mut self) {
        if self.registered {
            self.sem.cancel_acquire(&self.node);
        }
    }
}

use crate::fiber::wait::spin_try;

/// A blocking acquire's attempts before it queues: `attempt` at once, then while it
/// backs off ([`spin_try`]), and on a fiber whose worker has other work ready, again
/// after letting that work run, for up to [`OUTSIDE_LINE`].
///
/// Why a fiber yields instead of queueing as soon as its worker has work: a release
/// hands the permits to the first in line, so once a line forms every holder's
/// release is a hand-off, and the holder that locks again joins the back. With
/// fibers tied to two workers the line's order alternates between them and stays so
/// (each releaser queues again just behind the one it woke): every hand-off crossed
/// cores, some 500 ns against a few dozen for a lock that stays on one worker
/// (`fibers_mutex_16`: 380-650 ns an increment in such runs, may 200). A fiber that
/// yields keeps out of the line while the line drains, and once it is empty the lock
/// goes to whoever tries first, as an unqueued lock does (17-75 ns an increment, any
/// run; session 34). Bounded in time, so a fiber kept from the lock by a tight
/// re-locker elsewhere queues and is then served in turn.
pub(crate) fn try_outside_line<R>(attempt: impl FnMut() -> Option<R>) -> Option<R> {
    crate::fiber::wait::spin_yield_try(attempt, OUTSIDE_LINE)
}

/// How long a blocking acquire on a fiber keeps yielding before it queues.
const OUTSIDE_LINE: std::time::Duration = std::time::Duration::from_micros(20);

// ---- the public semaphore ----

/// A counting semaphore (tokio's): permits are taken with [`acquire`](Self::acquire)
/// and given back when the [`SemaphorePermit`] drops.
///
/// Fair: waiters are served in the order they started waiting, and a waiter asking for
/// several permits holds back every permit released after it queued until it has all
/// of them, so later acquires (and [`try_acquire`](Self::try_acquire)) cannot overtake
/// it. The same semaphore serves async tasks, fibers and plain threads at once.
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::Semaphore;
///
/// let rt = weft::Runtime::new().unwrap();
/// let sem = Arc::new(Semaphore::new(2));
/// let a = sem.try_acquire().unwrap();
/// let _b = sem.try_acquire().unwrap();
/// assert!(sem.try_acquire().is_err());
/// let s = sem.clone();
/// let waiter = rt.spawn(async move { s.acquire().await.unwrap().forget() });
/// drop(a); // handed straight to the waiting task
/// waiter.join().unwrap();
/// assert_eq!(sem.available_permits(), 0);
/// ```
pub struct Semaphore {
    sem: Sem,
}

/// The permits taken from a [`Semaphore`]; given back when dropped.
///
/// ```
/// let sem = weft::sync::Semaphore::new(3);
/// let p = sem.try_acquire_many(2).unwrap();
/// assert_eq!(p.num_permits(), 2);
/// drop(p);
/// assert_eq!(sem.available_permits(), 3);
/// ```
#[must_use = "the permits are given back as soon as this is dropped"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    permits: u32,
}

/// Permits taken from a [`Semaphore`] in an `Arc`; given back when dropped.
///
/// ```
/// use std::sync::Arc;
/// let sem = Arc::new(weft::sync::Semaphore::new(1));
/// let p = sem.clone().try_acquire_owned().unwrap();
/// let t = std::thread::spawn(move || drop(p)); // may move to another thread
/// t.join().unwrap();
/// assert_eq!(sem.available_permits(), 1);
/// ```
#[must_use = "the permits are given back as soon as this is dropped"]
pub struct OwnedSemaphorePermit {
    sem: Arc<Semaphore>,
    permits: u32,
}

/// The semaphore was closed: returned by an acquire that can no longer succeed.
///
/// ```
/// let sem = weft::sync::Semaphore::new(0);
/// sem.close();
/// assert!(sem.acquire_blocking().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireError(());

/// Why a `try_acquire` failed.
///
/// ```
/// use weft::sync::{Semaphore, TryAcquireError};
/// let sem = Semaphore::new(0);
/// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::NoPermits);
/// sem.close();
/// assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryAcquireError {
    /// The semaphore was closed.
    Closed,
    /// Not enough permits are free now.
    NoPermits,
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("semaphore closed")
    }
}

impl std::error::Error for AcquireError {}

impl fmt::Display for TryAcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryAcquireError::Closed => f.write_str("semaphore closed"),
            TryAcquireError::NoPermits => f.write_str("no permits available"),
        }
    }
}

impl std::error::Error for TryAcquireError {}

fn try_err(e: TryFail) -> TryAcquireError {
    match e {
        TryFail::Closed => TryAcquireError::Closed,
        TryFail::NoPermits => TryAcquireError::NoPermits,
    }
}

impl Semaphore {
    /// The largest number of permits a semaphore may hold (`usize::MAX >> 3`).
    ///
    /// ```
    /// assert_eq!(weft::sync::Semaphore::MAX_PERMITS, usize::MAX >> 3);
    /// ```
    pub const MAX_PERMITS: usize = Sem::MAX_PERMITS;

    /// A semaphore holding `permits` permits.
    ///
    /// Panics if `permits` exceeds [`MAX_PERMITS`](Self::MAX_PERMITS).
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(5);
    /// assert_eq!(sem.available_permits(), 5);
    /// ```
    pub fn new(permits: usize) -> Semaphore {
        Semaphore {
            sem: Sem::new(permits),
        }
    }

    /// The permits free now.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(2);
    /// let _p = sem.try_acquire().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub fn available_permits(&self) -> usize {
        self.sem.available()
    }

    /// Adds `n` permits; waiters are served first, in order.
    ///
    /// Panics if the count would exceed [`MAX_PERMITS`](Self::MAX_PERMITS).
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(0);
    /// sem.add_permits(2);
    /// assert_eq!(sem.available_permits(), 2);
    /// ```
    pub fn add_permits(&self, n: usize) {
        self.sem.release(n);
    }

    /// Waits for one permit. Fails once the semaphore is closed.
    ///
    /// Cancel safety: dropping the future gives up its place in the queue; if a permit
    /// had already been handed to it, the permit goes to the next waiter (or back to
    /// the count), so no permit and no wake-up is lost.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let sem = weft::sync::Semaphore::new(1);
    /// rt.block_on(async {
    ///     let p = sem.acquire().await.unwrap();
    ///     assert_eq!(sem.available_permits(), 0);
    ///     drop(p);
    /// });
    /// ```
    pub async fn acquire(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many(1).await
    }

    /// Waits for `n` permits at once, keeping its place in the queue meanwhile (the
    /// permits released after it queued are kept for it).
    ///
    /// Cancel safety: as [`acquire`](Self::acquire); the permits it had gathered go to
    /// the next waiters.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let sem = weft::sync::Semaphore::new(3);
    /// let p = rt.block_on(sem.acquire_many(3)).unwrap();
    /// assert_eq!(p.num_permits(), 3);
    /// ```
    pub async fn acquire_many(&self, n: u32) -> Result<SemaphorePermit<'_>, AcquireError> {
        match self.sem.acquire(n as usize).await {
            Ok(()) => Ok(SemaphorePermit {
                sem: self,
                permits: n,
            }),
            Err(()) => Err(AcquireError(())),
        }
    }

    /// [`acquire`](Self::acquire) for a semaphore in an `Arc`: the permit owns a
    /// reference, so it is `'static`.
    ///
    /// Cancel safety: as [`acquire`](Self::acquire).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let rt = weft::Runtime::new().unwrap();
    /// let sem = Arc::new(weft::sync::Semaphore::new(1));
    /// let p = rt.block_on(sem.clone().acquire_owned()).unwrap();
    /// rt.spawn(async move { drop(p) }).join().unwrap();
    /// assert_eq!(sem.available_permits(), 1);
    /// ```
    pub async fn acquire_owned(self: Arc<Self>) -> Result<OwnedSemaphorePermit, AcquireError> {
        self.acquire_many_owned(1).await
    }

    /// [`acquire_many`](Self::acquire_many) for a semaphore in an `Arc`.
    ///
    /// Cancel safety: as [`acquire_many`](Self::acquire_many).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let rt = weft::Runtime::new().unwrap();
    /// let sem = Arc::new(weft::sync::Semaphore::new(4));
    /// let p = rt.block_on(sem.clone().acquire_many_owned(4)).unwrap();
    /// assert_eq!(p.num_permits(), 4);
    /// ```
    pub async fn acquire_many_owned(
        self: Arc<Self>,
        n: u32,
    ) -> Result<OwnedSemaphorePermit, AcquireError> {
        match self.sem.acquire(n as usize).await {
            Ok(()) => Ok(OwnedSemaphorePermit {
                sem: self,
                permits: n,
            }),
            Err(()) => Err(AcquireError(())),
        }
    }

    /// Takes one permit if one is free now and nobody waits before it.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(1);
    /// let p = sem.try_acquire().unwrap();
    /// assert!(sem.try_acquire().is_err());
    /// drop(p);
    /// ```
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if they are free now and nobody waits before it.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(2);
    /// assert!(sem.try_acquire_many(3).is_err());
    /// assert!(sem.try_acquire_many(2).is_ok());
    /// ```
    pub fn try_acquire_many(&self, n: u32) -> Result<SemaphorePermit<'_>, TryAcquireError> {
        self.sem.try_acquire(n as usize).map_err(try_err)?;
        Ok(SemaphorePermit {
            sem: self,
            permits: n,
        })
    }

    /// [`try_acquire`](Self::try_acquire) for a semaphore in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(1));
    /// assert!(sem.clone().try_acquire_owned().is_ok());
    /// ```
    pub fn try_acquire_owned(self: Arc<Self>) -> Result<OwnedSemaphorePermit, TryAcquireError> {
        self.try_acquire_many_owned(1)
    }

    /// [`try_acquire_many`](Self::try_acquire_many) for a semaphore in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(2));
    /// assert_eq!(sem.clone().try_acquire_many_owned(2).unwrap().num_permits(), 2);
    /// ```
    pub fn try_acquire_many_owned(
        self: Arc<Self>,
        n: u32,
    ) -> Result<OwnedSemaphorePermit, TryAcquireError> {
        self.sem.try_acquire(n as usize).map_err(try_err)?;
        Ok(OwnedSemaphorePermit {
            sem: self,
            permits: n,
        })
    }

    /// Takes one permit, blocking by [`weft::wait`](crate::wait)'s rule while none is
    /// free: a fiber suspends, a worker goes on with other work, a plain thread
    /// blocks. Fails once the semaphore is closed.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(1);
    /// let p = sem.acquire_blocking().unwrap();
    /// assert_eq!(p.num_permits(), 1);
    /// ```
    pub fn acquire_blocking(&self) -> Result<SemaphorePermit<'_>, AcquireError> {
        self.acquire_many_blocking(1)
    }

    /// Takes `n` permits, blocking by [`weft::wait`](crate::wait)'s rule (see
    /// [`acquire_blocking`](Self::acquire_blocking)).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(0));
    /// let s = sem.clone();
    /// let t = std::thread::spawn(move || s.add_permits(2));
    /// assert_eq!(sem.acquire_many_blocking(2).unwrap().num_permits(), 2);
    /// t.join().unwrap();
    /// ```
    pub fn acquire_many_blocking(&self, n: u32) -> Result<SemaphorePermit<'_>, AcquireError> {
        let attempt = || match self.try_acquire_many(n) {
            Ok(p) => Some(Ok(p)),
            Err(TryAcquireError::Closed) => Some(Err(AcquireError(()))),
            Err(TryAcquireError::NoPermits) => None,
        };
        if let Some(r) = try_outside_line(attempt) {
            return r;
        }
        match wait_acquire(&self.sem, n as usize) {
            Ok(()) => Ok(SemaphorePermit {
                sem: self,
                permits: n,
            }),
            Err(()) => Err(AcquireError(())),
        }
    }

    /// Closes the semaphore: every waiter, in every context, gets [`AcquireError`], and
    /// so does every later acquire. Permits already held stay valid, and
    /// [`add_permits`](Self::add_permits) still adds.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(1);
    /// sem.close();
    /// assert!(sem.is_closed());
    /// assert!(sem.try_acquire().is_err());
    /// ```
    pub fn close(&self) {
        self.sem.close();
    }

    /// Whether [`close`](Self::close) was called.
    ///
    /// ```
    /// assert!(!weft::sync::Semaphore::new(1).is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        self.sem.is_closed()
    }

    /// Removes up to `n` free permits for good; returns how many it removed.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(3);
    /// assert_eq!(sem.forget_permits(5), 3);
    /// assert_eq!(sem.available_permits(), 0);
    /// ```
    pub fn forget_permits(&self, n: usize) -> usize {
        let mut cur = self.sem.word.load(Acquire);
        loop {
            let take = (cur >> SHIFT).min(n);
            match self
                .sem
                .word
                .compare_exchange_weak(cur, cur - (take << SHIFT), AcqRel, Relaxed)
            {
                Ok(_) => return take,
                Err(now) => cur = now,
            }
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("permits", &self.available_permits())
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl SemaphorePermit<'_> {
    /// Keeps the permits out of the semaphore for good.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(1);
    /// sem.try_acquire().unwrap().forget();
    /// assert_eq!(sem.available_permits(), 0);
    /// ```
    pub fn forget(mut self) {
        self.permits = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// let sem = weft::sync::Semaphore::new(2);
    /// assert_eq!(sem.try_acquire_many(2).unwrap().num_permits(), 2);
    /// ```
    pub fn num_permits(&self) -> usize {
        self.permits as usize
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        self.sem.sem.release(self.permits as usize);
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.permits)
            .finish()
    }
}

impl OwnedSemaphorePermit {
    /// Keeps the permits out of the semaphore for good.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(1));
    /// sem.clone().try_acquire_owned().unwrap().forget();
    /// assert_eq!(sem.available_permits(), 0);
    /// ```
    pub fn forget(mut self) {
        self.permits = 0;
    }

    /// How many permits this holds.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(1));
    /// assert_eq!(sem.clone().try_acquire_owned().unwrap().num_permits(), 1);
    /// ```
    pub fn num_permits(&self) -> usize {
        self.permits as usize
    }

    /// The semaphore these permits came from.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let sem = Arc::new(weft::sync::Semaphore::new(1));
    /// let p = sem.clone().try_acquire_owned().unwrap();
    /// assert!(Arc::ptr_eq(p.semaphore(), &sem));
    /// ```
    pub fn semaphore(&self) -> &Arc<Semaphore> {
        &self.sem
    }
}

impl Drop for OwnedSemaphorePermit {
    fn drop(&mut self) {
        self.sem.sem.release(self.permits as usize);
    }
}

impl fmt::Debug for OwnedSemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedSemaphorePermit")
            .field("permits", &self.permits)
            .finish()
    }
}
