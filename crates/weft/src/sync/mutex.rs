//! The fair mutex: a one-permit [`Sem`] beside the data.

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use super::semaphore::{try_outside_line, wait_acquire, Sem, TryFail};
use crate::base::Arc;

/// A mutual-exclusion lock for every context (tokio's `Mutex`): async tasks `.await`
/// [`lock`](Self::lock), fibers and threads call [`lock_blocking`](Self::lock_blocking),
/// all on the same lock at once.
///
/// Fair: waiters are served in arrival order, and an unlock hands the lock straight to
/// the first waiter, so a tight re-locker cannot starve it. Holding the guard across a
/// wait (an `.await`, a fiber's blocking call) is legal: that is what this lock is for.
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::Mutex;
///
/// let rt = weft::Runtime::new().unwrap();
/// let m = Arc::new(Mutex::new(0));
/// let (a, b) = (m.clone(), m.clone());
/// let task = rt.spawn(async move { *a.lock().await += 1 });
/// let fiber = rt.block_on(async move { weft::fiber::spawn(move || *b.lock_blocking() += 1) });
/// *m.lock_blocking() += 1; // a plain thread
/// task.join().unwrap();
/// fiber.join().unwrap();
/// assert_eq!(*m.lock_blocking(), 3);
/// ```
pub struct Mutex<T: ?Sized> {
    sem: Sem,
    data: UnsafeCell<T>,
}

// SAFETY: the mutex hands `&mut T` to one holder at a time, possibly on another thread,
// so it is `Sync` (and `Send`) when `T` may be sent.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

/// Exclusive access to a [`Mutex`]'s data; unlocks (handing the lock to the first
/// waiter) when dropped.
///
/// ```
/// let m = weft::sync::Mutex::new(vec![1]);
/// m.try_lock().unwrap().push(2);
/// assert_eq!(*m.try_lock().unwrap(), [1, 2]);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: ?Sized> {
    lock: &'a Mutex<T>,
}

// SAFETY: a shared guard gives `&T` to other threads: needs `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

/// A [`MutexGuard`] that owns an `Arc` of its mutex, so it is `'static`.
///
/// ```
/// use std::sync::Arc;
/// let m = Arc::new(weft::sync::Mutex::new(1));
/// let g = m.clone().try_lock_owned().unwrap();
/// std::thread::spawn(move || assert_eq!(*g, 1)).join().unwrap();
/// ```
///
/// Shared across threads only when `T: Send + Sync` (as tokio's): a shared guard
/// hands out the `Arc` ([`mutex`](Self::mutex)), whose clone may drop the `T` on
/// another thread.
///
/// ```compile_fail
/// fn sync<T: Sync>() {}
/// // `Sync` but not `Send`:
/// sync::<weft::sync::OwnedMutexGuard<std::sync::MutexGuard<'static, ()>>>();
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedMutexGuard<T: ?Sized> {
    lock: Arc<Mutex<T>>,
}

// SAFETY: a shared guard gives `&T` to other threads (needs `T: Sync`) and
// `&Arc<Mutex<T>>` (`mutex()`), whose clone can be the last one and drop the `T` on
// that thread (needs `T: Send`). Sending the guard is the auto impl (`Arc<Mutex<T>>`).
unsafe impl<T: ?Sized + Send + Sync> Sync for OwnedMutexGuard<T> {}

/// The lock was held: returned by [`Mutex::try_lock`] (and the `RwLock`'s `try_`
/// methods).
///
/// ```
/// let m = weft::sync::Mutex::new(());
/// let _g = m.try_lock().unwrap();
/// assert!(m.try_lock().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryLockError(pub(super) ());

impl fmt::Display for TryLockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("operation would block")
    }
}

