//! The wait-list lock and its lock-depth count (spec 003, "Lock depth, deferred wakes,
//! and hazards").
//!
//! Every object with wait lists guards them with a [`Lock`]. In debug builds each
//! thread counts the wait-list locks it holds, and a [`WakeBatch`](super::WakeBatch)
//! flushed while the count is not zero is reported as `WAKE-FLUSH-UNDER-LOCK`: a wake
//! under the lock lets the woken waiter run (on another worker) straight into the lock
//! its waker still holds, and a waker that runs user code there can deadlock.

use std::ops::{Deref, DerefMut};

use crate::base::Mutex;

#[cfg(debug_assertions)]
thread_local! {
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[cfg(debug_assertions)]
static UNDER_LOCK_FLUSHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A mutex whose holders are counted per thread (debug builds).
#[derive(Debug)]
pub(crate) struct Lock<T>(Mutex<T>);

/// Held while the lock is.
pub(crate) struct LockGuard<'a, T> {
    guard: crate::base::MutexGuard<'a, T>,
}

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Lock<T> {
        Lock(Mutex::new(value))
    }

    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        let guard = self.0.lock();
        #[cfg(debug_assertions)]
        let _ = DEPTH.try_with(|d| d.set(d.get() + 1));
        LockGuard { guard }
    }
}

impl<T> Drop for LockGuard<'_, T> {
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        let _ = DEPTH.try_with(|d| d.set(d.get().saturating_sub(1)));
    }
}

impl<T> Deref for LockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for LockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Reports a flush made while this thread holds a wait-list lock (debug builds).
#[inline]
pub(super) fn check_flush() {
    #[cfg(debug_assertions)]
    if DEPTH.try_with(|d| d.get()).unwrap_or(0) > 0 {
        UNDER_LOCK_FLUSHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        eprintln!("weft: WAKE-FLUSH-UNDER-LOCK: wakes flushed while a wait-list lock is held");
    }
}

/// `WAKE-FLUSH-UNDER-LOCK` reports so far (0 in release builds).
#[allow(dead_code)]
pub(crate) fn under_lock_flushes() -> u64 {
    #[cfg(debug_assertions)]
    return UNDER_LOCK_FLUSHES.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(debug_assertions))]
    0
}

/// The number of wait-list locks this thread holds (0 in release builds).
#[allow(dead_code)]
pub(crate) fn held() -> u32 {
    #[cfg(debug_assertions)]
    return DEPTH.try_with(|d| d.get()).unwrap_or(0);
    #[cfg(not(debug_assertions))]
    0
}
