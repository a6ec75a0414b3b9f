//! The write-preferring reader-writer lock: a [`Sem`] of `MAX_READS` permits beside the
//! data; a reader takes one permit, a writer all of them. Because the semaphore is FIFO
//! and a waiting writer absorbs every permit released after it queued, a waiting writer
//! makes `try_read` fail and queues new readers behind it.

use std::cell::UnsafeCell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use super::mutex::TryLockError;
use super::semaphore::{try_outside_line, wait_acquire, Sem};
use crate::base::Arc;

/// Readers a lock admits at once.
const MAX_READS: u32 = u32::MAX >> 3;

/// A reader-writer lock for every context (tokio's `RwLock`): many readers or one
/// writer, from async tasks, fibers and threads at once.
///
/// Write-preferring and fair: waiters are served in arrival order; once a writer
/// waits, [`try_read`](Self::try_read) fails and new readers queue behind it, so
/// readers cannot starve a writer. Guards may be held across waits.
///
/// ```
/// use std::sync::Arc;
/// use weft::sync::RwLock;
///
/// let rt = weft::Runtime::new().unwrap();
/// let lock = Arc::new(RwLock::new(1));
/// let l = lock.clone();
/// rt.block_on(async move {
///     let a = l.read().await;
///     let b = l.read().await; // many readers at once
///     assert_eq!(*a + *b, 2);
/// });
/// *lock.write_blocking() += 1;
/// assert_eq!(*lock.read_blocking(), 2);
/// ```
pub struct RwLock<T: ?Sized> {
    sem: Sem,
    data: UnsafeCell<T>,
}

// SAFETY: a writer gets `&mut T` on any thread (needs `T: Send`), readers share `&T`
// across threads (needs `T: Sync`).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}
// SAFETY: moving the lock moves the `T`.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}

/// Shared access to a [`RwLock`]'s data; released when dropped.
///
/// ```
/// let l = weft::sync::RwLock::new(3);
/// let g = l.try_read().unwrap();
/// assert_eq!(*g, 3);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

// SAFETY: a read guard gives the thread it is sent to `&T` (needs `T: Sync`) and
// releases a read permit there (the semaphore is `Sync`); it never moves or mutates the
// `T`, so unlike the auto impl (over `&RwLock<T>`) it does not need `T: Send` (tokio's
// bound).
unsafe impl<T: ?Sized + Sync> Send for RwLockReadGuard<'_, T> {}

/// Exclusive access to a [`RwLock`]'s data; released when dropped.
///
/// ```
/// let l = weft::sync::RwLock::new(3);
/// *l.try_write().unwrap() = 4;
/// assert_eq!(*l.try_read().unwrap(), 4);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
}

/// A [`RwLockReadGuard`] that owns an `Arc` of its lock.
///
/// ```
/// use std::sync::Arc;
/// let l = Arc::new(weft::sync::RwLock::new(1));
/// let g = l.clone().try_read_owned().unwrap();
/// std::thread::spawn(move || assert_eq!(*g, 1)).join().unwrap();
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedRwLockReadGuard<T: ?Sized> {
    lock: Arc<RwLock<T>>,
}

/// A [`RwLockWriteGuard`] that owns an `Arc` of its lock.
///
/// ```
/// use std::sync::Arc;
/// let l = Arc::new(weft::sync::RwLock::new(1));
/// let mut g = l.clone().try_write_owned().unwrap();
/// std::thread::spawn(move || *g += 1).join().unwrap();
/// assert_eq!(*l.try_read().unwrap(), 2);
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedRwLockWriteGuard<T: ?Sized> {
    lock: Arc<RwLock<T>>,
}

impl<T> RwLock<T> {
    /// An unlocked lock holding `value`.
    ///
    /// ```
    /// let l = weft::sync::RwLock::new("v");
    /// assert_eq!(l.into_inner(), "v");
    /// ```
    pub fn new(value: T) -> RwLock<T> {
        RwLock {
            sem: Sem::new(MAX_READS as usize),
            data: UnsafeCell::new(value),
        }
    }

