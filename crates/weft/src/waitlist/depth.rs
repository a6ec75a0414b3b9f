//! The wait-list lock and its lock-depth count (spec 003, "Lock depth, deferred wakes,
//! and hazards").
//!
//! Every object with wait lists guards them with a [`Lock`]. With diagnostics on (debug
//! builds, or `WEFT_DEBUG_LOCKS=1` in release builds: [`diagnostics_on`]) each thread
//! counts the wait-list locks it holds, and a [`WakeBatch`](super::WakeBatch)
//! flushed while the count is not zero is reported as `WAKE-FLUSH-UNDER-LOCK`: a wake
//! under the lock lets the woken waiter run (on another worker) straight into the lock
//! its waker still holds, and a waker that runs user code there can deadlock.

use std::ops::{Deref, DerefMut};

thread_local! {
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// `DEPTH.try_with`, never inlined (see `scheduler::worker::current_cell`).
#[inline(never)]
fn depth_cell<R>(
    f: impl FnOnce(&std::cell::Cell<u32>) -> R,
) -> Result<R, std::thread::AccessError> {
    DEPTH.try_with(f)
}

static UNDER_LOCK_FLUSHES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether lock-depth diagnostics (`WAKE-FLUSH-UNDER-LOCK`, `PARK-UNDER-LOCK`) are on:
/// always in debug builds; in release builds when `WEFT_DEBUG_LOCKS=1` (read once).
#[inline]
pub(crate) fn diagnostics_on() -> bool {
    if cfg!(debug_assertions) {
        return true;
    }
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};
    // 0: not read yet, 1: off, 2: on.
    static ON: AtomicU8 = AtomicU8::new(0);
    match ON.load(Relaxed) {
        0 => {
            let on = std::env::var_os("WEFT_DEBUG_LOCKS").is_some_and(|v| v == "1");
            // The first answer stands (a lock and its unlock must agree).
            match ON.compare_exchange(0, if on { 2 } else { 1 }, Relaxed, Relaxed) {
                Ok(_) => on,
                Err(now) => now == 2,
            }
        }
        v => v == 2,
    }
}

/// A mutex whose holders are counted per thread (debug builds).
///
/// Outside loom it is a spin lock that yields its core while it waits: a wait-list
/// critical section is a few dozen instructions and never runs user code, so a waiter
/// would spend far longer in a futex sleep and wake (about 40 us here) than the holder
/// keeps the lock, and with more threads than cores a sleeping waiter turns one
/// preempted holder into a convoy.
pub(crate) struct Lock<T> {
    #[cfg(loom)]
    inner: crate::base::Mutex<T>,
    #[cfg(not(loom))]
    locked: std::sync::atomic::AtomicBool,
    #[cfg(not(loom))]
    value: std::cell::UnsafeCell<T>,
}

// SAFETY: the lock gives one thread at a time access to the value, so it may be shared
// when the value may be sent.
#[cfg(not(loom))]
unsafe impl<T: Send> Sync for Lock<T> {}
// SAFETY: as above.
#[cfg(not(loom))]
unsafe impl<T: Send> Send for Lock<T> {}

/// Held while the lock is.
pub(crate) struct LockGuard<'a, T> {
    #[cfg(loom)]
    guard: crate::base::MutexGuard<'a, T>,
    #[cfg(not(loom))]
    lock: &'a Lock<T>,
}

