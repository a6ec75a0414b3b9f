//! The once-latch of spec 002: UNSET -> (SLEEPY -> SLEEPING) -> SET.
//!
//! The waiter announces that it is getting sleepy, looks for work once more, and only
//! then commits to sleeping; the setter wakes it only if it committed. So a latch set
//! while the waiter is still busy or merely sleepy costs one atomic swap.
//!
//! The waiter sleeps on its own [`Parker`] (its worker's, or its thread's), not on the
//! latch's memory: the latch lives on the waiter's stack and may be gone the moment the
//! waiter sees SET, so the setter takes its own reference to the parker *before* the
//! swap and wakes through that.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed};

use crate::base::park::Parker;
use crate::base::{Arc, AtomicU32};

const UNSET: u32 = 0;
const SLEEPY: u32 = 1;
const SLEEPING: u32 = 2;
const SET: u32 = 3;

/// Spins before announcing sleepiness: most stolen halves finish within this.
#[cfg(not(loom))]
const SPINS: u32 = 100;
// loom explores every interleaving; spinning would only multiply them.
#[cfg(loom)]
const SPINS: u32 = 1;

pub(crate) struct OnceLatch {
    state: AtomicU32,
    /// The waiter's parker, from `Arc::as_ptr`; the waiter keeps it alive while it
    /// waits.
    sleeper: *const Parker,
}

// SAFETY: the parker pointer is only used through a fresh `Arc` taken while the waiter
// (who keeps the parker alive) is still waiting; the state is atomic.
unsafe impl Send for OnceLatch {}
// SAFETY: as above.
unsafe impl Sync for OnceLatch {}

impl OnceLatch {
    /// A latch whose waiter will sleep on `sleeper` (which must outlive the wait).
    pub(crate) fn new(sleeper: &Arc<Parker>) -> Self {
        OnceLatch {
            state: AtomicU32::new(UNSET),
            sleeper: Arc::as_ptr(sleeper),
        }
    }

    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.state.load(Acquire) == SET
    }

    /// Sets the latch and wakes the waiter if it sleeps.
    ///
    /// # Safety
    /// `this` points at a live latch whose waiter has not yet observed SET (so the latch
    /// and the waiter's parker are alive until the swap below). Nothing may touch the
    /// latch after this call begins the swap.
    pub(crate) unsafe fn set(this: *const OnceLatch) {
        // SAFETY: per the contract the latch is live here, and its waiter is still
        // waiting, so the parker the pointer came from is alive: taking a reference
        // count now keeps it alive past the swap.
        let parker = unsafe {
            let p = (*this).sleeper;
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        };
        // SAFETY: still live until the swap completes; not touched afterwards.
        let prev = unsafe { (*this).state.swap(SET, AcqRel) };
        if prev == SLEEPING {
            parker.unpark();
        }
    }

    /// Waits until set. `help` is called while waiting; it returns true if it did some
    /// work (the wait then starts over without sleeping). `parker` is the one given to
    /// [`OnceLatch::new`]; an unpark of it while the waiter sleeps (other than the
    /// setter's) makes the waiter call `help` again before it sleeps anew.
    pub(crate) fn wait(&self, parker: &Parker, mut help: impl FnMut() -> bool) {
        let mut spins = 0;
        loop {
            if self.probe() {
                return;
            }
            if help() {
                spins = 0;
                continue;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            if self
                .state
                .compare_exchange(UNSET, SLEEPY, Acquire, Relaxed)
                .is_err()
            {
                continue; // SET
            }
            if help() {
                if self
                    .state
                    .compare_exchange(SLEEPY, UNSET, Acquire, Relaxed)
                    .is_err()
                {
                    // SET meanwhile: go round, so `probe` acquires the set (returning
                    // here would read the result unsynchronized).
                    continue;
                }
                spins = 0;
                continue;
            }
            if self
                .state
                .compare_exchange(SLEEPY, SLEEPING, Acquire, Relaxed)
                .is_err()
            {
                continue; // SET
            }
            parker.park();
            // Woken: by the setter (SET), or to help (a thief this waiter helps shared
            // work, see `Core::wake_leapfroggers`), or spuriously. Unless SET, take the
            // sleep back and go round; a setter that now finds UNSET wakes nobody, and
            // the waiter's next probe sees SET.
            if self
                .state
                .compare_exchange(SLEEPING, UNSET, Acquire, Relaxed)
                .is_ok()
            {
                spins = 0;
            }
        }
    }
}