    /// The data, taking the lock apart.
    ///
    /// ```
    /// assert_eq!(weft::sync::RwLock::new(2).into_inner(), 2);
    /// ```
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

macro_rules! acquired {
    ($e:expr) => {
        match $e {
            Ok(()) => {}
            Err(()) => unreachable!("a lock's semaphore is never closed"),
        }
    };
}

impl<T: ?Sized> RwLock<T> {
    /// Locks for reading, waiting in line while a writer holds the lock or waits for
    /// it.
    ///
    /// Cancel safety: dropping the future gives up its place in line; a read permit
    /// already handed to it is given back (and passed on to the next waiter), so no
    /// wake-up is lost.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let l = weft::sync::RwLock::new(5);
    /// assert_eq!(*rt.block_on(l.read()), 5);
    /// ```
    pub async fn read(&self) -> RwLockReadGuard<'_, T> {
        acquired!(self.sem.acquire(1).await);
        RwLockReadGuard { lock: self }
    }

    /// Locks for writing, waiting in line until no reader or writer holds it.
    ///
    /// Cancel safety: dropping the future gives up its place in line; the permits it
    /// had gathered (or the whole lock, if it had been handed it) go to the next
    /// waiters, so the lock is never kept by a dropped future.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let l = weft::sync::RwLock::new(5);
    /// rt.block_on(async { *l.write().await += 1 });
    /// assert_eq!(l.into_inner(), 6);
    /// ```
    pub async fn write(&self) -> RwLockWriteGuard<'_, T> {
        acquired!(self.sem.acquire(MAX_READS as usize).await);
        RwLockWriteGuard { lock: self }
    }

    /// [`read`](Self::read), blocking by [`weft::wait`](crate::wait)'s rule: a fiber
    /// suspends, a worker goes on with other work, a plain thread blocks.
    ///
    /// ```
    /// let l = weft::sync::RwLock::new(1);
    /// assert_eq!(*l.read_blocking(), 1);
    /// ```
    pub fn read_blocking(&self) -> RwLockReadGuard<'_, T> {
        if let Some(g) = try_outside_line(|| self.try_read().ok()) {
            return g;
        }
        acquired!(wait_acquire(&self.sem, 1));
        RwLockReadGuard { lock: self }
    }

    /// [`write`](Self::write), blocking by [`weft::wait`](crate::wait)'s rule.
    ///
    /// ```
    /// let l = weft::sync::RwLock::new(1);
    /// *l.write_blocking() = 2;
    /// assert_eq!(*l.read_blocking(), 2);
    /// ```
    pub fn write_blocking(&self) -> RwLockWriteGuard<'_, T> {
        if let Some(g) = try_outside_line(|| self.try_write().ok()) {
            return g;
        }
        acquired!(wait_acquire(&self.sem, MAX_READS as usize));
        RwLockWriteGuard { lock: self }
    }

    /// Locks for reading if that is possible now (no writer holds it or waits).
    ///
    /// ```
    /// let l = weft::sync::RwLock::new(1);
    /// let w = l.try_write().unwrap();
    /// assert!(l.try_read().is_err());
    /// drop(w);
    /// assert!(l.try_read().is_ok());
    /// ```
    pub fn try_read(&self) -> Result<RwLockReadGuard<'_, T>, TryLockError> {
        match self.sem.try_acquire(1) {
            Ok(()) => Ok(RwLockReadGuard { lock: self }),
            Err(_) => Err(TryLockError(())),
        }
    }

    /// Locks for writing if nobody holds the lock or waits for it now.
    ///
    /// ```
    /// let l = weft::sync::RwLock::new(1);
    /// let r = l.try_read().unwrap();
    /// assert!(l.try_write().is_err());
    /// drop(r);
    /// assert!(l.try_write().is_ok());
    /// ```
    pub fn try_write(&self) -> Result<RwLockWriteGuard<'_, T>, TryLockError> {
        match self.sem.try_acquire(MAX_READS as usize) {
            Ok(()) => Ok(RwLockWriteGuard { lock: self }),
            Err(_) => Err(TryLockError(())),
        }
    }

    /// [`read`](Self::read) for a lock in an `Arc`: the guard owns a reference.
    ///
    /// Cancel safety: as [`read`](Self::read).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let rt = weft::Runtime::new().unwrap();
    /// let l = Arc::new(weft::sync::RwLock::new(1));
    /// let g = rt.block_on(l.clone().read_owned());
    /// assert_eq!(*g, 1);
    /// ```
    pub async fn read_owned(self: Arc<Self>) -> OwnedRwLockReadGuard<T> {
        acquired!(self.sem.acquire(1).await);
        OwnedRwLockReadGuard { lock: self }
    }

    /// [`write`](Self::write) for a lock in an `Arc`: the guard owns a reference.
    ///
    /// Cancel safety: as [`write`](Self::write).
    ///
    /// ```
    /// use std::sync::Arc;
    /// let rt = weft::Runtime::new().unwrap();
    /// let l = Arc::new(weft::sync::RwLock::new(1));
    /// *rt.block_on(l.clone().write_owned()) += 1;
    /// assert_eq!(*l.try_read().unwrap(), 2);
    /// ```
    pub async fn write_owned(self: Arc<Self>) -> OwnedRwLockWriteGuard<T> {
        acquired!(self.sem.acquire(MAX_READS as usize).await);
        OwnedRwLockWriteGuard { lock: self }
    }

    /// [`try_read`](Self::try_read) for a lock in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let l = Arc::new(weft::sync::RwLock::new(1));
    /// assert!(l.clone().try_read_owned().is_ok());
    /// ```
    pub fn try_read_owned(self: Arc<Self>) -> Result<OwnedRwLockReadGuard<T>, TryLockError> {
        match self.sem.try_acquire(1) {
            Ok(()) => Ok(OwnedRwLockReadGuard { lock: self }),
            Err(_) => Err(TryLockError(())),
        }
    }

    /// [`try_write`](Self::try_write) for a lock in an `Arc`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let l = Arc::new(weft::sync::RwLock::new(1));
    /// assert!(l.clone().try_write_owned().is_ok());
    /// ```
    pub fn try_write_owned(self: Arc<Self>) -> Result<OwnedRwLockWriteGuard<T>, TryLockError> {
        match self.sem.try_acquire(MAX_READS as usize) {
            Ok(()) => Ok(OwnedRwLockWriteGuard { lock: self }),
            Err(_) => Err(TryLockError(())),
        }
    }

    /// The data, through the exclusive borrow (no locking needed).
    ///
    /// ```
    /// let mut l = weft::sync::RwLock::new(1);
    /// *l.get_mut() += 1;
    /// assert_eq!(l.into_inner(), 2);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T> From<T> for RwLock<T> {
    fn from(value: T) -> Self {
        RwLock::new(value)
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("RwLock");
        match self.try_read() {
            Ok(g) => d.field("data", &&*g),
            Err(_) => d.field("data", &format_args!("<locked>")),
        };
        d.finish()
    }
}