impl std::error::Error for TryLockError {}

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    ///
    /// ```
    /// let m = weft::sync::Mutex::new(5);
    /// assert_eq!(m.into_inner(), 5);
    /// ```
    pub fn new(value: T) -> Mutex<T> {
        Mutex {
            sem: Sem::new(1),
            data: UnsafeCell::new(value),
        }
    }

    /// The data, taking the mutex apart.
    ///
    /// ```
    /// let m = weft::sync::Mutex::new("x");
    /// assert_eq!(m.into_inner(), "x");
    /// ```
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, waiting in line while it is held.
    ///
    /// Cancel safety: dropping the future gives up its place in line; if the lock had
    /// already been handed to it, the lock goes on to the next waiter (or is released),
    /// so it is never kept by a future that was dropped, and no wake-up is lost.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let m = weft::sync::Mutex::new(1);
    /// rt.block_on(async {
    ///     *m.lock().await += 1;
    /// });
    /// assert_eq!(*m.try_lock().unwrap(), 2);
    /// ```
    pub async fn lock(&self) -> MutexGuard<'_, T> {
        match self.sem.acquire(1).await {
            Ok(()) => MutexGuard { lock: self },
            Err(()) => unreachable!("a mutex's semaphore is never closed"),
        }
    }

    /// Locks, blocking by [`weft::wait`](crate::wait)'s rule while it is held: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// Do not call it while holding a `std::sync::Mutex` guard on a fiber: the fiber
    /// suspends with that guard held, and another fiber of the same worker that wants
    /// the std mutex blocks the worker thread, which can deadlock. weft cannot detect
    /// that.
    ///
    /// ```
    /// let m = weft::sync::Mutex::new(0);
    /// *m.lock_blocking() += 1;
    /// assert_eq!(*m.lock_blocking(), 1);
    /// ```
    #[inline]
    pub fn lock_blocking(&self) -> MutexGuard<'_, T> {
        match self.try_lock() {
            Ok(g) => g,
            Err(_) => self.lock_blocking_slow(),
        }
    }

    /// [`lock_blocking`](Self::lock_blocking) of a lock that was not free: apart, so
    /// that the free lock's path (one CAS) is what gets inlined into the caller, however
    /// the spin and the wait grow (a version with them inline was not inlined at all).
    #[inline(never)]
    fn lock_blocking_slow(&self) -> MutexGuard<'_, T> {
        // Retried even while others are queued, although a release hands the lock to
        // them first: a locker that stays out of the line keeps it short. Queued at once
        // behind them, lockers fed the fair lock's convoy (`tests/sync_mutex.rs`'s stress
        // of threads, fibers and tasks took 12-30 s instead of 3-6).
        if let Some(g) = try_outside_line(|| self.try_lock().ok()) {
            return g;
        }
        match wait_acquire(&self.sem, 1) {
            Ok(()) => MutexGuard { lock: self },
            Err(()) => unreachable!("a mutex's semaphore is never closed"),
        }
    }

    /// Locks if the lock is free now and nobody waits for it.
    ///
    /// ```
    /// let m = weft::sync::Mutex::new(1);
    /// let g = m.try_lock().unwrap();
    /// assert!(m.try_lock().is_err());
    /// drop(g);
    /// assert!(m.try_lock().is_ok());
    /// ```
    pub fn try_lock(&self) -> Result<MutexGuard<'_, T>, TryLockError> {
        match self.sem.try_acquire_sole() {
            Ok(()) => Ok(MutexGuard { lock: self }),
            Err(TryFail::NoPermits | TryFail::Closed) => Err(TryLockError(())),
        }
    }

    /// [`lock`](Self::lock) for a mutex in an `Arc`: the guard owns a reference.
    ///
    /// Cancel safety: as [`lock`](Self::lock).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let rt = weft::Runtime::new().unwrap();
    /// let m = Arc::new(weft::sync::Mutex::new(0));
    /// let g = rt.block_on(m.clone().lock_owned());
    /// rt.spawn(async move { drop(g) }).join().unwrap();
    /// assert!(m.try_lock().is_ok());
    /// ```
    pub async fn lock_owned(self: Arc<Self>) -> OwnedMutexGuard<T> {
        match self.sem.acquire(1).await {
            Ok(()) => {}
            Err(()) => unreachable!("a mutex's semaphore is never closed"),
        }
        OwnedMutexGuard { lock: self }
    }

    /// [`try_lock`](Self::try_lock) for a mutex in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let m = Arc::new(weft::sync::Mutex::new(0));
    /// let g = m.clone().try_lock_owned().unwrap();
    /// assert!(m.clone().try_lock_owned().is_err());
    /// drop(g);
    /// ```
    pub fn try_lock_owned(self: Arc<Self>) -> Result<OwnedMutexGuard<T>, TryLockError> {
        match self.sem.try_acquire_sole() {
            Ok(()) => Ok(OwnedMutexGuard { lock: self }),
            Err(_) => Err(TryLockError(())),
        }
    }

    /// The data, through the exclusive borrow (no locking needed).
    ///
    /// ```
    /// let mut m = weft::sync::Mutex::new(1);
    /// *m.get_mut() = 2;
    /// assert_eq!(m.into_inner(), 2);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> From<T> for Mutex<T> {
    fn from(value: T) -> Self {
        Mutex::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Mutex");
        match self.try_lock() {
            Ok(g) => d.field("data", &&*g),
            Err(_) => d.field("data", &format_args!("<locked>")),
        };
        d.finish()
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock's one permit: no other reference exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` makes this the only use of the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.sem.release_sole();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

impl<T: ?Sized> OwnedMutexGuard<T> {
    /// The mutex this guard locks.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let m = Arc::new(weft::sync::Mutex::new(0));
    /// let g = m.clone().try_lock_owned().unwrap();
    /// assert!(Arc::ptr_eq(g.mutex(), &m));
    /// ```
    pub fn mutex(&self) -> &Arc<Mutex<T>> {
        &self.lock
    }
}

impl<T: ?Sized> Deref for OwnedMutexGuard<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock's one permit: no other reference exists.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for OwnedMutexGuard<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for OwnedMutexGuard<T> {
    fn drop(&mut self) {
        self.lock.sem.release_sole();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for OwnedMutexGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: ?Sized + fmt::Display> fmt::Display for OwnedMutexGuard<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}
