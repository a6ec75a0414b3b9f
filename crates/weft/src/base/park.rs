//! A worker's park state on a futex (spec 001): EMPTY, PARKED, NOTIFIED.
//!
//! `unpark` leaves a token (NOTIFIED) that the next `park` consumes, so an unpark that
//! races ahead of the park is never lost. The futex system call is made only when the
//! other side is really asleep: an unpark of a running worker is one atomic swap.
//!
//! A fourth state, PARKED_EXT, is for a thread that sleeps somewhere else than on the
//! futex (the I/O driver's holder in `epoll_wait`): an `unpark` that finds it calls
//! the parker's external waker (which interrupts that wait) instead of `futex_wake`.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::clock;
use super::futex::Futex;
use super::AtomicU64;

const EMPTY: u32 = 0;
const PARKED: u32 = 1;
const NOTIFIED: u32 = 2;
const PARKED_EXT: u32 = 3;

/// `spin_loop` hints between two looks at the clock while spinning.
const SPIN_BATCH: u32 = 16;

pub(crate) struct Parker {
    futex: Futex,
    /// `futex` wake calls made on this parker, for the wake-economy statistics.
    wake_calls: AtomicU64,
    /// Interrupts an external sleep (PARKED_EXT); none if this parker never has one.
    external: Option<std::task::Waker>,
}

impl Parker {
    pub(crate) fn new() -> Self {
        Parker {
            futex: Futex::new(EMPTY),
            wake_calls: AtomicU64::new(0),
            external: None,
        }
    }

    /// A parker that may also sleep in an external wait that `external` interrupts
    /// (see [`park_external`](Self::park_external)).
    pub(crate) fn with_external(external: Option<std::task::Waker>) -> Self {
        Parker {
            external,
            ..Parker::new()
        }
    }

    /// Sleeps in `sleep` (which must return once `external` is woken) instead of on
    /// the futex, unless a token is waiting. Returns `None` if a token was taken
    /// instead, else `sleep`'s result. A token left during `sleep` is consumed on the
    /// way out, so the caller re-checks its condition as after any park.
    ///
    /// If the external wake-up can be consumed by someone else before `sleep` starts
    /// waiting for it (an eventfd edge another thread's `epoll_wait` takes), `sleep`
    /// must look at [`is_notified`](Self::is_notified) once it is the only one who can
    /// consume it, and not sleep if it is set.
    pub(crate) fn park_external<R>(&self, sleep: impl FnOnce() -> R) -> Option<R> {
        debug_assert!(self.external.is_some());
        if self.take_token() {
            return None;
        }
        let word = self.futex.word();
        if word
            .compare_exchange(EMPTY, PARKED_EXT, Acquire, Relaxed)
            .is_err()
        {
            word.swap(EMPTY, Acquire);
            return None;
        }
        let r = sleep();
        // An unpark between `sleep`'s return and this swap interrupts the next
        // external sleep at once: a spurious wake-up, never a lost one.
        word.swap(EMPTY, Acquire);
        Some(r)
    }

    /// Sleeps until `unpark` (or returns at once if a token is waiting). May return
    /// spuriously; callers re-check their condition.
    pub(crate) fn park(&self) {
        self.park_timeout(None);
    }

    /// Like [`park_timeout`](Self::park_timeout), but first watches for a token for up
    /// to `spin_ns` nanoseconds (never past `timeout`, which the spin counts against)
    /// without sleeping. Returns whether the thread went on to sleep.
    ///
    /// While it spins the word stays EMPTY, so an `unpark` in that window is one swap
    /// with no system call, and the spinner sees the token within a cache-line
    /// transfer instead of a futex wake round trip.
    pub(crate) fn park_spin_timeout(
        &self,
        spin_ns: u64,
        timeout: Option<std::time::Duration>,
    ) -> bool {
        let mut timeout = timeout;
        if self.spin(spin_ns, &mut timeout) {
            return false;
        }
        self.park_timeout(timeout);
        true
    }

