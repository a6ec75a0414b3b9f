//! A 32-bit futex word: an atomic plus "sleep while it still holds this value" and
//! "wake sleepers". On Linux this is the `futex(2)` system call; elsewhere (and under
//! loom) a mutex and condition variable give the same contract.
//!
//! Contract shared by every implementation: `wait(expected)` returns at once if the word
//! is not `expected`, and may return spuriously; callers re-check in a loop. A `wake`
//! that follows a store to the word is never lost by a concurrent `wait`.

use std::time::Duration;

use super::AtomicU32;

#[derive(Debug)]
pub(crate) struct Futex {
    word: AtomicU32,
    #[cfg(any(loom, not(target_os = "linux")))]
    fallback: fallback::Fallback,
}

impl Futex {
    pub(crate) fn new(value: u32) -> Self {
        Futex {
            word: AtomicU32::new(value),
            #[cfg(any(loom, not(target_os = "linux")))]
            fallback: fallback::Fallback::new(),
        }
    }

    /// The atomic word itself, for the protocol's loads, stores and CASes.
    #[inline]
    pub(crate) fn word(&self) -> &AtomicU32 {
        &self.word
    }

    /// Sleeps while the word equals `expected`, at most `timeout` when given.
    pub(crate) fn wait(&self, expected: u32, timeout: Option<Duration>) {
        #[cfg(all(target_os = "linux", not(loom)))]
        linux::wait(&self.word, expected, timeout);
        #[cfg(any(loom, not(target_os = "linux")))]
        self.fallback.wait(&self.word, expected, timeout);
    }

    /// Wakes at most one thread sleeping in `wait`.
    pub(crate) fn wake_one(&self) {
        #[cfg(all(target_os = "linux", not(loom)))]
        linux::wake(&self.word, 1);
        #[cfg(any(loom, not(target_os = "linux")))]
        self.fallback.wake();
    }
}

#[cfg(all(target_os = "linux", not(loom)))]
mod linux {
    use std::sync::atomic::AtomicU32;
    use std::time::Duration;

    pub(super) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
        let ts = timeout.map(|d| libc::timespec {
            tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `word` is a live, aligned u32 for the whole call; FUTEX_WAIT only reads
        // it, and `ts_ptr` is null or points at a timespec that outlives the call.
        // EINTR, EAGAIN and ETIMEDOUT are all "return and let the caller re-check".
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                ts_ptr,
            );
        }
    }

    pub(super) fn wake(word: &AtomicU32, n: i32) {
        // SAFETY: FUTEX_WAKE only uses the address as a key; `word` is live.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
                n,
            );
        }
    }
}

#[cfg(any(loom, not(target_os = "linux")))]
mod fallback {
    use std::time::Duration;

    use crate::base::AtomicU32;
    #[cfg(loom)]
    use loom::sync::{Condvar, Mutex};
    #[cfg(not(loom))]
    use std::sync::{Condvar, Mutex};

    /// Compare-under-lock plus a condition variable: a waker that stored to the word
    /// takes the lock before notifying, so it cannot slip between a waiter's check and
    /// its sleep.
    #[derive(Debug)]
    pub(super) struct Fallback {
        lock: Mutex<()>,
        cv: Condvar,
    }

    impl Fallback {
        pub(super) fn new() -> Self {
            Fallback {
                lock: Mutex::new(()),
                cv: Condvar::new(),
            }
        }

        pub(super) fn wait(&self, word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
            let guard = self.lock.lock().unwrap();
            if word.load(std::sync::atomic::Ordering::SeqCst) != expected {
                return;
            }
            #[cfg(loom)]
            {
                // loom has no timed waits; a timed wait that returns early is allowed.
                if timeout.is_none() {
                    drop(self.cv.wait(guard).unwrap());
                }
            }
            #[cfg(not(loom))]
            match timeout {
                Some(t) => drop(self.cv.wait_timeout(guard, t).unwrap()),
                None => drop(self.cv.wait(guard).unwrap()),
            }
        }

        pub(super) fn wake(&self) {
            drop(self.lock.lock().unwrap());
            self.cv.notify_all();
        }
    }
}
