//! A worker's park state on a futex (spec 001): EMPTY, PARKED, NOTIFIED.
//!
//! `unpark` leaves a token (NOTIFIED) that the next `park` consumes, so an unpark that
//! races ahead of the park is never lost. The futex system call is made only when the
//! other side is really asleep: an unpark of a running worker is one atomic swap.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use crate::sync::futex::Futex;
use crate::sync::AtomicU64;

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;

pub(crate) struct Parker {
    futex: Futex,
    /// `futex` wake calls made on this parker, for the wake-economy statistics.
    wake_calls: AtomicU64,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Parker {
            futex: Futex::new(EMPTY),
            wake_calls: AtomicU64::new(0),
        }
    }

    /// Sleeps until `unpark` (or returns at once if a token is waiting). May return
    /// spuriously; callers re-check their condition.
    pub(crate) fn park(&self) {
        self.park_timeout(None);
    }

    /// Like [`park`](Self::park), but returns after `timeout` at the latest.
    pub(crate) fn park_timeout(&self, timeout: Option<std::time::Duration>) {
        let word = self.futex.word();
        if word
            .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
            .is_ok()
        {
            return;
        }
        if word
            .compare_exchange(EMPTY, PARKED, Acquire, Relaxed)
            .is_err()
        {
            // The only other value is NOTIFIED: consume it.
            word.swap(EMPTY, Acquire);
            return;
        }
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            self.futex.wait(PARKED, left);
            if word
                .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
                .is_ok()
            {
                return;
            }
            // loom's futex stand-in cannot sleep forever in a model, so there a return
            // counts as a timeout (callers re-check anyway).
            let timed_out = cfg!(loom) || deadline.is_some_and(|d| std::time::Instant::now() >= d);
            if timed_out {
                // Leave PARKED; a NOTIFIED that raced in is consumed with it.
                word.swap(EMPTY, Acquire);
                return;
            }
        }
    }

    /// Wakes the parked thread, or leaves a token for its next `park`.
    pub(crate) fn unpark(&self) {
        if self.futex.word().swap(NOTIFIED, Release) == PARKED {
            self.wake_calls.fetch_add(1, Relaxed);
            self.futex.wake_one();
        }
    }

    pub(crate) fn wake_calls(&self) -> u64 {
        self.wake_calls.load(Relaxed)
    }
}
