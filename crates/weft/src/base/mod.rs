//! The one place concurrent algorithms get their primitives from.
//!
//! Under `cfg(loom)` every atomic, cell, mutex and thread comes from `loom`, so the
//! model checker sees every access the algorithms make; otherwise they are `std`'s.
//! The futex shim lives here too, for the same reason.

pub(crate) mod clock;
pub(crate) mod futex;
#[cfg(all(test, loom))]
pub(crate) mod loom_harness;
pub(crate) mod page;
pub(crate) mod park;
pub(crate) mod prefault;
pub(crate) mod zeroed;

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

/// `std`'s `Arc` in both builds: schedulers use `self: &Arc<Self>` receivers, which
/// loom's `Arc` cannot be. The algorithms' shared memory is all in loom atomics.
pub(crate) use std::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

pub(crate) use plain_mutex::Mutex;
pub(crate) use plain_mutex::MutexGuard;

/// `var`'s value, or `None` if it is unset or not UTF-8 (reported on stderr: such a
/// value was taken for unset without a word, found in review). Every `WEFT_*` variable
/// is read through this.
pub(crate) fn env_var(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(raw) => Some(raw),
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(raw)) => {
            eprintln!("weft: ignoring {var}={raw:?}: not UTF-8");
            None
        }
    }
}

/// A mutex without poisoning: a panic while a weft lock is held is a weft bug, and every
/// critical section leaves its data consistent at each step, so the data is still
/// usable.
mod plain_mutex {
    #[cfg(loom)]
    use loom::sync as imp;
    #[cfg(not(loom))]
    use std::sync as imp;

    pub(crate) type MutexGuard<'a, T> = imp::MutexGuard<'a, T>;

    #[derive(Debug)]
    pub(crate) struct Mutex<T>(imp::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(imp::Mutex::new(value))
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