    /// Watches for a token for up to `spin_ns` (never past `timeout`, from which the
    /// spin is taken off); true if one came and was taken.
    pub(crate) fn spin(&self, spin_ns: u64, timeout: &mut Option<std::time::Duration>) -> bool {
        // Never spin past the timeout (a timer holder's next deadline).
        let spin_ns = timeout.map_or(spin_ns, |t| {
            spin_ns.min(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX))
        });
        if spin_ns > 0 && !cfg!(loom) {
            let start = clock::now_ns();
            'spin: loop {
                // A `spin_loop` hint can take tens of cycles: look at the word after
                // each one, and at the clock after a batch.
                for _ in 0..SPIN_BATCH {
                    // A plain load first: spinning on a read keeps the line shared with
                    // the unparker instead of taking it on every try.
                    if self.futex.word().load(Relaxed) == NOTIFIED && self.take_token() {
                        return true;
                    }
                    std::hint::spin_loop();
                }
                let spun = clock::since(clock::now_ns(), start);
                if spun.as_nanos() as u64 >= spin_ns {
                    // The spin counts against the timeout (a timer holder's deadline).
                    *timeout = timeout.map(|t| t.saturating_sub(spun));
                    break 'spin;
                }
            }
        }
        false
    }

    /// Whether an `unpark` token is waiting (not consumed). For an external sleep that
    /// must not start after its wake-up was lost elsewhere (see `IoDriver::wait`).
    pub(crate) fn is_notified(&self) -> bool {
        self.futex.word().load(Acquire) == NOTIFIED
    }

    /// Consumes a waiting `unpark` token without sleeping; false if there is none.
    /// Only the parking thread calls this (`park` does, before and after each sleep).
    pub(crate) fn take_token(&self) -> bool {
        self.futex
            .word()
            .compare_exchange(NOTIFIED, EMPTY, Acquire, Relaxed)
            .is_ok()
    }

    /// Like [`park`](Self::park), but returns after `timeout` at the latest.
    pub(crate) fn park_timeout(&self, timeout: Option<std::time::Duration>) {
        if self.take_token() {
            return;
        }
        let word = self.futex.word();
        if word
            .compare_exchange(EMPTY, PARKED, Acquire, Relaxed)
            .is_err()
        {
            // The only other value is NOTIFIED: consume it.
            word.swap(EMPTY, Acquire);
            return;
        }
        // A timeout past what an `Instant` can hold (a temporary worker's keep-alive of
        // `Duration::MAX`) is no timeout: `+` panicked on a worker there (CI, session 28,
        // `review_sysmon::extreme_keep_alives`).
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            self.futex.wait(PARKED, left);
            if self.take_token() {
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
        match self.futex.word().swap(NOTIFIED, Release) {
            PARKED => {
                self.wake_calls.fetch_add(1, Relaxed);
                self.futex.wake_one();
            }
            PARKED_EXT => {
                self.wake_calls.fetch_add(1, Relaxed);
                if let Some(w) = &self.external {
                    w.wake_by_ref();
                }
            }
            _ => {}
        }
    }

    pub(crate) fn wake_calls(&self) -> u64 {
        self.wake_calls.load(Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Parker;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// A thread that unparks `p` after `delay`.
    fn unpark_after(p: &Arc<Parker>, delay: Duration) -> std::thread::JoinHandle<()> {
        let p = p.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            p.unpark();
        })
    }

    /// An unpark that lands while the parker spins ends the park with no sleep (and so
    /// no futex wake call).
    #[test]
    fn an_unpark_during_the_spin_is_met_without_sleeping() {
        let p = Arc::new(Parker::new());
        let t = unpark_after(&p, Duration::from_millis(2));
        let start = Instant::now();
        // A spin long enough that the unpark lands inside it even on a loaded machine.
        let slept = p.park_spin_timeout(2_000_000_000, None);
        t.join().unwrap();
        assert!(
            !slept,
            "the parker slept although the token came during its spin"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(
            p.wake_calls(),
            0,
            "a futex wake was made for a spinning parker"
        );
    }

    /// Without an unpark the spin ends after its budget and the parker sleeps (here
    /// until its timeout).
    #[test]
    fn a_spin_without_unpark_ends_in_sleep() {
        let p = Parker::new();
        let start = Instant::now();
        let slept = p.park_spin_timeout(100_000, Some(Duration::from_millis(5)));
        assert!(slept);
        // Spin and sleep together last the timeout (the spin's clock is the calibrated
        // counter, the sleep's `Instant`: allow for the difference).
        assert!(start.elapsed() >= Duration::from_millis(4));
        // A spin longer than the timeout stops at the timeout.
        let start = Instant::now();
        assert!(p.park_spin_timeout(10_000_000_000, Some(Duration::from_millis(5))));
        assert!(start.elapsed() < Duration::from_secs(5));
        // A token left before the park is consumed at once, spin or not.
        p.unpark();
        assert!(!p.park_spin_timeout(1_000_000_000, None));
        p.unpark();
        assert!(p.take_token());
        assert!(!p.take_token());
    }

    /// A timeout too large for an `Instant` (`Duration::MAX`, a temporary worker's
    /// keep-alive) parks without a deadline until an unpark; it panicked on the `+`
    /// (CI, session 28, `review_sysmon::extreme_keep_alives`).
    #[test]
    fn a_timeout_past_any_instant_waits_for_the_unpark() {
        let p = Arc::new(Parker::new());
        let t = unpark_after(&p, Duration::from_millis(20));
        p.park_timeout(Some(Duration::MAX));
        t.join().unwrap();
    }
}
