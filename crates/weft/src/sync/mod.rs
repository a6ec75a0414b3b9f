//! The one place concurrent algorithms get their primitives from.
//!
//! Under `cfg(loom)` every atomic, cell, mutex and thread comes from `loom`, so the
//! model checker sees every access the algorithms make; otherwise they are `std`'s.
//! The futex shim lives here too, for the same reason.

pub(crate) mod futex;

#[cfg(loom)]
pub(crate) use loom::sync::{
    atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize},
    Arc, Mutex,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{fence, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize},
    Arc,
};

#[cfg(not(loom))]
pub(crate) use std_mutex::Mutex;

/// `std`'s mutex without poisoning: a panic while a weft lock is held is a weft bug,
/// and every critical section leaves its data consistent at each step, so the data is
/// still usable.
#[cfg(not(loom))]
mod std_mutex {
    pub(crate) type MutexGuard<'a, T> = std::sync::MutexGuard<'a, T>;

    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(std::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(std::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
    }
}

/// An `UnsafeCell` whose accesses loom can track. Access goes through closures so the
/// loom version can check for concurrent use.
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(
    #[cfg(loom)] loom::cell::UnsafeCell<T>,
    #[cfg(not(loom))] std::cell::UnsafeCell<T>,
);

impl<T> UnsafeCell<T> {
    pub(crate) fn new(value: T) -> Self {
        #[cfg(loom)]
        return UnsafeCell(loom::cell::UnsafeCell::new(value));
        #[cfg(not(loom))]
        return UnsafeCell(std::cell::UnsafeCell::new(value));
    }

    /// Runs `f` with a shared raw pointer to the value.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }

    /// Runs `f` with a mutable raw pointer to the value.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        return self.0.with_mut(f);
        #[cfg(not(loom))]
        return f(self.0.get());
    }
}

/// Spin-loop hint that loom understands as "let another thread run".
#[cfg(loom)]
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}
