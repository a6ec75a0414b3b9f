//! [`Countdown`]: the "last task to finish signals" pattern of the cases
//! that wait for many tasks at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;

/// The number of tasks still to finish; the task that counts it down to
/// zero signals the waiting benchmark thread.
pub struct Countdown(AtomicUsize);

impl Countdown {
    /// A countdown from `n`.
    pub fn new(n: usize) -> Countdown {
        Countdown(AtomicUsize::new(n))
    }

    /// Starts over from `n` (a relaxed store: the spawns that follow publish
    /// it to the tasks).
    pub fn reset(&self, n: usize) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// Counts one finished task with `order` (each case keeps its own); the
    /// one that reaches zero sends on `done`.
    #[inline]
    pub fn count_down(&self, order: Ordering, done: &SyncSender<()>) {
        if self.0.fetch_sub(1, order) == 1 {
            done.send(()).unwrap();
        }
    }
}