macro_rules! guard_impls {
    ($guard:ty, $permits:expr) => {
        impl<T: ?Sized> Deref for $guard {
            type Target = T;
            fn deref(&self) -> &T {
                // SAFETY: the guard holds a read permit (no writer exists) or all of
                // them (no other guard exists).
                unsafe { &*self.lock.data.get() }
            }
        }

        impl<T: ?Sized> Drop for $guard {
            fn drop(&mut self) {
                self.lock.sem.release($permits as usize);
            }
        }

        impl<T: ?Sized + fmt::Debug> fmt::Debug for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&**self, f)
            }
        }

        impl<T: ?Sized + fmt::Display> fmt::Display for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&**self, f)
            }
        }
    };
}

macro_rules! deref_mut {
    ($guard:ty) => {
        impl<T: ?Sized> DerefMut for $guard {
            fn deref_mut(&mut self) -> &mut T {
                // SAFETY: a write guard holds every permit: no other reference exists.
                unsafe { &mut *self.lock.data.get() }
            }
        }
    };
}

guard_impls!(RwLockReadGuard<'_, T>, 1);
guard_impls!(RwLockWriteGuard<'_, T>, MAX_READS);
guard_impls!(OwnedRwLockReadGuard<T>, 1);
guard_impls!(OwnedRwLockWriteGuard<T>, MAX_READS);
deref_mut!(RwLockWriteGuard<'_, T>);
deref_mut!(OwnedRwLockWriteGuard<T>);