impl<T> Lock<T> {
    pub(crate) fn new(value: T) -> Lock<T> {
        Lock {
            #[cfg(loom)]
            inner: crate::base::Mutex::new(value),
            #[cfg(not(loom))]
            locked: std::sync::atomic::AtomicBool::new(false),
            #[cfg(not(loom))]
            value: std::cell::UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        #[cfg(loom)]
        let guard = LockGuard {
            guard: self.inner.lock(),
        };
        #[cfg(not(loom))]
        let guard = {
            self.acquire();
            LockGuard { lock: self }
        };
        if diagnostics_on() {
            let _ = depth_cell(|d| d.set(d.get() + 1));
        }
        guard
    }

    #[cfg(not(loom))]
    #[inline]
    fn acquire(&self) {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        if self
            .locked
            .compare_exchange_weak(false, true, Acquire, Relaxed)
            .is_ok()
        {
            return;
        }
        let mut step = 0u32;
        loop {
            // Wait until it looks free (reads only: the line stays shared), then try.
            while self.locked.load(Relaxed) {
                if step < 6 {
                    for _ in 0..(1u32 << step) {
                        std::hint::spin_loop();
                    }
                    step += 1;
                } else {
                    std::thread::yield_now();
                }
            }
            if self
                .locked
                .compare_exchange_weak(false, true, Acquire, Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }
}

impl<T> std::fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad("Lock { .. }")
    }
}

impl<T> Drop for LockGuard<'_, T> {
    fn drop(&mut self) {
        #[cfg(not(loom))]
        self.lock
            .locked
            .store(false, std::sync::atomic::Ordering::Release);
        if diagnostics_on() {
            let _ = depth_cell(|d| d.set(d.get().saturating_sub(1)));
        }
    }
}

impl<T> Deref for LockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        #[cfg(loom)]
        return &self.guard;
        // SAFETY: the guard holds the lock: no other reference to the value exists.
        #[cfg(not(loom))]
        return unsafe { &*self.lock.value.get() };
    }
}

impl<T> DerefMut for LockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        #[cfg(loom)]
        return &mut self.guard;
        // SAFETY: the guard holds the lock: no other reference to the value exists.
        #[cfg(not(loom))]
        return unsafe { &mut *self.lock.value.get() };
    }
}

/// How to read the weft locks that the running code holds while user code runs (a
/// `watch::Ref`, a `send_modify` closure): the fiber layer counts them per fiber (or
/// per thread off fibers), and being above this layer it registers its readers here
/// the first time it counts one.
pub(crate) struct UserLocks {
    /// How many the running fiber (or thread) holds.
    pub(crate) depth: fn() -> u32,
    /// Their names, innermost last.
    pub(crate) names: fn() -> Vec<&'static str>,
}

static USER_LOCKS: std::sync::OnceLock<UserLocks> = std::sync::OnceLock::new();

/// Registers the fiber layer's readers (the first call stands).
pub(crate) fn register_user_locks(readers: UserLocks) {
    let _ = USER_LOCKS.set(readers);
}

/// Reports a flush made while this thread holds a wait-list lock, or while the running
/// fiber (or thread) holds one of weft's locks that user code can hold (diagnostics on),
/// with the lock stack: wait-list locks have no names of their own.
#[inline]
pub(super) fn check_flush() {
    if !diagnostics_on() {
        return;
    }
    let depth = depth_cell(|d| d.get()).unwrap_or(0);
    let user = USER_LOCKS.get().map_or(0, |u| (u.depth)());
    if depth + user > 0 {
        UNDER_LOCK_FLUSHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let thread = std::thread::current();
        let mut stack = USER_LOCKS.get().map_or_else(Vec::new, |u| (u.names)());
        stack.extend(std::iter::repeat_n("wait-list lock", depth as usize));
        eprintln!(
            "weft: WAKE-FLUSH-UNDER-LOCK: wakes flushed on thread '{}' while {} weft \
             lock(s) are held; lock stack (innermost last): [{}]",
            thread.name().unwrap_or("<unnamed>"),
            depth + user,
            stack.join(", ")
        );
    }
}

/// `WAKE-FLUSH-UNDER-LOCK` reports so far (0 while diagnostics are off).
#[allow(dead_code)]
pub(crate) fn under_lock_flushes() -> u64 {
    UNDER_LOCK_FLUSHES.load(std::sync::atomic::Ordering::Relaxed)
}

/// The number of wait-list locks this thread holds (0 while diagnostics are off).
#[allow(dead_code)]
pub(crate) fn held() -> u32 {
    depth_cell(|d| d.get()).unwrap_or(0)
}
